// streamknn/classifier.hpp — k-nearest-neighbour classification over a ReferenceSet.
//
// A KnnClassifier is a light view: it holds a reference to a store whose TargetSpec is
// classes(n), plus k and the weighting. It is immutable and safe to use from many threads;
// the store must outlive it. Aggregation rules are those of streamknn/aggregation.hpp and run
// on the backend (on the device for CUDA), so only the answers cross back to the host.
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

struct ClassPredictions {
  std::size_t num_queries = 0;
  std::size_t num_classes = 0;
  std::uint64_t epoch = 0;
  std::vector<std::int32_t> labels;    ///< one per query; kNoLabel when no neighbour exists
  std::vector<float> probabilities;    ///< num_queries x num_classes; empty unless asked for

  std::span<const float> probabilities_of(std::size_t query) const {
    return {probabilities.data() + query * num_classes, num_classes};
  }
};

class KnnClassifier {
 public:
  /// Throws InvalidArgument if the store does not hold class labels, k is outside
  /// [1, kMaxK], weights names no Weights value, or Distance weights are asked of the
  /// inner-product metric (whose distances can be negative).
  KnnClassifier(const ReferenceSet& store, std::size_t k, Weights weights = Weights::Uniform);

  ClassPredictions predict(std::span<const float> queries, std::span<const IdRange> visible = {}) const;
  ClassPredictions predict_proba(std::span<const float> queries,
                                 std::span<const IdRange> visible = {}) const;
  Ticket<ClassPredictions> submit(std::span<const float> queries, bool with_probabilities = false,
                                  std::span<const IdRange> visible = {}) const;

  /// This classifier voting among the k nearest within radius only (ReferenceSet::search_within;
  /// "within" as streamknn/radius.hpp states it): a query with none gets kNoLabel. Throws
  /// InvalidArgument for a NaN or negative radius (any finite radius for the inner product).
  KnnClassifier within(double radius) const;

  std::size_t k() const noexcept { return k_; }
  Weights weights() const noexcept { return weights_; }
  const ReferenceSet& store() const noexcept { return *store_; }
  /// The radius given to within(), or +infinity.
  double radius() const noexcept { return radius_; }
  /// This classifier using only the points that pass predicate (ReferenceSet::search's where,
  /// one Predicate for every query; streamknn/predicate.hpp): a query with none gets kNoLabel. The
  /// predicate is checked against the store's attribute words at each prediction.
  KnnClassifier where(const Predicate& predicate) const;
  /// The predicate given to where(), if any.
  const std::optional<Predicate>& predicate() const noexcept { return where_; }

 private:
  const ReferenceSet* store_;
  std::size_t k_;
  Weights weights_;
  double radius_ = std::numeric_limits<double>::infinity();
  std::optional<Predicate> where_;
};

}  // namespace streamknn
