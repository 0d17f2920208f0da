// The sharded store's attribute words, predicates and radius searches against one ReferenceSet
// fed the same updates: inserts with attributes, set_attributes across publishes, predicates (one
// for all queries and one per query), search_within, radius_search with and without a cap, every
// metric; the answers must be identical (ids, distances bit for bit, counts, capped flags), bad
// input is refused with the single store's words, and attribute words survive save / load.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>

#include <unistd.h>

#include "mpi/mpi_support.hpp"

using namespace test;
using namespace mpitest;

namespace {

using mpitest::check_same;
constexpr std::size_t kWords = 2;

StoreConfig filter_config(Metric metric, std::size_t dim) {
  StoreConfig c = config_for(dim, metric, TargetSpec::none());
  c.attribute_words = kWords;
  c.cpu_threads = 1;
  c.publish_threads = 1;
  return c;
}

/// Random attribute words: word 0 a few flag bits, word 1 a small number (for ranges).
std::array<std::uint32_t, kWords> random_words(std::mt19937_64& g) {
  return {std::uint32_t(g() % 8), std::uint32_t(g() % 100)};
}

/// One round's updates, the same on every rank: inserts (some with attributes), moves, erases and
/// set_attributes; `words` keeps the attribute arrays alive.
std::vector<Update> filter_updates(std::mt19937_64& g, Metric metric, std::size_t dim, bool grid,
                                   std::deque<std::vector<float>>& vectors,
                                   std::deque<std::array<std::uint32_t, kWords>>& words) {
  std::vector<Update> out;
  const std::size_t n = 30 + g() % 20;
  for (std::size_t i = 0; i < n; ++i) {
    const PointId id = 1000 + (g() % 80) * 7919;
    std::vector<float>& v = vectors.emplace_back(points_for(metric, g, 1, dim));
    if (grid) {
      for (float& x : v) x = std::round(x * 3);
    }
    const auto& w = words.emplace_back(random_words(g));
    const int kind = int(g() % 10);
    if (kind < 3) {
      out.push_back(Update::insert(id, std::span<const float>(v)).with_attributes(w));
    } else if (kind < 4) {
      out.push_back(Update::insert(id, std::span<const float>(v)));  // zeros
    } else if (kind < 6) {
      out.push_back(Update::move(id, std::span<const float>(v)));
    } else if (kind < 7) {
      out.push_back(Update::erase(id));
    } else {
      out.push_back(Update::set_attributes(id, w));
    }
  }
  return out;
}

/// This rank's predicates for n queries: none, one for all, or one per query.
std::vector<Predicate> rank_predicates(std::mt19937_64& g, std::size_t n, int round) {
  auto one = [&] {
    Predicate p;
    if (g() % 2) p = p.require(0, std::uint32_t(1u << (g() % 3)));
    if (g() % 3 == 0) p = p.forbid(0, 4u);
    if (g() % 2) {
      const std::uint32_t lo = std::uint32_t(g() % 60);
      p = p.within(1, lo, lo + std::uint32_t(g() % 50));
    }
    return p;
  };
  std::vector<Predicate> out;
  if (round % 3 == 1) {
    out.push_back(one());
  } else if (round % 3 == 2) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(one());
  }
  return out;
}

void check_same(const RadiusNeighbors& got, const RadiusNeighbors& want) {
  REQUIRE(got.num_queries == want.num_queries);
  CHECK(got.epoch == want.epoch);
  CHECK(got.offsets == want.offsets);
  CHECK(got.ids == want.ids);
  CHECK(got.cap_hit == want.cap_hit);
  CHECK(same_bits(got.distances, want.distances));
}

/// A radius that catches some points but not all, per metric.
double radius_for(Metric metric, std::mt19937_64& g) {
  const double u = double(g() % 1000) / 1000.0;
  switch (metric) {
    case Metric::L2: return 0.2 + 1.2 * u;
    case Metric::InnerProduct: return -0.5 + u;
    case Metric::Cosine: return 0.1 + 0.9 * u;
    case Metric::Haversine: return 1e6 + 4e6 * u;
  }
  return 1.0;
}

