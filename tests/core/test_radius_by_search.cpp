// Radius bounds on a backend without native support (Engine::filtered_by_search: its k-nearest
// search grown until each row holds what it needs, "within" decided exactly on the host; the
// backend's search tests id ranges and predicates) against the CPU backend's native radius
// search, on the CPU backend itself: every metric, caps, ranges, predicates that pass few points,
// the k nearest within a radius, and rows that need more than one search returns.
#include <cmath>
#include <limits>

#include "core/engine_access.hpp"
#include "core/metric_space.hpp"
#include "support/test_support.hpp"

using namespace test;
using streamknn::detail::Engine;
using streamknn::detail::EngineAccess;
using streamknn::detail::QueryRequest;

namespace {

QueryRequest radius_request(const ReferenceSet& set, const std::vector<float>& queries, double radius, bool all,
                            std::size_t k, std::size_t cap, const std::vector<IdRange>& visible = {},
                            const std::vector<Predicate>& where = {}) {
  const StoreConfig& c = set.config();
  const std::size_t sdim = streamknn::detail::stored_dim(c.metric, c.dim), nq = queries.size() / c.dim;
  QueryRequest r;
  r.num_queries = nq;
  r.k = k;
  r.converted.resize(nq * sdim);
  for (std::size_t q = 0; q < nq; ++q) {
    streamknn::detail::to_stored_form(c.metric, std::span<const float>(queries.data() + q * c.dim, c.dim),
                                      r.converted.data() + q * sdim);
  }
  r.queries = r.converted;
  r.visible = visible;
  r.where = where;
  if (std::isnan(radius)) return r;  // no radius: the k nearest that pass
  r.radius.active = true;
  r.radius.all = all;
  r.radius.cap = cap;
  r.radius.radius = radius;
  streamknn::detail::radius_limit(c.metric, radius, r.radius.limit_hi, r.radius.limit_lo);
  return r;
}

ReferenceSet random_set(Metric metric, std::size_t dim, std::size_t n, std::uint64_t salt) {
  auto g = rng(salt);
  StoreConfig c = config_for(dim, metric);
  c.backend = BackendKind::Cpu;
  c.cpu_threads = 2;
  c.attribute_words = 1;
  ReferenceSet set(c);
  const auto v = points_for(metric, g, n, dim);
  std::uniform_int_distribution<std::uint32_t> flags(0, 31);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t word[1] = {flags(g)};
    set.push(Update::insert(2 * i + 3, std::span<const float>(v.data() + i * dim, dim)).with_attributes(word));
  }
  set.publish();
  for (std::size_t i = 0; i < n; i += 11) set.erase(2 * i + 3);
  set.publish();
  return set;
}

void same(const RadiusNeighbors& a, const RadiusNeighbors& b) {
  REQUIRE(a.offsets == b.offsets);
  CHECK(a.ids == b.ids);
  CHECK(a.distances == b.distances);
  CHECK(a.cap_hit == b.cap_hit);
}

}  // namespace

TEST_CASE("radius by search: the same answers as the CPU backend's radius search") {
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    CAPTURE(to_string(metric));
    const std::size_t dim = metric == Metric::Haversine ? 2 : 3;
    const ReferenceSet set = random_set(metric, dim, 3000, 7 + std::size_t(metric));
    const Engine& engine = EngineAccess::of(set);
    auto g = rng(17);
    const auto queries = points_for(metric, g, 6, dim);
    // Radii for a few, about 200 (k grows from 128) and about 600 points per query.
    const std::vector<double> radii = metric == Metric::Haversine ? std::vector<double>{3e5, 1.6e6, 2.8e6}
                                      : metric == Metric::L2      ? std::vector<double>{0.1, 0.35, 0.55}
                                      : metric == Metric::Cosine  ? std::vector<double>{0.01, 0.05, 0.1}
                                                                  : std::vector<double>{-0.8, -0.5, 0.0};
    for (const double r : radii) {
      CAPTURE(r);
      same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, kNoLimit), "test").radius,
           set.radius_search(queries, r));
      same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, 40), "test").radius,
           set.radius_search(queries, r, 40));
      std::vector<IdRange> ranges(6);
      ranges[1] = {100, 3000};
      same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, kNoLimit, ranges), "test").radius,
           set.radius_search(queries, r, kNoLimit, ranges));
      const Neighbors within = engine.filtered_by_search(radius_request(set, queries, r, false, 20, kNoLimit), "test").neighbors;
      const Neighbors want = set.search_within(queries, 20, r);
      CHECK(within.ids == want.ids);
      CHECK(within.distances == want.distances);
    }
  }
}

