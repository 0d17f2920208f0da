// A queued run of Lloyd iterations as one cooperative kernel (kmeans_kernels.hpp, RunArgs). Where
// the k x d centroids and their exact sums fit in shared memory, every block keeps its own copy of
// them and works out each update itself, from the same integers with the same code, so every block
// holds the same bits and reaches the same decision to stop; the only traffic between blocks is
// the iteration's moved sums, added to a global table, and one grid-wide barrier. An iteration of
// the one-step kernels is six launches in a row, each waiting for the last to drain; here it is a
// pass over the block's points, the barrier and a few microseconds of shared-memory work.
//
// Each block owns a contiguous range of points, whose labels and bounds it keeps in shared memory
// for the run (read at its start, written back at its end), and the points themselves where the
// plan finds room at the same blocks per multiprocessor (RunPlan::points_in_shared: Hamerly's
// tightening and the rescans then read shared memory, not L2), so the kernel serves fits whose
// points' state fits in the resident blocks' shared memory (about two million points on a
// 132-multiprocessor device); larger fits run the one-step kernels. It labels its points as the
// bounds and scan kernels do (point_rules.cuh): Hamerly's test per point, the points that fail it
// listed, then scanned against every centroid by the block's threads, one listed point each in
// turn. A changed label moves the point's exact sums from its old cluster to its new one in the
// block's table of 12-bit halves; after the pass the block adds the table's non-zero digits to the
// iteration's global table of moved sums. Three such tables take turns: iteration i adds to table
// i % 3 before the barrier, every block reads it after; block 0 zeroes table (i - 1) % 3 after the
// barrier, when every block has read it (before its own barrier of iteration i) and none will add
// to it before iteration i + 2.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/kmeans/kmeans_kernels.hpp"
#include "cuda/kmeans/point_rules.cuh"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::gpu::kmeans {

