// Unit tests of the host machinery: the id index against std::unordered_map, the update
// queue's capacity and FIFO order, the catalogue's slot reuse, and its resolution of a batch on
// the publish pool against the resolution in queue order; the load's checked copy.
#include <array>
#include <atomic>
#include <bit>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/catalog.hpp"
#include "core/id_index.hpp"
#include "core/streaming_copy.hpp"
#include "core/update_queue.hpp"
#include "core/id_index_model.hpp"
#include "support/test_support.hpp"

using namespace test;
using namespace streamknn::detail;

TEST_CASE("IdIndex agrees with std::unordered_map over random inserts and erases") {
  auto g = rng(4000);
  IdIndex index;
  IdModel model;
  std::uniform_int_distribution<PointId> small_id(0, 5000);  // many collisions and re-inserts
  for (std::uint32_t i = 0; i < 200'000; ++i) {
    const PointId id = (g() & 1) ? small_id(g) : g() % (kInvalidId - 1);
    const bool erase = g() % 3 == 0;
    edit_both(index, model, id, i, erase);
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

TEST_CASE("UpdateQueue ring: exact capacity, FIFO across laps, drains carried before a release") {
  // A model of the queue (queued, then drained-not-released) against random single-threaded
  // operations, for capacities that are and are not powers of two. A second drain before the
  // release is what publish does after an OutOfMemory (Engine::publish keeps drained_).
  auto g = rng(4100);
  for (const std::size_t capacity : {1u, 2u, 3u, 5u, 8u, 63u, 64u, 100u}) {
    CAPTURE(capacity);
    UpdateQueue queue(capacity, 2, 1);
    REQUIRE(queue.capacity() == capacity);
    std::deque<PointId> queued, drained;
    std::vector<QueuedOp> out;
    PointId next_id = 0;
    for (int step = 0; step < 20'000; ++step) {
      const auto what = g() % 8;
      if (what < 2) {  // try_push
        const float v[2] = {float(next_id), -float(next_id)}, y[1] = {float(next_id) + 0.5f};
        const bool room = queued.size() + drained.size() < capacity;
        REQUIRE(queue.try_push(Update::insert(next_id, v, y)) == room);
        if (room) queued.push_back(next_id++);
        REQUIRE(queue.queued() == queued.size());
      } else if (what < 4) {  // try_push of a batch: one run of free cells, at least one if any is free
        const std::size_t n = 1 + g() % (capacity + 2);
        std::vector<std::array<float, 3>> payloads(n);
        std::vector<Update> batch;
        for (std::size_t i = 0; i < n; ++i) {
          const PointId id = next_id + i;
          payloads[i] = {float(id), -float(id), float(id) + 0.5f};
          batch.push_back(Update::insert(id, std::span<const float>(payloads[i].data(), 2),
                                         std::span<const float>(payloads[i].data() + 2, 1)));
        }
        const std::size_t room = capacity - queued.size() - drained.size();
        const std::size_t got = queue.try_push(std::span<const Update>(batch));
        REQUIRE(got <= std::min(n, room));
        REQUIRE((got == 0) == (room == 0));
        for (std::size_t i = 0; i < got; ++i) queued.push_back(next_id++);
        REQUIRE(queue.queued() == queued.size());
      } else if (what < 7) {  // drain, appending to what an earlier drain left unreleased
        const std::size_t max = g() % (capacity + 2);
        const std::size_t before = out.size();
        const std::size_t got = queue.drain(max, out);
        REQUIRE(got == std::min(max, queued.size()));
        REQUIRE(out.size() == before + got);
        for (std::size_t i = before; i < out.size(); ++i) {
          REQUIRE(out[i].id == queued.front());
          REQUIRE(out[i].kind == UpdateKind::Insert);
          REQUIRE(out[i].has_target);
          const auto v = queue.vector_of(out[i]);
          const auto y = queue.values_of(out[i]);
          REQUIRE(v.size() == 2);
          REQUIRE(y.size() == 1);
          REQUIRE(v[0] == float(out[i].id));
          REQUIRE(v[1] == -float(out[i].id));
          REQUIRE(y[0] == float(out[i].id) + 0.5f);
          drained.push_back(queued.front());
          queued.pop_front();
        }
        REQUIRE(queue.queued() == queued.size());
      } else {  // release everything drained
        queue.release(out);
        out.clear();
        drained.clear();
      }
    }
  }
}

TEST_CASE("UpdateQueue ring: 4 producers against a draining consumer") {
  // Each producer's ids must come out in its push order, nothing lost or duplicated, and a
  // drain must return every update whose push returned before the drain began, even when an
  // earlier cell was claimed by a producer that has not filled it yet.
  constexpr std::size_t kCapacity = 1000;  // not a power of two
  constexpr PointId kProducers = 4, kPer = 200'000;
  UpdateQueue queue(kCapacity, 2, 0);
  std::array<std::atomic<PointId>, kProducers> returned{};  // pushes returned, per producer
  std::vector<std::thread> producers;
  for (PointId p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (PointId i = 0; i < kPer; ++i) {
        const float x[2] = {float(p), float(i)};
        const Update u = Update::move((p << 32) | i, x);
        if (i % 3 == 2 && i + 7 < kPer) {  // a batch of 8, pushed whole
          std::array<std::array<float, 2>, 8> xs;
          std::vector<Update> batch;
          for (PointId j = 0; j < 8; ++j) {
            xs[j] = {float(p), float(i + j)};
            batch.push_back(Update::move((p << 32) | (i + j), xs[j]));
          }
          queue.push(std::span<const Update>(batch));
          i += 7;
        } else if (i % 2 == 0) {
          queue.push(u);
        } else {
          while (!queue.try_push(u)) std::this_thread::yield();
        }
        returned[p].store(i + 1, std::memory_order_release);
      }
    });
  }
  std::array<PointId, kProducers> received{};
  std::size_t total = 0, late = 0, disordered = 0, bad_payload = 0;
  std::vector<QueuedOp> batch;
  auto g = rng(4200);
  for (;;) {
    std::array<PointId, kProducers> before{};
    bool finished = true;
    for (PointId p = 0; p < kProducers; ++p) {
      before[p] = returned[p].load(std::memory_order_acquire);
      finished = finished && before[p] == kPer;
    }
    const std::size_t carried = batch.size();
    const std::size_t got = queue.drain(kCapacity, batch);  // at most kCapacity queued: takes all
    for (std::size_t k = carried; k < batch.size(); ++k) {
      const QueuedOp& op = batch[k];
      const PointId p = op.id >> 32, i = op.id & 0xffffffffu;
      ++total;
      if (p >= kProducers) {
        ++disordered;
        continue;
      }
      if (i != received[p]) ++disordered;  // lost, duplicated or reordered
      received[p] = i + 1;
      const auto v = queue.vector_of(op);
      if (v[0] != float(p) || v[1] != float(i)) ++bad_payload;
    }
    for (PointId p = 0; p < kProducers; ++p) late += received[p] < before[p];
    if (g() % 4 != 0) {  // else keep the batch drained and unreleased across the next drain
      queue.release(batch);
      batch.clear();
    }
    if (finished && got == 0) break;
  }
  queue.release(batch);
  for (auto& t : producers) t.join();
  CHECK(disordered == 0);
  CHECK(late == 0);
  CHECK(bad_payload == 0);
  CHECK(total == kProducers * kPer);
  for (PointId p = 0; p < kProducers; ++p) CHECK(received[p] == kPer);
  std::vector<QueuedOp> rest;
  CHECK(queue.drain(kCapacity, rest) == 0);
  CHECK(queue.queued() == 0);
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
    const Catalog::BatchShape shape = catalog.shape_of(ops);
    catalog.reserve_for(shape);
    ResolvedBatch batch;
    PublishReport report;
    catalog.resolve(ops, shape, queue, batch, report);
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

namespace {

/// A channel of a resolved batch as slot -> written data, so batches that list their writes in
/// different orders compare equal when they write the same.
template <class T>
std::map<std::uint32_t, std::vector<T>> by_slot(const std::vector<std::uint32_t>& slots, const std::vector<T>& data) {
  std::map<std::uint32_t, std::vector<T>> out;
  const std::size_t width = slots.empty() ? 0 : data.size() / slots.size();
  REQUIRE(width * slots.size() == data.size());
  for (std::size_t e = 0; e < slots.size(); ++e) {
    if (out.count(slots[e]) != 0) FAIL_CHECK("slot ", slots[e], " written twice in one channel");
    out[slots[e]].assign(data.begin() + std::ptrdiff_t(e * width), data.begin() + std::ptrdiff_t((e + 1) * width));
  }
  return out;
}

}  // namespace

TEST_CASE("Catalog: a large batch resolved on the publish pool writes what resolving in order writes") {
  for (const TargetSpec target : {TargetSpec::none(), TargetSpec::classes(5), TargetSpec::outputs(3)}) {
    for (const bool with_erase : {false, true}) {
      CAPTURE(int(target.kind));
      CAPTURE(with_erase);
      auto g = rng(41 + std::uint64_t(target.kind) * 2 + with_erase);
      StoreConfig c;
      c.dim = 2;
      c.target = target;
      StoreConfig one = c, four = c;
      one.publish_threads = 1;
      four.publish_threads = 4;
      Catalog in_order(one), on_pool(four);
      const std::size_t points = 20000, batch_ops = 3 * kParallelPublishMin;
      UpdateQueue queue(batch_ops, 2, target.kind == TargetSpec::Kind::Outputs ? 3 : 0);
      std::deque<std::vector<float>> storage;  // the updates' vectors and values, until pushed
      auto update_for = [&](UpdateKind kind, PointId id) {
        const std::vector<float>& v = storage.emplace_back(uniform(g, 2));
        const std::vector<float>& values = storage.emplace_back(uniform(g, 3));
        switch (kind) {
          case UpdateKind::Insert:
            if (target.kind == TargetSpec::Kind::Classes) return Update::insert(id, v, std::int32_t(g() % 5));
            if (target.kind == TargetSpec::Kind::Outputs) return Update::insert(id, v, values);
            return Update::insert(id, v);
          case UpdateKind::Move: return Update::move(id, v);
          case UpdateKind::SetTarget:
            if (target.kind == TargetSpec::Kind::Outputs) return Update::set_target(id, values);
            return Update::set_target(id, std::int32_t(g() % 5));
          case UpdateKind::Erase: break;
        }
        return Update::erase(id);
      };
      // expect_pool: whether the pool resolved the batch (checked for random writes only).
      auto publish = [&](std::vector<Update> updates, std::optional<bool> expect_pool) {
        for (const auto& u : updates) REQUIRE(queue.try_push(u));
        std::vector<QueuedOp> ops;
        queue.drain(updates.size(), ops);
        ResolvedBatch a, b;
        PublishReport ra, rb;
        const Catalog::BatchShape shape_a = in_order.shape_of(ops), shape_b = on_pool.shape_of(ops);
        CHECK(shape_a.slots == shape_b.slots);
        CHECK(shape_b.moves_only == expect_pool.value_or(false));
        in_order.reserve_for(shape_a);
        on_pool.reserve_for(shape_b);
        a.reserve(ops.size(), 2, 3);
        b.reserve(ops.size(), 2, 3);
        in_order.resolve(ops, shape_a, queue, a, ra);
        on_pool.resolve(ops, shape_b, queue, b, rb);
        queue.release(ops);
        CHECK(a.slot_count == b.slot_count);
        CHECK(by_slot(a.vector_slots, a.vectors) == by_slot(b.vector_slots, b.vectors));
        CHECK(by_slot(a.target_slots, a.labels) == by_slot(b.target_slots, b.labels));
        CHECK(by_slot(a.target_slots, a.values) == by_slot(b.target_slots, b.values));
        CHECK(by_slot(a.id_slots, a.ids) == by_slot(b.id_slots, b.ids));
        check_same_report(ra, rb);
        // The pool lists the writes of each quarter of the slot range in turn (its 4 parts), so
        // no write is followed by one more than a third of the range lower; in queue order,
        // random slots often are. So this shows which path ran.
        auto quarters_in_turn = [&](const ResolvedBatch& x) {
          for (std::size_t e = 1; e < x.vector_slots.size(); ++e) {
            if (std::size_t(x.vector_slots[e]) + x.slot_count / 3 < x.vector_slots[e - 1]) return false;
          }
          return true;
        };
        if (expect_pool) {
          CHECK(quarters_in_turn(b) == *expect_pool);
          CHECK_FALSE(quarters_in_turn(a));
        }
        return ra;
      };
      std::vector<Update> load;
      for (PointId id = 1; id <= points; ++id) load.push_back(update_for(UpdateKind::Insert, id));
      CHECK(publish(load, std::nullopt).inserted == points);
      // Moves and target changes of random ids, many of them twice or more in the batch (the
      // last write wins), some of ids the store never had (rejected in queue order).
      std::vector<Update> batch;
      for (std::size_t i = 0; i < batch_ops; ++i) {
        const PointId id = 1 + g() % (points + points / 20);
        batch.push_back(update_for(g() % 3 == 0 ? UpdateKind::SetTarget : UpdateKind::Move, id));
      }
      if (with_erase) batch[batch_ops / 2] = Update::erase(7);  // sends the batch to resolve_in_order
      const PublishReport r = publish(batch, !with_erase);
      CHECK(r.rejected.size() > 0);
      CHECK(r.moved > 0);
      CHECK(r.retargeted > 0);
      CHECK(r.erased == (with_erase ? 1u : 0u));
    }
  }
}

TEST_CASE("copy_within copies and flags as the plain loop does, streaming or not, at any alignment and length") {
  auto g = rng(4100);
  const std::int32_t limit = std::bit_cast<std::int32_t>(100.0f);
  std::vector<double> doubles(300);
  for (double& x : doubles) x = 200.0 * (double(g()) / double(g.max()) - 0.5);  // some beyond 100
  const std::vector<float> floats(doubles.begin(), doubles.end());
  std::vector<float> out(300);
  for (const bool streaming : {false, true}) {
    for (std::size_t at = 0; at < 5; ++at) {  // written at an offset of `at` floats: aligned or not
      for (const std::size_t start : {std::size_t(0), std::size_t(101)}) {
        for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(64), std::size_t(190)}) {
          CAPTURE(streaming);
          CAPTURE(at);
          CAPTURE(start);
          CAPTURE(n);
          bool within = true;
          for (std::size_t i = 0; i < n; ++i) within &= std::fabs(floats[start + i]) <= 100.0f;
          for (const bool from_doubles : {false, true}) {
            std::fill(out.begin(), out.end(), -1.0f);
            const bool got = from_doubles ? copy_within(doubles.data() + start, out.data() + at, n, limit, streaming)
                                          : copy_within(floats.data() + start, out.data() + at, n, limit, streaming);
            CHECK(got == within);
            for (std::size_t i = 0; i < n; ++i) CHECK(out[at + i] == floats[start + i]);
            CHECK(out[at + n] == -1.0f);  // nothing written past the end
          }
        }
      }
    }
  }
  // NaN and the infinities lie beyond any bound, FLT_MAX's too.
  const std::int32_t any_finite = std::bit_cast<std::int32_t>(std::numeric_limits<float>::max());
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    std::vector<float> xs(37, 1.0f);
    CHECK(copy_within(xs.data(), out.data(), xs.size(), any_finite, true));
    xs[33] = bad;
    CHECK_FALSE(copy_within(xs.data(), out.data(), xs.size(), any_finite, true));
    CHECK_FALSE(copy_within(xs.data(), out.data(), xs.size(), any_finite, false));
  }
}
