// The reduced-precision screen over the float16 or int8 copy (reduced.hpp). A block scores a
// group of up to 8 queries (grid.y: the groups), taking segments of the store from a counter
// shared by the group's blocks, so every block works until the store is done. Per segment it:
//   1. sums t = <q, x~> for each of its points and queries over the copy's 16-byte chunks (a
//      warp's 32 slots of one tile per load; float16: each chunk converted once for the whole
//      group; int8: byte dot products against the query's two code bytes, reduced_int8.cuh);
//   2. turns t into the lower bound L of the pair's exact rank (lower_bound, E7 of docs/cuda.md;
//      lower_bound_int8, E8);
//   3. after its first segment, publishes each query's smallest L; the block that does so last
//      lowers each query's grid-wide bound to the width-th of those (arrive_first);
//   4. appends every pair whose L is at or below its query's bounds (the list's width-th, the
//      grid's) to that query's list in shared memory (for groups of eight in rounds of one slot
//      per thread); a list longer than 2 width is cut to its width best (a warp per list at once
//      for groups of four and eight), whose width-th L then lowers the grid-wide bound.
// Each block then writes each query's entries within its grid-wide bound (at most the width best),
// ordered by counting, for the selection kernel.
#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>
#include <cstring>

#include "core/exact_rank.hpp"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/reduced.hpp"
#include "cuda/kernels/reduced_float16.cuh"
#include "cuda/kernels/reduced_int8.cuh"
#include "cuda/kernels/select.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr int kThreads = int(kReducedThreads);
/// The key of no pair (an erased slot, a slot past the store's end, a query past the batch).
constexpr std::uint32_t kNoKey = 0xffffffffu;
static_assert(kReducedMaxWidth <= kReducedThreads, "the last ordering by counting takes a thread per entry");
static_assert(kReducedMaxBlocks * sizeof(std::uint32_t) <= kReducedMaxWidth * sizeof(Candidate),
              "the first bound stages every block's key in the cut's scratch");

/// A thread's points per round of admission: a whole segment's for groups of up to four queries
/// (their lists have the room), one for groups of eight, whose lists would otherwise take the
/// shared memory of a second block per SM at width 144 (16-byte entries).
constexpr std::uint32_t round_points(std::uint32_t group) {
  return group <= 4 ? reduced_segment(group) / kReducedThreads : 1;
}

/// A list is cut once it holds more than 2 width entries, and a round admits at most
/// round_points entries per thread.
constexpr std::uint32_t list_capacity(std::uint32_t group, std::uint32_t width) {
  return 2 * width + kThreads * round_points(group);
}

/// The first-segment bound, run by warp 0 of each block once its first segment is scored (a
/// block that gets none arrives with no keys): publish each query's smallest key; the block that
/// arrives last takes, per query, the width-th smallest of all blocks' keys (that many distinct
/// points lie at or below it: a valid bound on the query's width-th) and lowers the grid-wide
/// bound to it, so the lists handed to the selection hold little past the width-th.
/// `staged`: room for gridDim.x keys (<= kReducedMaxBlocks).
__device__ __noinline__ void arrive_first(std::uint32_t* keys, std::uint32_t* arrivals, std::uint32_t* threshold,
                                          const std::uint32_t* smallest, std::uint32_t q0, std::uint32_t nq,
                                          std::uint32_t k, std::uint32_t* staged) {
  const std::uint32_t lane = threadIdx.x & 31, n = gridDim.x;
  if (lane < nq) keys[std::size_t(q0 + lane) * n + blockIdx.x] = smallest[lane];
  __threadfence();
  unsigned last = 0;
  if (lane == 0) last = atomicAdd(arrivals, 1u) == n - 1;
  if (!__shfl_sync(kFullMask, last, 0)) return;
  __threadfence();
  if (lane == 0) *arrivals = 0;  // every block has arrived: ready for the next launch
  for (std::uint32_t j = 0; j < nq; ++j) {
    const std::uint32_t kth = warp_kth(keys + std::size_t(q0 + j) * n, n, k, staged, lane);
    if (lane == 0 && kth < kNoBound) atomicMin(threshold + q0 + j, kth);
  }
}

