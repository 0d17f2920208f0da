// The CUDA backend's planner: a pure function from a search's shape and the device's limits to a
// Plan that names its strategy. No CUDA calls and no state: the device's figures (properties and
// the occupancy calculator's blocks per SM) come in DeviceLimits, worked out by the backend, so
// the planner runs, and is tested, without a GPU. Every strategy is chosen in planner.cpp; the
// tuning constants are in tuning.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "cuda/kernels.hpp"
#include "streamknn/metric.hpp"

namespace streamknn::detail::gpu {

/// What the planner knows of one batch and of the store it searches.
struct SearchShape {
  std::uint32_t queries = 0;      ///< batch size
  std::uint32_t k = 0;
  std::size_t dim = 0;            ///< the caller's dimension (for messages)
  std::size_t stored_dim = 0;     ///< floats of a stored vector (stored_dim(metric, dim))
  std::uint32_t chunks = 0;       ///< float4 chunks per stored vector
  Metric metric = Metric::L2;
  bool neighbors = true;          ///< the answers are neighbours (else an aggregate of them); no rule reads it
  bool filtered = false;          ///< per-query id ranges or predicates (QueryRequest::filtered)
  bool shared_predicate = false;  ///< one predicate for every query, no id ranges (QueryRequest::shared_predicate)
  bool rank_limited = false;      ///< every query's threshold starts at a rank limit (QueryRequest::rank_limit)
  std::uint32_t capacity = 0;     ///< slots of the store's buffer (a multiple of kTile)
  std::uint32_t slot_count = 0;   ///< slots in use; no rule reads it (the spatial schedule does)
  bool spatial = false;           ///< the spatial schedule wants the index for this batch (SpatialSchedule::wants)
  bool reduced = false;           ///< the store keeps the reduced-precision copy (DeviceStore::has_reduced)
  bool reduced_always = false;    ///< StoreConfig::reduced_screen is Always: the copy screens every batch it can
  bool reduced_int8 = false;      ///< StoreConfig::reduced_format is Int8 (the screen's width)

  bool inner_product() const noexcept { return metric == Metric::InnerProduct; }
  /// Floats per stored chunk (StoreView::chunk_floats): the layout of one-chunk stores.
  std::uint32_t width() const noexcept { return chunk_floats_for(stored_dim); }
};

/// The device as the planner sees it: cudaDeviceProp's figures and the occupancy calculator's
/// blocks per SM of the kernels whose grids it sizes (for this store's vector width and metric).
struct DeviceLimits {
  int major = 0, minor = 0;              ///< compute capability
  std::uint32_t sms = 0;                 ///< multiProcessorCount
  std::size_t shared_per_block_optin = 0;  ///< sharedMemPerBlockOptin
  std::size_t shared_per_sm = 0;         ///< sharedMemPerMultiprocessor
  std::size_t l2_bytes = 0;              ///< l2CacheSize
  bool can_map_host_memory = false;      ///< canMapHostMemory
  /// Direct kernel blocks per SM without and with id ranges (direct_blocks_per_sm; one-chunk stores).
  std::uint32_t direct_blocks_per_sm[2] = {};
  /// Resident kernel blocks per SM, per Filtering (its variants differ in registers), at 1, 2, 4
  /// and 8 warps per block (resident_blocks_per_sm;
  /// one-chunk stores, the warp counts whose shared memory fits).
  std::uint32_t resident_blocks_per_sm[3][4] = {};
  /// The dense product kernels' residency (configure_dense): passed to its launch, no rule reads it.
  DenseResidency dense;
  /// The exact re-rank's dynamic shared memory per block (configure_rerank): no rule reads it.
  std::size_t rerank_shared = 0;
  /// Blocks per SM of the reduced-precision screen for a query group and width (reduced_blocks_per_sm:
  /// the occupancy calculator's, 0 where a block does not fit); empty for stores without the copy.
  /// The backend memoizes it; tests give a model.
  std::function<int(std::uint32_t group, std::uint32_t width)> reduced_blocks_per_sm;
  /// Blocks per SM of the scan kernel of a shape and k (configure_scan: the occupancy calculator).
  /// The backend memoizes it; tests give a model.
  std::function<int(const ScanShape&, std::uint32_t k)> scan_blocks_per_sm;

