// The scan (kernels/scan.cu): its parameters, shapes and launcher.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/screen.hpp"

namespace streamknn::detail::gpu {

/// Query-group sizes the scan kernel is compiled for (accumulators per lane).
inline constexpr int kQueryGroups[] = {1, 2, 4, 8, 12, 16};

/// Candidate lists: for query q and scan block b, a sorted list of lengths[q * blocks + b]
/// entries at candidates[q * blocks * k + b * k].
struct ScanParams {
  const StoreView* store = nullptr;        // device copy of the buffer's view
  const float* queries = nullptr;          // num_queries x chunks float4 (padded with zeros)
  const IdRangeDevice* ranges = nullptr;   // nullptr or one per query
  const PredicateDevice* predicates = nullptr;  // one per query where ranges is set
  const PredicateDevice* mask = nullptr;   // one predicate for every query, no ranges (the query-resident scan)
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;
  std::uint32_t* threshold = nullptr;      // per query: ordered-bits upper bound of the k-th rank
  Candidate* candidates = nullptr;         // per query: blocks x k entries
  std::uint32_t* lengths = nullptr;        // per query: blocks list lengths
  Candidate* warp_lists = nullptr;         // ScanShape::global_lists: grid blocks x warps x group x k
  // First-tile bound (nullptr: off; groups of one query, not tiled, not filtered): each block's
  // smallest rank among its warps' first tiles, per query; the block that finishes its first
  // tiles last selects the k-th of those keys (k <= grid.x <= kFirstBoundMaxBlocks) and lowers
  // `threshold` to it, so a search without a sample pass stops admitting most points after about
  // one tile per warp.
  std::uint32_t* first_keys = nullptr;      // per query: grid.x keys
  std::uint32_t* first_arrivals = nullptr;  // per query group: blocks arrived (zero before a launch; left zero)
  ScreenBounds screen;                       // ScanShape::screen: the dot-product screen's proven margins
};
/// Most scan blocks per query group the first-tile bound supports.
inline constexpr std::uint32_t kFirstBoundMaxBlocks = 512;

struct ScanShape {
  int query_group = 1;        // one of kQueryGroups
  bool inner_product = false;
  bool filtered = false;      // ranges != nullptr (and predicates)
  int warps_per_block = 8;
  int blocks_per_group = 1;   // grid.x; grid.y = ceil(num_queries / query_group)
  std::uint32_t chunks = 0;   // float4 chunks per vector
  bool global_lists = false;  // the warps' private lists in global memory (ScanParams::warp_lists)
  int one_chunk_width = 0;    // vectors of one chunk: 2 (at most two elements) or 4; else 0
  bool tiled = false;         // one-chunk, 4+ queries, not filtered: each lane scores several tiles
  // Multi-chunk stores after a sample pass, groups of kScreenGroup queries (kScreenSmallGroup for
  // 13-16, kScreenFewGroup for 9-12 under inner product), global lists: each lane scores 4 points
  // x 8 queries (4 x 4 in groups of 16, 4 x 3 in groups of 12) by dot
  // products (half the arithmetic of the exact L2 form, each loaded chunk used 4 or 8 times); L2
  // pairs that pass the screen get an exact rank, and inner product's dot products are its exact
  // ranks.
  bool screen = false;
};
/// The screen's query group (the only group of more than 16 queries).
inline constexpr int kScreenGroup = 32;
/// The screen's group for batches of 13-16 queries (each lane 4 points x 4 queries).
inline constexpr int kScreenSmallGroup = 16;
/// The screen's group for inner-product batches of 9-12 queries (each lane 4 points x 3 queries).
inline constexpr int kScreenFewGroup = 12;
/// The most warps per screen block: one block per SM where 32 queries of many chunks fill half
/// its shared memory (MNIST-like: 100 KB), so the block brings the SM's warps itself.
inline constexpr int kScreenMaxWarps = 16;

/// Entries of ScanParams::warp_lists one launch of this shape needs for num_queries queries.
std::size_t scan_warp_list_entries(const ScanShape& shape, std::uint32_t num_queries, std::uint32_t k);

/// Shared memory one scan block needs.
std::size_t scan_shared_bytes(const ScanShape& shape, std::uint32_t k);
/// Raises the kernel's shared-memory limit for this shape and returns its resident blocks per
/// SM. Call before launching a shape (and before capturing it in a graph).
int configure_scan(const ScanShape& shape, std::uint32_t k);
void launch_scan(const ScanParams& params, const ScanShape& shape, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
