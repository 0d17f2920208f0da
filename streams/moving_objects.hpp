// streams/moving_objects.hpp — drivers moving on the sphere, and the passengers who look for them.
//
// MovingObjects simulates `drivers` vehicles inside a disc of `radius_m` metres around a
// city centre, in (latitude, longitude) degrees: every tick each one drives tick_s seconds
// along a great circle at the speed of the traffic where it is, its heading wandering, and
// turns back towards the centre when it reaches the edge. Traffic is slow in a congested core
// whose radius swells and shrinks over the hour (a rush hour), fast outside it.
// passengers(n) draws request positions uniformly over the disc. A seed fixes everything.
//
// DriverPingsSource turns the simulation into a labelled regression stream for the runner:
// each tick every driver reports (latitude, longitude) with its speed in km/h as the target,
// in a random order; predicting a ping's speed from the nearest recent pings (haversine) is
// traffic-speed now-casting.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "streams/random.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

struct MovingObjectsConfig {
  std::size_t drivers = 1000;
  double centre_lat = 48.8566;   ///< Paris, degrees
  double centre_lon = 2.3522;
  double radius_m = 10000;
  double tick_s = 10;            ///< simulated seconds per tick
  std::uint64_t seed = 42;
};

class MovingObjects {
 public:
  explicit MovingObjects(const MovingObjectsConfig& config);

  std::size_t size() const noexcept { return lat_.size(); }
  /// (latitude, longitude) of every driver, row-major, as floats ready to push.
  std::span<const float> positions() const noexcept { return positions_; }
  std::span<const float> position(std::size_t driver) const noexcept { return {positions_.data() + 2 * driver, 2}; }
  std::span<const float> speeds_kmh() const noexcept { return speeds_; }
  double time_s() const noexcept { return time_s_; }
  const MovingObjectsConfig& config() const noexcept { return config_; }

  /// Advances every driver by one tick.
  void tick();
  /// n passenger positions (latitude, longitude), uniform over the disc.
  std::vector<float> passengers(std::size_t n);

  /// The traffic speed in km/h at a distance from the centre at a time (before personal noise).
  static double traffic_speed_kmh(double distance_m, double radius_m, double time_s);

 private:
  void point_at(double distance_m, double bearing, double& lat, double& lon) const;
  void publish_positions();

  MovingObjectsConfig config_;
  Rng rng_;
  std::vector<double> lat_, lon_, heading_, temperament_;
  std::vector<float> positions_, speeds_;
  double time_s_ = 0;
};

struct DriverPingsConfig {
  MovingObjectsConfig world;
  std::size_t points = 100000;
};

class DriverPingsSource final : public Source {
 public:
  explicit DriverPingsSource(const DriverPingsConfig& config);
  const SourceInfo& info() const noexcept override { return info_; }
  std::size_t read(std::size_t max, Chunk& out) override;

 private:
  DriverPingsConfig config_;
  SourceInfo info_;
  MovingObjects world_;
  Rng order_rng_;
  std::vector<std::size_t> order_;  // this tick's reporting order
  std::size_t in_tick_ = 0;         // pings of this tick already handed out
  std::size_t next_ = 0;
};

/// Great-circle distance in metres between two (latitude, longitude) points in degrees, on the
/// sphere the library's haversine metric uses.
double haversine_m(double lat1, double lon1, double lat2, double lon2);

}  // namespace streamknn::streams
