// The host-side catalogue of a reference set: id -> slot, free slots (lowest reused first, so
// the scanned range stays compact), and the resolution of drained updates into a ResolvedBatch
// plus a PublishReport. Used by one publisher at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/free_slots.hpp"
#include "core/id_index.hpp"
#include "core/resolved_batch.hpp"
#include "core/update_queue.hpp"
#include "streamknn/config.hpp"
#include "streamknn/publish_report.hpp"

namespace streamknn::detail {

class Catalog {
 public:
  explicit Catalog(const StoreConfig& config);

  /// Slots the buffers must hold to apply ops (an upper bound: every insert may need a new slot).
  std::size_t slots_needed(std::span<const QueuedOp> ops) const noexcept;
  /// Makes room in the host structures for `slots` (slots_needed of the batch) so that resolve()
  /// cannot fail half-way.
  void reserve_for(std::size_t slots);
  /// Applies ops in order to the catalogue, filling batch (cleared first) and report.
  void resolve(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch,
               PublishReport& report);

  std::size_t size() const noexcept { return ids_.size(); }
  std::uint32_t slot_count() const noexcept { return high_water_; }

 private:

  StoreConfig config_;
  std::size_t stored_dim_;
  std::size_t value_count_;
  IdIndex ids_;
  FreeSlots free_;                 ///< free slots below high_water_
  std::uint32_t high_water_ = 0;
  // Position of a slot's write in each batch channel, valid when stamp == current batch (one
  // cache line per slot and channel: a publish of random moves misses on every one).
  struct ChannelMark {
    std::uint64_t stamp = 0;
    std::uint32_t pos = 0;
  };
  std::vector<ChannelMark> vector_marks_, target_marks_, id_marks_;
  std::uint64_t batch_stamp_ = 0;
};

}  // namespace streamknn::detail
