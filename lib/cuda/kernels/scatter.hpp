// The update kernel (kernels/scatter.cu): a resolved batch of inserts and updates into a buffer.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

struct ScatterParams {
  // destination buffer
  float* vectors = nullptr;      // float4 tiles (float2 slots where chunk_floats is 2), as float
  std::uint64_t* ids = nullptr;
  std::uint8_t* valid = nullptr;
  std::int32_t* labels = nullptr;
  float* values = nullptr;
  std::uint32_t chunks = 0, dim = 0, outputs = 0, chunk_floats = 4;
  // one resolved batch, on the device
  const std::uint32_t* vector_slots = nullptr;
  const float* vectors_in = nullptr;   // n x dim
  std::uint32_t vector_count = 0;
  const std::uint32_t* target_slots = nullptr;
  const std::int32_t* labels_in = nullptr;
  const float* values_in = nullptr;    // n x outputs
  std::uint32_t target_count = 0;
  const std::uint32_t* id_slots = nullptr;
  const std::uint64_t* ids_in = nullptr;
  std::uint32_t id_count = 0;
  std::uint32_t* attributes = nullptr;  // destination: capacity x attribute_words
  std::uint32_t attribute_words = 0;
  const std::uint32_t* attribute_slots = nullptr;
  const std::uint32_t* attributes_in = nullptr;  // n x attribute_words
  std::uint32_t attribute_count = 0;
};
void launch_scatter(const ScatterParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
