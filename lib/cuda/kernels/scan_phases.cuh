// The scan kernel's layout, state and phases (kernels/scan.cu). scan_kernel is the sequence:
//   setup          stage_query_group: the query group, its id ranges and the warps' thresholds
//                  into shared memory;
//   tile scoring   score_tile (one point per lane), score_tile_group (several tiles per lane),
//                  screen_tile (the dot-product screen, scan_screen.cuh);
//   survivor test  survivor_bits: the queries with a point of the tile within their threshold;
//   list insert    insert_survivors: a tile's survivors into the warp's lists (scan_lists.cuh);
//   first bound    arrive_first_tile (the block's first tiles bound the grid), insert_held_first_tile;
//   block merge    merge_bound, then merge_one_query or merge_group_lists: one sorted list per
//                  query for the selection.
// Each phase is a device function of the block's state (ScanBlock), all inlined into the kernel:
// __forceinline__ where the code stood in the kernel's body, plain __device__ (inlined by the
// compiler) where it was a lambda of the kernel (insert_survivors, arrive_first_tile, the loads),
// so that the optimizer sees the code in the same form. ptxas still allocates registers
// differently from the one-function kernel in some instantiations (what they compute is the same).
#pragma once

#include <math_constants.h>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scan_lists.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr std::uint32_t kBulkMinSurvivors = 4;   // fewer survivors are inserted one by one

// Staged point loads (multi-chunk stores, groups of 4 and 8 queries): each lane copies its point's
// chunks into its warp's shared-memory ring with cp.async, kStageChunks per stage, one stage ahead
// of the one it scores, so the warp's next loads are in flight while it does the arithmetic of the
// current ones, without holding them in registers. H100 A/B against the register-pipelined loop it
// replaced: MNIST-like K = 128 Q = 4 0.82x, K = 64 Q = 8 0.88x, GoogleNews-like K = 64 Q = 8 0.93x,
// the other Q = 4 / 8 rows 0.97-1.02x. Groups of 12 and 16 lost 4-16% with it (ptxas then spilled
// at 64 registers).
constexpr int kStageChunks = 4;
constexpr int kStages = 2;
constexpr std::uint32_t kPendingPairs = 64;  // the screen's queue of flagged pairs per warp (ranked from 32)

__host__ __device__ constexpr bool staged_loads(int qg, int one_chunk_width) {
  return one_chunk_width == 0 && (qg == 4 || qg == 8);
}
/// Stages of the warp's ring of point chunks (staged loads and the screen), or 0.
__host__ __device__ constexpr int ring_stages(int qg, int one_chunk_width, bool screen) {
  return screen || staged_loads(qg, one_chunk_width) ? kStages : 0;
}

/// Shared memory: the query group, its id ranges and (screen) squared norms, read-only; then per
/// warp: its lists, their lengths, its thresholds, the ranks of the current tile (screen: a queue
/// of pairs instead), a sort scratch and, with staged loads or the screen, its ring of point
/// chunks.
struct SharedLayout {
  std::size_t queries, ranges, norms, warp_base, warp_bytes, lists, counts, thresholds, ranks, scratch, stage, pending,
      total;
};

__host__ __device__ inline std::size_t align16(std::size_t x) { return (x + 15) & ~std::size_t(15); }

/// With global_lists the warps' lists live in ScanParams::warp_lists instead.
__host__ __device__ inline SharedLayout shared_layout(int qg, int warps, std::uint32_t chunks, std::uint32_t k,
                                                      bool global_lists, int stages, bool screen,
                                                      bool inner_product) {
  SharedLayout l{};
  std::size_t off = 0;
  l.queries = off;
  off += align16(std::size_t(qg) * chunks * sizeof(float4));
  l.ranges = off;
  off += align16(std::size_t(qg) * sizeof(IdRangeDevice));
  l.norms = off;
  if (screen) off += align16(std::size_t(qg) * sizeof(float));
  l.warp_base = off;
  std::size_t w = 0;  // offsets inside one warp's area
  l.lists = w;
  if (!global_lists) w += align16(std::size_t(qg) * k * sizeof(Candidate));
  l.counts = w;
  w += align16(std::size_t(qg) * sizeof(std::uint32_t));
  l.thresholds = w;
  w += align16(std::size_t(qg) * sizeof(std::uint32_t));
  l.ranks = w;  // the screen queues its pairs instead
  if (!screen) w += align16(std::size_t(qg) * 32 * sizeof(float));
  l.scratch = w;
  w += align16(32 * sizeof(Candidate));
  l.stage = w;
  w += std::size_t(stages) * kStageChunks * 32 * sizeof(float4);
  l.pending = w;
  if (screen) w += (inner_product ? 3 : 2) * kPendingPairs * sizeof(std::uint32_t);  // slot, query (, rank)
  l.warp_bytes = w;
  l.total = off + std::size_t(warps) * w;
  return l;
}

