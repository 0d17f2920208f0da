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
#include <utility>
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

/// The mean of the samples; v must not be empty.
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
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

// Rank r draws its points and then its moves from kLoadSeed + r, its queries from kQuerySeed + r;
// the single store replays every rank's load draw to hold the same points.
constexpr std::uint64_t kLoadSeed = 42, kQuerySeed = 7;

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

// ---- options and loading -------------------------------------------------------------------

/// The command line (the header comment lists the options and their defaults).
struct Options {
  std::size_t n = 0, k = 0, reps = 0;
  Metric metric{};
  std::size_t dim = 0;  // 2 for haversine, whatever --dim says
  std::vector<std::size_t> qs, moves;
  BackendKind backend{};
  bool single = false;     // --single 1: rank 0 also builds one store of all n points
  std::size_t move_q = 0;  // 0: no moves_q rows
  std::string csv;
};

/// Reads "--option value" pairs over the defaults; an unknown option is reported by rank 0 and
/// gives nothing (every rank then exits with status 2).
std::optional<Options> parse_options(int argc, char** argv, int rank) {
  std::map<std::string, std::string> args{{"--n", "1000000"}, {"--dim", "2"},       {"--metric", "l2"},
                                          {"--q", "1,4,16,64"}, {"--k", "16"},      {"--reps", "200"},
                                          {"--moves", "10000,100000"}, {"--move-q", "16"}, {"--backend", "cuda"},
                                          {"--single", "1"}, {"--csv", "distributed.csv"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      if (rank == 0) std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return std::nullopt;
    }
    args[argv[i]] = argv[i + 1];
  }
  Options o;
  o.n = std::stoul(args["--n"]), o.k = std::stoul(args["--k"]), o.reps = std::stoul(args["--reps"]);
  o.metric = parse_metric(args["--metric"]);
  o.dim = o.metric == Metric::Haversine ? 2 : std::stoul(args["--dim"]);
  o.qs = bench::numbers(args["--q"]), o.moves = bench::numbers(args["--moves"]);
  o.backend = args["--backend"] == "cpu" ? BackendKind::Cpu : BackendKind::Cuda;
  o.single = args["--single"] == "1";
  o.move_q = std::stoul(args["--move-q"]);
  o.csv = args["--csv"];
  return o;
}

/// One shard's configuration: room for n/G points, and a queue that takes a rank's largest
/// share of a move batch in one publish.
StoreConfig store_config(const Options& o, int ranks) {
  std::size_t largest_moves = 0;
  for (std::size_t b : o.moves) largest_moves = std::max(largest_moves, b / std::size_t(ranks) + 1);
  StoreConfig config;
  config.dim = o.dim;
  config.metric = o.metric;
  config.backend = o.backend;
  config.capacity_hint = o.n / std::size_t(ranks) + 1024;
  config.queue_capacity = std::max<std::size_t>(1 << 16, largest_moves);
  return config;
}

/// The sharded store; nothing, after rank 0 reports why, when it cannot be built.
std::optional<DistributedReferenceSet> open_store(const StoreConfig& config, int rank) {
  try {
    return std::optional<DistributedReferenceSet>(std::in_place, MPI_COMM_WORLD, config);
  } catch (const Error& e) {
    if (rank == 0) std::fprintf(stderr, "bench_distributed: %s\n", e.what());
    return std::nullopt;
  }
}

/// How many ids rank r loads: r, r + G, ... below n.
std::size_t ids_of_rank(std::size_t n, int ranks, int r) {
  return (n + std::size_t(ranks) - 1 - std::size_t(r)) / std::size_t(ranks);
}

/// Load: rank r pushes ids r, r + G, ... (their owners are spread over all ranks), in parts of
/// half a queue, every rank publishing after each part. Returns the seconds it took.
double load_shards(DistributedReferenceSet& store, const Options& o, const StoreConfig& config, int rank, int ranks,
                   Draw& g) {
  const auto load_start = Clock::now();
  const std::size_t part = config.queue_capacity / 2;
  const std::size_t mine = ids_of_rank(o.n, ranks, rank);
  const std::size_t parts = (o.n / std::size_t(ranks) + 1 + part - 1) / part;
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t from = p * part, to = std::min(mine, from + part);
    if (from < to) {
      const std::vector<float> v = points(g, to - from, o.dim, o.metric);
      for (std::size_t i = from; i < to; ++i) {
        store.insert(PointId(i * std::size_t(ranks) + std::size_t(rank)), {v.data() + (i - from) * o.dim, o.dim});
      }
    }
    store.publish();
  }
  return micros(load_start, Clock::now()) / 1e6;
}

StoreConfig single_config(StoreConfig config, std::size_t n) {
  config.capacity_hint = n + 1024;
  config.queue_capacity = 1 << 20;
  return config;
}

