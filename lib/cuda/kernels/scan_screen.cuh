// The scan kernel's dot-product screen (kScreen; only scan.cu includes it): the tile loop
// of batches of more than 12 queries over stores of several chunks, after a sample pass, its test
// of each (point, query) pair, and its queue of flagged pairs ranked 32 at a time. See
// scan_block.cuh for how the kernel's state reaches these functions.
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scan_block.cuh"
#include "cuda/kernels/scan_layout.cuh"
#include "cuda/kernels/scan_lists.cuh"

namespace streamknn::detail::gpu {

namespace {

/// Ranks the queued pairs (pending_slot, pending_query; inner product: pending_rank), a lane each,
/// inserts those within their threshold into the warp's lists and empties the queue.
template <int QG, bool kInnerProduct>
struct PendingRanker {
  const ScanParams& p;
  const StoreView& store;
  const std::uint32_t& lane;
  const std::uint32_t& chunks;
  const std::uint32_t& k;
  const std::uint32_t& q0;
  const float4* const& vectors;
  float4* const& queries;
  Candidate* const& lists;
  std::uint32_t* const& counts;
  float* const& thresholds;
  std::uint32_t* const& pending_slot;
  std::uint32_t* const& pending_query;
  float* const& pending_rank;
  std::uint32_t& pending_count;

