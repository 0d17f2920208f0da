// bench/updates: how many moves per second a store absorbs (push + publish), and what that
// update load does to concurrent queries. Public API only (ReferenceSet push/publish/search).
//   updates [--n 1000000] [--metric l2|haversine] [--batches 1000,10000,100000,1000000]
//           [--q 16] [--k 16] [--seconds 2] [--min-reps 3] [--backend cuda|cpu]
//           [--producers 4] [--api batch|single] [--publish-threads 0] [--csv updates.csv]
// A store of n points in 2 dimensions (haversine: (lat, lon) degrees; l2: uniform [0,1)) is
// loaded once. Then, in one run:
//   1. queries only: one thread searches Q queries for their K nearest, back to back, for
//      `seconds`; its per-batch latencies (host to host) give p50 / p99 / p99.9;
//   2. for each batch size B: (a) updates alone: the main thread pushes B moves of distinct
//      existing ids to new positions and publishes, repeated for `seconds` (at least
//      `min-reps` times); (b) the same with the query thread running throughout.
//   3. streaming (--producers P > 0): P threads push moves of their own ids continuously
//      while the main thread publishes in a loop, alone and with the query thread running.
// --api batch (the default) pushes moves in spans of kChunk with ReferenceSet::push(span) (one
// claim of queue space per run), --api single one try_push per move; building the Update
// records is inside the timed push either way.
// Moves/s = moves / (push time + publish time), the rate at which moves become visible to
// searches (streaming: moves published / wall time); "publish moves/s" counts publish() alone. Positions are generated before timing,
// so the figures are the library's, not the random generator's. Prints a table, writes CSV.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "streamknn/streamknn.hpp"
#include "bench_util.hpp"

namespace {

using namespace streamknn;
using bench::numbers;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// Value at fraction f of the sorted samples (nearest rank, as bench_latency does); NaN if none.
double at(const std::vector<double>& sorted, double f) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  return sorted[std::min(sorted.size() - 1, std::size_t(f * sorted.size()))];
}

struct Sample {
  int phase;
  float us;
};

/// Phases: 0 = query thread idle, -1 = stop; row r of the table runs in phase 2r + 1 when the
/// query thread runs during it (odd phases), 2r + 2 when it does not (even phases).
constexpr int kIdle = 0;
constexpr int kStop = -1;
bool queries_run_in(int phase) { return phase > 0 && phase % 2 == 1; }
int phase_of(std::size_t row, bool queries) { return int(2 * row) + (queries ? 1 : 2); }

struct Row {
  std::size_t batch = 0;  // 0: no updates (or streaming)
  std::size_t producers = 0;  // > 0: streaming row, batch = mean moves per publish
  bool queries = false;
  std::size_t reps = 0;
  double moves_per_s = 0, publish_moves_per_s = 0;
  double push_ms_p50 = 0, publish_ms_p50 = 0, publish_ms_p99 = 0;
  std::size_t query_batches = 0;
  double p50 = 0, p99 = 0, p999 = 0, query_batches_per_s = 0;
  std::size_t rejected = 0;
};

constexpr std::size_t kChunk = 1024;    // moves per push(span) call
constexpr std::size_t kQuerySets = 64;  // query sets the query thread cycles through

// ---- options and data ----------------------------------------------------------------------

/// The command line (the header comment lists the options and their defaults).
struct Options {
  std::size_t n = 0, q = 0, k = 0;
  std::vector<std::size_t> batches;
  std::size_t max_batch = 0;  // the largest of batches
  double phase_seconds = 0;
  std::size_t min_reps = 0;
  std::size_t producers = 0;  // 0: no streaming rows
  bool batch_api = true;      // --api batch: push(span) of kChunk moves; single: one try_push per move
  Metric metric{};
  BackendKind backend{};
  std::size_t publish_threads = 0;  // 0: the library's default
  std::string csv;
};

