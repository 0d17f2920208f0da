// ReferenceSet::lookup_and_update (KNN-Q in one call) against a host model built from the public
// API: the neighbours are search()'s on the same snapshot, the estimates their per-action means,
// and the write-back the increments added in query order; the stored table is read back through
// k = 1 regressions on every stored point. Runs on both backends (conformance suites), over
// several shapes, k above the store size, erased and moved points and publishes in between (so
// both buffers of each backend are read back in turn). Plus the refusals, and search_device on
// the CPU backend.
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "streamknn/device.hpp"
#include "support/test_support.hpp"

using namespace test;

namespace {

struct QModel {
  std::map<PointId, std::vector<float>> vectors, rows;
};

bool same_float(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

/// Every stored point's Q row, read through a k = 1 regression at its own vector.
void check_table(const ReferenceSet& store, const QModel& model, std::size_t outputs) {
  std::vector<float> queries;
  std::vector<PointId> ids;
  for (const auto& [id, v] : model.vectors) {
    queries.insert(queries.end(), v.begin(), v.end());
    ids.push_back(id);
  }
  if (ids.empty()) return;
  const Neighbors self = store.search(queries, 1);
  KnnRegressor read(store, 1);
  const RegressionPredictions got = read.predict(queries);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    REQUIRE(self.ids[i] == ids[i]);  // the points are distinct: each finds itself
    const auto& want = model.rows.at(ids[i]);
    for (std::size_t a = 0; a < outputs; ++a) {
      if (!same_float(got.values[i * outputs + a], want[a])) {
        if (++wrong <= 5) {
          FAIL_CHECK("id ", ids[i], " action ", a, ": stored ", got.values[i * outputs + a], ", expected ", want[a]);
        }
      }
    }
  }
  CHECK(wrong == 0);
}

struct Shape {
  std::size_t points, dim, outputs, queries, k;
  Metric metric;
};

}  // namespace

