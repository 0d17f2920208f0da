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
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "streamknn/streamknn.hpp"
#include "bench_util.hpp"

namespace {

using bench::median;
using bench::numbers;
using bench::split;

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

}  // namespace

int main(int argc, char** argv) {
  using namespace streamknn;
  std::map<std::string, std::string> args{{"--n", "1000000"},   {"--metric", "l2"},  {"--batches", "1000,10000,100000,1000000"},
                                          {"--q", "16"},        {"--k", "16"},       {"--seconds", "2"},
                                          {"--min-reps", "3"},  {"--backend", "cuda"}, {"--csv", "updates.csv"},
                                          {"--producers", "4"},  {"--api", "batch"}, {"--publish-threads", "0"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!args.count(argv[i])) {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  const std::size_t n = std::stoul(args["--n"]), q = std::stoul(args["--q"]), k = std::stoul(args["--k"]);
  const std::vector<std::size_t> batches = numbers(args["--batches"]);
  const double phase_seconds = std::stod(args["--seconds"]);
  const std::size_t min_reps = std::stoul(args["--min-reps"]);
  const std::size_t producers = std::stoul(args["--producers"]);
  if (args["--api"] != "batch" && args["--api"] != "single") {
    std::fprintf(stderr, "--api must be batch or single\n");
    return 2;
  }
  const bool batch_api = args["--api"] == "batch";
  constexpr std::size_t kChunk = 1024;  // moves per push(span) call
  const std::size_t max_batch = *std::max_element(batches.begin(), batches.end());
  if (max_batch > n) {
    std::fprintf(stderr, "a batch of %zu moves needs at least that many points (--n %zu)\n", max_batch, n);
    return 2;
  }

  StoreConfig config;
  config.dim = 2;
  config.metric = parse_metric(args["--metric"]);
  config.capacity_hint = n;
  // One publish must take a whole batch: publish() drains at most queue_capacity updates.
  config.queue_capacity = std::max<std::size_t>(max_batch, 1 << 16);
  config.backend = args["--backend"] == "cpu" ? BackendKind::Cpu : BackendKind::Cuda;
  config.publish_threads = std::stoul(args["--publish-threads"]);  // 0: the library's default
  ReferenceSet store(config);
  const bool geo = config.metric == Metric::Haversine;

  std::mt19937 g(11);
  std::uniform_real_distribution<float> lat(-60, 60), lon(-180, 180), unit(0, 1);
  auto fill = [&](float* x) {
    x[0] = geo ? lat(g) : unit(g);
    x[1] = geo ? lon(g) : unit(g);
  };

  // Load: n inserts, published in queue-sized parts.
  const auto t_load = Clock::now();
  {
    float v[2];
    for (PointId id = 0; id < n; ++id) {
      fill(v);
      while (!store.try_push(Update::insert(id, v))) store.publish();
    }
    store.publish();
  }
  const double load_s = seconds_since(t_load);

  // Moves, generated before any timing: batch r of size B moves ids order[(r B + i) mod n] (distinct
  // within a batch) to positions pool[(r B + i) mod pool size].
  std::vector<PointId> order(n);
  std::iota(order.begin(), order.end(), PointId{0});
  std::shuffle(order.begin(), order.end(), g);
  const std::size_t pool_points = max_batch + 4099;  // not a multiple of any batch size: positions keep changing
  std::vector<float> pool(pool_points * 2);
  for (std::size_t i = 0; i < pool_points; ++i) fill(&pool[2 * i]);

  // Query sets for the query thread.
  constexpr std::size_t kQuerySets = 64;
  std::vector<std::vector<float>> query_sets(kQuerySets, std::vector<float>(q * 2));
  for (auto& set : query_sets)
    for (std::size_t i = 0; i < q; ++i) fill(&set[2 * i]);
  for (int w = 0; w < 20; ++w) store.search(query_sets[w % kQuerySets], k);  // warm-up (graphs, workspace)

  // The query thread: runs back-to-back searches while the phase is odd, idles otherwise.
  std::atomic<int> phase{kIdle}, acknowledged{kIdle};
  std::vector<Sample> samples;
  samples.reserve(std::size_t(1) << 22);
  std::atomic<bool> query_error{false};
  std::string query_error_text;
  std::thread querier([&] {
    std::size_t next = 0;
    try {
      for (;;) {
        const int p = phase.load(std::memory_order_acquire);
        acknowledged.store(p, std::memory_order_release);
        if (p == kStop) return;
        if (!queries_run_in(p)) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        const auto a = Clock::now();
        const Neighbors nn = store.search(query_sets[next++ % kQuerySets], k);
        const float us = std::chrono::duration<float, std::micro>(Clock::now() - a).count();
        if (nn.ids.size() != q * k) throw std::runtime_error("search returned a result of the wrong size");
        if (samples.size() < samples.capacity()) samples.push_back({p, us});
      }
    } catch (const std::exception& e) {
      query_error_text = e.what();
      query_error = true;
      acknowledged.store(phase.load());
      while (phase.load() != kStop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  // Stops and joins the query thread however main leaves this scope (an exception from publish
  // included), so a failure is reported instead of ending in std::terminate.
  struct Joiner {
    std::atomic<int>& phase;
    std::thread& thread;
    ~Joiner() {
      phase.store(kStop);
      if (thread.joinable()) thread.join();
    }
  } joiner{phase, querier};
  // Switches phase and waits until the query thread has seen it (so no search of the previous
  // phase is still running when the next one starts timing).
  auto enter = [&](int p) {
    phase.store(p, std::memory_order_release);
    while (acknowledged.load(std::memory_order_acquire) != p && !query_error) std::this_thread::yield();
  };

  std::vector<Row> rows;
  std::vector<double> row_seconds;
  std::vector<Update> chunk;
  chunk.reserve(kChunk);
  std::size_t rep_counter = 0;
  bool queue_full = false;

  // 1. Queries only.
  {
    Row row;
    row.queries = true;
    const auto t = Clock::now();
    enter(phase_of(rows.size(), true));
    std::this_thread::sleep_for(std::chrono::duration<double>(phase_seconds));
    enter(kIdle);
    row_seconds.push_back(seconds_since(t));
    rows.push_back(row);
  }

  // 2. Each batch size, alone and with the query thread running.
  for (std::size_t batch : batches) {
    for (bool with_queries : {false, true}) {
      if (queue_full) break;
      Row row;
      row.batch = batch;
      row.queries = with_queries;
      std::vector<double> push_s, publish_s;
      const auto t = Clock::now();
      enter(phase_of(rows.size(), with_queries));
      while (!queue_full && (seconds_since(t) < phase_seconds || push_s.size() < min_reps)) {
        const std::size_t base = rep_counter++ * batch;
        const auto a = Clock::now();
        auto move_at = [&](std::size_t i) {
          const std::size_t j = (base + i) % n, at_pool = (base + i) % pool_points;
          return Update::move(order[j], std::span<const float>(&pool[2 * at_pool], 2));
        };
        for (std::size_t i = 0; i < batch && !queue_full;) {
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
                         config.queue_capacity);
            queue_full = true;
          }
          i += queued;
        }
        const auto b = Clock::now();
        const PublishReport report = store.publish();
        const auto c = Clock::now();
        push_s.push_back(std::chrono::duration<double>(b - a).count());
        publish_s.push_back(std::chrono::duration<double>(c - b).count());
        row.rejected += batch - std::min(batch, report.moved);
      }
      enter(kIdle);
      row_seconds.push_back(seconds_since(t));
      row.reps = push_s.size();
      const double push_total = std::accumulate(push_s.begin(), push_s.end(), 0.0);
      const double publish_total = std::accumulate(publish_s.begin(), publish_s.end(), 0.0);
      row.moves_per_s = double(batch) * row.reps / (push_total + publish_total);
      row.publish_moves_per_s = double(batch) * row.reps / publish_total;
      std::sort(push_s.begin(), push_s.end());
      std::sort(publish_s.begin(), publish_s.end());
      row.push_ms_p50 = 1e3 * at(push_s, 0.5);
      row.publish_ms_p50 = 1e3 * at(publish_s, 0.5);
      row.publish_ms_p99 = 1e3 * at(publish_s, 0.99);
      rows.push_back(row);
    }
  }
  // 3. Streaming: producers push continuously, the main thread publishes back to back.
  for (bool with_queries : {false, true}) {
    if (producers == 0 || queue_full) break;
    Row row;
    row.producers = producers;
    row.queries = with_queries;
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < producers; ++t) {
      threads.emplace_back([&, t] {
        // Producer t moves ids order[j] for j = t, t + P, ...: disjoint from the other producers;
        // with the batch API, kChunk moves per push(span).
        std::vector<Update> mine;
        mine.reserve(kChunk);
        for (std::size_t i = t, round = 0; !stop.load(std::memory_order_relaxed);) {
          mine.clear();
          while (mine.size() < (batch_api ? kChunk : 1)) {
            const std::size_t at_pool = (i + round * 7919) % pool_points;
            mine.push_back(Update::move(order[i], std::span<const float>(&pool[2 * at_pool], 2)));
            i += producers;
            if (i >= n) i = t, ++round;
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
      });
    }
    std::vector<double> publish_s;
    std::size_t moved = 0;
    enter(phase_of(rows.size(), with_queries));
    store.publish();  // start the clock on a drained queue
    const auto t = Clock::now();
    while (seconds_since(t) < phase_seconds) {
      const auto b = Clock::now();
      const PublishReport report = store.publish();
      if (report.drained == 0) continue;  // the producers had nothing queued yet
      publish_s.push_back(seconds_since(b));
      moved += report.moved;
      row.rejected += report.rejected.size();
    }
    const double elapsed = seconds_since(t);
    stop = true;
    for (auto& th : threads) th.join();
    store.publish();
    enter(kIdle);
    row_seconds.push_back(elapsed);
    row.reps = publish_s.size();
    row.batch = row.reps ? moved / row.reps : 0;
    row.moves_per_s = double(moved) / elapsed;
    row.publish_moves_per_s = double(moved) / std::accumulate(publish_s.begin(), publish_s.end(), 0.0);
    std::sort(publish_s.begin(), publish_s.end());
    row.publish_ms_p50 = 1e3 * at(publish_s, 0.5);
    row.publish_ms_p99 = 1e3 * at(publish_s, 0.99);
    rows.push_back(row);
  }
  enter(kStop);
  querier.join();
  if (query_error) {
    std::fprintf(stderr, "query thread failed: %s\n", query_error_text.c_str());
    return 1;
  }
  if (queue_full) return 1;

  // Query latencies per phase.
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

  const std::string metric = std::string(to_string(config.metric));
  const std::string publish_threads = config.publish_threads ? std::to_string(config.publish_threads) : "default";
  std::printf("bench_updates: %zu x 2 store (%s) on %s, loaded in %.1f s; query thread: Q=%zu K=%zu back to back; "
              "push API: %s; publish threads: %s\n", n, metric.c_str(), store.backend_name().c_str(), load_s, q, k,
              batch_api ? "push(span) of 1024 moves" : "one try_push per move", publish_threads.c_str());
  std::printf("%-9s %-8s %5s %12s %12s %9s %11s %11s | %9s %9s %9s %9s %10s\n", "batch", "queries", "reps", "moves/s",
              "publish m/s", "push ms", "publish ms", "pub p99 ms", "q batches", "p50 us", "p99 us", "p99.9 us",
              "batches/s");
  std::size_t rejected = 0;
  for (const Row& r : rows) {
    rejected += r.rejected;
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
  if (producers) {
    std::printf("P=%zu live: %zu threads push moves continuously while the main thread publishes back to back; "
                "'batch' in the CSV = mean moves per publish, moves/s = moves published / wall time\n", producers,
                producers);
  }
  if (rejected) std::printf("WARNING: %zu moves were not applied (rejected or missing from the report)\n", rejected);

  std::FILE* csv = std::fopen(args["--csv"].c_str(), "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", args["--csv"].c_str());
    return 1;
  }
  std::fprintf(csv, "# backend,%s,n,%zu,dim,2,metric,%s,load_s,%.2f,api,%s,publish_threads,%s\n",
               store.backend_name().c_str(), n, metric.c_str(), load_s, batch_api ? "batch" : "single",
               publish_threads.c_str());
  std::fprintf(csv,
               "metric,N,batch,queries,Q,K,reps,moves_per_s,publish_moves_per_s,push_ms_p50,publish_ms_p50,"
               "publish_ms_p99,query_batches,query_p50_us,query_p99_us,query_p999_us,query_batches_per_s,rejected,producers\n");
  // Cells that do not apply to a row (moves of the queries-only row, latencies of the
  // updates-alone rows) are left empty.
  auto cell = [](bool applies, double v, const char* format) {
    char buf[64] = "";
    if (applies) std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  for (const Row& r : rows) {
    const bool m = r.batch > 0 || r.producers > 0, qq = r.queries;
    std::fprintf(csv, "%s,%zu,%zu,%d,%zu,%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%zu\n", metric.c_str(), n, r.batch,
                 qq ? 1 : 0, q, k, cell(m, double(r.reps), "%.0f").c_str(), cell(m, r.moves_per_s, "%.1f").c_str(),
                 cell(m, r.publish_moves_per_s, "%.1f").c_str(), cell(m && !r.producers, r.push_ms_p50, "%.4f").c_str(),
                 cell(m, r.publish_ms_p50, "%.4f").c_str(), cell(m, r.publish_ms_p99, "%.4f").c_str(),
                 cell(qq, double(r.query_batches), "%.0f").c_str(), cell(qq, r.p50, "%.2f").c_str(),
                 cell(qq, r.p99, "%.2f").c_str(), cell(qq, r.p999, "%.2f").c_str(),
                 cell(qq, r.query_batches_per_s, "%.1f").c_str(), cell(m, double(r.rejected), "%.0f").c_str(),
                 r.producers);
  }
  std::fclose(csv);
  return rejected ? 1 : 0;
}
