// Launchers of the K-means kernels (kmeans_kernels.cu, point_kernels.cu, sum_kernels.cu); plain C++, for
// lloyd_cuda.cpp. Every launcher queues its work on `stream` and checks the launch. Arrays are
// device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::gpu::kmeans {

/// The centroids' last movement as the bounds kernel needs it: the two largest movement bounds
/// and the centroid of the first (the smallest index among equals). Trivial, for shared memory.
struct Moves {
  double max1, max2;
  std::uint32_t argmax;
};

/// The iterations queued ahead of the host (lloyd_cuda.cpp): once `stop` is set, their kernels
/// return at once; `ran` counts those that ran, the stopping one included.
struct Loop {
  std::uint32_t stop = 0, ran = 0;
  double tol = 0;  ///< the loop's tolerance (loop_stop)
};

/// What the labelling kernels read and write. Every kernel given a Loop (here, SumArgs, launch_means,
/// LoopEnd) does nothing once it is stopped.
struct LabelArgs {
  const float* x = nullptr;          ///< n x d points
  const float* centroids = nullptr;  ///< k x d
  std::uint32_t* labels = nullptr;   ///< n
  float* upper = nullptr;            ///< n: >= distance to the label's centroid (rounded up)
  float* lower = nullptr;            ///< n: <= distance to every other centroid (rounded down)
  const float* half_gap = nullptr;   ///< k: <= half the distance to the nearest other centroid
  const double* delta = nullptr;     ///< k: >= each centroid's last movement
  const Moves* moves = nullptr;      ///< the largest two of delta
  std::uint32_t* list = nullptr;     ///< n: points to scan (appended by the bounds kernel)
  std::uint32_t* list_count = nullptr;
  std::uint32_t* changed = nullptr;  ///< labels changed by the scan
  std::uint32_t* moved = nullptr;    ///< n: the points whose label the scan changed (null: not kept)
  std::uint32_t* moved_from = nullptr;  ///< n: their labels before
  const Loop* loop = nullptr;        ///< a queued iteration's control (null: none)
  streamknn::detail::kmeans::PruneBound bound;  ///< prune_bound(d), worked out once for the fit
  std::uint32_t n = 0, d = 0, k = 0;
};

/// Hamerly's test per point (moved: the centroids moved since the bounds were set, by delta and
/// moves); failures go to the list.
void launch_bounds(const LabelArgs& a, bool moved, cudaStream_t stream);
/// Full scans: of the listed points (list_count of them), or of every point (all = true).
void launch_scan(const LabelArgs& a, bool all, cudaStream_t stream);
/// half_gap[c] for every centroid.
void launch_half_gaps(const float* centroids, std::uint32_t k, std::uint32_t d, float* half_gap, const Loop* loop,
                      cudaStream_t stream);

/// The inertia's fold tree (lib/kmeans/fold_layout.hpp) over k sequences: member offsets moff
/// (k + 1) and, for levels 0..levels-1, node offsets offs[L * (k + 1) + c], from the counts.
void launch_tree_tables(const std::uint32_t* counts, std::uint32_t k, std::uint32_t levels, std::uint32_t* moff,
                        std::uint32_t* offs, cudaStream_t stream);
/// Level 0 of the fold tree: out[node * d + j]. members: each sequence's indices (nullptr: the
/// identity). max_nodes: an upper bound.
void launch_fold_leaves(const double* values, const std::uint32_t* members, const std::uint32_t* moff,
                        const std::uint32_t* offs0, std::uint32_t k, std::uint32_t d, std::size_t max_nodes, double* out,
                        cudaStream_t stream);
/// Level L from level L - 1 (offs_below, offs_level: their node offsets).
void launch_fold_level(const double* below, const std::uint32_t* offs_below, const std::uint32_t* offs_level,
                       std::uint32_t k, std::uint32_t d, std::size_t max_nodes, double* out, cudaStream_t stream);
/// roots[c * d + j] = the top level's node of sequence c (0 for an empty one).
void launch_fold_roots(const double* top, const std::uint32_t* offs_top, std::uint32_t k, std::uint32_t d,
                       double* roots, cudaStream_t stream);