template <int QG, bool kScreen>
constexpr int max_threads() {
  return kScreen ? kScreenMaxWarps * 32 : QG <= 2 ? 1024 : QG <= 4 ? 512 : 256;
}

/// One query over a store of several chunks per vector and few tiles (blocks of at most 8 warps:
/// about one tile per warp, so the tiles bound the warps per SM, 16-17 on MNIST-like) runs a kernel
/// bounded to kNarrowThreads threads and kNarrowBlocksPerSm blocks per SM: ptxas then has 80
/// registers per thread instead of the 64 that max_threads' 1,024 leaves, room for all 16 chunk
/// loads the loop keeps in flight. H200: MNIST-like Q = 1 0.967-0.978x in a same-run A/B and
/// 0.984-0.986x in one process per shape, its scan 62.9 -> 61.1 us (ncu, DRAM 72.9 -> 75.1% of
/// peak); 18 loads unrolled at 80 registers (4 bytes spilled) 1.01-1.02x slower.
/// The other kernels keep no minimum of blocks per SM (0: none is emitted): an explicit 1 let ptxas
/// give groups of 12 96 registers instead of 64, and cost ImageNet- and GoogleNews-like Q = 12
/// 1.12-1.16x.
constexpr int kNarrowThreads = 256;
constexpr int kNarrowBlocksPerSm = 3;

/// A scan kernel's compile-time shape: scan_kernel's template parameters (kNarrow aside, which only
/// bounds the launch) and what follows from them.
template <int QG_, bool kInnerProduct_, bool kFiltered_, bool kGlobalLists_, int kOneChunk_, bool kTiled_,
          bool kScreen_>
struct ScanVariant {
  static constexpr int QG = QG_;
  static constexpr bool kInnerProduct = kInnerProduct_, kFiltered = kFiltered_, kGlobalLists = kGlobalLists_;
  static constexpr int kOneChunk = kOneChunk_;  // ScanShape::one_chunk_width
  static constexpr bool kTiled = kTiled_, kScreen = kScreen_;
  static constexpr bool kStaged = staged_loads(QG, kOneChunk);
  static constexpr int kRing = ring_stages(QG, kOneChunk, kScreen);
  // kTiled (ScanShape::tiled): each lane scores kTilesPerLane tiles at a time (2 at four
  // elements, where 4 spilled registers).
  static constexpr int kTilesPerLane = kOneChunk == 2 ? 4 : 2;
  // The first-tile bound (ScanParams::first_keys) is compiled for one query per group only (larger
  // groups of large stores have a sample pass): with groups of 2 ptxas spilled registers in the
  // hot loop.
  static constexpr bool kFirstBound = QG == 1 && !kTiled && !kFiltered;
};

/// The dynamic shared memory (SharedLayout).
extern __shared__ __align__(16) unsigned char shared[];

/// The first-tile bound's block-wide state, held only by the kernels compiled for it
/// (ScanVariant::kFirstBound): the smallest rank of the block's first tiles per query, the warps
/// done with their first tile, the tiles taken from the block's counter after the first ones, and
/// the last block's selection (publish_first_bound).
__shared__ std::uint32_t first_min[16], first_arrived, taken_tiles;
__shared__ std::uint32_t first_staged[kFirstBoundMaxBlocks];