/// Reads "--option value" pairs over the defaults. An unknown option, or values that do not fit
/// together, is reported on stderr and gives nothing (the program then exits with status 2).
std::optional<Options> parse_options(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--n", "1000000"},   {"--metric", "l2"},  {"--batches", "1000,10000,100000,1000000"},
                                          {"--q", "16"},        {"--k", "16"},       {"--seconds", "2"},
                                          {"--min-reps", "3"},  {"--backend", "cuda"}, {"--csv", "updates.csv"},
                                          {"--producers", "4"},  {"--api", "batch"}, {"--publish-threads", "0"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return std::nullopt;
    }
    args[argv[i]] = argv[i + 1];
  }
  Options o;
  o.n = std::stoul(args["--n"]), o.q = std::stoul(args["--q"]), o.k = std::stoul(args["--k"]);
  o.batches = numbers(args["--batches"]);
  o.phase_seconds = std::stod(args["--seconds"]);
  o.min_reps = std::stoul(args["--min-reps"]);
  o.producers = std::stoul(args["--producers"]);
  if (args["--api"] != "batch" && args["--api"] != "single") {
    std::fprintf(stderr, "--api must be batch or single\n");
    return std::nullopt;
  }
  o.batch_api = args["--api"] == "batch";
  o.max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  if (o.max_batch > o.n) {
    std::fprintf(stderr, "a batch of %zu moves needs at least that many points (--n %zu)\n", o.max_batch, o.n);
    return std::nullopt;
  }
  o.metric = parse_metric(args["--metric"]);
  o.backend = args["--backend"] == "cpu" ? BackendKind::Cpu : BackendKind::Cuda;
  o.publish_threads = std::stoul(args["--publish-threads"]);
  o.csv = args["--csv"];
  return o;
}

StoreConfig store_config(const Options& o) {
  StoreConfig config;
  config.dim = 2;
  config.metric = o.metric;
  config.capacity_hint = o.n;
  // One publish must take a whole batch: publish() drains at most queue_capacity updates.
  config.queue_capacity = std::max<std::size_t>(o.max_batch, 1 << 16);
  config.backend = o.backend;
  config.publish_threads = o.publish_threads;
  return config;
}

/// Random positions in 2 dimensions: (lat, lon) degrees for haversine, uniform [0,1) for l2.
/// One generator draws everything, in a fixed order, so every run sees the same data.
class Positions {
 public:
  explicit Positions(bool geo) : geo_(geo) {}
  void fill(float* x) {
    x[0] = geo_ ? lat_(g_) : unit_(g_);
    x[1] = geo_ ? lon_(g_) : unit_(g_);
  }
  std::mt19937& generator() { return g_; }

 private:
  bool geo_;
  std::mt19937 g_{11};
  std::uniform_real_distribution<float> lat_{-60, 60}, lon_{-180, 180}, unit_{0, 1};
};

/// Load: n inserts, published in queue-sized parts. Returns the seconds it took.
double load(ReferenceSet& store, std::size_t n, Positions& positions) {
  const auto t_load = Clock::now();
  float v[2];
  for (PointId id = 0; id < n; ++id) {
    positions.fill(v);
    while (!store.try_push(Update::insert(id, v))) store.publish();
  }
  store.publish();
  return seconds_since(t_load);
}

/// Moves and queries, generated before any timing so the figures are the library's, not the
/// random generator's: batch r of size B moves ids order[(r B + i) mod n] (distinct within a
/// batch) to positions pool[(r B + i) mod pool_points] (pool_points > n); the query thread
/// cycles through query_sets.
struct Workload {
  std::vector<PointId> order;
  std::size_t pool_points = 0;
  std::vector<float> pool;                     // pool_points x 2
  std::vector<std::vector<float>> query_sets;  // kQuerySets x (Q x 2)
};

