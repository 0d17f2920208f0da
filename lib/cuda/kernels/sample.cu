// The sample pass: an upper bound of each query's k-th rank from a strided sample of the store,
// so the main scan starts with a tight threshold instead of a cold start.
//
// sample_ranks_kernel scores every sampled point against the queries (a warp per tile and
// groups_per_warp groups of kSampleGroup queries, every warp busy at once) and writes the
// per_tile smallest ranks of each tile as ordered bits (+inf for erased slots and ids outside a
// query's range). Batches of 8+ queries over stores of several chunks take
// sample_ranks_staged_kernel instead: 8 queries per warp (over large stores 12 for 9-12, 16 for
// 16+) from shared memory, in one pass; where that gives the SMs few warps (L2 ranks, 32+ chunks:
// SampleParams::split_sums), sample_ranks_split_kernel: the block's warps each sum one slice of a
// tile's chunks, and the k-th is raised by the margin a different summation order can cost.
// The query-resident scan's batches (one-chunk stores) take sample_ranks_resident_kernel: that
// scan's layout, queries in registers, over the sampled tiles.
// sample_kth_kernel then finds, per query, the k-th smallest of those keys by an MSB-first radix
// select. The k sampled points at or below it (distinct: each key is a different point) have
// ranks computed exactly as the scan computes them (same operations, same order; the split
// kernel's differ by rounding only, and its k-th is raised to cover that), so at least k points of
// the store are within it: a valid bound. Keeping only a tile's few smallest ranks
// bounds about as tightly (the k-th of many tile minima sits near the k-th of all their points)
// at a fraction of the selection's work: one query's select over every sampled rank took 29 us
// (ncu, 1,000,000 x 2: three passes of 11-bit digits over 41,000 keys in global memory). The earlier sample
// pass ran the scan itself over the sample; there every warp saw fewer than k points, so it was
// mostly cold-start list insertions (ncu, GoogleNews-like Q = 16: 0.25-0.29 ms for 1/32 of the
// store, 15% of the search; MNIST-like: 96 us for 1/8).
#include <math_constants.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/resident.hpp"
#include "cuda/kernels/sample.hpp"