/// One warp's view of its block, for the phases: the parameters, the store, its query group, where
/// the warp's lists, counts, thresholds and scratch live, and the block's tiles. It refers to the
/// kernel's own variables, as a lambda's captures do. A struct holding copies of the pointers into
/// shared memory compiled differently: the optimizer lost their address space until late, and with
/// it the 32-bit address arithmetic (more registers and spills in about a third of the kernels).
template <class V>
struct ScanBlock {
  const ScanParams& p;
  const StoreView& store;
  const std::uint32_t &warps, &warp, &lane, &chunks, &k, &q0, &nq;
  const SharedLayout& layout;
  Candidate* const& block_lists;  // global lists: warp w's lists for query j at (w * QG + j) * k
  float4* const& queries;
  IdRangeDevice* const& ranges;
  unsigned char* const& mine;     // this warp's area
  Candidate* const& lists;        // this warp's, QG x k
  std::uint32_t* const& counts;
  float* const& thresholds;       // this warp's, per query
  float* const& ranks;
  Candidate* const& scratch;
  const std::uint32_t &tile_begin, &tile_end;
  const float4* const& vectors;
  const bool& first_bound;  // ScanVariant::kFirstBound and a launch that asks for it
};

/// The block's share of the store: a contiguous range of tiles.
__device__ __forceinline__ void block_tiles(std::uint32_t slot_count, std::uint32_t& tile_begin, std::uint32_t& tile_end) {
  const std::uint32_t tiles = (slot_count + kTile - 1) / kTile;
  const std::uint32_t per_block = (tiles + gridDim.x - 1) / gridDim.x;
  tile_begin = min(tiles, blockIdx.x * per_block);
  tile_end = min(tiles, tile_begin + per_block);
}

/// Setup: the block's query group into shared memory (chunk-major for the screen, which also gets
/// the queries' squared norms), its id ranges, each warp's list counts and thresholds (from the
/// bound a sample pass may have found), and the first-tile bound's counters; one block barrier.
template <class V>
__device__ __forceinline__ void stage_query_group(const ScanBlock<V>& b) {
  constexpr int QG = V::QG;
  const std::uint32_t chunks = b.chunks, nq = b.nq, lane = b.lane, warp = b.warp;
  const float4* query_rows = reinterpret_cast<const float4*>(b.p.queries) + std::size_t(b.q0) * chunks;
#pragma unroll(V::kScreen ? 4 : 1)
  for (std::uint32_t i = threadIdx.x; i < QG * chunks; i += blockDim.x) {
    // The screen reads one chunk of several queries at once: chunk-major there.
    b.queries[V::kScreen ? (i % chunks) * QG + i / chunks : i] =
        i < nq * chunks ? query_rows[i] : make_float4(0, 0, 0, 0);
  }
  if constexpr (V::kScreen && !V::kInnerProduct) {
    // Squared norms for the screen, from the staged chunks, a warp per query (rows past the batch
    // are zeros: 0). The bound holds for any summation order (screen_bounds). One thread per query
    // walking its row in global memory held the block for a chain of loads: MNIST-like, 196.
    __syncthreads();
    for (std::uint32_t j = warp; j < std::uint32_t(QG); j += b.warps) {
      float norm = 0.0f;
      for (std::uint32_t c = lane; c < chunks; c += 32) {
        const float4 v = b.queries[c * QG + j];
        norm = __fmaf_rn(v.x, v.x, __fmaf_rn(v.y, v.y, __fmaf_rn(v.z, v.z, __fmaf_rn(v.w, v.w, norm))));
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) norm = __fadd_rn(norm, __shfl_xor_sync(kFullMask, norm, offset));
      if (lane == 0) reinterpret_cast<float*>(shared + b.layout.norms)[j] = norm;
    }
  }
  if (V::kFiltered && threadIdx.x < QG) {
    b.ranges[threadIdx.x] = threadIdx.x < nq ? b.p.ranges[b.q0 + threadIdx.x] : IdRangeDevice{0, 0};
  }
  if (lane < QG) {
    b.counts[lane] = 0;  // start from the bound a sample pass may have found; NaN admits nothing
    b.thresholds[lane] = lane < nq ? from_ordered_bits(__ldcg(&b.p.threshold[b.q0 + lane])) : CUDART_NAN_F;
  }
  if constexpr (V::kFirstBound) {
    if (threadIdx.x < 16) first_min[threadIdx.x] = kNoBound;
    if (threadIdx.x == 0) {
      first_arrived = 0;
      taken_tiles = 0;
    }
  }
  __syncthreads();
}

