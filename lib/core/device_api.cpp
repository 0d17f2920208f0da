// The ReferenceSet entry points of streamknn/device.hpp and lookup_and_update.
#include "core/engine.hpp"
#include "streamknn/device.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn {

Ticket<std::uint64_t> search_device(const ReferenceSet& set, const DeviceQueries& queries, std::size_t k,
                                    const DeviceNeighbors& out, std::uintptr_t cuda_stream) {
  detail::DeviceQueryRequest request;
  request.queries = queries.data;
  request.num_queries = queries.num_queries;
  request.row_stride = queries.row_stride == 0 ? set.config().dim : queries.row_stride;
  request.k = k;
  request.visible = queries.visible;
  request.distances = out.distances;
  request.ids = out.ids;
  request.stream = cuda_stream;
  return set.engine().search_device(request, queries.device, "search_device");
}

QUpdate ReferenceSet::lookup_and_update(std::span<const float> states, std::size_t k,
                                        std::span<const std::int32_t> actions, std::span<const float> targets,
                                        float alpha) {
  return engine_->lookup_and_update(states, k, actions, targets, alpha);
}

}  // namespace streamknn
