// publish(): reports, epochs, id errors, snapshot isolation of in-flight searches, growth.
#include <atomic>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/catalog.hpp"  // kParallelPublishMin, the batch size that takes the publish pool
#include "support/test_support.hpp"

using namespace test;

TEST_CASE("publish reports what it applied and names every rejected op") {
  ReferenceSet store(config_for(2, Metric::L2, TargetSpec::classes(3)));
  const float v[2] = {1, 2};
  store.insert(1, v, 0);
  store.insert(2, v, 1);
  store.insert(1, v, 2);       // duplicate in the same batch
  store.move(7, v);            // unknown
  store.erase(8);              // unknown
  store.set_target(9, 1);      // unknown
  store.set_target(2, 2);
  const PublishReport r = store.publish();
  CHECK(r.drained == 7);
  CHECK(r.applied == 3);
  CHECK(r.inserted == 2);
  CHECK(r.retargeted == 1);
  REQUIRE(r.rejected.size() == 4);
  CHECK(r.rejected[0].id == 1);
  CHECK(r.rejected[0].kind == UpdateKind::Insert);
  CHECK(r.rejected[0].reason == RejectReason::DuplicateId);
  CHECK(r.rejected[1].id == 7);
  CHECK(r.rejected[1].kind == UpdateKind::Move);
  CHECK(r.rejected[1].reason == RejectReason::UnknownId);
  CHECK(r.rejected[2].id == 8);
  CHECK(r.rejected[3].id == 9);
  CHECK(r.size == 2);
  CHECK(store.size() == 2);
  CHECK(r.epoch == 1);
  CHECK(store.epoch() == 1);
}

TEST_CASE("epochs advance only when something changed; ops of one thread apply in order") {
  ReferenceSet store(config_for(1));
  CHECK(store.epoch() == 0);
  CHECK(store.publish().epoch == 0);  // nothing pushed
  const float a[1] = {1}, b[1] = {2}, c[1] = {3};
  store.insert(42, a);
  store.move(42, b);
  store.erase(42);
  store.insert(42, c);   // same id again, same batch
  auto r = store.publish();
  CHECK(r.applied == 4);
  CHECK(r.epoch == 1);
  const float q[1] = {3};
  auto got = store.search(q, 1);
  CHECK(got.ids[0] == 42);
  CHECK(got.distances[0] == 0.0f);
  store.erase(1234);
  r = store.publish();  // only a rejection: nothing changed
  CHECK(r.epoch == 1);
  CHECK(r.rejected.size() == 1);
}

TEST_CASE("results carry the epoch they were computed on; in-flight searches keep their snapshot") {
  auto g = rng(600);
  ReferenceSet store(config_for(8));
  const auto data = uniform(g, 5000 * 8);
  for (PointId id = 0; id < 5000; ++id) store.insert(id, std::span(data).subspan(id * 8, 8));
  store.publish();
  const std::vector<float> q(data.begin(), data.begin() + 8);  // point 0 itself
  auto before = store.submit(q, 1);
  // Move point 0 far away and publish twice while the first search may still be running.
  const std::vector<float> far(8, 100.0f);
  store.move(0, far);
  store.publish();
  store.insert(99999, far);
  store.publish();
  const Neighbors old = before.get();
  CHECK(old.epoch == 1);
  CHECK(old.ids[0] == 0);
  CHECK(old.distances[0] == 0.0f);
  const Neighbors now = store.search(q, 1);
  CHECK(now.epoch == 3);
  CHECK(now.ids[0] != 0);
}