/// sum_kernels.cu: the exact centroid sums (lib/kmeans/cluster_sums.hpp) as digits (k x d x
/// kSumDigits, two's complement in 64-bit words) and counts (k).
struct SumArgs {
  const float* x = nullptr;                ///< n x d points
  const std::uint32_t* labels = nullptr;   ///< n, the current labels
  const std::uint32_t* moved = nullptr;    ///< the points to move (null: every point, added)
  const std::uint32_t* moved_from = nullptr;  ///< their clusters before
  const std::uint32_t* moved_count = nullptr; ///< how many (on the device)
  const std::uint32_t* tops = nullptr;     ///< d: each feature's largest exponent field
  unsigned long long* digits = nullptr;
  std::uint32_t* counts = nullptr;
  const Loop* loop = nullptr;              ///< a queued iteration's control (null: none)
  std::uint32_t n = 0, d = 0, k = 0;
};
/// Every point added to zeroed digits and counts (moved null), or the moved points taken from
/// their clusters before and added to their labels' clusters, by `blocks` blocks
/// (move_sums_blocks, for the current device: blocks with no work return at once).
void launch_move_sums(const SumArgs& a, unsigned blocks, cudaStream_t stream);
unsigned move_sums_blocks(std::uint32_t n, std::uint32_t k, std::uint32_t d);

/// The arrays of an iteration's update of the centroids (k x d).
struct UpdateArgs {
  const unsigned long long* digits = nullptr;  ///< the exact sums (launch_move_sums)
  const std::uint32_t* tops = nullptr;
  const std::uint32_t* counts = nullptr;
  double* sums = nullptr;      ///< out: the sums' float64 values
  float* centroids = nullptr;  ///< in and out
  float* before = nullptr;     ///< out: the centroids before
  double* shift2 = nullptr;    ///< k, out: squared_shift
  double* delta = nullptr;     ///< k, out: movement_bound
  Moves* moves = nullptr;      ///< out: the largest two of delta
  std::uint32_t k = 0, d = 0;
};

/// The end of a queued iteration, after the movements: the counts and the changed count copied to
/// the iteration's report, and the decision whether the loop goes on (no empty cluster and
/// loop_stop's Continue); going on, the changed count and the list's length are zeroed for the next.
struct LoopEnd {
  Loop* loop = nullptr;                    ///< null: not a queued iteration (the rest unused)
  const std::uint32_t* counts = nullptr;   ///< k: the sums' counts
  std::uint32_t* counters = nullptr;       ///< the changed count, then the list's length
  std::uint32_t* report_counts = nullptr;  ///< k + 1: the counts, then the changed count
};

/// run_kernel.cu: a queued run of Lloyd iterations as one cooperative kernel, for fits of at most
/// 64 clusters and 256 cells (k x d) whose points' labels and bounds fit in the resident blocks'
/// shared memory (plan_run). Each iteration labels (Hamerly's test and a full scan of the points
/// that fail it, as launch_bounds and launch_scan), moves the changed points' exact sums, then
/// updates the centroids (as launch_means and launch_shifts), with one grid-wide barrier between;
/// it writes its report as LoopEnd does and stops where the host's loop stops. At the end (the
/// stop, or `count` iterations) the fit's arrays hold what the one-step kernels would have left:
/// labels, bounds, digits, counts, sums, centroids, before, delta and moves.
struct RunArgs {
  const float* x = nullptr;           ///< n x d points
  std::uint32_t* labels = nullptr;    ///< n
  float* upper = nullptr;             ///< n
  float* lower = nullptr;             ///< n
  const std::uint32_t* tops = nullptr;   ///< d
  unsigned long long* digits = nullptr;  ///< k x d x kSumDigits, those of the labels
  std::uint32_t* counts = nullptr;    ///< k
  float* centroids = nullptr;         ///< k x d
  float* before = nullptr;            ///< k x d
  double* sums = nullptr;             ///< k x d
  double* delta = nullptr;            ///< k: the last movement bounds
  Moves* moves = nullptr;             ///< their largest two
  unsigned long long* moved_sums = nullptr;  ///< run_moved_words(k, d), zeroed by launch_run
  double* reports = nullptr;          ///< count reports, report_doubles apart (shift2, counts, changed)
  std::size_t report_doubles = 0;
  Loop* loop = nullptr;               ///< out: ran and stop
  double tol = 0;
  streamknn::detail::kmeans::PruneBound bound;  ///< prune_bound(d), worked out once for the fit
  std::uint32_t count = 0;            ///< iterations at most
  std::uint32_t n = 0, d = 0, k = 0;
};
/// The run kernel's launch for a fit: blocks = 0 where it does not serve (too many clusters or
/// cells for shared memory, no cooperative launch on the device, too many points a block).
struct RunPlan {
  unsigned blocks = 0, threads = 0;
  std::size_t shared_bytes = 0;
  bool points_in_shared = false;  // each block's points copied to its shared memory for the run
};
RunPlan plan_run(std::uint32_t n, std::uint32_t k, std::uint32_t d);
/// 64-bit words of the run's moved sums: three tables, each an iteration's changes of the digits
/// and the counts, then its changed count.
std::size_t run_moved_words(std::uint32_t k, std::uint32_t d);
void launch_run(const RunArgs& a, const RunPlan& plan, cudaStream_t stream);

