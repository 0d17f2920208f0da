// The device arrays of one K-means fit on the CUDA backend (lloyd_cuda.cpp), each a typed part
// of one allocation (the workspace's block, workspace.hpp): a fit's fixed cost is one allocation
// at most, not one per array. The reports' layout, which the host's copies of them share, is here
// too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kmeans/kmeans_kernels.hpp"

namespace streamknn::detail::kmeans {

/// A typed part of a fit's one device allocation, read as a DeviceArray is.
template <class T>
struct Slice {
  T* ptr = nullptr;
  std::size_t count = 0;
  T* get() const noexcept { return ptr; }
  std::size_t size() const noexcept { return count; }
  std::size_t bytes() const noexcept { return count * sizeof(T); }
};

/// What sizes a fit's arrays.
struct FitSizes {
  std::uint32_t n = 0, d = 0, k = 0;
  std::uint32_t levels = 0;  ///< the inertia's fold tree (fold_levels_for(n))
  bool labels_only = false;  ///< LloydShape::labels_only: no sums, no moves
  bool run_kernel = false;   ///< the run kernel serves (run_kernel.cu): its moved sums, early labels
  std::size_t max_run = 0;   ///< a queued run's iterations at most: its reports
};

/// Every device array of a fit but the relocation's (lloyd_cuda.cpp's far_points).
struct FitArrays {
  Slice<std::uint32_t> labels, list, counts, moff, offs, iota, one, tops, moved_points, moved_from;
  Slice<float> upper, lower, centroids, before, half_gap;
  Slice<gpu::kmeans::Moves> moves;
  Slice<gpu::kmeans::Loop> loop;
  Slice<double> slots;  ///< max_run reports of queued iterations, laid out as the host's copies
  Slice<double> report, delta, shift2, sums, level_a, level_b, costs, root, variance, means;
  Slice<unsigned long long> first_bad, digits, moved_sums;
  Slice<unsigned char> snapshot_a, snapshot_b;  ///< the labels' early way back (label_return.hpp)
  Slice<std::uint32_t> change_count;

  /// Gives every array its place from `base`, each 256-byte aligned (nullptr: only sizes them);
  /// returns the block's bytes.
  std::size_t place(unsigned char* base, const FitSizes& s);

  /// A report's place in doubles (reports lie one after another, on the host and in slots): the
  /// shifts (k doubles), then the counts (k) and the changed count.
  static std::size_t slot_doubles(std::size_t k) { return k + (k + 2) / 2; }
  /// The bytes of a report that come to the host: the shifts, the counts and the changed count.
  static std::size_t report_bytes(std::size_t k) { return k * sizeof(double) + (k + 1) * sizeof(std::uint32_t); }
  /// The host's copies: max_run reports, then a gpu::kmeans::Loop.
  static std::size_t host_doubles(std::size_t k, std::size_t max_run) {
    static_assert(sizeof(gpu::kmeans::Loop) % sizeof(double) == 0);
    return max_run * slot_doubles(k) + sizeof(gpu::kmeans::Loop) / sizeof(double);
  }
};

}  // namespace streamknn::detail::kmeans
