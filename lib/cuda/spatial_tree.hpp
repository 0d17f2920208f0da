// The spatial index of one reference buffer (kernels/spatial.cu): the owner of its device
// arrays, built on the query stream when the buffer has changed since it was built, or refit
// where that change left the tree usable.
#pragma once

#include <cstdint>

#include "cuda/cuda_raii.hpp"
#include "cuda/device_store.hpp"
#include "cuda/device_types.hpp"
#include "cuda/kernels.hpp"

namespace streamknn::detail::gpu {

class SpatialTree {
 public:
  /// Overflow (SpatialView) a refit may leave, and inserts since the build it may take: past
  /// it the next change makes a build. Every search ranks the whole overflow.
  static constexpr std::uint32_t kMaxOverflow = 2048;
  /// A refit's leaf boxes may cover this many times the area of the build's.
  static constexpr float kMaxAreaGrowth = 2.0f;
  /// An index whose overflow is past this is not searched once its figures are read (usable()): a
  /// warp per query ranks the whole overflow, and a refit after 200,000 moves anywhere on a
  /// 1,000,000 x 2 store left most of them there (bench_updates, publishes of 100,000 moves: query
  /// p99 1,385 us against 45 us without updates; 59 us with this limit).
  /// A refit after 2,000 jumps stays under it and serves faster than a build (10,000,000 x 2, 1,000
  /// jumps before each Q = 1,024: 0.64 against 0.88 ms when such refits were not searched).
  static constexpr std::uint32_t kMaxSearchOverflow = 4 * kMaxOverflow;
  /// After a refit past kMaxSearchOverflow, the builds before a refit is tried again.
  static constexpr std::uint32_t kReprobeBuilds = 8;

  /// True when the index describes `buffer` as it is now (same epoch, arrays and slot count).
  bool current(const DeviceBuffer& buffer) const noexcept {
    return built_ && epoch_ == buffer.epoch && vectors_ == buffer.vectors.get() && slots_ == buffer.slot_count;
  }
  /// True when the index is current and worth searching: not a refit whose figures, once read,
  /// put more than kMaxSearchOverflow points in the overflow (the scans, or a build, are faster).
  bool usable(const DeviceBuffer& buffer) {
    if (!current(buffer)) return false;
    read_stats();
    return stats_pending_ || searchable(last_stats_);
  }
  /// True when refit() can bring a stale index up to date and keep it fast: built on the same
  /// arrays, at most kMaxOverflow inserts since the build, fewer vector writes since the last
  /// build or refit than a quarter of the tree (a store moved wholesale is sorted again), and
  /// the last refit's figures (read once the device has written them) within the limits above,
  /// and no refit past kMaxSearchOverflow in the last kReprobeBuilds builds (the store's points
  /// jump too far and too many at a time for a refit to follow).
  bool refittable(const DeviceBuffer& buffer);
  /// Rebuilds the index from `buffer` (of StoreView::chunk_floats `width`: 2, or 4 for points on
  /// the unit sphere) on `stream`, ordered after the buffer's writes by the caller. Growing its
  /// arrays first waits for the stream (searches may still read them). Throws OutOfMemory with
  /// the index marked stale. `mapped`: the device can write host memory (else no refits).
  void build(const DeviceBuffer& buffer, int width, cudaStream_t stream, int sms, bool mapped);
  /// Brings the index up to date with `buffer` without sorting (where refittable()).
  void refit(const DeviceBuffer& buffer, int width, cudaStream_t stream, int sms);
  /// True when a build's first refit left the index past the limits above (a store whose points
  /// jump: refits cannot follow it), until a refit stays within them; builds leave it as it is.
  bool refit_failed() noexcept {
    read_stats();
    return refit_failed_;
  }
  /// True from a refit past kMaxSearchOverflow (read once the device has written its figures)
  /// until kReprobeBuilds builds later: the store's points jump, and only builds keep up.
  bool refit_overflowed() noexcept {
    read_stats();
    return reprobe_builds_left_ > 0;
  }
  /// The device copy of the index's view (a fixed address: graphs may hold it).
  const SpatialView* view() const noexcept { return view_.get(); }

 private:
  void launch(const DeviceBuffer& buffer, int width, bool refit, cudaStream_t stream, int sms);
  void read_stats();
  static bool within_limits(const SpatialStats& stats);
  static bool searchable(const SpatialStats& stats) noexcept { return stats.overflow <= kMaxSearchOverflow; }

  DeviceArray<std::uint32_t> scratch_, keys_, order_, slots_sorted_, overflow_slots_;  // keys_: unsorted, then sorted
  DeviceArray<float> points_, boxes_, built_boxes_, overflow_points_;
  DeviceArray<unsigned char> temp_;
  DeviceArray<SpatialView> view_;
  PinnedArray<SpatialStats> stats_;  // mapped: written by each build's or refit's last kernel
  Event stats_written_;
  bool stats_pending_ = false, pending_refit_ = false, pending_first_refit_ = false, refit_failed_ = false;
  std::uint32_t refits_since_build_ = 0;
  std::uint32_t reprobe_builds_left_ = 0;  // > 0: a refit went past kMaxSearchOverflow; builds until one is tried again
  SpatialStats last_stats_{};
  bool built_ = false;
  std::uint64_t epoch_ = 0;
  const void* vectors_ = nullptr;
  std::uint32_t slots_ = 0, tree_slots_ = 0, capacity_ = 0;
  std::uint64_t inserts_at_build_ = 0, vector_writes_at_update_ = 0;
};

}  // namespace streamknn::detail::gpu
