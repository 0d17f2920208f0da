// The scan kernel's tile loops other than the screen's (only scan.cu includes it): the tiled
// form (scan_tile_groups: several tiles per lane tested on their smallest rank) and the forms with
// one tile per warp at a time (scan_tiles: one-chunk stores loaded a tile ahead, staged loads,
// plain loads). The kernel declares their state and callables; see scan_block.cuh for why.
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scan_block.cuh"
#include "cuda/kernels/scan_layout.cuh"

namespace streamknn::detail::gpu {

namespace {

// ---- Several tiles per lane (kTiled) ----

/// This lane's point of `tile` (two elements: one float2 per slot).
template <int kOneChunk>
struct PointLoader {
  const StoreView& store;
  const std::uint32_t& lane;
  const float4* const& vectors;

  __device__ float4 operator()(std::uint32_t tile) const {
    if constexpr (kOneChunk == 2) {
      const float2 v = __ldg(static_cast<const float2*>(store.vectors) + std::size_t(tile) * kTile + lane);
      return make_float4(v.x, v.y, 0.0f, 0.0f);
    } else {
      return __ldg(vectors + std::size_t(tile) * kTile + lane);
    }
  }
};

/// Loads the points, valid flags and grid-wide bound of the group of tiles from `first` (first,
/// first + warps, ..) into vector_ahead, valid_ahead and bound_ahead.
template <int kTilesPerLane, int kOneChunk>
struct GroupLoader {
  const ScanParams& p;
  const StoreView& store;
  const std::uint32_t& warps;
  const std::uint32_t& lane;
  const std::uint32_t& q0;
  const std::uint32_t& nq;
  const std::uint32_t& tile_end;
  const PointLoader<kOneChunk>& load_point;
  float4 (&vector_ahead)[kTilesPerLane];
  bool (&valid_ahead)[kTilesPerLane];
  std::uint32_t& bound_ahead;

  __device__ void operator()(std::uint32_t first) const {
#pragma unroll
    for (int t = 0; t < kTilesPerLane; ++t) {
      const std::uint32_t tile = first + t * warps;
      valid_ahead[t] = tile < tile_end && store.valid[tile * kTile + lane] != 0;
      if (tile < tile_end) vector_ahead[t] = load_point(tile);
    }
    if (lane < nq) bound_ahead = __ldcg(&p.threshold[q0 + lane]);
  }
};

/// Takes the group loaded ahead into v (erased slots as NaN), issues the next group's loads and
/// lowers the warp's thresholds to the grid-wide bound read with this group.
template <int QG, int kTilesPerLane, class LoadGroup>
__device__ __forceinline__ void take_group(const std::uint32_t first, float4 (&v)[kTilesPerLane],
                                           const std::uint32_t& warps, const std::uint32_t& lane,
                                           const std::uint32_t& nq, const std::uint32_t& tile_end,
                                           float* const& thresholds, const float4 (&vector_ahead)[kTilesPerLane],
                                           const bool (&valid_ahead)[kTilesPerLane], const std::uint32_t& bound_ahead,
                                           const LoadGroup& load_group) {
  const float kNaN = CUDART_NAN_F;
#pragma unroll
  for (int t = 0; t < kTilesPerLane; ++t) {
    v[t] = valid_ahead[t] ? vector_ahead[t] : make_float4(kNaN, kNaN, kNaN, kNaN);
  }
  const std::uint32_t grid_bound = bound_ahead;
  if (first + kTilesPerLane * warps < tile_end) load_group(first + kTilesPerLane * warps);
  if (lane < nq) thresholds[lane] = fminf(thresholds[lane], from_ordered_bits(grid_bound));
  __syncwarp();
}

/// The queries (bit j) for which some lane of the warp has its smallest rank over its points v
/// within the query's threshold; limit: the kernel's array for the thresholds.
template <int QG, bool kInnerProduct, int kOneChunk, int kTilesPerLane, class LoadLimits>
__device__ __forceinline__ unsigned admitted_by_group(const float4 (&v)[kTilesPerLane], float (&limit)[QG],
                                                      float4* const& queries, const LoadLimits& load_limits) {
  const float kNaN = CUDART_NAN_F;
  load_limits(limit);
  unsigned admitted = 0;
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    float closest = kNaN;
#pragma unroll
    for (int t = 0; t < kTilesPerLane; ++t) {
      float acc[1] = {0.0f};
      accumulate<1, kInnerProduct, kOneChunk>(acc, v[t], [&](int) { return queries[j]; });
      closest = fminf(closest, rank_of<kInnerProduct>(acc[0]));
    }
    admitted |= unsigned(closest <= limit[j]) << j;
  }
  return __reduce_or_sync(kFullMask, admitted);
}

/// Scores the group's tiles from `first` one by one for the queries in with_any (the points
/// again, from L1) and inserts each tile's survivors.
template <int QG, bool kInnerProduct, int kOneChunk, int kTilesPerLane, class InsertTile, class LoadPoint>
__device__ __forceinline__ void insert_group(const std::uint32_t& first, const unsigned& with_any,
                                             const StoreView& store, const std::uint32_t& warps,
                                             const std::uint32_t& lane, const std::uint32_t& tile_end,
                                             float4* const& queries, float* const& thresholds, float* const& ranks,
                                             const InsertTile& insert_tile, const LoadPoint& load_point) {
#pragma unroll 1
  for (std::uint32_t tile = first; tile < min(tile_end, first + kTilesPerLane * warps); tile += warps) {
    const std::uint32_t slot = tile * kTile + lane;
    const bool valid = store.valid[slot] != 0;
    const float4 point = load_point(tile);
    unsigned admitted_here = 0;
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      if ((with_any >> j) & 1u) {
        float acc[1] = {0.0f};
        accumulate<1, kInnerProduct, kOneChunk>(acc, point, [&](int) { return queries[j]; });
        const float rank = rank_of<kInnerProduct>(acc[0]);
        ranks[j * 32 + lane] = rank;
        admitted_here |= unsigned(rank <= thresholds[j]) << j;
      }
    }
    const unsigned with_survivors = __reduce_or_sync(kFullMask, valid ? admitted_here : 0u);
    __syncwarp();
    if (with_survivors == 0) continue;
    insert_tile(slot, valid, valid ? store.ids[slot] : kNoId, with_survivors);
  }
}

