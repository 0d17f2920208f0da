// Names of the public enums and their parsers.
#include <string>

#include "core/check.hpp"
#include "streamknn/aggregation.hpp"
#include "streamknn/config.hpp"
#include "streamknn/metric.hpp"
#include "streamknn/publish_report.hpp"
#include "streamknn/update.hpp"
#include "streamknn/version.hpp"

namespace streamknn {

std::string_view to_string(Metric metric) noexcept {
  switch (metric) {
    case Metric::L2: return "l2";
    case Metric::InnerProduct: return "ip";
    case Metric::Cosine: return "cosine";
    case Metric::Haversine: return "haversine";
  }
  return "?";
}

Metric parse_metric(std::string_view name) {
  for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    if (name == to_string(m)) return m;
  }
  detail::fail_argument("unknown metric '", name, "' (choose l2, ip, cosine or haversine)");
}

std::string_view to_string(Weights weights) noexcept {
  return weights == Weights::Uniform ? "uniform" : "distance";
}

Weights parse_weights(std::string_view name) {
  if (name == "uniform") return Weights::Uniform;
  if (name == "distance") return Weights::Distance;
  detail::fail_argument("unknown weights '", name, "' (choose uniform or distance)");
}

std::string_view to_string(RegressionAggregate aggregate) noexcept {
  switch (aggregate) {
    case RegressionAggregate::Mean: return "mean";
    case RegressionAggregate::WeightedMean: return "weighted_mean";
    case RegressionAggregate::Median: return "median";
  }
  return "?";
}

RegressionAggregate parse_regression_aggregate(std::string_view name) {
  for (auto a : {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
    if (name == to_string(a)) return a;
  }
  detail::fail_argument("unknown regression aggregate '", name, "' (choose mean, weighted_mean or median)");
}

std::string_view to_string(BackendKind kind) noexcept {
  switch (kind) {
    case BackendKind::Auto: return "auto";
    case BackendKind::Cpu: return "cpu";
    case BackendKind::Cuda: return "cuda";
  }
  return "?";
}

BackendKind parse_backend(std::string_view name) {
  for (BackendKind b : {BackendKind::Auto, BackendKind::Cpu, BackendKind::Cuda}) {
    if (name == to_string(b)) return b;
  }
  detail::fail_argument("unknown backend '", name, "' (choose auto, cpu or cuda)");
}

const char* to_string(UpdateKind kind) noexcept {
  switch (kind) {
    case UpdateKind::Insert: return "insert";
    case UpdateKind::Move: return "move";
    case UpdateKind::Erase: return "erase";
    case UpdateKind::SetTarget: return "set_target";
    case UpdateKind::SetAttributes: return "set_attributes";
  }
  return "?";
}

const char* to_string(RejectReason reason) noexcept {
  return reason == RejectReason::UnknownId ? "unknown id" : "duplicate id";
}

const char* version_string() noexcept { return STREAMKNN_VERSION_STRING; }

}  // namespace streamknn
