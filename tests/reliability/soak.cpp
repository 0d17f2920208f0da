// streamknn_soak: the moving-drivers stream (streams/moving_objects.hpp) at full speed for a
// long time, watching for leaks, errors and slow-downs.
//
//   streamknn_soak [--backend auto|cpu|cuda] [--seconds 600] [--warmup 60] [--interval 10]
//                  [--drivers 100000] [--movers 2] [--queriers 2] [--k 16] [--batch 64]
//                  [--check-throughput 0.5]
//
// Mover threads each simulate their share of the drivers and push a move for every driver
// every tick (blocking push: the queue is the back-pressure); one thread publishes back to
// back; querier threads search batches of passengers for their k nearest drivers (haversine).
// Every interval it prints moves applied/s, queries/s, host RSS and, on the CUDA backend,
// device memory in use. At the end it checks: no error; host and device memory after the
// warm-up stay within max(16 MiB, 2%) of their level when the warm-up ended; every interval's
// throughput is at least --check-throughput (0 = no check) times the median; and, once the
// movers stop, 1000 sampled drivers are found exactly where they were last moved.
// Exit status 0 when every check passes, 1 otherwise, 2 on a bad command line.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "streamknn/streamknn.hpp"
#include "streams/moving_objects.hpp"

#if defined(STREAMKNN_SOAK_CUDA_RUNTIME)
#include <cuda_runtime.h>
#endif

// Under ASan the quarantine holds freed memory (256 MiB by default) and TSan keeps shadow and
// history memory, so resident size says nothing about leaks there: the memory check is
// reported but not enforced in sanitizer builds (LeakSanitizer checks leaks instead).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STREAMKNN_SOAK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STREAMKNN_SOAK_SANITIZED 1
#endif
#endif

using namespace streamknn;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string backend = "auto";
  double seconds = 600, warmup = 60, interval = 10;
  std::size_t drivers = 100000, movers = 2, queriers = 2, k = 16, batch = 64;
  double check_throughput = 0.5;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr, "streamknn_soak: %s\n(see the comment at the top of tests/reliability/soak.cpp)\n", problem.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("option " + a + " needs a value");
    const std::string v = argv[++i];
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    const bool number = end && *end == '\0' && std::isfinite(x) && x >= 0;
    if (a == "--backend") {
      if (v != "auto" && v != "cpu" && v != "cuda") usage("--backend takes auto, cpu or cuda, not " + v);
      o.backend = v;
      continue;
    }
    if (!number) usage(a + " takes a non-negative number, not " + v);
    if (a == "--seconds") o.seconds = x;
    else if (a == "--warmup") o.warmup = x;
    else if (a == "--interval") o.interval = x;
    else if (a == "--drivers") o.drivers = std::size_t(x);
    else if (a == "--movers") o.movers = std::size_t(x);
    else if (a == "--queriers") o.queriers = std::size_t(x);
    else if (a == "--k") o.k = std::size_t(x);
    else if (a == "--batch") o.batch = std::size_t(x);
    else if (a == "--check-throughput") o.check_throughput = x;
    else usage("unknown option " + a);
  }
  if (o.warmup >= o.seconds) usage("--warmup must be shorter than --seconds");
  if (o.interval <= 0 || o.movers < 1 || o.drivers < o.movers || o.k < 1 || o.batch < 1) usage("a count or interval is zero");
  return o;
}

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * std::size_t(sysconf(_SC_PAGESIZE));
}

/// Device memory in use on the current device, or 0 where there is none to measure.
std::size_t device_used_bytes(bool cuda) {
#if defined(STREAMKNN_SOAK_CUDA_RUNTIME)
  std::size_t free = 0, total = 0;
  if (cuda && cudaMemGetInfo(&free, &total) == cudaSuccess) return total - free;
#else
  (void)cuda;
#endif
  return 0;
}

