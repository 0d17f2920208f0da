// Attribute words are durable: a checkpoint and a journal carry them (format version 2), a store
// loaded from them answers predicates as the saved one did (on either backend: the engine keeps the
// copy it saves), and files of format version 1 (no attribute words) still load.
#include "core/checkpoint_crc.hpp"
#include "reliability/checkpoint_support.hpp"

using namespace checkpoint_test;

namespace {

StoreConfig words_config(std::size_t words) {
  StoreConfig c = test::config_for(2, Metric::L2, TargetSpec::classes(3));
  c.attribute_words = words;
  return c;
}

std::vector<PointId> available_near(const ReferenceSet& set, std::size_t k) {
  const float q[2] = {0, 0};
  std::vector<PointId> out;
  if (set.config().attribute_words == 0 || set.backend() != BackendKind::Cpu) {
    const Neighbors n = set.search(q, k);
    return {n.ids.begin(), n.ids.end()};
  }
  const Predicate free = Predicate{}.require(0, 1).within(2, 10, 20);
  const Neighbors n = set.search(q, k, {}, std::span(&free, 1));
  return {n.ids.begin(), n.ids.end()};
}

}  // namespace

TEST_CASE("checkpoint and journal carry attribute words; a store loaded from them filters alike") {
  ScratchDir dir;
  ReferenceSet set(words_config(3));
  for (PointId id = 0; id < 200; ++id) {
    const std::uint32_t words[3] = {std::uint32_t(id % 3 == 0), std::uint32_t(id * 7), std::uint32_t(id % 31)};
    const float v[2] = {float(id % 17), float(id / 17)};
    set.push(Update::insert(id, v, std::int32_t(id % 3)).with_attributes(words));
  }
  set.publish();
  set.save(dir.file("a.skc"));
  set.open_journal(dir.file("a.skj"));
  for (PointId id = 0; id < 200; id += 5) {
    const std::uint32_t words[3] = {1, 0, 15};
    set.push(Update::set_attributes(id, words));
  }
  set.erase(3);
  set.publish();
  const std::uint32_t words[3] = {1, 1, 12};
  set.push(Update::insert(1000, std::vector<float>{0.5f, 0.5f}, 1).with_attributes(words));
  set.publish();
  const auto want = available_near(set, 12);

  LoadReport report;
  const ReferenceSet loaded = ReferenceSet::load(dir.file("a.skc"), {.journal = dir.file("a.skj")}, &report);
  CHECK(report.replayed == 2);
  CHECK(loaded.config().attribute_words == 3);
  CHECK(loaded.epoch() == set.epoch());
  CHECK(available_near(loaded, 12) == want);
  CHECK(state_bytes(loaded) == state_bytes(set));
  // Saved again, loaded again: the same bytes.
  const ReferenceSet again = ReferenceSet::load_bytes(loaded.save_bytes());
  CHECK(state_bytes(again) == state_bytes(set));
}

TEST_CASE("checkpoint format version 1 (no attribute words) still loads") {
  ReferenceSet set(words_config(0));
  for (PointId id = 0; id < 20; ++id) set.push(Update::insert(id, std::vector<float>{float(id), 1}, 1));
  set.publish();
  auto bytes = set.save_bytes();
  REQUIRE(bytes[8] == std::byte{2});
  bytes[8] = std::byte{1};  // the version field; the layout of a store without words is version 1's
  const std::uint32_t crc = streamknn::detail::crc32c(bytes.data(), 44);
  std::memcpy(bytes.data() + 44, &crc, 4);
  const ReferenceSet old = ReferenceSet::load_bytes(bytes);
  CHECK(old.size() == 20);
  CHECK(old.config().attribute_words == 0);
  CHECK(available_near(old, 5) == available_near(set, 5));

  // A version-1 file that claims attribute words is refused by section.
  ReferenceSet with(words_config(1));
  with.push(Update::insert(1, std::vector<float>{1, 1}, 1).with_attributes(std::vector<std::uint32_t>{5}));
  with.publish();
  auto wbytes = with.save_bytes();
  wbytes[8] = std::byte{1};
  const std::uint32_t wcrc = streamknn::detail::crc32c(wbytes.data(), 44);
  std::memcpy(wbytes.data() + 44, &wcrc, 4);
  try {
    (void)ReferenceSet::load_bytes(wbytes);
    FAIL("accepted");
  } catch (const CheckpointError& e) {
    CHECK(e.section() == "ATTR");
  }
}

