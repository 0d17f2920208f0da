// The sharded store against one ReferenceSet fed the same updates: every rank keeps a whole
// single store as the reference and pushes its share of one random sequence (the same on every
// rank: one seed); answers must be identical (ids, distances bit for bit, labels, values), over
// random insert / move / erase / set-target sequences with id errors, every metric and target,
// per-rank k, visibility ranges, empty and refused batches, and a save / load round trip.
#include <cstdio>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

#include "mpi/mpi_support.hpp"

using namespace test;
using namespace mpitest;

namespace {

struct Setup {
  Metric metric;
  std::size_t dim;
  TargetSpec target;
  bool grid = false;  // small integer coordinates: many exact ties, broken by id across shards
  bool origin = false;  // L2 far from zero: StoreConfig::origin, vectors pushed as doubles
  bool collapsed = false;  // all distances round to a few float32 values: the exact order decides
};

constexpr double kOrigin[3] = {512'345.25, 5'401'234.5, -1'000.0};

/// Points (or, with `query`, query rows) of the setup. Collapsed: points (4096, 10^-5 u, ...) and
/// queries (0 or 1, u, ...): the distances differ by far less than a float32 step at 4,096.
std::vector<float> vectors_for(const Setup& s, std::mt19937_64& g, std::size_t n, bool query = false) {
  std::vector<float> v = points_for(s.metric, g, n, s.dim);
  if (s.grid) {
    for (float& x : v) x = std::round(x * 3);
  }
  for (std::size_t i = 0; s.collapsed && i < v.size(); ++i) {
    if (i % s.dim == 0) {
      v[i] = query ? (s.metric == Metric::InnerProduct ? 1.0f : 0.0f) : 4096.0f;
    } else if (!query) {
      v[i] *= 1e-5f;
    }
  }
  return v;
}

/// Updates of one round, the same on every rank. An id is always pushed by the rank id % size,
/// so each id's updates keep their order, as on the single store.
std::vector<Update> round_updates(std::mt19937_64& g, const Setup& s, std::vector<std::vector<float>>& pool,
                                  std::size_t ids, std::deque<std::vector<double>>& wide_pool) {
  std::vector<Update> out;
  std::uniform_int_distribution<std::size_t> pick(0, ids - 1);
  std::uniform_int_distribution<int> kind(0, 9), label(0, int(s.target.count) - 1);
  const std::size_t n = 24 + pick(g) % 24;
  for (std::size_t i = 0; i < n; ++i) {
    const PointId id = 1000 + pick(g) * 7919;  // spread ids
    pool.push_back(vectors_for(s, g, 1));
    const std::span<const float> v = pool.back();
    std::vector<double>& wide = wide_pool.emplace_back(v.begin(), v.end());
    if (s.origin) {
      for (std::size_t d = 0; d < s.dim; ++d) wide[d] += kOrigin[d];
    }
    pool.push_back(uniform(g, s.target.count == 0 ? 1 : s.target.count));
    const std::span<const float> values = pool.back();
    const int k = kind(g);
    const bool classes = s.target.kind == TargetSpec::Kind::Classes, outputs = s.target.kind == TargetSpec::Kind::Outputs;
    if (s.origin && k < 7) {
      out.push_back(k < 4 ? Update::insert(id, std::span<const double>(wide), label(g)) : Update::move(id, std::span<const double>(wide)));
    } else if (k < 4) {
      out.push_back(classes ? Update::insert(id, v, label(g)) : outputs ? Update::insert(id, v, values) : Update::insert(id, v));
    } else if (k < 7) {
      out.push_back(Update::move(id, v));
    } else if (k < 9 || s.target.kind == TargetSpec::Kind::None) {
      out.push_back(Update::erase(id));
    } else {
      out.push_back(classes ? Update::set_target(id, label(g)) : Update::set_target(id, values));
    }
  }
  return out;
}

StoreConfig config_of(const Setup& s) {
  StoreConfig c = config_for(s.dim, s.metric, s.target);
  if (s.origin) c.origin.assign(kOrigin, kOrigin + s.dim);
  c.cpu_threads = 1;
  c.publish_threads = 1;
  return c;
}

/// This rank's queries of one round: random rows, a rank-dependent k, ranges on some rounds.
struct Queries {
  std::vector<float> rows;
  std::size_t k = 1;
  std::vector<IdRange> visible;
};

Queries rank_queries(std::mt19937_64& g, const Setup& s, int round) {
  Queries q;
  const std::size_t n = std::size_t(g() % 5);  // 0..4: some ranks ask nothing
  q.rows = vectors_for(s, g, n, true);
  if (s.origin) {
    for (std::size_t i = 0; i < q.rows.size(); ++i) q.rows[i] = static_cast<float>(q.rows[i] + kOrigin[i % s.dim]);
  }
  q.k = 1 + std::size_t(g() % 12);
  if (round % 3 == 2) {
    for (std::size_t i = 0; i < n; ++i) {
      const PointId a = 1000 + (g() % 200) * 7919, b = a + (g() % 400) * 7919;
      q.visible.push_back({a, b});
    }
  }
  return q;
}

void run_equivalence(const Setup& s, std::uint64_t salt) {
  const int rank = world_rank(), size = world_size();
  auto g = rng(salt);                                   // the same on every rank
  auto mine = rng(salt * 31 + std::uint64_t(rank) + 1);  // this rank's queries
  const StoreConfig config = config_of(s);
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  std::vector<std::vector<float>> pool;
  std::deque<std::vector<double>> wide;
  for (int round = 0; round < 10; ++round) {
    pool.clear();
    wide.clear();
    const std::vector<Update> updates = round_updates(g, s, pool, 60, wide);
    for (const Update& u : updates) {
      single.push(u);
      if (int(u.id % PointId(size)) == rank) sharded.push(u);
    }
    const PublishReport want = single.publish();
    const PublishReport got = sharded.publish();
    check_same(got, want);
    CHECK(sharded.epoch() == single.epoch());
    CHECK(sharded.size() == single.size());

    const Queries q = rank_queries(mine, s, round);
    check_same(sharded.search(q.rows, q.k, q.visible), single.search(q.rows, q.k, q.visible));
    if (s.target.kind == TargetSpec::Kind::Classes) {
      const Weights w = round % 2 ? Weights::Distance : Weights::Uniform;
      const KnnClassifier model(single, q.k, w);
      check_same(sharded.classify(q.rows, q.k, w, true, q.visible), model.predict_proba(q.rows, q.visible));
      check_same(sharded.classify(q.rows, q.k, w, false, q.visible), model.predict(q.rows, q.visible));
    } else if (s.target.kind == TargetSpec::Kind::Outputs) {
      auto a = RegressionAggregate(round % 3);
      if (s.metric == Metric::InnerProduct && a == RegressionAggregate::WeightedMean) a = RegressionAggregate::Median;
      const KnnRegressor model(single, q.k, a);
      check_same(sharded.regress(q.rows, q.k, a, q.visible), model.predict(q.rows, q.visible));
    }
  }
}

}  // namespace

