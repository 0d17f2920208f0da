// Data and shapes shared by the GPU K-means suites (test_kmeans_gpu.cpp: CUDA against CPU from
// host memory; test_kmeans_device.cpp: fit_device against fit): blobs and tied grids, starts on
// the first points, and the shapes both run (clusters 1..4,096, dimensions 1..1,024).
#pragma once

#include "streamknn/kmeans.hpp"
#include "support/test_support.hpp"

namespace kmeans_cases {

using namespace streamknn;

/// n points of d dimensions: blobs around `centres` centres with unit noise, or (grid) values
/// in {0, 1, 2, 3}, where exact ties are everywhere.
inline std::vector<float> clustered(std::mt19937_64& g, std::size_t n, std::size_t d, std::size_t centres, bool grid) {
  std::vector<float> v(n * d);
  if (grid) {
    for (auto& e : v) e = float(g() % 4);
    return v;
  }
  const auto c = test::uniform(g, centres * d, -5, 5);
  std::normal_distribution<float> noise(0, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t at = g() % centres;
    for (std::size_t j = 0; j < d; ++j) v[i * d + j] = c[at * d + j] + noise(g);
  }
  return v;
}

/// A configuration that starts from the first k points.
inline KMeansConfig first_points(const std::vector<float>& x, std::size_t d, std::size_t k, std::size_t max_iter) {
  KMeansConfig c;
  c.clusters = k;
  c.max_iter = max_iter;
  c.init = KMeansInit::Given;
  c.initial_centroids.assign(x.begin(), x.begin() + std::ptrdiff_t(k * d));
  return c;
}

/// Calls check(config, points, d) for every shape, on blobs (tol 1e-3: a stop by tol compares
/// the backends' mean variance) and on a tied grid (tol 0), 40 iterations at most. 300 and 1,024
/// features are wider than one block's 256 columns in the variance pass; 40,000 points make five
/// of its 8,192-point chunks, the last one short.
template <class Check>
void each_shape(std::mt19937_64& g, Check&& check) {
  struct Shape {
    std::size_t n, d, k;
  };
  const Shape shapes[] = {{1, 1, 1},        {100, 1, 7},      {1000, 2, 4},    {5000, 3, 32},
                          {3000, 16, 16},   {2000, 129, 33},  {1500, 256, 32}, {40000, 300, 16},
                          {600, 1024, 40},  {20000, 8, 300},  {9000, 12, 4096}};
  for (const Shape& s : shapes) {
    for (const bool grid : {false, true}) {
      CAPTURE(s.n);
      CAPTURE(s.d);
      CAPTURE(s.k);
      CAPTURE(grid);
      const auto x = clustered(g, s.n, s.d, 1 + s.k / 2, grid);
      auto c = first_points(x, s.d, s.k, 40);
      c.tol = grid ? 0.0 : 1e-3;
      check(c, x, s.d);
    }
  }
}

}  // namespace kmeans_cases