TEST_CASE("lookup_and_update matches the host model on random shapes") {
  auto g = rng(7101);
  const Shape shapes[] = {
      {50, 3, 4, 10, 5, Metric::L2},      {20, 2, 3, 15, 30, Metric::L2},  // k > size
      {200, 16, 2, 64, 8, Metric::L2},    {1, 4, 3, 5, 2, Metric::L2},     {120, 5, 1, 33, 1, Metric::Cosine},
      {300, 2, 6, 100, 12, Metric::InnerProduct}, {64, 7, 5, 17, 64, Metric::L2},  // k == size
  };
  for (const Shape& s : shapes) {
    CAPTURE(s.points);
    CAPTURE(s.dim);
    CAPTURE(s.outputs);
    CAPTURE(s.queries);
    CAPTURE(s.k);
    ReferenceSet store(config_for(s.dim, s.metric, TargetSpec::outputs(std::uint32_t(s.outputs))));
    QModel model;
    PointId next_id = 0;
    auto insert_some = [&](std::size_t n) {
      const auto v = points_for(s.metric, g, n, s.dim);
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<float> vec(v.begin() + i * s.dim, v.begin() + (i + 1) * s.dim);
        auto row = uniform(g, s.outputs, -5, 5);
        store.insert(next_id, vec, row);
        model.vectors[next_id] = vec;
        model.rows[next_id] = row;
        ++next_id;
      }
    };
    insert_some(s.points + s.points / 4);
    store.publish();
    // Erase a few (free slots in the middle), move one.
    std::size_t erased = 0;
    for (auto it = model.vectors.begin(); it != model.vectors.end() && erased < s.points / 4;) {
      if (g() % 3 == 0) {
        store.erase(it->first);
        model.rows.erase(it->first);
        it = model.vectors.erase(it);
        ++erased;
      } else {
        ++it;
      }
    }
    store.publish();
    for (int round = 0; round < 4; ++round) {
      CAPTURE(round);
      if (round == 2 && !model.vectors.empty()) {  // an ordinary publish between two write-backs
        const PointId id = model.vectors.begin()->first;
        const auto v = points_for(s.metric, g, 1, s.dim);
        store.move(id, v);
        model.vectors[id] = v;
        insert_some(2);
        store.publish();
      }
      // States: stored points plus noise (so neighbours are shared within the batch), and random ones.
      std::vector<float> states = points_for(s.metric, g, s.queries, s.dim);
      std::size_t qi = 0;
      for (const auto& [id, v] : model.vectors) {
        if (qi >= s.queries / 2) break;
        if (s.metric == Metric::Haversine) break;
        for (std::size_t d = 0; d < s.dim; ++d) states[qi * s.dim + d] = v[d] + 0.01f * float(qi % 3);
        ++qi;
      }
      std::vector<std::int32_t> actions(s.queries);
      for (auto& a : actions) a = std::int32_t(g() % s.outputs);
      const std::vector<float> targets = uniform(g, s.queries, -3, 3);
      const float alpha = 0.25f + 0.5f * float(round) / 4;

      const Neighbors before = store.search(states, s.k);  // the same snapshot the call reads
      const std::uint64_t epoch = store.epoch();
      std::vector<float> poison(7, -1234.5f);
      QUpdate out;
      out.q_before = poison;
      out = store.lookup_and_update(states, s.k, actions, targets, alpha);
      CHECK(out.epoch == epoch + 1);
      CHECK(store.epoch() == epoch + 1);
      CHECK(out.num_queries == s.queries);
      CHECK(out.num_actions == s.outputs);
      REQUIRE(out.ids.size() == s.queries * s.k);
      REQUIRE(out.q_before.size() == s.queries * s.outputs);
      CHECK(out.ids == before.ids);
      // Model: estimates, then the increments in query order.
      std::vector<float> increment(s.queries, 0.0f);
      for (std::size_t q = 0; q < s.queries; ++q) {
        const std::size_t n = before.found(q);
        for (std::size_t a = 0; a < s.outputs; ++a) {
          double sum = 0;
          for (std::size_t j = 0; j < n; ++j) sum += double(model.rows.at(before.ids[q * s.k + j])[a]);
          const float want = n ? float(sum / double(n)) : std::numeric_limits<float>::quiet_NaN();
          if (!same_float(out.q_before[q * s.outputs + a], want)) {
            FAIL_CHECK("query ", q, " action ", a, ": q_before ", out.q_before[q * s.outputs + a], ", expected ", want);
          }
        }
        if (n) {
          const float delta = targets[q] - out.q_before[q * s.outputs + std::size_t(actions[q])];
          volatile float inc = alpha * delta;  // materialised, as the backends do
          increment[q] = inc;
        }
      }
      for (std::size_t q = 0; q < s.queries; ++q) {
        for (std::size_t j = 0; j < before.found(q); ++j) {
          float& v = model.rows.at(before.ids[q * s.k + j])[std::size_t(actions[q])];
          v = v + increment[q];
        }
      }
      // (Inner product: a point is not its own nearest; the next rounds' estimates check the rows.)
      if (s.metric != Metric::InnerProduct) check_table(store, model, s.outputs);
    }
  }
}

