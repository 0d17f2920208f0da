// The query-resident scan (launch_resident): large batches over stores of one float4 chunk.
//
// The scan ranks one point per lane against a group of at most 16 queries read from shared
// memory, so on a store of 2-D points a (point, query) pair cost 9-14 instructions (ncu,
// 1,000,000 x 2, Q = 1,024) for a rank of 6 flops. Here each lane keeps kQueries queries in
// registers and every lane of a warp reads the same points from shared memory (broadcast reads,
// 4 points per 16-byte load), so a pair costs the dot-product screen's FMAs (two for 2-D points:
// fl(|x|^2 - 2 x.q), |x|^2 computed once per point when it is staged) and one compare folded
// into a predicate. The warps of a block hold the same 128 queries (lane l, j: query 32 j + l of
// the block's row) and split the block's share of the store between them, a tile of 128 points
// (4 per lane) at a time. Each lane marks the tile's groups of 4 points where some pair passes
// the screen, and after the tile the lanes work through their marked groups together: the
// pairs that pass get their exact rank (accumulate: the scan's bits), and those within the
// query's bound enter the warp's list for the query (ScanParams::warp_lists): up to k (rank,
// slot) entries, unsorted; once full its largest entry is replaced, and its k-th bounds the
// query for every warp of the block (a filtered search admits only the points in the query's id
// range that pass its predicate, tested after the exact rank: filter_admits). At the end the
// block gathers each query's entries from its warps' lists into shared memory at once, orders
// them by counting and writes one sorted list per query with its length within the grid-wide
// bound: the scan's layout (grid.x lists per query) for the selection kernel.
//
// Why the screen drops no pair within the bound. u = 2^-24. For a point x of w <= 4 elements
// and a query q the kernel evaluates V = fma(a_1, x_1, fma(a_2, x_2, ... fma(a_w, x_w, N))),
// a_i = -2 q_i (exact), N = fl(|x|^2) (w roundings, so |N - X| <= 4.1 u X, X = |x|^2). Each FMA
// rounds once; write V = fl(N - 2 P') for the last one, where 2 (P' - x.q) collects the first
// w - 1 roundings, each at most u (1 + u)^4 (N + 2 |x||q|): |2 (P' - x.q)| <= 3.1 u (N + 2 |x||q|).
// So N - 2 P' = d^2 - Qn + e with |e| <= |N - X| + 2 |P' - x.q| <= 7.3 u X + 6.2 u |x||q|, within
// the g (X + 2 |x||q|) that screen_bounds' proof (screen.cpp) allows for a padded dimension of 4
// (g = 12 u / (1 - 12 u)). The rest of that proof (one rounding of N - 2 P, the exact rank's
// relation to d^2, qn a float sum) holds unchanged: a pair whose exact rank is at most T passes
// V <= A T - B qn + C N, and C N <= C max(N) over the staged tile, which is the test here (rounded
// up as in the scan). Norms of screen_bounds' `huge` or more, a point's or a query's, send their
// pairs to the exact rank unconditionally.
#include <math_constants.h>

#include <algorithm>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/resident.hpp"