/// sums[c * d + j] = the float64 value of the digits; before = centroids, then centroids[c * d + j]
/// = mean(sums, counts[c]) (every count non-zero).
void launch_means(const UpdateArgs& u, const Loop* loop, cudaStream_t stream);
/// shift2[c] = squared_shift(centroids, before), delta[c] = movement_bound(shift2[c]), and *moves
/// from the deltas (one block: the host's loop over the centroids gets the same values); then `end`.
void launch_shifts(const UpdateArgs& u, const LoopEnd& end, cudaStream_t stream);
/// values[i] = the float64 squared distance of point i to its label's centroid.
void launch_point_costs(const float* x, const float* centroids, const std::uint32_t* labels, std::uint32_t n,
                        std::uint32_t d, double* values, cudaStream_t stream);
/// The relocation's screen (kmeans_exact.hpp's far_low / far_high) over costs sorted in descending
/// order (sort_costs), order[i] the point of sorted[i]: the candidates are the prefix of sorted
/// whose far_high is at least far_low(sorted[m - 1]); *count = its length, far_labels[i] = the
/// label of order[i] for i < *count.
void launch_far_points(const double* sorted, const std::uint32_t* order, const std::uint32_t* labels, std::uint32_t n,
                       std::uint32_t m, std::uint32_t d, std::uint32_t* count, std::uint32_t* far_labels,
                       cudaStream_t stream);
/// point_kernels.cu: *first = the lowest index of a float of x (n x d) that is NaN or beyond
/// `bound` in magnitude, where that is below the value *first holds (set it to n x d first); and
/// unless tops is null, tops (d) = each feature's largest exponent field (cluster_sums.hpp).
void launch_first_beyond(const float* x, std::uint32_t n, std::uint32_t d, float bound, unsigned long long* first,
                         std::uint32_t* tops, cudaStream_t stream);
/// tops (d) alone, over finite points.
void launch_feature_tops(const float* x, std::uint32_t n, std::uint32_t d, std::uint32_t* tops, cudaStream_t stream);
/// out (count x d) = the rows of x (n x d) that `rows` names.
void launch_gather(const float* x, const std::uint32_t* rows, std::uint32_t count, std::uint32_t d, float* out,
                   cudaStream_t stream);
/// LloydBackend::variance_pass (lib/kmeans/lloyd_backend.hpp) over x (n x d): out is
/// ceil(n / kVarianceChunk) x d; mean is d values on the device, or null for the first pass.
void launch_variance_pass(const float* x, std::uint32_t n, std::uint32_t d, const double* mean, double* out,
                          cudaStream_t stream);

/// out[i] = i.
void launch_iota(std::uint32_t* out, std::uint32_t n, cudaStream_t stream);
/// out (n values of `width` bytes, 1 or 2) = labels (n, each below 2^(8 width)).
void launch_narrow_labels(const std::uint32_t* labels, std::uint32_t n, int width, void* out, cudaStream_t stream);
/// The labels (n) that differ from their narrow copy (`width` bytes each: in `newer` below
/// `split`, in `older` from there): *count (zeroed first) = how many, and changes (2 x room) holds
/// the place and the label of up to `room` of them, a pair each, in no order.
void launch_label_changes(const std::uint32_t* labels, const void* newer, const void* older, std::uint32_t split,
                          int width, std::uint32_t n, std::uint32_t room, std::uint32_t* count,
                          std::uint32_t* changes, cudaStream_t stream);

/// Temporary bytes of sort_costs, and the sort: costs (n) in descending order into sorted, the
/// points (iota) along into order.
std::size_t cost_sort_bytes(std::uint32_t n);
void sort_costs(void* temp, std::size_t temp_bytes, const double* costs, double* sorted, const std::uint32_t* iota,
                std::uint32_t* order, std::uint32_t n, cudaStream_t stream);

}  // namespace streamknn::detail::gpu::kmeans
