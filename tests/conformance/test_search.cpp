// Exact search against a naive double-precision reference: many shapes, every metric, erased
// slots, exact ties, k larger than the store, per-query visibility ranges, poisoned outputs.
#include <bit>

#include "support/test_support.hpp"

using namespace test;

namespace {

struct Shape {
  std::size_t dim, points, queries, k;
};

/// Builds a store of `points` random points with some erased, returns the model.
Model fill(ReferenceSet& store, Metric metric, std::size_t points, std::mt19937_64& g, double erase_fraction = 0.1) {
  Model model;
  model.dim = store.config().dim;
  const auto data = points_for(metric, g, points, model.dim);
  std::uniform_int_distribution<PointId> id_gap(1, 5);
  PointId id = std::uniform_int_distribution<PointId>(0, 1000)(g);
  for (std::size_t i = 0; i < points; ++i, id += id_gap(g)) {
    std::vector<float> v(data.begin() + i * model.dim, data.begin() + (i + 1) * model.dim);
    // A single thread must publish when the queue is full: push() would wait for a publisher.
    while (!store.try_push(Update::insert(id, v))) store.publish();
    model.vectors[id] = std::move(v);
  }
  store.publish();
  std::bernoulli_distribution erase(erase_fraction);
  std::vector<PointId> erased;
  for (const auto& [pid, v] : model.vectors) {
    if (erase(g)) erased.push_back(pid);
  }
  for (PointId pid : erased) {
    while (!store.try_push(Update::erase(pid))) store.publish();
    model.vectors.erase(pid);
  }
  store.publish();
  return model;
}

void check_search(const ReferenceSet& store, const Model& model, Metric metric, const std::vector<float>& queries,
                  std::size_t k, const std::vector<IdRange>& visible = {}) {
  const std::size_t dim = model.dim, nq = queries.size() / dim;
  const Neighbors got = store.search(queries, k, visible);
  REQUIRE(got.num_queries == nq);
  REQUIRE(got.k == k);
  REQUIRE(got.ids.size() == nq * k);
  CHECK(got.epoch == store.epoch());
  std::size_t bad = 0;
  for (std::size_t q = 0; q < nq && bad < 3; ++q) {
    const std::span<const float> qv(queries.data() + q * dim, dim);
    const IdRange range = visible.empty() ? IdRange{} : visible[q];
    const auto ref = ref_knn(model, metric, qv, k, range);
    if (!matches_reference(model, metric, qv, got.ids_of(q), got.distances_of(q), ref, range)) {
      ++bad;
      MESSAGE("query ", q, " of ", nq, " (dim ", dim, ", k ", k, ", ", model.vectors.size(), " points, metric ",
              to_string(metric), ")");
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("search matches the naive reference over many shapes (L2)") {
  const Shape shapes[] = {
      {1, 0, 3, 1},      {1, 1, 2, 1},      {1, 500, 7, 16},   {2, 2000, 33, 16},  {3, 1500, 5, 64},
      {7, 3000, 17, 5},  {64, 4000, 9, 64}, {128, 5000, 4, 16}, {784, 1500, 3, 64}, {1024, 1200, 2, 16},
      {2, 10, 4, 64},    {16, 100, 5, 1024}, {128, 3000, 1, 1024}, {5, 50, 4096, 3},
  };
  std::size_t salt = 1;
  for (const Shape& s : shapes) {
    CAPTURE(s.dim);
    CAPTURE(s.points);
    CAPTURE(s.queries);
    CAPTURE(s.k);
    auto g = rng(salt++);
    ReferenceSet store(config_for(s.dim));
    const Model model = fill(store, Metric::L2, s.points, g);
    CHECK(store.size() == model.vectors.size());
    check_search(store, model, Metric::L2, uniform(g, s.queries * s.dim), s.k);
  }
}

TEST_CASE("search matches the reference for every metric") {
  std::size_t salt = 100;
  for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    for (std::size_t dim : {2, 3, 9, 130}) {
      if (metric == Metric::Haversine && dim != 2) continue;
      CAPTURE(to_string(metric));
      CAPTURE(dim);
      auto g = rng(salt++);
      ReferenceSet store(config_for(dim, metric));
      const Model model = fill(store, metric, 3000, g);
      check_search(store, model, metric, points_for(metric, g, 20, dim), 10);
    }
  }
}

TEST_CASE("large store: 1,000,000 points in 2-D and 200,000 in 16-D") {
  for (auto [dim, points] : {std::pair<std::size_t, std::size_t>{2, 1'000'000}, {16, 200'000}}) {
    CAPTURE(dim);
    auto g = rng(200 + dim);
    ReferenceSet store(config_for(dim));
    const Model model = fill(store, Metric::L2, points, g, 0.02);
    check_search(store, model, Metric::L2, uniform(g, 3 * dim), 16);
  }
}

TEST_CASE("a query's answer is the same bit for bit whatever batch it is searched in") {
  // The kernels score queries in groups (of 8, 4, 2 or 1 on low-dimension stores, up to 16 on
  // the GPU) and split the store between threads or blocks; none of that may change a bit.
  struct Case {
    std::size_t dim;
    Metric metric;
    std::size_t points;
  };
  const Case cases[] = {{1, Metric::L2, 9001},        {2, Metric::L2, 20000},    {2, Metric::Haversine, 5003},
                        {3, Metric::Cosine, 4999},    {4, Metric::L2, 7001},     {4, Metric::InnerProduct, 3001},
                        {5, Metric::L2, 3000},        {130, Metric::L2, 2000}};
  std::size_t salt = 700;
  for (const Case& c : cases) {
    CAPTURE(c.dim);
    CAPTURE(to_string(c.metric));
    auto g = rng(salt++);
    ReferenceSet store(config_for(c.dim, c.metric));
    const Model model = fill(store, c.metric, c.points, g);
    const std::size_t nq = 37, k = 16;
    const auto queries = points_for(c.metric, g, nq, c.dim);
    check_search(store, model, c.metric, queries, k);
    const Neighbors whole = store.search(queries, k);
    for (std::size_t part : {std::size_t(1), std::size_t(5), std::size_t(12)}) {
      CAPTURE(part);
      std::size_t differ = 0;
      for (std::size_t q0 = 0; q0 < nq; q0 += part) {
        const std::size_t n = std::min(part, nq - q0);
        const Neighbors got = store.search(std::span(queries).subspan(q0 * c.dim, n * c.dim), k);
        for (std::size_t j = 0; j < n * k; ++j) {
          const std::size_t at = q0 * k + j;
          differ += got.ids[j] != whole.ids[at] || std::bit_cast<std::uint32_t>(got.distances[j]) !=
                                                        std::bit_cast<std::uint32_t>(whole.distances[at]);
        }
      }
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("the answers do not depend on StoreConfig::cpu_threads") {
  // The CPU backend splits a search between cpu_threads threads (the caller's included); every
  // split must give the same bits. (The CUDA backend ignores the setting.)
  const std::size_t dim = 3, k = 10;
  auto queries_rng = rng(760);
  const auto queries = points_for(Metric::L2, queries_rng, 40, dim);
  std::vector<Neighbors> answers;
  for (std::size_t threads : {std::size_t(1), std::size_t(3), std::size_t(0)}) {
    CAPTURE(threads);
    StoreConfig config = config_for(dim);
    config.cpu_threads = threads;
    ReferenceSet store(config);
    auto g = rng(761);  // the same points in every store
    const Model model = fill(store, Metric::L2, 30000, g);
    if (store.backend() == BackendKind::Cpu && threads == 1) {
      CHECK(store.backend_name().find("(1 thread, ") != std::string::npos);
    }
    check_search(store, model, Metric::L2, queries, k);
    answers.push_back(store.search(queries, k));
    answers.push_back(store.search(std::span(queries).subspan(0, dim), k));  // one query: split by slots
  }
  for (std::size_t i = 2; i < answers.size(); ++i) {
    CHECK(answers[i].ids == answers[i % 2].ids);
    std::size_t differ = 0;
    for (std::size_t j = 0; j < answers[i].distances.size(); ++j) {
      differ += std::bit_cast<std::uint32_t>(answers[i].distances[j]) !=
                std::bit_cast<std::uint32_t>(answers[i % 2].distances[j]);
    }
    CHECK(differ == 0);
  }
}

TEST_CASE("exact ties are ordered by id") {
  auto g = rng(300);
  for (std::size_t dim : {1, 2, 8, 33}) {
    CAPTURE(dim);
    ReferenceSet store(config_for(dim));
    Model model;
    model.dim = dim;
    // 50 copies each of 20 distinct vectors, ids shuffled so slot order differs from id order.
    std::vector<PointId> ids(1000);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 10 * i + 7;
    std::shuffle(ids.begin(), ids.end(), g);
    const auto distinct = uniform(g, 20 * dim);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::vector<float> v(distinct.begin() + (i % 20) * dim, distinct.begin() + (i % 20 + 1) * dim);
      store.insert(ids[i], v);
      model.vectors[ids[i]] = v;
    }
    store.publish();
    const std::vector<float> q(distinct.begin(), distinct.begin() + dim);  // equals one of the vectors
    const Neighbors got = store.search(q, 120);
    // The first 50 are the exact copies (distance exactly 0), in ascending id order.
    for (std::size_t j = 0; j < 50; ++j) CHECK(got.distances[j] == 0.0f);
    CHECK(std::is_sorted(got.ids.begin(), got.ids.begin() + 50));
    CHECK(got.distances[50] > 0.0f);
    // Every run of equal distances is in ascending id order.
    for (std::size_t j = 1; j < 120; ++j) {
      if (got.distances[j] == got.distances[j - 1]) CHECK(got.ids[j] > got.ids[j - 1]);
    }
    check_search(store, model, Metric::L2, q, 120);
  }
}

TEST_CASE("a point's distance to itself is exactly 0 for every metric") {
  auto g = rng(350);
  for (Metric metric : {Metric::L2, Metric::Cosine, Metric::Haversine}) {
    const std::size_t dim = metric == Metric::Haversine ? 2 : 37;
    ReferenceSet store(config_for(dim, metric));
    const auto data = points_for(metric, g, 200, dim);
    for (std::size_t i = 0; i < 200; ++i) store.insert(i, std::span(data).subspan(i * dim, dim));
    store.publish();
    const Neighbors got = store.search(data, 1);
    for (std::size_t i = 0; i < 200; ++i) {
      CHECK(got.ids[i] == i);
      CHECK(got.distances[i] == 0.0f);
    }
  }
}

TEST_CASE("k larger than the store pads with kInvalidId and +inf") {
  ReferenceSet store(config_for(3));
  const float a[3] = {0, 0, 0}, b[3] = {1, 0, 0};
  store.insert(5, a);
  store.insert(9, b);
  store.publish();
  const float q[3] = {0.9f, 0, 0};
  const Neighbors got = store.search(q, 4);
  CHECK(got.ids[0] == 9);
  CHECK(got.ids[1] == 5);
  CHECK(got.ids[2] == kInvalidId);
  CHECK(got.ids[3] == kInvalidId);
  CHECK(std::isinf(got.distances[2]));
  CHECK(got.found(0) == 2);
}

TEST_CASE("an empty store returns only padding, an empty batch an empty result") {
  ReferenceSet store(config_for(4));
  const float q[4] = {1, 2, 3, 4};
  const Neighbors got = store.search(q, 3);
  CHECK(got.num_queries == 1);
  for (std::size_t j = 0; j < 3; ++j) {
    CHECK(got.ids[j] == kInvalidId);
    CHECK(std::isinf(got.distances[j]));
  }
  const Neighbors none = store.search(std::span<const float>{}, 3);
  CHECK(none.num_queries == 0);
  CHECK(none.ids.empty());
}

TEST_CASE("per-query visibility ranges restrict what each query sees") {
  auto g = rng(400);
  ReferenceSet store(config_for(5));
  Model model;
  model.dim = 5;
  const auto data = uniform(g, 400 * 5);
  for (PointId id = 0; id < 400; ++id) {
    std::vector<float> v(data.begin() + id * 5, data.begin() + (id + 1) * 5);
    store.insert(id, v);
    model.vectors[id] = v;
  }
  store.publish();
  const auto queries = uniform(g, 6 * 5);
  const std::vector<IdRange> visible = {{0, 400}, {100, 200}, {0, 3}, {399, 400}, {250, 250}, {50, kInvalidId}};
  check_search(store, model, Metric::L2, queries, 8, visible);
}

TEST_CASE("slots freed by erase are reused and the results stay exact through churn") {
  auto g = rng(500);
  ReferenceSet store(config_for(6));
  Model model;
  model.dim = 6;
  PointId next = 0;
  for (int round = 0; round < 20; ++round) {
    const auto data = uniform(g, 300 * 6);
    for (std::size_t i = 0; i < 300; ++i) {
      std::vector<float> v(data.begin() + i * 6, data.begin() + (i + 1) * 6);
      store.insert(next, v);
      model.vectors[next++] = v;
    }
    std::vector<PointId> present;
    for (const auto& [id, v] : model.vectors) present.push_back(id);
    std::shuffle(present.begin(), present.end(), g);
    for (std::size_t i = 0; i < present.size() / 2; ++i) {
      store.erase(present[i]);
      model.vectors.erase(present[i]);
    }
    for (std::size_t i = present.size() / 2; i < present.size() / 2 + 50 && i < present.size(); ++i) {
      auto v = uniform(g, 6);
      store.move(present[i], v);
      model.vectors[present[i]] = v;
    }
    const auto report = store.publish();
    CHECK(report.rejected.empty());
    CHECK(store.size() == model.vectors.size());
  }
  check_search(store, model, Metric::L2, uniform(g, 10 * 6), 25);
}