namespace streamknn::detail::gpu {

namespace {

constexpr int kQueries = int(kResidentQueriesPerThread);
constexpr int kMaxWarps = int(kResidentMaxWarps);
constexpr std::uint32_t kGroups = 32;  // groups of 4 points per warp tile (one per lane)
constexpr std::uint32_t kTilePoints = kResidentTile;
constexpr std::uint32_t kSlots = kResidentQueriesPerBlock;  // query slots per block: slot 32 j + lane
static_assert(kTilePoints == 4 * kGroups && kSlots == 32 * kQueries && 4 * kQueries <= 32);
constexpr unsigned kAllPairs = 4 * kQueries == 32 ? ~0u : (1u << (4 * kQueries)) - 1;  // a group's pairs, one bit each
// The merge gathers one slot's lists (warps x k entries) into the warps' staging, which holds
// 208 Candidates per warp at two elements (more at four).
static_assert(kResidentMaxK <= 208);

/// An entry of a warp's list while the scan runs: the rank and slot (the id is read only where
/// ranks tie, and when the block merges its lists).
struct Entry {
  float rank;
  std::uint32_t slot;
};

/// A query's state in one warp beside its registers (read and written where a pair passes the
/// screen): its bound and screen limit, its list's length and, once full, the list's largest entry.
struct QueryState {
  float bound;   // the exact rank a pair needs to enter the list (NaN: no query)
  float limit;   // A bound - B |q|^2 + slack, rounded up (the screen's limit before C max(N))
  float norm;    // |q|^2
  std::uint32_t count;
  Entry largest;
  std::uint32_t largest_at;
  std::uint32_t padding;  // 32 bytes
};

/// Dynamic shared memory of a block of `warps` warps: the warps' staged tiles (two each, so that
/// each lane can load the next while the warp scores this one: element e of points 4 g .. 4 g + 3,
/// their squared norms and their valid flags), reused as the merge's scratch at the end; the
/// warps' query states; the block's queries, their bounds across warps, and the merge's per-slot
/// totals, offsets and lengths.
struct Layout {
  std::size_t stage_bytes, coord, norm, valid, state, queries, bounds, totals, starts, kept, total;
  std::uint32_t merge_capacity;  // Candidates the staging area holds
};
__host__ __device__ inline Layout layout_for(int width, std::uint32_t warps) {
  Layout l{};
  l.coord = 0;
  l.norm = l.coord + std::size_t(2) * width * kGroups * sizeof(float4);
  l.valid = l.norm + std::size_t(2) * kGroups * sizeof(float4);
  l.stage_bytes = l.valid + std::size_t(2) * kGroups * sizeof(std::uint32_t);  // per warp, a multiple of 16
  std::size_t off = l.stage_bytes * warps;
  l.merge_capacity = std::uint32_t(off / sizeof(Candidate));
  auto place = [&](std::size_t& at, std::size_t bytes) {
    at = off;
    off += (bytes + 15) & ~std::size_t(15);
  };
  place(l.state, std::size_t(warps) * kQueries * 32 * sizeof(QueryState));
  place(l.queries, std::size_t(kSlots) * sizeof(float4));
  place(l.bounds, std::size_t(kSlots) * sizeof(std::uint32_t));
  place(l.totals, std::size_t(kSlots) * sizeof(std::uint32_t));
  place(l.starts, std::size_t(kSlots + 1) * sizeof(std::uint32_t));
  place(l.kept, std::size_t(kSlots) * sizeof(std::uint32_t));
  l.total = off;
  return l;
}

/// The screened value fl(|x|^2 - 2 x.q) of point i of a staged group (elements x[e], norms n)
/// against a query's coefficients a = -2 q: the FMA chain from |x|^2 that the file comment's
/// proof covers. The screen's loop and the pass over its marked groups both call it, so a pair
/// that passed the one passes the other.
template <int kWidth>
__device__ __forceinline__ float screened(const float (&a)[kWidth], const float4 (&x)[kWidth], const float4& n, int i) {
  float s = (&n.x)[i];
#pragma unroll
  for (int e = kWidth - 1; e >= 0; --e) s = __fmaf_rn(a[e], (&x[e].x)[i], s);
  return s;
}

/// The block's merge at the end of the scan (every thread calls it): every slot's entries (its
/// warps' lists one after another) are gathered into the staging area, as many slots at once as
/// it holds (all of them, where the bound kept the lists short), each entry's place among its
/// query's entries is counted, and the k best are written with the count of those within the
/// grid-wide bound (what lies past it cannot be among the k best). Out of line: inlined, its
/// registers made ptxas spill the scan loop's.
__device__ __noinline__ void merge_lists(const Layout layout, unsigned char* shared, const Entry* warp_lists,
                                         const std::uint64_t* ids, const std::uint32_t* threshold, Candidate* candidates,
                                         std::uint32_t* lengths, std::uint32_t num_queries, std::uint32_t k,
                                         std::uint32_t first_query, std::uint32_t warps) {
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const QueryState* const all_states = reinterpret_cast<const QueryState*>(shared + layout.state);
  std::uint32_t* const block_bound = reinterpret_cast<std::uint32_t*>(shared + layout.bounds);
  auto warp_list = [&](std::uint32_t query, std::uint32_t w) {
    return warp_lists + ((std::size_t(query) * gridDim.x + blockIdx.x) * warps + w) * k;
  };
  Candidate* const scratch = reinterpret_cast<Candidate*>(shared);
  std::uint32_t* const totals = reinterpret_cast<std::uint32_t*>(shared + layout.totals);
  std::uint32_t* const starts = reinterpret_cast<std::uint32_t*>(shared + layout.starts);
  std::uint32_t* const kept = reinterpret_cast<std::uint32_t*>(shared + layout.kept);
  auto count_of = [&](std::uint32_t w, std::uint32_t slot) { return all_states[w * kSlots + slot].count; };
  for (std::uint32_t i = threadIdx.x; i < kSlots; i += blockDim.x) {
    std::uint32_t total = 0;
    for (std::uint32_t w = 0; w < warps; ++w) total += count_of(w, i);
    totals[i] = total;
    kept[i] = 0;
    block_bound[i] = first_query + i < num_queries ? __ldcg(threshold + first_query + i) : 0u;
  }
  __syncthreads();
  if (warp == 0) {  // starts: the exclusive prefix sums of the totals (4 slots per lane)
    std::uint32_t own[kQueries], sum = 0;
#pragma unroll
    for (int t = 0; t < kQueries; ++t) sum += own[t] = totals[lane * kQueries + t];
    std::uint32_t inclusive = sum;
    for (int d = 1; d < 32; d <<= 1) {
      const std::uint32_t up = __shfl_up_sync(kFullMask, inclusive, d);
      if (lane >= std::uint32_t(d)) inclusive += up;
    }
    std::uint32_t at = inclusive - sum;
#pragma unroll
    for (int t = 0; t < kQueries; ++t) {
      starts[lane * kQueries + t] = at;
      at += own[t];
    }
    if (lane == 31) starts[kSlots] = inclusive;
  }
  __syncthreads();
  auto slot_of = [&](std::uint32_t e) {  // the last slot starting at or before entry e
    std::uint32_t i = 0;
    for (std::uint32_t step = kSlots / 2; step > 0; step >>= 1) {
      if (starts[i + step] <= e) i += step;
    }
    return i;
  };
  for (std::uint32_t first_slot = 0; first_slot < kSlots;) {
    // The slots [first_slot, end_slot) whose entries fit at once (one slot alone always does:
    // warps x k entries, and each warp's staging holds more than kResidentMaxK).
    std::uint32_t end_slot = first_slot + 1;
    while (end_slot < kSlots && starts[end_slot + 1] - starts[first_slot] <= layout.merge_capacity) ++end_slot;
    const std::uint32_t base = starts[first_slot], count = starts[end_slot] - base;
    for (std::uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
      const std::uint32_t i = slot_of(base + e);
      std::uint32_t at = base + e - starts[i], w = 0;
      while (at >= count_of(w, i)) at -= count_of(w++, i);
      const Entry entry = warp_list(first_query + i, w)[at];
      scratch[e] = Candidate{entry.rank, entry.slot, __ldg(ids + entry.slot)};
    }
    __syncthreads();
    for (std::uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
      const std::uint32_t i = slot_of(base + e), from = starts[i] - base, to = starts[i + 1] - base;
      const Candidate c = scratch[e];
      std::uint32_t before = 0;
      for (std::uint32_t t = from; t < to; ++t) before += closer(scratch[t].rank, scratch[t].id, c.rank, c.id);
      if (before < k) {  // (rank, id) is unique: places 0 .. min(entries, k) - 1
        candidates[(std::size_t(first_query + i) * gridDim.x + blockIdx.x) * k + before] = c;
        if (ordered_bits(c.rank) <= block_bound[i]) atomicAdd(&kept[i], 1u);
      }
    }
    __syncthreads();  // every entry is placed before the next slots overwrite the scratch
    first_slot = end_slot;
  }
  for (std::uint32_t i = threadIdx.x; i < kSlots; i += blockDim.x) {
    if (first_query + i < num_queries) lengths[std::size_t(first_query + i) * gridDim.x + blockIdx.x] = kept[i];
  }
}

/// One warp's view of its block of the resident scan, for the phases: it refers to the kernel's
/// variables, as a lambda's captures do (see ScanBlock in scan_phases.cuh for why not copies).
template <int kWidth>
struct ResidentBlock {
  const ScanParams& p;
  const std::uint32_t &lane, &warp, &warps, &k;
  float4* const& coord;                  // this warp's staged tiles: [buffer][e][g]
  float4* const& norm;                   // [buffer][g]
  std::uint32_t* const& valid_flags;     // [buffer][g]
  QueryState* const& states;             // this warp's, [slot]
  float4* const& query_vectors;
  std::uint32_t* const& block_bound;
  const std::uint32_t& slots;
  const void* const& vectors;
  const std::uint8_t* const& valid;
  const std::uint64_t* const& ids;
  const ScreenBounds& bounds;
  const std::uint32_t &first_query, &tile_begin, &tile_end;
  float4 (&ahead)[kWidth];               // this lane's 4 points of the next tile
  std::uint32_t& ahead_valid;
  float (&a)[kQueries][kWidth];          // this lane's screen coefficients, -2 q
};

template <int kWidth>
__device__ QueryState& query_state(const ResidentBlock<kWidth>& r, std::uint32_t j) {
  return r.states[j * 32 + r.lane];
}
template <int kWidth>
__device__ Entry* warp_list(const ResidentBlock<kWidth>& r, std::uint32_t query, std::uint32_t w) {
  return reinterpret_cast<Entry*>(r.p.warp_lists) + ((std::size_t(query) * gridDim.x + blockIdx.x) * r.warps + w) * r.k;
}
/// (rank, id) order with the ids read only where the ranks tie.
template <int kWidth>
__device__ bool entry_closer(const ResidentBlock<kWidth>& r, const Entry& x, const Entry& y) {
  return x.rank < y.rank || (x.rank == y.rank && __ldg(r.ids + x.slot) < __ldg(r.ids + y.slot));
}
template <int kWidth>
__device__ float limit_for(const ResidentBlock<kWidth>& r, float threshold, float qn) {
  return screen_limit(r.bounds, threshold, qn);
}

/// This lane's 4 points of a tile, loaded a tile ahead (slots past the store read as NaN: they pass
/// no test). The buffer's capacity is a multiple of 32 slots, so a group of 4 that starts below the
/// slot count ends inside it; a group past it loads nothing (the last tile may reach past the
/// buffer).
template <Filtering kFilter, int kWidth>
__device__ void load_points(const ResidentBlock<kWidth>& r, std::uint32_t tile) {
  const std::uint32_t first = tile * kTilePoints + 4 * r.lane;
  const std::uint32_t& slots = r.slots;
  float element[4][kWidth];  // [point][element]
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int e = 0; e < kWidth; ++e) element[i][e] = CUDART_NAN_F;
  }
  r.ahead_valid = 0;
  if (first < slots) {
    if constexpr (kWidth == 2) {
      const float4* from = static_cast<const float4*>(r.vectors) + first / 2;
      const float4 lo = __ldg(from), hi = __ldg(from + 1);
      const float raw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        element[i][0] = raw[2 * i];
        element[i][1] = raw[2 * i + 1];
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 v = __ldg(static_cast<const float4*>(r.vectors) + first + i);
        element[i][0] = v.x;
        element[i][1] = v.y;
        element[i][2] = v.z;
        element[i][3] = v.w;
      }
    }
    r.ahead_valid = __ldg(reinterpret_cast<const std::uint32_t*>(r.valid + first));
    if constexpr (kFilter == Filtering::Mask) {  // one predicate for every query: a point failing it is absent
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (first + i < slots && !attributes_pass(*r.p.mask, *r.p.store, first + i)) {
          r.ahead_valid &= ~(0xffu << (8 * i));
#pragma unroll
          for (int e = 0; e < kWidth; ++e) element[i][e] = CUDART_NAN_F;  // screens no pair
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kWidth; ++e) {
    const bool in[4] = {first < slots, first + 1 < slots, first + 2 < slots, first + 3 < slots};
    r.ahead[e] = make_float4(in[0] ? element[0][e] : CUDART_NAN_F, in[1] ? element[1][e] : CUDART_NAN_F,
                             in[2] ? element[2][e] : CUDART_NAN_F, in[3] ? element[3][e] : CUDART_NAN_F);
  }
}

/// Setup: the block's queries in shared memory (every warp ranks exactly from there) and this
/// lane's screen coefficients a[j][e] = -2 q_e in registers. Rows past the batch screen nothing (NaN
/// limit). A query whose norm may overflow passes every pair (zero coefficients, limit +inf).
template <int kWidth>
__device__ __forceinline__ void set_up_queries(const ResidentBlock<kWidth>& r) {
  const ScanParams& p = r.p;
  const std::uint32_t& lane = r.lane;
  for (std::uint32_t i = threadIdx.x; i < kSlots; i += blockDim.x) {
    const std::uint32_t query = r.first_query + i;
    r.query_vectors[i] = query < p.num_queries ? reinterpret_cast<const float4*>(p.queries)[query]
                                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    r.block_bound[i] = query < p.num_queries ? __ldcg(p.threshold + query) : 0u;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kQueries; ++j) {
    QueryState s{CUDART_NAN_F, CUDART_NAN_F, 0.0f, 0, Entry{0.0f, 0}, 0, 0};
    const float4 v = r.query_vectors[j * 32 + lane];
    const float element[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < kWidth; ++e) {
      r.a[j][e] = __fmul_rn(-2.0f, element[e]);
      s.norm = __fmaf_rn(element[e], element[e], s.norm);
    }
    if (r.first_query + j * 32 + lane < p.num_queries) {
      s.bound = from_ordered_bits(r.block_bound[j * 32 + lane]);
      s.limit = limit_for(r, s.bound, s.norm);
      if (s.norm >= r.bounds.huge) {
        s.limit = CUDART_INF_F;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) r.a[j][e] = 0.0f;
      }
    }
    query_state(r, j) = s;
  }
}