double mib(std::size_t bytes) { return double(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  StoreConfig config;
  config.dim = 2;
  config.metric = Metric::Haversine;
  config.capacity_hint = o.drivers;
  config.queue_capacity = 1 << 16;
  config.backend = o.backend == "cpu" ? BackendKind::Cpu : o.backend == "cuda" ? BackendKind::Cuda : BackendKind::Auto;
  std::unique_ptr<ReferenceSet> store;
  try {
    store = std::make_unique<ReferenceSet>(config);
  } catch (const Error& e) {
    std::fprintf(stderr, "streamknn_soak: cannot create the store: %s\n", e.what());
    return 1;
  }
  const bool cuda = store->backend() == BackendKind::Cuda;
  std::printf("streamknn_soak: %zu drivers (haversine), %zu movers, %zu queriers (batches of %zu, k=%zu), %.0f s with "
              "%.0f s warm-up, on %s\n",
              o.drivers, o.movers, o.queriers, o.batch, o.k, o.seconds, o.warmup, store->backend_name().c_str());

  // Each mover owns a world of drivers; driver d of mover m has id m * 2^40 + d.
  std::vector<std::unique_ptr<streams::MovingObjects>> worlds;
  for (std::size_t m = 0; m < o.movers; ++m) {
    streams::MovingObjectsConfig w;
    w.drivers = o.drivers / o.movers + (m < o.drivers % o.movers ? 1 : 0);
    w.seed = 42 + m;
    worlds.push_back(std::make_unique<streams::MovingObjects>(w));
    const auto pos = worlds.back()->positions();
    for (std::size_t d = 0; d < w.drivers; ++d) {
      while (!store->try_push(Update::insert((PointId(m) << 40) + d, pos.subspan(2 * d, 2)))) store->publish();
    }
    store->publish();
  }

  std::atomic<bool> stop_movers{false}, stop_rest{false};
  std::atomic<std::uint64_t> moves_applied{0}, queries{0}, publishes{0}, errors{0};
  std::mutex error_mutex;
  std::string first_error;
  auto record_error = [&](const std::string& what) {
    ++errors;
    std::lock_guard lock(error_mutex);
    if (first_error.empty()) first_error = what;
  };

  std::vector<std::thread> threads;
  for (std::size_t m = 0; m < o.movers; ++m) {
    threads.emplace_back([&, m] {
      try {
        auto& world = *worlds[m];
        while (!stop_movers.load()) {
          world.tick();
          const auto pos = world.positions();
          for (std::size_t d = 0; d < world.size(); ++d) store->push(Update::move((PointId(m) << 40) + d, pos.subspan(2 * d, 2)));
        }
      } catch (const std::exception& e) {
        record_error(std::string("mover: ") + e.what());
      }
    });
  }
  std::thread publisher([&] {
    try {
      while (!stop_rest.load()) {
        const PublishReport r = store->publish();
        moves_applied += r.moved;
        ++publishes;
        if (!r.rejected.empty()) record_error("publish rejected " + std::to_string(r.rejected.size()) + " moves");
      }
    } catch (const std::exception& e) {
      record_error(std::string("publish: ") + e.what());
    }
  });
  for (std::size_t q = 0; q < o.queriers; ++q) {
    threads.emplace_back([&, q] {
      try {
        streams::MovingObjectsConfig w;
        w.drivers = 1;
        w.seed = 1000 + q;
        streams::MovingObjects passengers(w);
        while (!stop_rest.load()) {
          const std::vector<float> at = passengers.passengers(o.batch);
          const Neighbors n = store->search(at, o.k);
          for (std::size_t i = 0; i < o.batch; ++i) {
            const auto d = n.distances_of(i);
            if (n.found(i) != std::min(o.k, o.drivers) || !std::is_sorted(d.begin(), d.end())) {
              record_error("a search answer was short or out of order");
            }
          }
          queries += o.batch;
        }
      } catch (const std::exception& e) {
        record_error(std::string("query: ") + e.what());
      }
    });
  }

  // ---- sampling --------------------------------------------------------------------------------
  struct Sample {
    double t, moves_per_s, queries_per_s;
    std::size_t rss, device;
  };
  std::vector<Sample> samples;
  const auto start = Clock::now();
  std::uint64_t last_moves = moves_applied.load(), last_queries = queries.load();
  auto last_t = start;
  std::size_t rss_at_warmup = 0, device_at_warmup = 0, rss_max = 0, device_max = 0;
  bool warm = false;
  std::printf("%8s %14s %12s %10s %11s\n", "time_s", "moves/s", "queries/s", "rss_MiB", "device_MiB");
  for (double next = o.interval;; next += o.interval) {
    std::this_thread::sleep_until(start + std::chrono::duration<double>(std::min(next, o.seconds)));
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last_t).count();
    const std::uint64_t mv = moves_applied.load(), qs = queries.load();
    Sample s{std::chrono::duration<double>(now - start).count(), double(mv - last_moves) / dt, double(qs - last_queries) / dt,
             resident_bytes(), device_used_bytes(cuda)};
    last_moves = mv;
    last_queries = qs;
    last_t = now;
    std::printf("%8.1f %14.0f %12.0f %10.1f %11.1f\n", s.t, s.moves_per_s, s.queries_per_s, mib(s.rss), mib(s.device));
    std::fflush(stdout);
    if (!warm && s.t >= o.warmup) {
      warm = true;
      rss_at_warmup = rss_max = s.rss;
      device_at_warmup = device_max = s.device;
    } else if (warm) {
      rss_max = std::max(rss_max, s.rss);
      device_max = std::max(device_max, s.device);
      samples.push_back(s);
    }
    if (s.t >= o.seconds - 1e-9) break;
  }

  // ---- stop, drain, check --------------------------------------------------------------------------
  stop_movers = true;
  for (std::size_t m = 0; m < o.movers; ++m) threads[m].join();
  stop_rest = true;
  publisher.join();
  for (std::size_t t = o.movers; t < threads.size(); ++t) threads[t].join();
  while (store->pending() > 0) moves_applied += store->publish().moved;

  std::size_t misplaced = 0, checked = 0;
  for (std::size_t m = 0; m < o.movers; ++m) {
    const auto pos = worlds[m]->positions();
    const std::size_t n = worlds[m]->size();
    for (std::size_t d = 0; d < n; d += std::max<std::size_t>(1, n / (1000 / o.movers + 1))) {
      const PointId id = (PointId(m) << 40) + d;
      const IdRange only[1] = {{id, id + 1}};
      const Neighbors nn = store->search(pos.subspan(2 * d, 2), 1, only);
      misplaced += nn.ids[0] != id || nn.distances[0] != 0.0f;
      ++checked;
    }
  }

  bool ok = true;
  auto check = [&](bool passed, const std::string& what) {
    std::printf("%s %s\n", passed ? "PASS" : "FAIL", what.c_str());
    ok &= passed;
  };
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("summary: %.0f s, %llu moves applied (%.2f M/s), %llu queries (%.0f/s), %llu publishes; host RSS %.1f MiB "
              "after warm-up, max %.1f MiB after; device %.1f MiB after warm-up, max %.1f MiB after\n",
              total_s, (unsigned long long)moves_applied.load(), double(moves_applied.load()) / total_s / 1e6,
              (unsigned long long)queries.load(), double(queries.load()) / total_s, (unsigned long long)publishes.load(),
              mib(rss_at_warmup), mib(rss_max), mib(device_at_warmup), mib(device_max));
  check(errors.load() == 0, "no error (" + std::to_string(errors.load()) + (first_error.empty() ? "" : ", first: " + first_error) + ")");
  const auto flat = [](std::size_t base, std::size_t peak) {
    return peak <= base + std::max<std::size_t>(16u << 20, base / 50);
  };
#if defined(STREAMKNN_SOAK_SANITIZED)
  std::printf("SKIP host memory flat after the warm-up: not measurable under a sanitizer (%.1f -> %.1f MiB)\n",
              mib(rss_at_warmup), mib(rss_max));
#else
  check(flat(rss_at_warmup, rss_max), "host memory flat after the warm-up (within max(16 MiB, 2%))");
#endif
  check(flat(device_at_warmup, device_max), "device memory flat after the warm-up (within max(16 MiB, 2%))");
  if (o.check_throughput > 0 && samples.size() >= 2) {
    for (const auto member : {&Sample::moves_per_s, &Sample::queries_per_s}) {
      std::vector<double> rates;
      for (const Sample& s : samples) rates.push_back(s.*member);
      std::sort(rates.begin(), rates.end());
      const double median = rates[rates.size() / 2];
      check(rates.front() >= o.check_throughput * median,
            std::string(member == &Sample::moves_per_s ? "moves" : "queries") + " per second steady (slowest interval " +
                std::to_string(rates.front()) + " >= " + std::to_string(o.check_throughput) + " x median " +
                std::to_string(median) + ")");
    }
  }
  check(misplaced == 0 && checked > 0, "after the movers stopped, " + std::to_string(checked) + " sampled drivers are where they were last moved (" +
                                         std::to_string(misplaced) + " misplaced)");
  return ok ? 0 : 1;
}
