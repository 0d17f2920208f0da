// The copy of a fit's points to the device (lloyd_cuda.cpp), checked as they are copied: the
// pool's threads copy and test 256 KiB blocks into a ring of pinned buffers, and the thread that
// completes a buffer queues its DMA at once, while the others go on filling the next buffers.
// A copy from pageable memory runs well below the link's rate, and pinning the caller's points
// would cost more than copying them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "cuda/cuda_raii.hpp"

namespace streamknn::detail {
class ThreadPool;
}  // namespace streamknn::detail

namespace streamknn::detail::kmeans {

/// Floats a pool task copies and tests (256 KiB: tested from the core's cache just after the copy).
inline constexpr std::size_t kStageBlock = std::size_t(1) << 16;

/// The ring of pinned buffers. Pinning costs about half a millisecond per MiB on an H200 host,
/// ten times what the link takes to carry a MiB, so its owner keeps the ring from one copy for the
/// next (the CUDA backend's workspace: workspace.hpp). A copy that finds no ring (an object's
/// first fit) pins buffers of an eighth of its share (count / buffers / 8 floats, at least one
/// block), so that pinning costs about what the copy does; one that finds a ring grows it to
/// buffer_floats, which the copies after it reuse: 2 MiB copies run near the link's rate, and
/// smaller ones cost 8 MB of points about 0.3 ms. Four buffers let the threads run up to three
/// buffers ahead of the DMA.
struct StagingRing {
  std::size_t buffers = 4;
  std::size_t buffer_floats = std::size_t(1) << 19;  ///< the most a buffer holds: a multiple of kStageBlock
  std::vector<gpu::PinnedArray<float>> memory;        ///< made or grown by the copies that need it
};

/// Copies `count` floats from `points` (host memory) to `to` (device memory of `device`) on
/// `stream`, testing every float as it is copied (core/check.hpp's first_beyond against `bound`).
/// Returns the index of the first float that is NaN or beyond `bound` in magnitude, after which
/// nothing more is copied (`to` holds no usable points), or `count` when there is none: then the
/// points are on the device. Either way no copy from the pinned buffers runs on return.
std::size_t staged_upload(float* to, const float* points, std::size_t count, float bound, int device,
                          cudaStream_t stream, ThreadPool& pool, StagingRing& ring);

}  // namespace streamknn::detail::kmeans