/// Stages this lane's points (loaded a tile ahead), their norms and valid flags; returns the tile's
/// largest norm (over the warp), which bounds C N.
template <int kWidth>
__device__ __forceinline__ float stage_tile(const ResidentBlock<kWidth>& r, float4* xs, float4* ns,
                                            std::uint32_t* flags) {
  const std::uint32_t& lane = r.lane;
  float largest_norm = 0.0f;
  float n[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float s = __fmul_rn((&r.ahead[kWidth - 1].x)[i], (&r.ahead[kWidth - 1].x)[i]);
#pragma unroll
    for (int e = kWidth - 2; e >= 0; --e) s = __fmaf_rn((&r.ahead[e].x)[i], (&r.ahead[e].x)[i], s);
    n[i] = s;
    largest_norm = fmaxf(largest_norm, s);  // NaN (past the store) is ignored
  }
#pragma unroll
  for (int e = 0; e < kWidth; ++e) xs[e * kGroups + lane] = r.ahead[e];
  ns[lane] = make_float4(n[0], n[1], n[2], n[3]);
  flags[lane] = r.ahead_valid;
  // Norms are >= 0, so their bits order as unsigned integers.
  return __uint_as_float(__reduce_max_sync(kFullMask, __float_as_uint(largest_norm)));
}