namespace {

namespace cg = cooperative_groups;

constexpr unsigned kRunThreads = 256;
// Each block computes the k x k half gaps, and one thread rescans a failing point against all
// k x d centroid values: beyond these the one-step kernels (a block's scan spread over the
// centroids' tiles, the gaps over k blocks) take less time an iteration.
constexpr std::uint32_t kRunMaxClusters = 64;
constexpr std::uint32_t kRunMaxCells = 256;
constexpr int kTables = 3;                     // the moved sums' tables in turn
constexpr int kScanGroup = 8;                  // centroids a rescan screens at once
constexpr int kRunMaxBlocksPerSm = 4;             // more add to the barrier, not to the speed
constexpr std::uint32_t kMaxSpan = 65536;  // the list's 16-bit places
// A block's halves take at most kBlockItems moved points between flushes (point_rules.cuh).
static_assert(kMaxSpan <= kBlockItems);

/// 64-bit words of one iteration's table of moved sums.
__host__ __device__ std::size_t table_words(std::uint32_t k, std::uint32_t d) {
  return std::size_t(k) * d * km::kSumDigits + k + 1;
}

/// Points a block takes (the last block fewer).
__host__ __device__ std::uint32_t block_span(std::uint32_t n, unsigned blocks) { return (n + blocks - 1) / blocks; }

/// A block's shared memory (sizes in elements; `base` null: only the bytes).
struct RunShared {
  std::int64_t* digits;     // k x d x kSumDigits: the exact sums
  double* shift2;           // k: the last update's squared movements
  double* delta;            // k: their bounds
  float* centroids;         // k x d
  float* before;            // k x d
  int* halves;              // k x d x kHalves, then k counts: the block's moves this iteration
  float* half_gap;          // k
  std::uint32_t* gap_bits;  // k: the smallest screen to another centroid (float bits)
  std::uint32_t* counts;    // k
  std::uint32_t* tops;      // d
  std::uint32_t* labels;    // span: the block's points' labels and bounds (RunArgs' for the run)
  float* upper;             // span
  float* lower;             // span
  std::uint16_t* list;      // span: the points failing Hamerly's test (places in the block's range)
  float* points;            // span x d: the block's points, where the plan keeps them (else none)
  std::size_t bytes;
};

__host__ __device__ RunShared carve(unsigned char* base, std::uint32_t k, std::uint32_t d, std::uint32_t span,
                                    bool points) {
  const std::size_t cells = std::size_t(k) * d;
  std::size_t at = 0;
  const auto take = [&](std::size_t bytes) {
    unsigned char* p = base ? base + at : nullptr;
    at += (bytes + 15) / 16 * 16;
    return p;
  };
  RunShared s{};
  s.digits = reinterpret_cast<std::int64_t*>(take(cells * km::kSumDigits * sizeof(std::int64_t)));
  s.shift2 = reinterpret_cast<double*>(take(k * sizeof(double)));
  s.delta = reinterpret_cast<double*>(take(k * sizeof(double)));
  s.centroids = reinterpret_cast<float*>(take(cells * sizeof(float)));
  s.before = reinterpret_cast<float*>(take(cells * sizeof(float)));
  s.halves = reinterpret_cast<int*>(take((cells * kHalves + k) * sizeof(int)));
  s.half_gap = reinterpret_cast<float*>(take(k * sizeof(float)));
  s.gap_bits = reinterpret_cast<std::uint32_t*>(take(k * sizeof(std::uint32_t)));
  s.counts = reinterpret_cast<std::uint32_t*>(take(k * sizeof(std::uint32_t)));
  s.tops = reinterpret_cast<std::uint32_t*>(take(d * sizeof(std::uint32_t)));
  s.labels = reinterpret_cast<std::uint32_t*>(take(span * sizeof(std::uint32_t)));
  s.upper = reinterpret_cast<float*>(take(span * sizeof(float)));
  s.lower = reinterpret_cast<float*>(take(span * sizeof(float)));
  s.list = reinterpret_cast<std::uint16_t*>(take(span * sizeof(std::uint16_t)));
  s.points = reinterpret_cast<float*>(take(points ? std::size_t(span) * d * sizeof(float) : 0));
  s.bytes = at;
  return s;
}

/// The block's scalars beside RunShared.
struct RunScalars {
  Moves moves;             // the largest two of delta
  std::uint32_t fill;      // the block's listed points
  std::uint32_t changed;   // the block's changed labels this iteration
  std::uint32_t total;     // every block's, after the barrier
  int stop;
};

/// half_gap[c] as half_gap_kernel computes it (half_gap_of the smallest screen to another centroid).
__device__ void half_gaps(const RunShared& sh, std::uint32_t k, std::uint32_t d, const ex::ScreenBound& b) {
  for (std::uint32_t c = threadIdx.x; c < k; c += blockDim.x) sh.gap_bits[c] = __float_as_uint(1.0f / 0.0f);
  __syncthreads();
  for (std::uint32_t p = threadIdx.x; p < k * k; p += blockDim.x) {
    const std::uint32_t c = p % k, o = p / k;  // a warp's lanes: different centroids' minima
    if (c == o) continue;
    const float r = km::screen(sh.centroids + c * d, sh.centroids + o * d, d);
    atomicMin(sh.gap_bits + c, __float_as_uint(r));  // r >= 0: its bits order as the values
  }
  __syncthreads();
  for (std::uint32_t c = threadIdx.x; c < k; c += blockDim.x) {
    sh.half_gap[c] = half_gap_of(__uint_as_float(sh.gap_bits[c]), b);
  }
  __syncthreads();
}

/// The full scan of the block's point at place e (its values at xs + e d) against the shared
/// centroids; a changed label moves its sums.
__device__ void rescan(const RunArgs& a, const RunShared& sh, RunScalars& v, const ex::ScreenBound& b, const float* xs,
                       std::uint32_t e) {
  const float* x = xs + std::size_t(e) * a.d;
  Nearest2 near;
  for (std::uint32_t c0 = 0; c0 < a.k; c0 += kScanGroup) {  // kScanGroup independent sums at once
    float acc[kScanGroup];
#pragma unroll
    for (int q = 0; q < kScanGroup; ++q) acc[q] = 0;
    for (std::uint32_t j = 0; j < a.d; ++j) {
      const float value = x[j];
#pragma unroll
      for (int q = 0; q < kScanGroup; ++q) {
        const float diff = value - sh.centroids[std::min(c0 + q, a.k - 1) * a.d + j];
        acc[q] = fmaf(diff, diff, acc[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kScanGroup; ++q) {
      if (c0 + q < a.k) near.take(acc[q], c0 + q);
    }
  }
  std::uint32_t best;
  double u, l;
  km::settle(x, sh.centroids, a.k, a.d, b, near.r1, near.j1, near.r2, best, u, l);
  const std::uint32_t from = sh.labels[e];
  if (from != best) {
    atomicAdd(&v.changed, 1u);
    for (std::uint32_t j = 0; j < a.d; ++j) {
      add_halves(sh.halves + (best * a.d + j) * kHalves, x[j], sh.tops[j], 1);
      add_halves(sh.halves + (from * a.d + j) * kHalves, x[j], sh.tops[j], -1);
    }
    int* counts = sh.halves + a.k * a.d * kHalves;
    atomicAdd(counts + best, 1);
    atomicAdd(counts + from, -1);
    sh.labels[e] = best;
  }
  write_bounds(sh.upper, sh.lower, e, u, l);
}

/// The labelling of the block's `count` points (their values at xs, row-major): Hamerly's test of
/// every point, the failing ones listed; then every thread of the block rescans listed points, so
/// a few failing points cost one rescan's time, not one each.
__device__ void label_points(const RunArgs& a, const RunShared& sh, RunScalars& v, const ex::ScreenBound& b,
                             const float* xs, std::uint32_t count) {
  for (std::uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::uint32_t c = sh.labels[e];
    double u = sh.upper[e], l = sh.lower[e];
    move_bounds(u, l, c, sh.delta[c], v.moves);
    if (keeps_label(xs + std::size_t(e) * a.d, sh.centroids + c * a.d, a.d, b, sh.half_gap[c], l, u)) {
      write_bounds(sh.upper, sh.lower, e, u, l);
    } else {
      sh.list[atomicAdd(&v.fill, 1u)] = std::uint16_t(e);
    }
  }
  __syncthreads();
  const std::uint32_t listed = v.fill;
  for (std::uint32_t f = threadIdx.x; f < listed; f += blockDim.x) rescan(a, sh, v, b, xs, sh.list[f]);
}

/// Adds the block's table to the iteration's global one (out) and zeroes it for the next.
__device__ void flush_moves(const RunArgs& a, const RunShared& sh, RunScalars& v, unsigned long long* out) {
  const std::uint32_t cells = a.k * a.d, words = cells * km::kSumDigits;
  for (std::uint32_t w = threadIdx.x; w < words; w += blockDim.x) {
    int* cell = sh.halves + (w / km::kSumDigits) * kHalves;
    const int b = int(w % km::kSumDigits);
    const std::int64_t digit = half_digit(cell, b);
    cell[2 * b] = 0;
    cell[2 * b + 1] = 0;
    if (digit != 0) atomicAdd(out + w, static_cast<unsigned long long>(digit));
  }
  int* counts = sh.halves + cells * kHalves;
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    if (counts[c] != 0) atomicAdd(out + words + c, static_cast<unsigned long long>(std::int64_t(counts[c])));
    counts[c] = 0;
  }
  if (threadIdx.x == 0) {
    if (v.changed != 0) atomicAdd(out + words + a.k, static_cast<unsigned long long>(v.changed));
    v.changed = 0;
    v.fill = 0;
  }
}

/// After the barrier: every block adds the iteration's moved sums to its copy.
__device__ void take_moves(const RunArgs& a, const RunShared& sh, RunScalars& v, const unsigned long long* in) {
  const std::uint32_t words = a.k * a.d * km::kSumDigits;
  for (std::uint32_t w = threadIdx.x; w < words; w += blockDim.x) {
    sh.digits[w] += static_cast<std::int64_t>(__ldcg(in + w));
  }
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    sh.counts[c] += static_cast<std::uint32_t>(__ldcg(in + words + c));
  }
  if (threadIdx.x == 0) v.total = static_cast<std::uint32_t>(__ldcg(in + words + a.k));
}

/// The float64 value of cell t's exact sum.
__device__ __forceinline__ double cell_sum(const RunShared& sh, std::uint32_t t, std::uint32_t d) {
  return km::digits_value(sh.digits + std::size_t(t) * km::kSumDigits, km::sum_unit(sh.tops[t % d]));
}

/// The means and their movements (means_kernel, shifts_kernel), the report of iteration `it`
/// (block 0) and the decision to stop (loop_stop, an empty cluster), in every block alike.
__device__ void update(const RunArgs& a, const RunShared& sh, RunScalars& v, std::uint32_t it) {
  const std::uint32_t cells = a.k * a.d;
  const bool writer = blockIdx.x == 0;
  for (std::uint32_t t = threadIdx.x; t < cells; t += blockDim.x) {
    const double sum = cell_sum(sh, t, a.d);
    sh.before[t] = sh.centroids[t];
    sh.centroids[t] = km::mean(sum, sh.counts[t / a.d]);
  }
  __syncthreads();
  double* report = a.reports + std::size_t(it) * a.report_doubles;
  auto* report_counts = reinterpret_cast<std::uint32_t*>(report + a.k);
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    const double s = km::squared_shift(sh.centroids + c * a.d, sh.before + c * a.d, a.d);
    sh.shift2[c] = s;
    sh.delta[c] = km::movement_bound(s, a.d);
    if (writer) {
      report[c] = s;
      report_counts[c] = sh.counts[c];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    Moves m{0.0, 0.0, 0u};  // in index order, as the host's loop
    bool empty = false;
    for (std::uint32_t c = 0; c < a.k; ++c) {
      take_move(m, sh.delta[c], c);
      empty = empty || sh.counts[c] == 0;
    }
    v.moves = m;
    v.stop = queued_stop(empty, v.total, sh.shift2, a.k, a.tol);
    if (writer) report_counts[a.k] = v.total;
  }
  __syncthreads();
}

/// Every block at the run's end: its points' labels and bounds back.
__device__ void write_points(const RunArgs& a, const RunShared& sh, std::uint32_t lo, std::uint32_t count) {
  for (std::uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
    a.labels[lo + e] = sh.labels[e];
    a.upper[lo + e] = sh.upper[e];
    a.lower[lo + e] = sh.lower[e];
  }
}

/// Block 0 at the run's end: the rest of the fit's arrays as the one-step kernels leave them.
__device__ void write_state(const RunArgs& a, const RunShared& sh, const RunScalars& v, std::uint32_t ran) {
  const std::uint32_t cells = a.k * a.d;
  for (std::uint32_t w = threadIdx.x; w < cells * km::kSumDigits; w += blockDim.x) {
    a.digits[w] = static_cast<unsigned long long>(sh.digits[w]);
  }
  for (std::uint32_t t = threadIdx.x; t < cells; t += blockDim.x) {
    a.centroids[t] = sh.centroids[t];
    a.before[t] = sh.before[t];
    a.sums[t] = cell_sum(sh, t, a.d);
  }
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    a.counts[c] = sh.counts[c];
    a.delta[c] = sh.delta[c];
  }
  if (threadIdx.x == 0) {
    *a.moves = v.moves;
    a.loop->ran = ran;
    a.loop->stop = std::uint32_t(v.stop);
  }
}

/// points_in_shared: RunPlan's (the block's points read from shared memory, copied at the start).
__global__ void __launch_bounds__(kRunThreads) run_kernel(RunArgs a, bool points_in_shared) {
  extern __shared__ __align__(16) unsigned char raw[];
  __shared__ RunScalars v;
  const std::uint32_t span = block_span(a.n, gridDim.x);
  const RunShared sh = carve(raw, a.k, a.d, span, points_in_shared);
  const std::uint32_t lo = std::min(a.n, blockIdx.x * span), count = std::min(a.n - lo, span);
  const std::uint32_t cells = a.k * a.d, words = cells * km::kSumDigits;
  const ex::ScreenBound bound = ex::screen_bound(a.d);
  for (std::uint32_t w = threadIdx.x; w < words; w += blockDim.x) sh.digits[w] = std::int64_t(a.digits[w]);
  for (std::uint32_t t = threadIdx.x; t < cells; t += blockDim.x) sh.centroids[t] = a.centroids[t];
  for (std::uint32_t w = threadIdx.x; w < cells * kHalves + a.k; w += blockDim.x) sh.halves[w] = 0;
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    sh.counts[c] = a.counts[c];
    sh.delta[c] = a.delta[c];
  }
  for (std::uint32_t j = threadIdx.x; j < a.d; j += blockDim.x) sh.tops[j] = a.tops[j];
  for (std::uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
    sh.labels[e] = a.labels[lo + e];
    sh.upper[e] = a.upper[lo + e];
    sh.lower[e] = a.lower[lo + e];
  }
  const float* xs = a.x + std::size_t(lo) * a.d;
  if (points_in_shared) {
    for (std::size_t w = threadIdx.x; w < std::size_t(count) * a.d; w += blockDim.x) sh.points[w] = xs[w];
    xs = sh.points;
  }
  if (threadIdx.x == 0) v = RunScalars{*a.moves, 0, 0, 0, 0};
  __syncthreads();
  half_gaps(sh, a.k, a.d, bound);
  const std::size_t table = table_words(a.k, a.d);
  cg::grid_group grid = cg::this_grid();
  for (std::uint32_t it = 0; it < a.count; ++it) {
    label_points(a, sh, v, bound, xs, count);
    __syncthreads();
    unsigned long long* moved = a.moved_sums + (it % kTables) * table;
    flush_moves(a, sh, v, moved);
    grid.sync();
    take_moves(a, sh, v, moved);
    if (blockIdx.x == 0 && it > 0) {
      unsigned long long* old = a.moved_sums + ((it + kTables - 1) % kTables) * table;
      for (std::size_t w = threadIdx.x; w < table; w += blockDim.x) old[w] = 0;
    }
    __syncthreads();
    update(a, sh, v, it);
    if (v.stop || it + 1 == a.count) {
      write_points(a, sh, lo, count);
      if (blockIdx.x == 0) write_state(a, sh, v, it + 1);
      return;
    }
    half_gaps(sh, a.k, a.d, bound);
  }
}

}  // namespace

