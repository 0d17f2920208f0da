// Linearizability of the sharded store against a sequential model. Two producer threads on every
// rank push a random mix of inserts, moves and erases (with id errors) into their own id space
// while the ranks publish and query in rounds. Around each publish every rank records, per local
// producer, the ops whose push had returned before it entered publish (lo) and those whose push
// had begun when it returned (hi); the bounds are exchanged. After each publish every rank asks
// every producer's space (an IdRange) for all its points. Afterwards each answer must be the
// model's state after some prefix of that producer's ops, of a length in [lo, hi], the lengths
// never decreasing from round to round: updates pushed before a publish are visible after it on
// every shard, to every rank, in each thread's order. Points lie on an integer grid, so every
// distance is exact.
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "mpi/mpi_support.hpp"

using namespace test;
using namespace mpitest;

namespace {

constexpr int kProducersPerRank = 2;
constexpr std::size_t kIdsPerProducer = 24;
constexpr std::size_t kOpsPerProducer = 20000;
constexpr int kRounds = 60;

struct Op {
  UpdateKind kind;
  PointId id;
  float at[2];
};

PointId space_of(int producer) { return PointId(producer + 1) << 32; }

/// Producer p's ops: the same on every rank (seeded by p), so any rank can replay them.
std::vector<Op> ops_of(int producer) {
  auto g = rng(1000 + std::uint64_t(producer));
  std::vector<Op> ops(kOpsPerProducer);
  for (Op& op : ops) {
    const int k = int(g() % 10);
    op.kind = k < 4 ? UpdateKind::Insert : k < 8 ? UpdateKind::Move : UpdateKind::Erase;
    op.id = space_of(producer) + g() % kIdsPerProducer;
    op.at[0] = float(g() % 40);
    op.at[1] = float(g() % 40);
  }
  return ops;
}

/// The answer to "every point of this space, from (0, 0)": (distance, id) ascending.
using Answer = std::vector<std::pair<float, PointId>>;

Answer answer_of(const std::map<PointId, std::pair<float, float>>& model) {
  Answer a;
  for (const auto& [id, p] : model) {
    const float rank = p.first * p.first + p.second * p.second;  // exact: small integers
    a.emplace_back(static_cast<float>(std::sqrt(double(rank))), id);
  }
  std::sort(a.begin(), a.end());
  return a;
}

void apply(std::map<PointId, std::pair<float, float>>& model, const Op& op) {
  const auto it = model.find(op.id);
  switch (op.kind) {
    case UpdateKind::Insert: if (it == model.end()) model[op.id] = {op.at[0], op.at[1]}; break;
    case UpdateKind::Move: if (it != model.end()) it->second = {op.at[0], op.at[1]}; break;
    case UpdateKind::Erase: if (it != model.end()) model.erase(it); break;
    case UpdateKind::SetTarget: break;
  }
}

struct alignas(64) Progress {
  std::atomic<std::uint64_t> started{0}, done{0};
};

}  // namespace

TEST_CASE("linearizability: producers on every rank against a sequential model") {
  const int rank = world_rank(), size = world_size();
  const int producers = size * kProducersPerRank;
  StoreConfig config = config_for(2);
  config.queue_capacity = 512;  // producers meet a full outbox and wait for the next publish
  config.cpu_threads = 1;
  config.publish_threads = 1;
  DistributedReferenceSet store(MPI_COMM_WORLD, config);

  std::vector<std::vector<Op>> all_ops(static_cast<std::size_t>(producers));
  for (int p = 0; p < producers; ++p) all_ops[std::size_t(p)] = ops_of(p);
  Progress progress[kProducersPerRank];
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kProducersPerRank; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<Op>& ops = all_ops[std::size_t(rank * kProducersPerRank + t)];
      for (std::size_t i = 0; i < ops.size() && !stop.load(); ++i) {
        const Op& op = ops[i];
        progress[t].started.store(i + 1);
        const std::span<const float> at(op.at, 2);
        const Update u = op.kind == UpdateKind::Insert ? Update::insert(op.id, at)
                         : op.kind == UpdateKind::Move   ? Update::move(op.id, at)
                                                         : Update::erase(op.id);
        // try_push: a producer waiting in push() for a publish would keep the rounds' end waiting.
        bool pushed = store.try_push(u);
        while (!pushed && !stop.load()) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          pushed = store.try_push(u);
        }
        if (!pushed) return;
        progress[t].done.store(i + 1);
        if (i % 64 == 63) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    });
  }

  // Bounds and answers per round: lo/hi[round][producer], answers[round][producer].
  std::vector<std::vector<std::uint64_t>> lo(kRounds), hi(kRounds);
  std::vector<std::vector<Answer>> answers(kRounds, std::vector<Answer>(std::size_t(producers)));
  std::vector<std::uint64_t> epochs(kRounds);
  const std::vector<float> origin(std::size_t(producers) * 2, 0.0f);
  std::vector<IdRange> spaces;
  for (int p = 0; p < producers; ++p) spaces.push_back({space_of(p), space_of(p + 1)});
  for (int round = 0; round < kRounds; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    std::uint64_t mine_lo[kProducersPerRank], mine_hi[kProducersPerRank];
    for (int t = 0; t < kProducersPerRank; ++t) mine_lo[t] = progress[t].done.load();
    const PublishReport report = store.publish();
    for (int t = 0; t < kProducersPerRank; ++t) mine_hi[t] = progress[t].started.load();
    lo[round].resize(std::size_t(producers));
    hi[round].resize(std::size_t(producers));
    MPI_Allgather(mine_lo, kProducersPerRank, MPI_UINT64_T, lo[round].data(), kProducersPerRank, MPI_UINT64_T,
                  MPI_COMM_WORLD);
    MPI_Allgather(mine_hi, kProducersPerRank, MPI_UINT64_T, hi[round].data(), kProducersPerRank, MPI_UINT64_T,
                  MPI_COMM_WORLD);
    const Neighbors n = store.search(origin, kIdsPerProducer + 1, spaces);
    CHECK(n.epoch == report.epoch);
    epochs[std::size_t(round)] = n.epoch;
    for (int p = 0; p < producers; ++p) {
      for (std::size_t j = 0; j < n.k; ++j) {
        const PointId id = n.ids_of(std::size_t(p))[j];
        if (id != kInvalidId) answers[std::size_t(round)][std::size_t(p)].emplace_back(n.distances_of(std::size_t(p))[j], id);
      }
    }
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  store.publish();  // the producers' last pushes, so no update is left behind

  for (int round = 1; round < kRounds; ++round) CHECK(epochs[std::size_t(round)] >= epochs[std::size_t(round - 1)]);
  for (int p = 0; p < producers; ++p) {
    const std::vector<Op>& ops = all_ops[std::size_t(p)];
    std::map<PointId, std::pair<float, float>> model;
    std::uint64_t at = 0;  // the model holds ops[0, at)
    for (int round = 0; round < kRounds; ++round) {
      const std::uint64_t from = std::max(lo[std::size_t(round)][std::size_t(p)], at);
      const std::uint64_t to = hi[std::size_t(round)][std::size_t(p)];
      while (at < from) apply(model, ops[at++]);
      bool found = answer_of(model) == answers[std::size_t(round)][std::size_t(p)];
      while (!found && at < to) {
        apply(model, ops[at++]);
        found = answer_of(model) == answers[std::size_t(round)][std::size_t(p)];
      }
      INFO("producer ", p, " round ", round, " prefix in [", from, ", ", to, "]");
      CHECK(found);
      if (!found) break;
    }
  }
}
