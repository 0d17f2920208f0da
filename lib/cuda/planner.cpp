// The planner (planner.hpp): where every strategy of the CUDA backend is chosen. plan_search
// tries them in this order: the spatial index (where the schedule wants it), the reduced-precision
// screen (reduced_pays), the direct search (direct_pays), the dense screen (dense_pays), the
// query-resident scan after a sample pass (resident_pays), else the scan, whose variant (query group, warps, global lists, the screen,
// tiles per lane, the first-tile bound) plan_scan picks. The measurements behind each rule are at
// the function that applies it ("H100 A/B": the rule against the alternative, same GPU run).
#include "cuda/planner.hpp"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <vector>

#include "core/check.hpp"
#include "cuda/tuning.hpp"

namespace streamknn::detail::gpu {

using namespace tuning;

std::uint32_t DeviceLimits::resident_blocks(std::uint32_t warps, Filtering filtering) const noexcept {
  const int index = warps >= 8 ? 3 : warps >= 4 ? 2 : warps >= 2 ? 1 : 0;
  return resident_blocks_per_sm[static_cast<int>(filtering)][index];
}

const SamplePass* Plan::sample() const noexcept {
  if (const auto* scan = as<ScanPlan>()) return scan->sample ? &*scan->sample : nullptr;
  if (const auto* resident = as<ResidentPlan>()) return &resident->sample;
  return nullptr;
}

bool split_sample_possible(Metric metric, std::uint32_t chunks) {
  return metric != Metric::InnerProduct && chunks > 1 && sample_staged_bytes(chunks) <= kSampleStagedMaxBytes &&
         sample_split_warps(chunks) > 1;
}

namespace {

/// A batch over a store on a device, with the figures every rule reads.
struct Inputs {
  const SearchShape& q;
  const DeviceLimits& d;
  std::uint32_t tiles = 0;  ///< 32-slot tiles at the store's capacity (at least 1)
  std::uint32_t sms = 0;
  bool large_store() const noexcept { return tiles >= kLargeStoreTilesPerSm * sms; }
};

// ---- direct search ------------------------------------------------------------------------------------

/// Direct blocks resident at once (without or with id ranges).
std::uint32_t direct_resident(const Inputs& in) {
  return in.d.direct_blocks_per_sm[in.q.filtered ? 1 : 0] * in.sms;
}

/// The direct search (launch_direct) instead of the sample pass and the scan: stores of one
/// float4 chunk (dims <= 4, every metric, with or without id ranges), k <= kDirectMaxK, batches
/// of at most kDirectMaxQueries queries, where each block streams at most kDirectMaxSegments
/// segments: every query reads the whole store, and a block's segments are a chain of memory
/// round trips. H100 A/B against the sample pass and the scan (K = 16 / 64): 100,000 x 2 Q = 1-16
/// 0.60-0.90x; 1,000,000 x 2 Q = 1-4 0.83-0.95x, Q = 6 0.99 / 1.00x, Q = 8-16 1.01-1.40x;
/// 10,000,000 x 2 Q = 1 0.96 / 1.11x, Q = 2-16 1.17-3.8x.
bool direct_pays(const Inputs& in) {
  const SearchShape& q = in.q;
  if (q.chunks != 1 || q.k > kDirectMaxK || q.queries > kDirectMaxQueries) return false;
  const std::uint64_t segments = (std::uint64_t(q.capacity) + kDirectSegment - 1) / kDirectSegment;
  return segments * q.queries <= std::uint64_t(kDirectMaxSegments) * direct_resident(in);
}

Plan plan_direct(const Inputs& in) {
  Plan plan;
  plan.k = in.q.k;
  const std::uint32_t blocks = direct_blocks(in.q.capacity, in.q.queries, direct_resident(in));
  plan.strategy = DirectPlan{blocks};
  plan.lists = blocks;
  plan.stride = blocks * in.q.k;
  plan.chunk_queries = in.q.queries;
  return plan;
}

// ---- reduced-precision screen ------------------------------------------------------------------------

/// The screen's width: the float32 screen's (the shape's k) and kReducedExtraSlack more, since the
/// float16 copy's bounds are about 2^-12 of a distance wide where float32's are 2^-20; for the
/// int8 copy about twice the float32 screen's, at most kReducedMaxWidth (tuning.hpp).
std::uint32_t reduced_width(const SearchShape& q) {
  if (!q.reduced_int8) return q.k + kReducedExtraSlack;
  return std::min(kReducedMaxWidth, std::max(2 * q.k, q.k + kReducedInt8MinSlack));
}

/// Whether the copy's bounds leave the screen's width room for its k: the int8 copy's only up to
/// a float32 width of kReducedInt8MaxScreenK (twice that would pass kReducedMaxWidth).
bool reduced_width_fits(const SearchShape& q) {
  return q.reduced_int8 ? q.k <= kReducedInt8MaxScreenK : reduced_width(q) <= kReducedMaxWidth;
}

/// The reduced-precision screen (launch_reduced_screen) instead of the sample pass and the scan:
/// stores with the copy, no id ranges, a width that fits (reduced_width_fits) and whose block fits
/// the device; under Auto, batches of at most kReducedAutoMaxQueries (kReducedAutoWideMaxQueries over
/// stores of kReducedAutoWideChunks chunks or more) over
/// large stores, where a search is a pass over the store's bytes and the copy holds a half (float16)
/// or a quarter (int8) of them; under Always, every such batch (in chunks of kReducedMaxQueries, one
/// block row each). The group's blocks share the
/// store's segments through a counter, so the grid is the blocks resident at once.
bool reduced_pays(const Inputs& in) {
  const SearchShape& q = in.q;
  if (!q.reduced || q.filtered || !reduced_width_fits(q) || !in.d.reduced_blocks_per_sm) return false;
  const std::uint32_t chunk = std::min(q.queries, kReducedMaxQueries);
  if (in.d.reduced_blocks_per_sm(reduced_group(chunk), reduced_width(q)) <= 0) return false;
  const std::uint32_t most = q.chunks >= kReducedAutoWideChunks ? kReducedAutoWideMaxQueries : kReducedAutoMaxQueries;
  return q.reduced_always || (q.queries <= most && in.large_store());
}

Plan plan_reduced(const Inputs& in) {
  Plan plan;
  plan.k = reduced_width(in.q);
  plan.chunk_queries = std::min(in.q.queries, kReducedMaxQueries);
  const std::uint32_t group = reduced_group(plan.chunk_queries);
  const std::uint32_t segments = (in.q.capacity + reduced_segment(group) - 1) / reduced_segment(group);
  const std::uint32_t resident = std::uint32_t(in.d.reduced_blocks_per_sm(group, plan.k)) * in.sms;
  const std::uint32_t blocks = std::clamp<std::uint32_t>(resident, 1, std::min(std::max(segments, 1u), kReducedMaxBlocks));
  plan.strategy = ReducedPlan{blocks, group};
  plan.lists = blocks;
  plan.stride = blocks * plan.k;
  return plan;
}

// ---- dense screen -------------------------------------------------------------------------------------

/// The smallest batch the dense screen takes. Its product runs a tile of 8 or 16 queries whatever
/// the batch, and its selection a block per query, so below 16 queries it costs about the same
/// (MNIST-like: 0.106-0.124 ms at Q = 2-5 since its exact product), while the scan's cost grows
/// with the batch and k. H100 A/Bs against the sample pass and scan:
/// - MNIST-like (196 chunks), the exact product (two rounds): Q = 2 0.95-0.96x (K = 64) and
///   0.97-0.98x (K = 128), Q = 3 0.80-0.81x / 0.87x, Q = 4 0.76-0.79x / 0.85-0.87x; one query
///   keeps the scan (0.100 ms).
/// - 100,000 x 128 (32 chunks), the screened product: K = 128 Q = 6-11 0.90-0.95x, Q = 5 1.00x,
///   Q = 4 1.04x; K = 64 Q = 4-11 1.05-1.12x slower.
/// The cut at 64 chunks lies between the two shapes measured (32 and 196 chunks).
std::uint32_t dense_min_queries(std::uint32_t chunks, std::uint32_t k) {
  if (chunks >= kDenseLongChunks) return kDenseLongMinQueries;
  return k >= kDenseLargeK ? kDenseLargeKMinQueries : kDenseMinQueries;
}

/// The dense screen (DenseParams) instead of the sample pass and the scan: L2 ranks (cosine
/// included), no id ranges, k <= kDenseMaxK, batches of dense_min_queries(k) or more over stores
/// small enough that every warp of a scan would see only a few tiles (fewer than 64 per SM), with
/// vectors of kDenseMinChunks chunks or more, where the selection's shared memory fits (large k
/// with very long vectors keep the scan). H100 A/Bs against the sample pass and scan: MNIST-like
/// Q = 16-64 0.65-0.80x, Q = 12 0.88-0.91x; 100,000 x 128 Q = 16-64 0.61-0.94x, Q = 12 0.82x
/// (K = 128) and 1.02x (K = 64).
bool dense_pays(const Inputs& in) {
  const SearchShape& q = in.q;
  if (q.filtered || q.inner_product() || q.chunks < kDenseMinChunks || q.k > kDenseMaxK) return false;
  return q.queries >= dense_min_queries(q.chunks, q.k) && !in.large_store() && in.tiles <= kDenseMaxGroups &&
         dense_select_min_shared(q.k, q.chunks, in.tiles) <= in.d.shared_per_block_optin;
}

Plan plan_dense(const Inputs& in) {
  const SearchShape& q = in.q;
  Plan plan;
  plan.k = q.k;
  const DensePlan dense{in.tiles * kTile};
  plan.strategy = dense;
  plan.lists = 1;
  plan.stride = q.k;
  // Rows of the workspace the budget holds; chunks of a multiple of the product kernel's
  // 64-query tile when the batch is split.
  const std::size_t rows = kDenseBudget / (dense_workspace_words(1, dense.row_stride) * 4);
  plan.chunk_queries = q.queries <= rows ? q.queries
                                         : std::max<std::uint32_t>(dense_min_queries(q.chunks, q.k),
                                                                   std::uint32_t(rows / kDenseChunkMultiple *
                                                                                 kDenseChunkMultiple));
  return plan;
}

// ---- sample pass --------------------------------------------------------------------------------------

/// The sample pass's step, or 0 for none. Measured on an H100 (docs/performance.md):
/// - Large stores: a single query of dim 128+ starts cold about as fast as it runs a sample
///   pass (ImageNet- and GoogleNews-like, K 16-128: 0.95-1.05x); from two queries it pays
///   (ImageNet-like Q = 2: 1.2x). At dim <= 8 (one or two float4 chunks) a point costs a few
///   flops, so a cold start's list insertions (every warp admits most of its first tiles)
///   outweigh the scan even for one query (ncu, 1,000,000 x 2, K = 16, Q = 1: 70 us at 10%
///   of DRAM bandwidth): there the sample pass runs from Q = 1.
/// - Smaller stores: every warp sees only a few tiles, so a cold start admits nearly every point
///   into some warp's list, for every query. A denser sample (every 8th tile) pays from groups of
///   12 queries, from 8 at k >= 128, and from 4 at dim <= 128, where a sampled tile is a short
///   chain of loads for its warp (MNIST-like 70,000 x 784: Q = 12..64 1.3-1.6x faster, Q <= 8 at
///   K 16-64 0.55-0.88x; 100,000 x 2: Q = 4 / 8 1.2 / 1.65x; 100,000 x 128: Q = 4..9 1.0-1.5x,
///   Q <= 2 0.76-1.0x).
///   Since the sample pass splits its sums (L2 over 32+ chunks) it also pays from 8 queries at
///   k < 128: MNIST-like K = 64 Q = 8 0.80x; from 4 it was 0.95-1.015x and from 2 1.0-1.08x
///   slower. Inner-product batches of 9+ (kScreenMinQueries) take it at any k, since the screen
///   that runs them needs its bound; without it they ran the exact form from a cold start (H100
///   A/B): MNIST-like Q = 9-11 K = 64 0.63-0.65x (Q = 9 0.296 -> 0.192 ms), K = 32 0.81-0.84x,
///   K = 16 0.85-0.87x.
/// - Large stores, batches of 16+ queries or 8+ at k >= 128, dims <= 128: every 16th tile (two
///   A/Bs against every 32nd): ImageNet-like K = 128 Q = 8 / 12 0.95-0.97x, Q = 16-64 0.87-0.91x,
///   K = 64 Q = 16-64 0.93-0.98x, 1,000,000 x 2 Q = 32-1,024 0.86-0.92x; 10,000,000 x 2 unchanged
///   (kMaxSampleTiles caps its step at 77). GoogleNews-like (300 dims, step capped at 23) gained
///   nothing (K = 128 Q = 8-12 1.00-1.01x in three builds), so dims over 128 keep every 32nd tile
///   (A/B against the rule without that limit: GoogleNews-like 0.99-1.00x, within the spread of
///   that run's unchanged rows, 0.99-1.05x).
///   Every 16th tile for fewer queries measured 1.00-1.01x (ImageNet-like K = 64 Q = 2-12, K = 128
///   Q = 2-4); every 8th lost at K = 64 (1.02-1.09x) and gained no more at K = 128.
/// - Smaller stores, 16+ queries at k >= 128 over dims 9-128: every 4th tile (H100 A/B against
///   every 8th, three rounds): 100,000 x 128 K = 128 Q = 16-64 0.84-0.96x (K = 64 0.94-0.99x,
///   within the batch rows' noise). MNIST-like (784 dims), where a sampled tile costs 6x as much,
///   lost 1.00-1.19x.
std::uint32_t sample_step_for(const Inputs& in) {
  const SearchShape& q = in.q;
  const std::uint32_t nq = q.queries, k = q.k, chunks = q.chunks;
  auto enough = [&](std::uint32_t step) {
    return std::size_t(in.tiles / step) * kTile >= std::size_t(kSampleRanksPerK) * k;
  };
  if (in.large_store() && enough(kSampleStep)) {
    if (nq < 2 && chunks > 2) return 0;
    const bool dense = chunks <= kDenseSampleMaxChunks && (nq >= 16 || (nq >= 8 && k >= kDenseLargeK));
    return dense && enough(kDenseSampleStep) ? kDenseSampleStep : kSampleStep;
  }
  const bool screened_ip = q.inner_product() && nq >= kScreenMinQueries;
  const bool many_lists = nq >= kSampleManyQueries || screened_ip ||
                          (nq >= 8 && (k >= kDenseLargeK || split_sample_possible(q.metric, chunks))) ||
                          (nq >= 4 && chunks <= kDenseSampleMaxChunks);
  if (!many_lists) return 0;
  if (nq >= 16 && k >= kDenseLargeK && chunks > 2 && chunks <= kDenseSampleMaxChunks && enough(kSmallStoreDenseStep)) {
    return kSmallStoreDenseStep;
  }
  return enough(kSmallStoreSampleStep) ? kSmallStoreSampleStep : 0;
}

/// The sample pass for the batch, or none: its step (raised so at most kMaxSampleTiles tiles are
/// sampled) and enough ranks per sampled tile for a tight bound (about 16 k of them, as many
/// points as the sample rule asks).
std::optional<SamplePass> sample_pass_for(const Inputs& in) {
  const std::uint32_t step = sample_step_for(in);
  if (step == 0) return std::nullopt;
  SamplePass sample;
  sample.step = std::max(step, (in.tiles + kMaxSampleTiles - 1) / kMaxSampleTiles);
  sample.tiles = (in.tiles + sample.step - 1) / sample.step;
  sample.per_tile = 1;
  while (sample.per_tile < kTile && std::size_t(sample.tiles) * sample.per_tile < std::size_t(kSampleRanksPerK) * in.q.k) {
    sample.per_tile *= 2;
  }
  return sample;
}

// ---- query-resident scan ------------------------------------------------------------------------------

/// The query-resident scan (launch_resident) instead of the scan, after the sample pass: stores
/// of one float4 chunk (dims <= 4), L2 ranks (haversine and cosine included), filtered or not,
/// k <= kResidentMaxK, batches of 16+ queries with nq x k >= kResidentMinWork (4 x that on stores
/// of fewer than 64 tiles per SM). Filtered batches (10% of 1,000,000 x 2 haversine points pass,
/// K = 16) against the filtered scan, H200, same run: Q = 64 0.81x, Q = 1,024 0.54x; one predicate
/// for the batch as a mask (filtering_of) against it tested per query: Q = 64 0.77x, Q = 1,024 0.51x.
/// H100 A/Bs against the sample pass and the scan (two rounds
/// each):
/// - 1,000,000 x 2: K = 16 Q = 64 0.90-0.97x, Q = 128 0.67-0.69x, Q = 256 0.59-0.61x, Q = 1,024
///   0.48-0.50x; K = 128 Q = 16-1,024 0.73-0.36x. Earlier versions measured K = 16 Q = 16 / 32
///   1.37 / 1.14x, so those keep the scan.
/// - 10,000,000 x 2: K = 16 Q = 64 0.88-0.90x, Q = 128-1,024 0.50-0.53x (Q = 16 / 32 2.2 / 1.4x in
///   an earlier version); K = 128 Q = 16 0.99-1.01x, Q = 32-1,024 0.29-0.66x. Haversine K = 16
///   Q = 64 0.94-1.01x, Q = 256 / 1,024 0.52-0.63x.
/// - 100,000 x 2: K = 16 Q = 1,024 0.66-0.70x, Q = 256 1.02-1.05x (kept for the sake of K = 128
///   Q = 32, 0.79x, at the same queries x k), Q = 32-128 1.09-1.17x in an earlier version;
///   K = 128 Q = 32-1,024 0.54-0.85x.
bool resident_pays(const Inputs& in) {
  const SearchShape& q = in.q;
  if (q.chunks != 1 || q.inner_product() || q.k > kResidentMaxK || q.queries < kResidentMinQueries) {
    return false;
  }
  return std::uint64_t(q.queries) * q.k >= (in.large_store() ? 1 : 4) * kResidentMinWork;
}

/// The query-resident scan's geometry: kResidentWarps warps per block (fewer where their shared
/// memory exceeds the device's), a row of blocks per kResidentQueriesPerBlock queries, as many
/// blocks per row as one wave holds, each warp streaming at least kResidentMinTiles tiles; where
/// one wave would give a row fewer than 2 x sample_step warps, at least
/// kResidentShareFactor x sample_step of them. The sample's bound admits about sample_step x k
/// points per query; with fewer warps per row their lists fill and every further hit rescans a
/// list of k. Batches whose sample keys and lists (the warps' and the blocks') exceed the
/// workspace run in chunks of whole rows. H100 A/B against one wave and no chunks (two rounds):
/// K = 128 Q = 32,768 0.46x (1,000,000 x 2, 98.9 -> 45.1 ms) and 0.36x (10,000,000 x 2); K = 128
/// Q = 4,096 0.89x / 0.52x; K = 16 Q = 4,096-32,768 0.84-0.98x. Factors 2 and 8 measured
/// 0.53 / 0.45x and 0.40 / 0.39x at K = 128 Q = 32,768, and 8 lost at 10,000,000 x 2 K = 128
/// Q = 4,096 (0.59 against 0.52x).
/// Applied to every batch, the floor took 10,000,000 x 2 haversine Q = 1,024 (sample step 77)
/// from 3.2 to 4.1 ms; with the one-wave test 3.17 ms again.
Plan plan_resident(const Inputs& in, const SamplePass& sample) {
  const SearchShape& q = in.q;
  const std::uint32_t nq = q.queries, k = q.k;
  std::uint32_t warps = kResidentWarps;
  while (warps > 1 && resident_shared_bytes(int(q.width()), warps) > in.d.shared_per_block_optin) warps /= 2;
  // The filtered variants take more registers: sized by their own occupancy, the grid stays one
  // wave (by the unfiltered kernel's, a filtered batch ran a partial second wave, H200 1.4x).
  const std::uint32_t resident = in.d.resident_blocks(warps, filtering_of(q, true)) * in.sms;
  const std::uint32_t tiles = std::max<std::uint32_t>(1, q.capacity / kResidentTile);
  const std::uint32_t most_blocks = std::max<std::uint32_t>(1, tiles / (warps * kResidentMinTiles));
  // One wave of the whole batch where it already gives each row 2 x sample_step warps (a larger
  // floor there only adds a wave: 10,000,000 x 2 haversine Q = 1,024, sample step 77, 1.29x).
  const std::uint32_t batch_rows = (nq + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock;
  const bool wave_enough = std::uint64_t(resident / batch_rows) * warps >= 2 * std::uint64_t(sample.step);
  const std::uint32_t fewest_blocks =
      wave_enough ? 1 : std::min(most_blocks, (kResidentShareFactor * sample.step + warps - 1) / warps);
  // Per query: a block's list (Candidates) and its warps' lists (8-byte entries), and the keys.
  const std::size_t list_bytes = std::size_t(k) * (sizeof(Candidate) + warps * sizeof(Candidate) / 2);
  const std::size_t key_bytes = sample.keys() * sizeof(std::uint32_t);
  const std::size_t most = kWorkspaceBudget / (key_bytes + fewest_blocks * list_bytes);
  std::uint32_t chunk = nq;
  if (chunk > most) {
    chunk = std::max<std::uint32_t>(kResidentQueriesPerBlock,
                                    std::uint32_t(most / kResidentQueriesPerBlock * kResidentQueriesPerBlock));
  }
  chunk = std::min<std::uint32_t>(chunk, 65535u * kResidentQueriesPerBlock);  // grid.y holds the rows
  const std::uint32_t rows = (chunk + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock;
  std::uint32_t blocks = std::clamp<std::uint32_t>(resident / rows, fewest_blocks, most_blocks);
  const std::size_t sample_bytes = std::size_t(chunk) * key_bytes;
  const std::size_t budget_blocks =
      (kWorkspaceBudget - std::min(sample_bytes, kWorkspaceBudget)) / (std::size_t(chunk) * list_bytes);
  blocks = std::uint32_t(std::clamp<std::size_t>(budget_blocks, 1, blocks));
  Plan plan;
  plan.k = k;
  plan.strategy = ResidentPlan{sample, warps, blocks};
  plan.lists = blocks;
  plan.stride = blocks * k;
  plan.chunk_queries = chunk;
  return plan;
}

// ---- scan ---------------------------------------------------------------------------------------------

/// The smallest query group the several-tiles-per-lane kernel is compiled for.
constexpr int kTiledMinGroup = 4;

/// Shared memory a scan block may take: the device's opt-in limit, and room for two blocks per SM.
std::size_t scan_budget(const DeviceLimits& d) {
  return std::min<std::size_t>(d.shared_per_block_optin, d.shared_per_sm / 2 - kSharedReserve);
}

/// Warps per block: as many as the group's registers allow (16 for small groups, 8 for large),
/// fewer for small stores so every SM gets work.
int wanted_warps(const Inputs& in, int group) {
  int warps = group <= 4 ? kScanWarpsSmallGroup : kScanWarpsLargeGroup;
  while (warps > kScanMinWarps && in.tiles < std::uint32_t(warps) * in.sms * 2) warps /= 2;
  return warps;
}

/// Blocks of a shape resident at once on the device (at least one per SM).
std::size_t resident_scan_blocks(const Inputs& in, const ScanShape& s) {
  return std::size_t(std::max(1, in.d.scan_blocks_per_sm(s, in.q.k))) * in.sms;
}

/// Whether a shape's warp lists in global memory stay within kWarpListBudget.
bool warp_lists_fit(const Inputs& in, const ScanShape& g) {
  return resident_scan_blocks(in, g) * g.warps_per_block * g.query_group * in.q.k * sizeof(Candidate) <=
         kWarpListBudget;
}

/// The largest query group of at most the batch (kQueryGroups) and the most warps (wanted_warps)
/// whose shared memory fits the budget: the warps' private lists (query group x k each) in shared
/// memory cost warps, and below kScanMinWarps a smaller group. Returns the first group tried.
int choose_group_and_warps(const Inputs& in, ScanShape& s, std::size_t budget) {
  const std::uint32_t k = in.q.k;
  const std::vector<int> groups(std::begin(kQueryGroups), std::end(kQueryGroups));
  std::size_t gi = 0;
  while (gi + 1 < groups.size() && std::uint32_t(groups[gi]) < in.q.queries) ++gi;  // smallest group >= nq (or 16)
  s.query_group = groups[gi];
  const int first = s.query_group;
  auto choose_warps = [&] {
    s.warps_per_block = wanted_warps(in, s.query_group);
    while (s.warps_per_block > 1 && scan_shared_bytes(s, k) > budget) s.warps_per_block /= 2;
  };
  choose_warps();
  while (scan_shared_bytes(s, k) > budget || (s.warps_per_block < kScanMinWarps && gi > 0)) {
    if (gi == 0) {
      throw InvalidArgument(concat("CUDA backend: k=", k, " with dim=", in.q.dim, " needs ", scan_shared_bytes(s, k),
                                   " bytes of shared memory per block, more than the device's ", budget));
    }
    s.query_group = groups[--gi];
    choose_warps();
  }
  return first;
}

/// Keep the warps' lists in global memory when in shared memory they would cost warps or a
/// smaller query group, and a sample pass makes them sparse (about sample_step * k entries
/// per query over the whole store), within a memory budget.
bool global_lists_pay(const Inputs& in, const ScanShape& s, int best_group, int best_warps, std::uint32_t sample_step,
                      std::size_t budget) {
  if (sample_step == 0 || best_group < 8) return false;
  if (s.query_group == best_group && s.warps_per_block >= best_warps) return false;
  ScanShape g = s;
  g.query_group = best_group;
  g.global_lists = true;
  g.warps_per_block = best_warps;
  if (scan_shared_bytes(g, in.q.k) > budget) return false;
  return warp_lists_fit(in, g);
}

/// The dot-product screen (ScanShape::screen): batches of more than 12 queries (9 for inner
/// product) over vectors of several chunks, no ranges, after a sample pass whose bound leaves few
/// pairs for an exact rank (about sample_step x k per query, at most one per query in
/// kScreenSparse tiles), when the group's queries, rings and global lists fit. Inner product
/// takes the same kernel, whose dot products are then the exact ranks. H100 A/B against the exact
/// form: GoogleNews-like Q = 24-64 0.62-0.67x, ImageNet-like 0.71-0.89x; denser pairs lost:
/// MNIST-like in groups of 16 1.03-1.22x, and groups of 16 at Q = 12-16 0.90-1.10x. Where 32
/// queries fill half the SM's shared memory, one block per SM: MNIST-like K = 64 Q = 24-64
/// 0.97-0.98x, 100,000 x 128 K = 64 0.94-0.96x at Q = 24 and 64; one pair per query in 2 tiles
/// (K = 128 there) lost 1.08-1.25x.
/// Batches of 13-16 take a group of 16 since its stage loop is unrolled by 2 (no spills): H100
/// A/B against the exact form: GoogleNews-like Q = 13 / 16 0.87 / 0.88x (K = 64), 0.91 / 0.93x
/// (K = 128), ImageNet-like 0.89 / 0.90x, 0.93 / 0.98x, MNIST-like K = 64 0.94x, 100,000 x 128
/// 0.98-0.99x (the earlier 0.90-1.10x was a fully unrolled kernel that spilled). Inner product
/// takes a group of 12 for 9-12 queries (no pair to rank again): H100 A/B against the exact form
/// (two rounds): 100,000 x 128 K = 64 0.92-0.93x, ImageNet-like 0.96-0.99x, GoogleNews- and
/// MNIST-like 0.99-1.01x. L2 there lost (GoogleNews-like 1.03-1.09x, ImageNet-like 1.03-1.12x,
/// MNIST-like takes the dense screen).
void choose_screen(const Inputs& in, ScanShape& s, std::uint32_t sample_step, int warps, std::size_t budget) {
  const std::uint32_t nq = in.q.queries, k = in.q.k;
  if (s.filtered || in.q.chunks < 2 || sample_step == 0) return;
  if (nq < (s.inner_product ? kScreenMinQueries : std::uint32_t(kScreenFewGroup) + 1)) return;
  if (std::uint64_t(sample_step) * k * kScreenSparse > in.tiles) return;
  ScanShape g = s;
  g.query_group = nq <= std::uint32_t(kScreenFewGroup)     ? kScreenFewGroup
                  : nq <= std::uint32_t(kScreenSmallGroup) ? kScreenSmallGroup
                                                           : kScreenGroup;
  g.screen = true;
  g.global_lists = true;
  g.tiled = false;
  g.warps_per_block = warps;
  if (scan_shared_bytes(g, k) > budget) {
    // 32 queries of many chunks (MNIST-like 784 dims: 100 KB) leave no room for two blocks per
    // SM: one block then, with the SM's warps in it (fewer where even that does not fit).
    const std::size_t one_block = in.d.shared_per_block_optin - kSharedReserve;
    g.warps_per_block = kScreenMaxWarps;
    while (g.warps_per_block > 8 && scan_shared_bytes(g, k) > one_block) g.warps_per_block /= 2;
    if (scan_shared_bytes(g, k) > one_block) return;
  }
  if (!warp_lists_fit(in, g)) return;
  s = g;
}

/// Several tiles per lane (one-chunk stores, 4+ queries, no ranges): the survivor test runs on
/// a group of tiles' smallest rank, and a group with any survivor is scored again tile by tile,
/// so it pays where survivors are sparse. After a sample pass about sample_step * k points per
/// query pass it; measured (H100, K = 16, Q = 256-1,024, groups of 16) against one tile per
/// lane: 10,000,000 x 2 1.2-1.3x (about 6% of the tiles hold a survivor of some query of the
/// group), 1,000,000 x 2 1.0x (26%), 100,000 x 2 0.94x (66%). So: at most 1 tile in 8.
bool tiles_pay(const Inputs& in, const ScanShape& s, std::uint32_t sample_step) {
  if (s.one_chunk_width == 0 || s.query_group < kTiledMinGroup || s.filtered || sample_step == 0) return false;
  return std::size_t(s.query_group) * in.q.k * sample_step * kTiledSparse <= in.tiles;
}

/// The first-tile bound where no sample pass runs and every warp streams three tiles or more:
/// without it a cold warp admits most points of its first tiles (its list's k-th is the k-th of
/// a few hundred points); with it the whole grid's first tiles bound every warp after about
/// one tile. The k-th of the blocks' minima needs at least k blocks.
bool first_bound_pays(const Inputs& in, const ScanPlan& scan) {
  const ScanShape& s = scan.shape;
  const std::uint32_t blocks = std::uint32_t(s.blocks_per_group);
  if (scan.sample || s.query_group != 1 || s.filtered || s.tiled || in.q.k > blocks || blocks > kFirstBoundMaxBlocks) {
    return false;
  }
  return std::uint64_t(in.tiles) >= kFirstBoundMinTilesPerWarp * std::uint64_t(blocks) * std::uint32_t(s.warps_per_block);
}

/// Blocks per query group and queries per launch chunk: at least a tile per warp, all resident
/// blocks when the store is large enough, and chunks (halved, in whole groups) whose candidate
/// lists, warp lists and sample ranks fit kWorkspaceBudget and whose groups fit grid.y.
std::uint32_t choose_grid(const Inputs& in, ScanShape& s, std::size_t sample_keys) {
  const std::uint32_t k = in.q.k;
  const std::size_t resident = resident_scan_blocks(in, s);
  std::uint32_t chunk = in.q.queries;
  for (;;) {
    const std::uint32_t groups_n = (chunk + s.query_group - 1) / s.query_group;
    const std::uint32_t want = (in.tiles + s.warps_per_block - 1) / s.warps_per_block;
    s.blocks_per_group =
        int(std::clamp<std::uint32_t>(want, 1, std::max<std::uint32_t>(1, std::uint32_t(resident) / groups_n)));
    const std::size_t bytes =
        (std::size_t(chunk) * s.blocks_per_group * k + scan_warp_list_entries(s, chunk, k)) * sizeof(Candidate) +
        std::size_t(chunk) * sample_keys * sizeof(std::uint32_t);
    const bool grid_fits = groups_n <= 65535;  // grid.y holds the query groups
    if ((bytes <= kWorkspaceBudget && grid_fits) || chunk <= std::uint32_t(s.query_group)) break;
    chunk = std::max<std::uint32_t>(s.query_group, chunk / 2 / s.query_group * s.query_group);
  }
  return chunk;
}

/// The scan's variant and grid: the largest query group and warps per block whose shared memory
/// leaves room for two blocks per SM (or global lists, or the screen, where those pay), the
/// occupancy calculator's resident blocks split between the query groups, and a query chunk size
/// that bounds the candidate workspace.
Plan plan_scan(const Inputs& in, const std::optional<SamplePass>& sample) {
  const SearchShape& q = in.q;
  ScanPlan scan;
  scan.sample = sample;
  ScanShape& s = scan.shape;
  s.inner_product = q.inner_product();
  s.filtered = q.filtered;
  s.chunks = q.chunks;
  // The store keeps chunk_floats_for(stored_dim) floats per slot; the one-chunk kernels read as many.
  s.one_chunk_width = q.chunks == 1 ? int(q.width()) : 0;
  const std::uint32_t sample_step = sample ? sample->step : 0;
  const std::size_t budget = scan_budget(in.d);
  const int best_group = choose_group_and_warps(in, s, budget);
  const int best_warps = wanted_warps(in, best_group);
  if (global_lists_pay(in, s, best_group, best_warps, sample_step, budget)) {
    s.query_group = best_group;
    s.global_lists = true;
    s.warps_per_block = wanted_warps(in, s.query_group);
  }
  choose_screen(in, s, sample_step, wanted_warps(in, s.query_group), budget);
  // One to three queries over a large one-chunk store take the several-tiles kernel of a group of
  // 4 (its empty rows admit nothing): a lane's tiles are then loads in flight together and one
  // survivor test on their smallest rank, where the one-query kernel read the grid-wide bound and
  // tested every tile. H100 A/B against it: 10,000,000 x 2 Q = 1 / 2 0.76 / 0.78x, 1,000,000 x 2
  // 0.95 / 0.96x, haversine 0.93-0.95x.
  // Four tiles in flight per warp in the one-query kernel instead measured 1.015x.
  if (s.query_group < kTiledMinGroup && s.one_chunk_width != 0 && !s.filtered && !s.global_lists) {
    ScanShape g = s;
    g.query_group = kTiledMinGroup;
    if (tiles_pay(in, g, sample_step) && scan_shared_bytes(g, q.k) <= budget) s.query_group = kTiledMinGroup;
  }
  s.tiled = tiles_pay(in, s, sample_step);
  Plan plan;
  plan.k = q.k;
  plan.chunk_queries = choose_grid(in, s, sample ? sample->keys() : 0);
  plan.lists = std::uint32_t(s.blocks_per_group);
  plan.stride = plan.lists * q.k;
  scan.first_bound = first_bound_pays(in, scan);
  plan.strategy = scan;
  return plan;
}

/// The strategy's plan (plan_search without the filtering).
Plan choose_plan(const SearchShape& q, const DeviceLimits& d) {
  if (q.spatial) {
    Plan plan;
    plan.k = q.k;
    plan.strategy = SpatialPlan{q.rank_limited};
    plan.lists = 1;
    plan.stride = 0;  // no candidate lists: the search writes the answers
    plan.chunk_queries = std::min(q.queries, kSpatialChunkQueries);
    return plan;
  }
  const Inputs in{q, d, std::max<std::uint32_t>(1, q.capacity / kTile), d.sms};
  if (reduced_pays(in)) return plan_reduced(in);
  if (direct_pays(in)) return plan_direct(in);
  if (dense_pays(in)) return plan_dense(in);
  const std::optional<SamplePass> sample = sample_pass_for(in);
  if (sample && resident_pays(in)) return plan_resident(in, *sample);
  return plan_scan(in, sample);
}

}  // namespace

Filtering filtering_of(const SearchShape& q, bool resident) {
  if (!q.filtered) return Filtering::None;
  return q.shared_predicate && resident ? Filtering::Mask : Filtering::PerQuery;
}

Plan plan_search(const SearchShape& q, const DeviceLimits& d) {
  Plan plan = choose_plan(q, d);
  plan.filtering = filtering_of(q, plan.as<ResidentPlan>() != nullptr);
  return plan;
}

std::string describe(const Plan& plan) {
  std::ostringstream out;
  auto sample = [&](const SamplePass& s) {
    out << " sample(step " << s.step << ", tiles " << s.tiles << ", per tile " << s.per_tile << ")";
  };
  if (const auto* scan = plan.as<ScanPlan>()) {
    const ScanShape& s = scan->shape;
    out << "scan(group " << s.query_group << ", warps " << s.warps_per_block << ", blocks " << s.blocks_per_group;
    if (s.global_lists) out << ", global lists";
    if (s.tiled) out << ", tiled";
    if (s.screen) out << ", screen";
    out << ")";
    if (scan->sample) sample(*scan->sample);
    if (scan->first_bound) out << " first-bound";
  } else if (const auto* dense = plan.as<DensePlan>()) {
    out << "dense(row stride " << dense->row_stride << ")";
  } else if (const auto* direct = plan.as<DirectPlan>()) {
    out << "direct(blocks " << direct->blocks << ")";
  } else if (const auto* resident = plan.as<ResidentPlan>()) {
    out << "resident(warps " << resident->warps << ", blocks " << resident->blocks << ")";
    sample(resident->sample);
  } else if (const auto* reduced = plan.as<ReducedPlan>()) {
    out << "reduced(group " << reduced->group << ", blocks " << reduced->blocks << ")";
  } else {
    out << (plan.as<SpatialPlan>()->bounded ? "spatial(bounded)" : "spatial");
  }
  out << " k " << plan.k << " chunk " << plan.chunk_queries << " lists " << plan.lists;
  return out.str();
}

}  // namespace streamknn::detail::gpu
