// The K-means kernels (launchers in kmeans_kernels.hpp). The arithmetic a result depends on (the
// exact labelling rule, the inertia's fold tree, the means, the movements) comes from
// lib/kmeans/kmeans_exact.hpp and cluster_sums.hpp, which the CPU backend compiles too, so both
// get the same bits.
#include <algorithm>
#include <bit>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/cuda_check.hpp"
#include "cuda/kmeans/kmeans_kernels.hpp"
#include "cuda/kmeans/point_rules.cuh"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/fold_layout.hpp"
#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::gpu::kmeans {

namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 128;
constexpr unsigned kShiftThreads = 1024;
constexpr int kTileC = 32;   // centroids per shared-memory tile
constexpr int kTileD = 128;  // dimensions per shared-memory tile

unsigned blocks_for(std::size_t n, int threads) { return unsigned((n + std::size_t(threads) - 1) / std::size_t(threads)); }

/// True in a queued iteration after the loop stopped: the kernel returns at once.
__device__ __forceinline__ bool stopped(const Loop* loop) { return loop != nullptr && loop->stop != 0; }

__global__ void bounds_kernel(LabelArgs a, bool moved) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.n || stopped(a.loop)) return;
  const std::uint32_t c = a.labels[i];
  float u = a.upper[i], l = a.lower[i];
  const float delta_c = moved ? __double2float_ru(a.delta[c]) : 0.0f;
  const float delta_other = moved ? moves32(*a.moves).other_than(c) : 0.0f;
  if (keeps_label(a.x + std::size_t(i) * a.d, a.centroids + std::size_t(c) * a.d, a.d, bound32(a.bound),
                  a.half_gap[c], delta_c, delta_other, u, l)) {
    a.upper[i] = u;
    a.lower[i] = l;
    return;
  }
  a.list[atomicAdd(a.list_count, 1u)] = i;
}

/// One thread per point; the centroids pass through shared memory in tiles of kTileC x kTileD.
__global__ void __launch_bounds__(kScanThreads, 4) scan_kernel(LabelArgs a, bool all) {
  __shared__ __align__(16) float tile[kTileC][kTileD];
  if (stopped(a.loop)) return;
  const std::uint32_t count = all ? a.n : *a.list_count;
  if (blockIdx.x * blockDim.x >= count) return;  // the whole block: no shared tile to load
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = t < count;
  const std::uint32_t i = active ? (all ? t : a.list[t]) : 0;
  const float* x = a.x + std::size_t(i) * a.d;
  km::NearestTwo near;
  for (std::uint32_t c0 = 0; c0 < a.k; c0 += kTileC) {
    float acc[kTileC];
#pragma unroll
    for (int c = 0; c < kTileC; ++c) acc[c] = 0;
    for (std::uint32_t d0 = 0; d0 < a.d; d0 += kTileD) {
      const std::uint32_t span = min(std::uint32_t(kTileD), a.d - d0);
      __syncthreads();
      for (std::uint32_t e = threadIdx.x; e < kTileC * span; e += blockDim.x) {
        const std::uint32_t c = e / span, j = e % span;
        tile[c][j] = c0 + c < a.k ? a.centroids[std::size_t(c0 + c) * a.d + d0 + j] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      if (a.d % 4 == 0) {  // 16-byte loads: the row and the tile are 16-byte aligned
        for (std::uint32_t j = 0; j < span; j += 4) {
          const float4 v = *reinterpret_cast<const float4*>(x + d0 + j);
#pragma unroll
          for (int c = 0; c < kTileC; ++c) {
            const float4 m = *reinterpret_cast<const float4*>(&tile[c][j]);
            const float e0 = v.x - m.x, e1 = v.y - m.y, e2 = v.z - m.z, e3 = v.w - m.w;
            acc[c] = fmaf(e3, e3, fmaf(e2, e2, fmaf(e1, e1, fmaf(e0, e0, acc[c]))));
          }
        }
      } else {
        for (std::uint32_t j = 0; j < span; ++j) {
          const float v = x[d0 + j];
#pragma unroll
          for (int c = 0; c < kTileC; ++c) {
            const float diff = v - tile[c][j];
            acc[c] = fmaf(diff, diff, acc[c]);
          }
        }
      }
    }
    if (!active) continue;
#pragma unroll
    for (int c = 0; c < kTileC; ++c) {
      if (c0 + c >= a.k) break;
      near.take(acc[c], c0 + c);
    }
  }
  if (!active) return;
  std::uint32_t best;
  float u, l;
  settle32(x, a.centroids, a.k, a.d, a.bound, bound32(a.bound), near, best, u, l);
  if (!all && a.labels[i] != best) {
    const std::uint32_t at = atomicAdd(a.changed, 1u);
    if (a.moved) {
      a.moved[at] = i;
      a.moved_from[at] = a.labels[i];
    }
  }
  a.labels[i] = best;
  a.upper[i] = u;
  a.lower[i] = l;
}

__global__ void half_gap_kernel(const float* centroids, std::uint32_t k, std::uint32_t d, float* half_gap,
                                const Loop* loop) {
  __shared__ float best[kThreads / 32];
  if (stopped(loop)) return;
  const std::uint32_t c = blockIdx.x;
  float m = km::kInfinityF;  // the smallest screen to another centroid (half_gap_of)
  for (std::uint32_t o = threadIdx.x; o < k; o += blockDim.x) {
    if (o != c) m = fminf(m, km::screen(centroids + std::size_t(c) * d, centroids + std::size_t(o) * d, d));
  }
  for (int s = 16; s > 0; s /= 2) m = fminf(m, __shfl_down_sync(0xffffffffu, m, s));
  if (threadIdx.x % 32 == 0) best[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w) m = fminf(m, best[w]);
    half_gap[c] = half_gap_of(m, bound32(km::prune_bound(d)));
  }
}

