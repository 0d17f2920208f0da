// Device helpers of the dense screen shared by its two products (dense_product.cu and the
// tensor-core form in dense_tensor.cuh) and its selection (dense_select.cu).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

/// A screened value's key: ordered bits, NaN (an empty slot) as kEmptyKey, above every value.
inline constexpr std::uint32_t kEmptyKey = 0xffffffffu;
__device__ __forceinline__ std::uint32_t screened_key(float w) { return w == w ? ordered_bits(w) : kEmptyKey; }

/// The products' shared-memory pipeline over `steps` stages of a ring of kStages: kStages - 1
/// stages in flight while one is used. issue(step) starts a stage's copies (cp.async);
/// use(step) reads stage step % kStages once it has landed for every thread. Every thread calls it.
template <int kStages, class Issue, class Use>
__device__ __forceinline__ void staged_pipeline(std::uint32_t steps, Issue issue, Use use) {
#pragma unroll
  for (int s = 0; s + 1 < kStages; ++s) {
    if (std::uint32_t(s) < steps) issue(s);
    commit_async();
  }
  for (std::uint32_t step = 0; step < steps; ++step) {
    wait_async<kStages - 2>();
    __syncthreads();  // this stage landed for every thread; the stage refilled next was read by all
    if (step + kStages - 1 < steps) issue(step + kStages - 1);
    commit_async();
    use(step);
  }
}

}  // namespace

}  // namespace streamknn::detail::gpu