/// The tiled loop over the warp's groups of kTilesPerLane tiles (tile, tile + warps, ..), each
/// group's loads issued while the one before is scored. v and limit: the kernel's arrays for a
/// group's points and the thresholds.
template <int QG, bool kInnerProduct, int kOneChunk, int kTilesPerLane, class LoadPoint, class LoadGroup,
          class InsertTile, class LoadLimits>
__device__ __forceinline__ void scan_tile_groups(
    const StoreView& store, const std::uint32_t& warps, const std::uint32_t warp, const std::uint32_t& lane,
    const std::uint32_t& nq, const std::uint32_t& tile_begin, const std::uint32_t& tile_end, float4* const& queries,
    float* const& thresholds, float* const& ranks, const float4 (&vector_ahead)[kTilesPerLane],
    const bool (&valid_ahead)[kTilesPerLane], const std::uint32_t& bound_ahead, float4 (&v)[kTilesPerLane],
    float (&limit)[QG], const LoadPoint& load_point, const LoadGroup& load_group, const InsertTile& insert_tile,
    const LoadLimits& load_limits) {
  for (std::uint32_t first = tile_begin + warp; first < tile_end; first += kTilesPerLane * warps) {
    take_group<QG, kTilesPerLane>(first, v, warps, lane, nq, tile_end, thresholds, vector_ahead, valid_ahead,
                                  bound_ahead, load_group);
    const unsigned with_any = admitted_by_group<QG, kInnerProduct, kOneChunk, kTilesPerLane>(v, limit, queries,
                                                                                             load_limits);
    if (with_any == 0) continue;
    insert_group<QG, kInnerProduct, kOneChunk, kTilesPerLane>(first, with_any, store, warps, lane, tile_end, queries,
                                                              thresholds, ranks, insert_tile, load_point);
  }
}

// ---- One tile per warp at a time (one-chunk, staged and plain loads) ----