TEST_CASE("radius by search: every point within, more than a row returns, and the nearest cap") {
  const ReferenceSet set = random_set(Metric::L2, 2, 6000, 3);
  const Engine& engine = EngineAccess::of(set);
  const std::vector<float> q = {0, 0};
  same(engine.filtered_by_search(radius_request(set, q, 10.0, true, 0, kNoLimit), "test").radius, set.radius_search(q, 10.0));
  same(engine.filtered_by_search(radius_request(set, q, 10.0, true, 0, 100), "test").radius, set.radius_search(q, 10.0, 100));
}

TEST_CASE("filtered by search: predicates, alone and with a radius, as the CPU backend answers them") {
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    CAPTURE(to_string(metric));
    const std::size_t dim = metric == Metric::Haversine ? 2 : 3;
    const ReferenceSet set = random_set(metric, dim, 4000, 70 + std::size_t(metric));
    const Engine& engine = EngineAccess::of(set);
    auto g = rng(71);
    const auto queries = points_for(metric, g, 5, dim);
    // About 1/2, 1/8 and 1/32 of the points pass (k' grows from 64 for the last).
    const std::vector<Predicate> each = {Predicate{}.require(0, 1), Predicate{}.require(0, 7),
                                         Predicate{}.require(0, 31), Predicate{}.forbid(0, 31).require(0, 1),
                                         Predicate{}.within(0, 3, 4)};
    for (const std::size_t k : {1ul, 10ul, 40ul}) {
      const Neighbors got =
          engine.filtered_by_search(radius_request(set, queries, std::nan(""), false, k, kNoLimit, {}, each), "test")
              .neighbors;
      const Neighbors want = set.search(queries, k, {}, each);
      CHECK(got.ids == want.ids);
      CHECK(got.distances == want.distances);
    }
    const Neighbors big = engine.filtered_by_search(
        radius_request(set, queries, std::nan(""), false, 300, kNoLimit, {}, {Predicate{}.require(0, 3)}), "test").neighbors;
    CHECK(big.ids == set.search(queries, 300, {}, std::vector<Predicate>{Predicate{}.require(0, 3)}).ids);
    const Neighbors n100 = set.search(queries, 100);
    double r = std::numeric_limits<double>::infinity();
    for (std::size_t q = 0; q < 5; ++q) r = std::min(r, double(n100.distances[q * 100 + 99]));
    same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, kNoLimit, {}, each), "test").radius,
         set.radius_search(queries, r, kNoLimit, {}, each));
    same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, 3, {}, each), "test").radius,
         set.radius_search(queries, r, 3, {}, each));
    const Neighbors within =
        engine.filtered_by_search(radius_request(set, queries, r, false, 8, kNoLimit, {}, each), "test").neighbors;
    CHECK(within.ids == set.search_within(queries, 8, r, {}, each).ids);
  }
}