namespace streamknn::detail::gpu {

namespace {

constexpr int kSampleWarps = 4;                  // tiles per block
constexpr int kResidentSampleWarps = 4;          // SampleParams::resident: warps per block
constexpr std::uint32_t kResidentSampleTiles = 2;  // and sampled tiles per warp at least
constexpr int kSampleLoads = 8;                  // point loads in flight per lane
constexpr int kKthThreads = 1024;
constexpr int kKthResidentThreads = 256;  // SampleParams::resident (see launch_sample)
constexpr std::uint32_t kKthStaged = 8192;      // keys the k-th selection stages in shared memory
constexpr std::uint32_t kSplitChunks = 16;       // split sums: at least this many chunks per warp
constexpr std::uint32_t kSplitMaxWarps = 8;      // split sums: warps (chunk slices) per sampled tile
constexpr float kOrderSlack = 0x1p-120f;         // split sums: absolute headroom for subnormal roundings

/// The warp's 32 values in ascending order over the lanes (a shuffle bitonic network).
__device__ __forceinline__ std::uint32_t warp_sort(std::uint32_t x, std::uint32_t lane) {
#pragma unroll
  for (std::uint32_t size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (std::uint32_t stride = size / 2; stride > 0; stride >>= 1) {
      const std::uint32_t other = __shfl_xor_sync(kFullMask, x, stride);
      const bool ascending = (lane & size) == 0, lower = (lane & stride) == 0;
      x = lower == ascending ? min(x, other) : max(x, other);
    }
  }
  return x;
}

/// Writes the per_tile smallest keys of one tile for queries q0 .. q0 + nq from the lanes' ranks.
template <int G, bool kInnerProduct, bool kFiltered>
__device__ __forceinline__ void write_keys(const SampleParams& p, const float (&acc)[G], std::uint32_t q0,
                                           std::uint32_t nq, bool valid, std::uint32_t slot, std::uint64_t id,
                                           std::size_t key_index, std::size_t keys_per_query, std::uint32_t lane) {
#pragma unroll
  for (int j = 0; j < G; ++j) {
    if (j < int(nq)) {
      const float rank = rank_of<kInnerProduct>(acc[j]);
      // A NaN rank (an overflowed dot product) never counts, as in the scan.
      bool counts = valid && rank <= CUDART_INF_F;
      if constexpr (kFiltered) counts = counts && filter_admits(p.ranges[q0 + j], p.predicates[q0 + j], *p.store, slot, id);
      std::uint32_t key = counts ? ordered_bits(rank) : kNoBound;
      if (p.per_tile == 1) {
        key = __reduce_min_sync(kFullMask, key);  // one instruction instead of a sorting network
      } else if (p.per_tile < kTile) {
        key = warp_sort(key, lane);
      }
      if (lane < p.per_tile) p.keys[(q0 + j) * keys_per_query + key_index] = key;
    }
  }
}

/// Adds the ranks of chunks begin .. end of a lane's point (a tile's column) to acc, issuing
/// kSampleLoads point loads before scoring them: where the SMs hold few warps, each warp's chain of
/// loads is the kernel's length (one load at a time measured 99 us for the MNIST-like sample of
/// 274 tiles of 784 dims at Q = 16, ncu).
template <int G, bool kInnerProduct, typename Query>
__device__ __forceinline__ void accumulate_batched(float (&acc)[G], const float4* point, std::uint32_t begin,
                                                   std::uint32_t end, Query query) {
  for (std::uint32_t c0 = begin; c0 < end; c0 += kSampleLoads) {
    float4 v[kSampleLoads];
#pragma unroll
    for (int u = 0; u < kSampleLoads; ++u) v[u] = c0 + u < end ? __ldg(point + std::size_t(c0 + u) * kTile) : float4{};
#pragma unroll
    for (int u = 0; u < kSampleLoads; ++u) {
      const std::uint32_t c = c0 + u;
      if (c >= end) break;
      accumulate<G, kInnerProduct>(acc, v[u], [&](int j) { return query(j, c); });
    }
  }
}

/// The block's sampled tiles (in units of the kernel's tiles per block) and its query group.
/// SampleParams::tile_major (a sample larger than L2): the group is the fastest-varying index of
/// the one-dimensional grid, so the blocks that rank one tile against different query groups run
/// side by side and all but the first find it in L2. Group-major, every group's blocks ran after
/// the previous group's, and a GoogleNews-like sample (154 MB) was read from DRAM once per 8
/// queries (ncu, Q = 64: 0.7 GB read, 0.1 GB tile-major). A sample that fits L2 keeps the
/// group-major order: 100,000 x 128 Q = 24-64 measured 1.01-1.06x slower tile-major (three separate
/// measurements).
struct SampleBlock {
  std::uint32_t tiles, group;
};
__device__ __forceinline__ SampleBlock sample_block(const SampleParams& p) {
  const std::uint32_t groups = sample_warps_per_tile(p), tile_blocks = gridDim.x / groups;
  if (p.tile_major) return {blockIdx.x / groups, blockIdx.x % groups};
  return {blockIdx.x % tile_blocks, blockIdx.x / tile_blocks};
}

template <bool kInnerProduct, bool kFiltered, bool kBatched>
__global__ void __launch_bounds__(kSampleWarps * 32) sample_ranks_kernel(SampleParams p) {
  start_chained_kernel();
  const StoreView store = *p.store;
  const std::uint32_t lane = threadIdx.x & 31;
  const SampleBlock block = sample_block(p);
  const std::uint32_t sample_tile = block.tiles * kSampleWarps + (threadIdx.x >> 5);
  const std::uint32_t chunks = store.chunks;
  if (sample_tile >= p.sample_tiles) return;
  const std::uint32_t tile = sample_tile * p.step;
  const std::uint32_t tiles = (store.slot_count + kTile - 1) / kTile;
  const std::size_t key_index = std::size_t(sample_tile) * p.per_tile + lane;
  const std::size_t keys_per_query = std::size_t(p.sample_tiles) * p.per_tile;
  const std::uint32_t slot = tile * kTile + lane;
  const bool in_store = tile < tiles;  // else the store is smaller than the launch was sized for
  const bool valid = in_store && store.valid[slot] != 0;
  const std::uint64_t id = kFiltered && valid ? store.ids[slot] : kNoId;
  const float4* point = static_cast<const float4*>(store.vectors) + std::size_t(tile) * chunks * kTile + lane;
  // Vectors of at most two elements: one float2 per slot (StoreView::chunk_floats), one chunk.
  const bool two_floats = store.chunk_floats == 2;
  float4 one_chunk{};
  if (two_floats && in_store) {
    const float2 v = __ldg(static_cast<const float2*>(store.vectors) + std::size_t(tile) * kTile + lane);
    one_chunk = make_float4(v.x, v.y, 0.0f, 0.0f);
  }
  for (std::uint32_t g = 0; g < p.groups_per_warp; ++g) {
    const std::uint32_t q0 = (block.group * p.groups_per_warp + g) * kSampleGroup;
    if (q0 >= p.num_queries) break;
    const std::uint32_t nq = min(kSampleGroup, p.num_queries - q0);
    if (!in_store) {
      for (std::uint32_t j = 0; j < nq && lane < p.per_tile; ++j) {
        p.keys[(q0 + j) * keys_per_query + key_index] = kNoBound;
      }
      continue;
    }
    const float4* queries = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
    float acc[kSampleGroup] = {};
    // Rows past the batch read query 0 again (defined memory); their keys are not written.
    auto query = [&](int j, std::uint32_t c) { return __ldg(queries + std::size_t(j < int(nq) ? j : 0) * chunks + c); };
    if (two_floats) {
      accumulate<kSampleGroup, kInnerProduct>(acc, one_chunk, [&](int j) { return query(j, 0); });
    } else if constexpr (!kBatched) {
#pragma unroll 16
      for (std::uint32_t c = 0; c < chunks; ++c) {
        accumulate<kSampleGroup, kInnerProduct>(acc, __ldg(point + std::size_t(c) * kTile),
                                                [&](int j) { return query(j, c); });
      }
    } else {
      accumulate_batched<kSampleGroup, kInnerProduct>(acc, point, 0, chunks, query);  // SampleParams::batched_loads
    }
    write_keys<kSampleGroup, kInnerProduct, kFiltered>(p, acc, q0, nq, valid, slot, id, key_index, keys_per_query, lane);
  }
}

/// Copies the block's `group` queries (from q0; nq of them in the batch) into shared memory,
/// query-major; rows past the batch are zeros. The caller's barrier follows.
__device__ __forceinline__ void stage_queries(const SampleParams& p, float4* staged, std::uint32_t q0, std::uint32_t nq,
                                              std::uint32_t chunks, std::uint32_t group) {
  const float4* rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
  for (std::uint32_t i = threadIdx.x; i < group * chunks; i += blockDim.x) {
    staged[i] = i < nq * chunks ? rows[i] : make_float4(0, 0, 0, 0);
  }
}

/// SampleParams::staged_queries: the block's G (staged_group) queries in shared memory (every
/// warp of the block ranks its own tile against the same queries), each warp scoring all of them
/// in one pass over its tile with kSampleLoads point loads in flight.
template <bool kInnerProduct, bool kFiltered, int G>
__global__ void __launch_bounds__(kSampleWarps * 32) sample_ranks_staged_kernel(SampleParams p) {
  start_chained_kernel();
  extern __shared__ float4 staged[];  // G queries x chunks, query-major
  const StoreView store = *p.store;
  const std::uint32_t lane = threadIdx.x & 31;
  const std::uint32_t chunks = store.chunks;
  const SampleBlock block = sample_block(p);
  const std::uint32_t q0 = block.group * G;
  const std::uint32_t nq = min(std::uint32_t(G), p.num_queries - q0);
  stage_queries(p, staged, q0, nq, chunks, G);
  __syncthreads();
  const std::uint32_t sample_tile = block.tiles * kSampleWarps + (threadIdx.x >> 5);
  if (sample_tile >= p.sample_tiles) return;
  const std::uint32_t tile = sample_tile * p.step;
  const std::uint32_t tiles = (store.slot_count + kTile - 1) / kTile;
  const std::size_t key_index = std::size_t(sample_tile) * p.per_tile + lane;
  const std::size_t keys_per_query = std::size_t(p.sample_tiles) * p.per_tile;
  if (tile >= tiles) {  // the store is smaller than the launch was sized for
    for (std::uint32_t j = 0; j < nq && lane < p.per_tile; ++j) p.keys[(q0 + j) * keys_per_query + key_index] = kNoBound;
    return;
  }
  const std::uint32_t slot = tile * kTile + lane;
  const bool valid = store.valid[slot] != 0;
  const std::uint64_t id = kFiltered && valid ? store.ids[slot] : kNoId;
  const float4* point = static_cast<const float4*>(store.vectors) + std::size_t(tile) * chunks * kTile + lane;
  float acc[G] = {};
  accumulate_batched<G, kInnerProduct>(acc, point, 0, chunks, [&](int j, std::uint32_t c) { return staged[j * chunks + c]; });
  write_keys<G, kInnerProduct, kFiltered>(p, acc, q0, nq, valid, slot, id, key_index, keys_per_query, lane);
}

/// SampleParams::split_sums (L2 ranks, staged queries, 32+ chunks): one block per sampled
/// tile and group of kSampleStagedGroup queries; warp w sums its slice of the chunks (the same
/// terms as the scan: accumulate's rounded differences, squared in FMAs) and warp 0 adds the
/// slices' partial sums in slice order. The staged kernel's one warp per tile left MNIST-like
/// samples (274 tiles of 196 chunks) with 4 warps per SM, each a chain of 25 rounds of loads:
/// 45-47 us for Q = 8-16 (ncu). A rank summed in this order differs from the scan's by rounding
/// only; sample_kth_kernel raises the k-th by SampleParams::order_margin (see order_margin).
template <bool kFiltered>
__global__ void __launch_bounds__(kSplitMaxWarps * 32) sample_ranks_split_kernel(SampleParams p) {
  start_chained_kernel();
  extern __shared__ float4 staged[];  // kSampleStagedGroup queries x chunks, query-major; then the partial sums
  constexpr int G = int(kSampleStagedGroup);
  const StoreView store = *p.store;
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const std::uint32_t chunks = store.chunks;
  const SampleBlock block = sample_block(p);
  const std::uint32_t q0 = block.group * kSampleStagedGroup;
  const std::uint32_t nq = min(kSampleStagedGroup, p.num_queries - q0);
  stage_queries(p, staged, q0, nq, chunks, kSampleStagedGroup);
  float* partial = reinterpret_cast<float*>(staged + G * chunks);  // [warp][query][lane]
  __syncthreads();
  const std::uint32_t sample_tile = block.tiles;
  const std::uint32_t tile = sample_tile * p.step;
  const std::uint32_t tiles = (store.slot_count + kTile - 1) / kTile;
  const std::size_t key_index = std::size_t(sample_tile) * p.per_tile + lane;
  const std::size_t keys_per_query = std::size_t(p.sample_tiles) * p.per_tile;
  if (tile >= tiles) {  // the store is smaller than the launch was sized for (the whole block returns)
    if (warp == 0) {
      for (std::uint32_t j = 0; j < nq && lane < p.per_tile; ++j) p.keys[(q0 + j) * keys_per_query + key_index] = kNoBound;
    }
    return;
  }
  const float4* point = static_cast<const float4*>(store.vectors) + std::size_t(tile) * chunks * kTile + lane;
  const std::uint32_t per_warp = (chunks + warps - 1) / warps;
  const std::uint32_t begin = min(chunks, warp * per_warp), end = min(chunks, begin + per_warp);
  float acc[G] = {};
  accumulate_batched<G, false>(acc, point, begin, end, [&](int j, std::uint32_t c) { return staged[j * chunks + c]; });
#pragma unroll
  for (int j = 0; j < G; ++j) partial[(warp * G + j) * 32 + lane] = acc[j];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < G; ++j) {
    float sum = partial[j * 32 + lane];
    for (std::uint32_t w = 1; w < warps; ++w) sum = __fadd_rn(sum, partial[(w * G + j) * 32 + lane]);
    acc[j] = sum;
  }
  const std::uint32_t slot = tile * kTile + lane;
  const bool valid = store.valid[slot] != 0;
  const std::uint64_t id = kFiltered && valid ? store.ids[slot] : kNoId;
  write_keys<G, false, kFiltered>(p, acc, q0, nq, valid, slot, id, key_index, keys_per_query, lane);
}

/// The k-th key raised by SampleParams::order_margin (relative) and kOrderSlack (absolute), both
/// rounded up, when the sampled ranks were summed in another order than the scan's; keys that are
/// not finite nonnegative ranks (+inf, no bound) stay as they are.
__device__ __forceinline__ std::uint32_t raised_for_order(std::uint32_t key, float margin) {
  if (margin == 0.0f) return key;
  const float rank = from_ordered_bits(key);
  if (!(rank >= 0.0f && rank <= CUDART_INF_F)) return key;
  return ordered_bits(__fadd_ru(__fmaf_ru(rank, margin, rank), kOrderSlack));
}

/// Keys the k-th search ranks by counting once radix digits have narrowed it down to them.
constexpr std::uint32_t kKthCountMax = 128;

/// SampleParams::resident (one-chunk stores, L2 ranks, no per-query filters, a mask where one
/// predicate filters every query: the batches of the query-resident scan, resident.cu): that
/// scan's layout over the sample. Each lane keeps 4 of the block's 128 queries in registers, the
/// block's warps split its sampled tiles, each warp stages a tile's 32 points in shared memory
/// and every lane ranks them all against its queries
/// (broadcast reads, the scan's bits), keeping the smallest rank of each run of 32 / per_tile
/// points: per_tile keys per tile and query, each a different point (an erased slot ranks NaN and
/// counts for nothing). A pair costs its rank and a min (the warp-per-tile kernel above reduced
/// every tile's ranks across the warp per query: ncu, 1,000,000 x 2, Q = 1,024, 134 us).
template <int kWidth, bool kMasked>
__global__ void __launch_bounds__(kResidentSampleWarps * 32) sample_ranks_resident_kernel(SampleParams p) {
  start_chained_kernel();
  static_assert(kWidth == 2 || kWidth == 4);
  constexpr int kQueries = int(kResidentQueriesPerThread);
  __shared__ float4 stage[kResidentSampleWarps][kWidth][kTile / 4];  // element e of points 4 g .. 4 g + 3 at [e][g]
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const StoreView store = *p.store;
  const std::uint32_t first_query = blockIdx.y * kResidentQueriesPerBlock;
  float4 query[kQueries];
  for (int j = 0; j < kQueries; ++j) {
    const std::uint32_t q = first_query + j * 32 + lane;
    query[j] = q < p.num_queries ? reinterpret_cast<const float4*>(p.queries)[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const std::size_t keys_per_query = std::size_t(p.sample_tiles) * p.per_tile;
  const std::uint32_t run = kTile / p.per_tile, run_shift = __ffs(run) - 1;  // points per key (a power of two)
  const std::uint32_t store_tiles = (store.slot_count + kTile - 1) / kTile;
  const std::uint32_t per_block = (p.sample_tiles + gridDim.x - 1) / gridDim.x;
  const std::uint32_t begin = min(p.sample_tiles, blockIdx.x * per_block), end = min(p.sample_tiles, begin + per_block);
  float4 (&points)[kWidth][kTile / 4] = stage[warp];
  // This lane's point of a sampled tile and its valid flag, loaded a tile ahead (the flag is
  // applied when the point is staged, so the loads do not wait for each other); erased slots and
  // tiles past the store (smaller than the launch was sized for) read as NaN and count for nothing.
  auto load = [&](std::uint32_t sampled, float4& point, bool& valid) {
    const std::uint32_t tile = sampled * p.step, slot = tile * kTile + lane;
    point = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    valid = false;
    if (tile >= store_tiles) return;
    valid = store.valid[slot] != 0;
    if constexpr (kMasked) valid = valid && attributes_pass(*p.mask, store, slot);
    if constexpr (kWidth == 2) {
      const float2 xy = __ldg(static_cast<const float2*>(store.vectors) + slot);
      point = make_float4(xy.x, xy.y, 0.0f, 0.0f);
    } else {
      point = __ldg(static_cast<const float4*>(store.vectors) + slot);
    }
  };
  float4 next_point;
  bool next_valid = false;
  if (begin + warp < end) load(begin + warp, next_point, next_valid);
  for (std::uint32_t sampled = begin + warp; sampled < end; sampled += warps) {
    const float4 point = next_point;
    const bool valid = next_valid;
    if (sampled + warps < end) load(sampled + warps, next_point, next_valid);
    const float element[4] = {valid ? point.x : CUDART_NAN_F, valid ? point.y : CUDART_NAN_F,
                              valid ? point.z : CUDART_NAN_F, valid ? point.w : CUDART_NAN_F};
    __syncwarp();  // every lane has read the previous tile
#pragma unroll
    for (int e = 0; e < kWidth; ++e) (&points[e][lane / 4].x)[lane % 4] = element[e];
    __syncwarp();
    float smallest[kQueries];
#pragma unroll
    for (int j = 0; j < kQueries; ++j) smallest[j] = CUDART_INF_F;
#pragma unroll
    for (std::uint32_t g = 0; g < kTile / 4; ++g) {
      float4 x[kWidth];
#pragma unroll
      for (int e = 0; e < kWidth; ++e) x[e] = points[e][g];
#pragma unroll
      for (std::uint32_t i = 0; i < 4; ++i) {
        float4 v = make_float4((&x[0].x)[i], (&x[1].x)[i], 0.0f, 0.0f);
        if constexpr (kWidth == 4) {
          v.z = (&x[2].x)[i];
          v.w = (&x[3].x)[i];
        }
#pragma unroll
        for (int j = 0; j < kQueries; ++j) {
          float acc[1] = {0.0f};
          accumulate<1, false, kWidth>(acc, v, [&](int) { return query[j]; });
          smallest[j] = fminf(smallest[j], acc[0]);  // NaN (erased, past the store) is ignored
        }
        const std::uint32_t at = 4 * g + i;
        if (((at + 1) & (run - 1)) == 0) {  // the run's key per query, then the next run
#pragma unroll
          for (int j = 0; j < kQueries; ++j) {
            const std::uint32_t q = first_query + j * 32 + lane;
            if (q < p.num_queries) {
              p.keys[q * keys_per_query + std::size_t(sampled) * p.per_tile + (at >> run_shift)] = ordered_bits(smallest[j]);
            }
            smallest[j] = CUDART_INF_F;
          }
        }
      }
    }
  }
}

/// One block per query: the k-th smallest of its keys (staged in shared memory once when they
/// fit: a one-query search waits on this kernel, and each pass over global memory cost a round
/// trip). An MSB-first radix select, 8 bits per pass, that starts below the bits every key shares
/// (close ranks share their top byte, which put every key in one bucket: an atomic on one address
/// per key), and ranks the last few keys by counting. The threshold becomes that key (+inf, no
/// bound, when fewer than k keys are finite) where it is below the threshold the query starts
/// with (a radius's rank limit, QueryRequest::rank_limit).
__global__ void __launch_bounds__(kKthThreads) sample_kth_kernel(SampleParams p) {
  start_chained_kernel();
  __shared__ std::uint32_t staged[kKthStaged];
  __shared__ std::uint32_t histogram[2][256];
  __shared__ std::uint32_t scratch[96], gathered;
  // radix_step's three words, in an aligned block of four of their own: declared next to `few`,
  // racecheck reported the step's reads of them against the gather's writes to `few`; padded,
  // it reports none.
  __shared__ alignas(16) std::uint32_t step_words[4];
  __shared__ std::uint32_t few[kKthCountMax];
  const std::uint32_t q = blockIdx.x;
  const std::size_t n = std::size_t(p.sample_tiles) * p.per_tile;
  const std::uint32_t* keys = p.keys + q * n;
  if (n < p.k) return;  // fewer sampled points than k: no bound
  const bool in_shared = n <= kKthStaged;
  auto key = [&](std::size_t i) { return in_shared ? staged[i] : __ldcg(keys + i); };
  std::uint32_t any_and = ~0u, any_or = 0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::uint32_t x = __ldcg(keys + i);
    if (in_shared) staged[i] = x;
    any_and &= x;
    any_or |= x;
  }
  for (std::uint32_t b = threadIdx.x; b < 512; b += blockDim.x) histogram[b >> 8][b & 255] = 0;
  if (threadIdx.x == 0) gathered = 0;
  // The prefix every key shares; each pass fixes the 8 bits after it.
  const KeyPrefix common = shared_prefix(block_and_or_sum(any_and, any_or, 0, scratch));
  std::uint32_t bits = common.bits, prefix = common.value;
  std::uint32_t want = p.k, left = std::uint32_t(min(n, std::size_t(~0u)));  // want: 1-based rank among `left`
  auto matches = [&](std::uint32_t x) { return bits == 0 || ((x ^ prefix) >> (32 - bits)) == 0; };
  for (int pass = 0; left > kKthCountMax && bits < 32; ++pass) {
    std::uint32_t* counts = histogram[pass & 1];
    const std::uint32_t shift = bits <= 24 ? 24 - bits : 0, pad = bits <= 24 ? 0 : bits - 24;
    for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
      const std::uint32_t x = key(i);
      if (matches(x)) atomicAdd(&counts[((x >> shift) << pad) & 0xffu], 1u);
    }
    // The next pass's histogram: its last reader finished before this pass's first barrier.
    for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histogram[(pass + 1) & 1][b] = 0;
    __syncthreads();
    const RadixStep step = radix_step(counts, want, step_words);
    want = step.want;
    left = step.left;
    prefix |= bits <= 24 ? step.digit << shift : step.digit >> pad;
    bits = min(bits + 8, 32u);
  }
  if (left > kKthCountMax) {  // every key left equals the prefix (bits == 32)
    if (threadIdx.x == 0) p.threshold[q] = min(p.threshold[q], raised_for_order(prefix, p.order_margin));
    return;
  }
  // The k-th is the key x of the `left` matching ones with fewer than `want` below it and at
  // least `want` at or below it (equal keys write the same value). `parts` threads count for
  // each key (a chain of dependent shared loads per thread was the slow part).
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::uint32_t x = key(i);
    if (matches(x)) {
      const std::uint32_t at = atomicAdd(&gathered, 1u);
      if (at < kKthCountMax) few[at] = x;
    }
  }
  __syncthreads();
  const std::uint32_t parts = min(32u, floor_pow2(max(blockDim.x / left, 1u)));
  const std::uint32_t i = threadIdx.x / parts, part = threadIdx.x % parts;
  std::uint32_t mine = 0, below = 0, at_or_below = 0;
  if (i < left) {
    mine = few[i];
    for (std::uint32_t j = part; j < left; j += parts) {
      below += few[j] < mine;
      at_or_below += few[j] <= mine;
    }
  }
  for (std::uint32_t d = parts >> 1; d > 0; d >>= 1) {
    below += __shfl_xor_sync(kFullMask, below, d);
    at_or_below += __shfl_xor_sync(kFullMask, at_or_below, d);
  }
  if (i < left && part == 0 && below < want && want <= at_or_below) {
    p.threshold[q] = min(p.threshold[q], raised_for_order(mine, p.order_margin));
  }
}

}  // namespace

