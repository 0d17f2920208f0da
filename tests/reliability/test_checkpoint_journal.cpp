// The journal: replay past a checkpoint equals the live store (publishes and KNN-Q write-backs),
// save() restarts it after the checkpoint's epoch, a torn last record is dropped and counted,
// a corrupted record or a missing stretch of epochs is refused by name.
#include <filesystem>

#include "reliability/checkpoint_support.hpp"

using namespace checkpoint_test;

namespace {

StoreConfig journal_config() {
  return small_config(3, Metric::L2, TargetSpec::outputs(2), test::backend_under_test());
}

void knnq_step(ReferenceSet& set, std::mt19937_64& g) {
  const auto states = test::uniform(g, 4 * 3);
  const std::int32_t actions[4] = {0, 1, 1, 0};
  const float targets[4] = {1.f, -0.5f, 2.f, 0.25f};
  (void)set.lookup_and_update(states, 3, actions, targets, 0.5f);
}

}  // namespace

TEST_CASE("journal: a checkpoint and the journal past it rebuild the live store, KNN-Q write-backs included") {
  ScratchDir dir;
  const std::string ckpt = dir.file("state.skc"), journal = dir.file("state.journal");
  auto g = test::rng(5201);
  ReferenceSet set(journal_config());
  set.open_journal(journal, {.sync_each_publish = false});
  std::vector<bool> present(150);
  for (int p = 0; p < 12; ++p) {
    random_batch(set, g, present, 20);
    set.publish();
  }
  set.save(ckpt);  // restarts the journal after this epoch
  const std::uint64_t saved = set.epoch();
  for (int p = 0; p < 15; ++p) {
    random_batch(set, g, present, 20);
    set.publish();
    if (p % 3 == 0) knnq_step(set, g);
  }
  set.publish();  // nothing queued: no new epoch, no record
  LoadReport report;
  ReferenceSet loaded = ReferenceSet::load(ckpt, {.journal = journal}, &report);
  CHECK(report.checkpoint_epoch == saved);
  CHECK(report.epoch == set.epoch());
  CHECK(report.replayed == set.epoch() - saved);
  CHECK(report.skipped == 0);
  CHECK(report.torn == 0);
  REQUIRE(loaded.epoch() == set.epoch());
  REQUIRE(state_bytes(loaded) == state_bytes(set));
  require_same_answers(set, loaded, g);

  // Continue the recovered journal, then recover again.
  set.close_journal();
  loaded.open_journal(journal);
  random_batch(loaded, g, present, 20);
  loaded.publish();
  knnq_step(loaded, g);
  ReferenceSet again = ReferenceSet::load(ckpt, {.journal = journal}, &report);
  CHECK(report.replayed == loaded.epoch() - saved);
  REQUIRE(state_bytes(again) == state_bytes(loaded));
  // A journal that does not end at the store's epoch belongs to another history.
  std::string msg = test::message_of<CheckpointError>([&] { set.open_journal(journal); });
  CHECK(msg.find("ends at epoch") != std::string::npos);
}

TEST_CASE("journal: a torn last record is dropped and counted; a corrupted one before the end is refused") {
  ScratchDir dir;
  const std::string ckpt = dir.file("state.skc"), journal = dir.file("state.journal");
  auto g = test::rng(5202);
  ReferenceSet set(journal_config());
  set.save(ckpt);
  set.open_journal(journal);
  std::vector<bool> present(100);
  std::vector<std::vector<std::byte>> states{state_bytes(set)};
  std::vector<std::uintmax_t> ends{std::filesystem::file_size(journal)};
  for (int p = 0; p < 8; ++p) {
    random_batch(set, g, present, 12);
    set.publish();
    states.push_back(state_bytes(set));
    ends.push_back(std::filesystem::file_size(journal));
  }
  set.close_journal();
  const auto whole = read_bytes(journal);
  const std::string copy = dir.file("copy.journal");
  for (std::size_t cut = ends[7] + 1; cut < ends[8]; cut += 7) {  // into the last record
    write_bytes(copy, std::span(whole).first(cut));
    LoadReport report;
    ReferenceSet loaded = ReferenceSet::load(ckpt, {.journal = copy}, &report);
    REQUIRE(report.torn == 1);
    REQUIRE(report.replayed == 7);
    REQUIRE(loaded.epoch() == 7);
    REQUIRE(state_bytes(loaded) == states[7]);
  }
  // Blocks of zeros after the last record (allocated, never written): torn as well.
  auto zeros = whole;
  zeros.resize(whole.size() + 4096);
  write_bytes(copy, zeros);
  LoadReport report;
  REQUIRE(state_bytes(ReferenceSet::load(ckpt, {.journal = copy}, &report)) == states[8]);
  CHECK(report.torn == 1);
  // Opening a journal with a torn end cuts it and goes on from the last whole record.
  write_bytes(copy, std::span(whole).first(ends[8] - 3));
  ReferenceSet at7 = ReferenceSet::load(ckpt, {.journal = copy});
  at7.open_journal(copy);
  CHECK(std::filesystem::file_size(copy) == ends[7]);
  // A flipped byte inside record 3, with records after it: corruption, named.
  auto bad = whole;
  bad[ends[3] + 30] ^= std::byte{0x10};
  write_bytes(copy, bad);
  try {
    (void)ReferenceSet::load(ckpt, {.journal = copy});
    FAIL("accepted");
  } catch (const CheckpointError& e) {
    CHECK(e.path() == copy);
    CHECK(e.section() == "record 3");
    CHECK(e.offset() == ends[3] + 4);
  }
}

TEST_CASE("journal: records the checkpoint already holds are skipped; a gap before the journal is refused") {
  ScratchDir dir;
  auto g = test::rng(5203);
  ReferenceSet set(journal_config());
  std::vector<bool> present(80);
  random_batch(set, g, present, 10);
  set.publish();
  set.save(dir.file("early.skc"));
  random_batch(set, g, present, 10);
  set.publish();
  set.open_journal(dir.file("late.journal"));  // starts after epoch 2
  random_batch(set, g, present, 10);
  set.publish();
  write_bytes(dir.file("bytes.skc"), set.save_bytes());  // a checkpoint that leaves the journal as it is
  std::string msg = test::message_of<CheckpointError>(
      [&] { (void)ReferenceSet::load(dir.file("early.skc"), {.journal = dir.file("late.journal")}); });
  CHECK(msg.find("missing") != std::string::npos);
  LoadReport report;
  ReferenceSet skipping = ReferenceSet::load(dir.file("bytes.skc"), {.journal = dir.file("late.journal")}, &report);
  CHECK(report.skipped == 1);
  CHECK(report.replayed == 0);
  CHECK(skipping.epoch() == 3);
  set.save(dir.file("now.skc"));  // restarts the journal after epoch 3: it holds no record now
  ReferenceSet loaded = ReferenceSet::load(dir.file("now.skc"), {.journal = dir.file("late.journal")}, &report);
  CHECK(report.skipped == 0);
  CHECK(report.replayed == 0);
  CHECK(loaded.epoch() == 3);
  // A journal of another shape is refused.
  ReferenceSet other(small_config(4, Metric::L2, TargetSpec::none(), BackendKind::Cpu));
  msg = test::message_of<CheckpointError>([&] { other.open_journal(dir.file("late.journal")); });
  CHECK(msg.find("another store") != std::string::npos);
}
