// The CPU's full scans of K-means (lloyd_cpu_scan.cpp, built with the CPU search kernels' ISA
// flags): a point's float32 screens against every centroid, and its exact label from them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::kmeans {

struct Labelled {
  std::uint32_t label = 0;
  double upper = 0;  ///< >= the exact distance to the label's centroid
  double lower = 0;  ///< <= the exact distance to every other centroid (+inf for one centroid)
};

/// r[j] = the float32 screen of (x, centroid j) for the k centroids (k x d, row-major).
void screen_all(const float* x, const float* centroids, std::size_t k, std::size_t d, float* r);

/// The exact nearest centroid of x by (exact squared distance, index), with Hamerly's bounds;
/// r is scratch of k floats.
Labelled scan_point(const float* x, const float* centroids, std::size_t k, std::size_t d, const PruneBound& b,
                    float* r);

/// False when this binary's scan needs instructions the CPU lacks (STREAMKNN_CPU_ISA).
bool scan_supported() noexcept;

}  // namespace streamknn::detail::kmeans
