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
// turn. A changed label is kept as a move (the point, its old and new cluster); after each round
// of rescans every thread takes its share of the round's moves into the exact digits of one cell
// of the k x d table (MoveSums), and after the pass each cell's lanes add the non-zero digits to
// the iteration's global table of moved sums. Three such tables take turns: iteration i adds to table
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
// More blocks a multiprocessor add to the barrier and to the update every block works out for
// itself (4: 1.03-1.09x the time at 16 x 2 and 16 x 16; 2: no faster).
constexpr int kRunMaxBlocksPerSm = 3;
constexpr std::uint32_t kMaxSpan = 65536;  // the list's and the moves' 16-bit places
static_assert(kRunMaxClusters <= 256, "a move packs its labels in 8 bits each (pack_move)");

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
  float* delta_up;          // k: delta rounded up to float32 (Hamerly's test)
  float* centroids;         // k x d
  float* before;            // k x d
  std::uint32_t* moves;     // kRunThreads: a round of rescans' changed labels (pack_move)
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
  s.delta_up = reinterpret_cast<float*>(take(k * sizeof(float)));
  s.centroids = reinterpret_cast<float*>(take(cells * sizeof(float)));
  s.before = reinterpret_cast<float*>(take(cells * sizeof(float)));
  s.moves = reinterpret_cast<std::uint32_t*>(take(kRunThreads * sizeof(std::uint32_t)));
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
  Moves32 moves_up;        // rounded up to float32 (Hamerly's test)
  std::uint32_t fill;      // the block's listed points
  std::uint32_t changed;   // the block's changed labels this iteration
  std::uint32_t total;     // every block's, after the barrier
  int stop;
};

/// The smallest screen from each centroid to another (gap_bits, set to +inf before), threads
/// `first`.. of the block taking the k x k pairs in turn.
__device__ void screen_pairs(const RunShared& sh, std::uint32_t k, std::uint32_t d, std::uint32_t first) {
  for (std::uint32_t p = threadIdx.x - first; p < k * k; p += blockDim.x - first) {
    const std::uint32_t c = p % k, o = p / k;  // a warp's lanes: different centroids' minima
    if (c == o) continue;
    const float r = km::screen(sh.centroids + c * d, sh.centroids + o * d, d);
    atomicMin(sh.gap_bits + c, __float_as_uint(r));  // r >= 0: its bits order as the values
  }
}

/// half_gap[c] as half_gap_kernel computes it (half_gap_of the smallest screen to another centroid).
__device__ void half_gaps(const RunShared& sh, std::uint32_t k, std::uint32_t d, const Bound32& b) {
  for (std::uint32_t c = threadIdx.x; c < k; c += blockDim.x) sh.gap_bits[c] = __float_as_uint(km::kInfinityF);
  __syncthreads();
  screen_pairs(sh, k, d, 0);
  __syncthreads();
  for (std::uint32_t c = threadIdx.x; c < k; c += blockDim.x) {
    sh.half_gap[c] = half_gap_of(__uint_as_float(sh.gap_bits[c]), b);
  }
  __syncthreads();
}

/// A changed label: the point's place in the block's range, its old and new cluster.
__device__ __forceinline__ std::uint32_t pack_move(std::uint32_t e, std::uint32_t from, std::uint32_t to) {
  return e | from << 16 | to << 24;
}

/// A thread's share of the block's moved sums: one cell (c, j) of the k x d table, its digits and
/// (for j = 0) the cluster's count, from every `lanes`-th move of each round; the cell's lanes
/// (consecutive lanes of one warp) add theirs up at the flush. Integers: the order of additions
/// never changes a bit. (Shared atomics per moved point would contend wherever many points move to
/// one cluster: a round's rescans all waiting on the same few words.)
struct MoveSums {
  std::uint32_t cell, lanes;
  std::int64_t digit[km::kSumDigits] = {};
  int count = 0;