void run_filters(Metric metric, std::size_t dim, bool grid, std::uint64_t salt) {
  const int rank = world_rank(), size = world_size();
  auto g = rng(salt);                                    // the same on every rank
  auto mine = rng(salt * 131 + std::uint64_t(rank) + 1);  // this rank's queries
  const StoreConfig config = filter_config(metric, dim);
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  std::uint64_t found = 0;
  for (int round = 0; round < 8; ++round) {
    std::deque<std::vector<float>> vectors;
    std::deque<std::array<std::uint32_t, kWords>> words;
    for (const Update& u : filter_updates(g, metric, dim, grid, vectors, words)) {
      single.push(u);
      if (int(u.id % PointId(size)) == rank) sharded.push(u);
    }
    const PublishReport want = single.publish();
    const PublishReport got = sharded.publish();
    check_same(got, want);
    CHECK(got.attributed == want.attributed);

    const std::size_t n = std::size_t(mine() % 5) + (rank == 0 ? 1 : 0);  // some ranks ask nothing
    std::vector<float> q = points_for(metric, mine, n, dim);
    if (grid) {
      for (float& x : q) x = std::round(x * 3);
    }
    const std::vector<Predicate> where = rank_predicates(mine, n, round + rank);
    std::vector<IdRange> visible;
    if (round % 4 == 3) {
      for (std::size_t i = 0; i < n; ++i) visible.push_back({1000, 1000 + (mine() % 80) * 7919});
    }
    const std::size_t k = 1 + mine() % 10;
    // On the grid, whole radii: points exactly on the boundary are within.
    const double r = grid ? std::max(2.0, std::round(3 * radius_for(metric, mine))) : radius_for(metric, mine);
    const std::size_t cap = round % 4 == 1 ? kNoLimit : 1 + mine() % 3;
    check_same(sharded.search(q, k, visible, where), single.search(q, k, visible, where));
    check_same(sharded.search_within(q, k, r, visible, where), single.search_within(q, k, r, visible, where));
    const RadiusNeighbors want_r = single.radius_search(q, r, cap, visible, where);
    check_same(sharded.radius_search(q, r, cap, visible, where), want_r);
    found += want_r.ids.size();
  }
  // The rounds found points within the radius on some rank (the test below hits caps on purpose).
  std::uint64_t all = 0;
  MPI_Allreduce(&found, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(all > 0);
}

}  // namespace

TEST_CASE("sharded predicates and radius searches equal one store's: L2") { run_filters(Metric::L2, 3, false, 11); }
TEST_CASE("sharded predicates and radius searches equal one store's: L2 on a grid, exact ties") {
  run_filters(Metric::L2, 2, true, 12);
}
TEST_CASE("sharded predicates and radius searches equal one store's: inner product") {
  run_filters(Metric::InnerProduct, 4, false, 13);
}
TEST_CASE("sharded predicates and radius searches equal one store's: cosine") {
  run_filters(Metric::Cosine, 3, false, 14);
}
TEST_CASE("sharded predicates and radius searches equal one store's: haversine") {
  run_filters(Metric::Haversine, 2, false, 15);
}

TEST_CASE("sharded radius search: a cap hit on one shard, or only by the union, is reported") {
  const int rank = world_rank();
  const StoreConfig config = filter_config(Metric::L2, 1);
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  for (PointId id = 1; id <= 40; ++id) {
    const float v[1] = {float(id)};
    single.insert(id, v);
    if (rank == 0) sharded.insert(id, v);
  }
  single.publish();
  sharded.publish();
  const std::vector<float> q = {20.f};
  for (std::size_t cap : {std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(11), std::size_t(40)}) {
    const RadiusNeighbors got = sharded.radius_search(q, 5.0, cap), want = single.radius_search(q, 5.0, cap);
    check_same(got, want);
    CHECK(got.capped(0) == (cap < 11));
  }
  const RadiusNeighbors none = sharded.radius_search(std::vector<float>{}, 5.0);
  CHECK(none.num_queries == 0);
  CHECK(none.offsets.size() == 1);
}

