// The generators: a seed fixes the stream, the stream does not depend on how it is read, and
// the values stay where the documentation says.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "streamknn/streamknn.hpp"
#include "streams/drift_generators.hpp"
#include "streams/moving_objects.hpp"
#include "support/test_support.hpp"

using namespace streamknn::streams;

namespace {

/// The whole stream, read `step` points at a time.
Chunk drain(Source& source, std::size_t step) {
  Chunk all, part;
  while (source.read(step, part) > 0) {
    all.features.insert(all.features.end(), part.features.begin(), part.features.end());
    all.labels.insert(all.labels.end(), part.labels.begin(), part.labels.end());
    all.values.insert(all.values.end(), part.values.begin(), part.values.end());
    all.size += part.size;
  }
  return all;
}

bool same(const Chunk& a, const Chunk& b) {
  return a.size == b.size && a.features == b.features && a.labels == b.labels && a.values == b.values;
}

/// Same seed: the same stream, however it is chunked; another seed: another stream.
void check_determinism(const std::function<std::unique_ptr<Source>(std::uint64_t seed)>& make, std::size_t points) {
  const std::uint64_t seed = test::seed();
  const Chunk a = drain(*make(seed), 1);
  const Chunk b = drain(*make(seed), 7);
  const Chunk c = drain(*make(seed), 1000);
  CHECK(a.size == points);
  CHECK(same(a, b));
  CHECK(same(a, c));
  CHECK_FALSE(same(a, drain(*make(seed + 1), 64)));
}

}  // namespace

TEST_CASE("hyperplane: deterministic by seed, features in the unit cube, both classes, noise flips labels") {
  check_determinism(
      [](std::uint64_t seed) {
        HyperplaneConfig c;
        c.points = 500;
        c.seed = seed;
        return std::make_unique<HyperplaneSource>(c);
      },
      500);
  HyperplaneConfig c;
  c.points = 4000;
  c.dim = 5;
  c.seed = test::seed();
  c.noise = 0;
  c.drift = 0;
  HyperplaneSource source(c);
  const Chunk all = drain(source, 100);
  CHECK(all.features.size() == 4000 * 5);
  for (float x : all.features) REQUIRE((x >= 0 && x < 1));
  std::size_t ones = 0;
  for (auto l : all.labels) ones += l == 1;
  CHECK(ones > 1000);  // the plane through the cube's centre splits it roughly in half
  CHECK(ones < 3000);
  // Without drift or noise the concept is a fixed hyperplane: a 1-NN on plenty of data is
  // nearly always right. With 30% noise it cannot be.
  auto accuracy = [](double noise) {
    HyperplaneConfig h;
    h.points = 3000;
    h.dim = 2;
    h.noise = noise;
    h.drift = 0;
    h.seed = test::seed();
    HyperplaneSource s(h);
    const Chunk d = drain(s, 3000);
    std::size_t agree = 0;
    for (std::size_t i = 1500; i < 3000; ++i) {  // 1-NN among the first half
      std::size_t best = 0;
      float best_d = 1e9f;
      for (std::size_t j = 0; j < 1500; ++j) {
        const float dx = d.features[2 * i] - d.features[2 * j], dy = d.features[2 * i + 1] - d.features[2 * j + 1];
        if (dx * dx + dy * dy < best_d) best_d = dx * dx + dy * dy, best = j;
      }
      agree += d.labels[i] == d.labels[best];
    }
    return double(agree) / 1500;
  };
  CHECK(accuracy(0) > 0.95);
  CHECK(accuracy(0.3) < 0.75);
}

TEST_CASE("rbf with moving centroids: deterministic by seed, labels within the classes") {
  check_determinism(
      [](std::uint64_t seed) {
        RbfConfig c;
        c.points = 500;
        c.classes = 3;
        c.seed = seed;
        return std::make_unique<RbfDriftSource>(c);
      },
      500);
  RbfConfig c;
  c.points = 2000;
  c.classes = 5;
  c.dim = 4;
  c.seed = test::seed();
  RbfDriftSource source(c);
  CHECK(source.info().class_names.size() == 5);
  const Chunk all = drain(source, 333);
  for (auto l : all.labels) REQUIRE((l >= 0 && l < 5));
  for (float x : all.features) REQUIRE(std::isfinite(x));
}