/// The block's shared state beside the dynamic queries and lists.
struct BlockState {
  Candidate kept[kReducedMaxWidth];  // a cut's survivors; the first bound's staged keys
  std::uint32_t count[kReducedMaxQueries];
  std::uint32_t bound[kReducedMaxQueries];      // each list's width-th key since its last cut
  std::uint32_t first_min[kReducedMaxQueries];  // each query's smallest key of the first segment
  QueryTerms terms[kReducedMaxQueries];
  Terms8 terms8[kReducedMaxQueries];
  std::uint32_t kept_count, segment;
};

/// Cuts query j's list to its k best (L, id) (every thread calls it; more than k entries): their
/// k-th L then bounds the query, here and grid-wide.
__device__ void cut_list(BlockState& st, Candidate* list, std::uint32_t j, std::uint32_t k, std::uint32_t* threshold) {
  const std::uint32_t n = st.count[j];
  const Candidate kth = smem_kth(list, n, k);  // n > k real entries: a real one
  if (threadIdx.x == 0) st.kept_count = 0;
  __syncthreads();
  for (std::uint32_t i = threadIdx.x; i < n; i += kThreads) {
    const Candidate c = list[i];
    if (!less_candidate(kth, c)) st.kept[atomicAdd(&st.kept_count, 1u)] = c;
  }
  __syncthreads();
  for (std::uint32_t i = threadIdx.x; i < k; i += kThreads) list[i] = st.kept[i];  // (L, id) unique: k of them
  if (threadIdx.x == 0) {
    st.count[j] = k;
    st.bound[j] = ordered_bits(kth.rank);
    atomicMin(threshold, st.bound[j]);
  }
  __syncthreads();
}

/// Entries a lane holds of a list in warp_cut: a list holds at most list_capacity entries.
template <int QG>
constexpr int cut_keys_per_lane() {
  return int((list_capacity(QG, kReducedMaxWidth) + 31) / 32);
}

/// Cuts a list of n > k entries, by one warp, to those at or below its k-th key (at least k: ties
/// at that key stay), moved to the front in their order; returns how many stay and the key in
/// *kth. The k-th key is warp_search_kth over the keys' range, counting in the lanes' registers.
template <int kPerLane>
__device__ std::uint32_t warp_cut(Candidate* list, std::uint32_t n, std::uint32_t k, std::uint32_t lane,
                                  std::uint32_t* kth) {
  std::uint32_t key[kPerLane];
  std::uint32_t lo = kNoKey, hi = 0;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const std::uint32_t i = std::uint32_t(t) * 32 + lane;
    key[t] = i < n ? ordered_bits(list[i].rank) : kNoKey;  // a rank is never NaN: below kNoKey
    lo = min(lo, key[t]);
    hi = i < n ? max(hi, key[t]) : hi;
  }
  lo = warp_search_kth(__reduce_min_sync(kFullMask, lo), __reduce_max_sync(kFullMask, hi), k, [&](std::uint32_t mid) {
    std::uint32_t count = 0;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) count += key[t] <= mid;
    return count;
  });
  // In place, a row of 32 at a time: a row's entries are read before any is written, and what
  // is written lies before the next row.
  std::uint32_t kept = 0;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const std::uint32_t i = std::uint32_t(t) * 32 + lane;
    const bool keep = key[t] <= lo;
    Candidate c{};
    if (keep) c = list[i];
    const unsigned mask = __ballot_sync(kFullMask, keep);
    __syncwarp();
    if (keep) list[kept + __popc(mask & ((1u << lane) - 1))] = c;
    kept += __popc(mask);
    __syncwarp();
  }
  *kth = lo;
  return kept;
}

/// Cuts every list past 2 width (every thread; the caller's barrier orders the appends before
/// it). Groups of four and eight cut their lists at once, a warp each (warp_cut); a list still
/// past 2 width after that (ties at the k-th key), and the lists of smaller groups, take the
/// block's exact cut to the k best by (L, id), one list at a time.
template <int QG>
__device__ __forceinline__ void cut_lists(BlockState& st, Candidate* lists, std::uint32_t capacity,
                                          std::uint32_t* threshold, std::uint32_t nq, std::uint32_t k) {
  if constexpr (QG >= 4) {
    static_assert(QG <= kThreads / 32, "a warp per list");
    const std::uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < nq && st.count[warp] > 2 * k) {
      std::uint32_t kth;
      const std::uint32_t kept =
          warp_cut<cut_keys_per_lane<QG>()>(lists + std::size_t(warp) * capacity, st.count[warp], k, lane, &kth);
      __syncwarp();
      if (lane == 0) {  // what it dropped lies past k entries; more than 2 width left take the exact cut below
        st.count[warp] = kept;
        st.bound[warp] = kth;
        atomicMin(threshold + warp, kth);
      }
    }
    __syncthreads();
  }
  for (std::uint32_t j = 0; j < nq; ++j) {
    if (st.count[j] > 2 * k) cut_list(st, lists + std::size_t(j) * capacity, j, k, threshold + j);
  }
}