  __device__ void operator()() const {
    // The query accessor below holds the kernel's variable itself, not this callable.
    float4* const& queries = this->queries;
    __syncwarp();
    for (std::uint32_t first = 0; first < pending_count; first += 32) {
      const bool here = first + lane < pending_count;
      std::uint32_t slot = 0, j = 0;
      float rank = CUDART_NAN_F;
      bool admit = false;
      if (here) {
        slot = pending_slot[first + lane];
        j = pending_query[first + lane];
        if constexpr (kInnerProduct) {
          rank = pending_rank[first + lane];
        } else {
          const float4* point = vectors + std::size_t(slot / kTile) * chunks * kTile + slot % kTile;
          float acc[1] = {0.0f};
          // 16 loads in flight (8 before): GoogleNews- and ImageNet-like Q = 24-64 0.98-0.99x.
#pragma unroll 16
          for (std::uint32_t c = 0; c < chunks; ++c) {
            accumulate<1, false>(acc, __ldg(point + std::size_t(c) * kTile),
                                 [&](int) { return queries[c * QG + j]; });
          }
          rank = acc[0];
        }
        admit = store.valid[slot] != 0 && rank <= thresholds[j];
      }
      const std::uint64_t id = admit ? store.ids[slot] : kNoId;
      for (unsigned admitted = __ballot_sync(kFullMask, admit); admitted != 0; admitted &= admitted - 1) {
        const int from = __ffs(admitted) - 1;
        const std::uint32_t jj = __shfl_sync(kFullMask, j, from);
        const Candidate c{__shfl_sync(kFullMask, rank, from), __shfl_sync(kFullMask, slot, from),
                          __shfl_sync(kFullMask, id, from)};
        Candidate* list = lists + std::size_t(jj) * k;
        std::uint32_t n = counts[jj];
        // An insertion before this one may have lowered the threshold.
        if (!(c.rank <= thresholds[jj])) continue;
        if (n == k && !closer(c.rank, c.id, list[k - 1].rank, list[k - 1].id)) continue;
        warp_insert(list, n, k, c, lane);
        // The same count and bound update as TileInsertion's. One callable for both moved this
        // kernel from 114 to 122 registers and cost 3-7% here and in groups of 12 (H100), so
        // each keeps its copy.
        if (lane == 0) {
          counts[jj] = n;
          if (n == k) {
            const float kth = list[k - 1].rank;
            thresholds[jj] = fminf(thresholds[jj], kth);
            atomicMin(&p.threshold[q0 + jj], ordered_bits(kth));
          }
        }
        __syncwarp();
      }
    }
    pending_count = 0;
    __syncwarp();
  }
};

/// The screen: bit i * kPerLane + m of the result for point a + 8 i and query b + 4 m. A norm
/// that may have overflowed flags its pairs unconditionally; a NaN threshold (rows past the
/// batch) flags nothing. point_norm and huge_point: the kernel's arrays for the points' norms.
template <int QG, bool kInnerProduct>
__device__ __forceinline__ unsigned screen_flags(const float (&dot)[4][QG / 4], const float& norm,
                                                 float (&point_norm)[4], bool (&huge_point)[4],
                                                 const std::uint32_t& a, const std::uint32_t& b,
                                                 const ScreenBounds& bounds, const float* const& norms,
                                                 float* const& thresholds) {
  constexpr int kPerLane = QG / 4;
  if constexpr (!kInnerProduct) {
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
    if constexpr (kInnerProduct) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        flags |= unsigned(rank_of<true>(dot[i][m]) <= thresholds[j]) << (i * kPerLane + m);
      }
      continue;
    }
    const float query_norm = norms[j];
    const float limit = screen_limit(bounds, thresholds[j], query_norm);
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

/// Queues the flagged pairs of `tile`, one bit position (point, query) at a time across the
/// warp, and ranks the queue whenever it holds 32 or more.
template <int QG, bool kInnerProduct, class RankPending>
__device__ __forceinline__ void queue_flagged(const std::uint32_t& tile, const unsigned& flags,
                                              const float (&dot)[4][QG / 4], const std::uint32_t& lane,
                                              const std::uint32_t& a, const std::uint32_t& b,
                                              std::uint32_t* const& pending_slot, std::uint32_t* const& pending_query,
                                              float* const& pending_rank, std::uint32_t& pending_count,
                                              const RankPending& rank_pending) {
  constexpr int kPerLane = QG / 4;
  for (unsigned bits = __reduce_or_sync(kFullMask, flags); bits != 0; bits &= bits - 1) {
    const int r = __ffs(bits) - 1;
    const bool mine = (flags >> r) & 1u;
    const unsigned queued = __ballot_sync(kFullMask, mine);
    if (mine) {
      const std::uint32_t at = pending_count + __popc(queued & ((1u << lane) - 1));
      pending_slot[at] = tile * kTile + a + 8 * (r / kPerLane);
      pending_query[at] = b + 4 * (r % kPerLane);
      if constexpr (kInnerProduct) {  // the exact rank: dot[r / kPerLane][r % kPerLane]
        float dot_r = 0.0f;
#pragma unroll
        for (int t = 0; t < 4 * kPerLane; ++t) {
          if (t == r) dot_r = dot[t / kPerLane][t % kPerLane];
        }
        pending_rank[at] = rank_of<true>(dot_r);
      }
    }
    pending_count += __popc(queued);
    if (pending_count >= 32) rank_pending();
  }
}

/// The screen's loop over the warp's tiles: lane a + 8 b scores points a, a + 8, a + 16, a + 24 of
/// the tile against queries b, b + 4, .. by dot products (a point chunk read from the ring serves
/// QG / 4 queries, a query chunk 4 points: one shared load per 11 FMAs, and half the arithmetic of
/// the exact form) and keeps the squared norm of point `lane`. A pair whose exact rank is within
/// the threshold always passes the screen (ScreenBounds); the pairs that pass get that exact rank,
/// from the same direct form and chunk order as every other path. Inner product: the dot products
/// are the exact ranks (same FMAs in the same order), so the test is the exact one.
template <int QG, bool kInnerProduct>
__device__ __forceinline__ void scan_screen(
    const ScanParams& p, const StoreView& store, const std::uint32_t& warps, const std::uint32_t& warp,
    const std::uint32_t& lane, const std::uint32_t& chunks, const std::uint32_t& k, const std::uint32_t& q0,
    const std::uint32_t& nq, const SharedLayout& layout, unsigned char* shared, unsigned char* const& mine,
    const std::uint32_t& tile_begin, const std::uint32_t& tile_end, const float4* const& vectors,
    float4* const& queries, Candidate* const& lists, std::uint32_t* const& counts, float* const& thresholds) {
  // The warp's ring of staged chunks (StageIssuer).
  float4* const ring = reinterpret_cast<float4*>(mine + layout.stage);
  const std::uint32_t stages_per_tile = (chunks + kStageChunks - 1) / kStageChunks;
  std::uint32_t issue_tile = tile_begin + warp, issue_stage = 0, issued = 0;
  StageIssuer issue{warps, lane, chunks, tile_end, vectors, ring, stages_per_tile, issue_tile, issue_stage, issued};
#pragma unroll
  for (int i = 0; i + 1 < kStages; ++i) issue();
  // The stage to score next. It equals issued - kStages after each issue(), but deriving it so
  // made groups of 4 3-4% slower on large stores (code generation; H100).
  std::uint32_t consumed = 0;
  constexpr int kPerLane = QG / 4;
  const std::uint32_t a = lane & 7, b = lane >> 3;
  const ScreenBounds bounds = p.screen;
  const float* norms = reinterpret_cast<const float*>(shared + layout.norms);
  // Flagged pairs wait in a per-warp queue (slot, query) and get their exact ranks 32 at a
  // time, a lane each: a pair's rank is a chain of loads through every chunk, and one flagged
  // pair per tile ranked alone left the warp waiting on that chain (MNIST-like, where nearly
  // every tile holds a flagged pair). Thresholds only fall, so a pair ranked later is admitted
  // exactly as it would have been at once. Inner product queues the rank the tile computed.
  std::uint32_t* const pending_slot = reinterpret_cast<std::uint32_t*>(mine + layout.pending);
  std::uint32_t* const pending_query = pending_slot + kPendingPairs;
  float* const pending_rank = reinterpret_cast<float*>(pending_query + kPendingPairs);  // inner product
  std::uint32_t pending_count = 0;  // warp-uniform
  PendingRanker<QG, kInnerProduct> rank_pending{p, store, lane, chunks, k, q0, vectors, queries, lists, counts,
                                                thresholds, pending_slot, pending_query, pending_rank, pending_count};
  for (std::uint32_t tile = tile_begin + warp; tile < tile_end; tile += warps) {
    float dot[4][kPerLane];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) dot[i][m] = 0.0f;
    }
    float norm = 0.0f;
    for (std::uint32_t c0 = 0; c0 < chunks; c0 += kStageChunks) {
      issue();
      wait_async<kStages - 1>();
      __syncwarp();  // every lane's copies of this stage have landed
      const float4* here = ring + (consumed % kStages) * kStageChunks * 32;
      ++consumed;
      // Groups of 16 take a stage's chunks two at a time: fully unrolled, ptxas hoisted all
      // their loads and spilled 148 bytes (groups of 32 compile as before).
#pragma unroll(QG == kScreenGroup ? kStageChunks : 2)
      for (int u = 0; u < kStageChunks; ++u) {
        const std::uint32_t c = c0 + u;
        if (c < chunks) {
          float4 point[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) point[i] = here[u * 32 + a + 8 * i];
          if constexpr (!kInnerProduct) {
            const float4 own = here[u * 32 + lane];
            norm = add_dot4(norm, own, own);
          }
#pragma unroll
          for (int m = 0; m < kPerLane; ++m) {
            const float4 q = queries[c * QG + b + 4 * m];
#pragma unroll
            for (int i = 0; i < 4; ++i) dot[i][m] = add_dot4(dot[i][m], q, point[i]);
          }
        }
      }
      __syncwarp();  // every lane has read the stage before issue() refills it
    }
    if (lane < nq) thresholds[lane] = fminf(thresholds[lane], from_ordered_bits(__ldcg(&p.threshold[q0 + lane])));
    __syncwarp();
    float point_norm[4] = {};
    bool huge_point[4] = {};
    const unsigned flags =
        screen_flags<QG, kInnerProduct>(dot, norm, point_norm, huge_point, a, b, bounds, norms, thresholds);
    queue_flagged<QG, kInnerProduct>(tile, flags, dot, lane, a, b, pending_slot, pending_query, pending_rank,
                                     pending_count, rank_pending);
  }
  rank_pending();
}

}  // namespace

}  // namespace streamknn::detail::gpu