/// Each query's limit for this tile, after the bounds other warps' full lists found for it.
template <int kWidth>
__device__ __forceinline__ void tile_limits(const ResidentBlock<kWidth>& r, float norm_max,
                                            float (&tile_limit)[kQueries]) {
#pragma unroll
  for (int j = 0; j < kQueries; ++j) {
    QueryState& s = query_state(r, j);
    const float shared_bound = from_ordered_bits(r.block_bound[j * 32 + r.lane]);
    if (shared_bound < s.bound) {
      s.bound = shared_bound;
      if (s.norm < r.bounds.huge) s.limit = limit_for(r, shared_bound, s.norm);
    }
    tile_limit[j] = __fmaf_ru(r.bounds.norm_scale, norm_max, s.limit);
  }
}

/// The screen over the tile's groups: bit g of the result where some pair of group g passes (four
/// independent predicate chains).
template <int kWidth>
__device__ __forceinline__ unsigned screen_groups(const ResidentBlock<kWidth>& r, const float4* xs, const float4* ns,
                                                  const float (&tile_limit)[kQueries]) {
  unsigned hits = 0u;
#pragma unroll 4
  for (std::uint32_t g = 0; g < kGroups; ++g) {
    float4 x[kWidth];
#pragma unroll
    for (int e = 0; e < kWidth; ++e) x[e] = xs[e * kGroups + g];
    const float4 n = ns[g];
    bool any[4] = {false, false, false, false};
#pragma unroll
    for (int j = 0; j < kQueries; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) any[j & 3] = any[j & 3] | (screened(r.a[j], x, n, i) <= tile_limit[j]);
    }
    if ((any[0] | any[1]) | (any[2] | any[3])) hits |= 1u << g;
  }
  return hits;
}

