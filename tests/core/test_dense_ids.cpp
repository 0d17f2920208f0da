// The dense-prefix id index (IdIndex::dense_prefix: ids 0..n-1 at slot = id, no table) and its
// transitions to a table: every lookup, the size and the members stay those of an index built by
// inserts; a store loaded with ids 0..n-1 publishes, reports and saves as a pushed one does.
#include <map>
#include <unordered_map>

#include "core/id_index_model.hpp"
#include "support/test_support.hpp"

using namespace test;
using streamknn::detail::IdIndex;

namespace {

/// The index's members, sorted by id.
std::map<PointId, std::uint32_t> members(const IdIndex& index) {
  std::map<PointId, std::uint32_t> out;
  index.for_each([&](PointId id, std::uint32_t slot) { REQUIRE(out.emplace(id, slot).second); });
  return out;
}

std::map<PointId, std::uint32_t> prefix(std::size_t n) {
  std::map<PointId, std::uint32_t> out;
  for (std::size_t i = 0; i < n; ++i) out.emplace(i, std::uint32_t(i));
  return out;
}

void check_prefix(const IdIndex& index, std::size_t n) {
  CHECK(index.size() == n);
  CHECK(members(index) == prefix(n));
  for (PointId id : {PointId(0), PointId(n / 2), PointId(n - 1)}) {
    if (n > 0) CHECK(index.find(id) == std::optional<std::uint32_t>(std::uint32_t(id)));
  }
  for (PointId id : {PointId(n), PointId(n + 1), PointId(1) << 40, kInvalidId - 1}) {  // kInvalidId: never asked
    CHECK_FALSE(index.find(id).has_value());
  }
}

}  // namespace

TEST_CASE("IdIndex::is_dense_prefix accepts exactly 0, 1, ..., n-1") {
  CHECK(IdIndex::is_dense_prefix({}));
  std::vector<PointId> ids{0, 1, 2, 3, 4};
  CHECK(IdIndex::is_dense_prefix(ids));
  std::swap(ids[1], ids[2]);
  CHECK_FALSE(IdIndex::is_dense_prefix(ids));
  CHECK_FALSE(IdIndex::is_dense_prefix(std::vector<PointId>{1, 2, 3}));
  CHECK_FALSE(IdIndex::is_dense_prefix(std::vector<PointId>{0, 1, 3}));
  CHECK_FALSE(IdIndex::is_dense_prefix(std::vector<PointId>{0, 1, kInvalidId}));
}

TEST_CASE("a dense index answers as the table of its ids, and stays dense where nothing changes") {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1000)}) {
    CAPTURE(n);
    IdIndex index = IdIndex::dense_prefix(n);
    CHECK(index.dense());
    check_prefix(index, n);
    index.prefetch(3);
    CHECK_FALSE(index.erase(n).has_value());        // absent: no change
    if (n > 0) CHECK_FALSE(index.insert(0, 7));     // present: no change
    index.reserve(n);                               // no growth asked
    index.materialize();                            // the table holds the same members
    CHECK_FALSE(index.dense());
    check_prefix(index, n);
  }
}

TEST_CASE("a dense index builds its table at the first insert, erase or growth, then agrees with a map") {
  const std::size_t n = 5000;
  for (int first = 0; first < 4; ++first) {
    CAPTURE(first);
    IdIndex index = IdIndex::dense_prefix(n);
    std::unordered_map<PointId, std::uint32_t> model;
    for (std::size_t i = 0; i < n; ++i) model.emplace(i, std::uint32_t(i));
    if (first == 0) {
      CHECK(index.insert(n, 9));  // the next id, at another slot
      model.emplace(n, 9);
    } else if (first == 1) {
      CHECK(index.insert(PointId(1) << 40, std::uint32_t(n)));
      model.emplace(PointId(1) << 40, std::uint32_t(n));
    } else if (first == 2) {
      CHECK(index.erase(17) == std::optional<std::uint32_t>(17));
      model.erase(17);
    } else {
      index.reserve(n + 1);
    }
    CHECK_FALSE(index.dense());
    auto g = rng(4100 + first);
    for (std::uint32_t i = 0; i < 20'000; ++i) {
      const PointId id = g() % (2 * n);
      const bool erase = g() % 2 == 0;
      edit_both(index, model, id, i, erase);
    }
    CHECK(index.size() == model.size());
    CHECK(members(index) == std::map<PointId, std::uint32_t>(model.begin(), model.end()));
  }
}

TEST_CASE("a store loaded with ids 0..n-1 publishes, reports and saves as a pushed one") {
  // 20,000 x 16 floats is past the size where a load with other ids builds its index on a
  // second thread; the loaded store's index is dense until the erase and insert batches.
  auto g = rng(4200);
  const std::size_t n = 20000, dim = 16;
  const auto data = uniform(g, n * dim);
  std::vector<PointId> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = i;
  StoreConfig c = config_for(dim);
  c.queue_capacity = n;
  auto [loaded, pushed] = load_and_push(c, ids, data);
  CHECK(loaded.save_bytes() == pushed.save_bytes());
  const std::vector<float> q(data.begin() + 40 * dim, data.begin() + 43 * dim);
  const std::vector<float> far(dim, 20.0f);
  auto same = [&](auto&& step) {
    const PublishReport a = step(loaded), b = step(pushed);
    CHECK(a.epoch == b.epoch);
    check_same_report(a, b);
    CHECK(loaded.save_bytes() == pushed.save_bytes());
    CHECK(loaded.search(q, 5).ids == pushed.search(q, 5).ids);
    CHECK(loaded.search(q, 5).distances == pushed.search(q, 5).distances);
  };
  same([&](ReferenceSet& s) {  // moves only, one of an unknown id: the index stays dense
    s.move(41, far);
    s.move(n, far);
    return s.publish();
  });
  same([&](ReferenceSet& s) {  // a batch of moves large enough for the publish pool
    for (std::size_t i = 0; i < 10'000; ++i) s.move(PointId(3 * i) % (n + 50), std::span(data).subspan(i * dim, dim));
    return s.publish();
  });
  same([&](ReferenceSet& s) {  // an erase, an unknown erase, a duplicate insert
    s.erase(42);
    s.erase(n + 5);
    s.insert(3, far);
    return s.publish();
  });
  same([&](ReferenceSet& s) {  // inserts: the freed slot first, then new ones
    s.insert(n + 100, std::span(q).first(dim));
    s.insert(42, far);
    s.insert(7'000'000'000ULL, std::span(q).subspan(dim, dim));
    return s.publish();
  });
}