TEST_CASE("a store made by from_points, searched meanwhile, takes publishes as a pushed one does") {
  // The CPU backend fills one buffer at the load and the other at the first publish after it.
  auto g = rng(650);
  const std::size_t n = 3000, dim = 6;
  const auto data = uniform(g, n * dim);
  std::vector<PointId> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = 10 * i;
  StoreConfig c = config_for(dim);
  c.queue_capacity = n;
  auto [loaded, pushed] = load_and_push(c, ids, data);
  const std::vector<float> q(data.begin() + 5 * dim, data.begin() + 6 * dim);  // point 50 itself
  std::atomic<bool> done{false};
  std::atomic<int> searches{0}, wrong{0};
  std::thread reader([&] {
    while (!done.load() || searches.load() == 0) {
      const Neighbors got = loaded.search(q, 3);
      wrong += got.ids[0] != (got.epoch == 1 ? 50u : 7u);
      ++searches;
    }
  });
  const std::vector<float> far(dim, 50.0f);
  for (ReferenceSet* store : {&loaded, &pushed}) {
    store->move(50, far);
    store->insert(7, q);
    store->publish();
    store->erase(0);
    store->publish();
  }
  done = true;
  reader.join();
  CHECK(wrong.load() == 0);
  CHECK(loaded.save_bytes() == pushed.save_bytes());
  for (std::size_t i = 100; i < 3000; i += 700) {
    const std::vector<float> p(data.begin() + std::ptrdiff_t(i * dim), data.begin() + std::ptrdiff_t((i + 1) * dim));
    CHECK(loaded.search(p, 4).ids == pushed.search(p, 4).ids);
  }
}

TEST_CASE("from_points equals a pushed store whether its rows are taken as they are, padded or held as columns") {
  // At 16 and 32 stored dimensions the CPU backend keeps from_points' copy of the rows as its
  // buffer; at 12 it pads them, at 3 it holds columns. 17,000 x 16 floats takes the id index
  // thread too; a count not a multiple of 8 leaves spare slots past the last row.
  struct Case {
    std::size_t dim;
    Metric metric;
    std::size_t n;
  };
  for (const Case k : {Case{16, Metric::L2, 17001}, Case{32, Metric::InnerProduct, 1003}, Case{12, Metric::L2, 999},
                       Case{3, Metric::L2, 1001}}) {
    CAPTURE(k.dim);
    auto g = rng(660 + k.dim);
    const auto data = uniform(g, k.n * k.dim);
    std::vector<PointId> ids(k.n);
    for (std::size_t i = 0; i < k.n; ++i) ids[i] = 3 * i + 1;
    StoreConfig c = config_for(k.dim, k.metric);
    c.queue_capacity = k.n;
    ReferenceSet loaded = ReferenceSet::from_points(c, ids, data);
    ReferenceSet pushed(c);
    for (std::size_t i = 0; i < k.n; ++i) pushed.insert(ids[i], std::span(data).subspan(i * k.dim, k.dim));
    pushed.publish();
    CHECK(loaded.save_bytes() == pushed.save_bytes());
    const std::vector<float> q(data.begin() + std::ptrdiff_t(7 * k.dim), data.begin() + std::ptrdiff_t(9 * k.dim));
    CHECK(loaded.search(q, 5).ids == pushed.search(q, 5).ids);
    CHECK(loaded.search(q, 5).distances == pushed.search(q, 5).distances);
    for (ReferenceSet* store : {&loaded, &pushed}) {  // the back buffer made from the loaded one
      store->insert(2, std::span(q).first(k.dim));
      store->erase(1);
      store->publish();
    }
    CHECK(loaded.save_bytes() == pushed.save_bytes());
    CHECK(loaded.search(q, 5).ids == pushed.search(q, 5).ids);
  }
}