std::size_t run_moved_words(std::uint32_t k, std::uint32_t d) { return kTables * table_words(k, d); }

RunPlan plan_run(std::uint32_t n, std::uint32_t k, std::uint32_t d) {
  if (n == 0 || k > kRunMaxClusters || std::uint64_t(k) * d > kRunMaxCells) return {};
  int device = 0, sms = 0, cooperative = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device), "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  if (cooperative == 0) return {};
  // The kernel's limit is a process-wide attribute: raised once to all that the opt-in leaves
  // beside the static state, so fits planned on several threads at once never lower it under
  // another's launch.
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, run_kernel), "cudaFuncGetAttributes", "kmeans run_kernel");
  const std::size_t limit = std::size_t(optin) > attributes.sharedSizeBytes ? optin - attributes.sharedSizeBytes : 0;
  check_cuda(cudaFuncSetAttribute(run_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(limit)),
             "cudaFuncSetAttribute", "kmeans run_kernel");
  // The most blocks a multiprocessor that hold their points' state in shared memory, all resident
  // (the barrier needs it), with the points themselves where they fit too; no more blocks than
  // blockDim-point spans.
  const std::uint64_t spans = (std::uint64_t(n) + kRunThreads - 1) / kRunThreads;
  for (int per_sm = kRunMaxBlocksPerSm; per_sm >= 1; --per_sm) {
    const auto blocks = unsigned(std::min<std::uint64_t>(std::uint64_t(sms) * unsigned(per_sm), spans));
    const std::uint32_t span = block_span(n, blocks);
    if (span > kMaxSpan) continue;
    for (const bool points : {true, false}) {
      const std::size_t dynamic = carve(nullptr, k, d, span, points).bytes;
      if (dynamic > limit) continue;
      int resident = 0;
      check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, run_kernel, kRunThreads, dynamic),
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "kmeans run_kernel");
      if (std::uint64_t(resident) * unsigned(sms) >= blocks) return RunPlan{blocks, kRunThreads, dynamic, points};
    }
  }
  return {};
}

void launch_run(const RunArgs& a, const RunPlan& plan, cudaStream_t s) {
  check_cuda(cudaMemsetAsync(a.moved_sums, 0, run_moved_words(a.k, a.d) * sizeof(unsigned long long), s),
             "cudaMemsetAsync", "kmeans moved sums");
  RunArgs args = a;
  bool points = plan.points_in_shared;
  void* params[] = {&args, &points};
  check_cuda(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(run_kernel), dim3(plan.blocks),
                                         dim3(plan.threads), params, plan.shared_bytes, s),
             "cudaLaunchCooperativeKernel", "kmeans run_kernel");
}

}  // namespace streamknn::detail::gpu::kmeans