Workload make_workload(const Options& o, Positions& positions) {
  Workload w;
  w.order.resize(o.n);
  std::iota(w.order.begin(), w.order.end(), PointId{0});
  std::shuffle(w.order.begin(), w.order.end(), positions.generator());
  // More positions than points, and not a multiple of any batch size: positions keep
  // changing, and the moves do not pile points onto a few positions (a pool of max_batch + 4,099
  // for small batches put hundreds of points on each, every query's k-th place tied).
  w.pool_points = o.n + 4099;  // (max_batch <= n is checked above)
  w.pool.resize(w.pool_points * 2);
  for (std::size_t i = 0; i < w.pool_points; ++i) positions.fill(&w.pool[2 * i]);
  w.query_sets.assign(kQuerySets, std::vector<float>(o.q * 2));
  for (auto& set : w.query_sets)
    for (std::size_t i = 0; i < o.q; ++i) positions.fill(&set[2 * i]);
  return w;
}

/// Searches before the first measurement, so building graphs and workspace is not timed.
void warm_up(const ReferenceSet& store, const Workload& w, std::size_t k) {
  for (int i = 0; i < 20; ++i) store.search(w.query_sets[i % kQuerySets], k);
}

// ---- the query thread ----------------------------------------------------------------------

/// The query thread: runs back-to-back searches of Q queries while the phase is odd, idles
/// otherwise, and keeps each search's latency (host to host) with its phase.
class QueryThread {
 public:
  QueryThread(const ReferenceSet& store, const std::vector<std::vector<float>>& query_sets, std::size_t q,
              std::size_t k)
      : store_(store), query_sets_(query_sets), q_(q), k_(k) {
    samples_.reserve(std::size_t(1) << 22);
    thread_ = std::thread([this] { run(); });
  }
  // Stops and joins the query thread however main leaves its scope (an exception from publish
  // included), so a failure is reported instead of ending in std::terminate.
  ~QueryThread() {
    phase_.store(kStop);
    if (thread_.joinable()) thread_.join();
  }
  QueryThread(const QueryThread&) = delete;
  QueryThread& operator=(const QueryThread&) = delete;