/// kOneChunk: loads the point, valid flag and grid-wide bound of `tile` into vector_ahead,
/// valid_ahead and bound_ahead.
template <int kOneChunk>
struct AheadLoader {
  const ScanParams& p;
  const StoreView& store;
  const std::uint32_t& lane;
  const std::uint32_t& q0;
  const std::uint32_t& nq;
  const float4* const& vectors;
  float4& vector_ahead;
  std::uint8_t& valid_ahead;
  std::uint32_t& bound_ahead;

  __device__ void operator()(std::uint32_t tile) const {
    if constexpr (kOneChunk == 2) {  // one float2 per slot (StoreView::chunk_floats)
      const float2 v = __ldg(static_cast<const float2*>(store.vectors) + std::size_t(tile) * kTile + lane);
      vector_ahead = make_float4(v.x, v.y, 0.0f, 0.0f);
    } else {
      vector_ahead = __ldg(vectors + std::size_t(tile) * kTile + lane);
    }
    valid_ahead = store.valid[tile * kTile + lane];
    if (lane < nq) bound_ahead = __ldcg(&p.threshold[q0 + lane]);
  }
};

/// The warp's tile after `tile`: the next of its stride, or with take_tiles the next of the block's
/// counter next_tile (the kernel's shared memory).
struct NextTile {
  const bool& take_tiles;
  const std::uint32_t& warps;
  const std::uint32_t& lane;
  const std::uint32_t& tile_begin;
  std::uint32_t* const next_tile;

  __device__ std::uint32_t operator()(std::uint32_t tile) const {
    if (!take_tiles) return tile + warps;
    std::uint32_t taken = 0;
    if (lane == 0) taken = atomicAdd(next_tile, 1u);
    return tile_begin + warps + __shfl_sync(kFullMask, taken, 0);
  }
};

/// Takes `tile`: its valid flag, (one-chunk) its point loaded ahead, whose successor's loads it
/// issues; returns the grid-wide bound to apply after the arithmetic (read a tile early by
/// one-chunk kernels: a bound read earlier is still a bound).
template <int kOneChunk, class LoadAhead>
__device__ __forceinline__ std::uint32_t take_tile(const std::uint32_t& tile, const std::uint32_t& slot, bool& valid,
                                                   float4& vector, const ScanParams& p, const StoreView& store,
                                                   const std::uint32_t& warps, const std::uint32_t& lane,
                                                   const std::uint32_t& q0, const std::uint32_t& nq,
                                                   const std::uint32_t& tile_end, const bool first_bound,
                                                   const float4& vector_ahead, const std::uint8_t& valid_ahead,
                                                   const std::uint32_t& bound_ahead, const LoadAhead& load_ahead) {
  if constexpr (kOneChunk != 0) {
    valid = valid_ahead != 0;
    const std::uint32_t grid_bound = bound_ahead;
    vector = vector_ahead;
    if (tile + warps < tile_end) load_ahead(tile + warps);
    return grid_bound;
  } else {
    valid = store.valid[slot] != 0;
    // With the first-tile bound it is read after the arithmetic instead (scan_tiles), so the bound
    // the grid publishes while the warps score their second tile applies to that tile.
    return lane < nq && !first_bound ? __ldcg(&p.threshold[q0 + lane]) : kNoBound;
  }
}

