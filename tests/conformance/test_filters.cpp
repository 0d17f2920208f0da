// Attributes, predicates and radius search (streamknn/predicate.hpp, streamknn/radius.hpp) against
// a float64 brute force on the model of the store: every metric, predicates that pass none, few or
// most points, per-query predicates composed with IdRange, duplicates, erased slots, exact ties at
// the radius (integer grids, where float64 is exact), caps, and the attribute words' path through
// the queue, the double buffer, the publish report and checkpoints. Both backends run them: the
// CUDA kernels test predicates beside the id ranges, and radius bounds go through its k-nearest
// search (Engine::filtered_by_search), which also votes and averages over its rows for the
// models' predictions within a radius.
#include <functional>

#include "support/test_support.hpp"

using namespace test;

namespace {

constexpr std::size_t kWords = 2;
using Attrs = std::unordered_map<PointId, std::array<std::uint32_t, kWords>>;
using Pass = std::function<bool(PointId)>;

StoreConfig attr_config(std::size_t dim, Metric metric) {
  StoreConfig c = config_for(dim, metric);
  c.attribute_words = kWords;
  c.cpu_threads = 2;
  return c;
}

/// A store of n random points with random attribute words (word 0: 4 flag bits; word 1: a time in
/// [0, 1000)), and its model.
ReferenceSet random_store(Metric metric, std::size_t dim, std::size_t n, std::uint64_t salt, Model& model, Attrs& attrs) {
  auto g = rng(salt);
  ReferenceSet store(attr_config(dim, metric));
  model.dim = dim;
  const auto v = points_for(metric, g, n, dim);
  std::uniform_int_distribution<std::uint32_t> flags(0, 15), time(0, 999);
  for (std::size_t i = 0; i < n; ++i) {
    const PointId id = 3 * i + 7;
    const std::array<std::uint32_t, kWords> a{flags(g), time(g)};
    std::vector<float> row(v.begin() + std::ptrdiff_t(i * dim), v.begin() + std::ptrdiff_t((i + 1) * dim));
    store.push(Update::insert(id, row).with_attributes(a));
    model.vectors[id] = row;
    attrs[id] = a;
  }
  store.publish();
  return store;
}

Model filtered(const Model& model, const Pass& pass) {
  Model out;
  out.dim = model.dim;
  for (const auto& [id, v] : model.vectors) {
    if (pass(id)) out.vectors[id] = v;
  }
  return out;
}

Pass passes_of(const Predicate& p, const Attrs& attrs) {
  return [&attrs, p](PointId id) { return p.passes(attrs.at(id)); };
}

/// Checks a search's rows against the brute force over the points each query's predicate passes.
void check_filtered(const ReferenceSet& store, Metric metric, const Model& model, const Attrs& attrs,
                    const std::vector<float>& queries, std::size_t k, const std::vector<Predicate>& where,
                    const std::vector<IdRange>& visible = {}) {
  const std::size_t dim = model.dim, nq = queries.size() / dim;
  const Neighbors got = store.search(queries, k, visible, where);
  REQUIRE(got.num_queries == nq);
  for (std::size_t q = 0; q < nq; ++q) {
    const Predicate& p = where[where.size() == 1 ? 0 : q];
    const Model passing = filtered(model, passes_of(p, attrs));
    const std::span<const float> qv(queries.data() + q * dim, dim);
    const IdRange range = visible.empty() ? IdRange{} : visible[q];
    const auto ref = ref_knn(passing, metric, qv, k, range);
    REQUIRE(matches_reference(passing, metric, qv, got.ids_of(q), got.distances_of(q), ref, range));
  }
}

/// Brute-force radius check: every point surely within (rank + bound <= limit) is returned, none
/// surely outside, the rest either way; ascending distances; caps.
void check_radius(const RadiusNeighbors& got, Metric metric, const Model& model, const std::vector<float>& queries,
                  double radius, std::size_t cap, const Pass& pass) {
  const std::size_t dim = model.dim, nq = queries.size() / dim;
  REQUIRE(got.num_queries == nq);
  REQUIRE(got.offsets.size() == nq + 1);
  for (std::size_t q = 0; q < nq; ++q) {
    const auto qs = stored_form(metric, std::span<const float>(queries.data() + q * dim, dim));
    std::size_t sure = 0, maybe = 0;
    std::unordered_map<PointId, RefRank> ranks;
    for (const auto& [id, v] : model.vectors) {
      if (!pass(id)) continue;
      const RefRank r = ref_rank(metric, qs, stored_form(metric, v));
      const double d = ref_reported(metric, r.rank);
      const double tol = std::fabs(ref_reported(metric, r.rank + r.error_bound) - d) +
                         std::fabs(ref_reported(metric, std::max(0.0, r.rank - r.error_bound)) - d) + 1e-9;
      if (d + tol < radius) ++sure;
      if (std::fabs(d - radius) <= tol) ++maybe;
      ranks[id] = r;
    }
    const auto ids = got.ids_of(q);
    const auto dist = got.distances_of(q);
    if (cap == kNoLimit) {
      CHECK(ids.size() >= sure);
      CHECK(ids.size() <= sure + maybe);
      CHECK_FALSE(got.capped(q));
    } else {
      CHECK(ids.size() <= cap);
      if (sure > cap) CHECK(got.capped(q));
      if (got.capped(q)) CHECK(ids.size() == cap);
    }
    for (std::size_t j = 0; j < ids.size(); ++j) {
      REQUIRE(ranks.count(ids[j]) == 1);
      CHECK(dist[j] <= float(radius) * (1 + 1e-6f) + 1e-3f);
      if (j > 0) CHECK(dist[j] >= dist[j - 1]);
    }
  }
}

}  // namespace