namespace {

/// A version-2 journal of a store without attribute words, rewritten as version 1 wrote it (four
/// counts per record, no attribute channel).
std::vector<std::byte> as_version_1(std::vector<std::byte> j) {
  auto u8 = [&](std::size_t at) { return reinterpret_cast<unsigned char*>(j.data()) + at; };
  std::uint32_t one = 1;
  std::memcpy(u8(8), &one, 4);
  const std::uint32_t head = streamknn::detail::crc32c(u8(0), 44);
  std::memcpy(u8(44), &head, 4);
  std::vector<std::byte> out(j.begin(), j.begin() + 48);
  for (std::size_t at = 48; at + 24 <= j.size();) {
    std::uint64_t length;
    std::memcpy(&length, u8(at + 8), 8);
    std::vector<std::byte> rec(j.begin() + std::ptrdiff_t(at), j.begin() + std::ptrdiff_t(at + 24 + length));
    rec.erase(rec.begin() + 24 + 16, rec.begin() + 24 + 20);  // the attribute writes' count (0)
    const std::uint64_t shorter = length - 4;
    std::memcpy(rec.data() + 8, &shorter, 8);
    const auto* r = reinterpret_cast<const unsigned char*>(rec.data());
    const std::uint32_t crc = streamknn::detail::crc32c(r + 24, shorter, streamknn::detail::crc32c(r + 8, 16));
    std::memcpy(rec.data() + 4, &crc, 4);
    out.insert(out.end(), rec.begin(), rec.end());
    at += 24 + length;
  }
  return out;
}

}  // namespace

TEST_CASE("journal format version 1 still replays, and is continued in version 1") {
  ScratchDir dir;
  ReferenceSet set(words_config(0));
  for (PointId id = 0; id < 30; ++id) set.push(Update::insert(id, std::vector<float>{float(id), 2}, 1));
  set.publish();
  set.save(dir.file("b.skc"));
  set.open_journal(dir.file("b.skj"));
  for (PointId id = 0; id < 30; id += 3) set.push(Update::move(id, std::vector<float>{float(id), 5}));
  set.publish();
  set.erase(4);
  set.publish();
  set.close_journal();
  write_bytes(dir.file("b.skj"), as_version_1(read_bytes(dir.file("b.skj"))));
  LoadReport report;
  ReferenceSet loaded = ReferenceSet::load(dir.file("b.skc"), {.journal = dir.file("b.skj")}, &report);
  CHECK(report.replayed == 2);
  CHECK(state_bytes(loaded) == state_bytes(set));
  // Continued: the new record is version 1 too, and the whole journal replays.
  loaded.open_journal(dir.file("b.skj"));
  loaded.push(Update::move(1, std::vector<float>{9, 9}));
  loaded.publish();
  loaded.close_journal();
  const auto bytes = read_bytes(dir.file("b.skj"));
  REQUIRE(bytes.size() > 12);
  CHECK(bytes[8] == std::byte{1});
  const ReferenceSet again = ReferenceSet::load(dir.file("b.skc"), {.journal = dir.file("b.skj")});
  CHECK(state_bytes(again) == state_bytes(loaded));
}

TEST_CASE("from_points with attribute words equals pushing them and publishing once") {
  const StoreConfig c = words_config(3);
  std::vector<PointId> ids;
  std::vector<float> vectors;
  std::vector<std::int32_t> labels;
  std::vector<std::uint32_t> attributes;
  ReferenceSet pushed(c);
  for (PointId id = 0; id < 120; ++id) {
    const std::uint32_t words[3] = {std::uint32_t(id % 3 == 0), std::uint32_t(id * 7), std::uint32_t(id % 31)};
    const float v[2] = {float(id % 11), float(id / 11)};
    pushed.push(Update::insert(id, v, std::int32_t(id % 3)).with_attributes(words));
    ids.push_back(id);
    vectors.insert(vectors.end(), v, v + 2);
    labels.push_back(std::int32_t(id % 3));
    attributes.insert(attributes.end(), words, words + 3);
  }
  pushed.publish();
  const ReferenceSet built = ReferenceSet::from_points(c, ids, vectors, labels, {}, attributes);
  CHECK(state_bytes(built) == state_bytes(pushed));
  CHECK(available_near(built, 12) == available_near(pushed, 12));
  // Without attributes every word is 0; a wrong count, or words for a store without any, is refused.
  const ReferenceSet zeros = ReferenceSet::from_points(c, ids, vectors, labels);
  if (zeros.backend() == BackendKind::Cpu) {  // available_near filters there only
    const auto none = available_near(zeros, 12);
    CHECK(std::all_of(none.begin(), none.end(), [](PointId id) { return id == kInvalidId; }));
  }
  const std::span<const std::uint32_t> short_words(attributes.data(), attributes.size() - 1);
  CHECK_THROWS_WITH_AS(ReferenceSet::from_points(c, ids, vectors, labels, {}, short_words),
                       doctest::Contains("attributes has 359 words"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ReferenceSet::from_points(words_config(0), ids, vectors, labels, {}, attributes),
                       doctest::Contains("carry none"), InvalidArgument);
}
