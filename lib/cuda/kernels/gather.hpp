// The row gather (kernels/gather.cu): stored vectors of chosen slots, out of the tile layout into
// plain rows. Plain declarations for host code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

struct GatherParams {
  const void* vectors = nullptr;    ///< a buffer's vectors (device_types.hpp's layout)
  std::uint32_t chunks = 0;         ///< float4 chunks per vector
  std::uint32_t chunk_floats = 4;   ///< 4, or 2 (one float2 per slot)
  std::uint32_t stored_dim = 0;
  const std::uint32_t* slots = nullptr;  ///< count slots, each below the buffer's capacity
  std::uint32_t count = 0;
  float* rows = nullptr;            ///< count x stored_dim floats
};

void launch_gather_rows(const GatherParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
