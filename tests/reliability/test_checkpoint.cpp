// Checkpoints: round trips on every metric and target kind after many publishes (erased slots
// included), onto the backend under test and the CPU; saving while producers push and queries
// run; and every corrupted, truncated, other-version or other-endian file refused by name.
#include <atomic>
#include <chrono>
#include <thread>

#include "reliability/checkpoint_support.hpp"

using namespace checkpoint_test;

namespace {

struct Shape {
  Metric metric;
  std::size_t dim;
};
constexpr Shape kShapes[] = {{Metric::L2, 2}, {Metric::L2, 9}, {Metric::InnerProduct, 5}, {Metric::Cosine, 3},
                             {Metric::Haversine, 2}};
const TargetSpec kTargets[] = {TargetSpec::none(), TargetSpec::classes(5), TargetSpec::outputs(3)};

/// Every backend a checkpoint of the backend under test must load onto.
std::vector<BackendKind> load_backends() {
  std::vector<BackendKind> out{BackendKind::Cpu};
  if (test::backend_under_test() != BackendKind::Cpu) out.push_back(test::backend_under_test());
  return out;
}

}  // namespace

TEST_CASE("checkpoint: round trips on every metric and target kind keep the epoch, the slots and the answers") {
  auto g = test::rng(5101);
  ScratchDir dir;
  for (const Shape shape : kShapes) {
    for (const TargetSpec target : kTargets) {
      for (const BackendKind saved_on : load_backends()) {
        CAPTURE(to_string(shape.metric));
        CAPTURE(shape.dim);
        CAPTURE(int(target.kind));
        CAPTURE(int(saved_on));
        ReferenceSet set(small_config(shape.dim, shape.metric, target, saved_on));
        std::vector<bool> present(300);
        for (int p = 0; p < 40; ++p) {
          random_batch(set, g, present, 25);
          set.publish();
        }
        const std::string path = dir.file("store.skc");
        set.save(path);
        const std::uint64_t saved_epoch = set.epoch();
        const auto saved_state = state_bytes(set);
        for (const BackendKind onto : load_backends()) {
          CAPTURE(int(onto));
          LoadReport report;
          ReferenceSet loaded = ReferenceSet::load(path, {.backend = onto}, &report);
          REQUIRE(report.checkpoint_epoch == saved_epoch);
          REQUIRE(loaded.epoch() == saved_epoch);
          REQUIRE(loaded.size() == set.size());
          REQUIRE(loaded.backend() == onto);
          REQUIRE(loaded.config().dim == set.config().dim);
          REQUIRE(loaded.config().metric == set.config().metric);
          REQUIRE(loaded.config().target == set.config().target);
          REQUIRE(state_bytes(loaded) == saved_state);
          require_same_answers(set, loaded, g);
          // Both go on the same way: the free slots are the same, so are the next states. The
          // live store is left at the saved epoch for the next backend's load; its twin, the
          // same checkpoint loaded on the backend it was saved on, goes on beside the loaded one.
          ReferenceSet twin = ReferenceSet::load(path, {.backend = saved_on});
          auto g1 = g, g2 = g;
          auto p1 = present, p2 = present;
          random_batch(twin, g1, p1, 30);
          random_batch(loaded, g2, p2, 30);
          REQUIRE(twin.publish().epoch == loaded.publish().epoch);
          REQUIRE(state_bytes(loaded) == state_bytes(twin));
          require_same_answers(twin, loaded, g);
        }
      }
    }
  }
}

TEST_CASE("checkpoint: an empty store, an emptied store, and bytes in memory") {
  ScratchDir dir;
  ReferenceSet empty(small_config(3, Metric::L2, TargetSpec::none(), test::backend_under_test()));
  empty.save(dir.file("empty.skc"));
  ReferenceSet a = ReferenceSet::load(dir.file("empty.skc"));
  REQUIRE(a.epoch() == 0);
  REQUIRE(a.size() == 0);

  const float v[3] = {1, 2, 3};
  empty.insert(7, v);
  empty.publish();
  empty.erase(7);
  empty.publish();
  const auto bytes = empty.save_bytes();
  ReferenceSet b = ReferenceSet::load_bytes(bytes);
  REQUIRE(b.epoch() == 2);
  REQUIRE(b.size() == 0);
  REQUIRE(b.search(v, 2).epoch == 2);
  REQUIRE(b.save_bytes() == bytes);
}

TEST_CASE("checkpoint: load options replace the saved settings, never the shape") {
  ReferenceSet set(small_config(4, Metric::Cosine, TargetSpec::classes(3), BackendKind::Cpu));
  const auto bytes = set.save_bytes();
  ReferenceSet loaded = ReferenceSet::load_bytes(bytes, {.cpu_threads = 2, .queue_capacity = 77});
  REQUIRE(loaded.config().cpu_threads == 2);
  REQUIRE(loaded.config().queue_capacity == 77);
  REQUIRE(loaded.config().metric == Metric::Cosine);
  REQUIRE_THROWS_AS(ReferenceSet::load_bytes(bytes, {.queue_capacity = 0}), InvalidArgument);
}

