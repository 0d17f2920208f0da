// The bounded multi-producer update queue: a ring of `capacity` cells with per-cell sequence
// numbers (D. Vyukov's bounded MPMC queue, used here with one consumer), the positions
// encoded as in crossbeam's ArrayQueue (lap * 2^k + index, 2^k > capacity) so that the ring
// holds exactly `capacity` cells without a modulo.
//
// Why a ring: it replaced two boost::lockfree::queue (records + free payload slots), about 11
// atomic read-modify-writes per update. Measured single-threaded (1M moves, dim 2), the Boost
// pair cost 19-20 ns per push, 14-24 ns per drained record and 13-15 ns per released one; the
// ring costs one CAS per push and no read-modify-write per drained or released record: about
// 5 ns per push (6-10 ns as an out-of-line call), 2-3 ns per drained and 1-1.5 ns per released
// record. Publish throughput (>= 10M moves/s) needs that.
//
// A cell holds a sequence number and a small trivially copyable record; the record's payload
// (vector then float target) lives in a pool of fixed-size slots allocated once, slot i
// belonging to cell i. A push claims the cell at the tail (one CAS on the tail), writes the
// payload and the record and publishes them by storing the cell's sequence (release). Nothing
// is allocated and no lock is taken. The single consumer (publish) drains records in order,
// reads their payloads and then releases the cells, which is what frees space: at most
// `capacity` updates are queued or drained-and-not-released at a time.
//
// Progress: producers never block inside the library (try_push; push waits only for a release
// when the queue is full) and never wait for each other beyond a retry of the tail CAS. The
// publisher may wait for a producer that has claimed a cell before the publish began and not
// yet filled it: a few instructions, unless that thread is preempted in between. This wait is
// what guarantees that every update whose push returned before publish() began is drained by
// it, in order, with nothing skipped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "streamknn/metric.hpp"
#include "streamknn/update.hpp"

namespace streamknn::detail {

struct QueuedOp {
  PointId id;
  std::uint32_t payload;  ///< pool slot holding the vector and float target (the cell's index)
  std::int32_t label;
  UpdateKind kind;
  bool has_target;
};

class UpdateQueue {
 public:
  /// vector_floats: floats of a vector's stored form (stored_dim(metric, dim)); a push writes a
  /// vector's stored form (to_stored_form) into its cell, so the conversion (sin/cos for
  /// Haversine, a norm for Cosine) runs on the producers' threads, not in publish().
  /// origin: subtracted in double from every vector before it is rounded (StoreConfig::origin).
  /// attribute_words: StoreConfig::attribute_words; each cell's payload holds them after the
  /// target (zeros where an insert gives none).
  UpdateQueue(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats, Metric metric = Metric::L2,
              std::vector<double> origin = {}, std::size_t attribute_words = 0);
  UpdateQueue(const UpdateQueue&) = delete;
  UpdateQueue& operator=(const UpdateQueue&) = delete;

  /// Queues an already validated update; false when `capacity` updates are queued or drained
  /// and not yet released.
  bool try_push(const Update& update) noexcept;
  /// Queues an already validated update, waiting for release() to free a cell.
  void push(const Update& update);
  /// Queues a prefix of already validated updates in one run of contiguous cells claimed with
  /// one CAS (at least one update whenever a cell is free, possibly fewer than would fit);
  /// returns how many were queued.
  std::size_t try_push(std::span<const Update> updates) noexcept;
  /// Queues all of them in order, waiting for release() whenever the queue is full.
  void push(std::span<const Update> updates);

  /// Consumer side (one thread at a time): appends to out, in FIFO order, at most max of the
  /// records whose cells were claimed when it began, waiting for any of them still being written.
  std::size_t drain(std::size_t max, std::vector<QueuedOp>& out);
  std::span<const float> vector_of(const QueuedOp& op) const noexcept {
    return {pool_.data() + std::size_t(op.payload) * slot_floats_, vector_floats_};
  }
  std::span<const float> values_of(const QueuedOp& op) const noexcept {
    return {pool_.data() + std::size_t(op.payload) * slot_floats_ + vector_floats_, value_floats_};
  }
  /// Copies the op's attribute words (StoreConfig::attribute_words of them) to out.
  void copy_attributes(const QueuedOp& op, std::uint32_t* out) const noexcept {
    if (attribute_words_ == 0) return;
    std::memcpy(out, pool_.data() + std::size_t(op.payload) * slot_floats_ + vector_floats_ + value_floats_,
                attribute_words_ * sizeof(std::uint32_t));
  }
  /// Frees the cells of drained records, waking producers blocked in push(). ops must be the
  /// oldest drained records not yet released, in drain order (several drains may precede one
  /// release: publish keeps its drained records across an OutOfMemory and drains again).
  void release(std::span<const QueuedOp> ops);

  std::size_t capacity() const noexcept { return capacity_; }
  /// Records queued and not yet drained (exact once producers are quiet).
  std::size_t queued() const noexcept {
    const std::uint64_t head = ordinal(head_.load(std::memory_order_relaxed));
    const std::uint64_t tail = ordinal(tail_.load(std::memory_order_relaxed));
    return tail > head ? static_cast<std::size_t>(tail - head) : 0;
  }

 private:
  struct Cell {
    /// pos: free for the push at pos; pos + 1: filled by it; pos + lap_: released (free again).
    std::atomic<std::uint64_t> sequence;
    QueuedOp record;
  };
  static constexpr std::size_t kCacheLine = 64;

  /// A position is lap * lap_ + index (index < capacity_); next() steps over the unused indices.
  std::uint64_t next(std::uint64_t pos) const noexcept {
    return (pos & index_mask_) + 1 < capacity_ ? pos + 1 : (pos & ~index_mask_) + lap_;
  }
  /// Pushes before pos.
  std::uint64_t ordinal(std::uint64_t pos) const noexcept {
    return (pos >> lap_shift_) * capacity_ + (pos & index_mask_);
  }
  /// The position `steps` pushes after pos.
  std::uint64_t advance(std::uint64_t pos, std::uint64_t steps) const noexcept {
    const std::uint64_t o = ordinal(pos) + steps;
    return ((o / capacity_) << lap_shift_) + o % capacity_;
  }
  /// Writes a claimed cell and publishes it.
  void fill(std::uint64_t pos, const Update& update) noexcept;

  std::size_t capacity_;
  Metric metric_;
  std::vector<double> origin_;
  std::size_t vector_floats_;
  std::size_t value_floats_;
  std::size_t attribute_words_;  ///< held in the payload as raw 32-bit words (memcpy, not as floats)
  std::size_t slot_floats_;
  std::uint64_t lap_;         ///< smallest power of two above capacity_
  std::uint64_t index_mask_;  ///< lap_ - 1
  unsigned lap_shift_;        ///< log2(lap_)
  std::vector<float> pool_;
  std::unique_ptr<Cell[]> cells_;

  alignas(kCacheLine) std::atomic<std::uint64_t> tail_{0};  ///< producers: next position to claim
  // Consumer side, on its own cache line: written by the publisher only.
  alignas(kCacheLine) std::atomic<std::uint64_t> head_{0};  ///< next position to drain (atomic for queued())
  std::uint64_t freed_ = 0;                                  ///< next position to release
  std::atomic<std::uint64_t> releases_{0};                   ///< bumped on release(); push() waits on it
  // alignas rounds sizeof up to a whole line: whatever follows the queue is on another line.
};

}  // namespace streamknn::detail