  /// Switches phase and waits until the query thread has seen it (so no search of the previous
  /// phase is still running when the next one starts timing).
  void enter(int p) {
    phase_.store(p, std::memory_order_release);
    while (acknowledged_.load(std::memory_order_acquire) != p && !failed_) std::this_thread::yield();
  }
  /// Stops the thread and waits for it; failed(), error() and samples() are final after this.
  void finish() {
    enter(kStop);
    thread_.join();
  }
  bool failed() const { return failed_; }
  const std::string& error() const { return error_; }
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  void run() {
    std::size_t next = 0;
    try {
      for (;;) {
        const int p = phase_.load(std::memory_order_acquire);
        acknowledged_.store(p, std::memory_order_release);
        if (p == kStop) return;
        if (!queries_run_in(p)) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        const auto a = Clock::now();
        const Neighbors nn = store_.search(query_sets_[next++ % kQuerySets], k_);
        const float us = std::chrono::duration<float, std::micro>(Clock::now() - a).count();
        if (nn.ids.size() != q_ * k_) throw std::runtime_error("search returned a result of the wrong size");
        if (samples_.size() < samples_.capacity()) samples_.push_back({p, us});
      }
    } catch (const std::exception& e) {
      error_ = e.what();
      failed_ = true;
      acknowledged_.store(phase_.load());
      while (phase_.load() != kStop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  const ReferenceSet& store_;
  const std::vector<std::vector<float>>& query_sets_;
  const std::size_t q_, k_;
  std::atomic<int> phase_{kIdle}, acknowledged_{kIdle};
  std::vector<Sample> samples_;
  std::atomic<bool> failed_{false};
  std::string error_;
  std::thread thread_;  // last: starts once everything it reads is constructed
};

// ---- the measurement phases ----------------------------------------------------------------

/// What the phases share: the store and its data, the query thread, and the table so far (row r
/// took row_seconds[r]).
struct Measurement {
  Measurement(ReferenceSet& store, const Options& options, const Workload& work, QueryThread& queries,
              std::size_t queue_capacity)
      : store(store), options(options), work(work), queries(queries), queue_capacity(queue_capacity) {
    chunk.reserve(kChunk);
  }
  ReferenceSet& store;
  const Options& options;
  const Workload& work;
  QueryThread& queries;
  const std::size_t queue_capacity;
  std::vector<Row> rows;
  std::vector<double> row_seconds;
  std::vector<Update> chunk;    // the span of one push(span) call
  std::size_t rep_counter = 0;  // batches pushed so far, over all batch sizes
  bool queue_full = false;      // a batch did not fit the queue: no more rows, exit status 1
};

/// 1. Queries only: the query thread runs for `seconds` with no updates.
void measure_queries_only(Measurement& m) {
  Row row;
  row.queries = true;
  const auto t = Clock::now();
  m.queries.enter(phase_of(m.rows.size(), true));
  std::this_thread::sleep_for(std::chrono::duration<double>(m.options.phase_seconds));
  m.queries.enter(kIdle);
  m.row_seconds.push_back(seconds_since(t));
  m.rows.push_back(row);
}

/// Pushes moves base .. base + batch - 1 of the sequence Workload describes (building the Update
/// records included): kChunk per push(span) with --api batch, one try_push each with --api
/// single. A queue too small for the batch is reported and sets queue_full.
void push_batch(Measurement& m, std::size_t batch, std::size_t base) {
  const std::size_t n = m.options.n, pool_points = m.work.pool_points;
  const std::vector<PointId>& order = m.work.order;
  const std::vector<float>& pool = m.work.pool;
  auto move_at = [&](std::size_t i) {
    const std::size_t j = (base + i) % n, at_pool = (base + i) % pool_points;
    return Update::move(order[j], std::span<const float>(&pool[2 * at_pool], 2));
  };
  ReferenceSet& store = m.store;
  std::vector<Update>& chunk = m.chunk;
  const bool batch_api = m.options.batch_api;
  for (std::size_t i = 0; i < batch;) {
    std::size_t queued = 0, wanted = 1;
    if (batch_api) {
      wanted = std::min(kChunk, batch - i);
      chunk.clear();
      for (std::size_t c = 0; c < wanted; ++c) chunk.push_back(move_at(i + c));
      queued = store.try_push(std::span<const Update>(chunk));
    } else {
      queued = store.try_push(move_at(i)) ? 1 : 0;
    }
    if (queued < wanted) {
      std::fprintf(stderr, "queue full after %zu of %zu moves (queue_capacity %zu)\n", i + queued, batch,
                   m.queue_capacity);
      m.queue_full = true;
      return;
    }
    i += queued;
  }
}

/// A batch row's rates and push / publish percentiles from the seconds of its repetitions.
void summarize_batches(Row& row, std::vector<double> push_s, std::vector<double> publish_s) {
  row.reps = push_s.size();
  const double push_total = std::accumulate(push_s.begin(), push_s.end(), 0.0);
  const double publish_total = std::accumulate(publish_s.begin(), publish_s.end(), 0.0);
  row.moves_per_s = double(row.batch) * row.reps / (push_total + publish_total);
  row.publish_moves_per_s = double(row.batch) * row.reps / publish_total;
  std::sort(push_s.begin(), push_s.end());
  std::sort(publish_s.begin(), publish_s.end());
  row.push_ms_p50 = 1e3 * at(push_s, 0.5);
  row.publish_ms_p50 = 1e3 * at(publish_s, 0.5);
  row.publish_ms_p99 = 1e3 * at(publish_s, 0.99);
}

/// 2. One row of batch size B: the main thread pushes B moves and publishes, repeated for
/// `seconds` (at least `min-reps` times), with the query thread running or idle.
void measure_batch(Measurement& m, std::size_t batch, bool with_queries) {
  Row row;
  row.batch = batch;
  row.queries = with_queries;
  std::vector<double> push_s, publish_s;
  const auto t = Clock::now();
  m.queries.enter(phase_of(m.rows.size(), with_queries));
  while (!m.queue_full && (seconds_since(t) < m.options.phase_seconds || push_s.size() < m.options.min_reps)) {
    const std::size_t base = m.rep_counter++ * batch;
    const auto a = Clock::now();
    push_batch(m, batch, base);
    const auto b = Clock::now();
    const PublishReport report = m.store.publish();
    const auto c = Clock::now();
    push_s.push_back(std::chrono::duration<double>(b - a).count());
    publish_s.push_back(std::chrono::duration<double>(c - b).count());
    row.rejected += batch - std::min(batch, report.moved);
  }
  m.queries.enter(kIdle);
  m.row_seconds.push_back(seconds_since(t));
  summarize_batches(row, std::move(push_s), std::move(publish_s));
  m.rows.push_back(row);
}

/// 2. Each batch size, alone and with the query thread running, until the queue runs full.
void measure_batches(Measurement& m) {
  for (std::size_t batch : m.options.batches) {
    for (bool with_queries : {false, true}) {
      if (m.queue_full) break;
      measure_batch(m, batch, with_queries);
    }
  }
}

/// Producer t of P, until stop: moves ids order[j] for j = t, t + P, ...: disjoint from the other
/// producers; with the batch API, kChunk moves per push(span).
void produce(ReferenceSet& store, const Workload& w, const Options& o, std::size_t t, const std::atomic<bool>& stop) {
  std::vector<Update> mine;
  mine.reserve(kChunk);
  for (std::size_t i = t, round = 0; !stop.load(std::memory_order_relaxed);) {
    mine.clear();
    while (mine.size() < (o.batch_api ? kChunk : 1)) {
      const std::size_t at_pool = (i + round * 7919) % w.pool_points;
      mine.push_back(Update::move(w.order[i], std::span<const float>(&w.pool[2 * at_pool], 2)));
      i += o.producers;
      if (i >= o.n) i = t, ++round;
    }
    for (std::span<const Update> rest(mine); !rest.empty();) {
      const std::size_t queued = store.try_push(rest);
      rest = rest.subspan(queued);
      if (queued == 0) {
        if (stop.load(std::memory_order_relaxed)) return;
        std::this_thread::yield();
      }
    }
  }
}

/// A streaming row's figures: batch = mean moves per publish, moves/s = moves published / wall
/// time, publish moves/s and percentiles from the publishes that drained something.
void summarize_stream(Row& row, std::size_t moved, double elapsed, std::vector<double> publish_s) {
  row.reps = publish_s.size();
  row.batch = row.reps ? moved / row.reps : 0;
  row.moves_per_s = double(moved) / elapsed;
  row.publish_moves_per_s = double(moved) / std::accumulate(publish_s.begin(), publish_s.end(), 0.0);
  std::sort(publish_s.begin(), publish_s.end());
  row.publish_ms_p50 = 1e3 * at(publish_s, 0.5);
  row.publish_ms_p99 = 1e3 * at(publish_s, 0.99);
}

/// 3. One streaming row: P producers push continuously while the main thread publishes back to
/// back for `seconds`, with the query thread running or idle.
void measure_stream(Measurement& m, bool with_queries) {
  Row row;
  row.producers = m.options.producers;
  row.queries = with_queries;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < m.options.producers; ++t) {
    threads.emplace_back([&m, &stop, t] { produce(m.store, m.work, m.options, t, stop); });
  }
  std::vector<double> publish_s;
  std::size_t moved = 0;
  m.queries.enter(phase_of(m.rows.size(), with_queries));
  m.store.publish();  // start the clock on a drained queue
  const auto t = Clock::now();
  while (seconds_since(t) < m.options.phase_seconds) {
    const auto b = Clock::now();
    const PublishReport report = m.store.publish();
    if (report.drained == 0) continue;  // the producers had nothing queued yet
    publish_s.push_back(seconds_since(b));
    moved += report.moved;
    row.rejected += report.rejected.size();
  }
  const double elapsed = seconds_since(t);
  stop = true;
  for (auto& th : threads) th.join();
  m.store.publish();
  m.queries.enter(kIdle);
  m.row_seconds.push_back(elapsed);
  summarize_stream(row, moved, elapsed, std::move(publish_s));
  m.rows.push_back(row);
}

/// 3. Streaming (--producers P > 0), alone and with the query thread running.
void measure_streaming(Measurement& m) {
  for (bool with_queries : {false, true}) {
    if (m.options.producers == 0 || m.queue_full) break;
    measure_stream(m, with_queries);
  }
}

/// Query latencies per row that ran the query thread: its samples of that row's phase.
void add_query_latencies(std::vector<Row>& rows, const std::vector<double>& row_seconds,
                         const std::vector<Sample>& samples) {
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].queries) continue;
    std::vector<double> us;
    for (const Sample& s : samples)
      if (s.phase == phase_of(r, true)) us.push_back(s.us);
    std::sort(us.begin(), us.end());
    rows[r].query_batches = us.size();
    rows[r].p50 = at(us, 0.5);
    rows[r].p99 = at(us, 0.99);
    rows[r].p999 = at(us, 0.999);
    rows[r].query_batches_per_s = us.size() / row_seconds[r];
  }
}