TEST_CASE("sharded answers equal one store's: L2, class labels") {
  run_equivalence({Metric::L2, 3, TargetSpec::classes(3)}, 1);
}
TEST_CASE("sharded answers equal one store's: L2 in 20 dimensions, outputs") {
  run_equivalence({Metric::L2, 20, TargetSpec::outputs(2)}, 2);
}
TEST_CASE("sharded answers equal one store's: inner product, no target") {
  run_equivalence({Metric::InnerProduct, 5, TargetSpec::none()}, 3);
}
TEST_CASE("sharded answers equal one store's: cosine, class labels") {
  run_equivalence({Metric::Cosine, 4, TargetSpec::classes(4)}, 4);
}
TEST_CASE("sharded answers equal one store's: haversine, outputs") {
  run_equivalence({Metric::Haversine, 2, TargetSpec::outputs(1)}, 5);
}
TEST_CASE("sharded answers equal one store's: L2 on a grid, exact ties across shards") {
  run_equivalence({Metric::L2, 2, TargetSpec::classes(2), true}, 6);
}
TEST_CASE("sharded answers equal one store's: distances that round to one float32, L2 and inner product") {
  run_equivalence({Metric::L2, 4, TargetSpec::outputs(1), false, false, true}, 41);
  run_equivalence({Metric::InnerProduct, 4, TargetSpec::outputs(2), false, false, true}, 43);
}
TEST_CASE("sharded answers equal one store's: L2 far from zero, an origin and double vectors") {
  run_equivalence({Metric::L2, 3, TargetSpec::classes(3), false, true}, 8);
}
TEST_CASE("sharded answers equal one store's: inner product on a grid, outputs") {
  run_equivalence({Metric::InnerProduct, 3, TargetSpec::outputs(3), true}, 7);
}