TEST_CASE("filtered by search: a predicate that few points pass, with and without a radius") {
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    CAPTURE(to_string(metric));
    const std::size_t dim = metric == Metric::Haversine ? 2 : 3;
    auto g = rng(72);
    StoreConfig c = config_for(dim, metric);
    c.backend = BackendKind::Cpu;
    c.attribute_words = 1;
    ReferenceSet set(c);
    // 9,000 points, 12 of them flagged: most queries find none of them among their 4,096 nearest.
    const auto v = points_for(metric, g, 9000, dim);
    for (std::size_t i = 0; i < 9000; ++i) {
      const std::uint32_t word[1] = {i % 750 == 7 ? 1u : 0u};
      set.push(Update::insert(5 * i + 1, std::span<const float>(v.data() + i * dim, dim)).with_attributes(word));
    }
    set.publish();
    const Engine& engine = EngineAccess::of(set);
    const auto queries = points_for(metric, g, 4, dim);
    const std::vector<Predicate> flagged = {Predicate{}.require(0, 1)};
    for (const std::size_t k : {1ul, 5ul, 12ul, 20ul}) {
      CAPTURE(k);
      const Neighbors got =
          engine.filtered_by_search(radius_request(set, queries, std::nan(""), false, k, kNoLimit, {}, flagged), "test")
              .neighbors;
      const Neighbors want = set.search(queries, k, {}, flagged);
      CHECK(got.ids == want.ids);
      CHECK(got.distances == want.distances);
    }
    // With id ranges, and as the k nearest within a radius.
    const std::vector<IdRange> ranges(4, IdRange{0, 20'000});
    const Neighbors ranged = engine.filtered_by_search(
        radius_request(set, queries, std::nan(""), false, 5, kNoLimit, ranges, flagged), "test").neighbors;
    CHECK(ranged.ids == set.search(queries, 5, ranges, flagged).ids);
    const Neighbors all = set.search(queries, 20, {}, flagged);
    const double r = all.distances[10];
    const Neighbors within =
        engine.filtered_by_search(radius_request(set, queries, r, false, 20, kNoLimit, {}, flagged), "test").neighbors;
    CHECK(within.ids == set.search_within(queries, 20, r, {}, flagged).ids);
    CHECK(within.distances == set.search_within(queries, 20, r, {}, flagged).distances);
  }
}

TEST_CASE("radius by search: votes and averages within a radius equal the CPU backend's") {
  // A prediction with a radius on a backend that does not test radii: the rows of the k nearest
  // within, then the votes or averages on the host (aggregated in engine_radius.cpp), against the
  // CPU backend's own (KnnClassifier / KnnRegressor::within), including rows with no point within.
  for (const bool classes : {true, false}) {
    CAPTURE(classes);
    auto g = rng(31 + std::uint64_t(classes));
    StoreConfig c = config_for(3, Metric::L2, classes ? TargetSpec::classes(4) : TargetSpec::outputs(2));
    c.backend = BackendKind::Cpu;
    ReferenceSet set(c);
    const auto v = points_for(Metric::L2, g, 2000, 3);
    std::uniform_int_distribution<std::int32_t> label(0, 3);
    for (std::size_t i = 0; i < 2000; ++i) {
      const std::span<const float> row(v.data() + i * 3, 3);
      set.push(classes ? Update::insert(PointId(i), row, label(g)) : Update::insert(PointId(i), row, uniform(g, 2)));
    }
    set.publish();
    const Engine& engine = EngineAccess::of(set);
    const auto queries = points_for(Metric::L2, g, 20, 3);
    for (const double r : {0.02, 0.3, 10.0}) {
      for (const std::size_t k : {1ul, 7ul}) {
        CAPTURE(r);
        CAPTURE(k);
        QueryRequest request = radius_request(set, queries, r, false, k, kNoLimit);
        if (classes) {
          request.aggregate.output = streamknn::detail::AggregateSpec::Output::Probabilities;
          request.aggregate.weights = Weights::Distance;
          const ClassPredictions got = engine.filtered_by_search(request, "test").classes;
          const ClassPredictions want = KnnClassifier(set, k, Weights::Distance).within(r).predict_proba(queries);
          CHECK(got.labels == want.labels);
          CHECK(got.probabilities == want.probabilities);
          CHECK(got.epoch == want.epoch);
        } else {
          request.aggregate.output = streamknn::detail::AggregateSpec::Output::Values;
          request.aggregate.regression = RegressionAggregate::Median;
          const RegressionPredictions got = engine.filtered_by_search(request, "test").regression;
          const RegressionPredictions want = KnnRegressor(set, k, RegressionAggregate::Median).within(r).predict(queries);
          REQUIRE(got.values.size() == want.values.size());
          for (std::size_t i = 0; i < got.values.size(); ++i) {
            CHECK((got.values[i] == want.values[i] || (std::isnan(got.values[i]) && std::isnan(want.values[i]))));
          }
        }
      }
    }
  }
}

TEST_CASE("radius by search: more points within than one search returns, by parts of the ids") {
  // 9,000 points in a small cluster, half of them twice (ties), and a predicate that half pass: a
  // query at its centre has more than kMaxK points within, so the engine searches its ids in parts
  // (split at the median id) and orders the parts exactly. Uncapped, capped above kMaxK, with id
  // ranges and the predicate.
  auto g = rng(41);
  StoreConfig c = config_for(2, Metric::L2);
  c.backend = BackendKind::Cpu;
  c.attribute_words = 1;
  ReferenceSet set(c);
  std::uniform_real_distribution<float> near(-0.01f, 0.01f), far(-1.0f, 1.0f);
  for (PointId i = 0; i < 12000; ++i) {
    const bool cluster = i < 9000;
    const float x = cluster ? near(g) : far(g), y = cluster ? near(g) : far(g);
    const std::uint32_t word[1] = {std::uint32_t(i % 10)};
    const float v[2] = {x, y};
    set.push(Update::insert(7 * i + 5, v).with_attributes(word));
    if (cluster && i % 2 == 0) set.push(Update::insert(7 * i + 6, v).with_attributes(word));  // a tie
  }
  set.publish();
  const Engine& engine = EngineAccess::of(set);
  const std::vector<float> queries = {0.0f, 0.0f, 0.5f, 0.5f, 0.001f, -0.002f};
  const double r = 0.02;
  same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, kNoLimit), "test").radius,
       set.radius_search(queries, r));
  same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, 6000), "test").radius,
       set.radius_search(queries, r, 6000));
  const std::vector<IdRange> ranges = {{1000, 60000}, {}, {0, 50000}};
  const std::vector<Predicate> where = {Predicate{}.forbid(0, 1)};  // word 0 is i % 10: the odd ones fail
  same(engine.filtered_by_search(radius_request(set, queries, r, true, 0, kNoLimit, ranges, where), "test").radius,
       set.radius_search(queries, r, kNoLimit, ranges, where));
  CHECK(set.radius_search(queries, r).count(0) > kMaxK);
}
