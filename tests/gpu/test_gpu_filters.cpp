// GPU suite (skips without a CUDA device): predicates and radius search on the CUDA backend against
// the CPU backend, answer for answer (ids and distance bits), on every metric and on the shapes
// that take each strategy a filtered search can take: small batches over small stores (direct),
// large batches (sample pass and scan), wide vectors (several chunks), k up to past what passes;
// predicates shared and per query, composed with IdRange, passing none, few or most points;
// attribute changes across publishes (both device buffers), growth, a reloaded checkpoint, votes
// among the points that pass; radius with and without caps, with predicates, ties at the radius on
// integer grids, the k nearest within a radius, more points within than one search returns, and
// votes within a radius. The CUDA kernels test predicates beside the id ranges; radius bounds go
// through its k-nearest search (Engine::filtered_by_search), its kernels starting from the radius.
#include <array>
#include <cstring>
#include <functional>
#include <limits>

#include "support/test_support.hpp"
#include "support/twin_stores.hpp"

using namespace test;

namespace {

constexpr std::size_t kWords = 2;

/// The same store on both backends (TwinStores), with attribute words.
struct Twin : TwinStores {
  Twin(std::size_t dim, Metric metric, SpatialIndex spatial = SpatialIndex::Off)
      : TwinStores(config(dim, metric, spatial)) {}
  static StoreConfig config(std::size_t dim, Metric metric, SpatialIndex spatial) {
    StoreConfig c;
    c.dim = dim;
    c.metric = metric;
    c.attribute_words = kWords;
    c.spatial_index = spatial;
    return c;
  }
};

/// Whether the CUDA backend answers predicates; where it does not, checks that it refuses them by name.
bool gpu_runs_filters(const ReferenceSet& gpu) {
  const Predicate any{};
  std::vector<float> query(gpu.config().dim, 0.5f);
  try {
    (void)gpu.search(query, 1, {}, std::span(&any, 1));
    return true;
  } catch (const BackendUnavailable& e) {
    const std::string msg = e.what();
    CHECK(msg.find("predicates") != std::string::npos);
    CHECK(msg.find("BackendKind::Cpu") != std::string::npos);
    MESSAGE("the CUDA backend refuses predicates (BackendUnavailable): their cases compare nothing");
    return false;
  }
}

void fill(Twin& t, Metric metric, std::size_t n, std::uint64_t salt) {
  auto g = rng(salt);
  const std::size_t dim = t.cpu.config().dim;
  const auto v = points_for(metric, g, n, dim);
  std::uniform_int_distribution<std::uint32_t> flags(0, 15), time(0, 999);
  for (std::size_t i = 0; i < n; ++i) {
    const std::array<std::uint32_t, kWords> a{flags(g), time(g)};
    t.push(Update::insert(PointId(5 * i + 1), std::span<const float>(v.data() + i * dim, dim)).with_attributes(a));
  }
  t.publish();
  // Erased slots, and attribute changes after a first publish (the other device buffer replays them).
  for (std::size_t i = 0; i < n; i += 13) t.push(Update::erase(PointId(5 * i + 1)));
  for (std::size_t i = 1; i < n; i += 7) {
    const std::array<std::uint32_t, kWords> a{flags(g), time(g)};
    t.push(Update::set_attributes(PointId(5 * i + 1), a));
  }
  t.publish();
  t.publish();
}

std::vector<Predicate> predicates_for(std::size_t nq, bool per_query) {
  if (!per_query) return {Predicate{}.require(0, 1).forbid(0, 8).within(1, 200, 999)};
  const Predicate menu[] = {Predicate{},
                            Predicate{}.require(0, 15),
                            Predicate{}.require(0, 1).forbid(0, 1),  // none pass
                            Predicate{}.within(1, 500, 500),          // about n / 1000 pass
                            Predicate{}.forbid(0, 6)};
  std::vector<Predicate> out(nq);
  for (std::size_t q = 0; q < nq; ++q) out[q] = menu[q % std::size(menu)];
  return out;
}

std::uint32_t exact_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void same_neighbors(const Neighbors& a, const Neighbors& b) {
  REQUIRE(a.ids.size() == b.ids.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.ids.size() && bad < 5; ++i) {
    if (a.ids[i] != b.ids[i] || exact_bits(a.distances[i]) != exact_bits(b.distances[i])) {
      ++bad;
      FAIL_CHECK("entry ", i, ": cpu id ", a.ids[i], " d ", a.distances[i], ", gpu id ", b.ids[i], " d ", b.distances[i]);
    }
  }
}

void same_radius(const RadiusNeighbors& a, const RadiusNeighbors& b) {
  REQUIRE(a.offsets == b.offsets);
  CHECK(a.ids == b.ids);
  CHECK(a.cap_hit == b.cap_hit);
  for (std::size_t i = 0; i < a.distances.size(); ++i) REQUIRE(exact_bits(a.distances[i]) == exact_bits(b.distances[i]));
}

struct Shape {
  std::size_t dim, n, nq, k;
  SpatialIndex spatial;
};

}  // namespace

