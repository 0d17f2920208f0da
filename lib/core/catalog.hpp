// The host-side catalogue of a reference set: id -> slot, free slots (lowest reused first, so
// the scanned range stays compact), and the resolution of drained updates into a ResolvedBatch
// plus a PublishReport. Used by one publisher at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/free_slots.hpp"
#include "core/id_index.hpp"
#include "core/resolved_batch.hpp"
#include "core/thread_pool.hpp"
#include "core/update_queue.hpp"
#include "streamknn/config.hpp"
#include "streamknn/publish_report.hpp"

namespace streamknn::detail {

/// Updates a publish must drain before it resolves them on the publish pool (and moves and target
/// changes only): below that, starting the pool's threads costs more than they save.
inline constexpr std::size_t kParallelPublishMin = 8192;

class Catalog {
 public:
  explicit Catalog(const StoreConfig& config);

  /// What a drained batch asks of the catalogue, from one pass over it.
  struct BatchShape {
    std::size_t ops = 0;
    std::size_t slots = 0;    ///< slots the buffers must hold (an upper bound: every insert may need a new one)
    bool moves_only = false;  ///< moves and target changes only: no id, slot or attribute changes
    bool erases = false;      ///< some op is an erase
  };
  BatchShape shape_of(std::span<const QueuedOp> ops) const noexcept;
  /// Makes room in the host structures for a batch of that shape, so that resolve() cannot fail
  /// half-way. Starts the publish pool at the first batch it would serve.
  void reserve_for(const BatchShape& shape);
  /// Applies ops (of that shape) in order to the catalogue, filling batch (cleared first) and
  /// report. A large batch of moves and target changes only is resolved on the publish pool: the
  /// same report and the same writes per channel, listed in another order.
  void resolve(std::span<const QueuedOp> ops, const BatchShape& shape, const UpdateQueue& queue, ResolvedBatch& batch,
               PublishReport& report);

  /// Takes a checkpoint's state: slot_ids[s] is slot s's id (kInvalidId: free), slot_ids.size()
  /// the high-water mark (its top slot in use), index those ids' slots. `every_slot_live`: no
  /// slot is free (the caller has looked), so there is none to list.
  void restore(std::span<const PointId> slot_ids, IdIndex&& index, bool every_slot_live);
  std::optional<std::uint32_t> slot_of(PointId id) const noexcept { return ids_.find(id); }
  /// Calls f(id, slot) for every point, in no particular order.
  template <class F>
  void for_each_point(F&& f) const {
    ids_.for_each(f);
  }

  std::size_t size() const noexcept { return ids_.size(); }
  std::uint32_t slot_count() const noexcept { return high_water_; }

 private:

  void resolve_in_order(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch,
                        PublishReport& report);
  /// Whether a batch of that shape is resolved on the publish pool.
  bool on_pool(const BatchShape& shape) const noexcept {
    return shape.moves_only && shape.ops >= kParallelPublishMin && publish_threads_ > 1;
  }
  /// The batch must be moves and target changes only (BatchShape::moves_only).
  void resolve_on_pool(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch,
                       PublishReport& report);
  // resolve_on_pool's steps, in the order it takes them:
  /// 1. Writes each op's slot and channel to op_writes_ (kUnknownOp: no such id), tallies chunk
  /// c's ops, and counts its writes per part of the slot range in chunk_part_counts_.
  void look_up_slots(std::span<const QueuedOp> ops);
  /// 2. Lists the writing ops of the n in by_part_, part by part, each part's in queue order (a
  /// counting sort); tallies_[p].first_op, end_op: part p's range.
  void sort_writes_by_part(std::size_t n);
  /// 3. Stamps, per channel, each slot written with its entry's position in its part and the
  /// last op that writes it (ChannelMark::src).
  void mark_last_writes(std::uint64_t stamp);
  /// 4. Writes the last write of each slot to its entry in batch, part p's entries after those
  /// of the parts before it.
  void write_part_entries(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch);
  /// Gives each part its first entry in each channel, and batch's channels their sizes.
  void place_part_entries(ResolvedBatch& batch);
  /// Adds the tallies and the unknown ids to report, then finishes: the only step that changes it.
  void report_pool_batch(std::span<const QueuedOp> ops, ResolvedBatch& batch, PublishReport& report);
  /// Calls visit(op index, slot, whether a target write) for part p's writes, in by_part_ order.
  template <class Visit>
  void for_each_write(std::size_t p, Visit&& visit) const;
  void finish(std::size_t drained, ResolvedBatch& batch, PublishReport& report) const noexcept;

  StoreConfig config_;
  std::size_t stored_dim_;
  std::size_t value_count_;
  std::size_t attribute_words_;
  IdIndex ids_;
  FreeSlots free_;                 ///< free slots below high_water_
  std::uint32_t high_water_ = 0;
  // Position of a slot's write in each batch channel, valid when stamp == current batch (one
  // cache line per slot and channel: a publish of random moves misses on every one).
  // `src` is the op that wrote it last (used by resolve_on_pool only).
  struct ChannelMark {
    std::uint64_t stamp = 0;
    std::uint32_t pos = 0;
    std::uint32_t src = 0;
  };
  std::vector<ChannelMark> vector_marks_, target_marks_, id_marks_, attribute_marks_;
  std::uint64_t batch_stamp_ = 0;

  std::size_t publish_threads_;          ///< threads of the pool, the publisher's included
  std::unique_ptr<ThreadPool> pool_;     ///< started by the first large batch (reserve_for)
  // resolve_on_pool's scratch. It cuts the batch into chunks and the slot range into parts,
  // as many of each as the pool has threads.
  std::vector<std::uint64_t> op_writes_;  ///< each op's slot and channel
  std::vector<std::uint32_t> by_part_;    ///< the writing ops, part by part
  std::vector<std::size_t> chunk_part_counts_;  ///< [chunk][part]: writes, then by_part_ offsets
  /// Stride of chunk_part_counts_: rows 64 bytes apart or more, so no two chunks' threads
  /// write one cache line.
  std::size_t counts_row() const noexcept { return (tallies_.size() + 7) / 8 * 8 + 8; }
  struct alignas(64) Tally {  // one per thread's cache line(s)
    std::size_t moved = 0, retargeted = 0, unknown = 0;        // of chunk c
    std::size_t first_op = 0, end_op = 0;                      // part p's range of by_part_
    std::size_t vectors = 0, targets = 0, vector_base = 0, target_base = 0;  // part p's entries
  };
  std::vector<Tally> tallies_;  ///< [chunk or part]
};

}  // namespace streamknn::detail
