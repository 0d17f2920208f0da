// Stand-ins for the CUDA backend in a build without it (STREAMKNN_CUDA=OFF or no nvcc).
#include "core/backend.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail {

std::unique_ptr<Backend> make_cuda_backend(const StoreConfig&) {
  throw BackendUnavailable("CUDA backend: this build of streamknn has no CUDA support "
                           "(configured with STREAMKNN_CUDA=OFF or without nvcc)");
}

bool cuda_device_usable(int) noexcept { return false; }

}  // namespace streamknn::detail
