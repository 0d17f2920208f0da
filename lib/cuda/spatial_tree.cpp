#include "cuda/spatial_tree.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels.hpp"

namespace streamknn::detail::gpu {

namespace {

/// Grows `a` to at least n elements (nothing kept: every array is rewritten by a build).
template <class T>
void fit(DeviceArray<T>& a, std::size_t n, const char* what, bool& waited, cudaStream_t stream) {
  if (a.size() >= n) return;
  if (!waited) {
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize(before growing the spatial index)");
    waited = true;
  }
  const std::size_t grown = std::max(n, a.size() + a.size() / 2);
  a = DeviceArray<T>();  // free first: the device may not hold both
  a = DeviceArray<T>(grown, what);
}

}  // namespace

void SpatialTree::build(const DeviceBuffer& buffer, int width, cudaStream_t stream, int sms) {
  built_ = false;
  const std::uint32_t slots = buffer.slot_count;
  const std::vector<std::uint32_t> sizes = spatial_level_sizes(slots);
  const std::size_t leaves = sizes.empty() ? 0 : sizes[0];
  const std::size_t boxes = std::accumulate(sizes.begin(), sizes.end(), std::size_t(0));
  bool waited = false;
  fit(scratch_, 5, "spatial index scratch", waited, stream);
  fit(keys_, 2 * std::size_t(slots), "spatial index cells", waited, stream);
  fit(order_, slots, "spatial index order", waited, stream);
  fit(slots_sorted_, leaves * 32, "spatial index slots", waited, stream);
  fit(points_, leaves * 32 * width, "spatial index points", waited, stream);
  fit(boxes_, boxes * 2 * width, "spatial index boxes", waited, stream);
  fit(temp_, spatial_sort_bytes(slots), "spatial index sort storage", waited, stream);
  fit(view_, 1, "spatial index view", waited, stream);
  SpatialBuildParams p;
  p.store = buffer.view.get();
  p.slots = slots;
  p.width = width;
  p.max_blocks = std::uint32_t(sms) * 8;
  p.scratch = scratch_.get();
  p.keys = keys_.get();
  p.keys_sorted = keys_.get() + slots;
  p.order = order_.get();
  p.slots_sorted = slots_sorted_.get();
  p.temp = temp_.get();
  p.temp_bytes = temp_.bytes();
  p.points = points_.get();
  p.boxes = boxes_.get();
  p.view = view_.get();
  launch_spatial_build(p, stream);
  built_ = true;
  epoch_ = buffer.epoch;
  vectors_ = buffer.vectors.get();
  slots_ = slots;
}

}  // namespace streamknn::detail::gpu
