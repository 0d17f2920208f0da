// streamknn/regressor.hpp — k-nearest-neighbour regression over a ReferenceSet.
//
// A KnnRegressor is a light, immutable view over a store whose TargetSpec is outputs(T): each
// query gets T values, each aggregated separately (mean, distance-weighted mean or median; see
// streamknn/aggregation.hpp). Safe to use from many threads; the store must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "streamknn/aggregation.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn {

struct RegressionPredictions {
  std::size_t num_queries = 0;
  std::size_t num_outputs = 0;
  std::uint64_t epoch = 0;
  std::vector<float> values;  ///< num_queries x num_outputs; NaN rows when no neighbour exists

  std::span<const float> values_of(std::size_t query) const {
    return {values.data() + query * num_outputs, num_outputs};
  }
};

class KnnRegressor {
 public:
  /// Throws InvalidArgument if the store does not hold float outputs, k is outside
  /// [1, kMaxK], aggregate names no RegressionAggregate value, or WeightedMean is asked of the
  /// inner-product metric.
  KnnRegressor(const ReferenceSet& store, std::size_t k,
               RegressionAggregate aggregate = RegressionAggregate::Mean);

  RegressionPredictions predict(std::span<const float> queries,
                                std::span<const IdRange> visible = {}) const;
  Ticket<RegressionPredictions> submit(std::span<const float> queries,
                                       std::span<const IdRange> visible = {}) const;

  /// This regressor aggregating the k nearest within radius only (as KnnClassifier::within): a
  /// query with none gets NaN.
  KnnRegressor within(double radius) const;

  std::size_t k() const noexcept { return k_; }
  RegressionAggregate aggregate() const noexcept { return aggregate_; }
  const ReferenceSet& store() const noexcept { return *store_; }
  /// The radius given to within(), or +infinity.
  double radius() const noexcept { return radius_; }
  /// This regressor using only the points that pass predicate (ReferenceSet::search's where,
  /// one Predicate for every query; streamknn/predicate.hpp): a query with none gets NaN. The
  /// predicate is checked against the store's attribute words at each prediction.
  KnnRegressor where(const Predicate& predicate) const;
  /// The predicate given to where(), if any.
  const std::optional<Predicate>& predicate() const noexcept { return where_; }

 private:
  const ReferenceSet* store_;
  std::size_t k_;
  RegressionAggregate aggregate_;
  double radius_ = std::numeric_limits<double>::infinity();
  std::optional<Predicate> where_;
};

}  // namespace streamknn