/// A pair that passed the screen: its exact rank, and the query's list if within its bound; a full
/// list's largest entry then bounds the query (k distinct points), in the warp, the block and the
/// grid.
template <Filtering kFilter, int kWidth>
__device__ void rank_exactly(const ResidentBlock<kWidth>& r, std::uint32_t tile, const float4* xs,
                             const std::uint32_t* flags, std::uint32_t j, std::uint32_t g, std::uint32_t i) {
  const std::uint32_t& lane = r.lane;
  const std::uint32_t& k = r.k;
  const std::uint32_t slot = tile * kTilePoints + 4 * g + i;
  if (slot >= r.slots || ((flags[g] >> (8 * i)) & 0xffu) == 0) return;
  float element[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int e = 0; e < kWidth; ++e) element[e] = (&xs[e * kGroups + g].x)[i];
  const float4 point = make_float4(element[0], element[1], element[2], element[3]);
  const float4 query_vector = r.query_vectors[j * 32 + lane];
  float acc[1] = {0.0f};
  accumulate<1, false, kWidth>(acc, point, [&](int) { return query_vector; });
  const Entry entry{acc[0], slot};
  QueryState& s = query_state(r, j);
  if (!(entry.rank <= s.bound)) return;  // a NaN rank is never admitted (nor a row past the batch: NaN bound)
  if constexpr (kFilter == Filtering::PerQuery) {  // the query's id range and predicate
    const std::uint32_t q = r.first_query + j * 32 + lane;
    if (!filter_admits(r.p.ranges[q], r.p.predicates[q], *r.p.store, slot, r.ids[slot])) return;
  }
  Entry* const list = warp_list(r, r.first_query + j * 32 + lane, r.warp);
  if (s.count < k) {
    list[s.count++] = entry;
    if (s.count < k) return;
  } else {
    if (!entry_closer(r, entry, s.largest)) return;
    list[s.largest_at] = entry;
  }
  // The list is full: its largest entry, whose rank now bounds the query (k distinct points).
  Entry top = list[0];
  std::uint32_t top_at = 0;
  for (std::uint32_t e = 1; e < k; ++e) {
    const Entry c = list[e];
    if (entry_closer(r, top, c)) {
      top = c;
      top_at = e;
    }
  }
  s.largest = top;
  s.largest_at = top_at;
  if (top.rank < s.bound) {
    s.bound = top.rank;
    if (s.norm < r.bounds.huge) s.limit = limit_for(r, top.rank, s.norm);
    atomicMin(&r.block_bound[j * 32 + lane], ordered_bits(top.rank));
    atomicMin(r.p.threshold + r.first_query + j * 32 + lane, ordered_bits(top.rank));
  }
}