/// Rank 0's one store of all n points: the same points, regenerated rank by rank in the same
/// order.
void load_single(ReferenceSet& single, const Options& o, const StoreConfig& config, int ranks) {
  const std::size_t part = config.queue_capacity / 2;
  for (int r = 0; r < ranks; ++r) {
    Draw gr{kLoadSeed + std::uint64_t(r)};
    const std::size_t count = ids_of_rank(o.n, ranks, r);
    for (std::size_t from = 0; from < count; from += part) {
      const std::size_t to = std::min(count, from + part);
      const std::vector<float> v = points(gr, to - from, o.dim, o.metric);
      for (std::size_t i = from; i < to; ++i) {
        single.insert(PointId(i * std::size_t(ranks) + std::size_t(r)), {v.data() + (i - from) * o.dim, o.dim});
      }
      if (single.pending() > (1u << 19)) single.publish();
    }
  }
  single.publish();
}

// ---- the measurements ----------------------------------------------------------------------

/// What the measurements share: the stores, the options, this rank's place, and the table so
/// far (rows are kept on every rank; rank 0's are printed).
struct Measurement {
  Measurement(DistributedReferenceSet& store, const std::optional<ReferenceSet>& single, const Options& options,
              int rank, int ranks)
      : store(store), single(single), options(options), rank(rank), ranks(ranks) {}
  DistributedReferenceSet& store;
  const std::optional<ReferenceSet>& single;  // rank 0 with --single 1 only
  const Options& options;
  const int rank, ranks;
  std::vector<Row> rows;
  bool equal = true;  // every answer compared with the single store's was the same
};

constexpr std::size_t kWarmUpSearches = 5;  // untimed searches before each search row's reps

/// Row `one` or `all` for Q queries: the collective search, asked by rank 0 alone (the other
/// ranks take part with empty batches) or by every rank at once; latency host to host.
void measure_sharded_search(Measurement& m, const char* mode, const std::vector<float>& queries, std::size_t q) {
  const std::vector<float> none;
  const bool asks = std::string(mode) == "all" || m.rank == 0;
  const std::size_t k = m.options.k;
  std::vector<double> us;
  for (std::size_t r = 0; r < m.options.reps + kWarmUpSearches; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    const Neighbors got = m.store.search(asks ? std::span<const float>(queries) : std::span<const float>(none), k);
    const auto t1 = Clock::now();
    if (r >= kWarmUpSearches) us.push_back(micros(t0, t1));
    if (r == 0 && m.single) m.equal &= got.ids == m.single->search(queries, k).ids;
  }
  const std::size_t asked = std::string(mode) == "all" ? q * std::size_t(m.ranks) : q;
  m.rows.push_back(
      {mode, q, 0, m.options.reps, bench::median(us), percentile(us, 0.99), double(asked) / (mean(us) / 1e6)});
}

/// Row `shard` or `single` (rank 0): one ReferenceSet searched alone, no MPI.
void measure_local_search(Measurement& m, const char* mode, const ReferenceSet& local,
                          const std::vector<float>& queries, std::size_t q) {
  std::vector<double> us;
  for (std::size_t r = 0; r < m.options.reps + kWarmUpSearches; ++r) {
    const auto t0 = Clock::now();
    (void)local.search(queries, m.options.k);
    if (r >= kWarmUpSearches) us.push_back(micros(t0, Clock::now()));
  }
  m.rows.push_back({mode, q, 0, m.options.reps, bench::median(us), percentile(us, 0.99), double(q) / (mean(us) / 1e6)});
}

/// For each Q: rows one and all (every rank), then shard and single (rank 0).
void measure_searches(Measurement& m, Draw& gq) {
  for (const std::size_t q : m.options.qs) {
    const std::vector<float> queries = points(gq, q, m.options.dim, m.options.metric);
    for (const char* mode : {"one", "all"}) measure_sharded_search(m, mode, queries, q);
    if (m.rank == 0) {
      measure_local_search(m, "shard", m.store.shard(), queries, q);
      if (m.single) measure_local_search(m, "single", *m.single, queries, q);
    }
  }
}

