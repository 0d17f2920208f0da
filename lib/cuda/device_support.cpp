// Which devices the CUDA backend accepts (device_support.hpp), and core/backend.hpp's
// cuda_device_usable.
#include "cuda/device_support.hpp"

#include <cuda_runtime_api.h>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "cuda/kernels/probe.hpp"

namespace streamknn::detail {

namespace {

/// The oldest architecture the kernels are written for: asynchronous copies to shared memory
/// (cp.async) and TF32 tensor-core products (mma.sync m16n8k8) need sm_80.
constexpr int kMinComputeMajor = 8;

}  // namespace

std::string device_unsupported_reason(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return concat("device ", device, ": its properties cannot be read");
  }
  const std::string what = concat("device ", device, " (", props.name, ", compute capability ", props.major, ".",
                                  props.minor, ")");
  if (props.major < kMinComputeMajor) {
    return concat(what, " is older than the minimum, compute capability ", kMinComputeMajor, ".0 (sm_",
                  kMinComputeMajor, "0)");
  }
  int ptx_version = 0;
  const cudaError_t status = gpu::kernel_image_ptx_version(device, &ptx_version);
  if (status != cudaSuccess) {
    return concat(what, ": this build carries no kernel image it can run (", cudaGetErrorString(status),
                  "); build with CMAKE_CUDA_ARCHITECTURES including ", props.major, props.minor);
  }
  return "";
}

bool cuda_device_usable(int device) noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (device < 0 || device >= count) return false;
  try {
    return device_unsupported_reason(device).empty();
  } catch (...) {
    return false;
  }
}

}  // namespace streamknn::detail
