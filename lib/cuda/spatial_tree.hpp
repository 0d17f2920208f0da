// The spatial index of one reference buffer (kernels/spatial.cu): the owner of its device
// arrays, rebuilt on the query stream when the buffer has changed since it was built.
#pragma once

#include <cstdint>

#include "cuda/cuda_raii.hpp"
#include "cuda/device_store.hpp"
#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

class SpatialTree {
 public:
  /// True when the index describes `buffer` as it is now (same epoch, arrays and slot count).
  bool current(const DeviceBuffer& buffer) const noexcept {
    return built_ && epoch_ == buffer.epoch && vectors_ == buffer.vectors.get() && slots_ == buffer.slot_count;
  }
  /// Rebuilds the index from `buffer` (of StoreView::chunk_floats `width`: 2, or 4 for points on
  /// the unit sphere) on `stream`, ordered after the buffer's writes by the caller. Growing its
  /// arrays first waits for the stream (searches may still read them). Throws OutOfMemory with
  /// the index marked stale.
  void build(const DeviceBuffer& buffer, int width, cudaStream_t stream, int sms);
  /// The device copy of the index's view (a fixed address: graphs may hold it).
  const SpatialView* view() const noexcept { return view_.get(); }

  /// Queries searched without the index since the buffer last changed (the backend's build rule).
  std::uint64_t queries_since_change = 0;
  std::uint64_t counted_epoch = ~std::uint64_t(0);

 private:
  DeviceArray<std::uint32_t> scratch_, keys_, order_, slots_sorted_;  // keys_: unsorted, then sorted
  DeviceArray<float> points_, boxes_;
  DeviceArray<unsigned char> temp_;
  DeviceArray<SpatialView> view_;
  bool built_ = false;
  std::uint64_t epoch_ = 0;
  const void* vectors_ = nullptr;
  std::uint32_t slots_ = 0;
};

}  // namespace streamknn::detail::gpu