/// First bound: each warp arrives once, with its first tile's ranks (key_of(j): this lane's ordered
/// rank for query j, kNoBound for none); the block's last warp goes on to the grid-wide part.
template <class V, class KeyOf>
__device__ void arrive_first_tile(const ScanBlock<V>& b, KeyOf key_of) {
#pragma unroll
  for (int j = 0; j < V::QG; ++j) {
    if (j < int(b.nq)) {
      const std::uint32_t smallest = __reduce_min_sync(kFullMask, key_of(j));
      if (b.lane == 0) atomicMin(&first_min[j], smallest);
    }
  }
  __threadfence_block();
  unsigned last = 0;
  if (b.lane == 0) last = atomicAdd(&first_arrived, 1u) == b.warps - 1;
  if (__shfl_sync(kFullMask, last, 0)) {
    publish_first_bound(b.p.first_keys, b.p.first_arrivals, b.p.threshold, first_min, first_staged, b.q0, b.nq,
                        b.k, b.lane);
  }
}

/// List insert: one tile's survivors into the warp's lists; the queries in with_survivors have
/// their ranks of this tile staged in `ranks`. Rare once the thresholds are tight, so it exists
/// once in the code and in the registers.
template <class V>
__device__ void insert_survivors(const ScanBlock<V>& b, std::uint32_t slot, bool valid, std::uint64_t id,
                                                 unsigned with_survivors) {
#pragma unroll 1
  while (with_survivors) {
    const int j = __ffs(with_survivors) - 1;
    with_survivors &= with_survivors - 1;
    const float rank = b.ranks[j * 32 + b.lane];
    bool admit = valid && rank <= b.thresholds[j];
    if constexpr (V::kFiltered) admit = admit && id >= b.ranges[j].begin && id < b.ranges[j].end;
    unsigned survivors = __ballot_sync(kFullMask, admit);
    Candidate* list = b.lists + std::size_t(j) * b.k;
    std::uint32_t n = b.counts[j];
    if (__popc(survivors) >= kBulkMinSurvivors) {
      warp_merge(list, n, b.k, Candidate{rank, slot, id}, survivors, b.scratch, b.lane);
      survivors = 0;
    }
    while (survivors) {
      const int from = __ffs(survivors) - 1;
      survivors &= survivors - 1;
      const Candidate c{__shfl_sync(kFullMask, rank, from), __shfl_sync(kFullMask, slot, from),
                        __shfl_sync(kFullMask, id, from)};
      if (n == b.k && !closer(c.rank, c.id, list[b.k - 1].rank, list[b.k - 1].id)) continue;
      warp_insert(list, n, b.k, c, b.lane);
    }
    __syncwarp();
    if (b.lane == 0) {
      b.counts[j] = n;
      if (n == b.k) {
        const float kth = list[b.k - 1].rank;
        b.thresholds[j] = fminf(b.thresholds[j], kth);
        atomicMin(&b.p.threshold[b.q0 + j], ordered_bits(kth));
      }
    }
    __syncwarp();
  }
}

/// This warp's thresholds, read once per tile (four at a time where the group allows).
template <class V>
__device__ void load_limits(const ScanBlock<V>& b, float (&limit)[V::QG]) {
  if constexpr (V::QG % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V::QG / 4; ++i) {
      const float4 t = reinterpret_cast<const float4*>(b.thresholds)[i];
      limit[4 * i] = t.x;
      limit[4 * i + 1] = t.y;
      limit[4 * i + 2] = t.z;
      limit[4 * i + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V::QG; ++j) limit[j] = b.thresholds[j];
  }
}

/// One-chunk stores: this lane's point of `tile` (at most two elements: one float2 per slot,
/// StoreView::chunk_floats).
template <class V>
__device__ float4 one_chunk_point(const ScanBlock<V>& b, std::uint32_t tile) {
  if constexpr (V::kOneChunk == 2) {
    const float2 v = __ldg(static_cast<const float2*>(b.store.vectors) + std::size_t(tile) * kTile + b.lane);
    return make_float4(v.x, v.y, 0.0f, 0.0f);
  } else {
    return __ldg(b.vectors + std::size_t(tile) * kTile + b.lane);
  }
}

/// Staged loads and the screen: the warp's tiles (tile_begin + warp, + warps, ..) as one stream of
/// stages of kStageChunks chunks through the warp's ring of kStages stages in shared memory.
/// The ring pointer is a reference to the caller's variable (see ScanBlock).
struct ChunkRing {
  float4* const& ring;
  std::uint32_t stages_per_tile, issue_tile, issue_stage, issued;
  // The stage to score next. It equals issued - kStages after each issue, but deriving it so
  // made groups of 4 3-4% slower on large stores (code generation; H100).
  std::uint32_t consumed;
};