  __device__ MoveSums(std::uint32_t k, std::uint32_t d) {
    lanes = 1;
    while (lanes < 32 && 2 * lanes * k * d <= blockDim.x) lanes *= 2;
    cell = threadIdx.x / lanes;
  }

  /// Adds the `count` moves of a round (their points at xs).
  __device__ void add(const RunShared& sh, const float* xs, std::uint32_t k, std::uint32_t d, std::uint32_t moves) {
    if (cell >= k * d) return;
    const std::uint32_t c = cell / d, j = cell % d;
    for (std::uint32_t i = threadIdx.x % lanes; i < moves; i += lanes) {
      const std::uint32_t m = sh.moves[i], from = (m >> 16) & 0xffu, to = m >> 24;
      if (from != c && to != c) continue;
      const km::DigitTerms t = km::digit_terms(xs[std::size_t(m & 0xffffu) * d + j], sh.tops[j]);
      const std::int64_t sign = to == c ? 1 : -1;
#pragma unroll
      for (int b = 0; b < km::kSumDigits; ++b) {
        digit[b] += sign * (b == t.at ? t.low : b == t.at + 1 ? t.high : 0);
      }
      count += int(sign);
    }
  }

  /// The cell's lanes add up their sums; the first adds the non-zero ones to the iteration's
  /// global table (out: k x d x kSumDigits digits, then k counts).
  __device__ void flush(std::uint32_t k, std::uint32_t d, unsigned long long* out) {
    // Most cells of most blocks move nothing in late iterations: a warp skips its zero digits.
#pragma unroll
    for (int b = 0; b < km::kSumDigits; ++b) {
      if (!__any_sync(0xffffffffu, digit[b] != 0)) continue;
      for (std::uint32_t o = lanes / 2; o > 0; o /= 2) digit[b] += __shfl_xor_sync(0xffffffffu, digit[b], int(o));
    }
    if (__any_sync(0xffffffffu, count != 0)) {
      for (std::uint32_t o = lanes / 2; o > 0; o /= 2) count += __shfl_xor_sync(0xffffffffu, count, int(o));
    }
    if (cell >= k * d || threadIdx.x % lanes != 0) return;
#pragma unroll
    for (int b = 0; b < km::kSumDigits; ++b) {
      if (digit[b] != 0) atomicAdd(out + cell * km::kSumDigits + b, static_cast<unsigned long long>(digit[b]));
    }
    if (cell % d == 0 && count != 0) {
      atomicAdd(out + std::size_t(k) * d * km::kSumDigits + cell / d, static_cast<unsigned long long>(std::int64_t(count)));
    }
  }
};

/// The full scan of the block's point at place e (its values at xs + e d) against the shared
/// centroids; a changed label is kept as a move.
__device__ void rescan(const RunArgs& a, const RunShared& sh, RunScalars& v, const km::PruneBound& b,
                       const Bound32& b32, const float* xs, std::uint32_t e, std::uint32_t round_start) {
  const float* x = xs + std::size_t(e) * a.d;
  km::NearestTwo near;
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
  float u, l;
  settle32(x, sh.centroids, a.k, a.d, b, b32, near, best, u, l);
  const std::uint32_t from = sh.labels[e];
  if (from != best) {
    sh.moves[atomicAdd(&v.changed, 1u) - round_start] = pack_move(e, from, best);
    sh.labels[e] = best;
  }
  sh.upper[e] = u;
  sh.lower[e] = l;
}

