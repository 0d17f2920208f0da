// The small-batch filter path for stores of one float4 chunk per vector (dim <= 4: the GIS case),
// batches of up to kFilterMaxQueries queries and k <= kFilterMaxK: one cooperative kernel.
//
// The general pipeline (scan, select) costs one query on 100,000 x 2 about 20 us of kernels
// (ncu: scan 11.7, select 8.2), almost all of it chains of dependent steps: the scan's warp
// lists start cold, so every warp merges its first 32 points and every block merges its warps'
// lists, and the selection works through 391 blocks' lists. This path keeps no lists:
//
//   sample   a warp per sampled tile (every step-th) writes, per query, the tile's smallest
//            (rank, id) key. The block that finishes this last (a counter after a fence) selects
//            the k-th smallest of those minima: they are k distinct points, so at least k points
//            of the store have a key within it, a valid bound on the k-th nearest (+inf with
//            fewer than k minima). It publishes the bounds through a flag; the other blocks load
//            their first tile meanwhile, then wait for it (all blocks are resident: a
//            cooperative launch).
//   filter   every point is ranked once; those with a key within the bound are appended to the
//            query's candidate buffer (one atomic per warp and query).
//   select   the block that finishes the filter last selects the k smallest candidates (radix
//            select, staged in registers), orders them by counting and writes the reported
//            distances, ids and slots, as the selection kernel does.
//
// About step x k points per query pass the bound on data in random slot order; stores whose
// slots follow space, or heavy ties with ids in slot order, let in up to 32 times more, which
// only costs the last block time. More than `capacity` is still exact: the last block then
// selects over the whole store itself (slow, never wrong).
//
// Ranks are computed exactly as the scan computes them (accumulate / rank_of on the same float4
// chunk), so a query's answer has the same bits whichever path its batch takes.
#include <math_constants.h>

#include "cuda/kernels.hpp"
#include "cuda/kernels/select_common.cuh"

namespace streamknn::detail::gpu {

namespace {

/// Lane's point of a tile: for stores of at most two elements an 8-byte load (see accumulate).
template <int kWidth>
__device__ __forceinline__ float4 load_point(const float4* vectors, std::uint32_t tile, std::uint32_t lane) {
  const float4* at = vectors + std::size_t(tile) * kTile + lane;
  if constexpr (kWidth == 2) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(at));
    return make_float4(v.x, v.y, 0.0f, 0.0f);
  } else {
    return __ldg(at);
  }
}

template <bool kInnerProduct, int kWidth>
__device__ __forceinline__ float rank_against(const float4& point, const float4& query) {
  float acc[1] = {0.0f};
  accumulate<1, kInnerProduct, kWidth>(acc, point, [&](int) { return query; });
  return rank_of<kInnerProduct>(acc[0]);
}

/// True in the block's threads of the grid's last block to get here: the blocks before it have
/// made their global writes visible (fence, then count). Every thread must call it.
__device__ __forceinline__ bool last_block(std::uint32_t* done) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

/// Candidates each thread of a last block holds in registers: lists of up to kFilterThreads x
/// kStaged are read from L2 once instead of once per radix pass.
constexpr std::uint32_t kStaged = 4;
constexpr std::uint32_t kMaxStaged = kFilterThreads * kStaged;

/// Runs select(for_each) over the n candidates at `from` (written by other blocks of this
/// kernel), staged in registers when they fit, else read from L2 on every visit; for_each is
/// a source as kth_smallest takes.
template <class Select>
__device__ __forceinline__ void over_candidates(const Candidate* from, std::uint32_t n, Select select) {
  if (n <= kMaxStaged) {
    Candidate staged[kStaged];
#pragma unroll
    for (std::uint32_t r = 0; r < kStaged; ++r) {
      const std::uint32_t i = r * blockDim.x + threadIdx.x;
      staged[r] = i < n ? load_cg(from + i) : padding_candidate();
    }
    const std::uint32_t rounds = (n + blockDim.x - 1) / blockDim.x;  // the same in every thread
    select([&](auto f) {
#pragma unroll
      for (std::uint32_t r = 0; r < kStaged; ++r) {
        if (r < rounds) f(staged[r], r * blockDim.x + threadIdx.x < n);
      }
    });
  } else {
    select([&](auto f) { block_uniform_for(n, [&](std::uint32_t i) { return load_cg(from + i); }, f); });
  }
}