/// Query j's admission limit: its list's bound and the grid-wide bound (0 past the batch). Groups
/// of four and eight also keep the grid-wide bound they read in `grid`, for their admission.
template <int QG>
__device__ __forceinline__ std::uint32_t read_limit(const BlockState& st, const std::uint32_t* threshold, int j,
                                                    std::uint32_t nq, std::uint32_t& grid) {
  if constexpr (QG >= 4) {
    grid = j < int(nq) ? __ldcg(threshold + j) : 0u;
    return min(st.bound[j], grid);
  } else {
    return j < int(nq) ? min(st.bound[j], __ldcg(threshold + j)) : 0u;
  }
}

/// One round of admission: this thread's pairs of points [from, to) of the segment, for every
/// query whose key lies at or below the query's bounds (its list's width-th since the last cut,
/// the grid's: `grid` as read while scoring for groups of four and eight), join that query's
/// list; a list past 2 width entries is then cut (cut_lists). Every thread calls it (it holds barriers). The bounds it reads were written before the caller's barrier
/// or the last cut's; a round that is not the segment's last ends with a barrier, so no thread
/// appends again while another still reads the lengths (the next segment starts with one).
template <int QG, int P>
__device__ __forceinline__ void admit_round(BlockState& st, Candidate* lists, std::uint32_t capacity,
                                            const std::uint32_t (&key)[P][QG], const float (&rank)[P][QG], int from,
                                            int to, std::uint32_t first, const std::uint64_t* ids,
                                            const std::uint32_t (&grid)[QG], std::uint32_t* threshold,
                                            std::uint32_t nq, std::uint32_t k) {
  const std::uint32_t lane = threadIdx.x & 31;
  // Each query's bounds, then this thread's admitted ids, read first, their loads in flight
  // together (read between the appends, each was a round trip of its own). Groups of four and
  // eight take the grid-wide bounds as read while scoring (read_limit; a bound only falls, so an
  // earlier reading admits a superset): groups of eight paid that read in each of their two
  // rounds a segment. (Groups of one and two read them again: carrying them across the barrier
  // cost groups of two 3-4% in the same A/B.)
  std::uint32_t limit[QG];
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    std::uint32_t unused;
    limit[j] = QG >= 4 ? min(st.bound[j], grid[j]) : read_limit<QG>(st, threshold, j, nq, unused);
  }
  std::uint64_t id[P];
#pragma unroll
  for (int i = from; i < to; ++i) {
    bool wanted = false;
#pragma unroll
    for (int j = 0; j < QG; ++j) wanted |= key[i][j] != kNoKey && key[i][j] <= limit[j];
    id[i] = wanted ? __ldg(ids + first + i * kThreads + threadIdx.x) : 0;
  }
#pragma unroll
  for (int j = 0; j < QG; ++j) {
#pragma unroll
    for (int i = from; i < to; ++i) {
      const bool admit = key[i][j] != kNoKey && key[i][j] <= limit[j];
      const unsigned admitted = __ballot_sync(kFullMask, admit);
      if (admitted == 0) continue;
      std::uint32_t at = 0;
      if (lane == 0) at = atomicAdd(&st.count[j], std::uint32_t(__popc(admitted)));
      at = __shfl_sync(kFullMask, at, 0) + __popc(admitted & ((1u << lane) - 1));
      if (admit) {
        lists[std::size_t(j) * capacity + at] = Candidate{rank[i][j], first + i * kThreads + threadIdx.x, id[i]};
      }
    }
  }
  __syncthreads();
  cut_lists<QG>(st, lists, capacity, threshold, nq, k);
  if (to < P) __syncthreads();
}