/// The labelling of the block's `count` points (their values at xs, row-major): Hamerly's test of
/// every point, the failing ones listed; then every thread of the block rescans listed points, so
/// a few failing points cost one rescan's time, not one each, in rounds of one per thread, whose
/// moves each thread's share of the sums takes in after the round.
__device__ void label_points(const RunArgs& a, const RunShared& sh, RunScalars& v, const km::PruneBound& b,
                             const Bound32& b32, const float* xs, std::uint32_t count, MoveSums& sums) {
  for (std::uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::uint32_t c = sh.labels[e];
    float u = sh.upper[e], l = sh.lower[e];
    if (keeps_label(xs + std::size_t(e) * a.d, sh.centroids + c * a.d, a.d, b32, sh.half_gap[c], sh.delta_up[c],
                    v.moves_up.other_than(c), u, l)) {
      sh.upper[e] = u;
      sh.lower[e] = l;
    } else {
      sh.list[atomicAdd(&v.fill, 1u)] = std::uint16_t(e);
    }
  }
  __syncthreads();
  const std::uint32_t listed = v.fill;
  std::uint32_t done = 0;  // the moves of the rounds before (v.changed is 0 at the labelling's start)
  for (std::uint32_t round = 0; round < listed; round += blockDim.x) {
    if (round + threadIdx.x < listed) rescan(a, sh, v, b, b32, xs, sh.list[round + threadIdx.x], done);
    __syncthreads();
    const std::uint32_t moved = v.changed - done;
    sums.add(sh, xs, a.k, a.d, moved);
    done += moved;
    __syncthreads();
  }
}