TEST_CASE("from_points from doubles stores what pushing the same doubles stores") {
  // Each double is rounded once as it is copied (the CPU backend's rows at 32 dims, the padded
  // and column layouts, the cosine and origin paths row by row); with an origin the subtraction
  // is in double, so coordinates near 5e6 keep the precision float32 input would lose.
  struct Case {
    std::size_t dim;
    Metric metric;
    double offset;
    bool origin;
  };
  for (const Case k : {Case{32, Metric::L2, 0, false}, Case{12, Metric::InnerProduct, 0, false}, Case{3, Metric::L2, 0, false},
                       Case{8, Metric::Cosine, 0, false}, Case{2, Metric::L2, 5e6, true}}) {
    CAPTURE(k.dim);
    CAPTURE(to_string(k.metric));
    const std::size_t n = 1003;
    auto g = rng(670 + k.dim);
    std::vector<double> data(n * k.dim);
    for (double& x : data) x = k.offset + 1000.0 * (double(g()) / double(g.max()) - 0.5) + 1e-7;
    std::vector<PointId> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = 5 * i + 2;
    StoreConfig c = config_for(k.dim, k.metric);
    c.queue_capacity = n;
    if (k.origin) c.origin.assign(k.dim, k.offset);
    ReferenceSet loaded = ReferenceSet::from_points(c, ids, std::span<const double>(data));
    ReferenceSet pushed(c);
    for (std::size_t i = 0; i < n; ++i) pushed.push(Update::insert(ids[i], std::span<const double>(data).subspan(i * k.dim, k.dim)));
    pushed.publish();
    CHECK(loaded.save_bytes() == pushed.save_bytes());
    const std::span<const double> q = std::span<const double>(data).subspan(7 * k.dim, 2 * k.dim);
    CHECK(loaded.search(q, 5).ids == pushed.search(q, 5).ids);
    CHECK(loaded.search(q, 5).distances == pushed.search(q, 5).distances);
    if (k.origin) CHECK(loaded.search(q.first(k.dim), 1).distances[0] == 0.0f);  // the point itself, to the last bit
  }
  // A NaN, and a double that rounds to +inf in float32, are refused naming their row.
  const StoreConfig c = config_for(4);
  std::vector<double> rows(40, 1.0);
  const std::vector<PointId> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  rows[6 * 4 + 2] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(ReferenceSet::from_points(c, ids, std::span<const double>(rows)), doctest::Contains("row 6"),
                       InvalidArgument);
  rows[6 * 4 + 2] = 1.0;
  rows[8 * 4 + 1] = 1e39;
  CHECK_THROWS_WITH_AS(ReferenceSet::from_points(c, ids, std::span<const double>(rows)), doctest::Contains("row 8"),
                       InvalidArgument);
}

TEST_CASE("a large from_points (streaming stores, halves on two threads) stores and checks every float") {
  // 40,000 x 32 floats (5 MB) with ids 0..n-1: the copy into the CPU backend's rows streams past
  // the caches and its upper half runs on a second thread. Floats and doubles, a source that is
  // not 16-byte aligned; a NaN or a value beyond float32 in the first row, at the halves' seam
  // and in the last row is refused naming its row.
  const std::size_t n = 40'000, dim = 32;
  auto g = rng(680);
  const std::vector<float> data = uniform(g, n * dim + 1);
  const std::span<const float> rows = std::span(data).subspan(1, n * dim);  // 4 bytes past alignment
  std::vector<PointId> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = i;
  StoreConfig c = config_for(dim);
  c.queue_capacity = n;
  ReferenceSet pushed(c);
  for (std::size_t i = 0; i < n; ++i) pushed.insert(ids[i], rows.subspan(i * dim, dim));
  pushed.publish();
  const std::vector<double> doubles(rows.begin(), rows.end());
  CHECK(ReferenceSet::from_points(c, ids, rows).save_bytes() == pushed.save_bytes());
  CHECK(ReferenceSet::from_points(c, ids, std::span<const double>(doubles)).save_bytes() == pushed.save_bytes());
  for (const std::size_t row : {std::size_t(0), n / 2, n - 1}) {
    CAPTURE(row);
    const std::string named = "row " + std::to_string(row);
    std::vector<float> bad(rows.begin(), rows.end());
    bad[row * dim + 5] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(ReferenceSet::from_points(c, ids, bad), doctest::Contains(named.c_str()), InvalidArgument);
    std::vector<double> big(doubles);
    big[row * dim + dim - 1] = 1e39;
    CHECK_THROWS_WITH_AS(ReferenceSet::from_points(c, ids, std::span<const double>(big)),
                         doctest::Contains(named.c_str()), InvalidArgument);
  }
}

