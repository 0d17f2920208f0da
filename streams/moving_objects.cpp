#include "streams/moving_objects.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "streamknn/metric.hpp"
#include "streams/errors.hpp"

namespace streamknn::streams {

namespace {

constexpr double kDeg = std::numbers::pi / 180;

double bearing_rad(double lat1, double lon1, double lat2, double lon2) {
  const double p1 = lat1 * kDeg, p2 = lat2 * kDeg, dl = (lon2 - lon1) * kDeg;
  return std::atan2(std::sin(dl) * std::cos(p2), std::cos(p1) * std::sin(p2) - std::sin(p1) * std::cos(p2) * std::cos(dl));
}

}  // namespace

double haversine_m(double lat1, double lon1, double lat2, double lon2) {
  const double dp = (lat2 - lat1) * kDeg, dl = (lon2 - lon1) * kDeg;
  const double a = std::sin(dp / 2) * std::sin(dp / 2) +
                   std::cos(lat1 * kDeg) * std::cos(lat2 * kDeg) * std::sin(dl / 2) * std::sin(dl / 2);
  return 2 * kEarthRadiusMetres * std::asin(std::min(1.0, std::sqrt(a)));
}

double MovingObjects::traffic_speed_kmh(double distance_m, double radius_m, double time_s) {
  constexpr double kJam = 12, kFree = 50, kHour = 3600;
  const double core = radius_m * (0.35 + 0.2 * std::sin(2 * std::numbers::pi * time_s / kHour));
  const double open = std::clamp((distance_m - 0.5 * core) / core, 0.0, 1.0);
  const double smooth = open * open * (3 - 2 * open);
  return kJam + (kFree - kJam) * smooth;
}

MovingObjects::MovingObjects(const MovingObjectsConfig& config) : config_(config), rng_(config.seed) {
  if (config.drivers < 1) throw UsageError("moving objects: drivers=0; at least one driver is needed");
  if (!(config.radius_m > 0) || config.radius_m > 1e6) {
    throw UsageError("moving objects: radius_m=" + std::to_string(config.radius_m) + " is outside (0, 1e6]");
  }
  if (std::fabs(config.centre_lat) > 80) {
    throw UsageError("moving objects: centre latitude " + std::to_string(config.centre_lat) + " is outside [-80, 80]");
  }
  for (std::size_t i = 0; i < config.drivers; ++i) {
    double lat = 0, lon = 0;
    // sqrt of a uniform draw spreads drivers evenly over the disc's area, not bunched at the centre.
    point_at(config.radius_m * std::sqrt(rng_.uniform()), rng_.uniform(0, 2 * std::numbers::pi), lat, lon);
    lat_.push_back(lat);
    lon_.push_back(lon);
    heading_.push_back(rng_.uniform(0, 2 * std::numbers::pi));
    temperament_.push_back(rng_.uniform(0.85, 1.15));
  }
  positions_.resize(2 * config.drivers);
  speeds_.resize(config.drivers);
  publish_positions();
}

void MovingObjects::point_at(double distance_m, double bearing, double& lat, double& lon) const {
  // Destination on the sphere from the centre (the standard direct geodesic formula).
  const double p1 = config_.centre_lat * kDeg, l1 = config_.centre_lon * kDeg, d = distance_m / kEarthRadiusMetres;
  const double p2 = std::asin(std::sin(p1) * std::cos(d) + std::cos(p1) * std::sin(d) * std::cos(bearing));
  const double l2 = l1 + std::atan2(std::sin(bearing) * std::sin(d) * std::cos(p1), std::cos(d) - std::sin(p1) * std::sin(p2));
  lat = p2 / kDeg;
  lon = std::remainder(l2 / kDeg, 360.0);
}

void MovingObjects::publish_positions() {
  for (std::size_t i = 0; i < size(); ++i) {
    positions_[2 * i] = static_cast<float>(lat_[i]);
    positions_[2 * i + 1] = static_cast<float>(lon_[i]);
    const double r = haversine_m(config_.centre_lat, config_.centre_lon, lat_[i], lon_[i]);
    const double speed = traffic_speed_kmh(r, config_.radius_m, time_s_) * temperament_[i] + 2 * rng_.normal();
    speeds_[i] = static_cast<float>(std::max(2.0, speed));
  }
}

void MovingObjects::tick() {
  for (std::size_t i = 0; i < size(); ++i) {
    const double r = haversine_m(config_.centre_lat, config_.centre_lon, lat_[i], lon_[i]);
    if (r > config_.radius_m) {
      heading_[i] = bearing_rad(lat_[i], lon_[i], config_.centre_lat, config_.centre_lon) + 0.3 * rng_.normal();
    } else {
      heading_[i] += 0.25 * rng_.normal();
    }
    const double metres = speeds_[i] / 3.6 * config_.tick_s;
    const double p1 = lat_[i] * kDeg, l1 = lon_[i] * kDeg, d = metres / kEarthRadiusMetres, b = heading_[i];
    const double p2 = std::asin(std::sin(p1) * std::cos(d) + std::cos(p1) * std::sin(d) * std::cos(b));
    const double l2 = l1 + std::atan2(std::sin(b) * std::sin(d) * std::cos(p1), std::cos(d) - std::sin(p1) * std::sin(p2));
    lat_[i] = p2 / kDeg;
    lon_[i] = std::remainder(l2 / kDeg, 360.0);
  }
  time_s_ += config_.tick_s;
  publish_positions();
}

std::vector<float> MovingObjects::passengers(std::size_t n) {
  std::vector<float> out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    double lat = 0, lon = 0;
    point_at(config_.radius_m * std::sqrt(rng_.uniform()), rng_.uniform(0, 2 * std::numbers::pi), lat, lon);
    out.push_back(static_cast<float>(lat));
    out.push_back(static_cast<float>(lon));
  }
  return out;
}

DriverPingsSource::DriverPingsSource(const DriverPingsConfig& config)
    : config_(config), world_(config.world), order_rng_(config.world.seed ^ 0x5eed0f0ddba11ULL) {
  info_.name = "drivers(drivers=" + std::to_string(config.world.drivers) + ", seed=" + std::to_string(config.world.seed) + ")";
  info_.task = Task::Regress;
  info_.dim = 2;
  info_.feature_names = {"latitude", "longitude"};
  info_.target_name = "speed_kmh";
  info_.length = config.points;
  info_.metric = Metric::Haversine;
  info_.notes = "driver pings (latitude, longitude) -> speed in km/h, " + std::to_string(config.world.drivers) +
                " drivers, one ping each per " + std::to_string(static_cast<int>(config.world.tick_s)) + " s tick";
  order_.resize(world_.size());
  for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
}

std::size_t DriverPingsSource::read(std::size_t max, Chunk& out) {
  out.clear();
  const std::size_t n = std::min(max, config_.points - next_);
  for (std::size_t p = 0; p < n; ++p) {
    if (in_tick_ == 0) {
      for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[order_rng_.below(i)]);
    }
    const std::size_t driver = order_[in_tick_];
    const auto at = world_.position(driver);
    out.features.insert(out.features.end(), at.begin(), at.end());
    out.values.push_back(world_.speeds_kmh()[driver]);
    if (++in_tick_ == order_.size()) {
      in_tick_ = 0;
      world_.tick();
    }
  }
  out.size = n;
  next_ += n;
  return n;
}

}  // namespace streamknn::streams
