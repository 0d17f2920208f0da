// Bad input everywhere it enters (issue "Reliability", item 4). tests/core/test_validation.cpp
// covers the configuration, the basic update and query errors; this suite adds the rest:
// non-finite values at every entry point, malformed updates of every kind, empty batches,
// k = 0 and k beyond the store, id errors of every kind, ids at the 64-bit limits, the empty
// store, the store of one point, and requests too large for memory. Each error must be a
// streamknn exception whose message names what was wrong, and must leave the store as it was.
#include <cmath>
#include <limits>

#include "reliability/reliability_support.hpp"

using namespace test;
using namespace reliability;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#define CHECK_MESSAGE_HAS(expr, exception, ...)                                    \
  do {                                                                             \
    const std::string msg_ = message_of<exception>([&] { (void)(expr); });         \
    for (const char* part_ : {__VA_ARGS__}) {                                      \
      CHECK_MESSAGE(contains(msg_, part_), "message \"", msg_, "\" lacks \"", part_, "\""); \
    }                                                                              \
  } while (0)

bool all_padding(const Neighbors& n, std::size_t query, std::size_t from = 0) {
  for (std::size_t j = from; j < n.k; ++j) {
    if (n.ids_of(query)[j] != kInvalidId || !std::isinf(n.distances_of(query)[j]) || n.distances_of(query)[j] < 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("bad input: a NaN or an infinity in a query is refused by every query entry point, at the call") {
  ReferenceSet cls(config_for(2, Metric::L2, TargetSpec::classes(2)));
  ReferenceSet reg(config_for(2, Metric::L2, TargetSpec::outputs(1)));
  const float p[2] = {0, 0}, y[1] = {1};
  cls.insert(1, p, 1);
  reg.insert(1, p, y);
  cls.publish();
  reg.publish();
  const KnnClassifier clf(cls, 1);
  const KnnRegressor rgr(reg, 1);
  for (const float bad : {kNaN, kInf, -kInf}) {
    const float q[4] = {0, 0, 0, bad};  // the second query's second coordinate
    const std::string what = std::isnan(bad) ? "query 1[1] is NaN" : bad > 0 ? "query 1[1] is +Inf" : "query 1[1] is -Inf";
    CAPTURE(what);
    CHECK_MESSAGE_HAS(cls.search(q, 1), InvalidArgument, "ReferenceSet::search", what.c_str());
    CHECK_MESSAGE_HAS(cls.submit(q, 1), InvalidArgument, "ReferenceSet::search", what.c_str());
    CHECK_MESSAGE_HAS(clf.predict(q), InvalidArgument, "KnnClassifier::predict", what.c_str());
    CHECK_MESSAGE_HAS(clf.predict_proba(q), InvalidArgument, "KnnClassifier::predict", what.c_str());
    CHECK_MESSAGE_HAS(clf.submit(q, true), InvalidArgument, "KnnClassifier::predict", what.c_str());
    CHECK_MESSAGE_HAS(rgr.predict(q), InvalidArgument, "KnnRegressor::predict", what.c_str());
    CHECK_MESSAGE_HAS(rgr.submit(q), InvalidArgument, "KnnRegressor::predict", what.c_str());
  }
  const float one[1] = {0}, five[5] = {0, 0, 0, 0, 0};
  CHECK_MESSAGE_HAS(cls.search(one, 1), InvalidArgument, "1 floats, not a multiple of dim=2");
  CHECK_MESSAGE_HAS(clf.predict(five), InvalidArgument, "5 floats, not a multiple of dim=2");
  CHECK_MESSAGE_HAS(rgr.predict(five), InvalidArgument, "5 floats, not a multiple of dim=2");
}

TEST_CASE("bad input: malformed updates of every kind are refused by push and try_push and queue nothing") {
  ReferenceSet cls(config_for(3, Metric::L2, TargetSpec::classes(5)));
  ReferenceSet reg(config_for(3, Metric::L2, TargetSpec::outputs(2)));
  const float good[3] = {1, 2, 3}, nan[3] = {1, 2, kNaN}, inf[3] = {-kInf, 0, 0}, two[2] = {1, 2}, four[4] = {1, 2, 3, 4};
  const float y_inf[2] = {0, kInf}, y_nan[2] = {kNaN, 0}, y_three[3] = {1, 2, 3};
  Update erase_with_vector = Update::erase(5);
  erase_with_vector.vector = good;
  Update move_with_label = Update::move(5, good);
  move_with_label.label = 1;
  move_with_label.has_target = true;
  Update set_target_with_vector = Update::set_target(5, 1);
  set_target_with_vector.vector = good;
  for (const bool blocking : {true, false}) {
    CAPTURE(blocking);
    auto push = [&](ReferenceSet& store, const Update& u) {
      if (blocking) {
        store.push(u);
      } else {
        (void)store.try_push(u);
      }
    };
    CHECK_MESSAGE_HAS(push(cls, Update::move(5, nan)), InvalidArgument, "move id=5", "vector[2] is NaN");
    CHECK_MESSAGE_HAS(push(cls, Update::move(5, inf)), InvalidArgument, "move id=5", "vector[0] is -Inf");
    CHECK_MESSAGE_HAS(push(cls, Update::move(5, two)), InvalidArgument, "vector has 2 floats but the store's dim is 3");
    CHECK_MESSAGE_HAS(push(cls, Update::move(5, four)), InvalidArgument, "vector has 4 floats but the store's dim is 3");
    CHECK_MESSAGE_HAS(push(cls, Update::move(5, std::span<const float>())), InvalidArgument, "vector has 0 floats");
    CHECK_MESSAGE_HAS(push(cls, Update::insert(5, std::span<const float>(), 1)), InvalidArgument, "vector has 0 floats");
    CHECK_MESSAGE_HAS(push(cls, erase_with_vector), InvalidArgument, "erase id=5", "carries no vector");
    CHECK_MESSAGE_HAS(push(cls, set_target_with_vector), InvalidArgument, "carries no vector");
    CHECK_MESSAGE_HAS(push(cls, move_with_label), InvalidArgument, "move id=5", "only insert and set_target carry a target");
    CHECK_MESSAGE_HAS(push(cls, Update::set_target(5, 5)), InvalidArgument, "label 5 is outside [0, 5)");
    CHECK_MESSAGE_HAS(push(cls, Update::set_target(5, std::numeric_limits<std::int32_t>::min())), InvalidArgument,
                      "label -2147483648 is outside [0, 5)");
    CHECK_MESSAGE_HAS(push(reg, Update::insert(5, good, y_inf)), InvalidArgument, "target value[1] is +Inf");
    CHECK_MESSAGE_HAS(push(reg, Update::set_target(5, y_nan)), InvalidArgument, "set_target id=5", "target value[0] is NaN");
    CHECK_MESSAGE_HAS(push(reg, Update::set_target(5, y_three)), InvalidArgument, "expects 2 target values, got 3");
    CHECK_MESSAGE_HAS(push(reg, Update::insert(5, good)), InvalidArgument, "expects 2 target values, got 0");
    for (const Update& reserved : {Update::insert(kInvalidId, good, 1), Update::move(kInvalidId, good),
                                   Update::erase(kInvalidId), Update::set_target(kInvalidId, 1)}) {
      CHECK_MESSAGE_HAS(push(cls, reserved), InvalidArgument, "18446744073709551615 is reserved", to_string(reserved.kind));
    }
  }
  CHECK(cls.pending() == 0);
  CHECK(reg.pending() == 0);
  const PublishReport r = cls.publish();
  CHECK(r.drained == 0);
  CHECK(r.epoch == 0);
}

TEST_CASE("bad input: empty batches are answered, empty, by every entry point") {
  ReferenceSet store(config_for(2, Metric::L2, TargetSpec::classes(3)));
  ReferenceSet reg(config_for(2, Metric::L2, TargetSpec::outputs(2)));
  const std::span<const float> none;
  for (int round = 0; round < 2; ++round) {  // on the empty store, then on a store with points
    CAPTURE(round);
    const Neighbors n = store.search(none, 4);
    CHECK(n.num_queries == 0);
    CHECK(n.k == 4);
    CHECK(n.ids.empty());
    CHECK(n.distances.empty());
    CHECK(n.epoch == store.epoch());
    CHECK(store.submit(none, 4).get().num_queries == 0);
    const ClassPredictions c = KnnClassifier(store, 2).predict_proba(none);
    CHECK(c.num_queries == 0);
    CHECK(c.num_classes == 3);
    CHECK(c.labels.empty());
    CHECK(c.probabilities.empty());
    CHECK(KnnClassifier(store, 2).predict(none).labels.empty());
    const RegressionPredictions y = KnnRegressor(reg, 2).predict(none);
    CHECK(y.num_queries == 0);
    CHECK(y.num_outputs == 2);
    CHECK(y.values.empty());
    CHECK(KnnRegressor(reg, 1).submit(none).get().values.empty());
    const IdRange one_range[1] = {{0, 10}};
    CHECK_MESSAGE_HAS(store.search(none, 1, one_range), InvalidArgument, "1 ranges for 0 queries");
    // An empty publish changes nothing.
    const std::uint64_t epoch = store.epoch();
    const PublishReport r = store.publish();
    CHECK(r.drained == 0);
    CHECK(r.applied == 0);
    CHECK(r.epoch == epoch);
    CHECK(store.epoch() == epoch);
    const float v[2] = {1, 1}, yv[2] = {1, 2};
    store.insert(1, v, 0);
    reg.insert(1, v, yv);
    store.publish();
    reg.publish();
  }
}

TEST_CASE("bad input: k = 0 and k above the maximum are refused by every entry point") {
  ReferenceSet cls(config_for(2, Metric::L2, TargetSpec::classes(2)));
  ReferenceSet reg(config_for(2, Metric::L2, TargetSpec::outputs(1)));
  const float q[2] = {0, 0};
  for (const std::size_t k : {std::size_t(0), kMaxK + 1, std::numeric_limits<std::size_t>::max()}) {
    const std::string what = k == 0 ? "k=0 must be at least 1" : concat_message("k=", k, " exceeds the maximum of 4096");
    CAPTURE(what);
    CHECK_MESSAGE_HAS(cls.search(q, k), InvalidArgument, "ReferenceSet::search", what.c_str());
    CHECK_MESSAGE_HAS(cls.submit(q, k), InvalidArgument, "ReferenceSet::search", what.c_str());
    CHECK_MESSAGE_HAS(cls.search(std::span<const float>(), k), InvalidArgument, what.c_str());  // even with no queries
    CHECK_MESSAGE_HAS(KnnClassifier(cls, k), InvalidArgument, "KnnClassifier", what.c_str());
    CHECK_MESSAGE_HAS(KnnRegressor(reg, k), InvalidArgument, "KnnRegressor", what.c_str());
  }
}

TEST_CASE("bad input: k larger than the store pads with kInvalidId and +inf, and the models use what exists") {
  ReferenceSet cls(config_for(1, Metric::L2, TargetSpec::classes(3)));
  ReferenceSet reg(config_for(1, Metric::L2, TargetSpec::outputs(1)));
  const float a[1] = {0}, b[1] = {1}, c[1] = {3};
  const float ya[1] = {10}, yb[1] = {20}, yc[1] = {60};
  cls.insert(7, a, 2);
  cls.insert(8, b, 2);
  cls.insert(9, c, 0);
  reg.insert(7, a, ya);
  reg.insert(8, b, yb);
  reg.insert(9, c, yc);
  cls.publish();
  reg.publish();
  const float q[1] = {0};
  for (const std::size_t k : {std::size_t(4), std::size_t(100), kMaxK}) {
    CAPTURE(k);
    const Neighbors n = cls.search(q, k);
    REQUIRE(n.k == k);
    CHECK(n.found(0) == 3);
    CHECK(n.ids[0] == 7);
    CHECK(n.ids[1] == 8);
    CHECK(n.ids[2] == 9);
    CHECK(n.distances[2] == 3.0f);
    CHECK(all_padding(n, 0, 3));
    const ClassPredictions p = KnnClassifier(cls, k).predict_proba(q);
    CHECK(p.labels[0] == 2);
    CHECK(p.probabilities[2] == doctest::Approx(2.0 / 3));
    CHECK(p.probabilities[0] == doctest::Approx(1.0 / 3));
    CHECK(KnnRegressor(reg, k).predict(q).values[0] == doctest::Approx(30.0));
    CHECK(KnnRegressor(reg, k, RegressionAggregate::Median).predict(q).values[0] == 20.0f);
    // A range that holds one of the three.
    const IdRange only_9[1] = {{9, 10}};
    const Neighbors one = cls.search(q, k, only_9);
    CHECK(one.found(0) == 1);
    CHECK(one.ids[0] == 9);
    CHECK(all_padding(one, 0, 1));
  }
}

TEST_CASE("bad input: unknown and duplicate ids of every kind are rejected by name and leave the store as it was") {
  ReferenceSet store(config_for(1, Metric::L2, TargetSpec::classes(4)));
  const float v0[1] = {0}, v1[1] = {1}, v5[1] = {5};
  store.insert(1, v0, 1);
  store.insert(2, v1, 2);
  REQUIRE(store.publish().inserted == 2);

  store.erase(1);
  store.erase(1);             // already erased in this batch
  store.move(1, v5);          // erased earlier in this batch
  store.set_target(1, 3);     // erased earlier in this batch
  store.insert(2, v5, 0);     // exists
  store.insert(3, v5, 3);
  store.insert(3, v0, 0);     // inserted earlier in this batch
  store.erase(3);
  store.insert(3, v1, 1);     // erased earlier in this batch: valid again
  const PublishReport r = store.publish();
  CHECK(r.drained == 9);
  CHECK(r.erased == 2);
  CHECK(r.inserted == 2);
  REQUIRE(r.rejected.size() == 5);
  const Rejection want[5] = {{1, UpdateKind::Erase, RejectReason::UnknownId},
                             {1, UpdateKind::Move, RejectReason::UnknownId},
                             {1, UpdateKind::SetTarget, RejectReason::UnknownId},
                             {2, UpdateKind::Insert, RejectReason::DuplicateId},
                             {3, UpdateKind::Insert, RejectReason::DuplicateId}};
  for (std::size_t i = 0; i < 5; ++i) {
    CAPTURE(i);
    CHECK(r.rejected[i].id == want[i].id);
    CHECK(r.rejected[i].kind == want[i].kind);
    CHECK(r.rejected[i].reason == want[i].reason);
  }
  CHECK(std::string(to_string(RejectReason::UnknownId)) != std::string(to_string(RejectReason::DuplicateId)));
  // Point 2 kept its place and label; point 3 is where its last insert put it.
  KnnClassifier clf(store, 1);
  const IdRange only_2[1] = {{2, 3}}, only_3[1] = {{3, 4}};
  CHECK(store.search(v1, 1, only_2).distances[0] == 0.0f);
  CHECK(clf.predict(v1, only_2).labels[0] == 2);
  CHECK(store.search(v1, 1, only_3).distances[0] == 0.0f);
  CHECK(clf.predict(v1, only_3).labels[0] == 1);
  CHECK(store.size() == 2);

  // A batch of nothing but id errors changes nothing, not even the epoch.
  const std::uint64_t epoch = store.epoch();
  store.move(1, v5);
  store.erase(99);
  store.set_target(98, 0);
  store.insert(3, v5, 0);
  const PublishReport none = store.publish();
  CHECK(none.applied == 0);
  CHECK(none.rejected.size() == 4);
  CHECK(none.epoch == epoch);
  CHECK(store.epoch() == epoch);
}

TEST_CASE("bad input: ids at the 64-bit limits are stored, found, filtered and reported exactly") {
  ReferenceSet store(config_for(1, Metric::L2, TargetSpec::classes(2)));
  const PointId ids[] = {0, 1, (PointId(1) << 63) - 1, PointId(1) << 63, kInvalidId - 2, kInvalidId - 1};
  for (std::size_t i = 0; i < std::size(ids); ++i) {
    const float v[1] = {float(i)};
    store.insert(ids[i], v, int(i % 2));
  }
  REQUIRE(store.publish().inserted == std::size(ids));
  const float q[1] = {0};
  const Neighbors all = store.search(q, 8);
  for (std::size_t i = 0; i < std::size(ids); ++i) CHECK(all.ids[i] == ids[i]);
  CHECK(all_padding(all, 0, std::size(ids)));
  // Ranges at the limits.
  const IdRange top[1] = {{kInvalidId - 1, kInvalidId}}, bottom[1] = {{0, 1}}, empty_at_top[1] = {{kInvalidId, kInvalidId}},
                everything[1] = {{0, kInvalidId}}, upper_half[1] = {{PointId(1) << 63, kInvalidId}};
  CHECK(store.search(q, 3, top).ids[0] == kInvalidId - 1);
  CHECK(store.search(q, 3, top).found(0) == 1);
  CHECK(store.search(q, 3, bottom).ids[0] == 0);
  CHECK(store.search(q, 3, bottom).found(0) == 1);
  CHECK(store.search(q, 3, empty_at_top).found(0) == 0);
  CHECK(store.search(q, 8, everything).found(0) == std::size(ids));
  CHECK(store.search(q, 8, upper_half).found(0) == 3);
  // Every op kind on the extreme ids; the report names them exactly.
  const float far[1] = {100};
  store.move(kInvalidId - 1, far);
  store.set_target(0, 1);
  store.erase(PointId(1) << 63);
  store.erase(PointId(1) << 63);
  PublishReport r = store.publish();
  CHECK(r.applied == 3);
  REQUIRE(r.rejected.size() == 1);
  CHECK(r.rejected[0].id == PointId(1) << 63);
  CHECK(store.search(far, 1).ids[0] == kInvalidId - 1);
  CHECK(KnnClassifier(store, 1).predict(q).labels[0] == 1);
  CHECK(store.search(q, 8, upper_half).found(0) == 2);
  store.insert(PointId(1) << 63, far, 0);  // re-insert an erased id at the limit
  CHECK(store.publish().inserted == 1);
  CHECK(store.size() == std::size(ids));
}

TEST_CASE("bad input: the empty store answers with padding, kNoLabel, zero probabilities and NaN") {
  ReferenceSet cls(config_for(2, Metric::L2, TargetSpec::classes(3)));
  ReferenceSet reg(config_for(2, Metric::L2, TargetSpec::outputs(2)));
  const float q[4] = {0, 0, 1, 1}, v[2] = {0, 0}, y[2] = {1, 2};
  auto check_empty = [&](std::uint64_t epoch) {
    const Neighbors n = cls.search(q, 5);
    CHECK(n.epoch == epoch);
    CHECK(all_padding(n, 0));
    CHECK(all_padding(n, 1));
    for (const Weights w : {Weights::Uniform, Weights::Distance}) {
      const ClassPredictions c = KnnClassifier(cls, 3, w).predict_proba(q);
      CHECK(c.labels[0] == kNoLabel);
      CHECK(c.labels[1] == kNoLabel);
      for (float p : c.probabilities) CHECK(p == 0.0f);
    }
    for (const auto a : {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
      for (float value : KnnRegressor(reg, 3, a).predict(q).values) CHECK(std::isnan(value));
    }
  };
  check_empty(0);
  cls.insert(1, v, 0);
  reg.insert(1, v, y);
  cls.publish();
  reg.publish();
  cls.erase(1);
  reg.erase(1);
  CHECK(cls.publish().size == 0);
  CHECK(reg.publish().size == 0);
  check_empty(2);  // emptied again
}

TEST_CASE("bad input: a store of one point") {
  ReferenceSet cls(config_for(3, Metric::L2, TargetSpec::classes(4)));
  ReferenceSet reg(config_for(3, Metric::L2, TargetSpec::outputs(1)));
  const float at[3] = {1, 2, 3}, q[3] = {1, 2, 5}, y[1] = {42};
  cls.insert(77, at, 3);
  reg.insert(77, at, y);
  cls.publish();
  reg.publish();
  for (const std::size_t k : {std::size_t(1), std::size_t(2), std::size_t(64)}) {
    CAPTURE(k);
    const Neighbors n = cls.search(q, k);
    CHECK(n.ids[0] == 77);
    CHECK(n.distances[0] == 2.0f);
    CHECK(all_padding(n, 0, 1));
    for (const Weights w : {Weights::Uniform, Weights::Distance}) {
      const ClassPredictions c = KnnClassifier(cls, k, w).predict_proba(q);
      CHECK(c.labels[0] == 3);
      CHECK(c.probabilities[3] == 1.0f);
      CHECK(KnnClassifier(cls, k, w).predict(at).labels[0] == 3);  // at distance 0
    }
    for (const auto a : {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
      CHECK(KnnRegressor(reg, k, a).predict(q).values[0] == 42.0f);
      CHECK(KnnRegressor(reg, k, a).predict(at).values[0] == 42.0f);
    }
  }
}

TEST_CASE("bad input: a query batch too large for memory is refused with OutOfMemory or answered in full") {
  // 4M queries x k = 4096 is 17 billion neighbours (over 200 GB of results): no machine this
  // runs on holds that, so the request must be refused with a message that names it, never
  // crash and never come back truncated; a backend may also split and answer it in full.
  if (kUnderSanitizer) {
    MESSAGE("skipped: a sanitizer runtime ends the process on an allocation it cannot satisfy");
    return;
  }
  ReferenceSet store(config_for(1));
  const float v[1] = {0};
  store.insert(5, v);
  store.publish();
  const std::size_t nq = std::size_t(1) << 22;
  std::vector<float> queries(nq, 1.0f);
  try {
    const Neighbors n = store.search(queries, kMaxK);
    MESSAGE("answered in full on ", store.backend_name());
    REQUIRE(n.num_queries == nq);
    REQUIRE(n.ids.size() == nq * kMaxK);
    for (std::size_t q = 0; q < nq; q += nq / 64) {
      CHECK(n.ids_of(q)[0] == 5);
      CHECK(n.found(q) == 1);
    }
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(contains(msg, "4194304 queries"), msg);
    CHECK_MESSAGE(contains(msg, "k=4096"), msg);
  } catch (const std::exception& e) {
    FAIL_CHECK("threw something other than OutOfMemory: ", std::string(e.what()));
  }
  // The store is still usable.
  const Neighbors after = store.search(v, 1);
  CHECK(after.ids[0] == 5);
  store.insert(6, v);
  CHECK(store.publish().inserted == 1);
}

TEST_CASE("bad input: allocations a configuration asks for that cannot be had are refused with a streamknn error") {
  // capacity_hint beyond the 2^32 - 1 slots a store can index.
  StoreConfig c = config_for(1);
  c.capacity_hint = std::size_t(1) << 40;
  CHECK_MESSAGE_HAS(ReferenceSet(c), InvalidArgument, "capacity_hint=1099511627776", "4294967295");
  c.capacity_hint = std::numeric_limits<std::size_t>::max();
  CHECK_MESSAGE_HAS(ReferenceSet(c), InvalidArgument, "capacity_hint=18446744073709551615");
  if (kUnderSanitizer) {
    MESSAGE("the allocation cases are skipped: a sanitizer runtime ends the process on an allocation it cannot satisfy");
    return;
  }
  // An update queue of 2^24 slots of 2^14 floats (1 TiB). (dim 2^14 is the largest the CUDA
  // backend accepts, so the queue, not the backend's dimension limit, is what is refused.)
  c = config_for(std::size_t(1) << 14);
  c.queue_capacity = std::size_t(1) << 24;
  try {
    ReferenceSet s(c);
    FAIL_CHECK("a 1 TiB update queue was created");
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(contains(msg, "queue_capacity=16777216"), msg);
  } catch (const std::exception& e) {
    FAIL_CHECK("threw something other than OutOfMemory: ", std::string(e.what()));
  }
  // A store asked to hold more than memory up front (4 billion points of dim 1024).
  c = config_for(1024);
  c.capacity_hint = (std::size_t(1) << 32) - 1;
  try {
    ReferenceSet s(c);
    FAIL_CHECK("a 16 TiB store was created");
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(contains(msg, "4294967295"), msg);
  } catch (const std::exception& e) {
    FAIL_CHECK("threw something other than OutOfMemory: ", std::string(e.what()));
  }
}

TEST_CASE("bad input: an Update whose kind is not an UpdateKind is refused at push, by value, and queues nothing") {
  ReferenceSet store(config_for(2, Metric::L2));
  const float v[2] = {1, 2};
  Update bare = Update::erase(2);       // without a vector it used to be drained and dropped
  bare.kind = static_cast<UpdateKind>(7);
  Update with_vector = Update::insert(2, v);
  with_vector.kind = static_cast<UpdateKind>(200);
  const char* kinds = "is not an UpdateKind (Insert, Move, Erase, SetTarget, SetAttributes)";
  CHECK_MESSAGE_HAS(store.push(bare), InvalidArgument, "ReferenceSet::push(id=2)", "Update::kind = 7", kinds);
  CHECK_MESSAGE_HAS(store.try_push(bare), InvalidArgument, "ReferenceSet::try_push(id=2)", "Update::kind = 7", kinds);
  CHECK_MESSAGE_HAS(store.push(with_vector), InvalidArgument, "Update::kind = 200", kinds);
  const Update batch[2] = {Update::insert(1, v), bare};
  CHECK_MESSAGE_HAS(store.push(std::span<const Update>(batch)), InvalidArgument, "updates[1]", "Update::kind = 7");
  CHECK_MESSAGE_HAS(store.try_push(std::span<const Update>(batch)), InvalidArgument, "updates[1]", "Update::kind = 7");
  CHECK(store.pending() == 0);
  const PublishReport r = store.publish();
  CHECK(r.drained == 0);
  CHECK(r.epoch == 0);
}

TEST_CASE("bad input: enum fields outside their enumerators are refused, naming the field, the value and the choices") {
  const auto refused = [](StoreConfig c) { return message_of<InvalidArgument>([&] { ReferenceSet s(c); }); };
  StoreConfig c = config_for(2);
  c.metric = static_cast<Metric>(7);
  CHECK(contains(refused(c), "StoreConfig::metric = 7 is not a Metric (L2, InnerProduct, Cosine, Haversine)"));
  c = config_for(2);
  c.target.kind = static_cast<TargetSpec::Kind>(5);
  c.target.count = 2;
  CHECK(contains(refused(c), "StoreConfig::target.kind = 5 is not a TargetSpec::Kind (None, Classes, Outputs)"));
  c = config_for(2);
  c.backend = static_cast<BackendKind>(9);
  CHECK(contains(refused(c), "StoreConfig::backend = 9 is not a BackendKind (Auto, Cpu, Cuda)"));
  c = config_for(2);
  c.spatial_index = static_cast<SpatialIndex>(4);
  CHECK(contains(refused(c), "StoreConfig::spatial_index = 4 is not a SpatialIndex (Auto, Always, Off)"));
  c = config_for(2);
  c.reduced_screen = static_cast<ReducedScreen>(3);
  CHECK(contains(refused(c), "StoreConfig::reduced_screen = 3 is not a ReducedScreen (Auto, Always, Off)"));
  c = config_for(2);
  c.reduced_format = static_cast<ReducedFormat>(2);
  CHECK(contains(refused(c), "StoreConfig::reduced_format = 2 is not a ReducedFormat (Float16, Int8)"));
  ReferenceSet cls(config_for(2, Metric::L2, TargetSpec::classes(2)));
  ReferenceSet reg(config_for(2, Metric::L2, TargetSpec::outputs(1)));
  CHECK_MESSAGE_HAS(KnnClassifier(cls, 1, static_cast<Weights>(7)), InvalidArgument,
                    "KnnClassifier: weights = 7 is not a Weights (Uniform, Distance)");
  CHECK_MESSAGE_HAS(KnnRegressor(reg, 1, static_cast<RegressionAggregate>(9)), InvalidArgument,
                    "KnnRegressor: aggregate = 9 is not a RegressionAggregate (Mean, WeightedMean, Median)");
}

TEST_CASE("bad input: lookup_and_update refuses a non-positive alpha and a write-back that would not be finite") {
  ReferenceSet store(config_for(1, Metric::L2, TargetSpec::outputs(2)));
  const float p1[1] = {0}, p2[1] = {10}, y1[2] = {-3e38f, 1}, y2[2] = {5, 6};
  store.insert(1, p1, y1);
  store.insert(2, p2, y2);
  store.publish();
  const float states[2] = {0, 0}, big[2] = {2e38f, 2e38f}, one[1] = {0};
  const std::int32_t act0[2] = {0, 0}, act1[2] = {1, 1};
  const auto call = [&](std::span<const float> s, std::span<const std::int32_t> a, std::span<const float> t, float alpha) {
    return store.lookup_and_update(s, 1, a, t, alpha);
  };
  const float up[1] = {3e38f};
  const std::int32_t a0[1] = {0};
  for (const float alpha : {0.0f, -0.0f, -0.5f}) {
    CHECK_MESSAGE_HAS(call(one, a0, up, alpha), InvalidArgument, "ReferenceSet::lookup_and_update", "must be positive");
  }
  CHECK_MESSAGE_HAS(call(one, a0, up, -kInf), InvalidArgument, "alpha is -Inf");
  CHECK_MESSAGE_HAS(call(one, a0, up, kNaN), InvalidArgument, "alpha is NaN");
  // -3e38 + 1 x (3e38 - -3e38): the increment itself is +Inf in float32.
  CHECK_MESSAGE_HAS(call(one, a0, up, 1.0f), InvalidArgument, "the write-back would set action 0 of id 1 to +Inf",
                    "nothing was written", "the epoch stays 1");
  // Two finite increments of 2e38 onto the same target: their sum overflows.
  CHECK_MESSAGE_HAS(call(states, act1, big, 1.0f), InvalidArgument, "would set action 1 of id 1 to +Inf");
  CHECK(store.epoch() == 1);
  const RegressionPredictions kept = KnnRegressor(store, 1).predict(one);
  CHECK(kept.values[0] == -3e38f);
  CHECK(kept.values[1] == 1.0f);
  // A finite write-back still goes through, as one new epoch: -3e38 + 1.5e38 + 1.5e38 = 0.
  const float zeros[2] = {0, 0};
  const QUpdate ok = call(states, act0, zeros, 0.5f);
  CHECK(ok.epoch == 2);
  CHECK(store.epoch() == 2);
  CHECK(KnnRegressor(store, 1).predict(one).values[0] == 0.0f);
}

TEST_CASE("bad input: a haversine longitude outside [-180, 180] is refused at push and in queries") {
  ReferenceSet geo(config_for(2, Metric::Haversine, TargetSpec::classes(2)));
  const float edge_east[2] = {10, 180}, edge_west[2] = {-10, -180};
  geo.insert(1, edge_east, 0);
  geo.insert(2, edge_west, 1);
  CHECK(geo.publish().inserted == 2);
  for (const float lon : {180.01f, 181.0f, -540.0f, 1e30f}) {
    CAPTURE(lon);
    const float v[2] = {0, lon};
    const std::string what = concat_message("longitude ", lon, " is outside [-180, 180] degrees");
    CHECK_MESSAGE_HAS(geo.insert(3, v, 0), InvalidArgument, "insert id=3", what.c_str());
    CHECK_MESSAGE_HAS(geo.move(1, v), InvalidArgument, "move id=1", what.c_str());
    CHECK_MESSAGE_HAS(geo.search(v, 1), InvalidArgument, "ReferenceSet::search", "query 0 longitude", what.c_str());
    CHECK_MESSAGE_HAS(KnnClassifier(geo, 1).predict(v), InvalidArgument, "KnnClassifier::predict", what.c_str());
  }
  CHECK(geo.pending() == 0);
  const float q[2] = {0, 179.9f};
  CHECK(geo.search(q, 1).ids[0] == 1);
}

TEST_CASE("bad input: coordinates that could overflow float32 distances are refused; the bound itself is safe") {
  CHECK(max_coordinate(Metric::L2, 1) == doctest::Approx(6.5219e18).epsilon(1e-4));
  CHECK(max_coordinate(Metric::InnerProduct, 128) == doctest::Approx(5.7646e17).epsilon(1e-4));
  CHECK(max_coordinate(Metric::Cosine, 5) == std::numeric_limits<float>::max());
  CHECK(max_coordinate(Metric::Haversine, 2) == std::numeric_limits<float>::max());
  for (const Metric metric : {Metric::L2, Metric::InnerProduct}) {
    for (const std::size_t dim : {std::size_t(1), std::size_t(4096)}) {
      CAPTURE(to_string(metric));
      CAPTURE(dim);
      const float b = max_coordinate(metric, dim);
      ReferenceSet store(config_for(dim, metric));
      std::vector<float> plus(dim, b), minus(dim, -b), over(dim, 0.0f);
      over[dim - 1] = std::nextafter(b, kInf);
      store.insert(1, plus);
      store.insert(2, minus);
      const std::string bound = concat_message("exceeds the bound ", b, " = sqrt(FLT_MAX / (8 x dim))");
      const std::string index = concat_message("[", dim - 1, "] = ");
      CHECK_MESSAGE_HAS(store.insert(3, over), InvalidArgument, "insert id=3", index.c_str(), bound.c_str());
      over[dim - 1] = -3.4e38f;
      CHECK_MESSAGE_HAS(store.insert(3, over), InvalidArgument, bound.c_str());
      CHECK_MESSAGE_HAS(store.search(over, 1), InvalidArgument, "ReferenceSet::search", "query 0", bound.c_str());
      store.publish();
      // At the bound every distance is finite, so no real neighbour reads as padding.
      const Neighbors n = store.search(minus, 2);
      CHECK(n.ids[0] != kInvalidId);
      CHECK(n.ids[1] != kInvalidId);
      CHECK(std::isfinite(n.distances[0]));
      CHECK(std::isfinite(n.distances[1]));
    }
  }
  ReferenceSet cosine(config_for(3, Metric::Cosine));
  const float huge[3] = {3.4e38f, -3.4e38f, 1};  // normalised in double: any finite value is safe
  cosine.insert(1, huge);
  CHECK(cosine.publish().inserted == 1);
  CHECK(std::isfinite(cosine.search(huge, 1).distances[0]));
}

TEST_CASE("bad input: a publish that applies nothing keeps the epoch") {
  ReferenceSet store(config_for(1));
  const float v[1] = {1};
  store.insert(1, v);
  CHECK(store.publish().epoch == 1);
  store.erase(99);   // unknown
  store.insert(1, v);  // duplicate
  const PublishReport all_rejected = store.publish();
  CHECK(all_rejected.drained == 2);
  CHECK(all_rejected.applied == 0);
  CHECK(all_rejected.rejected.size() == 2);
  CHECK(all_rejected.epoch == 1);
  CHECK(store.publish().epoch == 1);  // empty
  CHECK(store.epoch() == 1);
  CHECK(store.search(v, 1).epoch == 1);
}
