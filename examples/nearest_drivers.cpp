// examples/nearest_drivers.cpp — a GIS tracker: drivers move, passengers ask for the nearest.
//
// Thousands of drivers drive around Paris (the simulation is streams/moving_objects.hpp). Every
// tick, several producer threads push the drivers' new positions at once (pushes are lock-free
// and safe from any thread), the tracker publishes them as one snapshot, and a batch of
// passengers asks for the k nearest drivers by great-circle (haversine) distance, in metres.
// Prints a few answers, the latency of each step per tick, and checks the last tick's answers
// against a brute-force scan.
//
//   nearest_drivers [--drivers 20000] [--ticks 20] [--threads 4] [--passengers 256] [--k 5]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "streamknn/streamknn.hpp"
#include "streams/moving_objects.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Every passenger's k distances against a scan of all drivers. The store keeps fp32 unit
/// vectors (about half a metre of resolution on the Earth), hence the tolerance.
std::size_t count_exact(const streamknn::Neighbors& near, const std::vector<float>& passengers,
                        const streamknn::streams::MovingObjects& world) {
  std::size_t exact = 0;
  std::vector<double> all(world.size());
  for (std::size_t q = 0; q < near.num_queries; ++q) {
    for (std::size_t d = 0; d < world.size(); ++d) {
      const auto p = world.position(d);
      all[d] = streamknn::streams::haversine_m(passengers[2 * q], passengers[2 * q + 1], p[0], p[1]);
    }
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(near.k), all.end());
    bool ok = true;
    for (std::size_t j = 0; j < near.k; ++j) ok &= std::fabs(near.distances_of(q)[j] - all[j]) < 2.0;
    exact += ok;
  }
  return exact;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace streamknn;
  std::size_t drivers = 20000, ticks = 20, threads = 4, passengers_per_tick = 256, k = 5;
  CLI::App app{"Nearest drivers: moving objects on the sphere, k nearest by haversine distance"};
  app.add_option("--drivers", drivers)->check(CLI::Range(1ul, 10000000ul));
  app.add_option("--ticks", ticks)->check(CLI::Range(1ul, 1000000ul));
  app.add_option("--threads", threads, "producer threads pushing moves")->check(CLI::Range(1ul, 256ul));
  app.add_option("--passengers", passengers_per_tick)->check(CLI::Range(1ul, 1000000ul));
  app.add_option("--k", k)->check(CLI::Range(1ul, kMaxK));
  CLI11_PARSE(app, argc, argv);

  streams::MovingObjectsConfig city;
  city.drivers = drivers;
  streams::MovingObjects world(city);

  StoreConfig config;
  config.dim = 2;                      // (latitude, longitude) in degrees
  config.metric = Metric::Haversine;   // distances in metres
  config.capacity_hint = drivers;
  // A whole tick of moves fits in the queue, so producers never wait for the publisher.
  config.queue_capacity = drivers;
  ReferenceSet store(config);
  for (PointId id = 0; id < drivers; ++id) store.insert(id, world.position(id));
  store.publish();
  std::printf("%zu drivers on %s, %zu producer threads, %zu passengers per tick, k = %zu\n\n", drivers,
              store.backend_name().c_str(), threads, passengers_per_tick, k);
  std::printf("tick   push moves   publish    search (per passenger)\n");

  std::vector<double> push_ms, publish_ms, search_ms;
  std::vector<float> passengers;
  Neighbors near;
  for (std::size_t tick = 1; tick <= ticks; ++tick) {
    world.tick();  // the drivers drive for a few seconds

    const auto t0 = Clock::now();
    {
      std::vector<std::jthread> producers;  // each moves every threads-th driver; joined at scope end
      for (std::size_t t = 0; t < threads; ++t) {
        producers.emplace_back([&, t] {
          for (PointId id = t; id < drivers; id += threads) store.move(id, world.position(id));
        });
      }
    }
    push_ms.push_back(ms_since(t0));

    const auto t1 = Clock::now();
    const PublishReport report = store.publish();  // one snapshot with every move of the tick
    publish_ms.push_back(ms_since(t1));
    if (report.moved != drivers || !report.rejected.empty()) {
      std::fprintf(stderr, "tick %zu: %zu moves applied, %zu rejected\n", tick, report.moved, report.rejected.size());
      return 1;
    }

    passengers = world.passengers(passengers_per_tick);
    const auto t2 = Clock::now();
    near = store.search(passengers, k);  // exact, ordered by (distance, id)
    search_ms.push_back(ms_since(t2));
    std::printf("%4zu   %7.2f ms   %6.2f ms   %6.2f ms (%.1f us)\n", tick, push_ms.back(), publish_ms.back(),
                search_ms.back(), search_ms.back() * 1000 / double(passengers_per_tick));
  }
  std::printf("median %7.2f ms   %6.2f ms   %6.2f ms per tick\n\n", median(push_ms), median(publish_ms),
              median(search_ms));

  for (std::size_t q = 0; q < std::min<std::size_t>(3, near.num_queries); ++q) {
    std::printf("passenger at (%.5f, %.5f):", passengers[2 * q], passengers[2 * q + 1]);
    for (std::size_t j = 0; j < near.k && near.ids_of(q)[j] != kInvalidId; ++j) {
      std::printf("%s driver %llu at %.0f m", j ? "," : "", (unsigned long long)near.ids_of(q)[j],
                  near.distances_of(q)[j]);
    }
    std::printf("\n");
  }
  const std::size_t exact = count_exact(near, passengers, world);
  if (exact != near.num_queries) {
    std::printf("checked against brute force: %zu of %zu answers differ\n", near.num_queries - exact, near.num_queries);
    return 1;
  }
  std::printf("checked against brute force: all %zu answers exact\n", exact);
  return 0;
}
