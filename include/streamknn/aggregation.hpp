// streamknn/aggregation.hpp — how the k neighbours of a query become an answer.
//
// Semantics follow scikit-learn's KNeighborsClassifier / KNeighborsRegressor:
//  * Weights::Uniform: every neighbour counts 1.
//  * Weights::Distance: a neighbour counts 1/distance; if any neighbour of a query is at
//    distance 0, those neighbours share all the weight and the others get none.
//  * Classification: the label with the largest total weight wins; a tie goes to the smaller
//    label. Probabilities are the weights per class divided by their sum.
//  * Regression: mean, weighted mean (Weights::Distance rule above) or median (numpy's: the
//    mean of the two middle values for an even count), each output separately.
//  * Fewer than k points visible: the neighbours that exist are used. None at all: the label
//    is kNoLabel, probabilities are all 0 and regression values are NaN.
#pragma once

#include <cstdint>
#include <string_view>

namespace streamknn {

enum class Weights : unsigned char { Uniform, Distance };

enum class RegressionAggregate : unsigned char { Mean, WeightedMean, Median };

/// Label predicted for a query that has no neighbour at all (empty store or filtered out).
inline constexpr std::int32_t kNoLabel = -1;

std::string_view to_string(Weights weights) noexcept;
std::string_view to_string(RegressionAggregate aggregate) noexcept;
/// "uniform" | "distance"; throws InvalidArgument listing the choices.
Weights parse_weights(std::string_view name);
/// "mean" | "weighted_mean" | "median"; throws InvalidArgument listing the choices.
RegressionAggregate parse_regression_aggregate(std::string_view name);

}  // namespace streamknn