/// Every lane works through its groups with hits at once: the pairs that pass the screen get their
/// exact rank (rank_exactly). everything: a norm that may have overflowed sends every pair of the
/// tile to its exact rank.
template <Filtering kFilter, int kWidth>
__device__ __forceinline__ void rank_hits(const ResidentBlock<kWidth>& r, std::uint32_t tile, const float4* xs,
                                          const float4* ns, const std::uint32_t* flags,
                                          const float (&tile_limit)[kQueries], bool everything, unsigned hits) {
  while (__any_sync(kFullMask, hits != 0)) {
    if (hits == 0) continue;
    const std::uint32_t g = __ffs(hits) - 1;
    hits &= hits - 1;
    float4 x[kWidth];
#pragma unroll
    for (int e = 0; e < kWidth; ++e) x[e] = xs[e * kGroups + g];
    const float4 n = ns[g];
    unsigned passed = everything ? kAllPairs : 0u;  // bit 4 j + i: pair (j, point 4 g + i)
#pragma unroll
    for (int j = 0; j < kQueries; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) passed |= unsigned(screened(r.a[j], x, n, i) <= tile_limit[j]) << (4 * j + i);
    }
    for (; passed != 0; passed &= passed - 1) {
      const std::uint32_t bit = __ffs(passed) - 1;
      rank_exactly<kFilter>(r, tile, xs, flags, bit / 4, g, bit % 4);
    }
  }
}