/// Copies the next stage into the ring and commits it (an empty group past the end, so every wait
/// counts the same groups).
template <class V>
__device__ void issue_next_stage(const ScanBlock<V>& b, ChunkRing& r) {
  if (r.issue_tile < b.tile_end) {
    const float4* from =
        b.vectors + (std::size_t(r.issue_tile) * b.chunks + r.issue_stage * kStageChunks) * kTile + b.lane;
    float4* to = r.ring + (r.issued % kStages) * kStageChunks * 32 + b.lane;
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      if (r.issue_stage * kStageChunks + u < b.chunks) copy_async16(to + u * 32, from + std::size_t(u) * kTile);
    }
    if (++r.issue_stage == r.stages_per_tile) {
      r.issue_stage = 0;
      r.issue_tile += b.warps;
    }
  }
  commit_async();
  ++r.issued;
}

/// Issues the ring's first kStages - 1 stages where the kernel stages its loads.
template <class V>
__device__ __forceinline__ void prime_ring(const ScanBlock<V>& b, ChunkRing& r) {
  if constexpr (V::kStaged || V::kScreen) {
#pragma unroll
    for (int i = 0; i + 1 < kStages; ++i) issue_next_stage(b, r);
  }
}

/// Block merge, after the block's barrier: kept[j] = 0 and the bound, per query. The bound, one
/// value per block: the grid-wide bound as it stands now, or for one query over a one-chunk store
/// the smallest of the warps' thresholds (each the k-th of a full list or a grid-wide bound read
/// earlier), from shared memory. Re-reading the grid-wide bound was an L2 round trip (clock64
/// stamps: 0.6-1.0 us of the 9 us scan at 100,000 x 2, Q = 1); elsewhere the change altered the
/// kernels' register allocation (new spills in the multi-chunk one-query kernel), so they keep the
/// read.
template <class V>
__device__ __forceinline__ void merge_bound(const ScanBlock<V>& b, std::uint32_t* kept, std::uint32_t* bound) {
  if (threadIdx.x < V::QG) {
    kept[threadIdx.x] = 0;
    if constexpr (V::QG == 1 && V::kOneChunk != 0) {
      float smallest = CUDART_INF_F;
      for (std::uint32_t w = 0; w < b.warps; ++w) {
        smallest = fminf(smallest, reinterpret_cast<const float*>(shared + b.layout.warp_base +
                                                                  w * b.layout.warp_bytes + b.layout.thresholds)[0]);
      }
      bound[0] = ordered_bits(smallest);
    } else {
      bound[threadIdx.x] = threadIdx.x < b.nq ? __ldcg(&b.p.threshold[b.q0 + threadIdx.x]) : kNoBound;
    }
  }
  __syncthreads();
}

/// Warp w's list for query j, and its length.
template <class V>
__device__ const Candidate* warp_list(const ScanBlock<V>& b, std::uint32_t w, std::uint32_t j) {
  if constexpr (V::kGlobalLists) return static_cast<const Candidate*>(b.block_lists + (std::size_t(w) * V::QG + j) * b.k);
  return reinterpret_cast<const Candidate*>(shared + b.layout.warp_base + w * b.layout.warp_bytes + b.layout.lists) +
         std::size_t(j) * b.k;
}
template <class V>
__device__ std::uint32_t warp_count(const ScanBlock<V>& b, std::uint32_t w, std::uint32_t j) {
  return reinterpret_cast<const std::uint32_t*>(shared + b.layout.warp_base + w * b.layout.warp_bytes +
                                                b.layout.counts)[j];
}