TEST_CASE("GPU filters: predicates equal the CPU backend's on every metric and strategy") {
  const Shape shapes[] = {{2, 3000, 1, 16, SpatialIndex::Off},      {2, 60000, 1024, 16, SpatialIndex::Off},
                          {2, 60000, 64, 16, SpatialIndex::Always}, {16, 20000, 7, 64, SpatialIndex::Off},
                          {128, 8000, 300, 32, SpatialIndex::Off},  {784, 3000, 40, 100, SpatialIndex::Off},
                          {3, 500, 5, 600, SpatialIndex::Off}};
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    for (const Shape& s : shapes) {
      if (metric == Metric::Haversine && s.dim != 2) continue;
      CAPTURE(to_string(metric));
      CAPTURE(s.dim);
      CAPTURE(s.n);
      CAPTURE(s.nq);
      Twin t(s.dim, metric, s.spatial);
      if (!gpu_runs_filters(t.gpu)) return;
      fill(t, metric, s.n, 100 + s.dim + s.n);
      auto g = rng(200 + s.nq);
      const auto queries = points_for(metric, g, s.nq, s.dim);
      for (const bool per_query : {false, true}) {
        const auto where = predicates_for(s.nq, per_query);
        same_neighbors(t.cpu.search(queries, s.k, {}, where), t.gpu.search(queries, s.k, {}, where));
        std::vector<IdRange> ranges(s.nq);
        for (std::size_t q = 0; q < s.nq; q += 3) ranges[q] = {PointId(q * 11), PointId(q * 11 + 5 * s.n / 2)};
        same_neighbors(t.cpu.search(queries, s.k, ranges, where), t.gpu.search(queries, s.k, ranges, where));
      }
    }
  }
}

TEST_CASE("GPU filters: radius search equals the CPU backend's (caps, predicates, k nearest within)") {
  const Shape shapes[] = {{2, 5000, 1, 0, SpatialIndex::Off},
                          {2, 100000, 1024, 0, SpatialIndex::Off},
                          {2, 100000, 16, 0, SpatialIndex::Always},
                          {32, 20000, 50, 0, SpatialIndex::Off}};
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    for (const Shape& s : shapes) {
      if (metric == Metric::Haversine && s.dim != 2) continue;
      CAPTURE(to_string(metric));
      CAPTURE(s.dim);
      CAPTURE(s.nq);
      Twin t(s.dim, metric, s.spatial);
      const bool predicates = gpu_runs_filters(t.gpu);
      fill(t, metric, s.n, 300 + s.dim);
      auto g = rng(400 + s.nq);
      const auto queries = points_for(metric, g, s.nq, s.dim);
      // At most 100 points per query: the smallest 100th-neighbour distance of the batch.
      const Neighbors hundred = t.cpu.search(queries, 100);
      double r = std::numeric_limits<double>::infinity();
      for (std::size_t q = 0; q < s.nq; ++q) r = std::min(r, double(hundred.distances[q * 100 + 99]));
      same_radius(t.cpu.radius_search(queries, r), t.gpu.radius_search(queries, r));
      same_radius(t.cpu.radius_search(queries, r, 10), t.gpu.radius_search(queries, r, 10));
      same_neighbors(t.cpu.search_within(queries, 16, r), t.gpu.search_within(queries, 16, r));
      std::vector<IdRange> ranges(s.nq);
      for (std::size_t q = 0; q < s.nq; q += 2) ranges[q] = {PointId(q * 7), PointId(q * 7 + 5 * s.n / 3)};
      same_radius(t.cpu.radius_search(queries, r, kNoLimit, ranges), t.gpu.radius_search(queries, r, kNoLimit, ranges));
      if (!predicates) continue;
      const auto where = predicates_for(s.nq, true);
      same_radius(t.cpu.radius_search(queries, r, kNoLimit, {}, where), t.gpu.radius_search(queries, r, kNoLimit, {}, where));
      same_neighbors(t.cpu.search_within(queries, 16, r, {}, where), t.gpu.search_within(queries, 16, r, {}, where));
    }
  }
}

