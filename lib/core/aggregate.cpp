#include "core/aggregate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace streamknn::detail {

void neighbour_weights(std::span<const float> distances, Weights weights, std::span<double> out) noexcept {
  const std::size_t n = distances.size();
  if (weights == Weights::Uniform) {
    std::fill_n(out.begin(), n, 1.0);
    return;
  }
  bool any_zero = false;
  for (std::size_t i = 0; i < n; ++i) any_zero |= distances[i] == 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = any_zero ? (distances[i] == 0.0f ? 1.0 : 0.0) : 1.0 / double(distances[i]);
  }
}

std::int32_t vote(std::span<const float> distances, std::span<const std::int32_t> labels, Weights weights,
                  std::span<double> class_weight, std::span<double> scratch, float* probabilities) noexcept {
  const std::size_t n = distances.size();
  std::fill(class_weight.begin(), class_weight.end(), 0.0);
  if (n == 0) {
    if (probabilities) std::fill_n(probabilities, class_weight.size(), 0.0f);
    return kNoLabel;
  }
  neighbour_weights(distances, weights, scratch);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    class_weight[static_cast<std::size_t>(labels[i])] += scratch[i];
    total += scratch[i];
  }
  std::int32_t best = 0;
  for (std::size_t c = 1; c < class_weight.size(); ++c) {
    if (class_weight[c] > class_weight[static_cast<std::size_t>(best)]) best = static_cast<std::int32_t>(c);
  }
  if (probabilities) {
    const double norm = total > 0 ? total : 1.0;
    for (std::size_t c = 0; c < class_weight.size(); ++c) probabilities[c] = static_cast<float>(class_weight[c] / norm);
  }
  return best;
}

float regress(std::span<const float> distances, std::span<const float> values, RegressionAggregate aggregate,
              std::span<double> scratch) noexcept {
  const std::size_t n = distances.size();
  if (n == 0) return std::numeric_limits<float>::quiet_NaN();
  if (aggregate == RegressionAggregate::Median) {
    for (std::size_t i = 0; i < n; ++i) scratch[i] = values[i];
    const auto mid = scratch.begin() + static_cast<std::ptrdiff_t>(n / 2);
    std::nth_element(scratch.begin(), mid, scratch.begin() + static_cast<std::ptrdiff_t>(n));
    double m = *mid;
    if (n % 2 == 0) m = 0.5 * (m + *std::max_element(scratch.begin(), mid));
    return static_cast<float>(m);
  }
  const Weights weights = aggregate == RegressionAggregate::WeightedMean ? Weights::Distance : Weights::Uniform;
  neighbour_weights(distances, weights, scratch);
  double sum = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += scratch[i] * values[i];
    norm += scratch[i];
  }
  return static_cast<float>(sum / norm);
}

}  // namespace streamknn::detail