/// Entry i of warp w's list for query j (c) in the block's merged list: i plus the entries closer
/// than it in each other list. One query over a one-chunk store steps the binary searches of
/// kSearchTogether lists together, so their loads are in flight at once: one search after another
/// was a chain of about 5 x 7 dependent loads per entry (clock64 stamps: the merge took 3 us of the
/// 9 us scan at 100,000 x 2, Q = 1). A/B against the plain searches: 100,000 x 2 Q = 1-4
/// 0.95-0.96x. Elsewhere the stepped searches changed the kernels' code: MNIST-like Q = 1 1.04x
/// slower, larger groups up to 92 bytes of new spills; they keep the plain searches.
template <class V>
__device__ __forceinline__ std::uint32_t merged_position(const ScanBlock<V>& b, std::uint32_t i, std::uint32_t j,
                                                         std::uint32_t w, const Candidate& c, std::uint32_t top_step) {
  constexpr std::uint32_t kSearchTogether = 8;
  const std::uint32_t warps = b.warps;
  std::uint32_t at = i;
  if constexpr (V::QG == 1 && V::kOneChunk != 0) {
    for (std::uint32_t first = 0; first < warps; first += kSearchTogether) {
      std::uint32_t pos[kSearchTogether], length[kSearchTogether];
#pragma unroll
      for (std::uint32_t u = 0; u < kSearchTogether; ++u) {
        const std::uint32_t other = first + u;
        length[u] = other < warps && other != w ? warp_count(b, other, j) : 0;
        pos[u] = 0;
      }
      // Binary lifting: pos[u] grows to the number of entries closer than c (a prefix: sorted).
      for (std::uint32_t step = top_step; step > 0; step >>= 1) {
#pragma unroll
        for (std::uint32_t u = 0; u < kSearchTogether; ++u) {
          const std::uint32_t probe = pos[u] + step;
          if (probe <= length[u]) {
            const Candidate probed = warp_list(b, first + u, j)[probe - 1];
            if (closer(probed.rank, probed.id, c.rank, c.id)) pos[u] = probe;
          }
        }
      }
#pragma unroll
      for (std::uint32_t u = 0; u < kSearchTogether; ++u) at += pos[u];
    }
  } else {
    for (std::uint32_t other = 0; other < warps && at < b.k; ++other) {
      if (other != w) at += count_closer(warp_list(b, other, j), warp_count(b, other, j), c);
    }
  }
  return at;
}

/// Block merge of the warps' lists of each query (merge_one_query for one query over a multi-chunk
/// store): entry i of warp w's list lands at i plus the number of entries of the other lists closer
/// than it. Entries beyond k, or beyond the grid-wide bound (worse than some list's k-th, so not in
/// the answer), are dropped. One query over a one-chunk store keeps this loop: merge_one_query's
/// preamble and call cost 1.01-1.05x on the low-dimension shapes' Q = 1-16.
/// 32-bit index arithmetic (at most 16 queries x 32 warps x 4096 entries): 64-bit divisions were a
/// third of this kernel's instructions on small stores (ncu, 100,000 x 2, Q = 1).
/// Entry-major: consecutive threads take the same place i of consecutive (query, warp) lists. After
/// a sample pass a list holds a few entries, and list-major order gave the threads with i = 0 (one
/// in k) every list's first entries, one merge chain after another while the block waited
/// (GoogleNews-like K = 128 Q = 12: 48 entries per such thread, barrier stalls at the block's end 4x
/// those at K = 64; SASS stall samples). H100 A/B against list-major (two rounds): ImageNet-like
/// K = 128 Q = 12-64 0.84-0.93x, K = 64 0.95-0.96x, GoogleNews-like K = 128 Q = 8-64 0.89-0.98x, the
/// other rows 0.95-1.02x.
template <class V>
__device__ __forceinline__ void merge_group_lists(const ScanBlock<V>& b, std::uint32_t* kept,
                                                  const std::uint32_t* bound) {
  const std::uint32_t warps = b.warps, k = b.k;
  const std::uint32_t lists_n = b.nq * warps, entries = lists_n * k;
  const std::uint32_t top_step = floor_pow2(k);
  for (std::uint32_t e = threadIdx.x; e < entries; e += blockDim.x) {
    const std::uint32_t i = e / lists_n, list = e - i * lists_n;
    const std::uint32_t j = list / warps, w = list - j * warps;
    if (i >= warp_count(b, w, j)) continue;
    const Candidate c = warp_list(b, w, j)[i];
    if (ordered_bits(c.rank) > bound[j]) continue;
    const std::uint32_t at = merged_position(b, i, j, w, c, top_step);
    if (at < k) {
      b.p.candidates[(std::size_t(b.q0 + j) * gridDim.x + blockIdx.x) * k + at] = c;
      atomicAdd(&kept[j], 1u);
    }
  }
}

}  // namespace

}  // namespace streamknn::detail::gpu
