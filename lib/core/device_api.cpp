// The entry points of streamknn/device.hpp, and ReferenceSet::lookup_and_update.
#include <limits>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"
#include "streamknn/device.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn {

namespace {

detail::DeviceQueryRequest request_for(const ReferenceSet& set, const DeviceQueries& queries, std::size_t k,
                                       std::uintptr_t cuda_stream) {
  detail::DeviceQueryRequest request;
  request.queries = queries.data;
  request.num_queries = queries.num_queries;
  request.row_stride = queries.row_stride == 0 ? set.config().dim : queries.row_stride;
  request.k = k;
  request.visible = queries.visible;
  request.stream = cuda_stream;
  return request;
}

/// Device-resident predictions take neither a radius nor a predicate: refused, not ignored.
template <class Model>
void refuse_filters(const Model& model, const char* caller) {
  if (model.radius() != std::numeric_limits<double>::infinity() || model.predicate()) {
    detail::fail_argument(caller, ": device-resident queries take no within() radius or where() predicate; copy "
                                  "them to the host and call predict()");
  }
}

}  // namespace

Ticket<std::uint64_t> search_device(const ReferenceSet& set, const DeviceQueries& queries, std::size_t k,
                                    const DeviceNeighbors& out, std::uintptr_t cuda_stream) {
  detail::DeviceQueryRequest request = request_for(set, queries, k, cuda_stream);
  request.distances = out.distances;
  request.ids = out.ids;
  return detail::EngineAccess::of(set).query_device(request, queries.device, "search_device");
}

Ticket<std::uint64_t> predict_device(const KnnClassifier& model, const DeviceQueries& queries,
                                     const DeviceClassPredictions& out, std::uintptr_t cuda_stream) {
  refuse_filters(model, "predict_device(KnnClassifier)");
  detail::DeviceQueryRequest request = request_for(model.store(), queries, model.k(), cuda_stream);
  request.aggregate.output = out.probabilities ? detail::AggregateSpec::Output::Probabilities
                                               : detail::AggregateSpec::Output::Labels;
  request.aggregate.weights = model.weights();
  request.labels = out.labels;
  request.probabilities = out.probabilities;
  const detail::Engine& engine = detail::EngineAccess::of(model.store());
  return engine.query_device(request, queries.device, "predict_device(KnnClassifier)");
}

Ticket<std::uint64_t> predict_device(const KnnRegressor& model, const DeviceQueries& queries, float* values,
                                     std::uintptr_t cuda_stream) {
  refuse_filters(model, "predict_device(KnnRegressor)");
  detail::DeviceQueryRequest request = request_for(model.store(), queries, model.k(), cuda_stream);
  request.aggregate.output = detail::AggregateSpec::Output::Values;
  request.aggregate.regression = model.aggregate();
  request.aggregate.weights =
      model.aggregate() == RegressionAggregate::WeightedMean ? Weights::Distance : Weights::Uniform;
  request.values = values;
  const detail::Engine& engine = detail::EngineAccess::of(model.store());
  return engine.query_device(request, queries.device, "predict_device(KnnRegressor)");
}

QUpdate ReferenceSet::lookup_and_update(std::span<const float> states, std::size_t k,
                                        std::span<const std::int32_t> actions, std::span<const float> targets,
                                        float alpha) {
  return engine_->lookup_and_update(states, k, actions, targets, alpha);
}

}  // namespace streamknn
