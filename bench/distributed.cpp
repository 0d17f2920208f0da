// bench/distributed: the sharded store (DistributedReferenceSet) under mpirun -np G, on the
// backend named (G ranks may share one GPU: that measures the routing and merge overhead, not a
// speed-up). Public API only.
//   mpirun -np G bench_distributed [--n 1000000] [--dim 2] [--metric l2|haversine] [--q 1,4,16,64]
//        [--k 16] [--reps 200] [--moves 10000,100000] [--move-q 16] [--backend cuda|cpu] [--single 1]
//        [--csv distributed.csv]
// n points (uniform [0,1)^dim, or (lat, lon) for haversine) are spread over the shards by id.
// For each Q, rows of the table:
//   one   rank 0 asks Q queries, the other ranks take part with empty batches (a query from one
//         rank while the others are idle); latency host to host on rank 0, p50 / p99, queries/s;
//   all   every rank asks Q queries at once; queries/s counts all ranks' queries;
//   shard rank 0's own shard searched alone (n/G points, no MPI): the part of `one` that is search;
//   single (--single 1, rank 0) one ReferenceSet of all n points on the same backend: the answer
//         the sharded store must equal, and the time it would take on one device.
// Then for each B in --moves: every rank pushes B/G moves of random ids (owned anywhere) and all
// publish; moves/s = B / (slowest rank's push + publish), p50 / p99 of that time. Rows `moves_q`
// (--move-q Q, 0 for none): the same with every rank asking Q queries after each publish, timed
// with it (moves while queries run; the collective calls take turns on each rank).
// Prints a table on rank 0 and writes CSV there.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "streamknn/distributed_reference_set.hpp"
#include "streamknn/streamknn.hpp"

namespace {

using namespace streamknn;
using Clock = std::chrono::steady_clock;

double micros(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

/// splitmix64 as a stream: cheap enough to draw stores of billions of coordinates on every rank.
struct Draw {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    const std::uint64_t h = bench::splitmix64(state);
    state += 0x9E3779B97F4A7C15ull;
    return h;
  }
  float unit() noexcept { return bench::unit_float(next()); }  // [0, 1)
  std::size_t below(std::size_t n) noexcept { return std::size_t(next() % n); }
};

std::vector<float> points(Draw& g, std::size_t n, std::size_t dim, Metric metric) {
  std::vector<float> v(n * dim);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t d = 0; d < dim; ++d) {
      const float u = g.unit();
      v[i * dim + d] = metric == Metric::Haversine ? (d ? -180 + 360 * u : -60 + 120 * u) : u;
    }
  }
  return v;
}