// Left to itself (a bound of kMaxWarps * 32 threads alone) ptxas held the two-element kernel at 64
// registers and spilled 48 bytes; asking for one block per SM lets it take 80 (128 at four
// elements), no spills. The kernel is its phases: setup (set_up_queries), then per tile
// stage_tile, tile_limits, screen_groups and rank_hits, then the block's merge (merge_lists).
template <int kWidth, Filtering kFilter>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) resident_kernel(ScanParams p) {
  start_chained_kernel();
  static_assert(kWidth == 2 || kWidth == 4);
  extern __shared__ float4 shared_memory[];
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, k = p.k;
  const Layout layout = layout_for(kWidth, warps);
  unsigned char* const shared = reinterpret_cast<unsigned char*>(shared_memory);
  unsigned char* const stage = shared + warp * layout.stage_bytes;
  float4* const coord = reinterpret_cast<float4*>(stage + layout.coord);  // [buffer][e][g]
  float4* const norm = reinterpret_cast<float4*>(stage + layout.norm);    // [buffer][g]
  std::uint32_t* const valid_flags = reinterpret_cast<std::uint32_t*>(stage + layout.valid);  // [buffer][g]
  QueryState* const all_states = reinterpret_cast<QueryState*>(shared + layout.state);  // [warp][slot]
  QueryState* const states = all_states + warp * kSlots;
  float4* const query_vectors = reinterpret_cast<float4*>(shared + layout.queries);
  std::uint32_t* const block_bound = reinterpret_cast<std::uint32_t*>(shared + layout.bounds);

  const std::uint32_t slots = p.store->slot_count;
  const void* const vectors = p.store->vectors;
  const std::uint8_t* const valid = p.store->valid;
  const std::uint64_t* const ids = p.store->ids;
  const ScreenBounds bounds = p.screen;
  const std::uint32_t first_query = blockIdx.y * kSlots;

  // The block's share of the store in tiles of kTilePoints, every warps-th one to this warp.
  const std::uint32_t tiles = (slots + kTilePoints - 1) / kTilePoints;
  const std::uint32_t per_block = (tiles + gridDim.x - 1) / gridDim.x;
  const std::uint32_t tile_begin = min(tiles, blockIdx.x * per_block);
  const std::uint32_t tile_end = min(tiles, tile_begin + per_block);
  float4 ahead[kWidth];
  std::uint32_t ahead_valid = 0;
  float a[kQueries][kWidth];
  const ResidentBlock<kWidth> r{p,      lane,        warp,    warps,      k,           coord,     norm,
                                valid_flags, states, query_vectors, block_bound, slots, vectors, valid,
                                ids,    bounds,      first_query, tile_begin, tile_end, ahead,     ahead_valid,
                                a};
  if (tile_begin + warp < tile_end) load_points<kFilter>(r, tile_begin + warp);  // in flight while the queries are set up
  set_up_queries(r);

  for (std::uint32_t tile = tile_begin + warp, step = 0; tile < tile_end; tile += warps, ++step) {
    const std::uint32_t buffer = step & 1;
    float4* const xs = coord + buffer * kWidth * kGroups;  // element e of group g at xs[e * kGroups + g]
    float4* const ns = norm + buffer * kGroups;
    std::uint32_t* const flags = valid_flags + buffer * kGroups;
    const float norm_max = stage_tile(r, xs, ns, flags);
    if (tile + warps < tile_end) load_points<kFilter>(r, tile + warps);
    float tile_limit[kQueries];
    tile_limits(r, norm_max, tile_limit);
    __syncwarp();
    const bool everything = norm_max >= bounds.huge;
    unsigned hits = everything ? ~0u : 0u;
    if (!everything) hits = screen_groups(r, xs, ns, tile_limit);
    rank_hits<kFilter>(r, tile, xs, ns, flags, tile_limit, everything, hits);
    __syncwarp();  // every lane has read this buffer before the tile after next overwrites it
  }

  __syncthreads();  // every warp's lists and counts are final, and the staging is free
  merge_lists(layout, shared, reinterpret_cast<const Entry*>(p.warp_lists), ids, p.threshold, p.candidates, p.lengths,
              p.num_queries, k, first_query, warps);
}