TEST_CASE("filters: predicates with attribute words, every metric, against the float64 brute force") {
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    CAPTURE(to_string(metric));
    const std::size_t dim = metric == Metric::Haversine ? 2 : 5;
    Model model;
    Attrs attrs;
    const ReferenceSet store = random_store(metric, dim, 1500, 11 + std::size_t(metric), model, attrs);
    auto g = rng(21 + std::size_t(metric));
    const auto queries = points_for(metric, g, 7, dim);
    // One for all: bit 0 set, bit 3 clear, seen at or after time 500 (about 1/8 pass).
    const Predicate some = Predicate{}.require(0, 1).forbid(0, 8).within(1, 500, 999);
    check_filtered(store, metric, model, attrs, queries, 10, {some});
    // One per query, composed with IdRanges: many pass, few pass, none pass, a range of one time.
    std::vector<Predicate> each = {Predicate{},
                                   Predicate{}.require(0, 15),
                                   Predicate{}.require(0, 1).forbid(0, 1),
                                   Predicate{}.within(1, 123, 123),
                                   Predicate{}.forbid(0, 2),
                                   Predicate{}.require(0, 4).within(1, 0, 100),
                                   Predicate{}.within(1, 999, 999)};
    std::vector<IdRange> ranges(7);
    ranges[4] = {1000, 3000};
    check_filtered(store, metric, model, attrs, queries, 16, each, ranges);
    // k larger than what passes: rows end with padding.
    check_filtered(store, metric, model, attrs, queries, 300, {Predicate{}.require(0, 15).within(1, 0, 499)});
  }
}

