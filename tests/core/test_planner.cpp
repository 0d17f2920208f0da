// The CUDA backend's planner (lib/cuda/planner.hpp), on the host: golden plans for the benchmark
// shapes on four device descriptions (planner_devices.hpp), every plan's shared memory within
// its device's limits over random shapes, and the planner's other promises. Runs without a GPU:
// the planner is a pure function of the batch's shape and the device's limits.
//
// The sm_90 goldens are the choices of the planner as it was inside the backend (make_plan and
// its helpers, before it moved to planner.cpp) for the same limits: the move was checked against
// that code over 1,077,600 shapes on the five cards of planner_devices.hpp, every field of every
// plan equal. The stores are what the benchmarks build (bench/search.cpp: capacity_hint = N, so N
// slots rounded up to whole tiles).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>

#include "core/planner_devices.hpp"
#include "core/planner_goldens.hpp"
#include "cuda/planner.hpp"
#include "cuda/tuning.hpp"
#include "streamknn/error.hpp"
#include "support/test_support.hpp"

namespace {

using namespace planner_test;
using streamknn::Metric;

void check_goldens(const Card& card, const Golden* goldens, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const Golden& g = goldens[i];
    const SearchShape shape = shape_of(g.n, g.dim, g.metric, g.q, g.k);
    const Plan plan = plan_search(shape, limits_for(card, shape.stored_dim, shape.metric));
    INFO(card.name, ": ", g.shape, " K ", g.k, " Q ", g.q);
    CHECK(describe(plan) == g.plan);
  }
}

/// The shared memory a plan's kernels ask for, against the device's opt-in limit per block.
void check_shared(const Card& card, const SearchShape& shape, const Plan& plan) {
  if (const auto* scan = plan.as<ScanPlan>()) {
    CHECK(scan_shared_bytes(scan->shape, shape.k) <= card.optin);
    CHECK(scan->shape.query_group >= 1);
    CHECK(scan->shape.warps_per_block >= 1);
    // Where the kernel shares the SM with a second block: the budget of half the SM.
    if (!scan->shape.screen) {
      CHECK(scan_shared_bytes(scan->shape, shape.k) <=
            std::min<std::size_t>(card.optin, card.per_sm / 2 - streamknn::detail::gpu::tuning::kSharedReserve));
    }
  } else if (const auto* resident = plan.as<ResidentPlan>()) {
    CHECK(resident_shared_bytes(int(shape.width()), resident->warps) <= card.optin);
  } else if (const auto* dense = plan.as<DensePlan>()) {
    CHECK(dense_select_min_shared(shape.k, shape.chunks, dense->row_stride / kTile) <= card.optin);
  }
  if (const SamplePass* sample = plan.sample(); sample && shape.chunks > 1) {
    CHECK(sample_staged_bytes(shape.chunks) <= kSampleStagedMaxBytes);  // or the staged kernel is not taken
  }
}

/// What every plan promises its pipeline: a chunk of 1 to all the queries, its lists and stride.
void check_plan(const SearchShape& shape, const Plan& plan) {
  CHECK(plan.k == shape.k);
  CHECK(plan.chunk_queries >= 1);
  CHECK(plan.chunk_queries <= shape.queries);
  CHECK(plan.lists >= 1);
  if (plan.as<SpatialPlan>()) {
    CHECK(plan.stride == 0);
  } else {
    CHECK(plan.stride == plan.lists * shape.k);
  }
  if (const SamplePass* sample = plan.sample()) {
    CHECK(sample->step >= 1);
    CHECK(sample->tiles <= streamknn::detail::gpu::tuning::kMaxSampleTiles);
    CHECK(sample->per_tile >= 1);
    CHECK(sample->per_tile <= kTile);
  }
}

}  // namespace

TEST_CASE("planner: golden plans for the benchmark shapes, sm_90 (H100 / H200)") {
  check_goldens(kH100, kGoldenSm90, std::size(kGoldenSm90));
  // The H200 differs from the H100 only in L2, which no planner rule reads.
  check_goldens(kH200, kGoldenSm90, std::size(kGoldenSm90));
}

TEST_CASE("planner: golden plans for the benchmark shapes, sm_80 (A100)") {
  check_goldens(kA100, kGoldenSm80, std::size(kGoldenSm80));
}

TEST_CASE("planner: golden plans for the benchmark shapes, sm_86 (RTX 3090)") {
  check_goldens(kRtx3090, kGoldenSm86, std::size(kGoldenSm86));
}

TEST_CASE("planner: golden plans for the benchmark shapes, sm_89 (L40S)") {
  check_goldens(kL40S, kGoldenSm89, std::size(kGoldenSm89));
}

