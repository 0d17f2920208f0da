// The plan's kernels for one launch chunk and their parameters (Pipeline, pipeline.hpp): the
// spatial search, the reduced-precision screen, the direct search, the dense screen, or the
// sample pass and the scan or the resident scan, then the selection and the exact re-rank.
#include <algorithm>

#include "core/metric_space.hpp"
#include "cuda/pipeline.hpp"
#include "cuda/tuning.hpp"

namespace streamknn::detail::gpu {

using namespace tuning;

namespace {

/// A kernel's filter inputs under the plan's filtering (device_types.hpp): each query's id range
/// and predicate, or the one predicate as a mask (the chunk's first), or none.
template <class Params>
void set_filters(Params& p, QueryContext& c, const Plan& plan) {
  const bool per_query = plan.filtering == Filtering::PerQuery;
  p.ranges = per_query ? c.in<IdRangeDevice>(c.layout.ranges) : nullptr;
  p.predicates = per_query ? c.in<PredicateDevice>(c.layout.predicates) : nullptr;
  p.mask = plan.filtering == Filtering::Mask ? c.in<PredicateDevice>(c.layout.predicates) : nullptr;
}

}  // namespace

/// Each query's k best, written to the outputs of `select`: the candidates, then the selection
/// over them (the spatial search and the dense screen write the answers themselves).
void Pipeline::search(QueryContext& c, const Plan& plan, const BufferViews& views, std::uint32_t n,
                      const SelectParams& select) const {
  // The float32 kernels screen: each query's plan.width best by float32 rank, into the context's
  // screen arrays; the exact re-rank writes the k answers to `select`'s outputs. Any screen that
  // delivers the plan.width best by a rank within a proven bound of the exact one can take the
  // float32 kernels' place here (docs/cuda.md, "Other screens"): the re-rank's certificate then
  // takes that screen's bound in place of the float32 one.
  SelectParams screen = select;
  screen.k = plan.width;
  screen.out_distance = c.screen_distance.get();
  screen.out_id = c.screen_id.get();
  screen.out_slot = c.screen_slot.get();
  // The reduced-precision screen's ranks are lower bounds of the exact ranks: the selection
  // passes them through unchanged (as it does inner products) for the re-rank's certificate.
  const bool reduced = plan.as<ReducedPlan>() != nullptr;
  if (reduced) screen.metric = static_cast<int>(Metric::InnerProduct);
  if (!find_candidates(c, plan, views, n, screen)) {
    launch_select(screen, stream_);
    debug_sync("select_kernel");
  }
  RerankParams rerank;
  rerank.store = views.store;
  rerank.queries = c.in<float>(c.layout.queries);
  rerank.query_stride = chunks_ * 4;
  set_filters(rerank, c, plan);
  rerank.num_queries = n;
  rerank.k = plan.k;
  rerank.width = plan.width;
  rerank.stored_dim = static_cast<std::uint32_t>(stored_dim_);
  rerank.metric = static_cast<int>(config_.metric);
  rerank.screen_id = screen.out_id;
  rerank.screen_slot = screen.out_slot;
  rerank.out_distance = select.out_distance;
  rerank.out_id = select.out_id;
  rerank.out_slot = select.out_slot;
  rerank.screen_floor = reduced ? screen.out_distance : nullptr;
  const bool in_shared = rerank_fits_shared(plan.width, plan.k, device_.rerank_shared);
  rerank.global_buffer = in_shared ? nullptr : c.rerank_buffer.get();
  if (rerank_keys_apart(chunks_)) {
    rerank.keys = c.rerank_keys.get();
    launch_rerank_keys(rerank, chunks_, stream_);
    debug_sync("rerank_keys_kernel");
  }
  launch_rerank(rerank, stream_);
  debug_sync("rerank_kernel");
}

/// Each query's sorted candidate lists for the selection: the direct search, or the sample pass
/// (where the plan has one) and the scan or the resident scan. True where they were the answers,
/// written to `select`'s outputs already (the spatial search, the dense screen).
bool Pipeline::find_candidates(QueryContext& c, const Plan& plan, const BufferViews& views,
                               std::uint32_t n, const SelectParams& select) const {
  const StoreView* view = views.store;
  if (plan.as<SpatialPlan>()) {
    launch_spatial(c, plan, views, n, select);
    return true;
  }
  if (const auto* reduced = plan.as<ReducedPlan>()) {
    ScanParams scan = scan_params(c, plan, view, n);
    scan.first_keys = c.first_keys.get();
    scan.first_arrivals = c.first_arrivals.get();
    launch_reduced_screen(scan, reduced->blocks, reduced->group, std::uint32_t(stored_dim_),
                          config_.metric == Metric::InnerProduct, config_.reduced_format, stream_);
    debug_sync("reduced_screen_kernel");
    return false;
  }
  if (const auto* direct = plan.as<DirectPlan>()) {
    launch_direct(scan_params(c, plan, view, n), direct->blocks, width_, config_.metric == Metric::InnerProduct,
                  stream_);
    debug_sync("direct_kernel");
    return false;
  }
  if (const auto* dense = plan.as<DensePlan>()) {
    launch_dense_screen(c, plan, *dense, view, n, select);
    return true;
  }
  if (const SamplePass* pass = plan.sample()) sample_bound(c, plan, *pass, view, n);
  if (const auto* resident = plan.as<ResidentPlan>()) {
    ScanParams scan = scan_params(c, plan, view, n);
    scan.screen = screen_bounds(4);
    scan.warp_lists = c.warp_lists.get();
    launch_resident(scan, resident->blocks, resident->warps, width_, stream_);
    debug_sync("resident_kernel");
    return false;
  }
  launch_scan(scan_params(c, plan, view, n), plan.as<ScanPlan>()->shape, stream_);
  debug_sync("scan_kernel");
  return false;
}

void Pipeline::launch_spatial(QueryContext& c, const Plan& plan, const BufferViews& views, std::uint32_t n,
                              const SelectParams& select) const {
  SpatialSearchParams spatial;
  spatial.index = views.index;
  spatial.store = views.store;
  spatial.width = width_;
  spatial.queries = c.in<float>(c.layout.queries);
  spatial.num_queries = n;
  spatial.k = plan.width;
  if (plan.as<SpatialPlan>()->bounded) spatial.threshold = c.in<std::uint32_t>(c.layout.thresholds);
  spatial.out = select;
  launch_spatial_search(spatial, stream_);
  debug_sync("spatial_search_kernel");
}

void Pipeline::launch_dense_screen(QueryContext& c, const Plan& plan, const DensePlan& plan_dense,
                                   const StoreView* view, std::uint32_t n, const SelectParams& select) const {
  DenseParams dense;
  dense.store = view;
  dense.queries = c.in<float>(c.layout.queries);
  dense.num_queries = n;
  dense.k = plan.width;
  dense.chunks = chunks_;
  dense.row_stride = plan_dense.row_stride;
  dense.screened = c.dense.get();
  dense.group_keys =
      reinterpret_cast<std::uint32_t*>(c.dense.get() + std::size_t(plan.chunk_queries) * plan_dense.row_stride);
  dense.metric = select.metric;
  dense.out_distance = select.out_distance;
  dense.out_id = select.out_id;
  dense.out_slot = select.out_slot;
  dense.screen = tensor_screen_bounds(chunks_ * 4);
  dense.shared_limit = device_.shared_per_block_optin;
  // Idle SMs share each query's exact ranks (MNIST-like: copying about k points into one SM
  // was most of the selection; launch_dense keeps one block where the rows hold the ranks).
  dense.sm_count = device_.sms;
  dense.residency = device_.dense;
  dense.blocks_per_query = std::clamp<std::uint32_t>(device_.sms / std::max<std::uint32_t>(n, 1), 1, kDenseMaxParts);
  dense.split = c.dense_split.get();
  dense.arrivals = c.dense_arrivals.get();
  launch_dense(dense, stream_);
  debug_sync("dense screen kernels");
}

ScanParams Pipeline::scan_params(QueryContext& c, const Plan& plan, const StoreView* view,
                                 std::uint32_t n) const {
  const ScanPlan* scan_plan = plan.as<ScanPlan>();
  const bool global_lists = scan_plan && scan_plan->shape.global_lists;
  const bool first_bound = scan_plan && scan_plan->first_bound;
  ScanParams scan;
  scan.store = view;
  scan.queries = c.in<float>(c.layout.queries);
  set_filters(scan, c, plan);
  scan.num_queries = n;
  scan.k = plan.width;
  scan.threshold = c.in<std::uint32_t>(c.layout.thresholds);
  scan.candidates = c.candidates.get();
  scan.lengths = c.lengths.get();
  scan.warp_lists = global_lists ? c.warp_lists.get() : nullptr;
  scan.first_keys = first_bound ? c.first_keys.get() : nullptr;
  scan.first_arrivals = first_bound ? c.first_arrivals.get() : nullptr;
  if (scan_plan && scan_plan->shape.screen && !scan_plan->shape.inner_product) scan.screen = screen_bounds(chunks_ * 4);
  return scan;
}

SelectParams Pipeline::select_params(QueryContext& c, const Plan& plan, std::uint32_t n) const {
  SelectParams select;
  select.candidates = c.candidates.get();
  select.lengths = c.lengths.get();
  select.blocks = plan.lists;
  select.num_queries = n;
  select.k = plan.width;
  select.metric = static_cast<int>(config_.metric);
  return select;
}

/// The aggregation of a chunk's selected neighbours (in the context's output block); the
/// caller sets where the answers go.
AggregateParams Pipeline::aggregate_params(QueryContext& c, const StoreView* view, std::uint32_t n, std::uint32_t k,
                                           Mode mode, const AggregateSpec& spec) const {
  const ChunkLayout& l = c.layout;
  AggregateParams agg;
  agg.store = view;
  agg.distance = c.out<float>(l.distance);
  agg.id = c.out<std::uint64_t>(l.id);
  agg.slot = c.slot.get();
  agg.num_queries = n;
  agg.k = k;
  agg.mode = static_cast<int>(mode);
  agg.distance_weights = spec.weights == Weights::Distance;
  agg.median = spec.regression == RegressionAggregate::Median;
  agg.classes = classes();
  agg.outputs = outputs();
  agg.class_scratch = c.class_scratch.get();
  return agg;
}

/// The sample pass: rank every pass.step-th tile and write each query's k-th rank into the
/// thresholds the main pass starts from.
void Pipeline::sample_bound(QueryContext& c, const Plan& plan, const SamplePass& pass,
                            const StoreView* view, std::uint32_t n) const {
  launch_sample(sample_params(c, plan, pass, view, n), config_.metric == Metric::InnerProduct,
                plan.filtering == Filtering::PerQuery, stream_);
  debug_sync("sample kernels");
}

SampleParams Pipeline::sample_params(QueryContext& c, const Plan& plan, const SamplePass& pass,
                                     const StoreView* view, std::uint32_t n) const {
  SampleParams sample;
  sample.store = view;
  sample.queries = c.in<float>(c.layout.queries);
  set_filters(sample, c, plan);
  sample.num_queries = n;
  sample.k = plan.width;
  sample.step = pass.step;
  sample.sample_tiles = pass.tiles;
  sample.per_tile = pass.per_tile;
  // A one-chunk point is one load: its warp ranks it against 32 queries instead of 4 (ncu,
  // 1,000,000 x 2, Q = 1,024: 262,144 blocks of short warps took 80 us).
  sample.groups_per_warp = chunks_ == 1 ? kSampleOneChunkGroups : 1;
  // Batched loads where the sample gives the SMs few warps (each warp's chain of loads is then
  // the kernel's length); with many warps they cost occupancy. H100 A/B against one load in
  // flight: up to 17 warps per SM 0.80-0.96x (MNIST-like samples of 8 to 32 queries,
  // ImageNet-like Q = 2 to 8), 22-28 per SM 0.98-1.0x, 33 and more 1.02-1.08x.
  const std::size_t sample_warps = std::size_t(pass.tiles) * sample_warps_per_tile(sample);
  sample.batched_loads = chunks_ > 1 && sample_warps <= std::size_t(kSampleBatchedWarpsPerSm) * device_.sms;
  // From 8 queries over vectors of several chunks each warp ranks 8 queries held in shared
  // memory, in one pass with batched loads. H100 A/B against the kernels above: GoogleNews-like
  // Q = 8-64 0.95-0.97x, MNIST-like Q = 16-64 0.93-0.97x (its Q = 64 sample 101 -> 72 us),
  // 100,000 x 128 Q = 64 0.93-0.98x, ImageNet-like 0.98-1.02x.
  sample.chunks = chunks_;
  sample.staged_queries = chunks_ > 1 && n >= kSampleStagedGroup && sample_staged_bytes(chunks_) <= kSampleStagedMaxBytes;
  // Split sums where the staged kernel would give the SMs at most 8 warps each (L2; an inner
  // product's terms have mixed signs, so no margin bounds a change of summation order). H100 A/B
  // against the staged kernel: MNIST-like K = 64 Q = 12 / 16 0.925 / 0.920x, K = 128
  // Q = 8 / 12 / 16 0.88 / 0.94 / 0.94x, Q = 24 0.95-0.98x; with more warps it lost: Q = 32
  // 0.975-0.99x, Q = 64 1.02x, ImageNet-like 1.00-1.02x.
  const std::size_t staged_warps = std::size_t(pass.tiles) * ((n + kSampleStagedGroup - 1) / kSampleStagedGroup);
  sample.split_sums = sample.staged_queries && split_sample_possible(config_.metric, chunks_) &&
                      staged_warps <= std::size_t(kSampleSplitWarpsPerSm) * device_.sms;
  // Over large stores, batches of 16+ stage 16 queries per block and batches of 9-12 stage 12:
  // each warp ranks its tile against all of them in one pass. H100 A/Bs against groups of 8:
  // - 16: half the blocks, twice the arithmetic per point load (two rounds): ImageNet-like
  //   Q = 16-64 0.97-0.98x, GoogleNews-like 0.996-1.01x; over 100,000 x 128 (few tiles per SM, so
  //   half the blocks leave SMs idle) 1.02-1.04x slower, hence large stores only. Groups of 16
  //   for batches of 8-12 (half empty) measured 1.01-1.05x slower.
  // - 12: groups of 8 ranked these batches as two, the second half empty and its tiles read again
  //   from L2 (two rounds): GoogleNews-like Q = 9-12 0.985-0.991x (the sample pass 70 us of the
  //   K = 128 Q = 12 search, 46 us at Q = 8: ncu), ImageNet-like K = 128 0.976x, K = 64
  //   0.995-1.004x, inner product 0.98-1.0x.
  const bool large_store = std::uint64_t(pass.tiles) * pass.step >= std::uint64_t(kLargeStoreTilesPerSm) * device_.sms;
  if (sample.staged_queries && !sample.split_sums && large_store) {
    const std::uint32_t group = n >= kSampleStagedWideGroup                             ? kSampleStagedWideGroup
                                : n > kSampleStagedGroup && n <= kSampleStagedMidGroup ? kSampleStagedMidGroup
                                                                                        : kSampleStagedGroup;
    if (sample_staged_bytes(chunks_, group) <= kSampleStagedMaxBytes) sample.staged_group = group;
  }
  // Tile-major blocks where the sampled tiles do not fit L2 (sample.cu, sample_block): H100 A/Bs,
  // GoogleNews-like Q = 32 / 64 0.98-0.99 / 0.976-0.983x, inner product Q = 9-12 0.91-0.98x.
  const std::size_t sampled_bytes = std::size_t(pass.tiles) * kTile * chunks_ * 4 * sizeof(float);
  sample.tile_major = sampled_bytes > device_.l2_bytes;
  // Ahead of the query-resident scan, that scan's layout over the sample: a pair costs its rank
  // and a min (ncu, 1,000,000 x 2, Q = 1,024: the warp-per-tile kernel took 134 us).
  // (Batches filtered per query take the kernels above, which test each pair against its filter.)
  sample.resident = plan.as<ResidentPlan>() != nullptr && plan.filtering != Filtering::PerQuery;
  sample.width = std::uint32_t(width_);
  sample.keys = c.sample_keys.get();
  sample.threshold = c.in<std::uint32_t>(c.layout.thresholds);
  return sample;
}

}  // namespace streamknn::detail::gpu