TEST_CASE("filters: a classifier's predicate votes among the points that pass") {
  // The oracle: the same models over a store that holds only the passing points (same ids, so the
  // same ties), on both backends.
  const std::size_t dim = 4, n = 3000, nq = 40;
  auto g = rng(31);
  const auto v = points_for(Metric::L2, g, n, dim);
  const auto queries = points_for(Metric::L2, g, nq, dim);
  std::uniform_int_distribution<std::uint32_t> flags(0, 15);
  std::uniform_int_distribution<std::int32_t> label(0, 2);
  StoreConfig both = attr_config(dim, Metric::L2), some = config_for(dim, Metric::L2);
  both.target = some.target = TargetSpec::classes(3);
  ReferenceSet all(both), passing(some);
  const Predicate bit = Predicate{}.require(0, 5);
  for (std::size_t i = 0; i < n; ++i) {
    const std::array<std::uint32_t, kWords> a{flags(g), 0};
    const std::span<const float> row(v.data() + i * dim, dim);
    const std::int32_t l = label(g);
    all.push(Update::insert(PointId(i), row, l).with_attributes(a));
    if (bit.passes(a)) passing.push(Update::insert(PointId(i), row, l));
  }
  all.publish();
  passing.publish();
  for (const std::size_t k : {1ul, 7ul, 50ul}) {
    CAPTURE(k);
    for (const Weights w : {Weights::Uniform, Weights::Distance}) {
      const ClassPredictions got = KnnClassifier(all, k, w).where(bit).predict_proba(queries);
      const ClassPredictions want = KnnClassifier(passing, k, w).predict_proba(queries);
      CHECK(got.labels == want.labels);
      CHECK(got.probabilities == want.probabilities);
    }
  }
}

TEST_CASE("filters: set_attributes goes through the queue, the publish report and both buffers") {
  ReferenceSet store(attr_config(2, Metric::L2));
  const std::array<std::uint32_t, kWords> available{1, 0}, busy{0, 0};
  for (PointId id = 0; id < 8; ++id) {
    const float v[2] = {float(id), 0};
    store.push(Update::insert(id, v).with_attributes(available));
  }
  store.push(Update::insert(100, std::vector<float>{0.5f, 0}));  // no words given: zeros
  CHECK(store.publish().inserted == 9);
  const float q[2] = {0, 0};
  const Predicate free = Predicate{}.require(0, 1);
  auto ids = [&] {
    const Neighbors n = store.search(q, 3, {}, std::span(&free, 1));
    return std::vector<PointId>(n.ids.begin(), n.ids.end());
  };
  CHECK(ids() == std::vector<PointId>{0, 1, 2});
  store.set_attributes(0, busy);
  store.push(Update::set_attributes(2, busy));
  CHECK(ids() == std::vector<PointId>{0, 1, 2});  // not yet published
  const PublishReport r = store.publish();
  CHECK(r.attributed == 2);
  CHECK(r.applied == 2);
  CHECK(ids() == std::vector<PointId>{1, 3, 4});
  store.push(Update::set_attributes(12345, busy));  // unknown id: reported
  store.push(Update::set_attributes(0, available));
  const PublishReport r2 = store.publish();
  CHECK(r2.attributed == 1);
  REQUIRE(r2.rejected.size() == 1);
  CHECK(r2.rejected[0].kind == UpdateKind::SetAttributes);
  CHECK(r2.rejected[0].reason == RejectReason::UnknownId);
  CHECK(ids() == std::vector<PointId>{0, 1, 3});
  // Another publish replays onto the other buffer: both agree.
  store.push(Update::move(7, std::vector<float>{7.5f, 0}));
  store.publish();
  CHECK(ids() == std::vector<PointId>{0, 1, 3});
  // Erase and reinsert into the freed slot: the new point's words, not the old ones.
  store.erase(1);
  store.publish();
  store.push(Update::insert(50, std::vector<float>{0.25f, 0}).with_attributes(busy));
  store.publish();
  CHECK(ids() == std::vector<PointId>{0, 3, 4});
  // Durable: a checkpoint and a journal carry the words.
  const auto bytes = store.save_bytes();
  const ReferenceSet loaded = ReferenceSet::load_bytes(bytes);
  CHECK(loaded.config().attribute_words == kWords);
  const Neighbors n = loaded.search(q, 3, {}, std::span(&free, 1));
  CHECK(std::vector<PointId>(n.ids.begin(), n.ids.end()) == std::vector<PointId>{0, 3, 4});
}

