// Device helpers of the dense screen shared by its product (dense_product.cu) and its selection
// (dense_select.cu).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

/// A screened value's key: ordered bits, NaN (an empty slot) as kEmptyKey, above every value.
inline constexpr std::uint32_t kEmptyKey = 0xffffffffu;
__device__ __forceinline__ std::uint32_t screened_key(float w) { return w == w ? ordered_bits(w) : kEmptyKey; }

}  // namespace

}  // namespace streamknn::detail::gpu