template <int kWidth, Filtering kFilter = Filtering::None>
const void* kernel_for() {
  return reinterpret_cast<const void*>(resident_kernel<kWidth, kFilter>);
}

/// The kernel for a store's width and a launch's filtering (ScanParams: ranges and predicates per
/// query, or a mask, or neither).
template <int kWidth>
void launch_for(const ScanParams& p, dim3 grid, std::uint32_t warps, std::size_t shared, cudaStream_t stream) {
  if (p.ranges != nullptr) {
    launch_chained("resident_kernel", resident_kernel<kWidth, Filtering::PerQuery>, grid, warps * 32, shared, stream, p);
  } else if (p.mask != nullptr) {
    launch_chained("resident_kernel", resident_kernel<kWidth, Filtering::Mask>, grid, warps * 32, shared, stream, p);
  } else {
    launch_chained("resident_kernel", resident_kernel<kWidth, Filtering::None>, grid, warps * 32, shared, stream, p);
  }
}

}  // namespace

int resident_blocks_per_sm(int width, std::uint32_t warps, Filtering filtering) {
  const void* kernels[2][3] = {
      {kernel_for<2>(), kernel_for<2, Filtering::PerQuery>(), kernel_for<2, Filtering::Mask>()},
      {kernel_for<4>(), kernel_for<4, Filtering::PerQuery>(), kernel_for<4, Filtering::Mask>()}};
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels[width == 4][static_cast<int>(filtering)],
                                                           int(warps * 32), layout_for(width, warps).total),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor(resident_kernel)");
  return std::max(per_sm, 1);
}

std::size_t resident_shared_bytes(int width, std::uint32_t warps) {
  return layout_for(width, warps).total;
}

void configure_resident(std::size_t shared_limit) {
  for (const void* kernel : {kernel_for<2>(), kernel_for<4>(), kernel_for<2, Filtering::PerQuery>(),
                             kernel_for<4, Filtering::PerQuery>(), kernel_for<2, Filtering::Mask>(),
                             kernel_for<4, Filtering::Mask>()}) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_limit)),
               "cudaFuncSetAttribute(resident_kernel)", std::to_string(shared_limit) + " bytes of shared memory");
  }
}

void launch_resident(const ScanParams& p, std::uint32_t blocks, std::uint32_t warps, int width, cudaStream_t stream) {
  if (p.k == 0 || p.k > kResidentMaxK || warps == 0 || warps > kResidentMaxWarps || p.warp_lists == nullptr ||
      (p.ranges == nullptr) != (p.predicates == nullptr)) {
    throw CudaError("resident kernel: k " + std::to_string(p.k) + " (at most " + std::to_string(kResidentMaxK) +
                    "), warps " + std::to_string(warps) + " (at most " + std::to_string(kResidentMaxWarps) +
                    "), its warp lists, and id ranges with predicates or neither");
  }
  const dim3 grid(blocks, (p.num_queries + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock);
  const std::size_t shared = layout_for(width, warps).total;
  if (width == 2) {
    launch_for<2>(p, grid, warps, shared, stream);
  } else {
    launch_for<4>(p, grid, warps, shared, stream);
  }
}

}  // namespace streamknn::detail::gpu
