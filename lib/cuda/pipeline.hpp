// The query pipeline of the CUDA backend: a planned batch's work on the query stream. Per launch
// chunk: its input block in (a copy, or in a graph a copy-in kernel), the plan's kernels (the
// spatial search, the direct search, the dense screen, or [sample pass,] scan or resident scan,
// then the selection), [the aggregate,] and the answers into the pinned staging (written there by
// the last kernel for up to 16 queries, else a copy); small batches replay captured graphs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backend.hpp"
#include "cuda/kernels.hpp"
#include "cuda/planner.hpp"
#include "cuda/query_context.hpp"
#include "cuda/workspace.hpp"

namespace streamknn::detail::gpu {

/// The store buffer a batch reads: its number, its device view and its spatial index's.
struct BufferViews {
  int buffer = 0;
  const StoreView* store = nullptr;
  const SpatialView* index = nullptr;
};

/// Enqueues planned batches on the query stream. Holds the store's and the device's constants
/// only: every call is ordered by the backend (under its mutex).
class Pipeline {
 public:
  Pipeline(const StoreConfig& config, const DeviceLimits& device, cudaStream_t stream);

  /// Sizes the context for the plan (see size_context).
  ChunkLayout size(QueryContext& c, const Plan& plan, std::uint32_t queries) const;
  /// Sizes the context and stages every chunk's input block in pinned memory.
  void prepare(QueryContext& c, const Plan& plan, const QueryRequest& r) const;
  /// A host batch (prepared): one graph where it is small and one chunk, else chunk by chunk.
  void launch(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode, const BufferViews& views) const;
  /// One chunk [q0, q0 + n) of a prepared host batch (in_graph: being captured).
  void enqueue(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode, const BufferViews& views,
               std::uint32_t q0, std::uint32_t n, bool in_graph) const;
  /// A device-resident batch (sized; see pipeline.cpp).
  void launch_device(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r, const BufferViews& views) const;

 private:
  // pipeline.cpp: chunks, graphs, debug checks.
  void launch_graph(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode, const BufferViews& views) const;
  void enqueue_device(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r, const BufferViews& views,
                      std::uint32_t q0, std::uint32_t n) const;
  void enqueue_device_all(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r, const BufferViews& views) const;
  void reset_status(QueryContext& c) const;
  void poison(QueryContext& c, std::uint32_t n, std::uint32_t k) const;
  void poison_device_outputs(const Plan& plan, const DeviceQueryRequest& r) const;
  void debug_sync(const char* kernel) const;
  // search.cpp: the plan's kernels and their parameters.
  void search(QueryContext& c, const Plan& plan, const BufferViews& views, std::uint32_t n,
              const SelectParams& select) const;
  bool find_candidates(QueryContext& c, const Plan& plan, const BufferViews& views, std::uint32_t n,
                       const SelectParams& select) const;
  void launch_spatial(QueryContext& c, const Plan& plan, const BufferViews& views, std::uint32_t n,
                      const SelectParams& select) const;
  void launch_dense_screen(QueryContext& c, const Plan& plan, const DensePlan& dense, const StoreView* view,
                           std::uint32_t n, const SelectParams& select) const;
  void sample_bound(QueryContext& c, const Plan& plan, const SamplePass& pass, const StoreView* view,
                    std::uint32_t n) const;
  SampleParams sample_params(QueryContext& c, const Plan& plan, const SamplePass& pass,
                             const StoreView* view, std::uint32_t n) const;
  ScanParams scan_params(QueryContext& c, const Plan& plan, const StoreView* view, std::uint32_t n) const;
  SelectParams select_params(QueryContext& c, const Plan& plan, std::uint32_t n) const;
  AggregateParams aggregate_params(QueryContext& c, const StoreView* view, std::uint32_t n, std::uint32_t k, Mode mode,
                                   const AggregateSpec& spec) const;

  std::uint32_t classes() const noexcept;
  std::uint32_t outputs() const noexcept;

  const StoreConfig& config_;  // the backend's: outlives the pipeline
  const DeviceLimits& device_;
  std::size_t stored_dim_;
  std::uint32_t chunks_;
  int width_;  // StoreView::chunk_floats
  cudaStream_t stream_;
};

}  // namespace streamknn::detail::gpu