/// Adds this lane's point of `tile` (one-chunk: `vector`) to acc[j] for every query j, in the
/// chunk order of every path.
template <int QG, bool kInnerProduct, int kOneChunk, bool kStaged, class Issue>
__device__ __forceinline__ void score_tile(const std::uint32_t& tile, const float4& vector, float (&acc)[QG],
                                           const std::uint32_t& chunks, const std::uint32_t& lane,
                                           const float4* const& vectors, float4* const& queries, float4* const& ring,
                                           std::uint32_t& consumed, const Issue& issue) {
  const float4* point = vectors + std::size_t(tile) * chunks * kTile + lane;
  if constexpr (kOneChunk != 0) {
    accumulate<QG, kInnerProduct, kOneChunk>(acc, vector, [&](int j) { return queries[j]; });
  } else if constexpr (kStaged) {
    // Issue the stage kStages - 1 ahead, wait for this one (this lane's own copies, so no
    // warp barrier), score it. The chunk order is the same as the loaded paths'.
    for (std::uint32_t c0 = 0; c0 < chunks; c0 += kStageChunks) {
      issue();
      wait_async<kStages - 1>();
      const float4* here = ring + (consumed % kStages) * kStageChunks * 32 + lane;
      ++consumed;
#pragma unroll
      for (int u = 0; u < kStageChunks; ++u) {
        const std::uint32_t c = c0 + u;
        if (c < chunks) {
          accumulate<QG, kInnerProduct>(acc, here[u * 32], [&](int j) { return queries[j * chunks + c]; });
        }
      }
    }
  } else {
    // Groups of 1, 2, 12 and 16: an unrolled loop with 16 loads in flight per warp for one
    // query, 8 for two, 4 for 16 and 2 for 12 (ptxas spilled registers at 4; 10-30% faster at 2).
    // One query reads each point once, so its loads stream past the caches (ld.global.cs;
    // H100 A/B against __ldg: MNIST-like 0.945x, ImageNet-like 0.98x, GoogleNews-like 0.99x;
    // larger groups may read a tile again from L1 when they insert its survivors).
#pragma unroll(QG == 1 ? 16 : QG == 2 ? 8 : QG == 12 ? 2 : 4)
    for (std::uint32_t c = 0; c < chunks; ++c) {
      const float4* at = point + std::size_t(c) * kTile;
      accumulate<QG, kInnerProduct>(acc, QG == 1 ? __ldcs(at) : __ldg(at),
                                    [&](int j) { return queries[j * chunks + c]; });
    }
  }
}

/// The first-tile bound: the warp's first tile arrives with its ranks acc and is held back
/// (first_rank: this lane's rank, for insert_first_tile).
template <int QG, bool kInnerProduct, class ArriveFirst>
__device__ __forceinline__ void hold_first_tile(const bool& valid, const float (&acc)[QG], float& first_rank,
                                                const ArriveFirst& arrive_first) {
  // A NaN rank (an overflowed dot product) never counts, as in the scan and the sample pass.
  arrive_first([&](int j) {
    const float rank = rank_of<kInnerProduct>(acc[j]);
    return valid && rank <= CUDART_INF_F ? ordered_bits(rank) : kNoBound;
  });
  // Every warp ends its first tile at about the same time: merging it now (into an empty
  // list, so all of it) would leave the memory system idle grid-wide. It is held back
  // and tested against the grid's bound after the last tile (insert_first_tile).
  first_rank = rank_of<kInnerProduct>(acc[0]);
}

/// Lowers the warp's thresholds to grid_bound and inserts the tile's survivors (ranks acc) into
/// the warp's lists; limit: the kernel's array for the thresholds.
template <int QG, bool kInnerProduct, bool kFiltered, class InsertTile, class LoadLimits>
__device__ __forceinline__ void insert_survivors(const std::uint32_t& slot, const bool& valid,
                                                 const std::uint32_t& grid_bound, const float (&acc)[QG],
                                                 float (&limit)[QG], const StoreView& store,
                                                 const std::uint32_t& lane, const std::uint32_t& nq,
                                                 IdRangeDevice* const& ranges, float* const& thresholds,
                                                 float* const& ranks, const InsertTile& insert_tile,
                                                 const LoadLimits& load_limits) {
  if (lane < nq) thresholds[lane] = fminf(thresholds[lane], from_ordered_bits(grid_bound));
  __syncwarp();
  std::uint64_t id = kNoId;
  if (kFiltered && valid) id = store.ids[slot];
  // Which queries have survivors in this tile: the arithmetic above is unrolled per query,
  // the (rare) insertion below is not, so it exists once in the code and in the registers.
  // A float compare per query and one warp-wide OR for the whole group (ncu, 1,000,000 x 2,
  // Q = 1,024: a vote and an ordered-bits compare per query were half of the scan's
  // instructions); on these ranks (never -0, see rank_of) it is the ordered-bits test.
  load_limits(limit);
  unsigned admitted = 0;
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    bool admit = rank_of<kInnerProduct>(acc[j]) <= limit[j];
    if constexpr (kFiltered) admit = admit && id >= ranges[j].begin && id < ranges[j].end;
    admitted |= unsigned(admit) << j;
  }
  unsigned with_survivors = __reduce_or_sync(kFullMask, valid ? admitted : 0u);
  if (with_survivors == 0) return;
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    if ((with_survivors >> j) & 1u) ranks[j * 32 + lane] = rank_of<kInnerProduct>(acc[j]);
  }
  __syncwarp();
  if (!kFiltered && valid) id = store.ids[slot];
  insert_tile(slot, valid, id, with_survivors);
}

