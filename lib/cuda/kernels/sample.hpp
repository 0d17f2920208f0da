// The sample pass (kernels/sample.cu): starting thresholds from a sample of the store's tiles.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

/// Queries the sample pass ranks a tile against at once (one group; a warp takes groups_per_warp).
inline constexpr std::uint32_t kSampleGroup = 4;
/// SampleParams::staged_queries: queries per block (and per warp, in one pass over its tile),
/// held in shared memory, at most kSampleStagedMaxBytes of them (the default dynamic limit):
/// kSampleStagedGroup, or kSampleStagedMidGroup / kSampleStagedWideGroup for batches of 9-12 / 16+
/// (SampleParams::staged_group).
inline constexpr std::uint32_t kSampleStagedGroup = 8;
inline constexpr std::uint32_t kSampleStagedMidGroup = 12;
inline constexpr std::uint32_t kSampleStagedWideGroup = 16;
inline constexpr std::size_t kSampleStagedMaxBytes = 48 * 1024;
inline std::size_t sample_staged_bytes(std::uint32_t chunks, std::uint32_t group = kSampleStagedGroup) {
  return std::size_t(group) * chunks * sizeof(float4);
}

/// The sample pass (kernels/sample.cu): every step-th tile's ranks against each query, then per
/// query the k-th smallest as the scan's starting threshold.
struct SampleParams {
  const StoreView* store = nullptr;
  const float* queries = nullptr;          // as ScanParams
  const IdRangeDevice* ranges = nullptr;   // nullptr or one per query
  const PredicateDevice* predicates = nullptr;  // one per query where ranges is set
  const PredicateDevice* mask = nullptr;   // one predicate for every query, no ranges (resident only)
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;
  std::uint32_t step = 0;                  // sample every step-th tile
  std::uint32_t sample_tiles = 0;          // tiles sampled (for the capacity the launch was sized for)
  std::uint32_t per_tile = 0;              // smallest ranks kept per tile and query: 1, 2, 4, .. 32
  std::uint32_t groups_per_warp = 1;       // groups of kSampleGroup queries each warp ranks its tile against
  bool batched_loads = false;              // issue several point loads before scoring them (few warps per SM)
  bool staged_queries = false;             // staged_group queries per warp from shared memory (batched loads)
  std::uint32_t staged_group = kSampleStagedGroup;  // or kSampleStaged{Mid,Wide}Group (not with split_sums)
  bool split_sums = false;                 // staged, L2: a block per sampled tile, its chunks split between warps
  std::uint32_t chunks = 0;                // float4 chunks per vector (the staged queries' size)
  bool tile_major = false;                 // one tile's query groups in consecutive blocks (see sample.cu)
  bool resident = false;                   // the query-resident scan's layout (one chunk, L2, no ranges)
  std::uint32_t width = 4;                 // resident: StoreView::chunk_floats (2 or 4)
  std::uint32_t* keys = nullptr;           // workspace: num_queries x sample_tiles x per_tile ordered ranks
  std::uint32_t* threshold = nullptr;      // per query: set to the k-th key (left alone if none)
  float order_margin = 0;                  // set by launch_sample: see order_margin (0: the scan's order)
};
/// Warps the sample pass launches per sampled tile: one per group of groups_per_warp x
/// kSampleGroup queries (of staged_group with staged queries).
constexpr std::uint32_t sample_warps_per_tile(const SampleParams& p) {
  const std::uint32_t per_warp = p.staged_queries ? p.staged_group : kSampleGroup * p.groups_per_warp;
  return (p.num_queries + per_warp - 1) / per_warp;
}
/// Launches the sample pass; with split_sums (and L2 ranks, staged queries) each sampled tile's
/// chunks are split between sample_split_warps(chunks) warps and the k-th is raised by order_margin.
void launch_sample(const SampleParams& params, bool inner_product, bool filtered, cudaStream_t stream);
/// The relative margin by which an L2 rank summed with at most padded_dim + slices roundings per
/// term, in any order, may fall below the scan's rank of the same pair (rounded up).
float order_margin(std::uint32_t padded_dim, std::uint32_t slices);
/// Warps a sampled tile's chunks are split between (one per 16 chunks, at most 8, as many as
/// shared memory holds beside the staged queries); 1: no split.
std::uint32_t sample_split_warps(std::uint32_t chunks);

}  // namespace streamknn::detail::gpu