/// Adds the block's moved sums to the iteration's global table (out) and resets them.
__device__ void flush_moves(const RunArgs& a, RunScalars& v, MoveSums& sums, unsigned long long* out) {
  sums.flush(a.k, a.d, out);
  sums = MoveSums(a.k, a.d);
  if (threadIdx.x == 0) {
    if (v.changed != 0) atomicAdd(out + table_words(a.k, a.d) - 1, static_cast<unsigned long long>(v.changed));
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

/// A lane's share of the movement bounds in index order (take_move's rule: the first of equal
/// largest is argmax, max2 the largest of the others), merged across the warp by index.
struct LargestTwo {
  double max1 = -1, max2 = -1;  // below every bound (bounds are >= 0)
  std::uint32_t argmax = ~0u;
  __device__ void take(double b, std::uint32_t c) {  // c increasing
    if (b > max1) {
      max2 = max1;
      max1 = b;
      argmax = c;
    } else if (b > max2) {
      max2 = b;
    }
  }
  __device__ void merge_warp() {
    for (int o = 16; o > 0; o /= 2) {
      const double m1 = __shfl_xor_sync(0xffffffffu, max1, o), m2 = __shfl_xor_sync(0xffffffffu, max2, o);
      const std::uint32_t at = __shfl_xor_sync(0xffffffffu, argmax, o);
      if (m1 > max1 || (m1 == max1 && at < argmax)) {
        max2 = fmax(max1, m2);
        max1 = m1;
        argmax = at;
      } else {
        max2 = fmax(max2, m1);
      }
    }
  }
  /// As the host's loop from {0, 0, 0} leaves them (k >= 1: max1 >= 0 and argmax set).
  __device__ Moves moves() const { return Moves{max1, fmax(max2, 0.0), argmax}; }
};

/// Warp 0 after the means: each centroid's movement and its bound (shifts_kernel), the report of
/// iteration `it` (block 0), the largest two bounds and the decision to stop (loop_stop, an
/// empty cluster), as the host's loop decides in index order.
__device__ void movements(const RunArgs& a, const RunShared& sh, RunScalars& v, std::uint32_t it) {
  const bool writer = blockIdx.x == 0;
  double* report = a.reports + std::size_t(it) * a.report_doubles;
  auto* report_counts = reinterpret_cast<std::uint32_t*>(report + a.k);
  LargestTwo top;
  bool empty = false;
  for (std::uint32_t c = threadIdx.x; c < a.k; c += 32) {
    const double s = km::squared_shift(sh.centroids + c * a.d, sh.before + c * a.d, a.d);
    sh.shift2[c] = s;
    const double delta = km::movement_bound(s, a.d);
    sh.delta[c] = delta;
    sh.delta_up[c] = __double2float_ru(delta);
    top.take(delta, c);
    empty = empty || sh.counts[c] == 0;
    if (writer) {
      report[c] = s;
      report_counts[c] = sh.counts[c];
    }
  }
  top.merge_warp();
  empty = __any_sync(0xffffffffu, empty);
  __syncwarp();
  if (threadIdx.x == 0) {
    v.moves = top.moves();
    v.moves_up = moves32(v.moves);
    v.stop = queued_stop(empty, v.total, sh.shift2, a.k, a.tol);
    if (writer) report_counts[a.k] = v.total;
  }
}

/// The means (means_kernel), then at once warp 0's movements and the decision to stop while the
/// other warps screen the centroid pairs, then the next half gaps (half_gap_kernel): the work of
/// an update in every block alike, in three block barriers.
__device__ void update(const RunArgs& a, const RunShared& sh, RunScalars& v, std::uint32_t it, const Bound32& b) {
  const std::uint32_t cells = a.k * a.d;
  for (std::uint32_t t = threadIdx.x; t < cells; t += blockDim.x) {
    const double sum = cell_sum(sh, t, a.d);
    sh.before[t] = sh.centroids[t];
    sh.centroids[t] = km::mean(sum, sh.counts[t / a.d]);
  }
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) sh.gap_bits[c] = __float_as_uint(km::kInfinityF);
  __syncthreads();
  if (threadIdx.x < 32) {
    movements(a, sh, v, it);
  } else {
    screen_pairs(sh, a.k, a.d, 32);
  }
  __syncthreads();
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    sh.half_gap[c] = half_gap_of(__uint_as_float(sh.gap_bits[c]), b);
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
__global__ void __launch_bounds__(kRunThreads, kRunMaxBlocksPerSm) run_kernel(RunArgs a, bool points_in_shared) {
  extern __shared__ __align__(16) unsigned char raw[];
  __shared__ RunScalars v;
  const std::uint32_t span = block_span(a.n, gridDim.x);
  const RunShared sh = carve(raw, a.k, a.d, span, points_in_shared);
  const std::uint32_t lo = std::min(a.n, blockIdx.x * span), count = std::min(a.n - lo, span);
  const std::uint32_t cells = a.k * a.d, words = cells * km::kSumDigits;
  const km::PruneBound bound = a.bound;
  const Bound32 bound_up = bound32(bound);
  for (std::uint32_t w = threadIdx.x; w < words; w += blockDim.x) sh.digits[w] = std::int64_t(a.digits[w]);
  for (std::uint32_t t = threadIdx.x; t < cells; t += blockDim.x) sh.centroids[t] = a.centroids[t];
  for (std::uint32_t c = threadIdx.x; c < a.k; c += blockDim.x) {
    sh.counts[c] = a.counts[c];
    sh.delta[c] = a.delta[c];
    sh.delta_up[c] = __double2float_ru(a.delta[c]);
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
  if (threadIdx.x == 0) v = RunScalars{*a.moves, moves32(*a.moves), 0, 0, 0, 0};
  __syncthreads();
  half_gaps(sh, a.k, a.d, bound_up);
  const std::size_t table = table_words(a.k, a.d);
  cg::grid_group grid = cg::this_grid();
  MoveSums sums(a.k, a.d);
  for (std::uint32_t it = 0; it < a.count; ++it) {
    label_points(a, sh, v, bound, bound_up, xs, count, sums);
    __syncthreads();
    unsigned long long* moved = a.moved_sums + (it % kTables) * table;
    flush_moves(a, v, sums, moved);
    grid.sync();
    take_moves(a, sh, v, moved);
    if (blockIdx.x == 0 && it > 0) {
      unsigned long long* old = a.moved_sums + ((it + kTables - 1) % kTables) * table;
      for (std::size_t w = threadIdx.x; w < table; w += blockDim.x) old[w] = 0;
    }
    __syncthreads();
    update(a, sh, v, it, bound_up);
    if (v.stop || it + 1 == a.count) {
      write_points(a, sh, lo, count);
      if (blockIdx.x == 0) write_state(a, sh, v, it + 1);
      return;
    }
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
