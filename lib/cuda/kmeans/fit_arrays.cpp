// The places of a fit's device arrays in its one allocation (fit_arrays.hpp).
#include "cuda/kmeans/fit_arrays.hpp"

#include "cuda/kmeans/label_return.hpp"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/kmeans_exact.hpp"
#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

std::size_t FitArrays::place(unsigned char* base, const FitSizes& s) {
  const std::size_t k = s.k, d = s.d, at_most = 256;
  const std::size_t n = s.n, sums_n = s.labels_only ? 0 : n;  // the sums', inertia's and variance's
  const std::size_t sums_k = s.labels_only ? 0 : k;
  std::size_t at = 0;
  const auto put = [&](auto& slice, std::size_t count) {
    at = (at + at_most - 1) / at_most * at_most;
    slice.ptr = base ? reinterpret_cast<decltype(slice.ptr)>(base + at) : nullptr;
    slice.count = count;
    at += count * sizeof(*slice.ptr);
  };
  put(labels, n);
  put(upper, n);
  put(lower, n);
  put(list, n);
  put(centroids, k * d);
  put(before, k * d);
  put(half_gap, k);
  put(delta, k);
  // The report (one copy to the host an iteration): shift2 (k), counts (k), the changed count
  // and the list's length (zeroed together).
  put(report, k + (k + 3) / 2);
  shift2 = Slice<double>{report.ptr, k};
  counts = Slice<std::uint32_t>{base ? reinterpret_cast<std::uint32_t*>(report.ptr + k) : nullptr, k};
  put(moves, 1);
  put(loop, 1);
  put(slots, s.labels_only ? 0 : s.max_run * slot_doubles(k));
  put(moved_sums, s.run_kernel ? gpu::kmeans::run_moved_words(s.k, s.d) : 0);
  put(moff, 2);  // the inertia's fold tree: one sequence (lloyd_cuda.cpp's fold())
  put(offs, std::size_t(s.levels) * 2);
  put(sums, sums_k * d);
  put(digits, sums_k * d * kSumDigits);
  put(tops, s.labels_only ? 0 : d);
  put(moved_points, sums_n);
  put(moved_from, sums_n);
  put(one, 1);
  put(first_bad, 1);
  put(iota, sums_n);
  put(level_a, s.labels_only ? 0 : n / kFold + 2);  // the inertia's tree: one sequence of n
  put(level_b, s.labels_only ? 0 : n / (kFold * kFold) + 3);
  put(costs, sums_n);
  put(root, 1);
  put(variance, (sums_n + kVarianceChunk - 1) / kVarianceChunk * d);
  put(means, d);
  // The labels' snapshots for their early way back (LabelReturn), where the run kernel serves.
  const bool early = !s.labels_only && s.run_kernel && LabelReturn::early_for(s.n, s.k);
  put(snapshot_a, early ? n * LabelReturn::width_for(s.k) : 0);
  put(snapshot_b, early ? n * LabelReturn::width_for(s.k) : 0);
  put(change_count, 1);
  return at;
}

}  // namespace streamknn::detail::kmeans
