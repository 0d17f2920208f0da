// The workspace of a query batch: where each array of one launch chunk lives in the input and
// output blocks (ChunkLayout), sizing a context's device arrays and pinned staging for a plan,
// and reading the answers back out of the staging.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backend.hpp"
#include "cuda/planner.hpp"

namespace streamknn::detail::gpu {

struct QueryContext;

/// What a batch returns (the aggregate kernel's mode, Neighbors aside).
enum class Mode : int { Neighbors = -1, Labels = 0, Probabilities = 1, Values = 2 };
Mode mode_of(AggregateSpec::Output output) noexcept;

/// Where each array of one launch chunk lives inside the chunk's input and output blocks. The
/// pinned host staging holds one such block per chunk, laid out like the device's, so every
/// chunk is one host-to-device copy, and one device-to-host copy or the last kernel's writes.
struct ChunkLayout {
  std::size_t queries = 0, ranges = 0, predicates = 0, thresholds = 0, in_bytes = 0;  // input block
  std::size_t distance = 0, id = 0, label = 0, probability = 0, value = 0, out_bytes = 0;  // output block
};

ChunkLayout chunk_layout(std::uint32_t chunk_queries, std::uint32_t chunks, std::uint32_t k, std::uint32_t classes,
                         std::uint32_t outputs);

/// What sizing a context needs besides the plan: the store's chunks and targets, whether the
/// device maps pinned memory, and the stream the context's work is ordered on.
struct WorkspaceSpec {
  std::uint32_t chunks = 0, classes = 0, outputs = 0;
  bool mapped = false;
  std::size_t rerank_shared = 0;  ///< DeviceLimits::rerank_shared
  cudaStream_t stream = nullptr;
};

/// Sizes the context's device workspace and pinned staging for a batch of `queries` under the
/// plan (arrays only grow). Cached graphs go where an array they read moved. Returns the layout.
ChunkLayout size_context(QueryContext& c, const Plan& plan, std::uint32_t queries, const WorkspaceSpec& spec);

/// The answers of a finished batch, read from the context's pinned staging (`chunk_queries` per
/// block, the plan's).
QueryResult unpack(const QueryContext& c, const StoreConfig& config, Mode mode, std::uint32_t queries, std::uint32_t k,
                   std::uint32_t chunk_queries, std::uint64_t epoch);

}  // namespace streamknn::detail::gpu
