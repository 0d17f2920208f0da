// K-means in a build without the CUDA backend: BackendKind::Cuda is unavailable.
#include "kmeans/lloyd_backend.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail::kmeans {

std::unique_ptr<LloydBackend> make_cuda_lloyd(const LloydShape&, int, ThreadPool&, RowCheck&, std::uintptr_t,
                                              const char*, std::unique_ptr<LloydWorkspace>) {
  throw BackendUnavailable("KMeans: this build of streamknn has no CUDA support "
                           "(configured with STREAMKNN_CUDA=OFF or without nvcc)");
}

bool cuda_lloyd_available(int) noexcept { return false; }

}  // namespace streamknn::detail::kmeans