TEST_CASE("lookup_and_update: an empty store and an empty batch change nothing") {
  ReferenceSet store(config_for(2, Metric::L2, TargetSpec::outputs(3)));
  const float state[2] = {0.5f, 0.5f};
  const std::int32_t action[1] = {1};
  const float target[1] = {2.0f};
  QUpdate out = store.lookup_and_update(state, 4, action, target, 0.5f);
  CHECK(out.epoch == 0);
  CHECK(store.epoch() == 0);
  REQUIRE(out.q_before.size() == 3);
  CHECK(std::isnan(out.q_before[0]));
  REQUIRE(out.ids.size() == 4);
  CHECK(out.ids[0] == kInvalidId);
  store.insert(0, std::vector<float>{0, 0}, std::vector<float>{1, 2, 3});
  store.publish();
  out = store.lookup_and_update({}, 4, {}, {}, 0.5f);
  CHECK(out.epoch == 1);
  CHECK(out.ids.empty());
  CHECK(store.epoch() == 1);
  // Updates queued before the call stay queued: the write-back publishes only itself.
  store.insert(1, std::vector<float>{9, 9}, std::vector<float>{0, 0, 0});
  out = store.lookup_and_update(state, 4, action, target, 0.5f);
  CHECK(out.epoch == 2);
  CHECK(store.size() == 1);
  CHECK(store.pending() == 1);
  CHECK(out.q_before[1] == 2.0f);
  CHECK(out.ids[0] == 0);
  CHECK(out.ids[1] == kInvalidId);
  const float at_zero[2] = {0, 0};
  CHECK(KnnRegressor(store, 1).predict(at_zero).values[1] == 2.0f + 0.5f * (2.0f - 2.0f));
  out = store.lookup_and_update(state, 1, action, std::vector<float>{4.0f}, 0.5f);
  CHECK(KnnRegressor(store, 1).predict(at_zero).values[1] == 3.0f);
  CHECK(store.publish().inserted == 1);
}

TEST_CASE("lookup_and_update refuses bad input, naming it") {
  ReferenceSet store(config_for(2, Metric::L2, TargetSpec::outputs(3)));
  store.insert(0, std::vector<float>{0, 0}, std::vector<float>{1, 2, 3});
  store.publish();
  const std::vector<float> states{0.1f, 0.2f, 0.3f, 0.4f};
  const std::vector<std::int32_t> actions{0, 2};
  const std::vector<float> targets{1, 2};
  auto msg = [&](auto f) { return message_of<InvalidArgument>(f); };
  CHECK(msg([&] { store.lookup_and_update(states, 0, actions, targets, 0.5f); }).find("k=0") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(states, 2, std::vector<std::int32_t>{0, 3}, targets, 0.5f); })
            .find("actions[1] = 3 is outside [0, 3)") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(states, 2, std::vector<std::int32_t>{-1, 0}, targets, 0.5f); })
            .find("actions[0] = -1") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(states, 2, actions, std::vector<float>{1, NAN}, 0.5f); })
            .find("targets[1] is NaN") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(states, 2, actions, targets, INFINITY); }).find("alpha is") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(std::vector<float>{0.1f, NAN, 0, 0}, 2, actions, targets, 0.5f); })
            .find("state 0[1] is NaN") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(states, 2, std::vector<std::int32_t>{0}, targets, 0.5f); })
            .find("1 actions for 2 states") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(states, 2, actions, std::vector<float>{1}, 0.5f); })
            .find("1 targets for 2 states") != std::string::npos);
  CHECK(msg([&] { store.lookup_and_update(std::vector<float>{1, 2, 3}, 2, actions, targets, 0.5f); })
            .find("not a multiple of dim=2") != std::string::npos);
  ReferenceSet labelled(config_for(2, Metric::L2, TargetSpec::classes(3)));
  CHECK(msg([&] { labelled.lookup_and_update(states, 2, actions, targets, 0.5f); }).find("outputs(n_actions)") !=
        std::string::npos);
  CHECK(store.epoch() == 1);  // nothing was written
}

#ifndef STREAMKNN_TEST_CUDA
TEST_CASE("search_device needs the CUDA backend") {
  ReferenceSet store(config_for(2));
  float fake = 0;
  PointId id = 0;
  DeviceQueries q{&fake, 1, 0, 0, nullptr};
  const std::string m = message_of<BackendUnavailable>([&] { (void)search_device(store, q, 1, {&fake, &id}, 0); });
  CHECK(m.find("CUDA backend") != std::string::npos);
  CHECK(m.find("search_device") != std::string::npos);
}
#endif