TEST_CASE("asynchronous tickets, a query from one rank while the others pass nothing") {
  const int rank = world_rank();
  StoreConfig config = config_of({Metric::L2, 2, TargetSpec::none()});
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  for (PointId id = 1; id <= 50; ++id) {
    const float v[2] = {float(id % 7), float(id / 7)};
    single.insert(id, v);
    if (rank == 0) sharded.insert(id, v);  // one rank pushes everything
  }
  single.publish();
  CHECK(sharded.publish().size == 50);
  const std::vector<float> q = {3.f, 3.f, 0.5f, 6.f};
  std::vector<float> none;
  auto first = sharded.submit(rank == 0 ? std::span<const float>(q) : std::span<const float>(none), 5);
  auto second = sharded.submit(q, 3);
  check_same(second.get(), single.search(q, 3));  // answered in any order of get()
  const Neighbors a = first.get();
  if (rank == 0) {
    check_same(a, single.search(q, 5));
  } else {
    CHECK(a.num_queries == 0);
  }
  CHECK(a.epoch == 1);
}

TEST_CASE("bad input: refused on the rank that passed it, the others answered") {
  const int rank = world_rank(), size = world_size();
  StoreConfig config = config_of({Metric::L2, 2, TargetSpec::classes(2)});
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  ReferenceSet single(config);
  const float v[2] = {1, 2};
  CHECK_THROWS_AS(sharded.insert(7, std::span<const float>(v, 1), 0), InvalidArgument);  // wrong dim: at the call
  CHECK_THROWS_AS(sharded.insert(7, v, 5), InvalidArgument);                             // label out of range
  if (rank == 0) {
    sharded.insert(7, v, 1);
  }
  single.insert(7, v, 1);
  single.publish();
  sharded.publish();
  const std::vector<float> q = {0, 0};
  const int bad = size - 1;
  if (rank == bad) {
    CHECK_THROWS_AS(sharded.search(q, 0), InvalidArgument);  // k = 0, refused at the call
  } else {
    check_same(sharded.search(q, 1), single.search(q, 1));
  }
  const std::vector<float> nan_row = {0, std::numeric_limits<float>::quiet_NaN()};
  if (rank == bad) {
    const std::string got = message_of<InvalidArgument>([&] { sharded.search(nan_row, 1); });
    const std::string want = message_of<InvalidArgument>([&] { single.search(nan_row, 1); });
    CHECK(got.find("query 0[1] is NaN") != std::string::npos);
    CHECK(got.find("NaN") != std::string::npos);
    CHECK(!want.empty());
  } else {
    check_same(sharded.search(q, 1), single.search(q, 1));
  }
  CHECK_THROWS_AS(sharded.regress(q, 1), InvalidArgument);  // the store holds class labels
  check_same(sharded.classify(q, 1), KnnClassifier(single, 1).predict(q));
}

TEST_CASE("a configuration that differs between ranks is refused on every rank") {
  const int rank = world_rank(), size = world_size();
  if (size < 2) return;
  StoreConfig config = config_of({Metric::L2, 2, TargetSpec::none()});
  if (rank == size - 1) config.dim = 3;
  const std::string message = message_of<InvalidArgument>([&] { DistributedReferenceSet s(MPI_COMM_WORLD, config); });
  CHECK(message.find("StoreConfig::dim differs across ranks") != std::string::npos);
  CHECK(message.find(concat_str("3 on rank ", size - 1)) != std::string::npos);
  // An invalid configuration everywhere: every rank throws the shard's own message, once.
  StoreConfig bad = config_of({Metric::L2, 2, TargetSpec::none()});
  bad.dim = 0;
  const std::string invalid = message_of<InvalidArgument>([&] { DistributedReferenceSet s(MPI_COMM_WORLD, bad); });
  CHECK(invalid.find("dim must be at least 1") != std::string::npos);
}

