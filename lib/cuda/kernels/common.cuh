// Device helpers shared by the kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

inline constexpr unsigned kFullMask = 0xffffffffu;

/// Monotone map float -> uint32, so atomicMin on the bits is a min on the floats.
__device__ __forceinline__ std::uint32_t ordered_bits(float f) {
  const std::uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(std::uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/// The (rank, id) total order of every result.
__device__ __forceinline__ bool closer(float ra, std::uint64_t ia, float rb, std::uint64_t ib) {
  return ra < rb || (ra == rb && ia < ib);
}

inline void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), kernel);
}

}  // namespace streamknn::detail::gpu
