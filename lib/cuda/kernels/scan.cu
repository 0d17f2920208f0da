// The search kernel: one-point-per-lane exact k-NN with query aggregation.
//
// Persistent blocks each own a contiguous range of 32-slot tiles, and each warp streams its
// own share of them without block barriers: lane i scores slot (tile * 32 + i) against all QG
// queries of the block's query group, reading the point once in coalesced float4 chunks (see
// device_types.hpp) and accumulating each query's rank in a register in a fixed order (so a
// pair's rank does not depend on the batch). A lane whose rank is within the query's threshold
// is a survivor. Every warp keeps its own sorted (rank, id) list per query, in shared memory
// or, for large query groups after a sample pass (kGlobalLists), in a global workspace, so
// nothing is shared while streaming: no locks, no barriers. Survivors enter by a bulk merge
// (several at once) or a single insertion. Warps tighten each other's thresholds through a
// per-query bound in global memory (atomicMin of every full list's k-th, read back every tile),
// which a sample pass may already have set. At the end one barrier, then the block merges its
// warps' lists in parallel (each entry's final position is its index plus its count in the
// other lists) and writes one sorted list per query, truncated at the bound, for the select
// kernel. Stores of one float4 chunk per vector have kernels of their own (a tile prefetch, and
// where survivors are sparse several tiles per lane tested on their smallest rank). One query
// without a sample pass bounds itself: each block publishes the smallest rank of its warps' first
// tiles, the last block to do so lowers the grid-wide bound to the k-th of them, and the warps
// hold their first tile back until the end, so no warp merges a cold tile while the others do.
// Batches of more than 12 queries over stores of several chunks, after a sample pass, run the
// dot-product screen (kScreen): groups of 32 queries (16 for 13-16), each lane 4 points x 8 (4)
// queries by x.q and |x|^2 from its warp's ring, a proven margin (screen_bounds) deciding which
// L2 pairs need their exact rank (inner-product dot products are exact ranks already), and those
// pairs queued and ranked 32 at a time before they enter the lists.
//
// Its parts: scan_layout.cuh (the shared-memory layout), scan_lists.cuh (the warps' lists and the
// block's merge), scan_block.cuh (the steps around the tile loop and the callables the loops
// share), scan_loops.cuh (the tiled and the one-tile-per-warp loops), scan_screen.cuh (the screen).
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan_block.cuh"
#include "cuda/kernels/scan_layout.cuh"
#include "cuda/kernels/scan_lists.cuh"
#include "cuda/kernels/scan_loops.cuh"
#include "cuda/kernels/scan_screen.cuh"

