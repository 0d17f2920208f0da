// The scan kernel's steps around its tile loops, and the per-warp callables every form of the loop
// shares (only scan.cu and its scan_*.cuh parts include it): staging the query group, starting
// the warp's lists, the block's merge at the end; a warp's arrival at the first-tile bound, the
// insertion of a tile's survivors, the read of the warp's thresholds and the issue of its staged
// chunks.
//
// The compiler shapes how scan_kernel is split into these functions (here, scan_loops.cuh and
// scan_screen.cuh): it places a called function's stack variables ahead of its caller's, and
// their order decides how it assigns the kernel's registers. So the kernel declares its state
// (every variable whose address is taken: an array, or one a callable holds) where it first
// needs it, and the functions take it by reference. The functions are __forceinline__. The
// callables are structs of references whose calls the compiler inlines late, as it does a
// lambda's; copies of the same values in a struct compile to other code.
// bench/tools/same_machine_code.py checks a change to this split.
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scan_layout.cuh"
#include "cuda/kernels/scan_lists.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr std::uint32_t kBulkMinSurvivors = 4;   // fewer survivors are inserted one by one

/// Copies the query group into shared memory (rows past the batch as zeros) and, for the L2
/// screen, computes their squared norms.
template <int QG, bool kInnerProduct, bool kScreen>
__device__ __forceinline__ void stage_queries(const ScanParams& p, unsigned char* shared, const SharedLayout& layout,
                                              float4* queries, std::uint32_t warps, std::uint32_t warp,
                                              std::uint32_t lane, std::uint32_t chunks, std::uint32_t q0,
                                              std::uint32_t nq) {
  const float4* query_rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
#pragma unroll(kScreen ? 4 : 1)
  for (std::uint32_t i = threadIdx.x; i < QG * chunks; i += blockDim.x) {
    // The screen reads one chunk of several queries at once: chunk-major there.
    queries[kScreen ? (i % chunks) * QG + i / chunks : i] = i < nq * chunks ? query_rows[i] : make_float4(0, 0, 0, 0);
  }
  if constexpr (kScreen && !kInnerProduct) {
    // Squared norms for the screen, from the staged chunks, a warp per query (rows past the batch
    // are zeros: 0). The bound holds for any summation order (screen_bounds). One thread per query
    // walking its row in global memory held the block for a chain of loads: MNIST-like, 196.
    __syncthreads();
    for (std::uint32_t j = warp; j < std::uint32_t(QG); j += warps) {
      float norm = 0.0f;
      for (std::uint32_t c = lane; c < chunks; c += 32) {
        const float4 v = queries[c * QG + j];
        norm = __fmaf_rn(v.x, v.x, __fmaf_rn(v.y, v.y, __fmaf_rn(v.z, v.z, __fmaf_rn(v.w, v.w, norm))));
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) norm = __fadd_rn(norm, __shfl_xor_sync(kFullMask, norm, offset));
      if (lane == 0) reinterpret_cast<float*>(shared + layout.norms)[j] = norm;
    }
  }
}

/// Starts the query group's id ranges, this warp's empty lists and its thresholds, and the
/// first-tile bound's block state (first_min, first_arrived, next_tile: the kernel's shared
/// memory); ends with the block's first barrier.
template <int QG, bool kFiltered>
__device__ __forceinline__ void start_lists(const ScanParams& p, IdRangeDevice* ranges, std::uint32_t* counts,
                                            float* thresholds, std::uint32_t lane, std::uint32_t q0, std::uint32_t nq,
                                            std::uint32_t* first_min, std::uint32_t* first_arrived,
                                            std::uint32_t* next_tile) {
  if (kFiltered && threadIdx.x < QG) {
    ranges[threadIdx.x] = threadIdx.x < nq ? p.ranges[q0 + threadIdx.x] : IdRangeDevice{0, 0};
  }
  if (lane < QG) {
    counts[lane] = 0;  // start from the bound a sample pass may have found; NaN admits nothing
    thresholds[lane] = lane < nq ? from_ordered_bits(__ldcg(&p.threshold[q0 + lane])) : CUDART_NAN_F;
  }
  // First-tile bound: the smallest rank of the block's first tiles per query, and the warps done.
  if (threadIdx.x < 16) first_min[threadIdx.x] = kNoBound;
  if (threadIdx.x == 0) {
    *first_arrived = 0;
    *next_tile = 0;
  }
  __syncthreads();
}

/// The end of the scan, after the tile loop: one barrier, the block's merge of its warps' lists
/// (merge_block_lists; kept and bound: the kernel's shared arrays for it), then each query's
/// list length.
template <int QG, bool kGlobalLists, int kOneChunk>
__device__ __forceinline__ void write_block_lists(const ScanParams& p, const unsigned char* shared,
                                                  const SharedLayout& layout, Candidate* const& block_lists,
                                                  const std::uint32_t& warps, const std::uint32_t& k,
                                                  const std::uint32_t& q0, const std::uint32_t& nq, std::uint32_t* kept,
                                                  std::uint32_t* bound) {
  __syncthreads();

  // Merge the warps' lists of each query: entry i of warp w's list lands at i plus the number
  // of entries of the other lists closer than it. Entries beyond k, or beyond the grid-wide
  // bound (worse than some list's k-th, so not in the answer), are dropped.
  merge_block_lists<QG, kGlobalLists, kOneChunk>(p, shared, layout, block_lists, warps, k, q0, nq, kept, bound);
  __syncthreads();
  if (threadIdx.x < nq) p.lengths[std::size_t(q0 + threadIdx.x) * gridDim.x + blockIdx.x] = kept[threadIdx.x];
}

