// Every tuning constant of the CUDA backend's host code: the planner's rules (planner.cpp), the
// workspace budgets (workspace.cpp), the graphs (graph_cache.cpp, pipeline.cpp) and the spatial
// index's schedule (spatial_schedule.cpp). One line each: what it means and the rule behind it;
// the measurements behind a rule sit at the function that applies it. Constants of one kernel's
// own design (tile sizes, query groups, shared-memory layouts) stay in the kernels' headers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace streamknn::detail::gpu::tuning {

// ---- memory budgets ---------------------------------------------------------------------------------
/// Candidate lists and sample ranks of one launch chunk: a batch that needs more runs in chunks.
inline constexpr std::size_t kWorkspaceBudget = std::size_t(512) << 20;
/// The scan's warp lists in global memory (global lists, the screen): a shape past it keeps shared lists.
inline constexpr std::size_t kWarpListBudget = std::size_t(256) << 20;
/// The dense screen's rows and group keys of one launch chunk: bounds its queries per chunk.
inline constexpr std::size_t kDenseBudget = std::size_t(256) << 20;
/// One stored query in shared memory: stores of longer vectors are refused (the CPU backend takes them).
inline constexpr std::size_t kMaxQueryBytes = 64 * 1024;
/// Shared memory a scan block leaves of half the SM: two blocks per SM fit with the runtime's reserve.
inline constexpr std::size_t kSharedReserve = 2048;

// ---- graphs and staging -----------------------------------------------------------------------------
/// Batches of up to this many queries (in one chunk) replay a captured graph: no gain above 16.
inline constexpr std::uint32_t kGraphMaxQueries = 16;
/// Graphs one query context keeps (per batch size, k, output and shape): all go when it is full.
inline constexpr std::size_t kMaxCachedGraphs = 64;
/// Chunks of up to this many queries have the last kernel write the answers to the mapped staging.
inline constexpr std::uint32_t kHostWriteMaxQueries = kGraphMaxQueries;
/// A graph's input block past this many bytes is read by a kernel (copy_in), not a copy node.
inline constexpr std::size_t kGraphCopyMaxBytes = 16 * 1024;

// ---- store size classes -----------------------------------------------------------------------------
/// A store of at least this many 32-slot tiles per SM is large: every warp of a scan streams many tiles.
inline constexpr std::uint32_t kLargeStoreTilesPerSm = 64;

// ---- sample pass ------------------------------------------------------------------------------------
/// Large stores sample every kSampleStep-th tile: its k-th rank bounds the scan (about 32 k admitted).
inline constexpr std::uint32_t kSampleStep = 32;
/// Large stores, 16+ queries (8+ at k >= kDenseLargeK), dims <= 128: every 16th tile (cheap ranks).
inline constexpr std::uint32_t kDenseSampleStep = 16;
/// At most this many sampled tiles per query (its rank workspace: 512 KB per query); raises the step.
inline constexpr std::uint32_t kMaxSampleTiles = 4096;
/// Stores of fewer than kLargeStoreTilesPerSm tiles per SM sample every 8th tile (many lists per query).
inline constexpr std::uint32_t kSmallStoreSampleStep = 8;
/// The same for 16+ queries at k >= 128 over dims 9-128: every 4th tile.
inline constexpr std::uint32_t kSmallStoreDenseStep = 4;
/// A sample needs this many points per k (and as many ranks) for a tight bound.
inline constexpr std::uint32_t kSampleRanksPerK = 16;
/// Chunks per vector up to which a "dense" (every 16th / 4th tile) sample pays: dims <= 128.
inline constexpr std::uint32_t kDenseSampleMaxChunks = 32;
/// Queries from which a small store's sample pays whatever k and dims (many warps' lists per query).
inline constexpr std::uint32_t kSampleManyQueries = 12;
/// Sampled one-chunk points per warp: a warp ranks one point against this many groups of 4 queries.
inline constexpr std::uint32_t kSampleOneChunkGroups = 8;
/// Batched loads in the sample pass while it gives the SMs at most this many warps each.
inline constexpr std::uint32_t kSampleBatchedWarpsPerSm = 24;
/// Split sums in the sample pass while the staged kernel gives the SMs at most this many warps each.
inline constexpr std::uint32_t kSampleSplitWarpsPerSm = 8;

// ---- scan -------------------------------------------------------------------------------------------
/// Warps per scan block for query groups of up to 4 (registers allow 16), and for larger groups.
inline constexpr int kScanWarpsSmallGroup = 16;
inline constexpr int kScanWarpsLargeGroup = 8;
/// Fewest warps the scan's warp count is lowered to for small stores (then tiles per warp fall).
inline constexpr int kScanMinWarps = 4;
/// Several tiles per lane pay where survivors are sparse: at most 1 tile in this many holds one.
inline constexpr std::uint32_t kTiledSparse = 8;
/// The first-tile bound pays where every warp streams at least this many tiles.
inline constexpr std::uint32_t kFirstBoundMinTilesPerWarp = 3;
/// The dot-product screen wants at most one exact rank per query in this many tiles.
inline constexpr std::uint64_t kScreenSparse = 4;
/// Inner-product batches of at least this many take the sample pass and the screen (L2: 13).
inline constexpr std::uint32_t kScreenMinQueries = 9;