/// One block of 1024 threads: exclusive scans over the clusters, chunk by chunk.
__global__ void __launch_bounds__(1024) tree_tables_kernel(const std::uint32_t* counts, std::uint32_t k,
                                                           std::uint32_t levels, std::uint32_t* moff,
                                                           std::uint32_t* offs) {
  using Scan = cub::BlockScan<std::uint32_t, 1024>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ std::uint32_t carry[9];
  if (threadIdx.x <= levels) carry[threadIdx.x] = 0;
  __syncthreads();
  for (std::uint32_t base = 0; base < k; base += 1024) {
    const std::uint32_t c = base + threadIdx.x;
    std::uint32_t v = c < k ? counts[c] : 0;
    for (std::uint32_t level = 0; level <= levels; ++level) {
      // level 0 of the loop: the members; level L + 1: the fold tree's level-L nodes
      std::uint32_t prefix, total;
      Scan(temp).ExclusiveSum(v, prefix, total);
      std::uint32_t* out = level == 0 ? moff : offs + (level - 1) * (k + 1);
      if (c < k) out[c] = carry[level] + prefix;
      __syncthreads();
      if (threadIdx.x == 0) carry[level] += total;
      __syncthreads();
      v = km::nodes_above(v);
    }
  }
  if (threadIdx.x == 0) {
    moff[k] = carry[0];
    for (std::uint32_t level = 1; level <= levels; ++level) offs[(level - 1) * (k + 1) + k] = carry[level];
  }
}

__global__ void fold_leaves_kernel(const double* values, const std::uint32_t* members, const std::uint32_t* moff,
                                   const std::uint32_t* offs0, std::uint32_t k, std::uint32_t d, double* out) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint32_t node = std::uint32_t(t / d), j = std::uint32_t(t % d);
  if (node >= offs0[k]) return;
  const km::NodeRange r = km::leaf_range(moff, offs0, k, node);
  const auto row = [&](std::uint32_t at) { return std::size_t(members ? members[at] : at); };
  double acc = double(values[row(r.first) * d + j]);
  for (std::uint32_t p = r.first + 1; p < r.end; ++p) acc += double(values[row(p) * d + j]);
  out[std::size_t(node) * d + j] = acc;
}

__global__ void fold_level_kernel(const double* below, const std::uint32_t* offs_below,
                                  const std::uint32_t* offs_level, std::uint32_t k, std::uint32_t d, double* out) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint32_t node = std::uint32_t(t / d), j = std::uint32_t(t % d);
  if (node >= offs_level[k]) return;
  const km::NodeRange r = km::level_range(offs_below, offs_level, k, node);
  double acc = below[std::size_t(r.first) * d + j];
  for (std::uint32_t p = r.first + 1; p < r.end; ++p) acc += below[std::size_t(p) * d + j];
  out[std::size_t(node) * d + j] = acc;
}

__global__ void fold_roots_kernel(const double* top, const std::uint32_t* offs_top, std::uint32_t k, std::uint32_t d,
                                  double* roots) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= std::size_t(k) * d) return;
  const std::uint32_t c = std::uint32_t(t / d), j = std::uint32_t(t % d);
  roots[t] = offs_top[c + 1] > offs_top[c] ? top[std::size_t(offs_top[c]) * d + j] : 0.0;
}