TEST_CASE("save and load: the same answers at the same global epoch; another number of ranks refused") {
  const int rank = world_rank(), size = world_size();
  const Setup s{Metric::L2, 3, TargetSpec::classes(3)};
  auto g = rng(77);
  const StoreConfig config = config_of(s);
  std::string dir = concat_str("/tmp/streamknn-sharded-", getppid());
  if (rank == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string path = dir + "/store.skm";
  std::vector<std::vector<float>> pool;
  std::deque<std::vector<double>> wide;
  std::optional<DistributedReferenceSet> sharded;
  sharded.emplace(MPI_COMM_WORLD, config);
  for (int round = 0; round < 3; ++round) {
    pool.clear();
    wide.clear();
    for (const Update& u : round_updates(g, s, pool, 40, wide)) {
      if (int(u.id % PointId(size)) == rank) sharded->push(u);
    }
    sharded->publish();
    sharded->save(path);  // each save replaces the previous one
  }
  const std::vector<float> q = points_for(s.metric, g, 4, s.dim);
  const Neighbors before = sharded->search(q, 6);
  const std::uint64_t epoch = sharded->epoch();
  sharded.reset();
  DistributedReferenceSet again = DistributedReferenceSet::load(MPI_COMM_WORLD, path, {.backend = config.backend});
  CHECK(again.epoch() == epoch);
  check_same(again.search(q, 6), before);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.path().string().find(".rank-") != std::string::npos;
  CHECK(files == std::size_t(size));  // the earlier saves' shard files are gone
  if (size >= 2) {
    MPI_Comm fewer;
    MPI_Comm_split(MPI_COMM_WORLD, rank == size - 1 ? MPI_UNDEFINED : 0, rank, &fewer);
    if (fewer != MPI_COMM_NULL) {
      const std::string m = message_of<CheckpointError>([&] { DistributedReferenceSet::load(fewer, path); });
      CHECK(m.find(concat_str("saved by ", size, " ranks, loaded on ", size - 1)) != std::string::npos);
      MPI_Comm_free(&fewer);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("ranks that make different collective calls are told so, on every rank") {
  const int rank = world_rank(), size = world_size();
  if (size < 2) return;
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config_of({Metric::L2, 2, TargetSpec::none()}));
  const std::vector<float> q = {0, 0};
  const std::string message = rank == 0 ? message_of<Error>([&] { sharded.publish(); })
                                        : message_of<Error>([&] { sharded.search(q, 1); });
  CHECK(message.find("the ranks made different collective calls (publish on rank 0, a query") != std::string::npos);
  const float v[2] = {1, 1};
  if (rank == 1) sharded.insert(3, v);
  CHECK(sharded.publish().size == 1);  // the calls after it still match
  CHECK(sharded.search(q, 1).ids[0] == 3);
}

namespace {

/// The process's address space in use (VmSize), in bytes.
std::size_t address_space_in_use() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

}  // namespace

TEST_CASE("an OutOfMemory on one shard changes no shard; the updates stay pending and apply at the next publish") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(STREAMKNN_TEST_CUDA)
  MESSAGE("skipped under sanitizers (their runtimes map terabytes of address space) and on the CUDA "
          "backend (whose store grows in device memory, beyond an address-space limit)");
  return;
#endif
  const int rank = world_rank(), size = world_size(), limited = size - 1;
  // The limited rank's shard holds `loaded` points (72 MB, more than a malloc arena's heap), so
  // that the next insert there grows its other buffer by a new mapping of that size, which an
  // address-space limit 2 MB above its use refuses, while that publish's records are a few KB.
  constexpr std::size_t dim = 512, loaded = 36000, added = 40;
  StoreConfig config = config_of({Metric::L2, dim, TargetSpec::none()});
  config.queue_capacity = loaded;
  config.capacity_hint = 64;
  DistributedReferenceSet sharded(MPI_COMM_WORLD, config);
  std::vector<float> v(dim, 0.25f);
  if (rank == 0) {
    std::size_t pushed = 0;
    for (PointId id = 1; pushed < loaded; ++id) {
      if (shard_of(id, size) != limited) continue;
      v[0] = float(id);
      sharded.insert(id, v);
      ++pushed;
    }
  }
  sharded.publish();
  const std::vector<float> q(dim, 0.5f);
  const Neighbors before = sharded.search(q, 5);
  if (rank == 0) {
    for (PointId id = 1'000'000'000; id < 1'000'000'000 + added; ++id) {
      v[0] = float(id % 1000);
      sharded.insert(id, v);
    }
  }
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  if (rank == limited) {
    rlimit lower = old;
    lower.rlim_cur = rlim_t(address_space_in_use() + (2u << 20));
    setrlimit(RLIMIT_AS, &lower);
  }
  std::string message;
  try {
    sharded.publish();
  } catch (const OutOfMemory& e) {
    message = e.what();
  }
  if (rank == limited) setrlimit(RLIMIT_AS, &old);
  if (message.empty()) {
    MESSAGE("the memory limit did not refuse the reserve here; the two-phase path was not exercised");
  } else {
    CHECK(message.find("nothing was applied on any shard") != std::string::npos);
    CHECK(message.find(concat_str("rank ", limited, ": ")) != std::string::npos);
    CHECK(sharded.epoch() == before.epoch);  // no shard moved
    CHECK(sharded.size() == loaded);
    check_same(sharded.search(q, 5), before);
    std::size_t owned = 0;  // each shard keeps what it received
    for (PointId id = 1'000'000'000; id < 1'000'000'000 + added; ++id) owned += shard_of(id, size) == rank;
    CHECK(sharded.pending() == owned);
    const PublishReport retry = sharded.publish();  // the carried updates apply now
    CHECK(retry.inserted == added);
  }
  CHECK(sharded.size() == loaded + added);
  CHECK(sharded.epoch() == before.epoch + 1);
}