TEST_CASE("lookup_and_update while other threads publish inserts and search: no write is lost") {
  auto g = rng(7102);
  const std::size_t dim = 3, outputs = 3, initial = 200, extra = 400, k = 6;
  ReferenceSet store(config_for(dim, Metric::L2, TargetSpec::outputs(outputs)));
  QModel model;
  const auto vectors = uniform(g, (initial + extra) * dim);
  for (PointId id = 0; id < initial + extra; ++id) {
    model.vectors[id] = std::vector<float>(vectors.begin() + id * dim, vectors.begin() + (id + 1) * dim);
    model.rows[id] = uniform(g, outputs, -2, 2);
  }
  for (PointId id = 0; id < initial; ++id) store.insert(id, model.vectors[id], model.rows[id]);
  store.publish();

  std::atomic<bool> stop{false};
  std::thread publisher([&] {  // inserts the extra points a few at a time, each batch its own epoch
    for (PointId id = initial; id < initial + extra; ++id) {
      store.insert(id, model.vectors.at(id), model.rows.at(id));
      if (id % 8 == 0) store.publish();
    }
    store.publish();
  });
  std::thread searcher([&] {
    const auto q = uniform(g, 16 * dim);  // g is not used by the other threads while this one runs
    std::uint64_t last = 0;
    while (!stop.load()) {
      const Neighbors n = store.search(q, k);
      CHECK(n.epoch >= last);
      last = n.epoch;
    }
  });
  std::mt19937_64 gl(seed() ^ 7103);
  std::vector<QUpdate> calls;
  std::vector<std::vector<std::int32_t>> all_actions;
  std::vector<std::vector<float>> all_targets;
  std::uint64_t last_epoch = store.epoch();
  for (int call = 0; call < 60; ++call) {
    const auto states = uniform(gl, 12 * dim);
    std::vector<std::int32_t> actions(12);
    for (auto& a : actions) a = std::int32_t(gl() % outputs);
    const auto targets = uniform(gl, 12, -3, 3);
    calls.push_back(store.lookup_and_update(states, k, actions, targets, 0.4f));
    CHECK(calls.back().epoch > last_epoch);
    last_epoch = calls.back().epoch;
    all_actions.push_back(actions);
    all_targets.push_back(targets);
  }
  publisher.join();
  stop.store(true);
  searcher.join();
  // Replay the calls in their order on the model: each call's estimates must be the means of the
  // model's rows of the ids it reports (every earlier write-back included), then its increments.
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const QUpdate& u = calls[c];
    std::vector<float> increment(u.num_queries, 0.0f);
    for (std::size_t q = 0; q < u.num_queries; ++q) {
      std::size_t n = 0;
      while (n < k && u.ids[q * k + n] != kInvalidId) ++n;
      for (std::size_t a = 0; a < outputs; ++a) {
        double sum = 0;
        for (std::size_t j = 0; j < n; ++j) sum += double(model.rows.at(u.ids[q * k + j])[a]);
        const float want = float(sum / double(n));
        if (!same_float(u.q_before[q * outputs + a], want)) {
          FAIL_CHECK("call ", c, " query ", q, " action ", a, ": q_before ", u.q_before[q * outputs + a], ", replay ", want);
        }
      }
      const float delta = all_targets[c][q] - u.q_before[q * outputs + std::size_t(all_actions[c][q])];
      volatile float inc = 0.4f * delta;
      increment[q] = inc;
    }
    for (std::size_t q = 0; q < u.num_queries; ++q) {
      for (std::size_t j = 0; j < k && u.ids[q * k + j] != kInvalidId; ++j) {
        float& v = model.rows.at(u.ids[q * k + j])[std::size_t(all_actions[c][q])];
        v = v + increment[q];
      }
    }
  }
  check_table(store, model, outputs);
  store.publish();  // one more swap: the other buffer must hold the same table
  store.insert(initial + extra, std::vector<float>{9, 9, 9}, std::vector<float>(outputs, 0.0f));
  store.publish();
  check_table(store, model, outputs);
}
