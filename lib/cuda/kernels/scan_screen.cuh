// The scan's dot-product screen (kernels/scan.cu, ScanShape::screen): the tile loop of the
// kernels for batches of more than 12 queries over multi-chunk stores after a sample pass, in
// phases: tile scoring (screen_tile: dot products and squared norms from the warp's ring),
// survivor test (screen_flags: the proven margin of ScreenBounds), and list insert (queue_flagged,
// then rank_pending: the flagged pairs' exact ranks, 32 at a time, into the warp's lists).
// Lane a + 8 b scores points a, a + 8, a + 16, a + 24 of the tile against queries b, b + 4, .. by
// dot products (a point chunk read from the ring serves QG / 4 queries, a query chunk 4 points:
// one shared load per 11 FMAs, and half the arithmetic of the exact form) and keeps the squared
// norm of point `lane`. A pair whose exact rank is within the threshold always passes the screen
// (ScreenBounds); the pairs that pass get that exact rank, from the same direct form and chunk
// order as every other path. Inner product: the dot products are the exact ranks (same FMAs in
// the same order), so the test is the exact one.
#pragma once

#include <math_constants.h>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan_phases.cuh"

namespace streamknn::detail::gpu {

namespace {

/// Flagged pairs wait in a per-warp queue (slot, query) and get their exact ranks 32 at a time, a
/// lane each: a pair's rank is a chain of loads through every chunk, and one flagged pair per tile
/// ranked alone left the warp waiting on that chain (MNIST-like, where nearly every tile holds a
/// flagged pair). Thresholds only fall, so a pair ranked later is admitted exactly as it would have
/// been at once. Inner product queues the rank the tile computed.
/// The queue's pointers are references to the caller's variables (see ScanBlock).
struct ScreenQueue {
  std::uint32_t* const& slot;
  std::uint32_t* const& query;
  float* const& rank;   // inner product
  std::uint32_t count;  // warp-uniform
};

/// List insert of the screen: the queued pairs' exact ranks, each admitted pair into its query's
/// list; empties the queue.
template <class V>
__device__ void rank_pending(const ScanBlock<V>& blk, ScreenQueue& queue) {
  constexpr int QG = V::QG;
  const std::uint32_t lane = blk.lane, k = blk.k;
  const std::uint32_t& chunks = blk.chunks;
  float4* const& queries = blk.queries;
  __syncwarp();
  for (std::uint32_t first = 0; first < queue.count; first += 32) {
    const bool here = first + lane < queue.count;
    std::uint32_t slot = 0, j = 0;
    float rank = CUDART_NAN_F;
    bool admit = false;
    if (here) {
      slot = queue.slot[first + lane];
      j = queue.query[first + lane];
      if constexpr (V::kInnerProduct) {
        rank = queue.rank[first + lane];
      } else {
        const float4* point = blk.vectors + std::size_t(slot / kTile) * chunks * kTile + slot % kTile;
        float acc[1] = {0.0f};
        // 16 loads in flight (8 before): GoogleNews- and ImageNet-like Q = 24-64 0.98-0.99x.
#pragma unroll 16
        for (std::uint32_t c = 0; c < chunks; ++c) {
          accumulate<1, false>(acc, __ldg(point + std::size_t(c) * kTile), [&](int) { return queries[c * QG + j]; });
        }
        rank = acc[0];
      }
      admit = blk.store.valid[slot] != 0 && rank <= blk.thresholds[j];
    }
    const std::uint64_t id = admit ? blk.store.ids[slot] : kNoId;
    for (unsigned admitted = __ballot_sync(kFullMask, admit); admitted != 0; admitted &= admitted - 1) {
      const int from = __ffs(admitted) - 1;
      const std::uint32_t jj = __shfl_sync(kFullMask, j, from);
      const Candidate c{__shfl_sync(kFullMask, rank, from), __shfl_sync(kFullMask, slot, from),
                        __shfl_sync(kFullMask, id, from)};
      Candidate* list = blk.lists + std::size_t(jj) * k;
      std::uint32_t n = blk.counts[jj];
      // An insertion before this one may have lowered the threshold.
      if (!(c.rank <= blk.thresholds[jj])) continue;
      if (n == k && !closer(c.rank, c.id, list[k - 1].rank, list[k - 1].id)) continue;
      warp_insert(list, n, k, c, lane);
      // The same count and bound update as insert_survivors'. One function for both moved this
      // kernel from 114 to 122 registers and cost 3-7% here and in groups of 12 (H100), so each
      // keeps its copy.
      if (lane == 0) {
        blk.counts[jj] = n;
        if (n == k) {
          const float kth = list[k - 1].rank;
          blk.thresholds[jj] = fminf(blk.thresholds[jj], kth);
          atomicMin(&blk.p.threshold[blk.q0 + jj], ordered_bits(kth));
        }
      }
      __syncwarp();
    }
  }
  queue.count = 0;
  __syncwarp();
}

/// Tile scoring of the screen: dot[i][m] for point a + 8 i and query b + 4 m, and (L2) the squared
/// norm of point `lane`, stage by stage from the warp's ring.
template <class V>
__device__ __forceinline__ void screen_tile(const ScanBlock<V>& blk, ChunkRing& ring, float (&dot)[4][V::QG / 4],
                                            float& norm) {
  constexpr int QG = V::QG, kPerLane = QG / 4;
  const std::uint32_t lane = blk.lane, a = lane & 7, b = lane >> 3, chunks = blk.chunks;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) dot[i][m] = 0.0f;
  }
  norm = 0.0f;
  for (std::uint32_t c0 = 0; c0 < chunks; c0 += kStageChunks) {
    issue_next_stage(blk, ring);
    wait_async<kStages - 1>();
    __syncwarp();  // every lane's copies of this stage have landed
    const float4* here = ring.ring + (ring.consumed % kStages) * kStageChunks * 32;
    ++ring.consumed;
    // Groups of 16 take a stage's chunks two at a time: fully unrolled, ptxas hoisted all their
    // loads and spilled 148 bytes (groups of 32 compile as before).
#pragma unroll(QG == kScreenGroup ? kStageChunks : 2)
    for (int u = 0; u < kStageChunks; ++u) {
      const std::uint32_t c = c0 + u;
      if (c < chunks) {
        float4 point[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) point[i] = here[u * 32 + a + 8 * i];
        if constexpr (!V::kInnerProduct) {
          const float4 own = here[u * 32 + lane];
          norm = add_dot4(norm, own, own);
        }
#pragma unroll
        for (int m = 0; m < kPerLane; ++m) {
          const float4 q = blk.queries[c * QG + b + 4 * m];
#pragma unroll
          for (int i = 0; i < 4; ++i) dot[i][m] = add_dot4(dot[i][m], q, point[i]);
        }
      }
    }
    __syncwarp();  // every lane has read the stage before the next issue refills it
  }
}

