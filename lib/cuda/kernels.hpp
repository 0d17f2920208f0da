// Host-callable launchers of the CUDA kernels. Plain declarations: the host code that calls
// them never sees device code. Every launcher checks the launch and throws CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

// ---- updates -------------------------------------------------------------------------------------
struct ScatterParams {
  // destination buffer
  float* vectors = nullptr;      // float4 tiles (float2 slots where chunk_floats is 2), as float
  std::uint64_t* ids = nullptr;
  std::uint8_t* valid = nullptr;
  std::int32_t* labels = nullptr;
  float* values = nullptr;
  std::uint32_t chunks = 0, dim = 0, outputs = 0, chunk_floats = 4;
  // one resolved batch, on the device
  const std::uint32_t* vector_slots = nullptr;
  const float* vectors_in = nullptr;   // n x dim
  std::uint32_t vector_count = 0;
  const std::uint32_t* target_slots = nullptr;
  const std::int32_t* labels_in = nullptr;
  const float* values_in = nullptr;    // n x outputs
  std::uint32_t target_count = 0;
  const std::uint32_t* id_slots = nullptr;
  const std::uint64_t* ids_in = nullptr;
  std::uint32_t id_count = 0;
};
void launch_scatter(const ScatterParams& params, cudaStream_t stream);

// ---- search ---------------------------------------------------------------------------------------
/// Copies `bytes` (a multiple of 16) from mapped pinned host memory (its device pointer) to
/// device memory with a kernel (kernels/copy_in.cu) launched the usual way: the first kernel of a
/// small batch's graph, in place of a copy node, which above 16 KB took the copy engine's longer
/// path.
void launch_copy_in(const void* mapped_from, void* to, std::size_t bytes, cudaStream_t stream);
/// Query-group sizes the scan kernel is compiled for (accumulators per lane).
inline constexpr int kQueryGroups[] = {1, 2, 4, 8, 12, 16};

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

/// The dot-product screen (ScanShape::screen, L2 ranks): a (point x, query q) pair whose exact
/// rank R is at most the threshold T always passes the test
///   fl(|x|^2 - 2 x.q) <= A T - B |q|^2 + C |x|^2 + slack
/// where |x|^2, x.q and |q|^2 are float sums in any order (see screen_bounds for the proof), so
/// the screen only decides which pairs get their exact rank computed; every answer is an exact
/// rank. Computed on the host from the padded dimension.
struct ScreenBounds {
  double bound_scale = 0;   // A, slightly raised so the double evaluation of A T - B |q|^2 stays above
  double query_scale = 0;   // B, slightly lowered
  double slack = 0;         // absolute: covers underflow (subnormal roundings)
  float norm_scale = 0;     // C, rounded up
  float huge = 0;           // a norm at or above it (possible overflow) sends the pair to the exact rank
};
ScreenBounds screen_bounds(std::uint32_t padded_dim);
/// The same for dot products from the tensor cores' TF32 products (the dense screen's tensor
/// product): a margin about 2^-10 of |x||q| wider.
ScreenBounds tensor_screen_bounds(std::uint32_t padded_dim);

