// The GPU benchmarks' CUDA error check: a failed call throws, naming the call.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace bench {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace bench