struct Row {
  std::string mode;
  std::size_t q = 0, batch = 0, reps = 0;
  double p50_us = 0, p99_us = 0, per_s = 0;  // queries/s or moves/s
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::map<std::string, std::string> args{{"--n", "1000000"}, {"--dim", "2"},       {"--metric", "l2"},
                                          {"--q", "1,4,16,64"}, {"--k", "16"},      {"--reps", "200"},
                                          {"--moves", "10000,100000"}, {"--move-q", "16"}, {"--backend", "cuda"},
                                          {"--single", "1"}, {"--csv", "distributed.csv"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      if (rank == 0) std::fprintf(stderr, "unknown option %s\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  const std::size_t n = std::stoul(args["--n"]), k = std::stoul(args["--k"]), reps = std::stoul(args["--reps"]);
  const Metric metric = parse_metric(args["--metric"]);
  const std::size_t dim = metric == Metric::Haversine ? 2 : std::stoul(args["--dim"]);
  const std::vector<std::size_t> qs = bench::numbers(args["--q"]), moves = bench::numbers(args["--moves"]);
  std::size_t largest_moves = 0;
  for (std::size_t b : moves) largest_moves = std::max(largest_moves, b / std::size_t(ranks) + 1);

  StoreConfig config;
  config.dim = dim;
  config.metric = metric;
  config.backend = args["--backend"] == "cpu" ? BackendKind::Cpu : BackendKind::Cuda;
  config.capacity_hint = n / std::size_t(ranks) + 1024;
  config.queue_capacity = std::max<std::size_t>(1 << 16, largest_moves);
  std::optional<DistributedReferenceSet> store;
  try {
    store.emplace(MPI_COMM_WORLD, config);
  } catch (const Error& e) {
    if (rank == 0) std::fprintf(stderr, "bench_distributed: %s\n", e.what());
    MPI_Finalize();
    return 1;
  }

  // Load: rank r pushes ids r, r + G, ... (their owners are spread over all ranks), in parts.
  Draw g{42 + std::uint64_t(rank)};
  const auto load_start = Clock::now();
  const std::size_t part = config.queue_capacity / 2;
  const std::size_t mine = (n + std::size_t(ranks) - 1 - std::size_t(rank)) / std::size_t(ranks);
  const std::size_t parts = (n / std::size_t(ranks) + 1 + part - 1) / part;
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t from = p * part, to = std::min(mine, from + part);
    if (from < to) {
      const std::vector<float> v = points(g, to - from, dim, metric);
      for (std::size_t i = from; i < to; ++i) {
        store->insert(PointId(i * std::size_t(ranks) + std::size_t(rank)), {v.data() + (i - from) * dim, dim});
      }
    }
    store->publish();
  }
  const double load_s = micros(load_start, Clock::now()) / 1e6;

  std::optional<ReferenceSet> single;
  if (rank == 0 && args["--single"] == "1") {
    // The same points, regenerated rank by rank in the same order.
    StoreConfig whole = config;
    whole.capacity_hint = n + 1024;
    whole.queue_capacity = 1 << 20;
    single.emplace(whole);
    for (int r = 0; r < ranks; ++r) {
      Draw gr{42 + std::uint64_t(r)};
      const std::size_t count = (n + std::size_t(ranks) - 1 - std::size_t(r)) / std::size_t(ranks);
      for (std::size_t from = 0; from < count; from += part) {
        const std::size_t to = std::min(count, from + part);
        const std::vector<float> v = points(gr, to - from, dim, metric);
        for (std::size_t i = from; i < to; ++i) {
          single->insert(PointId(i * std::size_t(ranks) + std::size_t(r)), {v.data() + (i - from) * dim, dim});
        }
        if (single->pending() > (1u << 19)) single->publish();
      }
    }
    single->publish();
  }

  std::vector<Row> rows;
  Draw gq{7 + std::uint64_t(rank)};
  bool equal = true;
  for (const std::size_t q : qs) {
    const std::vector<float> queries = points(gq, q, dim, metric);
    const std::vector<float> none;
    for (const char* mode : {"one", "all"}) {
      const bool asks = std::string(mode) == "all" || rank == 0;
      std::vector<double> us;
      for (std::size_t r = 0; r < reps + 5; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = Clock::now();
        const Neighbors got = store->search(asks ? std::span<const float>(queries) : std::span<const float>(none), k);
        const auto t1 = Clock::now();
        if (r >= 5) us.push_back(micros(t0, t1));
        if (r == 0 && single) equal &= got.ids == single->search(queries, k).ids;
      }
      const double mean = [&] { double s = 0; for (double x : us) s += x; return s / double(us.size()); }();
      const std::size_t asked = std::string(mode) == "all" ? q * std::size_t(ranks) : q;
      rows.push_back({mode, q, 0, reps, bench::median(us), percentile(us, 0.99), double(asked) / (mean / 1e6)});
    }
    if (rank == 0) {
      for (int which = 0; which < (single ? 2 : 1); ++which) {
        const ReferenceSet& local = which == 0 ? store->shard() : *single;
        std::vector<double> us;
        for (std::size_t r = 0; r < reps + 5; ++r) {
          const auto t0 = Clock::now();
          (void)local.search(queries, k);
          if (r >= 5) us.push_back(micros(t0, Clock::now()));
        }
        const double mean = [&] { double s = 0; for (double x : us) s += x; return s / double(us.size()); }();
        rows.push_back({which == 0 ? "shard" : "single", q, 0, reps, bench::median(us), percentile(us, 0.99),
                        double(q) / (mean / 1e6)});
      }
    }
  }

  // Moves alone, then (--move-q Q > 0) moves with queries running: after each publish every rank
  // asks Q queries, and moves/s counts the whole round.
  const std::size_t move_q = std::stoul(args["--move-q"]);
  const std::vector<float> move_queries = points(gq, move_q, dim, metric);
  for (const bool with_queries : {false, true}) {
    if (with_queries && move_q == 0) break;
    for (const std::size_t b : moves) {
      const std::size_t per_rank = b / std::size_t(ranks);
      std::vector<double> us;
      const std::size_t move_reps = std::max<std::size_t>(3, std::min<std::size_t>(reps / 10, 20));
      for (std::size_t r = 0; r < move_reps + 1; ++r) {
        const std::vector<float> to = points(g, per_rank, dim, metric);
        std::vector<PointId> ids(per_rank);
        for (auto& id : ids) id = PointId(g.below(n));
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = Clock::now();
        for (std::size_t i = 0; i < per_rank; ++i) store->move(ids[i], {to.data() + i * dim, dim});
        store->publish();
        if (with_queries) (void)store->search(move_queries, k);
        double mine_us = micros(t0, Clock::now()), slowest = 0;
        MPI_Allreduce(&mine_us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r >= 1) us.push_back(slowest);
      }
      const double mean = [&] { double s = 0; for (double x : us) s += x; return s / double(us.size()); }();
      rows.push_back({with_queries ? "moves_q" : "moves", with_queries ? move_q : 0, per_rank * std::size_t(ranks),
                      move_reps, bench::median(us), percentile(us, 0.99),
                      double(per_rank * std::size_t(ranks)) / (mean / 1e6)});
    }
  }

  int ok = equal ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("bench_distributed: G=%d ranks, %zu x %zu %s points (%s on rank 0), loaded in %.1f s, k=%zu%s\n", ranks,
                n, dim, std::string(to_string(metric)).c_str(), store->shard().backend_name().c_str(), load_s, k,
                single ? (all_ok ? "; answers equal one store's" : "; ANSWERS DIFFER from one store's") : "");
    std::printf("%-7s %6s %9s %6s %12s %12s %14s\n", "mode", "Q", "moves", "reps", "p50_us", "p99_us", "per_s");
    for (const Row& r : rows) {
      std::printf("%-7s %6zu %9zu %6zu %12.1f %12.1f %14.0f\n", r.mode.c_str(), r.q, r.batch, r.reps, r.p50_us, r.p99_us,
                  r.per_s);
    }
    std::FILE* csv = std::fopen(args["--csv"].c_str(), "w");
    if (!csv) {
      std::fprintf(stderr, "cannot write %s\n", args["--csv"].c_str());
    } else {
      std::fprintf(csv, "# ranks,%d,backend,%s,n,%zu,dim,%zu,metric,%s,k,%zu,load_s,%.2f\n", ranks,
                   store->shard().backend_name().c_str(), n, dim, std::string(to_string(metric)).c_str(), k, load_s);
      std::fprintf(csv, "ranks,mode,Q,moves,reps,p50_us,p99_us,per_s\n");
      for (const Row& r : rows) {
        std::fprintf(csv, "%d,%s,%zu,%zu,%zu,%.2f,%.2f,%.1f\n", ranks, r.mode.c_str(), r.q, r.batch, r.reps, r.p50_us,
                     r.p99_us, r.per_s);
      }
      std::fclose(csv);
    }
  }
  store.reset();
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