TEST_CASE("planner: every plan's shared memory fits its device, over random shapes") {
  auto rng = test::rng(0x504c414e);
  const Card* cards[] = {&kH100, &kA100, &kRtx3090, &kL40S};
  const Metric metrics[] = {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine};
  int planned = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    const Card& card = *cards[i % 4];
    const std::uint32_t n = std::uint32_t(1 + rng() % (rng() % 2 ? 200'000 : 12'000'000));
    const std::size_t dim = 1 + rng() % (rng() % 2 ? 8 : 1'200);
    const Metric metric = metrics[rng() % 4];
    const std::uint32_t q = std::uint32_t(1 + rng() % (rng() % 2 ? 40 : 40'000));
    const std::uint32_t k = std::uint32_t(1 + rng() % (rng() % 2 ? 140 : 1'024));
    const SearchShape shape = shape_of(n, dim, metric, q, k, rng() % 4 == 0);
    INFO(card.name, ": N ", n, " dim ", dim, " metric ", int(metric), " Q ", q, " K ", k, " filtered ", shape.filtered);
    try {
      const Plan plan = plan_search(shape, limits_for(card, shape.stored_dim, metric));
      check_shared(card, shape, plan);
      check_plan(shape, plan);
      ++planned;
    } catch (const streamknn::InvalidArgument&) {
      ++refused;  // no scan shape fits: the backend reports it
    }
  }
  CHECK(planned > 3900);
  MESSAGE(planned, " plans, ", refused, " shapes refused");
}

TEST_CASE("planner: the spatial plan where the schedule wants the index") {
  SearchShape shape = shape_of(1'000'000, 2, Metric::L2, 100'000, 16);
  shape.spatial = true;
  const Plan plan = plan_search(shape, limits_for(kH100, shape.stored_dim, shape.metric));
  REQUIRE(plan.as<SpatialPlan>() != nullptr);
  CHECK(plan.chunk_queries == streamknn::detail::gpu::tuning::kSpatialChunkQueries);
  CHECK(plan.stride == 0);
  CHECK(plan.sample() == nullptr);
  CHECK(describe(plan) == "spatial k 16 chunk 65536 lists 1");
  // A batch whose ranks are bounded (a radius's rank limit) takes the walk that starts from it.
  shape.rank_limited = true;
  const Plan bounded = plan_search(shape, limits_for(kH100, shape.stored_dim, shape.metric));
  REQUIRE(bounded.as<SpatialPlan>() != nullptr);
  CHECK(bounded.as<SpatialPlan>()->bounded);
  CHECK(describe(bounded) == "spatial(bounded) k 16 chunk 65536 lists 1");
}

TEST_CASE("planner: a pure function (the same inputs give the same plan)") {
  const SearchShape shape = shape_of(1'275'219, 128, Metric::L2, 32, 64);
  const DeviceLimits limits = limits_for(kA100, shape.stored_dim, shape.metric);
  const std::string first = describe(plan_search(shape, limits));
  for (int i = 0; i < 3; ++i) CHECK(describe(plan_search(shape, limits)) == first);
}

TEST_CASE("planner: a shape no scan block fits is refused with InvalidArgument") {
  // 4,096 neighbours of 16,384-dimensional queries: one query and one warp's list exceed half the
  // SM of an sm_86 device.
  const SearchShape shape = shape_of(100'000, 16'384, Metric::InnerProduct, 1, 4'096);
  CHECK_THROWS_AS(plan_search(shape, limits_for(kRtx3090, shape.stored_dim, shape.metric)), streamknn::InvalidArgument);
}

// The dense product's shares (kernels/dense.hpp) for the stores and SM counts the dense screen
// runs on, at compile time as well.
static_assert(shares_cover(70'000, 3, 132) && shares_cover(70'000, 4, 132) && shares_cover(70'000, 4, 114));
static_assert(shares_cover(20'000, 3, 132) && shares_cover(19'200, 4, 132) && shares_cover(3'000, 4, 132));
static_assert(shares_cover(1, 4, 132) && shares_cover(32, 3, 1) && shares_cover(1'000'000, 4, 132));

TEST_CASE("planner: the dense product's shares cover the stores' groups on every device described") {
  for (const Card* card : {&kH100, &kA100, &kRtx3090, &kL40S}) {
    INFO(card->name);
    for (const std::uint32_t slots : {1u, 32u, 3'000u, 19'200u, 20'000u, 70'000u, 100'000u, 1'000'000u}) {
      CHECK(shares_cover(slots, 3, card->sms));
      CHECK(shares_cover(slots, 4, card->sms));
    }
  }
}

// ---- the reduced-precision screen ---------------------------------------------------------------

namespace {

/// A shape over a store that keeps the float16 copy, and a device whose screen fits 4 blocks per
/// SM for groups of up to four queries and 2 for eight.
SearchShape reduced_shape(std::uint32_t capacity, std::size_t dim, Metric metric, std::uint32_t queries, std::uint32_t k,
                          bool always = false) {
  SearchShape shape = shape_of(capacity, dim, metric, queries, k);
  shape.reduced = true;
  shape.reduced_always = always;
  return shape;
}

DeviceLimits reduced_limits(const Card& card, const SearchShape& shape) {
  DeviceLimits d = limits_for(card, shape.stored_dim, shape.metric);
  d.reduced_blocks_per_sm = [](std::uint32_t group, std::uint32_t) { return group <= 4 ? 4 : 2; };
  return d;
}

}  // namespace

TEST_CASE("planner: the reduced screen takes small batches over large stores under Auto") {
  using streamknn::detail::gpu::tuning::kReducedAutoMaxQueries;
  using streamknn::detail::gpu::tuning::kReducedAutoWideMaxQueries;
  using streamknn::detail::gpu::tuning::kReducedExtraSlack;
  for (const Card* card : {&kH200, &kA100, &kL40S}) {
    INFO(card->name);
    for (std::uint32_t q = 1; q <= kReducedAutoWideMaxQueries; ++q) {  // 300 dims: a wide store
      const SearchShape shape = reduced_shape(3'000'000, 300, Metric::L2, q, 72);
      const Plan plan = plan_search(shape, reduced_limits(*card, shape));
      const auto* reduced = plan.as<ReducedPlan>();
      REQUIRE(reduced != nullptr);
      CHECK(plan.k == shape.k + kReducedExtraSlack);
      CHECK(plan.lists == reduced->blocks);
      CHECK(plan.stride == plan.lists * plan.k);
      CHECK(plan.chunk_queries == q);
      CHECK(reduced->group == reduced_group(q));
      CHECK(reduced->group >= q);
      CHECK(reduced->blocks == (q <= 4 ? 4 : 2) * card->sms);
    }
    // Larger batches, small stores, id ranges and screens wider than its lists keep the others.
    const DeviceLimits d = reduced_limits(*card, reduced_shape(3'000'000, 300, Metric::L2, 1, 72));
    CHECK(plan_search(reduced_shape(3'000'000, 300, Metric::L2, kReducedAutoWideMaxQueries + 1, 72), d).as<ReducedPlan>() == nullptr);
    // 124 dims: batches up to kReducedAutoMaxQueries.
    const SearchShape narrow = reduced_shape(1'275'219, 124, Metric::L2, kReducedAutoMaxQueries, 72);
    CHECK(plan_search(narrow, reduced_limits(*card, narrow)).as<ReducedPlan>() != nullptr);
    const SearchShape narrow_more = reduced_shape(1'275'219, 124, Metric::L2, kReducedAutoMaxQueries + 1, 72);
    CHECK(plan_search(narrow_more, reduced_limits(*card, narrow_more)).as<ReducedPlan>() == nullptr);
    CHECK(plan_search(reduced_shape(10'000, 300, Metric::L2, 1, 72), d).as<ReducedPlan>() == nullptr);
    CHECK(plan_search(reduced_shape(3'000'000, 300, Metric::L2, 1, 256), d).as<ReducedPlan>() == nullptr);
    SearchShape filtered = reduced_shape(3'000'000, 300, Metric::L2, 1, 72);
    filtered.filtered = true;
    CHECK(plan_search(filtered, d).as<ReducedPlan>() == nullptr);
    // A store without the copy never takes it.
    const SearchShape without = shape_of(3'000'000, 300, Metric::L2, 1, 72);
    CHECK(plan_search(without, reduced_limits(*card, without)).as<ReducedPlan>() == nullptr);
  }
}

TEST_CASE("planner: under Auto either copy takes batches of eight from 128 dimensions") {
  using streamknn::detail::gpu::tuning::kReducedAutoMaxQueries;
  using streamknn::detail::gpu::tuning::kReducedAutoWideChunks;
  using streamknn::detail::gpu::tuning::kReducedAutoWideMaxQueries;
  static_assert(4 * kReducedAutoWideChunks == 128);
  for (const bool int8 : {false, true}) {
    const auto shape_at = [int8](std::size_t dim, std::uint32_t queries) {
      SearchShape shape = reduced_shape(1'275'219, dim, Metric::L2, queries, 72);
      shape.reduced_int8 = int8;
      return shape;
    };
    for (std::uint32_t q = 1; q <= kReducedAutoWideMaxQueries + 1; ++q) {
      CAPTURE(int8);
      CAPTURE(q);
      const SearchShape at_128 = shape_at(4 * kReducedAutoWideChunks, q);
      CHECK((plan_search(at_128, reduced_limits(kH200, at_128)).as<ReducedPlan>() != nullptr) ==
            (q <= kReducedAutoWideMaxQueries));
      // Narrower stores keep batches of up to four.
      const SearchShape narrower = shape_at(4 * kReducedAutoWideChunks - 4, q);
      CHECK((plan_search(narrower, reduced_limits(kH200, narrower)).as<ReducedPlan>() != nullptr) ==
            (q <= kReducedAutoMaxQueries));
    }
  }
}

TEST_CASE("planner: under Always the reduced screen takes every batch it can, in chunks of 8") {
  for (std::uint32_t q : {1u, 9u, 16u, 17u, 1000u}) {
    for (std::uint32_t capacity : {32u, 10'016u, 3'000'000u}) {
      const SearchShape shape = reduced_shape(capacity, 40, Metric::InnerProduct, q, 40, true);
      const Plan plan = plan_search(shape, reduced_limits(kH200, shape));
      REQUIRE(plan.as<ReducedPlan>() != nullptr);
      CHECK(plan.chunk_queries == std::min(q, kReducedMaxQueries));
      CHECK(plan.lists >= 1);
      const std::uint32_t segment = reduced_segment(plan.as<ReducedPlan>()->group);
      CHECK(plan.lists <= std::max<std::uint32_t>(1, (capacity + segment - 1) / segment));
    }
  }
}

TEST_CASE("planner: the int8 copy's screen keeps about twice the float32 screen's width, up to k = 128") {
  using streamknn::detail::gpu::tuning::kReducedInt8MinSlack;
  // The shape's k is the float32 screen's width (k + 8).
  for (std::uint32_t k : {1u, 8u, 24u, 40u, 72u, 100u, 128u, 136u, 137u, 200u}) {
    CAPTURE(k);
    SearchShape shape = reduced_shape(3'000'000, 300, Metric::L2, 1, k);
    shape.reduced_int8 = true;
    const Plan plan = plan_search(shape, reduced_limits(kH200, shape));
    if (k > 136) {  // k > 128: the float32 screen
      CHECK(plan.as<ReducedPlan>() == nullptr);
      continue;
    }
    REQUIRE(plan.as<ReducedPlan>() != nullptr);
    CHECK(plan.k == std::min(kReducedMaxWidth, std::max(2 * k, k + kReducedInt8MinSlack)));
    CHECK(plan.stride == plan.lists * plan.k);
  }
}

TEST_CASE("planner: the reduced screen steps aside where its block does not fit the device") {
  const SearchShape shape = reduced_shape(3'000'000, 300, Metric::L2, 1, 72, true);
  DeviceLimits d = reduced_limits(kRtx3090, shape);
  d.reduced_blocks_per_sm = [](std::uint32_t, std::uint32_t) { return 0; };
  CHECK(plan_search(shape, d).as<ReducedPlan>() == nullptr);
  d.reduced_blocks_per_sm = nullptr;  // a store without the copy
  CHECK(plan_search(shape, d).as<ReducedPlan>() == nullptr);
}

TEST_CASE("planner: filtered batches, and one predicate for a resident batch as a mask") {
  // 1,000,000 haversine points, K = 16 (a screen of 24): one query takes the direct search, 64
  // and 1,024 the query-resident scan, filtered or not; a filtered resident grid is sized by its
  // own variant's occupancy.
  const Card& card = kH100;
  for (const bool filtered : {false, true}) {
    for (const bool shared : {false, true}) {
      for (const std::uint32_t q : {1u, 64u, 1024u}) {
        CAPTURE(filtered);
        CAPTURE(shared);
        CAPTURE(q);
        SearchShape shape = shape_of(1'000'000, 2, Metric::Haversine, q, 24, filtered);
        shape.shared_predicate = filtered && shared;
        const DeviceLimits limits = limits_for(card, shape.stored_dim, shape.metric);
        const Plan plan = plan_search(shape, limits);
        const auto* resident = plan.as<ResidentPlan>();
        CHECK((q == 1 ? plan.as<DirectPlan>() != nullptr : resident != nullptr));
        const Filtering want = !filtered ? Filtering::None
                               : shared && resident ? Filtering::Mask
                                                    : Filtering::PerQuery;
        CHECK(plan.filtering == want);
        if (resident != nullptr) {
          const std::uint32_t rows = (q + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock;
          CHECK(resident->blocks * rows <= limits.resident_blocks(resident->warps, want) * card.sms);
        }
      }
    }
  }
}
