// Graph keys and capture (graph_cache.hpp).
#include "cuda/graph_cache.hpp"

#include "cuda/cuda_check.hpp"

namespace streamknn::detail::gpu {

GraphKey graph_key(const Plan& plan, std::uint32_t queries, int mode, const AggregateSpec& aggregate, int buffer) {
  GraphKey key;
  key.buffer = buffer;
  key.queries = queries;
  key.k = plan.k;
  key.mode = mode;
  key.weights = static_cast<int>(aggregate.weights);
  key.regression = static_cast<int>(aggregate.regression);
  key.strategy = plan.strategy.index();
  key.filtering = plan.filtering;
  key.lists = plan.lists;
  key.sample_step = plan.sample() ? plan.sample()->step : 0;
  key.sample_keys = std::uint32_t(plan.sample_keys());
  if (const auto* scan = plan.as<ScanPlan>()) {
    key.inner_product = scan->shape.inner_product;
    key.query_group = scan->shape.query_group;
    key.warps_per_block = scan->shape.warps_per_block;
    key.global_lists = scan->shape.global_lists;
    key.tiled = scan->shape.tiled;
    key.screen = scan->shape.screen;
    key.first_bound = scan->first_bound;
  } else if (const auto* spatial = plan.as<SpatialPlan>()) {
    key.spatial_bounded = spatial->bounded;
  } else if (const auto* dense = plan.as<DensePlan>()) {
    key.dense_stride = dense->row_stride;
  } else if (const auto* direct = plan.as<DirectPlan>()) {
    key.direct_blocks = direct->blocks;
  } else if (const auto* resident = plan.as<ResidentPlan>()) {
    key.resident_warps = resident->warps;
  } else if (const auto* reduced = plan.as<ReducedPlan>()) {
    key.direct_blocks = reduced->blocks;  // the blocks per group, as the direct search's per query
    key.query_group = int(reduced->group);
  }
  return key;
}

DeviceGraphKey device_graph_key(const GraphKey& plan, const DeviceQueryRequest& r) {
  auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  DeviceGraphKey key;
  key.plan = plan;
  key.queries = address(r.queries);
  key.row_stride = r.row_stride;
  key.visible = address(r.visible);
  key.distances = address(r.distances);
  key.ids = address(r.ids);
  key.labels = address(r.labels);
  key.probabilities = address(r.probabilities);
  key.values = address(r.values);
  return key;
}

GraphExec capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(status, "cudaGraphInstantiate");
  return GraphExec(exec);
}

}  // namespace streamknn::detail::gpu