// ---- the report ----------------------------------------------------------------------------

std::string publish_threads_name(const Options& o) {
  return o.publish_threads ? std::to_string(o.publish_threads) : "default";
}

std::size_t rejected_moves(const std::vector<Row>& rows) {
  std::size_t rejected = 0;
  for (const Row& r : rows) rejected += r.rejected;
  return rejected;
}

/// One line of the table; cells that do not apply to the row are "-".
void print_row(const Row& r) {
  const std::string batch = r.producers ? "P=" + std::to_string(r.producers) + " live"
                            : r.batch ? std::to_string(r.batch) : "none";
  if (r.producers) {
    std::printf("%-9s %-8s %5zu %12.0f %12.0f %9s %11.3f %11.3f |", batch.c_str(), r.queries ? "running" : "off",
                r.reps, r.moves_per_s, r.publish_moves_per_s, "-", r.publish_ms_p50, r.publish_ms_p99);
  } else if (r.batch) {
    std::printf("%-9s %-8s %5zu %12.0f %12.0f %9.3f %11.3f %11.3f |", batch.c_str(), r.queries ? "running" : "off",
                r.reps, r.moves_per_s, r.publish_moves_per_s, r.push_ms_p50, r.publish_ms_p50, r.publish_ms_p99);
  } else {
    std::printf("%-9s %-8s %5s %12s %12s %9s %11s %11s |", batch.c_str(), "running", "-", "-", "-", "-", "-", "-");
  }
  if (r.queries) {
    std::printf(" %9zu %9.1f %9.1f %9.1f %10.0f\n", r.query_batches, r.p50, r.p99, r.p999, r.query_batches_per_s);
  } else {
    std::printf(" %9s %9s %9s %9s %10s\n", "-", "-", "-", "-", "-");
  }
}