__global__ void means_kernel(UpdateArgs u, const Loop* loop) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= std::size_t(u.k) * u.d || stopped(loop)) return;
  std::int64_t cell[km::kSumDigits];
#pragma unroll
  for (int b = 0; b < km::kSumDigits; ++b) cell[b] = static_cast<std::int64_t>(u.digits[t * km::kSumDigits + b]);
  const double sum = km::digits_value(cell, km::sum_unit(u.tops[t % u.d]));
  u.sums[t] = sum;
  u.before[t] = u.centroids[t];
  u.centroids[t] = km::mean(sum, u.counts[t / u.d]);
}

/// A queued iteration's end (LoopEnd), after the shifts (in shift2) of shifts_kernel's block.
__device__ void end_iteration(const LoopEnd& e, const double* shift2, std::uint32_t k) {
  int mine = 0;
  for (std::uint32_t c = threadIdx.x; c < k; c += blockDim.x) {
    const std::uint32_t count = e.counts[c];
    e.report_counts[c] = count;
    if (count == 0) mine = 1;
  }
  const int empty = __syncthreads_or(mine);  // a barrier: every thread's shift2 is seen by thread 0
  if (threadIdx.x != 0) return;
  const std::uint32_t changed = e.counters[0];
  e.report_counts[k] = changed;
  const bool stop = queued_stop(empty != 0, changed, shift2, k, e.loop->tol);
  e.loop->ran += 1;
  if (stop) {
    e.loop->stop = 1;
  } else {
    e.counters[0] = 0;
    e.counters[1] = 0;
  }
}

/// One block of a power of two threads: each centroid's shift and movement bound, then the
/// largest two (as the host's loop in index order: the first of equal largest is argmax, max2 the
/// largest of the others, whatever the block's size); then `end`.
__global__ void __launch_bounds__(kShiftThreads) shifts_kernel(UpdateArgs u, LoopEnd end) {
  __shared__ Moves part[kShiftThreads];
  if (stopped(end.loop)) return;
  Moves m{0.0, 0.0, 0u};
  for (std::uint32_t c = threadIdx.x; c < u.k; c += blockDim.x) {
    const double s = km::squared_shift(u.centroids + std::size_t(c) * u.d, u.before + std::size_t(c) * u.d, u.d);
    const double b = km::movement_bound(s, u.d);
    u.shift2[c] = s;
    u.delta[c] = b;
    take_move(m, b, c);
  }
  part[threadIdx.x] = m;
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.x < half) {
      const Moves x = part[threadIdx.x], y = part[threadIdx.x + half];
      const bool x_top = x.max1 > y.max1 || (x.max1 == y.max1 && x.argmax <= y.argmax);
      const Moves& top = x_top ? x : y;
      const Moves& other = x_top ? y : x;
      part[threadIdx.x] = Moves{top.max1, fmax(top.max2, other.max1), top.argmax};
    }
  }
  if (threadIdx.x == 0) *u.moves = part[0];
  if (end.loop != nullptr) end_iteration(end, u.shift2, u.k);
}

__global__ void point_costs_kernel(const float* x, const float* centroids, const std::uint32_t* labels,
                                   std::uint32_t n, std::uint32_t d, double* values) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  values[i] = km::squared_distance(x + std::size_t(i) * d, centroids + std::size_t(labels[i]) * d, d);
}

/// far_high is non-increasing along sorted (one product by a constant > 0), so the candidates are a
/// prefix; the thread at its end writes its length.
__global__ void far_points_kernel(const double* sorted, const std::uint32_t* order, const std::uint32_t* labels,
                                  std::uint32_t n, std::uint32_t m, std::uint32_t d, std::uint32_t* count,
                                  std::uint32_t* far_labels) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double floor = km::far_low(sorted[m - 1], d);
  if (!(km::far_high(sorted[i], d) >= floor)) return;
  far_labels[i] = labels[order[i]];
  if (i + 1 == n || !(km::far_high(sorted[i + 1], d) >= floor)) *count = i + 1;
}

__global__ void iota_kernel(std::uint32_t* out, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

}  // namespace

void launch_bounds(const LabelArgs& a, bool moved, cudaStream_t s) {
  bounds_kernel<<<blocks_for(a.n, kThreads), kThreads, 0, s>>>(a, moved);
  check_launch("kmeans bounds_kernel");
}