// ---- dense screen -----------------------------------------------------------------------------------
/// Vectors of at least this many chunks (64 dims): below, a pair's exact rank is cheap.
inline constexpr std::uint32_t kDenseMinChunks = 16;
/// Smallest batch of the dense screen below kDenseLargeK and kDenseLongChunks.
inline constexpr std::uint32_t kDenseMinQueries = 12;
/// Smallest batch over vectors of kDenseLongChunks chunks or more (its exact product pays from 2).
inline constexpr std::uint32_t kDenseLongMinQueries = 2;
inline constexpr std::uint32_t kDenseLongChunks = 64;  // 256 dims
/// Smallest batch at k >= kDenseLargeK (below kDenseLongChunks).
inline constexpr std::uint32_t kDenseLargeKMinQueries = 6;
inline constexpr std::uint32_t kDenseLargeK = 128;
/// The dense screen's launch chunks hold a multiple of the product kernel's 64-query tile.
inline constexpr std::uint32_t kDenseChunkMultiple = 64;

// ---- reduced-precision screen --------------------------------------------------------------------
/// Candidates the reduced-precision screen keeps beyond the float32 screen's width: its bounds
/// are about 2^-12 of a distance wide (float16's rounding), so it needs more than the float32
/// screen's eight to separate the k-th exact distance from the last candidate's on random data.
inline constexpr std::uint32_t kReducedExtraSlack = 8;
/// The int8 copy's bounds are about a step (1/254 of each point's range) wide, so its screen keeps
/// twice the float32 screen's width (at least kReducedInt8MinSlack more, at most
/// kReducedMaxWidth), and only for float32 widths of at most kReducedInt8MaxScreenK (k <= 128).
/// On uniform data the certificate needs about 1.4-1.8 k candidates (1,275,219 x 128 and
/// 1,000,000 x 300, k = 64 and 128, a float64 replay of the bound).
inline constexpr std::uint32_t kReducedInt8MinSlack = 32;
inline constexpr std::uint32_t kReducedInt8MaxScreenK = 136;
/// Batches of at most this many queries take the screen under ReducedScreen::Auto over large
/// stores; kReducedAutoWideMaxQueries over stores of kReducedAutoWideChunks chunks or more (where a
/// point's bytes outweigh its arithmetic longer), with either copy. H200 A/Bs against the float32
/// screen (same run, K = 64 / 128): the float16 copy at GoogleNews-like (300 dims) Q = 1-4
/// 0.53-0.63x, Q = 8 0.92 / 0.97x, Q = 12-16 1.40-1.62x; at ImageNet-like (128 dims) Q = 4
/// 0.68-0.70x, Q = 5-7 0.83-0.93x, Q = 8 0.94-0.96 / 0.88-0.89x (two rounds; it took 1.32 / 1.41x
/// at Q = 8 before the screen's admission and list writing were reworked); the int8 copy at
/// ImageNet-like Q = 8 0.78 / 0.82x; MNIST-like (70,000 x 784, not a large store) Q = 1-2
/// 0.97-1.03x, Q = 4+ 1.30x and slower. Narrower stores have no measurement past 4 queries.
inline constexpr std::uint32_t kReducedAutoMaxQueries = 4;
inline constexpr std::uint32_t kReducedAutoWideMaxQueries = 8;
inline constexpr std::uint32_t kReducedAutoWideChunks = 32;

// ---- direct search ----------------------------------------------------------------------------------
/// Batches of at most this many queries take the direct search (one-chunk stores).
inline constexpr std::uint32_t kDirectMaxQueries = 16;
/// Where each direct block streams at most this many segments (a chain of memory round trips).
inline constexpr std::uint32_t kDirectMaxSegments = 4;

// ---- query-resident scan ----------------------------------------------------------------------------
/// Batches of at least this many queries take the resident scan (one-chunk stores, L2).
inline constexpr std::uint32_t kResidentMinQueries = 16;
/// And queries x k at least this (4 x on small stores).
inline constexpr std::uint64_t kResidentMinWork = 1024;
/// Each resident warp streams at least this many tiles.
inline constexpr std::uint32_t kResidentMinTiles = 4;
/// Warps per resident block (fewer where their shared memory exceeds the device's).
inline constexpr std::uint32_t kResidentWarps = 4;
/// Where one wave is too few, warps per row >= this x the sample step.
inline constexpr std::uint32_t kResidentShareFactor = 4;

// ---- spatial index ----------------------------------------------------------------------------------
/// SpatialIndex::Auto: stores of at least this many slots take the index.
inline constexpr std::uint32_t kSpatialMinSlots = 16384;
/// A stale index is built once this many queries have come (or waited on the scans).
inline constexpr std::uint64_t kSpatialBuildQueries = 1024;
/// A stale, refittable index is refit once this many (at least) have come since the buffer changed.
inline constexpr std::uint64_t kSpatialRefitQueries = 128;
/// Slots per refit query: a refit costs about 40-45 us per million points, so large stores wait longer.
inline constexpr std::uint32_t kSpatialRefitSlotsPerQuery = 25000;
/// The refit's query count for a store of `slots` slots.
inline std::uint64_t spatial_refit_queries(std::uint32_t slots) {
  return std::max<std::uint64_t>(kSpatialRefitQueries, slots / kSpatialRefitSlotsPerQuery);
}
/// Auto at k > kSpatialSmallK: batches of at least kSpatialLargeKMinQueries queries only.
inline constexpr std::uint32_t kSpatialSmallK = 32;
inline constexpr std::uint32_t kSpatialLargeKMinQueries = 1024;
/// Queries per launch chunk of the spatial search (it needs no candidate workspace).
inline constexpr std::uint32_t kSpatialChunkQueries = 1u << 16;

}  // namespace streamknn::detail::gpu::tuning