TEST_CASE("moving objects: deterministic by seed, drivers stay near their city, passengers inside it") {
  MovingObjectsConfig c;
  c.drivers = 300;
  c.seed = test::seed();
  MovingObjects a(c), b(c);
  c.seed += 1;
  MovingObjects other(c);
  for (int t = 0; t < 50; ++t) {
    a.tick();
    b.tick();
    other.tick();
  }
  CHECK(std::equal(a.positions().begin(), a.positions().end(), b.positions().begin(), b.positions().end()));
  CHECK_FALSE(std::equal(a.positions().begin(), a.positions().end(), other.positions().begin(), other.positions().end()));
  CHECK(a.time_s() == doctest::Approx(500));
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto p = a.position(i);
    // One tick at 60 km/h is under 200 m: a driver that crossed the edge is turned back at once.
    CHECK(haversine_m(c.centre_lat, c.centre_lon, p[0], p[1]) < c.radius_m + 500);
    CHECK(a.speeds_kmh()[i] >= 2);
    CHECK(a.speeds_kmh()[i] < 80);
  }
  const auto passengers = a.passengers(200);
  REQUIRE(passengers.size() == 400);
  for (std::size_t i = 0; i < 200; ++i) {
    CHECK(haversine_m(c.centre_lat, c.centre_lon, passengers[2 * i], passengers[2 * i + 1]) <= c.radius_m * 1.0001);
  }
  // Traffic is slower in the core than at the edge, at any time.
  for (double t : {0.0, 900.0, 2700.0}) {
    CHECK(MovingObjects::traffic_speed_kmh(0, 10000, t) < MovingObjects::traffic_speed_kmh(9000, 10000, t));
  }
}

TEST_CASE("driver pings: deterministic by seed, one ping per driver per tick, haversine metric") {
  check_determinism(
      [](std::uint64_t seed) {
        DriverPingsConfig c;
        c.world.drivers = 50;
        c.world.seed = seed;
        c.points = 333;
        return std::make_unique<DriverPingsSource>(c);
      },
      333);
  DriverPingsConfig c;
  c.world.drivers = 40;
  c.points = 80;
  c.world.seed = test::seed();
  DriverPingsSource source(c);
  CHECK(source.info().metric == streamknn::Metric::Haversine);
  CHECK(source.info().task == Task::Regress);
  const Chunk all = drain(source, 9);
  // The first tick's 40 pings are the 40 drivers' starting positions, in some order.
  MovingObjects world(c.world);
  std::vector<std::pair<float, float>> expected, got;
  for (std::size_t i = 0; i < 40; ++i) {
    expected.emplace_back(world.position(i)[0], world.position(i)[1]);
    got.emplace_back(all.features[2 * i], all.features[2 * i + 1]);
  }
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  CHECK(expected == got);
}

TEST_CASE("haversine_m agrees with the library's haversine metric") {
  using namespace streamknn;
  StoreConfig config;
  config.dim = 2;
  config.metric = Metric::Haversine;
  config.backend = BackendKind::Cpu;
  ReferenceSet store(config);
  MovingObjectsConfig c;
  c.drivers = 20;
  c.seed = test::seed();
  MovingObjects world(c);
  for (PointId id = 0; id < 20; ++id) store.insert(id, world.position(id));
  store.publish();
  const auto passengers = world.passengers(5);
  const Neighbors near = store.search(passengers, 3);
  for (std::size_t q = 0; q < 5; ++q) {
    for (std::size_t j = 0; j < 3; ++j) {
      const auto p = world.position(near.ids_of(q)[j]);
      // The store keeps fp32 unit vectors, which resolve about half a metre on the Earth's surface.
      const double want = haversine_m(passengers[2 * q], passengers[2 * q + 1], p[0], p[1]);
      CHECK(std::fabs(near.distances_of(q)[j] - want) < 2.0 + 1e-5 * want);
    }
  }
}
