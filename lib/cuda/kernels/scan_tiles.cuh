// The scan kernel's tile loops (kernels/scan.cu) but the screen's (scan_screen.cuh): one point per
// lane (scan_tiles), or several tiles per lane over one-chunk stores (scan_tile_groups). Each
// tile: tile scoring, survivor test, list insert (scan_phases.cuh).
#pragma once

#include <math_constants.h>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan_phases.cuh"

namespace streamknn::detail::gpu {

namespace {

/// Tiled kernels: the next tile group's loads (each lane's point of kTilesPerLane tiles, their
/// valid flags, the grid-wide bound), issued before the current group is scored.
template <class V>
struct TileGroupAhead {
  float4 vector[V::kTilesPerLane];
  bool valid[V::kTilesPerLane];
  std::uint32_t bound;
};

template <class V>
__device__ void load_tile_group(const ScanBlock<V>& b, TileGroupAhead<V>& ahead, std::uint32_t first) {
#pragma unroll
  for (int t = 0; t < V::kTilesPerLane; ++t) {
    const std::uint32_t tile = first + t * b.warps;
    ahead.valid[t] = tile < b.tile_end && b.store.valid[tile * kTile + b.lane] != 0;
    if (tile < b.tile_end) ahead.vector[t] = one_chunk_point(b, tile);
  }
  if (b.lane < b.nq) ahead.bound = __ldcg(&b.p.threshold[b.q0 + b.lane]);
}

/// Tiled kernels' tile scoring and survivor test: lane i scores point i of kTilesPerLane tiles at
/// once; each query's chunk is read from shared memory once for all of them and the threshold test
/// runs on their smallest rank, so a (point, query) pair costs its arithmetic and a min (ncu,
/// 1,000,000 x 2, Q = 1,024: 15 instructions per pair with one tile per lane). Erased slots score
/// NaN, which the min skips. Returns the queries that some lane admits.
template <class V>
__device__ __forceinline__ unsigned score_tile_group(const ScanBlock<V>& b, const float4 (&v)[V::kTilesPerLane]) {
  float4* const& queries = b.queries;
  const float kNaN = CUDART_NAN_F;
  float limit[V::QG];
  load_limits(b, limit);
  unsigned admitted = 0;
#pragma unroll
  for (int j = 0; j < V::QG; ++j) {
    float closest = kNaN;
#pragma unroll
    for (int t = 0; t < V::kTilesPerLane; ++t) {
      float acc[1] = {0.0f};
      accumulate<1, V::kInnerProduct, V::kOneChunk>(acc, v[t], [&](int) { return queries[j]; });
      closest = fminf(closest, rank_of<V::kInnerProduct>(acc[0]));
    }
    admitted |= unsigned(closest <= limit[j]) << j;
  }
  return __reduce_or_sync(kFullMask, admitted);
}

/// A tile group with any survivor (the queries in with_any): scored tile by tile from memory again
/// (in L1), each tile's survivors inserted.
template <class V>
__device__ __forceinline__ void insert_tile_group(const ScanBlock<V>& b, std::uint32_t first, unsigned with_any) {
  float4* const& queries = b.queries;
  const std::uint32_t lane = b.lane;
#pragma unroll 1
  for (std::uint32_t tile = first; tile < min(b.tile_end, first + V::kTilesPerLane * b.warps); tile += b.warps) {
    const std::uint32_t slot = tile * kTile + lane;
    const bool valid = b.store.valid[slot] != 0;
    const float4 point = one_chunk_point(b, tile);
    unsigned admitted_here = 0;
#pragma unroll
    for (int j = 0; j < V::QG; ++j) {
      if ((with_any >> j) & 1u) {
        float acc[1] = {0.0f};
        accumulate<1, V::kInnerProduct, V::kOneChunk>(acc, point, [&](int) { return queries[j]; });
        const float rank = rank_of<V::kInnerProduct>(acc[0]);
        b.ranks[j * 32 + lane] = rank;
        admitted_here |= unsigned(rank <= b.thresholds[j]) << j;
      }
    }
    const unsigned with_survivors = __reduce_or_sync(kFullMask, valid ? admitted_here : 0u);
    __syncwarp();
    if (with_survivors == 0) continue;
    insert_survivors(b, slot, valid, valid ? b.store.ids[slot] : kNoId, with_survivors);
  }
}

/// The tile loop of the tiled kernels (ScanShape::tiled): groups of kTilesPerLane tiles (tile,
/// tile + warps, ..), the next group's loads in flight while one is scored.
template <class V>
__device__ __forceinline__ void scan_tile_groups(const ScanBlock<V>& b) {
  constexpr int kTilesPerLane = V::kTilesPerLane;
  const std::uint32_t warps = b.warps, lane = b.lane;
  TileGroupAhead<V> ahead;
  ahead.bound = kNoBound;
  if (b.tile_begin + b.warp < b.tile_end) load_tile_group(b, ahead, b.tile_begin + b.warp);
  const float kNaN = CUDART_NAN_F;
  for (std::uint32_t first = b.tile_begin + b.warp; first < b.tile_end; first += kTilesPerLane * warps) {
    float4 v[kTilesPerLane];
#pragma unroll
    for (int t = 0; t < kTilesPerLane; ++t) {
      v[t] = ahead.valid[t] ? ahead.vector[t] : make_float4(kNaN, kNaN, kNaN, kNaN);
    }
    const std::uint32_t grid_bound = ahead.bound;
    if (first + kTilesPerLane * warps < b.tile_end) load_tile_group(b, ahead, first + kTilesPerLane * warps);
    if (lane < b.nq) b.thresholds[lane] = fminf(b.thresholds[lane], from_ordered_bits(grid_bound));
    __syncwarp();
    const unsigned with_any = score_tile_group(b, v);
    if (with_any == 0) continue;
    insert_tile_group(b, first, with_any);
  }
}

/// One-chunk kernels (ScanShape::one_chunk_width): a tile is one load, so the next tile's loads
/// (vector, valid flags, grid-wide bound) are issued before this one is scored (else every tile
/// waits a full round trip: ncu, 1,000,000 x 2, Q = 1,024), and stores of at most two elements
/// score only those (the same rank bits, see accumulate). Kernels of their own: the prefetch's
/// registers cost the other shapes blocks.
struct TileAhead {
  float4 vector;
  std::uint8_t valid;
  std::uint32_t bound;
};

template <class V>
__device__ void load_tile_ahead(const ScanBlock<V>& b, TileAhead& ahead, std::uint32_t tile) {
  ahead.vector = one_chunk_point(b, tile);
  ahead.valid = b.store.valid[tile * kTile + b.lane];
  if (b.lane < b.nq) ahead.bound = __ldcg(&b.p.threshold[b.q0 + b.lane]);
}

/// The warp's next tile. With the first-tile bound (multi-chunk) each warp takes its next tile from
/// a block-wide counter after its first: warps that end early take the tiles of those still busy.
template <class V>
__device__ std::uint32_t advance_tile(const ScanBlock<V>& b, std::uint32_t tile, bool take_tiles) {
  if (!take_tiles) return tile + b.warps;
  std::uint32_t taken = 0;
  if (b.lane == 0) taken = atomicAdd(&taken_tiles, 1u);
  return b.tile_begin + b.warps + __shfl_sync(kFullMask, taken, 0);
}

/// Tile scoring: this lane's point of `tile` against every query of the group, into acc (vector:
/// the point where the store has one chunk).
template <class V>
__device__ __forceinline__ void score_tile(const ScanBlock<V>& b, ChunkRing& ring, std::uint32_t tile,
                                           const float4& vector, float (&acc)[V::QG]) {
  constexpr int QG = V::QG;
  const std::uint32_t& chunks = b.chunks;
  float4* const& queries = b.queries;
  const float4* point = b.vectors + std::size_t(tile) * chunks * kTile + b.lane;
  if constexpr (V::kOneChunk != 0) {
    accumulate<QG, V::kInnerProduct, V::kOneChunk>(acc, vector, [&](int j) { return queries[j]; });
  } else if constexpr (V::kStaged) {
    // Issue the stage kStages - 1 ahead, wait for this one (this lane's own copies, so no warp
    // barrier), score it. The chunk order is the same as the loaded paths'.
    for (std::uint32_t c0 = 0; c0 < chunks; c0 += kStageChunks) {
      issue_next_stage(b, ring);
      wait_async<kStages - 1>();
      const float4* here = ring.ring + (ring.consumed % kStages) * kStageChunks * 32 + b.lane;
      ++ring.consumed;
#pragma unroll
      for (int u = 0; u < kStageChunks; ++u) {
        const std::uint32_t c = c0 + u;
        if (c < chunks) {
          accumulate<QG, V::kInnerProduct>(acc, here[u * 32], [&](int j) { return queries[j * chunks + c]; });
        }
      }
    }
  } else {
    // Groups of 1, 2, 12 and 16: an unrolled loop with 16 loads in flight per warp for one query, 8
    // for two, 4 for 16 and 2 for 12 (ptxas spilled registers at 4; 10-30% faster at 2). One query
    // reads each point once, so its loads stream past the caches (ld.global.cs; H100 A/B against
    // __ldg: MNIST-like 0.945x, ImageNet-like 0.98x, GoogleNews-like 0.99x; larger groups may read
    // a tile again from L1 when they insert its survivors).
#pragma unroll(QG == 1 ? 16 : QG == 2 ? 8 : QG == 12 ? 2 : 4)
    for (std::uint32_t c = 0; c < chunks; ++c) {
      const float4* at = point + std::size_t(c) * kTile;
      accumulate<QG, V::kInnerProduct>(acc, QG == 1 ? __ldcs(at) : __ldg(at),
                                       [&](int j) { return queries[j * chunks + c]; });
    }
  }
}

/// Survivor test: which queries have a survivor in this tile (a warp-wide OR). The arithmetic is
/// unrolled per query, the (rare) insertion is not, so it exists once in the code and in the
/// registers. A float compare per query and one warp-wide OR for the whole group (ncu, 1,000,000 x
/// 2, Q = 1,024: a vote and an ordered-bits compare per query were half of the scan's
/// instructions); on these ranks (never -0, see rank_of) it is the ordered-bits test.
template <class V>
__device__ __forceinline__ unsigned survivor_bits(const ScanBlock<V>& b, const float (&acc)[V::QG], std::uint64_t id,
                                                  bool valid) {
  float limit[V::QG];
  load_limits(b, limit);
  unsigned admitted = 0;
#pragma unroll
  for (int j = 0; j < V::QG; ++j) {
    bool admit = rank_of<V::kInnerProduct>(acc[j]) <= limit[j];
    if constexpr (V::kFiltered) admit = admit && id >= b.ranges[j].begin && id < b.ranges[j].end;
    admitted |= unsigned(admit) << j;
  }
  return __reduce_or_sync(kFullMask, valid ? admitted : 0u);
}

/// First bound: the warp's first tile, held back until its other tiles are done (one query), is
/// tested against the grid's bound as it stands then.
template <class V>
__device__ __forceinline__ void insert_held_first_tile(const ScanBlock<V>& b, float first_rank) {
  const std::uint32_t lane = b.lane;
  if (lane == 0) b.thresholds[0] = fminf(b.thresholds[0], from_ordered_bits(__ldcg(&b.p.threshold[b.q0])));
  __syncwarp();
  if (__any_sync(kFullMask, first_rank <= b.thresholds[0])) {
    const std::uint32_t slot = (b.tile_begin + b.warp) * kTile + lane;
    const bool valid = b.store.valid[slot] != 0;
    b.ranks[lane] = first_rank;
    __syncwarp();
    insert_survivors(b, slot, valid, valid ? b.store.ids[slot] : kNoId, 1u);
  }
}

/// The tile loop of one point per lane: each tile scored (prefetched a tile ahead where the store
/// has one chunk, staged through the warp's ring for groups of 4 and 8), tested against the
/// thresholds, its survivors inserted. The grid-wide bound (what every full list found) is applied
/// after the arithmetic (read a tile early by one-chunk kernels: a bound read earlier is still a
/// bound).
template <class V>
__device__ __forceinline__ void scan_tiles(const ScanBlock<V>& b) {
  constexpr int QG = V::QG;
  const std::uint32_t warp = b.warp, lane = b.lane, nq = b.nq;
  TileAhead ahead{};
  ahead.valid = 0;
  ahead.bound = kNoBound;
  float first_rank = CUDART_NAN_F;  // first-tile bound: this lane's rank in the warp's first tile
  if (V::kOneChunk && b.tile_begin + warp < b.tile_end) load_tile_ahead(b, ahead, b.tile_begin + warp);
  const bool take_tiles = b.first_bound && V::kOneChunk == 0;
  float4* const ring_at = reinterpret_cast<float4*>(b.mine + b.layout.stage);
  ChunkRing ring{ring_at, (b.chunks + kStageChunks - 1) / kStageChunks, b.tile_begin + b.warp, 0, 0, 0};
  prime_ring(b, ring);
  for (std::uint32_t tile = b.tile_begin + warp; tile < b.tile_end; tile = advance_tile(b, tile, take_tiles)) {
    const std::uint32_t slot = tile * kTile + lane;
    bool valid;
    std::uint32_t grid_bound;
    float4 vector{};  // one-chunk kernels: this tile's
    if constexpr (V::kOneChunk != 0) {
      valid = ahead.valid != 0;
      grid_bound = ahead.bound;
      vector = ahead.vector;
      if (tile + b.warps < b.tile_end) load_tile_ahead(b, ahead, tile + b.warps);
    } else {
      valid = b.store.valid[slot] != 0;
      // With the first-tile bound it is read after the arithmetic instead (below), so the bound
      // the grid publishes while the warps score their second tile applies to that tile.
      grid_bound = lane < nq && !b.first_bound ? __ldcg(&b.p.threshold[b.q0 + lane]) : kNoBound;
    }
    float acc[QG];
#pragma unroll
    for (int j = 0; j < QG; ++j) acc[j] = 0.0f;
    score_tile(b, ring, tile, vector, acc);
    if (b.first_bound) {
      if (tile == b.tile_begin + warp) {
        // A NaN rank (an overflowed dot product) never counts, as in the scan and the sample pass.
        arrive_first_tile(b, [&](int j) {
          const float rank = rank_of<V::kInnerProduct>(acc[j]);
          return valid && rank <= CUDART_INF_F ? ordered_bits(rank) : kNoBound;
        });
        // Every warp ends its first tile at about the same time: merging it now (into an empty
        // list, so all of it) would leave the memory system idle grid-wide. It is held back and
        // tested against the grid's bound after the last tile (insert_held_first_tile).
        first_rank = rank_of<V::kInnerProduct>(acc[0]);
        continue;
      }
      if (V::kOneChunk == 0 && lane < nq) grid_bound = __ldcg(&b.p.threshold[b.q0 + lane]);
    }
    if (lane < nq) b.thresholds[lane] = fminf(b.thresholds[lane], from_ordered_bits(grid_bound));
    __syncwarp();
    std::uint64_t id = kNoId;
    if (V::kFiltered && valid) id = b.store.ids[slot];
    const unsigned with_survivors = survivor_bits(b, acc, id, valid);
    if (with_survivors == 0) continue;
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      if ((with_survivors >> j) & 1u) b.ranks[j * 32 + lane] = rank_of<V::kInnerProduct>(acc[j]);
    }
    __syncwarp();
    if (!V::kFiltered && valid) id = b.store.ids[slot];
    insert_survivors(b, slot, valid, id, with_survivors);
  }
  if (b.first_bound && b.tile_begin + warp < b.tile_end) insert_held_first_tile(b, first_rank);
}

}  // namespace

}  // namespace streamknn::detail::gpu
