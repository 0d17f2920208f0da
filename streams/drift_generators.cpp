#include "streams/drift_generators.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "streams/errors.hpp"

namespace streamknn::streams {

namespace {

std::vector<std::string> numbered(const char* prefix, std::size_t n) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) names.push_back(prefix + std::to_string(i));
  return names;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

HyperplaneSource::HyperplaneSource(const HyperplaneConfig& config) : config_(config), rng_(config.seed) {
  require(config.dim >= 1, "hyperplane stream: dim=" + std::to_string(config.dim) + " must be at least 1");
  require(config.drift >= 0 && std::isfinite(config.drift), "hyperplane stream: drift=" + fmt(config.drift) + " must be >= 0");
  require(config.noise >= 0 && config.noise <= 1, "hyperplane stream: noise=" + fmt(config.noise) + " is outside [0, 1]");
  info_.name = "hyperplane(dim=" + std::to_string(config.dim) + ", drift=" + fmt(config.drift) +
               ", noise=" + fmt(config.noise) + ", seed=" + std::to_string(config.seed) + ")";
  info_.task = Task::Classify;
  info_.dim = config.dim;
  info_.feature_names = numbered("x", config.dim);
  info_.target_name = "class";
  info_.class_names = {"0", "1"};
  info_.length = config.points;
  info_.notes = "rotating hyperplane, 2 classes";
  for (std::size_t i = 0; i < config.dim; ++i) {
    weights_.push_back(rng_.uniform());
    direction_.push_back(1.0);
  }
}

std::size_t HyperplaneSource::read(std::size_t max, Chunk& out) {
  out.clear();
  const std::size_t n = std::min(max, config_.points - next_);
  for (std::size_t p = 0; p < n; ++p) {
    double sum = 0, total = 0;
    for (std::size_t i = 0; i < config_.dim; ++i) {
      const double x = rng_.uniform();
      out.features.push_back(static_cast<float>(x));
      sum += weights_[i] * x;
      total += weights_[i];
    }
    std::int32_t label = sum >= 0.5 * total ? 1 : 0;
    if (rng_.chance(config_.noise)) label = 1 - label;
    out.labels.push_back(label);
    for (std::size_t i = 0; i < config_.dim; ++i) {
      weights_[i] += direction_[i] * config_.drift;
      if (rng_.chance(config_.reversal)) direction_[i] = -direction_[i];
    }
  }
  out.size = n;
  next_ += n;
  return n;
}

RbfDriftSource::RbfDriftSource(const RbfConfig& config) : config_(config), rng_(config.seed) {
  require(config.dim >= 1, "rbf stream: dim=" + std::to_string(config.dim) + " must be at least 1");
  require(config.classes >= 2 && config.classes <= 65536,
          "rbf stream: classes=" + std::to_string(config.classes) + " is outside [2, 65536]");
  require(config.centroids >= 1, "rbf stream: centroids=" + std::to_string(config.centroids) + " must be at least 1");
  require(config.speed >= 0 && std::isfinite(config.speed), "rbf stream: speed=" + fmt(config.speed) + " must be >= 0");
  info_.name = "rbf(dim=" + std::to_string(config.dim) + ", classes=" + std::to_string(config.classes) +
               ", centroids=" + std::to_string(config.centroids) + ", speed=" + fmt(config.speed) +
               ", seed=" + std::to_string(config.seed) + ")";
  info_.task = Task::Classify;
  info_.dim = config.dim;
  info_.feature_names = numbered("x", config.dim);
  info_.target_name = "class";
  info_.class_names = numbered("", config.classes);
  info_.length = config.points;
  info_.notes = "random RBF with moving centroids, " + std::to_string(config.classes) + " classes";
  double total = 0;
  for (std::size_t c = 0; c < config.centroids; ++c) {
    Centroid centroid;
    for (std::size_t i = 0; i < config.dim; ++i) centroid.centre.push_back(rng_.uniform());
    centroid.label = static_cast<std::int32_t>(rng_.below(config.classes));
    centroid.spread = rng_.uniform();
    total += rng_.uniform();
    cumulative_weight_.push_back(total);
    // A random direction (normalised uniform vector, as MOA draws it) scaled to the speed.
    double norm = 0;
    for (std::size_t i = 0; i < config.dim; ++i) {
      centroid.velocity.push_back(rng_.uniform(-1, 1));
      norm += centroid.velocity.back() * centroid.velocity.back();
    }
    norm = std::sqrt(norm);
    for (double& v : centroid.velocity) v = norm > 0 ? v / norm * config.speed : 0;
    centroids_.push_back(std::move(centroid));
  }
  offset_.resize(config.dim);
}

std::size_t RbfDriftSource::read(std::size_t max, Chunk& out) {
  out.clear();
  const std::size_t n = std::min(max, config_.points - next_);
  for (std::size_t p = 0; p < n; ++p) {
    const double pick = rng_.uniform() * cumulative_weight_.back();
    const auto chosen = std::upper_bound(cumulative_weight_.begin(), cumulative_weight_.end(), pick);
    const Centroid& c = centroids_[std::min<std::size_t>(chosen - cumulative_weight_.begin(), centroids_.size() - 1)];
    double norm = 0;
    for (double& o : offset_) {
      o = rng_.uniform(-1, 1);
      norm += o * o;
    }
    norm = std::sqrt(norm);
    const double scale = norm > 0 ? rng_.normal() * c.spread / norm : 0;
    for (std::size_t i = 0; i < config_.dim; ++i) out.features.push_back(static_cast<float>(c.centre[i] + offset_[i] * scale));
    out.labels.push_back(c.label);
    for (Centroid& m : centroids_) {
      for (std::size_t i = 0; i < config_.dim; ++i) {
        m.centre[i] += m.velocity[i];
        if (m.centre[i] > 1 || m.centre[i] < 0) {  // bounce off the wall
          m.centre[i] = std::clamp(m.centre[i], 0.0, 1.0);
          m.velocity[i] = -m.velocity[i];
        }
      }
    }
  }
  out.size = n;
  next_ += n;
  return n;
}

}  // namespace streamknn::streams
