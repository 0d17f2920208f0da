// Whether this build's kernels run on a device: the image the driver would load for it.
#pragma once

#include <cuda_runtime_api.h>

namespace streamknn::detail::gpu {

/// The PTX version (e.g. 80, 90) of the kernel image the driver loads for `device`, or a CUDA
/// error such as cudaErrorNoKernelImageForDevice where this build carries no code the device runs
/// (machine code for another architecture and no PTX it can compile). Leaves the calling
/// thread's current device as it was.
cudaError_t kernel_image_ptx_version(int device, int* ptx_version) noexcept;

}  // namespace streamknn::detail::gpu