/// Survivor test of the screen: bit i * kPerLane + m of the result for point a + 8 i and query
/// b + 4 m. A norm that may have overflowed flags its pairs unconditionally; a NaN threshold (rows
/// past the batch) flags nothing.
template <class V>
__device__ __forceinline__ unsigned screen_flags(const ScanBlock<V>& blk, const ScreenBounds& bounds,
                                                 const float (&dot)[4][V::QG / 4], float norm) {
  constexpr int kPerLane = V::QG / 4;
  const std::uint32_t a = blk.lane & 7, b = blk.lane >> 3;
  const float* norms = reinterpret_cast<const float*>(shared + blk.layout.norms);
  float point_norm[4] = {};
  bool huge_point[4] = {};
  if constexpr (!V::kInnerProduct) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      point_norm[i] = __shfl_sync(kFullMask, norm, a + 8 * i);
      huge_point[i] = point_norm[i] >= bounds.huge;
    }
  }
  unsigned flags = 0;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const std::uint32_t j = b + 4 * m;
    if constexpr (V::kInnerProduct) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        flags |= unsigned(rank_of<true>(dot[i][m]) <= blk.thresholds[j]) << (i * kPerLane + m);
      }
      continue;
    }
    const float query_norm = norms[j];
    const float limit = screen_limit(bounds, blk.thresholds[j], query_norm);
    const bool huge_query = query_norm >= bounds.huge;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float screened = __fmaf_rn(-2.0f, dot[i][m], point_norm[i]);
      const bool pass =
          screened <= __fmaf_ru(bounds.norm_scale, point_norm[i], limit) || huge_point[i] || huge_query;
      flags |= unsigned(pass) << (i * kPerLane + m);
    }
  }
  return flags;
}

