// When a batch takes the spatial index (StoreConfig::spatial_index): the CUDA backend's schedule
// of builds and refits, with the query counts it keeps per store buffer.
#pragma once

#include <cstdint>

#include "cuda/device_store.hpp"
#include "cuda/spatial_tree.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail::gpu {

/// Decides, batch by batch, whether a search over a buffer takes its spatial index, counting
/// the queries that decision rests on. Not thread-safe: the backend calls it under its mutex.
class SpatialSchedule {
 public:
  /// `covered`: the store is one the index covers (at most two stored elements under L2 ranks,
  /// or points on the unit sphere).
  SpatialSchedule(streamknn::SpatialIndex mode, bool covered) noexcept : mode_(mode), covered_(covered) {}

  /// Whether a batch of `queries` whose lists hold `k` entries (the screen's width; with id
  /// ranges where `filtered`) over `buffer` (number `b`, whose index is `index`) takes the index,
  /// and counts the batch where the answer rests on the counts (Auto, stale index). See spatial_schedule.cpp for the rule.
  bool wants(int b, const DeviceBuffer& buffer, SpatialTree& index, std::uint32_t queries, std::uint32_t k,
             bool filtered);
  /// The index of buffer `b` has been brought up to date: no queries wait on the scans.
  void note_ready(int b) noexcept { counts_[b].waiting = 0; }

 private:
  /// Queries searched without the index since it was last built or refit, and searched over the
  /// buffer in its current epoch and in the one before.
  struct Counts {
    std::uint64_t waiting = 0, this_epoch = 0, last_epoch = 0;
    std::uint64_t epoch = ~std::uint64_t(0);  // the epoch this_epoch counts
  };
  /// Counts a batch of `queries` over `buffer` (a new epoch moves this_epoch to last_epoch).
  Counts& count(int b, const DeviceBuffer& buffer, std::uint32_t queries);
  streamknn::SpatialIndex mode_;
  bool covered_;
  Counts counts_[2];  // one per store buffer
};

}  // namespace streamknn::detail::gpu
