// streamknn/metric.hpp — the distance functions a reference set can be built with.
//
// Every metric ranks neighbours by a value computed in direct form (no |a|^2 - 2ab + |b|^2
// expansion), so a point's distance to an identical vector is exactly 0:
//   L2           sqrt(sum (q_i - p_i)^2); ranked on the squared value, reported as Euclidean.
//   InnerProduct -<q, p>; the most similar point has the smallest (most negative) distance.
//   Cosine       1 - cos(q, p), computed as |q/|q| - p/|p||^2 / 2; zero vectors are refused.
//   Haversine    great-circle distance in metres on a sphere of radius kEarthRadiusMetres
//                between (latitude, longitude) pairs given in degrees (dim must be 2).
//
// Coordinates accepted (vectors pushed and queries; anything else throws InvalidArgument naming
// the value): finite; for L2 and InnerProduct, at most max_coordinate(metric, dim) =
// sqrt(FLT_MAX / (8 dim)) in magnitude (6.5e18 at dim 1, 5.8e17 at 128, 2.3e17 at 784, 6.4e15
// at 2^20), since the ranks are float32 sums of dim products and larger inputs could overflow to
// +-Inf, the distance that marks padding; for Cosine, not all zero; for Haversine, latitude in
// [-90, 90] and longitude in [-180, 180].
#pragma once

#include <cstddef>
#include <string_view>

namespace streamknn {

enum class Metric : unsigned char { L2, InnerProduct, Cosine, Haversine };

/// Mean Earth radius used by Metric::Haversine (IUGG), in metres.
inline constexpr double kEarthRadiusMetres = 6371008.8;

/// Largest coordinate magnitude a store of this metric and dimension accepts (see above):
/// sqrt(FLT_MAX / (8 dim)) rounded down for L2 and InnerProduct, FLT_MAX for the others.
float max_coordinate(Metric metric, std::size_t dim) noexcept;

/// "l2", "ip", "cosine", "haversine".
std::string_view to_string(Metric metric) noexcept;

/// Parses the names printed by to_string (case-sensitive); throws InvalidArgument listing them.
Metric parse_metric(std::string_view name);

}  // namespace streamknn