/// Each warp arrives once, with its first tile's ranks (key_of(j): this lane's ordered rank for
/// query j, kNoBound for none); the block's last warp goes on to the grid-wide part. first_min,
/// first_arrived and first_staged: the first-tile bound's state in the kernel's shared memory.
template <int QG>
struct FirstTileArrival {
  const ScanParams& p;
  const std::uint32_t& warps;
  const std::uint32_t& lane;
  const std::uint32_t& q0;
  const std::uint32_t& nq;
  const std::uint32_t& k;
  std::uint32_t* const first_min;
  std::uint32_t* const first_arrived;
  std::uint32_t* const first_staged;

  template <class KeyOf>
  __device__ void operator()(KeyOf key_of) const {
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      if (j < int(nq)) {
        const std::uint32_t smallest = __reduce_min_sync(kFullMask, key_of(j));
        if (lane == 0) atomicMin(&first_min[j], smallest);
      }
    }
    __threadfence_block();
    unsigned last = 0;
    if (lane == 0) last = atomicAdd(first_arrived, 1u) == warps - 1;
    if (__shfl_sync(kFullMask, last, 0)) {
      publish_first_bound(p.first_keys, p.first_arrivals, p.threshold, first_min, first_staged, q0, nq, k, lane);
    }
  }
};

/// Inserts one tile's survivors into the warp's lists: the queries in with_survivors have their
/// ranks of this tile staged in `ranks`. Rare once the thresholds are tight, so it exists once
/// in the code and in the registers.
template <int QG, bool kFiltered>
struct TileInsertion {
  const ScanParams& p;
  const StoreView& store;
  const std::uint32_t& lane;
  const std::uint32_t& q0;
  const std::uint32_t& k;
  IdRangeDevice* const& ranges;
  Candidate* const& lists;
  std::uint32_t* const& counts;
  float* const& thresholds;
  float* const& ranks;
  Candidate* const& scratch;

  __device__ void operator()(std::uint32_t slot, bool valid, std::uint64_t id, unsigned with_survivors) const {
#pragma unroll 1
    while (with_survivors) {
      const int j = __ffs(with_survivors) - 1;
      with_survivors &= with_survivors - 1;
      const float rank = ranks[j * 32 + lane];
      bool admit = valid && rank <= thresholds[j];
      if constexpr (kFiltered) admit = admit && filter_admits(ranges[j], p.predicates[q0 + j], store, slot, id);
      unsigned survivors = __ballot_sync(kFullMask, admit);
      Candidate* list = lists + std::size_t(j) * k;
      std::uint32_t n = counts[j];
      if (__popc(survivors) >= kBulkMinSurvivors) {
        warp_merge(list, n, k, Candidate{rank, slot, id}, survivors, scratch, lane);
        survivors = 0;
      }
      while (survivors) {
        const int from = __ffs(survivors) - 1;
        survivors &= survivors - 1;
        const Candidate c{__shfl_sync(kFullMask, rank, from), __shfl_sync(kFullMask, slot, from),
                          __shfl_sync(kFullMask, id, from)};
        if (n == k && !closer(c.rank, c.id, list[k - 1].rank, list[k - 1].id)) continue;
        warp_insert(list, n, k, c, lane);
      }
      __syncwarp();
      if (lane == 0) {
        counts[j] = n;
        if (n == k) {
          const float kth = list[k - 1].rank;
          thresholds[j] = fminf(thresholds[j], kth);
          atomicMin(&p.threshold[q0 + j], ordered_bits(kth));
        }
      }
      __syncwarp();
    }
  }
};

/// This warp's thresholds, read once per tile (four at a time where the group allows).
template <int QG>
struct LimitLoader {
  float* const& thresholds;

  __device__ void operator()(float (&limit)[QG]) const {
    if constexpr (QG % 4 == 0) {
#pragma unroll
      for (int i = 0; i < QG / 4; ++i) {
        const float4 t = reinterpret_cast<const float4*>(thresholds)[i];
        limit[4 * i] = t.x;
        limit[4 * i + 1] = t.y;
        limit[4 * i + 2] = t.z;
        limit[4 * i + 3] = t.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < QG; ++j) limit[j] = thresholds[j];
    }
  }
};

/// Staged loads and the screen: the warp's tiles (tile_begin + warp, + warps, ..) as one stream of
/// stages of kStageChunks chunks; each call copies the next stage into the ring and commits it (an
/// empty group past the end, so every wait counts the same groups).
struct StageIssuer {
  const std::uint32_t& warps;
  const std::uint32_t& lane;
  const std::uint32_t& chunks;
  const std::uint32_t& tile_end;
  const float4* const& vectors;
  float4* const& ring;
  const std::uint32_t& stages_per_tile;
  std::uint32_t& issue_tile;
  std::uint32_t& issue_stage;
  std::uint32_t& issued;

  __device__ void operator()() const {
    if (issue_tile < tile_end) {
      const float4* from = vectors + (std::size_t(issue_tile) * chunks + issue_stage * kStageChunks) * kTile + lane;
      float4* to = ring + (issued % kStages) * kStageChunks * 32 + lane;
#pragma unroll
      for (int u = 0; u < kStageChunks; ++u) {
        if (issue_stage * kStageChunks + u < chunks) copy_async16(to + u * 32, from + std::size_t(u) * kTile);
      }
      if (++issue_stage == stages_per_tile) {
        issue_stage = 0;
        issue_tile += warps;
      }
    }
    commit_async();
    ++issued;
  }
};

}  // namespace

}  // namespace streamknn::detail::gpu
