// 8 producer threads push 1,000,000 operations while another thread publishes and two search;
// the final store must equal a sequential replay of each producer's operations.
#include <atomic>
#include <thread>

#include "support/test_support.hpp"

using namespace test;

namespace {

struct ProducerLog {
  Model model;              // this producer's ids after replaying its ops in order
  std::size_t invalid = 0;  // ops the store must reject
};

}  // namespace

TEST_CASE("8 producers x 125,000 ops with concurrent publish and search equal a sequential replay") {
  constexpr std::size_t kProducers = 8, kOpsEach = 125'000, kDim = 4;
  StoreConfig config = config_for(kDim, Metric::L2, TargetSpec::classes(16));
  config.queue_capacity = 4096;
  ReferenceSet store(config);
  std::vector<ProducerLog> logs(kProducers);
  std::atomic<std::size_t> producers_done{0};
  std::atomic<bool> stop_search{false};
  std::atomic<std::size_t> drained{0}, rejected{0}, searches{0};
  std::atomic<bool> search_ok{true};

  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      auto g = rng(1000 + p);
      ProducerLog& log = logs[p];
      log.model.dim = kDim;
      std::vector<PointId> live;
      const PointId base = PointId(p) << 40;  // disjoint id spaces per producer
      PointId next = base;
      std::uniform_int_distribution<int> kind(0, 99);
      std::uniform_int_distribution<std::int32_t> label(0, 15);
      for (std::size_t i = 0; i < kOpsEach; ++i) {
        const int r = kind(g);
        auto v = uniform(g, kDim);
        if (live.empty() || r < 35) {  // insert (sometimes a duplicate)
          const bool duplicate = !live.empty() && r < 2;
          const PointId id = duplicate ? live[g() % live.size()] : next++;
          const auto l = label(g);
          store.push(Update::insert(id, v, l));
          if (duplicate) {
            ++log.invalid;
          } else {
            live.push_back(id);
            log.model.vectors[id] = v;
            log.model.labels[id] = l;
          }
        } else if (r < 70) {  // move
          const PointId id = live[g() % live.size()];
          store.push(Update::move(id, v));
          log.model.vectors[id] = v;
        } else if (r < 85) {  // erase
          const std::size_t at = g() % live.size();
          store.push(Update::erase(live[at]));
          log.model.vectors.erase(live[at]);
          log.model.labels.erase(live[at]);
          live[at] = live.back();
          live.pop_back();
        } else if (r < 95) {  // set target
          const PointId id = live[g() % live.size()];
          const auto l = label(g);
          store.push(Update::set_target(id, l));
          log.model.labels[id] = l;
        } else {  // unknown id
          store.push(Update::move(base + (PointId(1) << 39) + i, v));
          ++log.invalid;
        }
      }
      ++producers_done;
    });
  }
  std::thread publisher([&] {
    for (;;) {
      const bool last = producers_done.load() == kProducers;
      const auto r = store.publish();
      drained += r.drained;
      rejected += r.rejected.size();
      if (last && store.pending() == 0) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (int s = 0; s < 2; ++s) {
    threads.emplace_back([&, s] {
      auto g = rng(2000 + s);
      std::uint64_t last_epoch = 0;
      while (!stop_search.load()) {
        const auto q = uniform(g, 3 * kDim);
        const Neighbors nn = store.search(q, 8);
        if (nn.epoch < last_epoch) search_ok = false;
        last_epoch = nn.epoch;
        for (std::size_t i = 0; i < 3; ++i) {
          const auto d = nn.distances_of(i);
          if (!std::is_sorted(d.begin(), d.end())) search_ok = false;
        }
        ++searches;
      }
    });
  }
  for (std::size_t p = 0; p < kProducers; ++p) threads[p].join();
  publisher.join();
  stop_search = true;
  for (std::size_t s = kProducers; s < threads.size(); ++s) threads[s].join();

  CHECK(search_ok.load());
  MESSAGE(searches.load(), " concurrent searches ran");
  std::size_t expected_size = 0, expected_invalid = 0;
  for (const auto& log : logs) {
    expected_size += log.model.vectors.size();
    expected_invalid += log.invalid;
  }
  CHECK(drained.load() == kProducers * kOpsEach);
  CHECK(rejected.load() == expected_invalid);
  REQUIRE(store.size() == expected_size);

  // A sample of surviving ids (every one would cost a full scan each): each is where its
  // producer last put it, with its last label.
  auto g = rng(3000);
  std::vector<float> queries;
  std::vector<IdRange> ranges;
  std::vector<std::int32_t> labels;
  for (const auto& log : logs) {
    for (const auto& [id, v] : log.model.vectors) {
      if (g() % 64 != 0) continue;
      queries.insert(queries.end(), v.begin(), v.end());
      ranges.push_back({id, id + 1});
      labels.push_back(log.model.labels.at(id));
    }
  }
  MESSAGE("checking ", ranges.size(), " of ", expected_size, " points");
  const Neighbors nn = store.search(queries, 1, ranges);
  KnnClassifier clf(store, 1);
  const auto predicted = clf.predict(queries, ranges);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    wrong += nn.ids[i] != ranges[i].begin || nn.distances[i] != 0.0f || predicted.labels[i] != labels[i];
  }
  CHECK(wrong == 0);
}