TEST_CASE("GPU filters: ties at the radius on an integer grid") {
  Twin t(2, Metric::L2);
  const bool predicates = gpu_runs_filters(t.gpu);
  PointId id = 0;
  for (int x = -20; x <= 20; ++x) {
    for (int y = -20; y <= 20; ++y) {
      const std::array<std::uint32_t, kWords> a{std::uint32_t((x + y) & 1), 0};
      t.push(Update::insert(id++, std::vector<float>{float(x), float(y)}).with_attributes(a));
    }
  }
  t.publish();
  const std::vector<float> q = {0.5f, 0.0f, 3, 4, -7, 1};
  for (const double r : {0.5, 5.0, std::sqrt(50.0), 10.0}) {
    same_radius(t.cpu.radius_search(q, r), t.gpu.radius_search(q, r));
    same_radius(t.cpu.radius_search(q, r, 7), t.gpu.radius_search(q, r, 7));
    if (!predicates) continue;
    const Predicate odd = Predicate{}.require(0, 1);
    same_radius(t.cpu.radius_search(q, r, 7, {}, std::span(&odd, 1)), t.gpu.radius_search(q, r, 7, {}, std::span(&odd, 1)));
  }
}

TEST_CASE("GPU filters: more points within than one search returns, and votes within a radius") {
  // A cluster of 12,000 points (each position twice for half of them) around the first query: its
  // id range is searched again in parts (more than kMaxK within), uncapped, capped above kMaxK,
  // and with a predicate; then a classifier and a regressor within radii, voted on the host over
  // the CUDA backend's rows, against the CPU backend's own predictions.
  for (const Metric metric : {Metric::L2, Metric::Haversine}) {
    CAPTURE(to_string(metric));
    Twin t(2, metric);
    auto g = rng(520);
    std::uniform_real_distribution<float> near(-0.01f, 0.01f), far(-1.0f, 1.0f);
    for (PointId i = 0; i < 15000; ++i) {
      const bool cluster = i < 12000;
      const std::vector<float> v = {cluster ? 45.0f + near(g) : 45.0f + 10 * far(g), cluster ? 7.0f + near(g) : 7.0f + 10 * far(g)};
      const std::array<std::uint32_t, kWords> a{std::uint32_t(i % 4), 0};
      t.push(Update::insert(3 * i + 1, v).with_attributes(a));
      if (cluster && i % 2 == 0) t.push(Update::insert(3 * i + 2, v).with_attributes(a));
    }
    t.publish();
    const std::vector<float> q = {45.0f, 7.0f, 46.0f, 8.0f};
    const double r = metric == Metric::Haversine ? 3000.0 : 0.03;
    REQUIRE(t.cpu.radius_search(q, r).count(0) > kMaxK);
    same_radius(t.cpu.radius_search(q, r), t.gpu.radius_search(q, r));
    same_radius(t.cpu.radius_search(q, r, 5000), t.gpu.radius_search(q, r, 5000));
    const Predicate odd = Predicate{}.require(0, 1);
    same_radius(t.cpu.radius_search(q, r, kNoLimit, {}, std::span(&odd, 1)),
                t.gpu.radius_search(q, r, kNoLimit, {}, std::span(&odd, 1)));
  }
  for (const bool classes : {true, false}) {
    CAPTURE(classes);
    auto g = rng(521);
    StoreConfig c = config_for(3, Metric::L2, classes ? TargetSpec::classes(3) : TargetSpec::outputs(2));
    c.backend = BackendKind::Cpu;
    ReferenceSet cpu(c);
    c.backend = BackendKind::Cuda;
    ReferenceSet gpu(c);
    const auto v = uniform(g, 20000 * 3);
    for (PointId i = 0; i < 20000; ++i) {
      const std::span<const float> row(v.data() + i * 3, 3);
      const Update u = classes ? Update::insert(i, row, std::int32_t(g() % 3)) : Update::insert(i, row, uniform(g, 2));
      cpu.push(u);
      gpu.push(u);
    }
    cpu.publish();
    gpu.publish();
    const auto queries = uniform(g, 300 * 3);
    for (const double r : {0.01, 0.1, 0.5}) {
      CAPTURE(r);
      if (classes) {
        const ClassPredictions a = KnnClassifier(cpu, 9, Weights::Distance).within(r).predict_proba(queries);
        const ClassPredictions b = KnnClassifier(gpu, 9, Weights::Distance).within(r).predict_proba(queries);
        CHECK(a.labels == b.labels);
        CHECK(a.probabilities == b.probabilities);
      } else {
        const RegressionPredictions a = KnnRegressor(cpu, 9, RegressionAggregate::Mean).within(r).predict(queries);
        const RegressionPredictions b = KnnRegressor(gpu, 9, RegressionAggregate::Mean).within(r).predict(queries);
        REQUIRE(a.values.size() == b.values.size());
        for (std::size_t i = 0; i < a.values.size(); ++i) {
          CHECK((a.values[i] == b.values[i] || (std::isnan(a.values[i]) && std::isnan(b.values[i]))));
        }
      }
    }
  }
}

