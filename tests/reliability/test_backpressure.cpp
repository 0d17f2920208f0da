// Back-pressure with a queue of capacity 16 (DESIGN.md, "The update queue"): a full queue makes
// try_push return false with nothing queued, push waits for a publish, a publish drains at most
// the capacity, and nothing is dropped or reordered. Extends the single-producer case of
// tests/conformance/test_publish.cpp to several producers, every op kind and payloads with
// float targets (the queue's payload pool).
#include <atomic>
#include <chrono>
#include <thread>

#include "reliability/reliability_support.hpp"

using namespace test;
using namespace reliability;

namespace {

constexpr std::size_t kCapacity = 16;

StoreConfig small_queue(std::size_t dim, TargetSpec target) {
  StoreConfig c = config_for(dim, Metric::L2, target);
  c.queue_capacity = kCapacity;
  return c;
}

}  // namespace

TEST_CASE("back-pressure: try_push on a full queue returns false for every op kind and queues nothing") {
  ReferenceSet store(small_queue(2, TargetSpec::classes(3)));
  const float v[2] = {1, 1}, w[2] = {2, 2};
  store.insert(100, v, 0);
  REQUIRE(store.publish().inserted == 1);
  for (PointId id = 0; id < kCapacity; ++id) REQUIRE(store.try_push(Update::insert(id, v, 1)));
  CHECK(store.pending() == kCapacity);
  CHECK_FALSE(store.try_push(Update::insert(16, v, 1)));
  CHECK_FALSE(store.try_push(Update::move(100, w)));
  CHECK_FALSE(store.try_push(Update::erase(100)));
  CHECK_FALSE(store.try_push(Update::set_target(100, 2)));
  CHECK(store.pending() == kCapacity);
  // Validation comes first: a malformed update on a full queue is an error, not "full".
  const float nan[2] = {0, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_AS(store.try_push(Update::move(100, nan)), InvalidArgument);
  const PublishReport r = store.publish();
  CHECK(r.drained == kCapacity);
  CHECK(r.inserted == kCapacity);
  CHECK(r.moved + r.erased + r.retargeted == 0);
  CHECK(r.rejected.empty());
  // Point 100 kept its vector and label: none of the refused ops reached the store.
  KnnClassifier clf(store, 1);
  const IdRange only_100[1] = {{100, 101}};
  CHECK(clf.predict(v, only_100).labels[0] == 0);
  CHECK(store.search(v, 1, only_100).distances[0] == 0.0f);
  CHECK(store.size() == kCapacity + 1);
}

TEST_CASE("back-pressure: pushes from 4 threads on a full queue all wait, and one publish releases them") {
  ReferenceSet store(small_queue(2, TargetSpec::none()));
  const float v[2] = {0, 0};
  for (PointId id = 0; id < kCapacity; ++id) REQUIRE(store.try_push(Update::insert(id, v)));
  constexpr int kWaiters = 4;
  std::atomic<int> returned{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < kWaiters; ++t) {
    waiters.emplace_back([&, t] {
      const float at[2] = {float(t + 1), 0};
      store.push(Update::insert(1000 + t, at));
      ++returned;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_MESSAGE(returned.load() == 0, "push returned while the queue was full");
  CHECK(store.pending() == kCapacity);
  const PublishReport first = store.publish();
  CHECK(first.drained == kCapacity);  // the waiting pushes were not queued before it began
  for (auto& t : waiters) t.join();
  CHECK(returned.load() == kWaiters);
  const PublishReport second = store.publish();
  CHECK(second.drained == kWaiters);
  CHECK(second.inserted == kWaiters);
  CHECK(store.size() == kCapacity + kWaiters);
  for (int t = 0; t < kWaiters; ++t) {
    const float at[2] = {float(t + 1), 0};
    const IdRange mine[1] = {{PointId(1000 + t), PointId(1001 + t)}};
    const Neighbors n = store.search(at, 1, mine);
    CHECK(n.ids[0] == PointId(1000 + t));
    CHECK(n.distances[0] == 0.0f);
  }
}

TEST_CASE("back-pressure: 4 producers x 3,000 ops through a queue of 16 with a slow publisher lose nothing") {
  constexpr int kProducers = 4;
  constexpr std::uint32_t kPoints = 1000;  // each producer inserts these, moves them, re-targets them
  ReferenceSet store(small_queue(2, TargetSpec::outputs(2)));
  std::atomic<int> running{kProducers};
  std::atomic<std::size_t> refused{0}, waited{0};
  Failures failures;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      auto g = rng(0x4000 + p);
      auto push = [&](const Update& u) {
        if (g() % 2 == 0) {
          if (store.try_push(u)) return;
          ++refused;
        }
        const auto t0 = std::chrono::steady_clock::now();
        store.push(u);
        if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(200)) ++waited;
      };
      try {
        for (std::uint32_t i = 0; i < kPoints; ++i) {
          const PointId id = id_in_space(p, i);
          const float at[2] = {float(p), float(i)}, moved[2] = {float(p) + 0.5f, float(i)};
          const float y[2] = {float(i), -float(p)}, y2[2] = {float(i) + 0.25f, float(p)};
          push(Update::insert(id, at, y));
          push(Update::move(id, moved));
          push(Update::set_target(id, y2));
        }
      } catch (const std::exception& e) {
        failures.add("producer ", p, " threw: ", e.what());
      }
      --running;
    });
  }
  std::size_t publishes = 0, drained = 0, full_publishes = 0, applied = 0;
  for (bool quiet = false; !quiet;) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    const bool done = running.load() == 0;
    const PublishReport r = store.publish();
    ++publishes;
    drained += r.drained;
    applied += r.applied;
    full_publishes += r.drained == kCapacity;
    if (r.drained > kCapacity) failures.add("a publish drained ", r.drained, " ops from a queue of ", kCapacity);
    if (!r.rejected.empty()) failures.add("publish rejected ", r.rejected.size(), " ops, first id ", r.rejected[0].id);
    quiet = done && r.drained == 0 && store.pending() == 0;
  }
  for (auto& t : producers) t.join();
  REQUIRE(failures.report());
  CHECK(drained == std::size_t(kProducers) * kPoints * 3);
  CHECK(applied == drained);
  // How often the queue was full depends on scheduling; the two cases above prove the
  // behaviour deterministically, this one that nothing is lost when it happens.
  WARN(refused.load() > 0);
  WARN(full_publishes > 0);
  REQUIRE(store.size() == std::size_t(kProducers) * kPoints);

  // Every point holds its last vector and its last target: per-producer order was kept.
  std::vector<float> q;
  std::vector<IdRange> ranges;
  for (int p = 0; p < kProducers; ++p) {
    for (std::uint32_t i = 0; i < kPoints; ++i) {
      q.push_back(float(p) + 0.5f);
      q.push_back(float(i));
      const PointId id = id_in_space(p, i);
      ranges.push_back({id, id + 1});
    }
  }
  const Neighbors n = store.search(q, 1, ranges);
  const RegressionPredictions y = KnnRegressor(store, 1).predict(q, ranges);
  std::size_t wrong = 0;
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    const int p = int(r / kPoints);
    const std::uint32_t i = std::uint32_t(r % kPoints);
    const bool ok = n.ids[r] == ranges[r].begin && n.distances[r] == 0.0f && y.values[2 * r] == float(i) + 0.25f &&
                    y.values[2 * r + 1] == float(p);
    if (!ok && wrong++ < 5) {
      FAIL_CHECK("id ", ranges[r].begin, ": found ", n.ids[r], " at ", n.distances[r], " with target (", y.values[2 * r],
                 ", ", y.values[2 * r + 1], ")");
    }
  }
  CHECK(wrong == 0);
  MESSAGE(drained, " ops through a queue of ", kCapacity, " in ", publishes, " publishes (", full_publishes,
          " drained a full queue); try_push refused ", refused.load(), " times; push waited over 200 us ", waited.load(),
          " times");
}

TEST_CASE("back-pressure: a thread that pushes and publishes uses try_push + publish and never waits for itself") {
  ReferenceSet store(small_queue(1, TargetSpec::none()));
  std::size_t publishes = 0;
  for (PointId id = 0; id < 5000; ++id) {
    const float v[1] = {float(id)};
    while (!store.try_push(Update::insert(id, v))) {
      CHECK(store.publish().drained == kCapacity);
      ++publishes;
    }
  }
  store.publish();
  CHECK(store.size() == 5000);
  CHECK(publishes == 5000 / kCapacity - (5000 % kCapacity == 0 ? 1 : 0));
  const float q[1] = {4999};
  CHECK(store.search(q, 1).ids[0] == 4999);
}