TEST_CASE("growth far past the capacity hint keeps every point") {
  auto g = rng(700);
  StoreConfig c = config_for(3);
  c.capacity_hint = 4;
  c.queue_capacity = 64;
  ReferenceSet store(c);
  Model model;
  model.dim = 3;
  PointId id = 0;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 64; ++i, ++id) {
      auto v = uniform(g, 3);
      store.insert(id, v);
      model.vectors[id] = v;
    }
    store.publish();
  }
  CHECK(store.size() == 2560);
  for (PointId probe : {PointId(0), PointId(1000), PointId(2559)}) {
    const auto& v = model.vectors[probe];
    const auto got = store.search(v, 1);
    CHECK(got.ids[0] == probe);
  }
}

TEST_CASE("a full queue makes try_push return false and push wait for a publish") {
  StoreConfig c = config_for(2);
  c.queue_capacity = 16;
  ReferenceSet store(c);
  const float v[2] = {0, 0};
  for (PointId id = 0; id < 16; ++id) CHECK(store.try_push(Update::insert(id, v)));
  CHECK_FALSE(store.try_push(Update::insert(16, v)));
  CHECK(store.pending() == 16);
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    store.push(Update::insert(16, v));  // waits: the queue is full
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(pushed.load());
  CHECK(store.publish().inserted == 16);
  producer.join();
  CHECK(pushed.load());
  CHECK(store.publish().inserted == 1);
  CHECK(store.size() == 17);
}

TEST_CASE("batch push: in order, validated before anything is queued, try_push takes what fits") {
  StoreConfig c = config_for(2);
  c.queue_capacity = 10;
  ReferenceSet store(c);
  std::vector<float> xy(2 * 25);
  std::vector<Update> batch;
  for (PointId id = 0; id < 25; ++id) {
    xy[2 * id] = float(id);
    xy[2 * id + 1] = -float(id);
  }
  for (PointId id = 0; id < 25; ++id) batch.push_back(Update::insert(id, std::span<const float>(&xy[2 * id], 2)));

  // An invalid update anywhere refuses the whole batch, naming its index.
  std::vector<Update> bad = batch;
  const float nan_xy[2] = {std::numeric_limits<float>::quiet_NaN(), 0};
  bad[7] = Update::insert(7, nan_xy);
  CHECK_THROWS_WITH_AS(store.push(std::span<const Update>(bad)), doctest::Contains("updates[7]"), InvalidArgument);
  CHECK_THROWS_AS(store.try_push(std::span<const Update>(bad)), InvalidArgument);
  CHECK(store.pending() == 0);

  // try_push queues the prefix that fits.
  CHECK(store.try_push(std::span<const Update>(batch).first(4)) == 4);
  CHECK(store.try_push(std::span<const Update>(batch).subspan(4)) == 6);
  CHECK(store.try_push(std::span<const Update>(batch).subspan(10)) == 0);
  CHECK(store.publish().inserted == 10);

  // push waits for publishes; a second thread publishes until everything arrived, in order.
  std::vector<Update> moves;
  const float far[2] = {1000, 1000};
  for (PointId id = 0; id < 10; ++id) moves.push_back(Update::move(id, far));
  moves.push_back(Update::move(3, std::span<const float>(&xy[2 * 3], 2)));  // id 3 back home: last wins
  std::atomic<bool> done{false};
  std::thread publisher([&] {
    while (!done.load()) {
      store.publish();
      std::this_thread::yield();
    }
  });
  store.push(std::span<const Update>(batch).subspan(10));  // 15 inserts through a queue of 10
  store.push(std::span<const Update>(moves));
  done = true;
  publisher.join();
  store.publish();
  CHECK(store.size() == 25);
  const Neighbors home = store.search(std::span<const float>(&xy[2 * 3], 2), 1);
  CHECK(home.ids[0] == 3);
  CHECK(home.distances[0] == 0.0f);
  const Neighbors moved = store.search(far, 10);
  const std::vector<PointId> at_far{0, 1, 2, 4, 5, 6, 7, 8, 9};  // ties ordered by id
  for (std::size_t j = 0; j < 9; ++j) {
    CHECK(moved.ids[j] == at_far[j]);
    CHECK(moved.distances[j] == 0.0f);
  }
  CHECK(moved.ids[9] == 3);  // back home: the closest of the points that did not move
  CHECK(moved.distances[9] > 0.0f);
}

