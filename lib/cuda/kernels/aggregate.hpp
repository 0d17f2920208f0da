// The aggregation kernel (kernels/aggregate.cu): labels, probabilities or values from the neighbours.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

struct AggregateParams {
  const StoreView* store = nullptr;
  const float* distance = nullptr;       // num_queries x k, reported
  const std::uint64_t* id = nullptr;
  const std::uint32_t* slot = nullptr;
  std::uint32_t num_queries = 0, k = 0;
  int mode = 0;                          // 0 labels, 1 probabilities, 2 values
  int distance_weights = 0;              // 1: 1/d with the zero-distance rule
  int median = 0;                        // regression: median instead of (weighted) mean
  std::uint32_t classes = 0, outputs = 0;
  double* class_scratch = nullptr;       // num_queries x classes, when classes > kSharedClasses
  double* value_scratch = nullptr;       // num_queries x k (median)
  std::int32_t* out_label = nullptr;
  float* out_probability = nullptr;      // num_queries x classes
  float* out_value = nullptr;            // num_queries x outputs
};
inline constexpr std::uint32_t kSharedClasses = 4096;
void launch_aggregate(const AggregateParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
