// The radius search of a backend without native radius bounds (Engine::radius_by_search: its
// k-nearest search grown until each row ends past the radius, "within" decided exactly on the
// host) against the CPU backend's native radius search, on the CPU backend itself: every metric,
// caps, ranges, rows that need k to grow, the k nearest within a radius, and more points within
// than one row returns.
#include "core/engine_access.hpp"
#include "core/metric_space.hpp"
#include "support/test_support.hpp"

using namespace test;
using streamknn::detail::Engine;
using streamknn::detail::EngineAccess;
using streamknn::detail::QueryRequest;

namespace {

QueryRequest radius_request(const ReferenceSet& set, const std::vector<float>& queries, double radius, bool all,
                            std::size_t k, std::size_t cap, const std::vector<IdRange>& visible = {}) {
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
  r.radius.active = true;
  r.radius.all = all;
  r.radius.cap = cap;
  streamknn::detail::radius_limit(c.metric, radius, r.radius.limit_hi, r.radius.limit_lo);
  return r;
}

ReferenceSet random_set(Metric metric, std::size_t dim, std::size_t n, std::uint64_t salt) {
  auto g = rng(salt);
  StoreConfig c = config_for(dim, metric);
  c.backend = BackendKind::Cpu;
  c.cpu_threads = 2;
  ReferenceSet set(c);
  const auto v = points_for(metric, g, n, dim);
  for (std::size_t i = 0; i < n; ++i) set.push(Update::insert(2 * i + 3, std::span<const float>(v.data() + i * dim, dim)));
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
      same(engine.radius_by_search(radius_request(set, queries, r, true, 0, kNoLimit), "test").radius,
           set.radius_search(queries, r));
      same(engine.radius_by_search(radius_request(set, queries, r, true, 0, 40), "test").radius,
           set.radius_search(queries, r, 40));
      std::vector<IdRange> ranges(6);
      ranges[1] = {100, 3000};
      same(engine.radius_by_search(radius_request(set, queries, r, true, 0, kNoLimit, ranges), "test").radius,
           set.radius_search(queries, r, kNoLimit, ranges));
      const Neighbors within = engine.radius_by_search(radius_request(set, queries, r, false, 20, kNoLimit), "test").neighbors;
      const Neighbors want = set.search_within(queries, 20, r);
      CHECK(within.ids == want.ids);
      CHECK(within.distances == want.distances);
    }
  }
}

TEST_CASE("radius by search: more points within than a row returns is refused by name") {
  const ReferenceSet set = random_set(Metric::L2, 2, 6000, 3);
  const Engine& engine = EngineAccess::of(set);
  const std::vector<float> q = {0, 0};
  const std::string msg = message_of<BackendUnavailable>(
      [&] { (void)engine.radius_by_search(radius_request(set, q, 10.0, true, 0, kNoLimit), "test"); });
  CHECK(msg.find("give max_results") != std::string::npos);
  // With a cap it answers: the nearest cap, flagged.
  same(engine.radius_by_search(radius_request(set, q, 10.0, true, 0, 100), "test").radius, set.radius_search(q, 10.0, 100));
}