/// Row `moves` or `moves_q` for a batch of B moves: every rank pushes B/G moves of random ids
/// (owned anywhere) and all publish, then (with_queries) every rank asks the move queries; a
/// round takes as long as its slowest rank. The first round is not counted.
void measure_moves_row(Measurement& m, Draw& g, const std::vector<float>& move_queries, std::size_t batch,
                       bool with_queries) {
  DistributedReferenceSet& store = m.store;
  const std::size_t n = m.options.n, dim = m.options.dim, k = m.options.k;
  const std::size_t per_rank = batch / std::size_t(m.ranks);
  std::vector<double> us;
  const std::size_t move_reps = std::max<std::size_t>(3, std::min<std::size_t>(m.options.reps / 10, 20));
  for (std::size_t r = 0; r < move_reps + 1; ++r) {
    const std::vector<float> to = points(g, per_rank, dim, m.options.metric);
    std::vector<PointId> ids(per_rank);
    for (auto& id : ids) id = PointId(g.below(n));
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < per_rank; ++i) store.move(ids[i], {to.data() + i * dim, dim});
    store.publish();
    if (with_queries) (void)store.search(move_queries, k);
    double mine_us = micros(t0, Clock::now()), slowest = 0;
    MPI_Allreduce(&mine_us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= 1) us.push_back(slowest);
  }
  m.rows.push_back({with_queries ? "moves_q" : "moves", with_queries ? m.options.move_q : 0,
                    per_rank * std::size_t(m.ranks), move_reps, bench::median(us), percentile(us, 0.99),
                    double(per_rank * std::size_t(m.ranks)) / (mean(us) / 1e6)});
}

/// Moves alone, then (--move-q Q > 0) moves with queries running: after each publish every rank
/// asks Q queries, and moves/s counts the whole round.
void measure_moves(Measurement& m, Draw& g, Draw& gq) {
  const std::vector<float> move_queries = points(gq, m.options.move_q, m.options.dim, m.options.metric);
  for (const bool with_queries : {false, true}) {
    if (with_queries && m.options.move_q == 0) break;
    for (const std::size_t b : m.options.moves) measure_moves_row(m, g, move_queries, b, with_queries);
  }
}

/// Whether every rank's answers equalled the single store's (collective).
bool all_ranks_agree(bool equal) {
  int ok = equal ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_ok != 0;
}

// ---- the report (rank 0) -------------------------------------------------------------------

void print_table(const Measurement& m, const std::string& backend, double load_s, bool agree) {
  const Options& o = m.options;
  std::printf("bench_distributed: G=%d ranks, %zu x %zu %s points (%s on rank 0), loaded in %.1f s, k=%zu%s\n", m.ranks,
              o.n, o.dim, std::string(to_string(o.metric)).c_str(), backend.c_str(), load_s, o.k,
              m.single ? (agree ? "; answers equal one store's" : "; ANSWERS DIFFER from one store's") : "");
  std::printf("%-7s %6s %9s %6s %12s %12s %14s\n", "mode", "Q", "moves", "reps", "p50_us", "p99_us", "per_s");
  for (const Row& r : m.rows) {
    std::printf("%-7s %6zu %9zu %6zu %12.1f %12.1f %14.0f\n", r.mode.c_str(), r.q, r.batch, r.reps, r.p50_us, r.p99_us,
                r.per_s);
  }
}

/// Writes --csv; a file that cannot be opened is reported on stderr (the exit status stays).
void write_csv(const Measurement& m, const std::string& backend, double load_s) {
  const Options& o = m.options;
  std::FILE* csv = std::fopen(o.csv.c_str(), "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", o.csv.c_str());
    return;
  }
  std::fprintf(csv, "# ranks,%d,backend,%s,n,%zu,dim,%zu,metric,%s,k,%zu,load_s,%.2f\n", m.ranks, backend.c_str(), o.n,
               o.dim, std::string(to_string(o.metric)).c_str(), o.k, load_s);
  std::fprintf(csv, "ranks,mode,Q,moves,reps,p50_us,p99_us,per_s\n");
  for (const Row& r : m.rows) {
    std::fprintf(csv, "%d,%s,%zu,%zu,%zu,%.2f,%.2f,%.1f\n", m.ranks, r.mode.c_str(), r.q, r.batch, r.reps, r.p50_us,
                 r.p99_us, r.per_s);
  }
  std::fclose(csv);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::optional<Options> options = parse_options(argc, argv, rank);
  if (!options) {
    MPI_Finalize();
    return 2;
  }
  const StoreConfig config = store_config(*options, ranks);
  std::optional<DistributedReferenceSet> store = open_store(config, rank);
  if (!store) {
    MPI_Finalize();
    return 1;
  }

  Draw g{kLoadSeed + std::uint64_t(rank)};
  const double load_s = load_shards(*store, *options, config, rank, ranks, g);
  std::optional<ReferenceSet> single;
  if (rank == 0 && options->single) {
    load_single(single.emplace(single_config(config, options->n)), *options, config, ranks);
  }

  Measurement m(*store, single, *options, rank, ranks);
  Draw gq{kQuerySeed + std::uint64_t(rank)};
  measure_searches(m, gq);
  measure_moves(m, g, gq);
  const bool agree = all_ranks_agree(m.equal);
  if (rank == 0) {
    const std::string backend = store->shard().backend_name();
    print_table(m, backend, load_s, agree);
    write_csv(m, backend, load_s);
  }
  store.reset();
  MPI_Finalize();
  return agree ? 0 : 1;
}