  std::uint32_t resident_blocks(std::uint32_t warps, Filtering filtering = Filtering::None) const noexcept;
};

/// The sample pass: every step-th tile ranked first; the k-th rank bounds the search after it.
struct SamplePass {
  std::uint32_t step = 0;      ///< sample every step-th tile
  std::uint32_t tiles = 0;     ///< tiles sampled at the store's capacity
  std::uint32_t per_tile = 0;  ///< smallest ranks each sampled tile contributes per query
  std::size_t keys() const noexcept { return std::size_t(tiles) * per_tile; }  ///< ranks per query
};

/// The scan (launch_scan), after a sample pass or bounded by its first tiles or neither; the
/// shape names the kernel variant (query group, warps, global lists, tiles per lane, the screen).
struct ScanPlan {
  ScanShape shape;
  std::optional<SamplePass> sample;  ///< a sample pass first
  bool first_bound = false;  ///< the scan bounds itself from its first tiles (ScanParams::first_keys)
};
/// The dense screen (launch_dense) in place of the sample pass, the scan and the selection.
struct DensePlan {
  std::uint32_t row_stride = 0;  ///< floats per workspace row: the store's capacity in whole tiles
};
/// The direct search (launch_direct) in place of the sample pass and the scan.
struct DirectPlan {
  std::uint32_t blocks = 0;  ///< blocks (candidate lists) per query
};
/// The query-resident scan (launch_resident) after a sample pass.
struct ResidentPlan {
  SamplePass sample;
  std::uint32_t warps = 0;   ///< per block
  std::uint32_t blocks = 0;  ///< per row of kResidentQueriesPerBlock queries (lists per query)
};
/// The spatial index's search (launch_spatial_search): it writes the answers itself.
struct SpatialPlan {
  bool bounded = false;  ///< the walk starts from each query's threshold (SearchShape::rank_limited)
};
/// The reduced-precision screen (launch_reduced_screen) over the store's copy, in place of
/// the sample pass and the scan; the re-rank certifies against its width-th lower bound.
struct ReducedPlan {
  std::uint32_t blocks = 0;  ///< blocks (candidate lists) per query
  std::uint32_t group = 1;   ///< queries per block (one of kReducedGroups)
};

using Strategy = std::variant<ScanPlan, DensePlan, DirectPlan, ResidentPlan, SpatialPlan, ReducedPlan>;

struct Plan {
  Strategy strategy;
  std::uint32_t k = 0;               ///< answers per query (plan_search: the shape's k; the backend sets it)
  /// Candidates the float32 screen keeps per query for the exact re-rank (exact::screen_width(k));
  /// every kernel before the re-rank runs at this k. plan_search sets k = width = the shape's k.
  std::uint32_t width = 0;
  std::uint32_t chunk_queries = 0;  ///< queries per launch chunk
  std::uint32_t lists = 1;          ///< sorted candidate lists per query (the selection's blocks)
  std::uint32_t stride = 0;         ///< candidates per query: lists x k (0: the search writes the answers)
  Filtering filtering = Filtering::None;  ///< how its kernels apply the batch's filters (device_types.hpp)

  template <class T>
  const T* as() const noexcept { return std::get_if<T>(&strategy); }
  /// The sample pass where the plan runs one (scan or resident scan), else nullptr.
  const SamplePass* sample() const noexcept;
  std::size_t sample_keys() const noexcept { return sample() ? sample()->keys() : 0; }
};

/// How a batch's kernels apply its filters (device_types.hpp): none where it is unfiltered, a mask
/// under the query-resident scan (`resident`) where one predicate serves every query and no id
/// range is given, else per query.
Filtering filtering_of(const SearchShape& shape, bool resident);

/// The plan for a batch: the spatial index where the shape says so, else the first of the
/// reduced-precision screen, the direct search, the dense screen, the resident scan and the scan
/// whose rule takes the batch. Throws
/// InvalidArgument where no scan shape fits the device's shared memory.
Plan plan_search(const SearchShape& shape, const DeviceLimits& device);

/// One line naming the strategy and its parameters, for debugging and tests.
std::string describe(const Plan& plan);

/// The split sample pass (split sums) can run: L2 ranks over vectors of enough chunks.
bool split_sample_possible(Metric metric, std::uint32_t chunks);

}  // namespace streamknn::detail::gpu
