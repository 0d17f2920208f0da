// Checking CUDA calls: every runtime call goes through STREAMKNN_CUDA_CHECK, which throws
// CudaError (or OutOfMemory for allocation failures) naming the call, the error and where.
#pragma once

#include <cuda_runtime_api.h>

#include <source_location>
#include <string>

#include "streamknn/error.hpp"

namespace streamknn::detail::gpu {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const std::string& context,
                                   std::source_location where);

inline void check_cuda(cudaError_t status, const char* call, const std::string& context = {},
                       std::source_location where = std::source_location::current()) {
  if (status != cudaSuccess) throw_cuda_error(status, call, context, where);
}

/// Checks the kernel launch just made (a bad configuration, or an earlier asynchronous error).
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace streamknn::detail::gpu

/// The library's only macro: it captures the failing expression's text.
#define STREAMKNN_CUDA_CHECK(call, ...) ::streamknn::detail::gpu::check_cuda((call), #call __VA_OPT__(, ) __VA_ARGS__)