float order_margin(std::uint32_t padded_dim, std::uint32_t slices) {
  // L2 ranks sum nonnegative terms t_i (each the exact square of the same rounded difference in
  // both kernels), so a sum in any order with at most n roundings per term is within a factor
  // (1 +- g) of the exact sum S, g = n u / (1 - n u): the scan's rank <= (1 + g) S and
  // S <= sampled / (1 - g), so the scan's rank <= sampled (1 + 2g / (1 - g)). Here n is the padded
  // dimension (the slice's FMAs) plus the slices' additions; rounded up, with 2^-20 headroom.
  const double u = std::ldexp(1.0, -24), n = double(padded_dim) + slices;
  const double g = n * u / (1 - n * u);
  const double margin = 2 * g / (1 - g) * (1 + std::ldexp(1.0, -20));
  float m = static_cast<float>(margin);
  if (double(m) < margin) m = std::nextafter(m, std::numeric_limits<float>::infinity());
  return m;
}

std::size_t split_shared_bytes(std::uint32_t chunks, std::uint32_t warps) {
  return sample_staged_bytes(chunks) + std::size_t(warps) * kSampleStagedGroup * kTile * sizeof(float);
}

std::uint32_t sample_split_warps(std::uint32_t chunks) {
  std::uint32_t warps = std::clamp<std::uint32_t>(chunks / kSplitChunks, 1, kSplitMaxWarps);
  while (warps > 1 && split_shared_bytes(chunks, warps) > kSampleStagedMaxBytes) --warps;
  return warps;
}