TEST_CASE("filters: duplicates, erased slots and ties under a predicate") {
  ReferenceSet store(attr_config(2, Metric::L2));
  // 40 copies of one point, every other one available; 10 of them erased.
  for (PointId id = 0; id < 40; ++id) {
    const std::array<std::uint32_t, kWords> a{std::uint32_t(id % 2), std::uint32_t(id)};
    store.push(Update::insert(id, std::vector<float>{1, 1}).with_attributes(a));
  }
  store.publish();
  for (PointId id = 0; id < 20; id += 2) store.erase(id);
  store.publish();
  const float q[2] = {0, 0};
  const Predicate odd = Predicate{}.require(0, 1);
  const Neighbors n = store.search(q, 25, {}, std::span(&odd, 1));
  for (std::size_t j = 0; j < 20; ++j) CHECK(n.ids[j] == 2 * j + 1);
  for (std::size_t j = 20; j < 25; ++j) CHECK(n.ids[j] == kInvalidId);
  const Predicate even = Predicate{}.forbid(0, 1);
  const Neighbors e = store.search(q, 12, {}, std::span(&even, 1));
  for (std::size_t j = 0; j < 10; ++j) CHECK(e.ids[j] == 20 + 2 * j);
  CHECK(e.ids[10] == kInvalidId);
  CHECK(e.found(0) == 10);
}

TEST_CASE("radius: every metric against the float64 brute force, with caps, predicates and search_within") {
  for (const Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    CAPTURE(to_string(metric));
    const std::size_t dim = metric == Metric::Haversine ? 2 : 4;
    Model model;
    Attrs attrs;
    ReferenceSet store = random_store(metric, dim, 1200, 31 + std::size_t(metric), model, attrs);
    for (PointId id = 7; id < 600; id += 9) {  // erased slots
      store.erase(id);
      model.vectors.erase(id);
    }
    store.publish();
    auto g = rng(41 + std::size_t(metric));
    const auto queries = points_for(metric, g, 5, dim);
    const double radius = metric == Metric::Haversine ? 3.0e6 : metric == Metric::L2 ? 0.6
                          : metric == Metric::Cosine ? 0.2 : 0.1;
    const Pass all = [](PointId) { return true; };
    check_radius(store.radius_search(queries, radius), metric, model, queries, radius, kNoLimit, all);
    check_radius(store.radius_search(queries, radius, 7), metric, model, queries, radius, 7, all);
    const Predicate p = Predicate{}.require(0, 2).within(1, 0, 700);
    check_radius(store.radius_search(queries, radius, kNoLimit, {}, std::span(&p, 1)), metric, model, queries, radius,
                 kNoLimit, passes_of(p, attrs));
    // The capped radius search is the k nearest within: the same ids as search_within.
    const RadiusNeighbors capped = store.radius_search(queries, radius, 9);
    const Neighbors within = store.search_within(queries, 9, radius);
    const Neighbors plain = store.search(queries, 9);
    for (std::size_t q = 0; q < 5; ++q) {
      const auto ids = capped.ids_of(q);
      for (std::size_t j = 0; j < 9; ++j) {
        if (j < ids.size()) {
          CHECK(within.ids_of(q)[j] == ids[j]);
          CHECK(within.ids_of(q)[j] == plain.ids_of(q)[j]);
          CHECK(within.distances_of(q)[j] == capped.distances_of(q)[j]);
        } else {
          CHECK(within.ids_of(q)[j] == kInvalidId);
        }
      }
    }
  }
}

