// How each metric is computed inside the library: the stored form of a vector (unit sphere for
// Haversine, normalised for Cosine), the ranking value the kernels minimise (squared L2 of the
// stored forms, or -<q,p>), and the conversion of a ranking value into the reported distance.
// Shared by both backends so that they store and report the same numbers.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "streamknn/metric.hpp"

namespace streamknn::detail {

/// Dimension of the stored form (3 for Haversine, else the user dimension).
inline std::size_t stored_dim(Metric metric, std::size_t dim) noexcept {
  return metric == Metric::Haversine ? 3 : dim;
}

/// True when the ranking value is a squared L2 distance between stored forms.
inline bool ranks_by_squared_l2(Metric metric) noexcept { return metric != Metric::InnerProduct; }

/// True when the stored form is the user vector itself (to_stored_form copies it).
inline bool stored_as_given(Metric metric) noexcept { return metric == Metric::L2 || metric == Metric::InnerProduct; }

/// Largest coordinate magnitude a store accepts in vectors and queries (streamknn/metric.hpp).
/// L2 and inner product rank in float32: with every |coordinate| <= B the squared distance is
/// at most 4 B^2 dim and |<q, p>| at most B^2 dim, each times (1 + 2^-24)^(dim + 3) <= 1.07 for
/// the rounding of the dim <= 2^20 terms' products and sums (the screens' norms and products
/// are smaller than 4 B^2 dim too). B = sqrt(FLT_MAX / (8 dim)) keeps them below FLT_MAX / 1.8,
/// so a finite input never ranks as +-Inf (the padding's distance). Cosine normalises in
/// double and haversine takes degrees: any finite coordinate is safe there (FLT_MAX).
inline float coordinate_bound(Metric metric, std::size_t dim) noexcept {
  if (metric != Metric::L2 && metric != Metric::InnerProduct) return std::numeric_limits<float>::max();
  const double bound = std::sqrt(double(std::numeric_limits<float>::max()) / (8.0 * double(dim)));
  const float rounded = static_cast<float>(bound);
  return double(rounded) > bound ? std::nextafter(rounded, 0.0f) : rounded;  // rounded down
}

/// Writes the stored form of a user vector (already validated) into out[0..stored_dim).
void to_stored_form(Metric metric, std::span<const float> in, float* out) noexcept;

/// Reported distance of a ranking value (see streamknn/metric.hpp).
inline double reported_distance(Metric metric, double rank) noexcept {
  switch (metric) {
    case Metric::L2: return std::sqrt(rank);
    case Metric::InnerProduct: return rank;
    case Metric::Cosine: return 0.5 * rank;
    case Metric::Haversine: {
      const double half_chord = 0.5 * std::sqrt(rank);
      return 2.0 * kEarthRadiusMetres * std::asin(half_chord < 1.0 ? half_chord : 1.0);
    }
  }
  return rank;
}

}  // namespace streamknn::detail