namespace {

/// The ranks kernels' one-dimensional grid (see sample_block): tile_blocks x query groups.
std::uint32_t sample_grid(const SampleParams& p, std::uint32_t tile_blocks) {
  const std::uint64_t blocks = std::uint64_t(tile_blocks) * sample_warps_per_tile(p);
  if (blocks > std::uint64_t(std::numeric_limits<std::int32_t>::max())) {
    throw CudaError("sample pass: " + std::to_string(blocks) + " blocks, more than a grid holds");
  }
  return std::uint32_t(blocks);
}

}  // namespace

void launch_sample(const SampleParams& params_in, bool inner_product, bool filtered, cudaStream_t stream) {
  SampleParams params = params_in;
  if (params.resident) {
    if (inner_product || filtered || params.chunks != 1 || (params.width != 2 && params.width != 4)) {
      throw CudaError("sample_ranks_resident_kernel: one-chunk stores, L2 ranks and no per-query filters only");
    }
    const std::uint32_t per_row = kResidentSampleWarps * kResidentSampleTiles;
    const dim3 grid(std::max<std::uint32_t>(1, (params.sample_tiles + per_row - 1) / per_row),
                    (params.num_queries + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock);
    using Kernel = void (*)(SampleParams);
    const Kernel kernels[2][2] = {{sample_ranks_resident_kernel<2, false>, sample_ranks_resident_kernel<2, true>},
                                  {sample_ranks_resident_kernel<4, false>, sample_ranks_resident_kernel<4, true>}};
    launch_chained("sample_ranks_resident_kernel", kernels[params.width == 4][params.mask != nullptr], grid,
                   kResidentSampleWarps * 32, 0, stream, params);
    // A block of 256 threads per query: these batches hold hundreds of queries, and blocks of
    // kKthThreads ran them in four waves (ncu, 1,000,000 x 2, Q = 1,024: 27 us).
    launch_chained("sample_kth_kernel", sample_kth_kernel, params.num_queries, kKthResidentThreads, 0, stream, params);
    return;
  }
  const std::uint32_t split = params.split_sums && !inner_product && params.staged_queries ? sample_split_warps(params.chunks) : 1;
  params.order_margin = split > 1 ? order_margin(4 * params.chunks, split) : 0.0f;
  using RanksKernel = void (*)(SampleParams);
  if (split > 1) {
    if (params.staged_group != kSampleStagedGroup) {
      throw CudaError("sample_ranks_split_kernel: groups of " + std::to_string(kSampleStagedGroup) + " queries only");
    }
    const RanksKernel kernels[2] = {sample_ranks_split_kernel<false>, sample_ranks_split_kernel<true>};
    const std::size_t shared = split_shared_bytes(params.chunks, split);
    const dim3 grid(sample_grid(params, params.sample_tiles));
    launch_chained("sample_ranks_split_kernel", kernels[filtered], grid, split * 32, shared, stream, params);
  } else if (params.staged_queries) {
    const dim3 grid(sample_grid(params, (params.sample_tiles + kSampleWarps - 1) / kSampleWarps));
    // One kernel per staged group, in the order of kStagedGroups.
    constexpr std::uint32_t kStagedGroups[] = {kSampleStagedGroup, kSampleStagedMidGroup, kSampleStagedWideGroup};
    constexpr int kG = int(kStagedGroups[0]), kMid = int(kStagedGroups[1]), kWide = int(kStagedGroups[2]);
    const RanksKernel kernels[2][2][3] = {
        {{sample_ranks_staged_kernel<false, false, kG>, sample_ranks_staged_kernel<false, false, kMid>,
          sample_ranks_staged_kernel<false, false, kWide>},
         {sample_ranks_staged_kernel<false, true, kG>, sample_ranks_staged_kernel<false, true, kMid>,
          sample_ranks_staged_kernel<false, true, kWide>}},
        {{sample_ranks_staged_kernel<true, false, kG>, sample_ranks_staged_kernel<true, false, kMid>,
          sample_ranks_staged_kernel<true, false, kWide>},
         {sample_ranks_staged_kernel<true, true, kG>, sample_ranks_staged_kernel<true, true, kMid>,
          sample_ranks_staged_kernel<true, true, kWide>}}};
    const auto found = std::find(std::begin(kStagedGroups), std::end(kStagedGroups), params.staged_group);
    if (found == std::end(kStagedGroups)) {
      std::string sizes;
      for (const std::uint32_t g : kStagedGroups) sizes += (sizes.empty() ? "" : ", ") + std::to_string(g);
      throw CudaError("sample_ranks_staged_kernel: groups of " + sizes + " queries, not " + std::to_string(params.staged_group));
    }
    const auto group = found - std::begin(kStagedGroups);
    const std::size_t shared = sample_staged_bytes(params.chunks, params.staged_group);
    if (shared > kSampleStagedMaxBytes) throw CudaError("sample_ranks_staged_kernel: queries too large to stage");
    launch_chained("sample_ranks_staged_kernel", kernels[inner_product][filtered][group], grid, kSampleWarps * 32,
                   shared, stream, params);
  } else {
    const dim3 grid(sample_grid(params, (params.sample_tiles + kSampleWarps - 1) / kSampleWarps));
    const RanksKernel kernels[2][2][2] = {
        {{sample_ranks_kernel<false, false, false>, sample_ranks_kernel<false, false, true>},
         {sample_ranks_kernel<false, true, false>, sample_ranks_kernel<false, true, true>}},
        {{sample_ranks_kernel<true, false, false>, sample_ranks_kernel<true, false, true>},
         {sample_ranks_kernel<true, true, false>, sample_ranks_kernel<true, true, true>}}};
    launch_chained("sample_ranks_kernel", kernels[inner_product][filtered][params.batched_loads], grid,
                   kSampleWarps * 32, 0, stream, params);
  }
  launch_chained("sample_kth_kernel", sample_kth_kernel, params.num_queries, kKthThreads, 0, stream, params);
}

}  // namespace streamknn::detail::gpu