/// Stages the group's queries, starts its lists and computes each query's terms (every thread).
template <int QG, bool kInnerProduct>
__device__ __forceinline__ void stage_group(const ScanParams& p, BlockState& st, float4* query, std::uint32_t chunks,
                                            std::uint32_t pairs, std::uint32_t q0, std::uint32_t nq,
                                            std::uint32_t stored_dim, std::uint32_t lane, std::uint32_t warp) {
  // The group's queries (zeros past the batch and past each row's chunks), their terms, the lists.
  const float4* rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
  for (std::uint32_t i = threadIdx.x; i < QG * 2 * pairs; i += kThreads) {
    const std::uint32_t j = i / (2 * pairs), c = i % (2 * pairs);
    query[i] = j < nq && c < chunks ? rows[std::size_t(j) * chunks + c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (threadIdx.x < QG) {
    st.count[threadIdx.x] = 0;
    st.bound[threadIdx.x] = kNoKey;
    st.first_min[threadIdx.x] = kNoKey;
  }
  __syncthreads();
  for (std::uint32_t j = warp; j < QG; j += kThreads / 32) {
    const QueryTerms t = query_terms(query + std::size_t(j) * 2 * pairs, 2 * pairs, stored_dim, kInnerProduct);
    if (lane == 0) st.terms[j] = t;
  }
  __syncthreads();
}

/// Finds this thread's points of the segment: their rows in the copy, bounds (float2 for the
/// float16 copy, float4 for int8) and liveness.
template <int P, typename Bounds>
__device__ __forceinline__ void locate_points(const StoreView& store, const uint4* vectors, const Bounds* meta,
                                              std::uint32_t first, std::uint32_t slots, std::uint32_t pairs,
                                              const uint4* (&row)[P], Bounds (&bounds)[P], bool (&live)[P]) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const std::uint32_t slot = first + i * kThreads + threadIdx.x;
    const std::uint32_t read = min(slot, slots - 1);
    row[i] = vectors + std::size_t(read / kTile) * pairs * kTile + read % kTile;
    live[i] = slot < slots && __ldg(store.valid + slot) != 0;
    bounds[i] = __ldg(meta + read);
  }
}

/// The int8 copy's stage_group: the group's query codes and terms (reduced_int8.cuh) in place of
/// the staged float queries, and the lists started (every thread).
template <int QG>
__device__ __forceinline__ void stage_group_int8(const ScanParams& p, BlockState& st, uint4* codes,
                                                 std::uint32_t chunks, std::uint32_t pairs, std::uint32_t q0,
                                                 std::uint32_t nq, std::uint32_t stored_dim, std::uint32_t lane,
                                                 std::uint32_t warp) {
  const float4* rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
  if (threadIdx.x < QG) {
    st.count[threadIdx.x] = 0;
    st.bound[threadIdx.x] = kNoKey;
    st.first_min[threadIdx.x] = kNoKey;
  }
  for (std::uint32_t j = warp; j < QG; j += kThreads / 32) {
    const Terms8 t = stage_query_int8(rows + std::size_t(j) * chunks, chunks, pairs, stored_dim, j < nq,
                                      codes + std::size_t(j) * pairs * 2);
    if (lane == 0) st.terms8[j] = t;
  }
  __syncthreads();
}

/// The int8 copy's start_points, score_points and rank_points for one segment: each pair's lower
/// bound L (in rank) and key, the grid-wide bounds it read (0 past the batch); whether any pair
/// lies within its query's bounds.
template <bool kInnerProduct, int QG, int P>
__device__ __forceinline__ bool score_segment_int8(const BlockState& st, const StoreView& store, const uint4* vectors,
                                                   const float4* meta, const uint4* codes, std::uint32_t first,
                                                   std::uint32_t slots, std::uint32_t pairs,
                                                   const std::uint32_t* threshold, std::uint32_t nq,
                                                   float (&rank)[P][QG], std::uint32_t (&key)[P][QG],
                                                   std::uint32_t (&grid)[QG]) {
  const uint4* row[P];
  float4 m[P];
  bool live[P];
  locate_points(store, vectors, meta, first, slots, pairs, row, m, live);
  int th[P][QG], tl[P][QG];
#pragma unroll
  for (int i = 0; i < P; ++i) {
#pragma unroll
    for (int j = 0; j < QG; ++j) th[i][j] = tl[i][j] = 0;
  }
  score_points_int8(codes, pairs, row, th, tl);
  bool any = false;
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    const std::uint32_t limit = read_limit<QG>(st, threshold, j, nq, grid[j]);
    const Terms8 t = st.terms8[j];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      rank[i][j] = lower_bound_int8<kInnerProduct>(th[i][j], tl[i][j], m[i], t);
      key[i][j] = live[i] && j < int(nq) ? ordered_bits(rank[i][j]) : kNoKey;
      any |= key[i][j] <= limit && key[i][j] != kNoKey;
    }
  }
  return any;
}