TEST_CASE("GPU filters: votes among the points that pass, growth, and a reloaded checkpoint") {
  // Classification stores that grow from a small capacity (the attribute words are copied with the
  // vectors), a vote and probabilities among the points that pass, then the CPU store's checkpoint
  // loaded on the CUDA backend (its attributes reach the device with the load's batch).
  constexpr std::size_t dim = 8, n = 30000, nq = 200, k = 9;
  auto config = [](BackendKind kind) {
    StoreConfig c = TwinStores::on(Twin::config(dim, Metric::L2, SpatialIndex::Off), kind);
    c.target = TargetSpec::classes(5);
    c.capacity_hint = 64;
    return c;
  };
  ReferenceSet cpu(config(BackendKind::Cpu)), gpu(config(BackendKind::Cuda));
  auto g = rng(77);
  const auto v = points_for(Metric::L2, g, n, dim);
  std::uniform_int_distribution<std::uint32_t> flags(0, 15), time(0, 999);
  std::uniform_int_distribution<std::int32_t> label(0, 4);
  for (std::size_t i = 0; i < n; ++i) {
    const std::array<std::uint32_t, kWords> a{flags(g), time(g)};
    const Update u = Update::insert(PointId(i), std::span<const float>(v.data() + i * dim, dim), label(g)).with_attributes(a);
    while (!cpu.try_push(u)) cpu.publish();
    while (!gpu.try_push(u)) gpu.publish();
  }
  cpu.publish();
  gpu.publish();
  const auto queries = points_for(Metric::L2, g, nq, dim);
  for (const Predicate& p : predicates_for(5, true)) {
    const KnnClassifier a = KnnClassifier(cpu, k).where(p), b = KnnClassifier(gpu, k).where(p);
    const ClassPredictions pa = a.predict_proba(queries), pb = b.predict_proba(queries);
    CHECK(pa.labels == pb.labels);
    REQUIRE(pa.probabilities.size() == pb.probabilities.size());
    for (std::size_t i = 0; i < pa.probabilities.size(); ++i) REQUIRE(exact_bits(pa.probabilities[i]) == exact_bits(pb.probabilities[i]));
  }
  const auto where = predicates_for(nq, true);
  same_neighbors(cpu.search(queries, k, {}, where), gpu.search(queries, k, {}, where));
  const ReferenceSet loaded = ReferenceSet::load_bytes(cpu.save_bytes(), {.backend = BackendKind::Cuda});
  same_neighbors(cpu.search(queries, k, {}, where), loaded.search(queries, k, {}, where));
}

TEST_CASE("GPU filters: one predicate for a large batch over duplicates and ties (the mask)") {
  // One predicate for every query and no id ranges: the query-resident scan drops the points that
  // fail it as it stages them. Points on an integer grid, each three times (ties at every rank),
  // so the exact re-rank's certificate fails and its fallback runs under the same mask.
  for (const Metric metric : {Metric::L2, Metric::Cosine}) {
    CAPTURE(to_string(metric));
    Twin t(2, metric);
    PointId id = 0;
    for (int copy = 0; copy < 3; ++copy) {
      for (int x = -60; x <= 60; ++x) {
        for (int y = -60; y <= 60; ++y) {
          const std::array<std::uint32_t, kWords> a{std::uint32_t((x * 7 + y * 3 + copy) % 4), std::uint32_t(x + 60)};
          t.push(Update::insert(id++, std::vector<float>{float(x) + 0.25f, float(y)}).with_attributes(a));
        }
      }
    }
    t.publish();
    std::vector<float> queries;
    for (int i = 0; i < 512; ++i) {
      queries.push_back(float(i % 97 - 48));
      queries.push_back(float(i % 89 - 44) + 0.5f);
    }
    for (const Predicate& p : {Predicate{}.require(0, 1), Predicate{}.forbid(0, 3).within(1, 10, 100), Predicate{}}) {
      for (const std::size_t k : {1ul, 16ul, 100ul}) {
        CAPTURE(k);
        same_neighbors(t.cpu.search(queries, k, {}, std::span(&p, 1)), t.gpu.search(queries, k, {}, std::span(&p, 1)));
      }
    }
  }
}