void launch_scan(const LabelArgs& a, bool all, cudaStream_t s) {
  scan_kernel<<<blocks_for(a.n, kScanThreads), kScanThreads, 0, s>>>(a, all);
  check_launch("kmeans scan_kernel");
}

void launch_half_gaps(const float* centroids, std::uint32_t k, std::uint32_t d, float* half_gap, const Loop* loop,
                      cudaStream_t s) {
  half_gap_kernel<<<k, kThreads, 0, s>>>(centroids, k, d, half_gap, loop);
  check_launch("kmeans half_gap_kernel");
}

void launch_tree_tables(const std::uint32_t* counts, std::uint32_t k, std::uint32_t levels, std::uint32_t* moff,
                        std::uint32_t* offs, cudaStream_t s) {
  tree_tables_kernel<<<1, 1024, 0, s>>>(counts, k, levels, moff, offs);
  check_launch("kmeans tree_tables_kernel");
}

void launch_fold_leaves(const double* values, const std::uint32_t* members, const std::uint32_t* moff,
                        const std::uint32_t* offs0, std::uint32_t k, std::uint32_t d, std::size_t max_nodes, double* out,
                        cudaStream_t s) {
  fold_leaves_kernel<<<blocks_for(max_nodes * d, kThreads), kThreads, 0, s>>>(values, members, moff, offs0, k, d, out);
  check_launch("kmeans fold_leaves_kernel");
}

void launch_fold_level(const double* below, const std::uint32_t* offs_below, const std::uint32_t* offs_level,
                       std::uint32_t k, std::uint32_t d, std::size_t max_nodes, double* out, cudaStream_t s) {
  fold_level_kernel<<<blocks_for(max_nodes * d, kThreads), kThreads, 0, s>>>(below, offs_below, offs_level, k, d, out);
  check_launch("kmeans fold_level_kernel");
}

void launch_fold_roots(const double* top, const std::uint32_t* offs_top, std::uint32_t k, std::uint32_t d,
                       double* roots, cudaStream_t s) {
  fold_roots_kernel<<<blocks_for(std::size_t(k) * d, kThreads), kThreads, 0, s>>>(top, offs_top, k, d, roots);
  check_launch("kmeans fold_roots_kernel");
}

void launch_means(const UpdateArgs& u, const Loop* loop, cudaStream_t s) {
  means_kernel<<<blocks_for(std::size_t(u.k) * u.d, kThreads), kThreads, 0, s>>>(u, loop);
  check_launch("kmeans means_kernel");
}

void launch_shifts(const UpdateArgs& u, const LoopEnd& end, cudaStream_t s) {
  // A thread per centroid up to kShiftThreads: few clusters take few rounds of the reduction.
  const unsigned threads = std::min(kShiftThreads, std::bit_ceil(std::max(u.k, 32u)));
  shifts_kernel<<<1, threads, 0, s>>>(u, end);
  check_launch("kmeans shifts_kernel");
}

void launch_point_costs(const float* x, const float* centroids, const std::uint32_t* labels, std::uint32_t n,
                        std::uint32_t d, double* values, cudaStream_t s) {
  point_costs_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, centroids, labels, n, d, values);
  check_launch("kmeans point_costs_kernel");
}

void launch_far_points(const double* sorted, const std::uint32_t* order, const std::uint32_t* labels, std::uint32_t n,
                       std::uint32_t m, std::uint32_t d, std::uint32_t* count, std::uint32_t* far_labels,
                       cudaStream_t s) {
  far_points_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(sorted, order, labels, n, m, d, count, far_labels);
  check_launch("kmeans far_points_kernel");
}

void launch_iota(std::uint32_t* out, std::uint32_t n, cudaStream_t s) {
  iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(out, n);
  check_launch("kmeans iota_kernel");
}

std::size_t cost_sort_bytes(std::uint32_t n) {
  std::size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const double*>(nullptr),
                                                       static_cast<double*>(nullptr),
                                                       static_cast<const std::uint32_t*>(nullptr),
                                                       static_cast<std::uint32_t*>(nullptr), n),
             "cub::DeviceRadixSort::SortPairsDescending (size)");
  return bytes;
}

void sort_costs(void* temp, std::size_t temp_bytes, const double* costs, double* sorted, const std::uint32_t* iota,
                std::uint32_t* order, std::uint32_t n, cudaStream_t s) {
  check_cuda(cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, costs, sorted, iota, order, n, 0,
                                                       int(8 * sizeof(double)), s),
             "cub::DeviceRadixSort::SortPairsDescending");
}

}  // namespace streamknn::detail::gpu::kmeans