/// Queues the tile's flagged pairs, one bit position (point, query) at a time across the warp,
/// ranking the queue whenever it holds 32 or more.
template <class V>
__device__ __forceinline__ void queue_flagged(const ScanBlock<V>& blk, ScreenQueue& queue, std::uint32_t tile,
                                              unsigned flags, const float (&dot)[4][V::QG / 4]) {
  constexpr int kPerLane = V::QG / 4;
  const std::uint32_t lane = blk.lane, a = lane & 7, b = lane >> 3;
  for (unsigned bits = __reduce_or_sync(kFullMask, flags); bits != 0; bits &= bits - 1) {
    const int r = __ffs(bits) - 1;
    const bool mine = (flags >> r) & 1u;
    const unsigned queued = __ballot_sync(kFullMask, mine);
    if (mine) {
      const std::uint32_t at = queue.count + __popc(queued & ((1u << lane) - 1));
      queue.slot[at] = tile * kTile + a + 8 * (r / kPerLane);
      queue.query[at] = b + 4 * (r % kPerLane);
      if constexpr (V::kInnerProduct) {  // the exact rank: dot[r / kPerLane][r % kPerLane]
        float dot_r = 0.0f;
#pragma unroll
        for (int t = 0; t < 4 * kPerLane; ++t) {
          if (t == r) dot_r = dot[t / kPerLane][t % kPerLane];
        }
        queue.rank[at] = rank_of<true>(dot_r);
      }
    }
    queue.count += __popc(queued);
    if (queue.count >= 32) rank_pending(blk, queue);
  }
}

/// The screen's tile loop: per tile its dot products, the thresholds updated from the grid-wide
/// bound, the screen, and the flagged pairs queued; the queue's last pairs ranked at the end.
template <class V>
__device__ __forceinline__ void scan_screened(const ScanBlock<V>& blk) {
  constexpr int kPerLane = V::QG / 4;
  const std::uint32_t lane = blk.lane;
  float4* const ring_at = reinterpret_cast<float4*>(blk.mine + blk.layout.stage);
  ChunkRing ring{ring_at, (blk.chunks + kStageChunks - 1) / kStageChunks, blk.tile_begin + blk.warp, 0, 0, 0};
  prime_ring(blk, ring);
  const ScreenBounds bounds = blk.p.screen;
  std::uint32_t* const pending_slot = reinterpret_cast<std::uint32_t*>(blk.mine + blk.layout.pending);
  std::uint32_t* const pending_query = pending_slot + kPendingPairs;
  float* const pending_rank = reinterpret_cast<float*>(pending_query + kPendingPairs);
  ScreenQueue queue{pending_slot, pending_query, pending_rank, 0};
  for (std::uint32_t tile = blk.tile_begin + blk.warp; tile < blk.tile_end; tile += blk.warps) {
    float dot[4][kPerLane];
    float norm;
    screen_tile(blk, ring, dot, norm);
    if (lane < blk.nq) {
      blk.thresholds[lane] = fminf(blk.thresholds[lane], from_ordered_bits(__ldcg(&blk.p.threshold[blk.q0 + lane])));
    }
    __syncwarp();
    queue_flagged(blk, queue, tile, screen_flags(blk, bounds, dot, norm), dot);
  }
  rank_pending(blk, queue);
}

}  // namespace

}  // namespace streamknn::detail::gpu
