// KnnClassifier and KnnRegressor: argument checks, then one backend query whose aggregation
// runs where the search ran.
#include <cmath>
#include <limits>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"
#include "core/ticket_map.hpp"
#include "streamknn/classifier.hpp"
#include "streamknn/regressor.hpp"

namespace streamknn {

namespace {

/// The filters of a model's query: its visibility ranges, its radius where within() gave one and
/// its predicate where where() gave one (the engine copies it into the request).
detail::QueryFilters model_filters(std::span<const IdRange> visible, double radius,
                                  const std::optional<Predicate>& where) {
  detail::QueryFilters f(visible, where ? std::span<const Predicate>(&*where, 1) : std::span<const Predicate>());
  if (!(radius == std::numeric_limits<double>::infinity())) {
    f.radius_on = true;
    f.radius = radius;
  }
  return f;
}

/// A radius within() accepts (NaN and, but for the inner product, negative radii refused).
void check_radius(double radius, const ReferenceSet& store, const char* where) {
  if (std::isnan(radius)) detail::fail_argument(where, ": radius is NaN");
  if (!(radius >= 0) && store.config().metric != Metric::InnerProduct) {
    detail::fail_argument(where, ": radius = ", radius, " is negative");
  }
}

}  // namespace

KnnClassifier KnnClassifier::within(double radius) const {
  check_radius(radius, *store_, "KnnClassifier::within");
  KnnClassifier bounded = *this;
  bounded.radius_ = radius;
  return bounded;
}

KnnRegressor KnnRegressor::within(double radius) const {
  check_radius(radius, *store_, "KnnRegressor::within");
  KnnRegressor bounded = *this;
  bounded.radius_ = radius;
  return bounded;
}

KnnClassifier KnnClassifier::where(const Predicate& predicate) const {
  KnnClassifier filtered = *this;
  filtered.where_ = predicate;
  return filtered;
}

KnnRegressor KnnRegressor::where(const Predicate& predicate) const {
  KnnRegressor filtered = *this;
  filtered.where_ = predicate;
  return filtered;
}

KnnClassifier::KnnClassifier(const ReferenceSet& store, std::size_t k, Weights weights)
    : store_(&store), k_(k), weights_(weights) {
  const char* where = "KnnClassifier";
  switch (weights) {
    case Weights::Uniform: case Weights::Distance: break;
    default: detail::fail_enum(where, "weights", weights, "Weights", "Uniform, Distance");
  }
  detail::Engine::check_k(k, where);
  if (store.config().target.kind != TargetSpec::Kind::Classes) {
    detail::fail_argument(where, ": the store's points carry no class labels (StoreConfig.target must be classes(n))");
  }
  if (weights == Weights::Distance && store.config().metric == Metric::InnerProduct) {
    detail::fail_argument(where, ": distance weights need a non-negative metric, and inner-product distances can be negative");
  }
}

ClassPredictions KnnClassifier::predict(std::span<const float> queries, std::span<const IdRange> visible) const {
  return submit(queries, false, visible).get();
}

ClassPredictions KnnClassifier::predict_proba(std::span<const float> queries, std::span<const IdRange> visible) const {
  return submit(queries, true, visible).get();
}

Ticket<ClassPredictions> KnnClassifier::submit(std::span<const float> queries, bool with_probabilities,
                                               std::span<const IdRange> visible) const {
  detail::AggregateSpec spec;
  spec.output = with_probabilities ? detail::AggregateSpec::Output::Probabilities : detail::AggregateSpec::Output::Labels;
  spec.weights = weights_;
  const detail::Engine& engine = detail::EngineAccess::of(*store_);
  return detail::map_ticket(engine.query(queries, k_, model_filters(visible, radius_, where_), spec, "KnnClassifier::predict"),
                            &detail::QueryResult::classes);
}

KnnRegressor::KnnRegressor(const ReferenceSet& store, std::size_t k, RegressionAggregate aggregate)
    : store_(&store), k_(k), aggregate_(aggregate) {
  const char* where = "KnnRegressor";
  switch (aggregate) {
    case RegressionAggregate::Mean: case RegressionAggregate::WeightedMean: case RegressionAggregate::Median: break;
    default: detail::fail_enum(where, "aggregate", aggregate, "RegressionAggregate", "Mean, WeightedMean, Median");
  }
  detail::Engine::check_k(k, where);
  if (store.config().target.kind != TargetSpec::Kind::Outputs) {
    detail::fail_argument(where, ": the store's points carry no float outputs (StoreConfig.target must be outputs(n))");
  }
  if (aggregate == RegressionAggregate::WeightedMean && store.config().metric == Metric::InnerProduct) {
    detail::fail_argument(where, ": weighted_mean needs a non-negative metric, and inner-product distances can be negative");
  }
}

RegressionPredictions KnnRegressor::predict(std::span<const float> queries, std::span<const IdRange> visible) const {
  return submit(queries, visible).get();
}

Ticket<RegressionPredictions> KnnRegressor::submit(std::span<const float> queries,
                                                   std::span<const IdRange> visible) const {
  detail::AggregateSpec spec;
  spec.output = detail::AggregateSpec::Output::Values;
  spec.regression = aggregate_;
  spec.weights = aggregate_ == RegressionAggregate::WeightedMean ? Weights::Distance : Weights::Uniform;
  const detail::Engine& engine = detail::EngineAccess::of(*store_);
  return detail::map_ticket(engine.query(queries, k_, model_filters(visible, radius_, where_), spec, "KnnRegressor::predict"),
                            &detail::QueryResult::regression);
}

}  // namespace streamknn