void print_table(const Options& o, const std::string& backend, double load_s, const std::vector<Row>& rows) {
  const std::string metric = std::string(to_string(o.metric));
  std::printf("bench_updates: %zu x 2 store (%s) on %s, loaded in %.1f s; query thread: Q=%zu K=%zu back to back; "
              "push API: %s; publish threads: %s\n", o.n, metric.c_str(), backend.c_str(), load_s, o.q, o.k,
              o.batch_api ? "push(span) of 1024 moves" : "one try_push per move", publish_threads_name(o).c_str());
  std::printf("%-9s %-8s %5s %12s %12s %9s %11s %11s | %9s %9s %9s %9s %10s\n", "batch", "queries", "reps", "moves/s",
              "publish m/s", "push ms", "publish ms", "pub p99 ms", "q batches", "p50 us", "p99 us", "p99.9 us",
              "batches/s");
  for (const Row& r : rows) print_row(r);
  if (o.producers) {
    std::printf("P=%zu live: %zu threads push moves continuously while the main thread publishes back to back; "
                "'batch' in the CSV = mean moves per publish, moves/s = moves published / wall time\n", o.producers,
                o.producers);
  }
  const std::size_t rejected = rejected_moves(rows);
  if (rejected) std::printf("WARNING: %zu moves were not applied (rejected or missing from the report)\n", rejected);
}