TEST_CASE("checkpoint: saves taken while producers push, a publisher publishes and queries run are one epoch each") {
  // The publisher replays a seeded sequence, so the state of every epoch is known in advance.
  const StoreConfig config = small_config(3, Metric::L2, TargetSpec::outputs(2), test::backend_under_test());
  const std::uint64_t seed = test::seed() ^ 5102;
  constexpr int kEpochs = 60;
  std::vector<std::vector<std::byte>> expected;
  {
    ReferenceSet ref(config);
    std::mt19937_64 g(seed);
    std::vector<bool> present(200);
    expected.push_back(state_bytes(ref));
    for (int e = 1; e <= kEpochs; ++e) {
      random_batch(ref, g, present, 20);
      REQUIRE(ref.publish().epoch == std::uint64_t(e));
      expected.push_back(state_bytes(ref));
    }
  }
  ReferenceSet set(config);
  std::atomic<bool> done{false};
  std::thread publisher([&] {
    std::mt19937_64 g(seed);
    std::vector<bool> present(200);
    for (int e = 1; e <= kEpochs; ++e) {
      random_batch(set, g, present, 20);
      set.publish();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // room for saves between publishes
    }
    done = true;
  });
  std::thread reader([&] {
    auto g = test::rng(5103);
    while (!done) (void)set.search(test::uniform(g, 3), 4);
  });
  ScratchDir dir;
  int saves = 0;
  while (!done || saves < 3) {
    set.save(dir.file("live.skc"));
    LoadReport report;
    ReferenceSet loaded = ReferenceSet::load(dir.file("live.skc"), {}, &report);
    REQUIRE(report.epoch <= std::uint64_t(kEpochs));
    REQUIRE(state_bytes(loaded) == expected[report.epoch]);
    ++saves;
  }
  publisher.join();
  reader.join();
  MESSAGE(saves, " consistent saves during ", kEpochs, " publishes");
}

namespace {

std::vector<std::byte> sample_checkpoint() {
  ReferenceSet set(small_config(3, Metric::L2, TargetSpec::classes(4), BackendKind::Cpu));
  auto g = test::rng(5104);
  std::vector<bool> present(40);
  for (int p = 0; p < 4; ++p) {
    random_batch(set, g, present, 15);
    set.publish();
  }
  return set.save_bytes();
}

}  // namespace

TEST_CASE("checkpoint: every flipped bit and every truncation is refused with a CheckpointError naming where") {
  const auto good = sample_checkpoint();
  REQUIRE(good.size() > 200);
  REQUIRE_NOTHROW(ReferenceSet::load_bytes(good));
  auto g = test::rng(5105);
  for (std::size_t at = 0; at < good.size(); ++at) {
    auto bad = good;
    bad[at] ^= std::byte(1u << (g() % 8));
    CAPTURE(at);
    try {
      (void)ReferenceSet::load_bytes(bad);
      FAIL("a flipped bit at byte ", at, " was accepted");
    } catch (const CheckpointError& e) {
      REQUIRE(e.path() == "<bytes>");
      REQUIRE(!e.section().empty());
      REQUIRE(std::string(e.what()).find(" at byte ") != std::string::npos);
    }
  }
  for (std::size_t size = 0; size < good.size(); ++size) {
    CAPTURE(size);
    REQUIRE_THROWS_AS(ReferenceSet::load_bytes(std::span(good).first(size)), CheckpointError);
  }
  auto longer = good;
  longer.push_back(std::byte{0});
  REQUIRE_THROWS_AS(ReferenceSet::load_bytes(longer), CheckpointError);
}

TEST_CASE("checkpoint: another format version, another byte order, a missing file and garbage name the file") {
  ScratchDir dir;
  const auto good = sample_checkpoint();
  auto newer = good;
  newer[8] = std::byte{3};  // the version field, little-endian
  write_bytes(dir.file("newer.skc"), newer);
  std::string msg = test::message_of<CheckpointError>([&] { (void)ReferenceSet::load(dir.file("newer.skc")); });
  CHECK(msg.find(dir.file("newer.skc")) != std::string::npos);
  CHECK(msg.find("format version 3") != std::string::npos);

  auto swapped = good;
  std::swap(swapped[12], swapped[15]);
  std::swap(swapped[13], swapped[14]);
  write_bytes(dir.file("swapped.skc"), swapped);
  msg = test::message_of<CheckpointError>([&] { (void)ReferenceSet::load(dir.file("swapped.skc")); });
  CHECK(msg.find("byte order") != std::string::npos);
  CHECK(msg.find("header at byte 12") != std::string::npos);

  auto flipped = good;
  flipped[good.size() - 22] ^= std::byte{0x40};  // in the last label (TARG ends 20 bytes before the end)
  write_bytes(dir.file("flipped.skc"), flipped);
  try {
    (void)ReferenceSet::load(dir.file("flipped.skc"));
    FAIL("accepted");
  } catch (const CheckpointError& e) {
    CHECK(e.path() == dir.file("flipped.skc"));
    CHECK(e.section() == "TARG");
    CHECK(std::string(e.what()).find("checksum mismatch") != std::string::npos);
  }
  msg = test::message_of<CheckpointError>([&] { (void)ReferenceSet::load(dir.file("absent.skc")); });
  CHECK(msg.find("absent.skc") != std::string::npos);
  msg = test::message_of<CheckpointError>([&] { (void)ReferenceSet::load(dir.path()); });
  CHECK(msg.find("not a regular file") != std::string::npos);
  write_bytes(dir.file("text.skc"), std::as_bytes(std::span("hello, this is not a checkpoint at all, only text ...")));
  msg = test::message_of<CheckpointError>([&] { (void)ReferenceSet::load(dir.file("text.skc")); });
  CHECK(msg.find("not a streamknn checkpoint") != std::string::npos);
  // An unwritable folder: the error names the path, and nothing is left behind.
  msg = test::message_of<CheckpointError>([&] {
    ReferenceSet(small_config(2, Metric::L2, TargetSpec::none(), BackendKind::Cpu)).save("/nonexistent-dir/x.skc");
  });
  CHECK(msg.find("/nonexistent-dir/x.skc") != std::string::npos);
}