TEST_CASE("sharded bad predicates and radii: refused at the call with the single store's words") {
  const int rank = world_rank(), size = world_size();
  const StoreConfig config = filter_config(Metric::L2, 2);
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  const float v[2] = {1, 2};
  const std::uint32_t three[3] = {1, 2, 3};
  const std::uint32_t two[2] = {1, 2};
  CHECK_THROWS_AS(sharded.push(Update::insert(7, v).with_attributes(three)), InvalidArgument);
  CHECK_THROWS_AS(sharded.set_attributes(7, std::span<const std::uint32_t>(three, 1)), InvalidArgument);
  if (rank == 0) sharded.push(Update::insert(7, v).with_attributes(two));
  single.push(Update::insert(7, v).with_attributes(two));
  single.publish();
  sharded.publish();
  const std::vector<float> q = {0, 0, 1, 1};
  const int bad = size - 1;
  auto same_words = [&](auto&& ours, auto&& theirs) {
    const std::string got = message_of<InvalidArgument>(ours), want = message_of<InvalidArgument>(theirs);
    const std::size_t a = got.find(": "), b = want.find(": ");
    REQUIRE(a != std::string::npos);
    REQUIRE(b != std::string::npos);
    CHECK(got.substr(a) == want.substr(b));  // the caller's name aside
  };
  const std::vector<Predicate> three_preds(3, Predicate{});
  const std::vector<Predicate> wide_word{Predicate{}.require(3, 1)};
  const std::vector<Predicate> range_beyond{Predicate{}.within(2, 0, 1)};
  Predicate inverted = Predicate{}.within(1, 5, 1);
  const std::vector<Predicate> inverted_range{inverted};
  if (rank == bad) {
    same_words([&] { sharded.search(q, 1, {}, three_preds); }, [&] { single.search(q, 1, {}, three_preds); });
    same_words([&] { sharded.search(q, 1, {}, wide_word); }, [&] { single.search(q, 1, {}, wide_word); });
    same_words([&] { sharded.search(q, 1, {}, range_beyond); }, [&] { single.search(q, 1, {}, range_beyond); });
    same_words([&] { sharded.search(q, 1, {}, inverted_range); }, [&] { single.search(q, 1, {}, inverted_range); });
    same_words([&] { sharded.radius_search(q, -1.0); }, [&] { single.radius_search(q, -1.0); });
    same_words([&] { sharded.radius_search(q, std::nan("")); }, [&] { single.radius_search(q, std::nan("")); });
    same_words([&] { sharded.radius_search(q, 1.0, 0); }, [&] { single.radius_search(q, 1.0, 0); });
    same_words([&] { sharded.search_within(q, 0, 1.0); }, [&] { single.search_within(q, 0, 1.0); });
  } else {  // the others' calls go on, answered
    for (int i = 0; i < 8; ++i) {
      if (i < 4) check_same(sharded.search(q, 1), single.search(q, 1));
      if (i >= 4 && i < 7) check_same(sharded.radius_search(q, 3.0), single.radius_search(q, 3.0));
      if (i == 7) check_same(sharded.search_within(q, 1, 3.0), single.search_within(q, 1, 3.0));
    }
  }
  // Predicates on a store without attribute words: refused as the single store refuses them.
  StoreConfig plain = filter_config(Metric::L2, 2);
  plain.attribute_words = 0;
  DistributedReferenceSet no_words(MPI_COMM_WORLD, plain);
  ReferenceSet single_plain(plain);
  const std::vector<Predicate> one(1, Predicate{});
  same_words([&] { no_words.search(q, 1, {}, one); }, [&] { single_plain.search(q, 1, {}, one); });
}

TEST_CASE("sharded attribute words survive save and load") {
  const int rank = world_rank(), size = world_size();
  auto g = rng(91);
  const StoreConfig config = filter_config(Metric::L2, 3);
  std::string dir = concat_str("/tmp/streamknn-sharded-attr-", getppid());
  if (rank == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string path = dir + "/store.skm";
  std::optional<DistributedReferenceSet> sharded;
  sharded.emplace(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  for (int round = 0; round < 3; ++round) {
    std::deque<std::vector<float>> vectors;
    std::deque<std::array<std::uint32_t, kWords>> words;
    for (const Update& u : filter_updates(g, Metric::L2, 3, false, vectors, words)) {
      single.push(u);
      if (int(u.id % PointId(size)) == rank) sharded->push(u);
    }
    single.publish();
    sharded->publish();
  }
  sharded->save(path);
  sharded.reset();
  DistributedReferenceSet again = DistributedReferenceSet::load(MPI_COMM_WORLD, path, {.backend = config.backend});
  CHECK(again.config().attribute_words == kWords);
  const std::vector<float> q = points_for(Metric::L2, g, 4, 3);
  for (int i = 0; i < 6; ++i) {
    const std::vector<Predicate> where = rank_predicates(g, 4, i);
    check_same(again.search(q, 5, {}, where), single.search(q, 5, {}, where));
    check_same(again.radius_search(q, 0.8, kNoLimit, {}, where), single.radius_search(q, 0.8, kNoLimit, {}, where));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}