// Cells that do not apply to a row (moves of the queries-only row, latencies of the
// updates-alone rows) are left empty.
std::string cell(bool applies, double v, const char* format) {
  char buf[64] = "";
  if (applies) std::snprintf(buf, sizeof buf, format, v);
  return std::string(buf);
}

void write_csv_row(std::FILE* csv, const Options& o, const std::string& metric, const Row& r) {
  const bool m = r.batch > 0 || r.producers > 0, qq = r.queries;
  std::fprintf(csv, "%s,%zu,%zu,%d,%zu,%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%zu\n", metric.c_str(), o.n, r.batch,
               qq ? 1 : 0, o.q, o.k, cell(m, double(r.reps), "%.0f").c_str(), cell(m, r.moves_per_s, "%.1f").c_str(),
               cell(m, r.publish_moves_per_s, "%.1f").c_str(), cell(m && !r.producers, r.push_ms_p50, "%.4f").c_str(),
               cell(m, r.publish_ms_p50, "%.4f").c_str(), cell(m, r.publish_ms_p99, "%.4f").c_str(),
               cell(qq, double(r.query_batches), "%.0f").c_str(), cell(qq, r.p50, "%.2f").c_str(),
               cell(qq, r.p99, "%.2f").c_str(), cell(qq, r.p999, "%.2f").c_str(),
               cell(qq, r.query_batches_per_s, "%.1f").c_str(), cell(m, double(r.rejected), "%.0f").c_str(),
               r.producers);
}

/// Writes --csv; false, after saying so on stderr, when the file cannot be opened.
bool write_csv(const Options& o, const std::string& backend, double load_s, const std::vector<Row>& rows) {
  std::FILE* csv = std::fopen(o.csv.c_str(), "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", o.csv.c_str());
    return false;
  }
  const std::string metric = std::string(to_string(o.metric));
  std::fprintf(csv, "# backend,%s,n,%zu,dim,2,metric,%s,load_s,%.2f,api,%s,publish_threads,%s\n", backend.c_str(),
               o.n, metric.c_str(), load_s, o.batch_api ? "batch" : "single", publish_threads_name(o).c_str());
  std::fprintf(csv,
               "metric,N,batch,queries,Q,K,reps,moves_per_s,publish_moves_per_s,push_ms_p50,publish_ms_p50,"
               "publish_ms_p99,query_batches,query_p50_us,query_p99_us,query_p999_us,query_batches_per_s,rejected,producers\n");
  for (const Row& r : rows) write_csv_row(csv, o, metric, r);
  std::fclose(csv);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = parse_options(argc, argv);
  if (!options) return 2;
  const StoreConfig config = store_config(*options);
  ReferenceSet store(config);
  Positions positions(config.metric == Metric::Haversine);
  const double load_s = load(store, options->n, positions);
  const Workload work = make_workload(*options, positions);
  warm_up(store, work, options->k);

  QueryThread queries(store, work.query_sets, options->q, options->k);
  Measurement m(store, *options, work, queries, config.queue_capacity);
  measure_queries_only(m);
  measure_batches(m);
  measure_streaming(m);
  queries.finish();
  if (queries.failed()) {
    std::fprintf(stderr, "query thread failed: %s\n", queries.error().c_str());
    return 1;
  }
  if (m.queue_full) return 1;
  add_query_latencies(m.rows, m.row_seconds, queries.samples());

  print_table(*options, store.backend_name(), load_s, m.rows);
  if (!write_csv(*options, store.backend_name(), load_s, m.rows)) return 1;
  return rejected_moves(m.rows) ? 1 : 0;
}
