// Unit tests of the host machinery: the id index against std::unordered_map, the update
// queue's capacity and FIFO order, the catalogue's slot reuse.
#include <thread>
#include <unordered_map>

#include "core/catalog.hpp"
#include "core/id_index.hpp"
#include "core/update_queue.hpp"
#include "support/test_support.hpp"

using namespace test;
using namespace streamknn::detail;

TEST_CASE("IdIndex agrees with std::unordered_map over random inserts and erases") {
  auto g = rng(4000);
  IdIndex index;
  std::unordered_map<PointId, std::uint32_t> model;
  std::uniform_int_distribution<PointId> small_id(0, 5000);  // many collisions and re-inserts
  for (std::uint32_t i = 0; i < 200'000; ++i) {
    const PointId id = (g() & 1) ? small_id(g) : g() % (kInvalidId - 1);
    if (g() % 3 == 0) {
      const auto got = index.erase(id);
      const auto it = model.find(id);
      REQUIRE(got.has_value() == (it != model.end()));
      if (got) {
        REQUIRE(*got == it->second);
        model.erase(it);
      }
    } else {
      const bool inserted = index.insert(id, i);
      REQUIRE(inserted == model.emplace(id, i).second);
    }
    if (i % 1000 == 0) {
      REQUIRE(index.size() == model.size());
      for (const auto& [k, v] : model) REQUIRE(index.find(k) == v);
    }
  }
}

TEST_CASE("UpdateQueue: bounded, FIFO per producer, payloads intact") {
  UpdateQueue queue(64, 3, 2);
  const float v[3] = {1, 2, 3}, y[2] = {4, 5};
  for (PointId id = 0; id < 64; ++id) CHECK(queue.try_push(Update::insert(id, v, y)));
  CHECK_FALSE(queue.try_push(Update::insert(64, v, y)));
  std::vector<QueuedOp> ops;
  CHECK(queue.drain(1000, ops) == 64);
  for (PointId id = 0; id < 64; ++id) {
    CHECK(ops[id].id == id);
    CHECK(queue.vector_of(ops[id])[2] == 3.0f);
    CHECK(queue.values_of(ops[id])[1] == 5.0f);
  }
  queue.release(ops);
  CHECK(queue.try_push(Update::erase(1)));

  // Four producers; each producer's ids must come out in its push order.
  UpdateQueue shared(128, 1, 0);
  std::vector<std::thread> producers;
  constexpr PointId kPer = 50'000;
  for (PointId p = 0; p < 4; ++p) {
    producers.emplace_back([&, p] {
      const float x[1] = {float(p)};
      for (PointId i = 0; i < kPer; ++i) shared.push(Update::move((p << 32) | i, x));
    });
  }
  std::vector<PointId> last(4, 0);
  std::size_t received = 0;
  bool ordered = true;
  std::vector<QueuedOp> batch;
  while (received < 4 * kPer) {
    batch.clear();
    received += shared.drain(1000, batch);
    for (const auto& op : batch) {
      const PointId p = op.id >> 32, i = op.id & 0xffffffffu;
      if (i != 0 && i != last[p] + 1) ordered = false;
      last[p] = i;
      if (shared.vector_of(op)[0] != float(p)) ordered = false;
    }
    shared.release(batch);
  }
  for (auto& t : producers) t.join();
  CHECK(ordered);
  CHECK(received == 4 * kPer);
}

TEST_CASE("Catalog reuses the lowest free slot and shrinks the scanned range") {
  StoreConfig c;
  c.dim = 1;
  Catalog catalog(c);
  UpdateQueue queue(16, 1, 0);
  const float x[1] = {0};
  auto run = [&](std::vector<Update> updates) {
    for (const auto& u : updates) REQUIRE(queue.try_push(u));
    std::vector<QueuedOp> ops;
    queue.drain(100, ops);
    catalog.reserve_for(catalog.slots_needed(ops));
    ResolvedBatch batch;
    PublishReport report;
    catalog.resolve(ops, queue, batch, report);
    queue.release(ops);
    return batch;
  };
  auto b = run({Update::insert(10, x), Update::insert(11, x), Update::insert(12, x), Update::insert(13, x)});
  CHECK(b.slot_count == 4);
  b = run({Update::erase(11), Update::erase(13)});
  CHECK(b.slot_count == 3);  // slot 3 was the top: the range shrinks
  b = run({Update::insert(20, x)});
  REQUIRE(b.id_slots.size() == 1);
  CHECK(b.id_slots[0] == 1);  // lowest free slot reused
  b = run({Update::erase(12), Update::erase(20), Update::erase(10)});
  CHECK(b.slot_count == 0);
  CHECK(catalog.size() == 0);
  // Move then erase then re-insert in one batch: one write per slot and channel, last wins.
  b = run({Update::insert(1, x), Update::move(1, x), Update::erase(1), Update::insert(2, x)});
  CHECK(b.id_slots.size() == 1);
  CHECK(b.ids[0] == 2);
  CHECK(b.vector_slots.size() == 1);
}