TEST_CASE("set_target changes what the classifier and regressor see") {
  ReferenceSet labels(config_for(1, Metric::L2, TargetSpec::classes(4)));
  const float v[1] = {0};
  labels.insert(1, v, 2);
  labels.publish();
  KnnClassifier clf(labels, 1);
  CHECK(clf.predict(v).labels[0] == 2);
  labels.set_target(1, 3);
  labels.publish();
  CHECK(clf.predict(v).labels[0] == 3);

  ReferenceSet values(config_for(1, Metric::L2, TargetSpec::outputs(2)));
  const float y[2] = {1.5f, -2};
  values.insert(1, v, y);
  values.publish();
  KnnRegressor reg(values, 1);
  CHECK(reg.predict(v).values[1] == -2.0f);
  const float y2[2] = {7, 8};
  values.set_target(1, y2);
  values.publish();
  const auto p = reg.predict(v);
  CHECK(p.values[0] == 7.0f);
  CHECK(p.values[1] == 8.0f);
  CHECK(p.epoch == 2);
}

TEST_CASE("a large batch of moves and target changes, resolved on several threads, lands as in queue order") {
  // kParallelPublishMin updates or more, moves and set_targets only: publish() resolves them on
  // its pool. Ids repeat (the last write wins) and some are unknown (rejected in queue order).
  using streamknn::detail::kParallelPublishMin;
  auto g = rng(811);
  StoreConfig c = config_for(3, Metric::L2, TargetSpec::classes(4));
  c.publish_threads = 4;
  c.queue_capacity = 4 * kParallelPublishMin;
  ReferenceSet store(c);
  Model model;
  model.dim = 3;
  const PointId points = 12000;
  for (PointId id = 0; id < points; ++id) {
    auto v = uniform(g, 3);
    const auto label = std::int32_t(g() % 4);
    store.push(Update::insert(id, v, label));
    model.vectors[id] = v;
    model.labels[id] = label;
  }
  store.publish();
  std::vector<Update> batch;
  std::vector<std::vector<float>> positions;  // kept alive until the push
  positions.reserve(3 * kParallelPublishMin);
  std::vector<PointId> unknown;
  std::size_t moves = 0, retargets = 0;
  for (std::size_t i = 0; i < 3 * kParallelPublishMin; ++i) {
    const PointId id = g() % (points + points / 50);  // about 2% unknown
    const bool known = id < points;
    if (g() % 4 == 0) {
      const auto label = std::int32_t(g() % 4);
      batch.push_back(Update::set_target(id, label));
      if (known) model.labels[id] = label, ++retargets;
    } else {
      positions.push_back(uniform(g, 3));
      batch.push_back(Update::move(id, positions.back()));
      if (known) model.vectors[id] = positions.back(), ++moves;
    }
    if (!known) unknown.push_back(id);
  }
  store.push(batch);
  const PublishReport r = store.publish();
  CHECK(r.drained == batch.size());
  CHECK(r.moved == moves);
  CHECK(r.retargeted == retargets);
  CHECK(r.applied == moves + retargets);
  REQUIRE(r.rejected.size() == unknown.size());
  for (std::size_t i = 0; i < unknown.size(); ++i) CHECK(r.rejected[i].id == unknown[i]);
  CHECK(r.size == points);

  // Every point sits where its last move put it and carries its last label.
  const std::size_t k = 8;
  std::vector<float> queries;
  for (PointId id = 0; id < points; id += 97) queries.insert(queries.end(), model.vectors[id].begin(), model.vectors[id].end());
  const Neighbors got = store.search(queries, k);
  std::size_t bad = 0;
  for (std::size_t q = 0; q < got.num_queries; ++q) {
    const std::span<const float> qv(queries.data() + q * 3, 3);
    if (!matches_reference(model, Metric::L2, qv, got.ids_of(q), got.distances_of(q), ref_knn(model, Metric::L2, qv, k))) {
      ++bad;
    }
  }
  CHECK(bad == 0);
  KnnClassifier clf(store, 1);
  const auto predicted = clf.predict(queries);
  for (std::size_t q = 0; q < got.num_queries; ++q) CHECK(predicted.labels[q] == model.labels[PointId(q * 97)]);
}
