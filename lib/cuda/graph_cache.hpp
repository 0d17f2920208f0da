// Captured CUDA graphs of small batches: what a graph depends on (GraphKey, DeviceGraphKey), a
// bounded cache of them per query context, and the capture itself.
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "core/backend.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/planner.hpp"
#include "cuda/tuning.hpp"

namespace streamknn::detail::gpu {

/// What a captured search graph depends on besides its context's arrays: the batch size, the
/// mode and aggregation, the store buffer and the plan (its strategy and every parameter a
/// kernel's launch or its parameters take from it).
struct GraphKey {
  int buffer = 0;
  std::uint32_t queries = 0, k = 0;
  int mode = 0, weights = 0, regression = 0;
  std::size_t strategy = 0;  // Plan::strategy's index
  Filtering filtering = Filtering::None;
  bool inner_product = false;
  std::uint32_t lists = 0;   // Plan::lists
  int query_group = 0, warps_per_block = 0;                  // the scan's shape
  bool global_lists = false, tiled = false, screen = false;  // the scan's shape
  bool first_bound = false;
  bool spatial_bounded = false;  // SpatialPlan::bounded
  std::uint32_t sample_step = 0, sample_keys = 0;
  std::uint32_t dense_stride = 0, direct_blocks = 0, resident_warps = 0;

  auto operator<=>(const GraphKey&) const = default;
};

/// The key of a plan for a batch of `queries` (`mode`: the output as an int, Mode).
GraphKey graph_key(const Plan& plan, std::uint32_t queries, int mode, const AggregateSpec& aggregate, int buffer);

/// search_device's graphs: a plan's key with the caller's buffers and row stride (the kernels
/// hold their addresses).
struct DeviceGraphKey {
  GraphKey plan;
  std::uintptr_t queries = 0;
  std::size_t row_stride = 0;
  std::uintptr_t visible = 0, distances = 0, ids = 0, labels = 0, probabilities = 0, values = 0;

  auto operator<=>(const DeviceGraphKey&) const = default;
};

DeviceGraphKey device_graph_key(const GraphKey& plan, const DeviceQueryRequest& r);

/// Graphs by key, at most tuning::kMaxCachedGraphs: all are dropped when it is full, so a caller
/// cycling through more shapes than that captures as it goes.
template <class Key, class Value>
class GraphCache {
 public:
  Value* find(const Key& key) {
    auto it = graphs_.find(key);
    return it == graphs_.end() ? nullptr : &it->second;
  }
  Value& insert(const Key& key, Value value) {
    if (graphs_.size() >= tuning::kMaxCachedGraphs) graphs_.clear();
    return graphs_.emplace(key, std::move(value)).first->second;
  }
  void clear() noexcept { graphs_.clear(); }

 private:
  std::map<Key, Value> graphs_;
};

/// The work `enqueue` puts on `stream`, captured and instantiated as a graph.
GraphExec capture(cudaStream_t stream, const std::function<void()>& enqueue);

}  // namespace streamknn::detail::gpu
