// The starts of K-means on the host (both backends begin from the same centroids): greedy
// k-means++ as scikit-learn's (2 + floor(ln k) trials per centroid, the trial that lowers the
// potential most wins), k distinct random points, and the data's mean per-feature variance
// (scikit-learn's scale of tol). Seeded, and independent of the thread count (fixed chunks,
// partial sums added in chunk order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

/// k x d starting centroids: k-means++ (random == false) or k distinct random points.
std::vector<float> initial_centroids(const LloydShape& s, bool random, std::uint64_t seed, std::size_t threads);

/// The mean over the features of each feature's (population) variance, in float64.
double mean_variance(const LloydShape& s, std::size_t threads);

}  // namespace streamknn::detail::kmeans
