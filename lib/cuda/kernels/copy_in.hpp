// The copy-in kernel (kernels/copy_in.cu): a small batch's input block from mapped pinned memory.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

/// Copies `bytes` (a multiple of 16) from mapped pinned host memory (its device pointer) to
/// device memory with a kernel (kernels/copy_in.cu) launched the usual way: the first kernel of a
/// small batch's graph, in place of a copy node, which above 16 KB took the copy engine's longer
/// path.
void launch_copy_in(const void* mapped_from, void* to, std::size_t bytes, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