/// The block's next segment from the group's counter (every thread; a barrier).
__device__ __forceinline__ std::uint32_t take_segment(BlockState& st, std::uint32_t* work) {
  if (threadIdx.x == 0) st.segment = atomicAdd(&work[1], 1u);
  __syncthreads();
  return st.segment;
}

/// locate_points for the float16 copy, and the points' sums zeroed.
template <int QG, int P>
__device__ __forceinline__ void start_points(const StoreView& store, const uint4* vectors, const float2* meta,
                                             std::uint32_t first, std::uint32_t slots, std::uint32_t pairs,
                                             const uint4* (&row)[P], float2 (&bounds)[P], bool (&live)[P],
                                             float (&acc)[P][QG]) {
  locate_points(store, vectors, meta, first, slots, pairs, row, bounds, live);
#pragma unroll
  for (int i = 0; i < P; ++i) {
#pragma unroll
    for (int j = 0; j < QG; ++j) acc[i][j] = 0.0f;
  }
}

/// Turns each sum into its pair's lower bound L (in acc) and key, reading the grid-wide bounds
/// (0 past the batch); whether any pair lies within its query's bounds.
template <bool kInnerProduct, int QG, int P>
__device__ __forceinline__ bool rank_points(const BlockState& st, const std::uint32_t* threshold, std::uint32_t nq,
                                            const float2 (&bounds)[P], const bool (&live)[P], float (&acc)[P][QG],
                                            std::uint32_t (&key)[P][QG], std::uint32_t (&grid)[QG]) {
  bool any = false;
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    const std::uint32_t limit = read_limit<QG>(st, threshold, j, nq, grid[j]);
    const QueryTerms qt = st.terms[j];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float rank = lower_bound<kInnerProduct>(acc[i][j], bounds[i].x, bounds[i].y, qt);
      acc[i][j] = rank;  // kept for the admission below
      key[i][j] = live[i] && j < int(nq) ? ordered_bits(rank) : kNoKey;
      any |= key[i][j] <= limit && key[i][j] != kNoKey;
    }
  }
  return any;
}

/// The first segment's part of the first bound: each query's smallest key, then warp 0's arrival (every thread).
template <int QG, int P>
__device__ __forceinline__ void publish_first(const ScanParams& p, BlockState& st, std::uint32_t* work,
                                              const std::uint32_t (&key)[P][QG], std::uint32_t q0, std::uint32_t nq,
                                              std::uint32_t k, std::uint32_t lane, std::uint32_t warp) {
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    std::uint32_t smallest = kNoKey;
#pragma unroll
    for (int i = 0; i < P; ++i) smallest = min(smallest, key[i][j]);
    smallest = __reduce_min_sync(kFullMask, smallest);
    if (lane == 0 && smallest != kNoKey) atomicMin(&st.first_min[j], smallest);
  }
  __syncthreads();
  if (warp == 0) {
    arrive_first(p.first_keys, work, p.threshold, st.first_min, q0, nq, k, reinterpret_cast<std::uint32_t*>(st.kept));
  }
}

/// Ends the block's work on the store: the segment counter is ready for the next launch (every thread).
__device__ __forceinline__ void finish_segments(std::uint32_t* work) {
  // The last block done resets the segment counter (every block has taken its last segment).
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&work[2], 1u) == gridDim.x - 1) {
      work[1] = 0;
      work[2] = 0;
    }
  }
  __syncthreads();
}