/// Candidate lists: for query q and scan block b, a sorted list of lengths[q * blocks + b]
/// entries at candidates[q * blocks * k + b * k].
struct ScanParams {
  const StoreView* store = nullptr;        // device copy of the buffer's view
  const float* queries = nullptr;          // num_queries x chunks float4 (padded with zeros)
  const IdRangeDevice* ranges = nullptr;   // nullptr or one per query
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
  bool filtered = false;      // ranges != nullptr
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

/// Blocks per SM the product kernels that can give every SM an equal share of the store (see
/// dense.cu's ProductShare) hold at once: of up to 8 queries (exact) and of 17-32 (screened).
/// configure_dense works them out once per device.
struct DenseResidency {
  std::uint32_t few_queries = 0, mid_queries = 0;
};

/// The dense screen (kernels/dense.cu), for batches over small stores of many dimensions, in
/// place of the sample pass and the scan: a tiled matrix product gives every (query, slot) pair
/// its screened value fl(|x|^2 - 2 x.q) less its margin, and every 32-slot group its smallest
/// per query; then one block per query ranks exactly the pairs at or below the k-th group
/// minimum, and every other pair whose screened value could hide a rank within the k-th
/// (ScreenBounds). It hands the selection one sorted list of k per query (ScanParams' layout
/// with one block). L2 ranks only (cosine included), no id ranges.
struct DenseParams {
  const StoreView* store = nullptr;
  const float* queries = nullptr;          // num_queries x chunks float4, as ScanParams
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;                     // at most kDenseMaxK
  std::uint32_t chunks = 0;                // float4 chunks per vector (the store's)
  std::uint32_t row_stride = 0;            // floats per row of `screened` (>= the store's slots)
  float* screened = nullptr;               // workspace: num_queries rows of row_stride
  std::uint32_t* group_keys = nullptr;     // workspace: num_queries rows of row_stride / kTile
  // The answers, written by the selection itself (as select_kernel writes them: SelectParams).
  int metric = 0;                          // streamknn::Metric as int
  float* out_distance = nullptr;           // num_queries x k, reported distances
  std::uint64_t* out_id = nullptr;
  std::uint32_t* out_slot = nullptr;
  // Set by launch_dense: batches of up to kDenseExactMaxQueries queries, whose product writes each
  // pair's exact rank (twice the arithmetic; no screen, no phase C, one selection block per query)
  // rather than its screened value.
  bool exact = false;
  ScreenBounds screen;                     // tensor_screen_bounds(padded dim): the screened product's margin
  std::size_t shared_limit = 0;            // the device's opt-in shared memory per block (sharedMemPerBlockOptin)
  std::uint32_t sm_count = 0;              // the device's multiprocessors (the product's shares)
  DenseResidency residency;                // from configure_dense (0: every grid of whole tiles)
  std::uint32_t stage_points = 0;          // set by launch_dense: points staged at once for exact ranks
  // Selection blocks per query (1 to kDenseMaxParts; launch_dense keeps 1 where exact): each
  // ranks a share of the pairs at or below the first bound, the last to arrive merges them (up to
  // kDenseSplitMax of them; more, or an overflow, and the first block does it all).
  std::uint32_t blocks_per_query = 1;
  Candidate* split = nullptr;              // workspace: num_queries x kDenseSplitMax
  std::uint32_t* arrivals = nullptr;       // per query: blocks arrived (zero before a launch; left zero)
};
inline constexpr std::uint32_t kDenseMaxParts = 8;
/// The most queries the exact product takes (DenseParams::exact).
inline constexpr std::uint32_t kDenseExactMaxQueries = 16;
inline constexpr std::uint32_t kDenseSplitMax = 512;
inline constexpr std::uint32_t kDenseMaxK = 1024;
/// Most tiles per row: the selection holds a row's group keys in shared memory.
inline constexpr std::uint32_t kDenseMaxGroups = 16384;
/// 4-byte words of the workspace one launch of num_queries queries needs (rows, group keys).
inline std::size_t dense_workspace_words(std::uint32_t num_queries, std::uint32_t row_stride) {
  return std::size_t(num_queries) * (row_stride + row_stride / kTile);
}
/// Shared memory one dense selection block needs at least (one point staged at a time); plans
/// that need more than the device allows keep the scan.
std::size_t dense_select_min_shared(std::uint32_t k, std::uint32_t chunks, std::uint32_t groups);
/// Raises the dense kernels' shared-memory limits to the device's opt-in limit per block and
/// returns their residency; call once per device.
DenseResidency configure_dense(std::size_t shared_limit);
void launch_dense(const DenseParams& params, cudaStream_t stream);

/// The direct search (kernels/direct.cu) for small batches over stores of one float4 chunk
/// (dims <= 4: positions, RL states), in place of the sample pass and the scan: one kernel whose
/// blocks each stream segments of kDirectSegment slots per query, bound their first segment by
/// the k-th smallest of its 32-slot groups' minima (k groups each hold a point at or below it)
/// and every segment by the grid-wide bound, keep the k best (rank, id) of what passes, publish
/// their k-th rank as the grid-wide bound, and hand the selection a sorted list each. It takes
/// the scan's parameters and writes the scan's layout (grid.x lists per query, grid.y queries):
/// of ScanParams it reads store, queries, ranges, num_queries, k (at most kDirectMaxK),
/// threshold (each query's grid-wide bound) and writes candidates and lengths. Ranks are the
/// scan's bits.
inline constexpr std::uint32_t kDirectMaxK = 64;
/// Slots one direct block scores per step: 256 threads x 8, so 64 groups of 32 (>= kDirectMaxK).
inline constexpr std::uint32_t kDirectSegment = 2048;
/// Direct blocks resident per SM for a store's vector width (2 or 4), metric kind and filter
/// (the occupancy calculator's; ask once per store).
int direct_blocks_per_sm(int width, bool inner_product, bool filtered);
/// Blocks per query for a store of `capacity` slots where `resident` direct blocks fit at once:
/// a segment each, the resident blocks shared between the queries (then several segments each).
std::uint32_t direct_blocks(std::uint32_t capacity, std::uint32_t num_queries, std::uint32_t resident);
/// width: StoreView::chunk_floats (2 or 4).
void launch_direct(const ScanParams& params, std::uint32_t blocks, int width, bool inner_product, cudaStream_t stream);

/// The query-resident scan (kernels/resident.cu) for large batches over stores of one float4
/// chunk (dims <= 4), L2 ranks, no id ranges, after a sample pass: each lane keeps
/// kResidentQueriesPerThread queries in registers, the warps of a block share
/// kResidentQueriesPerBlock queries and stream their shares of the block's slots past them
/// through shared memory, a dot-product screen with a proven margin (ScanParams::screen,
/// screen_bounds(4)) picks the pairs whose exact rank (the scan's bits) is computed, each warp
/// keeps a list per query (ScanParams::warp_lists: num_queries x blocks x warps x k entries of 8
/// bytes, rank and slot: half as many Candidates), and
/// each block merges them into one sorted list per query in the scan's layout (grid.x = blocks
/// lists per query). Of ScanParams it reads store, queries, num_queries, k (at most
/// kResidentMaxK), threshold (each query's bound, lowered as lists fill) and screen, and writes
/// warp_lists, candidates and lengths.
inline constexpr std::uint32_t kResidentQueriesPerThread = 4;
inline constexpr std::uint32_t kResidentQueriesPerBlock = 32 * kResidentQueriesPerThread;
inline constexpr std::uint32_t kResidentMaxWarps = 8;
inline constexpr std::uint32_t kResidentMaxK = 128;
/// Slots one warp of the resident scan stages at a time.
inline constexpr std::uint32_t kResidentTile = 128;
/// Resident kernel blocks per SM for a vector width (2 or 4) and warps per block.
int resident_blocks_per_sm(int width, std::uint32_t warps);
/// Dynamic shared memory one resident block needs.
std::size_t resident_shared_bytes(int width, std::uint32_t warps);
/// Raises the resident kernels' shared-memory limit to the device's opt-in limit per block; call
/// once per device.
void configure_resident(std::size_t shared_limit);
/// width: StoreView::chunk_floats (2 or 4).
void launch_resident(const ScanParams& params, std::uint32_t blocks, std::uint32_t warps, int width,
                     cudaStream_t stream);

struct SelectParams {
  const Candidate* candidates = nullptr;   // as written by the scan (see ScanParams)
  const std::uint32_t* lengths = nullptr;
  std::uint32_t blocks = 0;                // scan blocks per query group (lists per query)
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;
  int metric = 0;                 // streamknn::Metric as int
  float* out_distance = nullptr;  // num_queries x k, reported distances
  std::uint64_t* out_id = nullptr;
  std::uint32_t* out_slot = nullptr;
};
/// Entries of each list the selection's first round loads. Random data puts about
/// Poisson(k / blocks) entries of the answer in each list, and one list cut before its share
/// sends the query to a second round over up to kSelectCapacity entries: the smallest take of
/// at least 2 with blocks x P(share >= take) <= 1/256 (four shares once they average 8 or more),
/// never more than k.
std::uint32_t first_take(std::uint32_t blocks, std::uint32_t k);
/// Largest k the selection supports, and the most candidates it sorts in shared memory.
inline constexpr std::uint32_t kMaxSelectK = 4096;
inline constexpr std::uint32_t kSelectCapacity = 8192;
/// Raises the selection kernel's shared-memory limit; call once per device.
void configure_select();
void launch_select(const SelectParams& params, cudaStream_t stream);

/// The spatial index (kernels/spatial.cu) of a store of one float4 chunk under L2 ranks: width 2
/// (at most two stored elements: L2, cosine; a grid over the points' bounding box) or width 4
/// for points on the unit sphere (haversine, cosine at three elements; a grid on each face of
/// the cube around it): built on the query stream from one buffer's valid slots (a radix sort by
/// grid cell along a Hilbert curve, a 32-way tree of boxes over the sorted points), then
/// searched a warp per query for up to kSpatialMaxK neighbours, pruning every box whose bound
/// exceeds the query's k-th rank. The search writes the answers itself (as the selection); ranks
/// are the scan's bits.
inline constexpr std::uint32_t kSpatialMaxK = 128;
/// Boxes per level for a store of `slots` slots (leaves of 32 first, up to one root; empty for 0).
std::vector<std::uint32_t> spatial_level_sizes(std::uint32_t slots);
/// Bits per axis of the build's grid for a store of `slots` slots (2^(2 bits) cells per grid).
int spatial_axis_bits(std::uint32_t slots, int width);
/// Bytes of CUB temporary storage the build's sort of `slots` keys needs.
std::size_t spatial_sort_bytes(std::uint32_t slots);
/// What a build or refit found, written by its last kernel to host memory (SpatialBuildParams::stats).
struct SpatialStats {
  std::uint32_t overflow = 0;  ///< valid points outside the tree (SpatialView::overflow_count)
  float leaf_area = 0.0f;      ///< the leaf boxes' summed area (at width 4: half their surface)
  float built_leaf_area = 0.0f;  ///< leaf_area as the last build left it (a refit keeps it)
};
/// A build sorts the buffer's valid points into a new tree. A refit (refit = true) keeps the
/// tree of the last build on the same arrays and gathers each entry's point again: erased slots
/// drop out, points still near their leaf's built box stay and grow it, and the others (points
/// moved far, slots inserted since the build) go to the overflow, which every search ranks
/// whole. No sort: about a tenth of a build's time.
struct SpatialBuildParams {
  const StoreView* store = nullptr;       // the buffer's device view
  std::uint32_t slots = 0;                // the buffer's slot count (as its view)
  std::uint32_t tree_slots = 0;           // the slot count the tree was built for (= slots in a build)
  int width = 2;                          // StoreView::chunk_floats: 2, or 4 (points on the unit sphere)
  bool refit = false;
  std::uint32_t max_blocks = 0;           // blocks of the per-slot passes (a few per SM)
  std::uint32_t* scratch = nullptr;       // spatial_scratch_words(tree_slots): bounds, counts, arrivals
  std::uint32_t* keys = nullptr;          // slots each: the cells, unsorted (kept: a refit reads them) and sorted
  std::uint32_t* keys_sorted = nullptr;
  std::uint32_t* order = nullptr;         // slots: 0, 1, ... before the sort
  std::uint32_t* slots_sorted = nullptr;  // leaves x 32: SpatialView::slots
  void* temp = nullptr;                   // spatial_sort_bytes(slots)
  std::size_t temp_bytes = 0;
  float* points = nullptr;                // leaves x 32 x width floats, sorted
  float* boxes = nullptr;                 // sum of spatial_level_sizes x 2 x width floats
  float* built_leaf_boxes = nullptr;      // leaves x 2 x width floats: the last build's leaf boxes
  std::uint32_t* overflow_slots = nullptr;  // capacity: SpatialView::overflow_slots
  float* overflow_points = nullptr;       // capacity x width floats
  SpatialStats* stats = nullptr;          // host memory the device can write, or nullptr
  SpatialView* view = nullptr;            // device copy, written last
};
/// Words of SpatialBuildParams::scratch for a tree of `slots` slots: kSpatialScratchWords, then a
/// word per node of level 2.
inline constexpr std::size_t kSpatialScratchWords = 8;
std::size_t spatial_scratch_words(std::uint32_t slots);
void launch_spatial_build(const SpatialBuildParams& params, cudaStream_t stream);
struct SpatialSearchParams {
  const SpatialView* index = nullptr;
  const StoreView* store = nullptr;      // the indexed buffer (ids)
  int width = 2;                         // the index's (SpatialBuildParams::width)
  const float* queries = nullptr;        // num_queries float4 (one chunk)
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;                   // at most kSpatialMaxK
  SelectParams out;                      // the answers (metric, k, out_distance, out_id, out_slot)
};
void launch_spatial_search(const SpatialSearchParams& params, cudaStream_t stream);

// ---- aggregation ----------------------------------------------------------------------------------
struct AggregateParams {
  const StoreView* store = nullptr;
  const float* distance = nullptr;       // num_queries x k, reported
  const std::uint64_t* id = nullptr;
  const std::uint32_t* slot = nullptr;
  std::uint32_t num_queries = 0, k = 0;
  int mode = 0;                          // 0 labels, 1 probabilities, 2 values
  int distance_weights = 0;              // 1: 1/d with the zero-distance rule
  int median = 0;                        // regression: median instead of (weighted) mean
  std::uint32_t classes = 0, outputs = 0;
  double* class_scratch = nullptr;       // num_queries x classes, when classes > kSharedClasses
  double* value_scratch = nullptr;       // num_queries x k (median)
  std::int32_t* out_label = nullptr;
  float* out_probability = nullptr;      // num_queries x classes
  float* out_value = nullptr;            // num_queries x outputs
};
inline constexpr std::uint32_t kSharedClasses = 4096;
void launch_aggregate(const AggregateParams& params, cudaStream_t stream);

// ---- device-resident queries (kernels/device_queries.cu) -------------------------------------------
/// Reads a chunk of the caller's queries from device memory, validates each row (NaN/Inf, cosine
/// zero vector, latitude outside [-90, 90], visible range with begin > end), converts it to the
/// stored form padded to float4 chunks, and sets its threshold to +inf. A bad row is replaced by
/// zeros (so the search stays well defined) and its global index atomicMin'ed into status[0]
/// (status[1] for a bad range); the host reports the first one.
struct DeviceQueryParams {
  const float* in = nullptr;             // caller's queries, row q at in + q * row_stride
  std::size_t row_stride = 0;            // floats
  const IdRangeDevice* visible = nullptr;  // caller's ranges (one per query) or nullptr
  std::uint32_t first = 0;               // global index of the chunk's first query
  std::uint32_t num_queries = 0;         // queries in the chunk
  std::uint32_t dim = 0, stored_dim = 0, chunks = 0;
  int metric = 0;                        // streamknn::Metric as int
  float* queries_out = nullptr;          // num_queries x chunks float4
  IdRangeDevice* ranges_out = nullptr;   // written when visible != nullptr
  std::uint32_t* thresholds = nullptr;   // num_queries
  unsigned long long* status = nullptr;  // [0] first bad query, [1] first bad range (~0: none)
  // Where the kernel hands the status to the host (mapped pinned memory), or nullptr where the
  // caller copies `status` back itself. With it, the last block to finish copies `status` there
  // and sets it back to ~0 where this chunk is the batch's last (`last_chunk`), and leaves
  // `arrivals` at zero for the next launch.
  unsigned long long* host_status = nullptr;
  std::uint32_t* arrivals = nullptr;     // blocks finished (zero between launches)
  bool last_chunk = false;
};
void launch_prepare_device_queries(const DeviceQueryParams& params, cudaStream_t stream);

// ---- KNN-Q lookup and write-back (kernels/knnq.cu) -------------------------------------------------
struct KnnqParams {
  const float* values = nullptr;         // the snapshot's target rows, capacity x outputs
  const std::uint32_t* slots = nullptr;  // num_queries x k neighbour slots (~0u: padding)
  const std::int32_t* actions = nullptr; // num_queries
  const float* targets = nullptr;        // num_queries
  float alpha = 0;
  std::uint32_t num_queries = 0, k = 0, outputs = 0;
  float* q_before = nullptr;             // num_queries x outputs: per-action means (NaN: none)
  float* increment = nullptr;            // num_queries: alpha * (target - q[action]) (0: none)
  // the write-back, one entry per (query, neighbour): slot and its whole new row
  std::uint32_t* out_slots = nullptr;    // num_queries x k
  float* out_values = nullptr;           // num_queries x k x outputs
};
/// Per query: the per-action means of its neighbours' rows (double sums in neighbour order, as
/// the Mean aggregate) and its increment.
void launch_knnq_estimate(const KnnqParams& params, cudaStream_t stream);
/// Per (query, neighbour) entry: the slot's new row, its snapshot row plus the increments of
/// every query that found it, added in query order (as the CPU backend). Entries of one slot
/// write identical rows; padding entries repeat a real slot's entry, so the batch holds
/// num_queries x k target writes, every one well defined.
void launch_knnq_rows(const KnnqParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
