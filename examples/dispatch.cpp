// examples/dispatch.cpp — "nearest available" dispatch: the nearest free drivers within a radius.
//
// Drivers move around Paris (streams/moving_objects.hpp). Each driver carries one attribute word:
// bit 0 set while it is free. Every tick the drivers' moves are published; then each passenger asks
// for the nearest free driver within --radius metres (ReferenceSet::search_within with a predicate
// requiring bit 0, evaluated inside the search: no over-fetching, no filtering on the host), takes it,
// and the driver becomes busy (Update::set_attributes, through the same queue and publish as the
// moves) for --trip ticks, then free again. Prints what each tick did, and checks the last tick's
// assignments against a brute-force scan of the free drivers.
//
//   dispatch [--drivers 5000] [--ticks 20] [--passengers 64] [--radius 2000] [--trip 5]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "streamknn/streamknn.hpp"
#include "streams/moving_objects.hpp"

namespace {

constexpr std::uint32_t kFree = 1;  // attribute word 0, bit 0

/// Whether an assignment agrees with a scan of every driver: the driver is free and within the
/// radius, and no free driver is nearer (or none is within the radius when none was found). Within
/// 1 m either way: the store keeps float32 unit vectors, about half a metre on the Earth.
bool agrees(const streamknn::streams::MovingObjects& world, const std::vector<int>& busy_until, int tick, float lat,
            float lon, double radius, streamknn::PointId driver) {
  auto metres = [&](std::size_t d) {
    const auto p = world.position(d);
    return streamknn::streams::haversine_m(lat, lon, p[0], p[1]);
  };
  double nearest = radius + 1.0;
  for (std::size_t d = 0; d < world.size(); ++d) {
    if (busy_until[d] <= tick) nearest = std::min(nearest, metres(d));
  }
  if (driver == streamknn::kInvalidId) return nearest > radius - 1.0;
  return busy_until[driver] <= tick && metres(driver) <= std::min(radius, nearest) + 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace streamknn;
  std::size_t drivers = 5000, ticks = 20, passengers_per_tick = 64, trip = 5;
  double radius = 2000;
  CLI::App app{"Nearest available driver within a radius: attributes, predicates and set_attributes"};
  app.add_option("--drivers", drivers)->check(CLI::Range(1ul, 10000000ul));
  app.add_option("--ticks", ticks)->check(CLI::Range(1ul, 1000000ul));
  app.add_option("--passengers", passengers_per_tick)->check(CLI::Range(1ul, 1000000ul));
  app.add_option("--radius", radius, "metres")->check(CLI::Range(1.0, 1e7));
  app.add_option("--trip", trip, "ticks a driver stays busy")->check(CLI::Range(1ul, 1000ul));
  CLI11_PARSE(app, argc, argv);

  streams::MovingObjectsConfig city;
  city.drivers = drivers;
  streams::MovingObjects world(city);

  StoreConfig config;
  config.dim = 2;                     // (latitude, longitude) in degrees
  config.metric = Metric::Haversine;  // metres
  config.attribute_words = 1;         // word 0: kFree while the driver takes passengers
  config.capacity_hint = drivers;
  config.queue_capacity = 2 * drivers;
  // Either backend: both test the predicate inside the search (docs/filters.md).
  ReferenceSet store(config);
  const std::uint32_t free_word[1] = {kFree}, busy_word[1] = {0};
  for (PointId id = 0; id < drivers; ++id) store.push(Update::insert(id, world.position(id)).with_attributes(free_word));
  store.publish();
  std::printf("%zu drivers on %s, %zu passengers per tick, radius %.0f m, trips of %zu ticks\n\n", drivers,
              store.backend_name().c_str(), passengers_per_tick, radius, trip);

  const Predicate available = Predicate{}.require(0, kFree);
  std::vector<int> busy_until(drivers, 0);
  std::size_t served = 0, unserved = 0, checked = 0, agreed = 0;
  for (std::size_t t = 1; t <= ticks; ++t) {
    const int tick = int(t);
    world.tick();
    for (PointId id = 0; id < drivers; ++id) {
      store.push(Update::move(id, world.position(id)));
      if (busy_until[id] == tick) store.push(Update::set_attributes(id, free_word));  // the trip ended
    }
    store.publish();
    // Passengers one at a time: each takes its driver before the next one asks.
    const std::vector<float> passengers = world.passengers(passengers_per_tick);
    std::size_t tick_served = 0;
    for (std::size_t p = 0; p < passengers_per_tick; ++p) {
      const std::span<const float> where(passengers.data() + 2 * p, 2);
      const Neighbors n = store.search_within(where, 1, radius, {}, std::span(&available, 1));
      const PointId driver = n.ids[0];
      if (t == ticks) {  // the last tick: against the brute-force scan
        ++checked;
        agreed += agrees(world, busy_until, tick, where[0], where[1], radius, driver);
      }
      if (driver == kInvalidId) {
        ++unserved;
        continue;
      }
      ++served;
      ++tick_served;
      busy_until[driver] = tick + int(trip);
      store.push(Update::set_attributes(driver, busy_word));
      store.publish();  // the driver is busy for the next passenger
    }
    const auto busy = std::count_if(busy_until.begin(), busy_until.end(), [&](int u) { return u > tick; });
    if (t <= 3 || t == ticks) {
      std::printf("tick %3zu: %zu of %zu passengers served, %zu drivers busy\n", t, tick_served, passengers_per_tick,
                  std::size_t(busy));
    }
  }
  std::printf("\nserved %zu, no free driver within %.0f m for %zu; last tick: ", served, radius, unserved);
  if (agreed == checked) {
    std::printf("all %zu assignments agree with a brute-force scan\n", checked);
  } else {
    std::printf("%zu of %zu assignments disagree with a brute-force scan\n", checked - agreed, checked);
  }
  return agreed == checked ? 0 : 1;
}