TEST_CASE("radius: exact ties at the radius on integer grids (l2, inner product)") {
  for (const Metric metric : {Metric::L2, Metric::InnerProduct}) {
    CAPTURE(to_string(metric));
    ReferenceSet store(config_for(2, metric));
    std::vector<std::pair<PointId, std::array<int, 2>>> pts;
    PointId id = 0;
    for (int x = -4; x <= 4; ++x) {
      for (int y = -4; y <= 4; ++y) pts.push_back({id++, {x, y}});
    }
    for (const auto& [i, p] : pts) store.insert(i, std::vector<float>{float(p[0]), float(p[1])});
    store.publish();
    const std::vector<float> q = {1, 0};
    for (const double r : {0.0, 1.0, 2.0, 3.0, std::sqrt(5.0), 2.5}) {
      CAPTURE(r);
      const RadiusNeighbors got = store.radius_search(q, r);
      std::vector<std::pair<double, PointId>> want;
      for (const auto& [i, p] : pts) {
        double key;
        if (metric == Metric::L2) {
          key = double((p[0] - 1) * (p[0] - 1) + p[1] * p[1]);
          if (key <= r * r) want.push_back({key, i});  // exact: integers, and r * r as the rule states
        } else {
          key = -double(p[0]);
          if (key <= r) want.push_back({key, i});
        }
      }
      std::sort(want.begin(), want.end());
      REQUIRE(got.count(0) == want.size());
      for (std::size_t j = 0; j < want.size(); ++j) CHECK(got.ids_of(0)[j] == want[j].second);
    }
  }
}

TEST_CASE("radius: haversine in metres along a meridian") {
  ReferenceSet store(config_for(2, Metric::Haversine));
  // Points every 0.001 degrees of latitude (about 111 m) north of (10, 20).
  for (PointId i = 0; i < 100; ++i) store.insert(i, std::vector<float>{10.0f + 0.001f * float(i), 20.0f});
  store.publish();
  const std::vector<float> q = {10.0f, 20.0f};
  const RadiusNeighbors got = store.radius_search(q, 1000.0);  // points 0..8 (8 x 111.2 m = 889.6 m)
  REQUIRE(got.count(0) == 9);
  for (std::size_t j = 0; j < 9; ++j) {
    CHECK(got.ids_of(0)[j] == j);
    CHECK(got.distances_of(0)[j] == doctest::Approx(111.19 * double(j)).epsilon(1e-3));
  }
  CHECK(store.radius_search(q, 1e9).count(0) == 100);  // past half the circumference: every point
}

