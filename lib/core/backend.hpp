// The interface both backends implement. Code above it (Engine, models, streams, CLI) never
// knows which one runs. Requests arrive validated and in stored form (see metric_space.hpp);
// implementations may assume valid input (validate once at the boundary, then trust).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/resolved_batch.hpp"
#include "streamknn/aggregation.hpp"
#include "streamknn/classifier.hpp"
#include "streamknn/config.hpp"
#include "streamknn/regressor.hpp"
#include "streamknn/search.hpp"
#include "streamknn/ticket.hpp"

namespace streamknn::detail {

/// What a query batch should produce besides (or instead of) the raw neighbours.
struct AggregateSpec {
  enum class Output : unsigned char { Neighbors, Labels, Probabilities, Values };
  Output output = Output::Neighbors;
  Weights weights = Weights::Uniform;
  RegressionAggregate regression = RegressionAggregate::Mean;
};

struct QueryRequest {
  std::vector<float> queries;     ///< num_queries x stored_dim, stored form
  std::size_t num_queries = 0;
  std::size_t k = 0;
  std::vector<IdRange> visible;   ///< empty, or one per query
  AggregateSpec aggregate;
};

/// Exactly one member is filled, chosen by QueryRequest::aggregate.output.
struct QueryResult {
  Neighbors neighbors;
  ClassPredictions classes;
  RegressionPredictions regression;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const noexcept = 0;
  virtual std::string name() const = 0;
  /// Ensures the next apply() can write a batch of up to `batch_ops` operations into a buffer
  /// of `slots` slots. May throw OutOfMemory, in which case nothing visible changed.
  virtual void reserve(std::size_t slots, std::size_t batch_ops) = 0;
  /// Applies a batch (after reserve() for its slot_count) and publishes it as `epoch`.
  /// Searches submitted after this returns see it; searches in flight keep their snapshot.
  virtual void apply(const ResolvedBatch& batch, std::uint64_t epoch) = 0;
  /// Runs a search on the current snapshot; the result carries that snapshot's epoch.
  virtual Ticket<QueryResult> submit(QueryRequest request) const = 0;
};

std::unique_ptr<Backend> make_cpu_backend(const StoreConfig& config);
/// Throws BackendUnavailable when the library was built without CUDA or no device is usable.
std::unique_ptr<Backend> make_cuda_backend(const StoreConfig& config);
/// True when make_cuda_backend can succeed for this device ordinal.
bool cuda_device_usable(int device) noexcept;

}  // namespace streamknn::detail
