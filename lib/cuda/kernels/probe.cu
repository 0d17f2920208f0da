// A kernel that does nothing, compiled for the same architectures as every other kernel of the
// library, so the image the driver picks for it is the one it picks for all of them.
#include "cuda/kernels/probe.hpp"

namespace streamknn::detail::gpu {
namespace {

__global__ void probe_kernel() {}

}  // namespace

cudaError_t kernel_image_ptx_version(int device, int* ptx_version) noexcept {
  int previous = 0;
  cudaError_t status = cudaGetDevice(&previous);
  if (status != cudaSuccess) return status;
  status = cudaSetDevice(device);
  if (status == cudaSuccess) {
    cudaFuncAttributes attributes{};
    status = cudaFuncGetAttributes(&attributes, probe_kernel);
    if (status == cudaSuccess) *ptx_version = attributes.ptxVersion;
  }
  (void)cudaGetLastError();  // a missing image must not stick to the next call
  cudaSetDevice(previous);
  return status;
}

}  // namespace streamknn::detail::gpu