/// Writes each query's list for the selection kernel (every thread): its entries within the
/// query's grid-wide bound (what lies past it cannot be among the query's k best), sorted, at
/// most k of them (the scan's layout, one list per block). Once the bounds are tight that is a
/// few entries of the block's list, gathered in one pass and ordered among themselves (ordering
/// the whole list took most of the kernel's tail at widths of 144). More than kReducedMaxWidth of
/// them are cut to the k best first.
__device__ __forceinline__ void write_lists(const ScanParams& p, BlockState& st, Candidate* lists,
                                            std::uint32_t capacity, std::uint32_t q0, std::uint32_t nq,
                                            std::uint32_t k) {
  for (std::uint32_t j = 0; j < nq; ++j) {
    Candidate* const list = lists + std::size_t(j) * capacity;
    // One reading of the bound for every thread (other blocks may still be lowering it).
    if (threadIdx.x == 0) {
      st.kept_count = 0;
      st.bound[j] = __ldcg(p.threshold + q0 + j);
    }
    __syncthreads();
    const std::uint32_t bound = st.bound[j];
    for (std::uint32_t i = threadIdx.x; i < st.count[j]; i += kThreads) {
      const Candidate c = list[i];
      if (ordered_bits(c.rank) > bound) continue;
      const std::uint32_t at = atomicAdd(&st.kept_count, 1u);
      if (at < kReducedMaxWidth) st.kept[at] = c;
    }
    __syncthreads();
    const std::size_t at = std::size_t(q0 + j) * gridDim.x + blockIdx.x;
    if (st.kept_count <= kReducedMaxWidth) {
      write_block_list(st.kept, st.kept_count, k, bound, p.candidates + at * k, p.lengths + at);
    } else {
      if (st.count[j] > std::uint32_t(kThreads)) cut_list(st, list, j, k, p.threshold + q0 + j);
      write_block_list(list, st.count[j], k, bound, p.candidates + at * k, p.lengths + at);
    }
  }
}

/// Blocks per SM each group's kernel is compiled for: ptxas left to itself capped the small
/// groups at 48 registers and spilled; these leave 64 registers to groups of one or two (whose
/// loads in flight want four blocks), 80 to groups of four and 128 to groups of eight (whose
/// lists hold two or three blocks per SM anyway).
constexpr int blocks_per_sm_bound(int group) { return group <= 2 ? 4 : group == 4 ? 3 : 2; }

template <int QG, bool kInnerProduct, bool kInt8>
__global__ void __launch_bounds__(kThreads, blocks_per_sm_bound(QG))
    reduced_screen_kernel(ScanParams p, std::uint32_t stored_dim) {
  start_chained_kernel();
  constexpr int P = int(reduced_segment(QG)) / kThreads;  // points per thread
  extern __shared__ __align__(16) unsigned char shared_raw[];
  __shared__ BlockState st;
  const StoreView& store = *p.store;
  const std::uint32_t slots = store.slot_count, pairs = store.reduced_pairs, chunks = store.chunks, k = p.k;
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = blockIdx.y;
  const std::uint32_t q0 = group * QG, nq = min(std::uint32_t(QG), p.num_queries - q0);
  const std::uint32_t capacity = list_capacity(QG, k);
  float4* const query = reinterpret_cast<float4*>(shared_raw);  // QG rows of 2 pairs float4
  Candidate* const lists = reinterpret_cast<Candidate*>(shared_raw + std::size_t(QG) * pairs * 32);
  std::uint32_t* const work = p.first_arrivals + std::size_t(group) * kReducedCounters;
  const uint4* const vectors = static_cast<const uint4*>(store.reduced);
  const float2* const meta = reinterpret_cast<const float2*>(store.reduced_meta);
  const bool first_bound = p.first_keys != nullptr;

  if constexpr (kInt8) {
    stage_group_int8<QG>(p, st, reinterpret_cast<uint4*>(shared_raw), chunks, pairs, q0, nq, stored_dim, lane, warp);
  } else {
    stage_group<QG, kInnerProduct>(p, st, query, chunks, pairs, q0, nq, stored_dim, lane, warp);
  }

  const std::uint32_t segments = (slots + reduced_segment(QG) - 1) / reduced_segment(QG);
  bool first_segment = true;
  for (;;) {
    const std::uint32_t segment = take_segment(st, work);
    if (segment >= segments) break;
    const std::uint32_t first = segment * reduced_segment(QG);
    // Point i of this thread is slot first + i * kThreads + threadIdx.x: each warp's i-th points
    // are one tile. Slots past the end read the last slot's chunks (in bounds) and admit nothing.
    float acc[P][QG];
    std::uint32_t key[P][QG], grid[QG];
    bool any;
    if constexpr (kInt8) {
      const auto* meta8 = reinterpret_cast<const float4*>(store.reduced_meta);
      any = score_segment_int8<kInnerProduct, QG, P>(st, store, vectors, meta8, reinterpret_cast<const uint4*>(shared_raw),
                                                     first, slots, pairs, p.threshold + q0, nq, acc, key, grid);
    } else {
      const uint4* row[P];
      float2 bounds[P];
      bool live[P];
      start_points(store, vectors, meta, first, slots, pairs, row, bounds, live, acc);
      score_points(query, pairs, row, acc);
      any = rank_points<kInnerProduct>(st, p.threshold + q0, nq, bounds, live, acc, key, grid);
    }
    if (first_bound && first_segment) {
      first_segment = false;
      publish_first(p, st, work, key, q0, nq, k, lane, warp);
    }
    // Every thread has read the lists' lengths and bounds before this barrier, and no thread
    // appends before it; a segment with nothing to admit (most, once the bounds are tight) ends here.
    if (!__syncthreads_or(any)) continue;
    constexpr int R = int(round_points(QG));
#pragma unroll
    for (int r = 0; r < P; r += R) {
      admit_round(st, lists, capacity, key, acc, r, r + R, first, store.ids, grid, p.threshold + q0, nq, k);
    }
  }
  // A block that scored no segment still arrives for the first bound.
  if (first_bound && first_segment && warp == 0) {
    arrive_first(p.first_keys, work, p.threshold, st.first_min, q0, nq, k, reinterpret_cast<std::uint32_t*>(st.kept));
  }
  finish_segments(work);
  write_lists(p, st, lists, capacity, q0, nq, k);
}