TEST_CASE("filters: bad input is refused by name and queues nothing") {
  ReferenceSet store(attr_config(2, Metric::L2));
  const std::uint32_t three[3] = {1, 2, 3}, two[2] = {1, 2};
  const float v[2] = {0, 0};
  std::string msg = message_of<InvalidArgument>([&] { store.push(Update::insert(1, v).with_attributes(three)); });
  CHECK(msg.find("attributes has 3 words") != std::string::npos);
  msg = message_of<InvalidArgument>([&] { store.push(Update::set_attributes(1, std::span(two, 1))); });
  CHECK(msg.find("attributes") != std::string::npos);
  msg = message_of<InvalidArgument>([&] { store.push(Update::move(1, v).with_attributes(two)); });
  CHECK(msg.find("only insert and set_attributes") != std::string::npos);
  const Update batch[2] = {Update::insert(1, v).with_attributes(two), Update::set_attributes(2, three)};
  msg = message_of<InvalidArgument>([&] { store.push(std::span(batch)); });
  CHECK(msg.find("updates[1]") != std::string::npos);
  CHECK(store.pending() == 0);

  ReferenceSet plain(config_for(2, Metric::L2));
  msg = message_of<InvalidArgument>([&] { plain.push(Update::set_attributes(1, two)); });
  CHECK(msg.find("attribute_words = 0") != std::string::npos);
  CHECK(plain.pending() == 0);
  plain.insert(1, v);
  plain.publish();
  const Predicate any = Predicate{}.require(0, 1);
  msg = message_of<InvalidArgument>([&] { (void)plain.search(v, 1, {}, std::span(&any, 1)); });
  CHECK(msg.find("where") != std::string::npos);
  CHECK(msg.find("no attributes") != std::string::npos);

  store.push(Update::insert(1, v).with_attributes(two));
  store.publish();
  const Predicate beyond = Predicate{}.require(3, 1), bad_range = Predicate{}.within(2, 0, 1),
                  reversed = Predicate{}.within(1, 5, 4);
  for (const Predicate& p : {beyond, bad_range, reversed}) {
    msg = message_of<InvalidArgument>([&] { (void)store.search(v, 1, {}, std::span(&p, 1)); });
    CHECK(msg.find("where[0]") != std::string::npos);
  }
  const Predicate pair[2] = {any, any};
  msg = message_of<InvalidArgument>([&] { (void)store.search(v, 1, {}, std::span(pair)); });
  CHECK(msg.find("where has 2 predicates for 1 queries") != std::string::npos);
  {
    msg = message_of<InvalidArgument>([&] { (void)store.radius_search(v, -1.0); });
    CHECK(msg.find("radius = -1 is negative") != std::string::npos);
    msg = message_of<InvalidArgument>([&] { (void)store.radius_search(v, std::nan("")); });
    CHECK(msg.find("radius is NaN") != std::string::npos);
    msg = message_of<InvalidArgument>([&] { (void)store.radius_search(v, 1.0, 0); });
    CHECK(msg.find("max_results = 0") != std::string::npos);
    msg = message_of<InvalidArgument>([&] { (void)store.search_within(v, 1, -std::numeric_limits<double>::infinity()); });
    CHECK(msg.find("is negative") != std::string::npos);
    CHECK(store.radius_search(v, std::numeric_limits<double>::infinity()).count(0) == store.size());
  }
  StoreConfig five = config_for(2, Metric::L2);
  five.attribute_words = 5;
  msg = message_of<InvalidArgument>([&] { ReferenceSet s(five); });
  CHECK(msg.find("attribute_words=5") != std::string::npos);
}

TEST_CASE("radius: KnnClassifier / KnnRegressor within a radius vote among the k nearest within it") {
  // On every backend (the CUDA backend votes on the host over its rows: engine_radius.cpp).
  ReferenceSet classes(config_for(1, Metric::L2, TargetSpec::classes(2)));
  ReferenceSet values(config_for(1, Metric::L2, TargetSpec::outputs(1)));
  // Points at 0..9; labels 0 below 5, 1 from 5 on; values = position.
  for (PointId i = 0; i < 10; ++i) {
    const float v[1] = {float(i)}, y[1] = {float(i)};
    classes.push(Update::insert(i, v, std::int32_t(i >= 5)));
    values.push(Update::insert(i, v, y));
  }
  classes.publish();
  values.publish();
  const std::vector<float> q = {4.0f, 20.0f, 7.0f};
  const KnnClassifier near(classes, 5);
  // k = 5 alone: query 4 sees 2..6 (three 0s, two 1s); within 1: 3, 4, 5 (two 0s).
  CHECK(near.predict(q).labels == std::vector<std::int32_t>{0, 1, 1});
  CHECK(near.within(1.0).predict(q).labels == std::vector<std::int32_t>{0, kNoLabel, 1});
  CHECK(near.within(1.0).radius() == 1.0);
  const KnnRegressor mean(values, 5);
  const auto got = mean.within(1.0).predict(q).values;
  CHECK(got[0] == doctest::Approx(4.0));
  CHECK(std::isnan(got[1]));
  CHECK(got[2] == doctest::Approx(7.0));
  CHECK(message_of<InvalidArgument>([&] { (void)near.within(-1.0); }).find("negative") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] { (void)mean.within(std::nan("")); }).find("NaN") != std::string::npos);
}