/// Writes, per query, the smallest (rank, id) key of sampled tile `sample_tile` (one warp).
template <bool kInnerProduct, int kWidth>
__device__ void sample_minimum(const FilterParams& p, const StoreView& store, std::uint32_t tiles,
                               std::uint32_t sample_tile, std::uint32_t lane) {
  const std::uint32_t tile = sample_tile * p.step;
  const std::uint32_t slot = tile * kTile + lane;
  const bool valid = tile < tiles && store.valid[slot] != 0;
  const float4 point = tile < tiles ? load_point<kWidth>(static_cast<const float4*>(store.vectors), tile, lane)
                                    : make_float4(0, 0, 0, 0);
  const std::uint64_t id = valid ? store.ids[slot] : kNoId;
  for (std::uint32_t j = 0; j < p.num_queries; ++j) {
    const float rank = rank_against<kInnerProduct, kWidth>(point, __ldg(reinterpret_cast<const float4*>(p.queries) + j));
    // A NaN rank (an overflowed dot product) never counts, as in the scan.
    const bool counts = valid && rank <= CUDART_INF_F;
    // The tile's smallest (rank, id) key: the smallest ordered rank, then the smallest id.
    const std::uint32_t hi = counts ? ordered_bits(rank) : kNoBound;
    const std::uint32_t best_hi = __reduce_min_sync(kFullMask, hi);
    const bool tied = counts && hi == best_hi;
    const std::uint32_t id_hi = __reduce_min_sync(kFullMask, tied ? std::uint32_t(id >> 32) : ~0u);
    const bool tied_hi = tied && std::uint32_t(id >> 32) == id_hi;
    const std::uint32_t id_lo = __reduce_min_sync(kFullMask, tied_hi ? std::uint32_t(id) : ~0u);
    const unsigned best = __ballot_sync(kFullMask, tied_hi && std::uint32_t(id) == id_lo);
    Candidate* minimum = p.sample + std::size_t(j) * p.sample_tiles + sample_tile;
    if (best == 0 && lane == 0) *minimum = padding_candidate();  // nothing valid in the tile
    if (best != 0 && lane == std::uint32_t(__ffs(best) - 1)) *minimum = Candidate{rank, slot, id};
  }
}

