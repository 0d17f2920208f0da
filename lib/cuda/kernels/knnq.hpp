// KNN-Q (kernels/knnq.cu): the per-action estimates of a lookup and the rows of its write-back.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

struct KnnqParams {
  const float* values = nullptr;         // the snapshot's target rows, capacity x outputs
  const std::uint32_t* slots = nullptr;  // num_queries x k neighbour slots (~0u: padding)
  const std::int32_t* actions = nullptr; // num_queries
  const float* targets = nullptr;        // num_queries
  float alpha = 0;
  std::uint32_t num_queries = 0, k = 0, outputs = 0;
  float* q_before = nullptr;             // num_queries x outputs: per-action means (NaN: none)
  float* increment = nullptr;            // num_queries: alpha * (target - q[action]) (0: none)
  // the write-back, one entry per (query, neighbour): slot and its whole new row
  std::uint32_t* out_slots = nullptr;    // num_queries x k
  float* out_values = nullptr;           // num_queries x k x outputs
  // set to ~0 before launch_knnq_rows; the smallest entry x outputs + action whose new value is
  // not finite (lookup_and_update then publishes nothing)
  unsigned long long* non_finite = nullptr;
};
/// Per query: the per-action means of its neighbours' rows (double sums in neighbour order, as
/// the Mean aggregate) and its increment.
void launch_knnq_estimate(const KnnqParams& params, cudaStream_t stream);
/// Per (query, neighbour) entry: the slot's new row, its snapshot row plus the increments of
/// every query that found it, added in query order (as the CPU backend). Entries of one slot
/// write identical rows; padding entries repeat a real slot's entry, so the batch holds
/// num_queries x k target writes, every one well defined. Flags the first non-finite new value
/// in params.non_finite (entries of one slot carry one row, so the smallest flagged entry is
/// the slot's first appearance, the value the CPU backend reports).
void launch_knnq_rows(const KnnqParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
