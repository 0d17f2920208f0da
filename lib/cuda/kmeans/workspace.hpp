// What the CUDA backend of K-means keeps between the fits of one KMeans object
// (lloyd_backend.hpp's WorkspaceShelf): its streams, its one block of device arrays, the device
// copy of host points and the pinned ring that copy goes through. Making and freeing them costs
// about 0.3 ms of every fit on an H200 host (cudaMalloc, cudaFree, a stream), most of a small
// fit's time, and pinning the ring about 5 ms more for host points.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "cuda/cuda_raii.hpp"
#include "cuda/kmeans/staged_upload.hpp"
#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

struct CudaWorkspace final : LloydWorkspace {
  explicit CudaWorkspace(int on) : device(on) {}
  int device;
  gpu::Stream stream;
  std::optional<gpu::Stream> side;  ///< the labels' early copies (label_return.hpp), made at the first one
  gpu::DeviceArray<unsigned char> block;
  gpu::DeviceArray<float> points;
  StagingRing staging;
  std::vector<unsigned char> labels;  ///< the labels' narrow copy on the host (label_return.hpp)

  /// `reuse` where it is a CUDA workspace of `device` (a current device's context), else a new
  /// one; its arrays grown to at least `block_bytes` and `point_floats` (gpu::grow: an array too
  /// small is freed first, then made with room for max(the need, twice its old size); a larger one
  /// is kept as it is).
  static std::unique_ptr<CudaWorkspace> take(std::unique_ptr<LloydWorkspace> reuse, int device,
                                             std::size_t block_bytes, std::size_t point_floats) {
    std::unique_ptr<CudaWorkspace> w;
    if (auto* cuda = dynamic_cast<CudaWorkspace*>(reuse.get()); cuda != nullptr && cuda->device == device) {
      reuse.release();
      w.reset(cuda);
    } else {
      reuse.reset();
      w = std::make_unique<CudaWorkspace>(device);
    }
    gpu::grow(w->block, block_bytes, "kmeans arrays");
    gpu::grow(w->points, point_floats, "kmeans points");
    return w;
  }
};

}  // namespace streamknn::detail::kmeans