/// The block that finished the sample last: per query, the k-th smallest minimum as the bound
/// (+inf when fewer than k tiles were sampled), the candidate counts zeroed, then the bounds
/// published (fence, then the flag the other blocks wait on).
__device__ void publish_bounds(const FilterParams& p) {
  for (std::uint32_t j = 0; j < p.num_queries; ++j) {
    const Candidate* minima = p.sample + std::size_t(j) * p.sample_tiles;
    Candidate bound{CUDART_INF_F, ~0u, kNoId};  // too few minima: every ranked point may be needed
    if (p.sample_tiles >= p.k) {
      over_candidates(minima, p.sample_tiles, [&](auto for_each) { bound = kth_smallest(for_each, p.sample_tiles, p.k); });
    }
    if (threadIdx.x == 0) {
      p.state->bound[j] = bound;
      p.state->count[j] = 0;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    p.state->sample_done = 0;  // every block has arrived
    __threadfence();
    atomicExch(&p.state->bounds_ready, 1u);
  }
}

/// Waits (thread 0 polling, the block at a barrier) until the bounds are published.
__device__ void wait_for_bounds(const FilterParams& p) {
  if (threadIdx.x == 0) {
    while (atomicAdd(&p.state->bounds_ready, 0u) == 0) __nanosleep(32);
    __threadfence();
  }
  __syncthreads();
}

/// Appends this lane's candidate of query j to its buffer, one atomic per warp.
__device__ __forceinline__ void append(const FilterParams& p, std::uint32_t j, bool admit, const Candidate& c,
                                       std::uint32_t lane) {
  const unsigned admitted = __ballot_sync(kFullMask, admit);
  if (admitted == 0) return;
  const int leader = __ffs(admitted) - 1;
  std::uint32_t base = 0;
  if (lane == std::uint32_t(leader)) base = atomicAdd(&p.state->count[j], std::uint32_t(__popc(admitted)));
  base = __shfl_sync(kFullMask, base, leader);
  const std::uint32_t at = base + __popc(admitted & ((1u << lane) - 1u));
  if (admit && at < p.capacity) p.candidates[std::size_t(j) * p.capacity + at] = c;
}

/// The last block's work for query j: the k smallest candidates, ordered and written out.
template <bool kInnerProduct, int kWidth>
__device__ void finish_query(const FilterParams& p, const StoreView& store, std::uint32_t j) {
  __shared__ Candidate winners[kFilterMaxK];
  __shared__ std::uint32_t won;
  const std::uint32_t k = p.k, count = __ldcg(&p.state->count[j]);
  const Candidate bound = load_cg(&p.state->bound[j]);
  const Candidate* candidates = p.candidates + std::size_t(j) * p.capacity;
  if (threadIdx.x == 0) won = 0;
  __syncthreads();
  auto gather = [&](auto for_each, std::uint32_t n) {  // winners <- the k smallest of n (or all)
    const Candidate kth = n > k ? kth_smallest(for_each, n, k) : padding_candidate();
    for_each([&](const Candidate& c, bool real) {
      if (real && !less_candidate(kth, c)) winners[atomicAdd(&won, 1u)] = c;
    });
    __syncthreads();
  };
  if (count <= p.capacity) {
    over_candidates(candidates, count, [&](auto for_each) { gather(for_each, count); });
  } else {
    // More candidates than the buffer holds (heavy ties, or slots that follow space): select
    // over every point within the bound, ranked again from the store.
    const float4 query = __ldg(reinterpret_cast<const float4*>(p.queries) + j);
    gather(
        [&](auto f) {
          block_uniform_for(store.slot_count,
                            [&](std::uint32_t slot) {
                              const float4 point = load_point<kWidth>(static_cast<const float4*>(store.vectors),
                                                                      slot / kTile, slot % kTile);
                              return Candidate{rank_against<kInnerProduct, kWidth>(point, query), slot,
                                               store.valid[slot] != 0 ? store.ids[slot] : kNoId};
                            },
                            [&](const Candidate& c, bool real) {
                              // NaN ranks and erased slots never pass, as in the filter pass.
                              f(c, real && c.id != kNoId && c.rank <= bound.rank && !less_candidate(bound, c));
                            });
        },
        count);
  }
  const std::uint32_t n = won;
  const std::size_t row = std::size_t(j) * k;
  auto emit = [&](std::uint32_t at, const Candidate& c) {
    const bool real = c.id != kNoId;
    p.out_distance[row + at] = real ? reported(p.metric, c.rank) : CUDART_INF_F;
    p.out_id[row + at] = c.id;
    p.out_slot[row + at] = real ? c.slot : ~0u;
  };
  emit_by_counting(winners, n, emit);
  for (std::uint32_t at = n + threadIdx.x; at < k; at += blockDim.x) emit(at, padding_candidate());
  __syncthreads();  // winners and won are reused by the next query
}

template <bool kInnerProduct, int kWidth>
__global__ void __launch_bounds__(kFilterThreads) filter_kernel(FilterParams p) {
  const StoreView store = *p.store;
  const std::uint32_t lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const std::uint32_t nq = p.num_queries;
  const std::uint32_t tiles = (store.slot_count + kTile - 1) / kTile;
  const std::uint32_t stride = gridDim.x * warps, first = blockIdx.x * warps + (threadIdx.x >> 5);
  for (std::uint32_t sample_tile = first; sample_tile < p.sample_tiles; sample_tile += stride) {
    sample_minimum<kInnerProduct, kWidth>(p, store, tiles, sample_tile, lane);
  }
  if (last_block(&p.state->sample_done)) publish_bounds(p);
  // The first tile is in flight while the bounds are selected.
  const float4* vectors = static_cast<const float4*>(store.vectors);
  float4 point_ahead{};
  bool valid_ahead = false;
  auto load_ahead = [&](std::uint32_t t) {
    point_ahead = load_point<kWidth>(vectors, t, lane);
    valid_ahead = store.valid[t * kTile + lane] != 0;
  };
  if (first < tiles) load_ahead(first);
  float4 query[kFilterMaxQueries];
#pragma unroll
  for (std::uint32_t j = 0; j < kFilterMaxQueries; ++j) {
    if (j < nq) query[j] = __ldg(reinterpret_cast<const float4*>(p.queries) + j);
  }
  wait_for_bounds(p);
  Candidate bound[kFilterMaxQueries];
#pragma unroll
  for (std::uint32_t j = 0; j < kFilterMaxQueries; ++j) {
    if (j < nq) bound[j] = load_cg(&p.state->bound[j]);
  }
  for (std::uint32_t tile = first; tile < tiles; tile += stride) {
    const float4 point = point_ahead;
    const bool valid = valid_ahead;
    if (tile + stride < tiles) load_ahead(tile + stride);
    const std::uint32_t slot = tile * kTile + lane;
    std::uint64_t id = kNoId;
#pragma unroll
    for (std::uint32_t j = 0; j < kFilterMaxQueries; ++j) {
      if (j >= nq) break;
      const float rank = rank_against<kInnerProduct, kWidth>(point, query[j]);
      bool admit = valid && rank <= bound[j].rank;  // NaN ranks never pass
      if (admit) {
        if (id == kNoId) id = store.ids[slot];
        admit = rank < bound[j].rank || id <= bound[j].id;
      }
      append(p, j, admit, Candidate{rank, slot, id}, lane);
    }
  }
  if (!last_block(&p.state->filter_done)) return;
  for (std::uint32_t j = 0; j < nq; ++j) finish_query<kInnerProduct, kWidth>(p, store, j);
  if (threadIdx.x == 0) {  // every block is past the bounds: ready for the next search
    p.state->bounds_ready = 0;
    p.state->filter_done = 0;
  }
}

using Kernel = void (*)(FilterParams);

Kernel filter_kernel_for(bool inner_product, int one_chunk_width) {
  if (one_chunk_width == 2) return inner_product ? filter_kernel<true, 2> : filter_kernel<false, 2>;
  if (one_chunk_width == 4) return inner_product ? filter_kernel<true, 4> : filter_kernel<false, 4>;
  throw CudaError("filter path: vectors of one float4 chunk only (width " + std::to_string(one_chunk_width) + ")");
}

}  // namespace

int filter_blocks_per_sm(bool inner_product, int one_chunk_width) {
  int blocks = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, filter_kernel_for(inner_product, one_chunk_width),
                                                           kFilterThreads, 0),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor(filter_kernel)");
  return blocks;
}

void launch_filter(const FilterParams& params, bool inner_product, int one_chunk_width, cudaStream_t stream) {
  if (params.num_queries == 0 || params.num_queries > kFilterMaxQueries || params.k == 0 || params.k > kFilterMaxK ||
      params.sample_tiles == 0 || params.filter_blocks == 0) {
    throw CudaError("filter path: unsupported launch (" + std::to_string(params.num_queries) + " queries, k=" +
                    std::to_string(params.k) + ")");
  }
  // A cooperative launch: every block resident at once, which the wait for the bounds needs
  // (the grid is at most one wave, filter_blocks_per_sm).
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.filter_blocks);
  config.blockDim = dim3(kFilterThreads);
  config.stream = stream;
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, filter_kernel_for(inner_product, one_chunk_width), params),
             "cudaLaunchKernelEx(filter_kernel)", std::to_string(params.filter_blocks) + " cooperative blocks");
}

}  // namespace streamknn::detail::gpu