namespace streamknn::detail::gpu {

namespace {

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

template <int QG, bool kInnerProduct, bool kFiltered, bool kGlobalLists, int kOneChunk, bool kTiled,
          bool kScreen = false, bool kNarrow = false>
__global__ void __launch_bounds__(kNarrow ? kNarrowThreads : max_threads<QG, kScreen>(), kNarrow ? kNarrowBlocksPerSm : 0)
    scan_kernel(ScanParams p) {
  static_assert(!kNarrow || (QG == 1 && kOneChunk == 0 && !kGlobalLists && !kScreen));
  start_chained_kernel();
  // Asking ptxas for one block per SM (no spills, more registers) made groups of 8-16 5-18% slower.
  // kTiled (ScanShape::tiled): each lane scores kTilesPerLane tiles at a time (2 at four
  // elements, where 4 spilled registers).
  static_assert(!kTiled || (kOneChunk != 0 && QG >= 4 && !kFiltered));
  static_assert(!kScreen || (!kFiltered && kGlobalLists && kOneChunk == 0 && !kTiled &&
                              (QG == kScreenGroup || QG == kScreenSmallGroup || QG == kScreenFewGroup)));
  constexpr int kTilesPerLane = kOneChunk == 2 ? 4 : 2;
  extern __shared__ __align__(16) unsigned char shared[];
  // First-tile bound: the smallest rank of the block's first tiles per query, the warps done, the
  // block's next tile, and the last block's selection; then the block's merge (kept, bound).
  __shared__ std::uint32_t first_min[16], first_arrived, next_tile;
  __shared__ std::uint32_t first_staged[QG == 1 ? kFirstBoundMaxBlocks : 1];
  __shared__ std::uint32_t kept[QG > 16 ? QG : 16], bound[QG > 16 ? QG : 16];

  // The block's state (scan_block.cuh says why the kernel declares it and the phases below take it
  // by reference): the query group, this warp's lists, counts, thresholds and tile ranks.
  const StoreView store = *p.store;
  const std::uint32_t warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::uint32_t chunks = store.chunks, k = p.k;
  const std::uint32_t q0 = blockIdx.y * QG;
  const std::uint32_t nq = min(std::uint32_t(QG), p.num_queries - q0);
  constexpr bool kStaged = staged_loads(QG, kOneChunk);
  constexpr int kRing = ring_stages(QG, kOneChunk, kScreen);
  const SharedLayout layout =
      shared_layout(QG, int(warps), chunks, k, kGlobalLists, kRing, kScreen, kInnerProduct);
  // This block's lists in global memory: warp w's lists for query j at (w * QG + j) * k.
  Candidate* const block_lists =
      kGlobalLists ? p.warp_lists + std::size_t(blockIdx.y * gridDim.x + blockIdx.x) * warps * QG * k : nullptr;
  float4* queries = reinterpret_cast<float4*>(shared + layout.queries);
  IdRangeDevice* ranges = reinterpret_cast<IdRangeDevice*>(shared + layout.ranges);
  unsigned char* mine = shared + layout.warp_base + warp * layout.warp_bytes;
  Candidate* lists = kGlobalLists ? block_lists + std::size_t(warp) * QG * k
                                  : reinterpret_cast<Candidate*>(mine + layout.lists);  // this warp's, QG x k
  std::uint32_t* counts = reinterpret_cast<std::uint32_t*>(mine + layout.counts);
  float* thresholds = reinterpret_cast<float*>(mine + layout.thresholds);  // this warp's, per query
  float* ranks = reinterpret_cast<float*>(mine + layout.ranks);
  Candidate* scratch = reinterpret_cast<Candidate*>(mine + layout.scratch);

  stage_queries<QG, kInnerProduct, kScreen>(p, shared, layout, queries, warps, warp, lane, chunks, q0, nq);
  start_lists<QG, kFiltered>(p, ranges, counts, thresholds, lane, q0, nq, first_min, &first_arrived, &next_tile);

  // This block's contiguous range of tiles.
  const std::uint32_t tiles = (store.slot_count + kTile - 1) / kTile;
  const std::uint32_t per_block = (tiles + gridDim.x - 1) / gridDim.x;
  const std::uint32_t tile_begin = min(tiles, blockIdx.x * per_block);
  const std::uint32_t tile_end = min(tiles, tile_begin + per_block);
  const float4* vectors = static_cast<const float4*>(store.vectors);
  FirstTileArrival<QG> arrive_first{p, warps, lane, q0, nq, k, first_min, &first_arrived, first_staged};
  // Compiled for one query per group only (larger groups of large stores have a sample pass):
  // with groups of 2 ptxas spilled registers in the hot loop.
  const bool first_bound = QG == 1 && !kTiled && !kFiltered && p.first_keys != nullptr;
  if (first_bound && tile_begin + warp >= tile_end) arrive_first([](int) { return kNoBound; });
  TileInsertion<QG, kFiltered> insert_tile{p, store, lane, q0, k, ranges, lists, counts, thresholds, ranks, scratch};
  LimitLoader<QG> load_limits{thresholds};

  if constexpr (kTiled) {
    // Lane i scores point i of kTilesPerLane tiles at once (tile, tile + warps, ..): each
    // query's chunk is read from shared memory once for all of them and the threshold test
    // runs on their smallest rank, so a (point, query) pair costs its arithmetic and a min
    // (ncu, 1,000,000 x 2, Q = 1,024: 15 instructions per pair with one tile per lane). Erased
    // slots score NaN, which the min skips. A tile group with any survivor is then scored tile
    // by tile from memory again (in L1) by the insertion path.
    PointLoader<kOneChunk> load_point{store, lane, vectors};
    float4 vector_ahead[kTilesPerLane];
    bool valid_ahead[kTilesPerLane];
    std::uint32_t bound_ahead = kNoBound;
    GroupLoader<kTilesPerLane, kOneChunk> load_group{p, store, warps, lane, q0, nq, tile_end, load_point,
                                                     vector_ahead, valid_ahead, bound_ahead};
    if (tile_begin + warp < tile_end) load_group(tile_begin + warp);
    float4 v[kTilesPerLane];
    float limit[QG];
    scan_tile_groups<QG, kInnerProduct, kOneChunk, kTilesPerLane>(
        store, warps, warp, lane, nq, tile_begin, tile_end, queries, thresholds, ranks, vector_ahead, valid_ahead,
        bound_ahead, v, limit, load_point, load_group, insert_tile, load_limits);
  } else {
    // kOneChunk (ScanShape::one_chunk_width): vectors of one float4 chunk. A tile is then one
    // load, so the next tile's loads (vector, valid flags, grid-wide bound) are issued before this
    // one is scored (else every tile waits a full round trip: ncu, 1,000,000 x 2, Q = 1,024), and
    // stores of at most two elements score only those (the same rank bits, see accumulate).
    // Kernels of their own: the prefetch's registers cost the other shapes blocks.
    float4 vector_ahead{};
    std::uint8_t valid_ahead = 0;
    float first_rank = CUDART_NAN_F;  // first-tile bound: this lane's rank in the warp's first tile
    std::uint32_t bound_ahead = kNoBound;
    AheadLoader<kOneChunk> load_ahead{p, store, lane, q0, nq, vectors, vector_ahead, valid_ahead, bound_ahead};
    if (kOneChunk && tile_begin + warp < tile_end) load_ahead(tile_begin + warp);

    // With the first-tile bound (multi-chunk) each warp takes its next tile from a block-wide
    // counter after its first: warps that end early take the tiles of those still busy.
    const bool take_tiles = first_bound && kOneChunk == 0;
    NextTile next{take_tiles, warps, lane, tile_begin, &next_tile};
    if constexpr (kScreen) {
      scan_screen<QG, kInnerProduct>(p, store, warps, warp, lane, chunks, k, q0, nq, layout, shared, mine, tile_begin,
                                     tile_end, vectors, queries, lists, counts, thresholds);
    } else {
      // The warp's ring of staged chunks (StageIssuer).
      float4* const ring = reinterpret_cast<float4*>(mine + layout.stage);
      const std::uint32_t stages_per_tile = (chunks + kStageChunks - 1) / kStageChunks;
      std::uint32_t issue_tile = tile_begin + warp, issue_stage = 0, issued = 0;
      StageIssuer issue{warps, lane, chunks, tile_end, vectors, ring, stages_per_tile, issue_tile, issue_stage, issued};
      if constexpr (kStaged) {
#pragma unroll
        for (int i = 0; i + 1 < kStages; ++i) issue();
      }
      // The stage to score next. It equals issued - kStages after each issue(), but deriving it so
      // made groups of 4 3-4% slower on large stores (code generation; H100).
      [[maybe_unused]] std::uint32_t consumed = 0;
      scan_tiles<QG, kInnerProduct, kFiltered, kOneChunk, kStaged>(
          p, store, warps, warp, lane, chunks, q0, nq, queries, ranges, thresholds, ranks, tile_begin, tile_end,
          vectors, first_bound, vector_ahead, valid_ahead, first_rank, bound_ahead, load_ahead, next, ring, issue,
          consumed, arrive_first, insert_tile, load_limits);
    }
  }
  write_block_lists<QG, kGlobalLists, kOneChunk>(p, shared, layout, block_lists, warps, k, q0, nq, kept, bound);
}

using ScanKernel = void (*)(ScanParams);

/// kNarrow: the kernel of blocks of at most kNarrowThreads (see kNarrowThreads).
template <int QG, bool kGlobalLists, int kOneChunk, bool kNarrow = false>
ScanKernel pick(bool inner_product, bool filtered, bool tiled) {
  if constexpr (kOneChunk != 0 && QG >= 4) {
    if (tiled && !filtered) {
      return inner_product ? scan_kernel<QG, true, false, kGlobalLists, kOneChunk, true>
                           : scan_kernel<QG, false, false, kGlobalLists, kOneChunk, true>;
    }
  }
  if (tiled) throw CudaError("scan kernel: several tiles per lane need one-chunk vectors, 4+ queries and no ranges");
  if (inner_product) {
    return filtered ? scan_kernel<QG, true, true, kGlobalLists, kOneChunk, false, false, kNarrow>
                    : scan_kernel<QG, true, false, kGlobalLists, kOneChunk, false, false, kNarrow>;
  }
  return filtered ? scan_kernel<QG, false, true, kGlobalLists, kOneChunk, false, false, kNarrow>
                  : scan_kernel<QG, false, false, kGlobalLists, kOneChunk, false, false, kNarrow>;
}

template <int QG, bool kGlobalLists>
ScanKernel pick(const ScanShape& s) {
  if constexpr (QG == 1 && !kGlobalLists) {
    if (s.one_chunk_width == 0 && !s.tiled && s.warps_per_block * 32 <= kNarrowThreads) {
      return pick<1, false, 0, true>(s.inner_product, s.filtered, s.tiled);
    }
  }
  switch (s.one_chunk_width) {
    case 0: return pick<QG, kGlobalLists, 0>(s.inner_product, s.filtered, s.tiled);
    case 2: return pick<QG, kGlobalLists, 2>(s.inner_product, s.filtered, s.tiled);
    case 4: return pick<QG, kGlobalLists, 4>(s.inner_product, s.filtered, s.tiled);
  }
  throw CudaError("scan kernel: unsupported one-chunk width " + std::to_string(s.one_chunk_width));
}

/// Global lists only for the groups whose shared lists crowd out warps (8 queries and up).
template <int QG>
ScanKernel pick(const ScanShape& s) {
  if constexpr (QG >= 8) {
    if (s.global_lists) return pick<QG, true>(s);
  }
  if (s.global_lists) throw CudaError("scan kernel: global lists need a query group of 8 or more");
  return pick<QG, false>(s);
}

/// The screen's kernel for a group of QG queries (no ranges, global lists, several chunks).
template <int QG>
ScanKernel screen_kernel(bool inner_product) {
  return inner_product ? scan_kernel<QG, true, false, true, 0, false, true> : scan_kernel<QG, false, false, true, 0, false, true>;
}

ScanKernel kernel_for(const ScanShape& s) {
  if (s.screen) {
    if (s.filtered || !s.global_lists || s.one_chunk_width != 0 || s.tiled) {
      throw CudaError("scan kernel: the screen needs no ranges, global lists and vectors of several chunks");
    }
    switch (s.query_group) {
      case kScreenGroup: return screen_kernel<kScreenGroup>(s.inner_product);
      case kScreenSmallGroup: return screen_kernel<kScreenSmallGroup>(s.inner_product);
      case kScreenFewGroup:  // inner product only (choose_screen): L2 keeps the exact form there
        if (s.inner_product) return scan_kernel<kScreenFewGroup, true, false, true, 0, false, true>;
        throw CudaError("scan kernel: the screen's group of " + std::to_string(kScreenFewGroup) + " is for inner product");
      default:
        throw CudaError("scan kernel: the screen needs groups of " + std::to_string(kScreenGroup) + ", " +
                        std::to_string(kScreenSmallGroup) + " or " + std::to_string(kScreenFewGroup) + " queries");
    }
  }
  switch (s.query_group) {
    case 1: return pick<1>(s);
    case 2: return pick<2>(s);
    case 4: return pick<4>(s);
    case 8: return pick<8>(s);
    case 12: return pick<12>(s);
    case 16: return pick<16>(s);
  }
  throw CudaError("scan kernel: unsupported query group " + std::to_string(s.query_group));
}

}  // namespace

std::size_t scan_shared_bytes(const ScanShape& shape, std::uint32_t k) {
  return shared_layout(shape.query_group, shape.warps_per_block, shape.chunks, k, shape.global_lists,
                       ring_stages(shape.query_group, shape.one_chunk_width, shape.screen), shape.screen,
                       shape.inner_product)
             .total +
         32 * sizeof(std::uint32_t);
}

std::size_t scan_warp_list_entries(const ScanShape& shape, std::uint32_t num_queries, std::uint32_t k) {
  if (!shape.global_lists) return 0;
  const std::size_t groups = (num_queries + shape.query_group - 1) / shape.query_group;
  return groups * shape.blocks_per_group * shape.warps_per_block * shape.query_group * k;
}

int configure_scan(const ScanShape& shape, std::uint32_t k) {
  const ScanKernel kernel = kernel_for(shape);
  const std::size_t shared = scan_shared_bytes(shape, k);
  // The limit is a property of the kernel in the whole process, shared by every store: raise it
  // to the most a launch may ask for (the device's opt-in maximum less the kernel's static
  // shared memory), never lowering it under another store's launch.
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(max shared memory per block)");
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes(scan_kernel)");
  const int dynamic_limit = optin - int(attributes.sharedSizeBytes);
  if (int(shared) > dynamic_limit) {
    throw CudaError("scan kernel: " + std::to_string(shared) + " bytes of shared memory requested, the device allows " +
                    std::to_string(dynamic_limit));
  }
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit),
             "cudaFuncSetAttribute(scan_kernel)", std::to_string(dynamic_limit) + " bytes of shared memory");
  int blocks = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, shape.warps_per_block * 32, shared),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor(scan_kernel)");
  return blocks;
}

void launch_scan(const ScanParams& params, const ScanShape& shape, cudaStream_t stream) {
  const ScanKernel kernel = kernel_for(shape);
  const std::size_t shared = scan_shared_bytes(shape, params.k);
  const dim3 grid(shape.blocks_per_group, (params.num_queries + shape.query_group - 1) / shape.query_group);
  launch_chained("scan_kernel", kernel, grid, shape.warps_per_block * 32, shared, stream, params);
}

}  // namespace streamknn::detail::gpu