/// The first tile, held back (one query): its survivors under the grid's bound as it is now.
template <class InsertTile>
__device__ __forceinline__ void insert_first_tile(const ScanParams& p, const StoreView& store,
                                                  const std::uint32_t& lane, const std::uint32_t& q0,
                                                  const std::uint32_t& warp, const std::uint32_t& tile_begin,
                                                  float* const& thresholds, float* const& ranks,
                                                  const float& first_rank, const InsertTile& insert_tile) {
  if (lane == 0) thresholds[0] = fminf(thresholds[0], from_ordered_bits(__ldcg(&p.threshold[q0])));
  __syncwarp();
  if (__any_sync(kFullMask, first_rank <= thresholds[0])) {
    const std::uint32_t slot = (tile_begin + warp) * kTile + lane;
    const bool valid = store.valid[slot] != 0;
    ranks[lane] = first_rank;
    __syncwarp();
    insert_tile(slot, valid, valid ? store.ids[slot] : kNoId, 1u);
  }
}

/// The loop over the warp's tiles, one at a time (next: the warp's next tile); with the first-tile
/// bound (one query) the first tile is held back to the end.
template <int QG, bool kInnerProduct, bool kFiltered, int kOneChunk, bool kStaged, class LoadAhead, class Next,
          class Issue, class ArriveFirst, class InsertTile, class LoadLimits>
__device__ __forceinline__ void scan_tiles(
    const ScanParams& p, const StoreView& store, const std::uint32_t& warps, const std::uint32_t warp,
    const std::uint32_t& lane, const std::uint32_t& chunks, const std::uint32_t& q0, const std::uint32_t& nq,
    float4* const& queries, IdRangeDevice* const& ranges, float* const& thresholds, float* const& ranks,
    const std::uint32_t& tile_begin, const std::uint32_t& tile_end, const float4* const& vectors,
    const bool first_bound, const float4& vector_ahead, const std::uint8_t& valid_ahead, float& first_rank,
    const std::uint32_t& bound_ahead, const LoadAhead& load_ahead, const Next& next, float4* const& ring,
    const Issue& issue, std::uint32_t& consumed, const ArriveFirst& arrive_first, const InsertTile& insert_tile,
    const LoadLimits& load_limits) {
  for (std::uint32_t tile = tile_begin + warp; tile < tile_end; tile = next(tile)) {
    const std::uint32_t slot = tile * kTile + lane;
    // The grid-wide bound (what every full list found) is applied after the arithmetic.
    bool valid;
    std::uint32_t grid_bound;
    float4 vector{};  // one-chunk kernels: this tile's
    grid_bound = take_tile<kOneChunk>(tile, slot, valid, vector, p, store, warps, lane, q0, nq, tile_end, first_bound,
                                      vector_ahead, valid_ahead, bound_ahead, load_ahead);
    float acc[QG];
#pragma unroll
    for (int j = 0; j < QG; ++j) acc[j] = 0.0f;
    score_tile<QG, kInnerProduct, kOneChunk, kStaged>(tile, vector, acc, chunks, lane, vectors, queries, ring,
                                                      consumed, issue);
    if (first_bound) {
      if (tile == tile_begin + warp) {
        hold_first_tile<QG, kInnerProduct>(valid, acc, first_rank, arrive_first);
        continue;
      }
      if (kOneChunk == 0 && lane < nq) grid_bound = __ldcg(&p.threshold[q0 + lane]);
    }
    float limit[QG];
    insert_survivors<QG, kInnerProduct, kFiltered>(slot, valid, grid_bound, acc, limit, store, lane, nq, ranges,
                                                   thresholds, ranks, insert_tile, load_limits);
  }
  if (first_bound && tile_begin + warp < tile_end) {
    insert_first_tile(p, store, lane, q0, warp, tile_begin, thresholds, ranks, first_rank, insert_tile);
  }
}

}  // namespace

}  // namespace streamknn::detail::gpu
