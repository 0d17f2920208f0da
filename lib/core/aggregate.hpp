// Host implementation of the aggregation rules of streamknn/aggregation.hpp, for one query at
// a time. The CPU backend uses it directly; the CUDA aggregation kernel implements the same
// rules and is tested against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "streamknn/aggregation.hpp"

namespace streamknn::detail {

/// Neighbour weights in double: 1 for Uniform; 1/d for Distance, with the zero-distance rule.
/// distances holds the n real neighbours (no padding), reported distances.
void neighbour_weights(std::span<const float> distances, Weights weights, std::span<double> out) noexcept;

/// Majority vote. class_weight is scratch of num_classes doubles, scratch of n doubles.
/// Returns kNoLabel when n == 0. probabilities (optional, num_classes floats) receives the
/// normalised class weights.
std::int32_t vote(std::span<const float> distances, std::span<const std::int32_t> labels, Weights weights,
                  std::span<double> class_weight, std::span<double> scratch, float* probabilities) noexcept;

/// One output of a regression: values[i] belongs to neighbour i. scratch holds n doubles.
float regress(std::span<const float> distances, std::span<const float> values, RegressionAggregate aggregate,
              std::span<double> scratch) noexcept;

}  // namespace streamknn::detail