using ScreenKernel = void (*)(ScanParams, std::uint32_t);

template <int QG>
ScreenKernel kernel_for_group(bool inner_product, ReducedFormat format) {
  if (format == ReducedFormat::Int8) {
    return inner_product ? reduced_screen_kernel<QG, true, true> : reduced_screen_kernel<QG, false, true>;
  }
  return inner_product ? reduced_screen_kernel<QG, true, false> : reduced_screen_kernel<QG, false, false>;
}

ScreenKernel kernel_for(std::uint32_t group, bool inner_product, ReducedFormat format) {
  switch (group) {
    case 1: return kernel_for_group<1>(inner_product, format);
    case 2: return kernel_for_group<2>(inner_product, format);
    case 4: return kernel_for_group<4>(inner_product, format);
    default: return kernel_for_group<8>(inner_product, format);
  }
}

}  // namespace

std::size_t reduced_shared_bytes(std::uint32_t group, std::uint32_t width, std::uint32_t pairs) {
  return std::size_t(group) * pairs * 32 + std::size_t(group) * list_capacity(group, width) * sizeof(Candidate);
}

int reduced_blocks_per_sm(bool inner_product, ReducedFormat format, std::uint32_t group, std::uint32_t width,
                          std::uint32_t pairs, std::size_t optin) {
  // The limit is raised to all that the opt-in leaves beside the static state (a process-wide
  // attribute, so every store's blocks fit whatever the order of the stores).
  const ScreenKernel kernel = kernel_for(group, inner_product, format);
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes(reduced_screen_kernel)");
  const std::size_t limit = optin > attributes.sharedSizeBytes ? optin - attributes.sharedSizeBytes : 0;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(limit)),
             "cudaFuncSetAttribute(reduced_screen_kernel)");
  const std::size_t shared = reduced_shared_bytes(group, width, pairs);
  if (shared > limit) return 0;
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shared),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor(reduced_screen_kernel)");
  return per_sm;
}

void launch_reduced_screen(const ScanParams& p, std::uint32_t blocks, std::uint32_t group, std::uint32_t stored_dim,
                           bool inner_product, ReducedFormat format, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  const dim3 grid(blocks, (p.num_queries + group - 1) / group);
  const std::size_t shared = reduced_shared_bytes(group, p.k, reduced_pairs_for(chunks_for(stored_dim), format));
  launch_chained("reduced_screen_kernel", kernel_for(group, inner_product, format), grid, kThreads, shared, stream, p,
                 stored_dim);
}

}  // namespace streamknn::detail::gpu
