#include "cuda/spatial_tree.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "cuda/cuda_check.hpp"

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

bool SpatialTree::within_limits(const SpatialStats& s) {
  return s.overflow <= kMaxOverflow && s.leaf_area <= kMaxAreaGrowth * s.built_leaf_area;
}

void SpatialTree::read_stats() {
  if (!stats_pending_ || !stats_written_.done()) return;
  last_stats_ = *stats_.get();
  stats_pending_ = false;
  // Only a build's first refit says whether refits can follow this store: later ones also carry
  // the growth of the refits before them, which a build clears.
  if (pending_refit_) refit_failed_ = !within_limits(last_stats_) && (refit_failed_ || pending_first_refit_);
  if (pending_refit_ && !searchable(last_stats_)) reprobe_builds_left_ = kReprobeBuilds;
}

bool SpatialTree::refittable(const DeviceBuffer& buffer) {
  if (!built_ || stats_.get() == nullptr || vectors_ != buffer.vectors.get() || capacity_ != buffer.capacity) return false;
  if (buffer.inserts - inserts_at_build_ > kMaxOverflow) return false;
  if (buffer.vector_writes - vector_writes_at_update_ > std::max<std::uint64_t>(tree_slots_ / 4, kMaxOverflow)) return false;
  read_stats();  // figures not yet written count as the last ones read
  return reprobe_builds_left_ == 0 && within_limits(last_stats_);
}

void SpatialTree::build(const DeviceBuffer& buffer, int width, cudaStream_t stream, int sms, bool mapped) {
  if (mapped && stats_.get() == nullptr) stats_ = PinnedArray<SpatialStats>(1, "spatial index figures", true);
  launch(buffer, width, false, stream, sms);
}

void SpatialTree::refit(const DeviceBuffer& buffer, int width, cudaStream_t stream, int sms) {
  launch(buffer, width, true, stream, sms);
}

void SpatialTree::launch(const DeviceBuffer& buffer, int width, bool refit, cudaStream_t stream, int sms) {
  built_ = built_ && refit;  // stale until the launch below is enqueued
  const std::uint32_t slots = buffer.slot_count, tree_slots = refit ? tree_slots_ : slots;
  const std::vector<std::uint32_t> sizes = spatial_level_sizes(tree_slots);
  const std::size_t leaves = sizes.empty() ? 0 : sizes[0];
  const std::size_t boxes = std::accumulate(sizes.begin(), sizes.end(), std::size_t(0));
  bool waited = false;
  try {
    fit(scratch_, spatial_scratch_words(tree_slots), "spatial index scratch", waited, stream);
    fit(view_, 1, "spatial index view", waited, stream);
    if (refit) {
      fit(overflow_slots_, buffer.capacity, "spatial index overflow slots", waited, stream);
      fit(overflow_points_, std::size_t(buffer.capacity) * width, "spatial index overflow points", waited, stream);
    } else {
      fit(keys_, 2 * std::size_t(slots), "spatial index cells", waited, stream);
      fit(order_, slots, "spatial index order", waited, stream);
      fit(slots_sorted_, leaves * 32, "spatial index slots", waited, stream);
      fit(points_, leaves * 32 * width, "spatial index points", waited, stream);
      fit(boxes_, boxes * 2 * width, "spatial index boxes", waited, stream);
      fit(built_boxes_, leaves * 2 * width, "spatial index built boxes", waited, stream);
      fit(temp_, spatial_sort_bytes(slots), "spatial index sort storage", waited, stream);
    }
  } catch (...) {
    built_ = false;
    throw;
  }
  // The figures of a launch still pending are never read: the stream writes them before these,
  // and the host reads once the last launch is done. Each launch writes the whole struct but the
  // build's area, which a refit leaves as its build wrote it.
  SpatialBuildParams p;
  p.store = buffer.view.get();
  p.slots = slots;
  p.tree_slots = tree_slots;
  p.width = width;
  p.refit = refit;
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
  p.built_leaf_boxes = built_boxes_.get();
  p.overflow_slots = overflow_slots_.get();
  p.overflow_points = overflow_points_.get();
  p.stats = stats_.device_ptr();
  p.view = view_.get();
  launch_spatial_build(p, stream);
  if (p.stats != nullptr) {
    stats_written_.record(stream);
    stats_pending_ = true;
    pending_refit_ = refit;
    pending_first_refit_ = refit && refits_since_build_ == 0;
  }
  refits_since_build_ = refit ? refits_since_build_ + 1 : 0;
  // After kReprobeBuilds builds the store may have calmed down: the next change tries a refit again.
  if (!refit && reprobe_builds_left_ > 0) --reprobe_builds_left_;
  built_ = true;
  epoch_ = buffer.epoch;
  vectors_ = buffer.vectors.get();
  slots_ = slots;
  vector_writes_at_update_ = buffer.vector_writes;
  if (!refit) {
    tree_slots_ = slots;
    capacity_ = buffer.capacity;
    inserts_at_build_ = buffer.inserts;
    last_stats_ = SpatialStats{};  // until the build's own are read: no overflow, no growth
  }
}

}  // namespace streamknn::detail::gpu
