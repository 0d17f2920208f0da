// The host's passes over the points of a fit, on the fit's thread pool (both backends begin
// from the same centroids): the check of the points (every float within the L2 coordinate bound,
// optionally copied as it is checked), greedy k-means++ as scikit-learn's (2 + floor(ln k) trials
// per centroid, the trial that lowers the potential most wins), k distinct random points, and the
// data's mean per-feature variance (scikit-learn's scale of tol). Seeded, and independent of the
// thread count (fixed chunks, partial sums added in chunk order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

/// The workers of a fit's pool for `threads` threads (0: one per hardware thread), the caller
/// being the last thread.
std::size_t pool_workers(std::size_t threads);

/// The index of the first of the `count` floats at `from` that is NaN or beyond `bound` in
/// magnitude (core/check.hpp's first_beyond), or count when none is. With `to`, the floats are
/// copied there too, each block tested as copied. Fixed blocks on the pool: the lowest such index,
/// whatever the thread count.
std::size_t first_beyond(const float* from, std::size_t count, float bound, ThreadPool& pool, float* to = nullptr);

/// The k distinct points (of n) a random start takes, in the order it takes them.
std::vector<std::uint32_t> random_rows(std::size_t n, std::size_t k, std::uint64_t seed);

/// k x d starting centroids: k-means++ (random == false) or the rows random_rows names.
std::vector<float> initial_centroids(const LloydShape& s, bool random, std::uint64_t seed, ThreadPool& pool);

/// LloydBackend::variance_pass over host points, on the pool.
void variance_pass(const LloydShape& s, ThreadPool& pool, const double* mean, std::span<double> out);

/// The mean over the features of each feature's (population) variance, in float64, from the
/// backend's two passes (their partial sums added in chunk order, here).
double mean_variance(LloydBackend& be, std::size_t n, std::size_t d);

}  // namespace streamknn::detail::kmeans
