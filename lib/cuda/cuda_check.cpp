#include "cuda/cuda_check.hpp"

#include "core/check.hpp"

namespace streamknn::detail::gpu {

void throw_cuda_error(cudaError_t status, const char* call, const std::string& context, std::source_location where) {
  (void)cudaGetLastError();  // clear a non-sticky error so the object stays usable
  std::string message = concat(call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  if (!context.empty()) message += concat(" [", context, "]");
  message += concat(" at ", where.file_name(), ":", where.line());
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(message);
  throw CudaError(message);
}

}  // namespace streamknn::detail::gpu
