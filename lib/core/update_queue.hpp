// The bounded multi-producer update queue.
//
// Boost.Lockfree cannot hold vectors by value, so a queue element is a small trivially copyable
// record and each record's payload (vector + float target) lives in a pool of fixed-size slots
// allocated once from the dimension and the capacity. A push takes a free pool slot, writes the
// payload and enqueues the record: nothing is allocated and no lock is taken. The single
// consumer (publish) drains records, reads their payloads and then releases the pool slots.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <boost/lockfree/queue.hpp>

#include "streamknn/update.hpp"

namespace streamknn::detail {

struct QueuedOp {
  PointId id;
  std::uint32_t payload;  ///< pool slot holding the vector and float target
  std::int32_t label;
  UpdateKind kind;
  bool has_target;
};

class UpdateQueue {
 public:
  UpdateQueue(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats);
  UpdateQueue(const UpdateQueue&) = delete;
  UpdateQueue& operator=(const UpdateQueue&) = delete;

  /// Queues an already validated update; false when all pool slots are taken.
  bool try_push(const Update& update) noexcept;
  /// Queues an already validated update, waiting for release() to free a slot.
  void push(const Update& update);

  /// Consumer side (one thread at a time): pops at most max records in FIFO order.
  std::size_t drain(std::size_t max, std::vector<QueuedOp>& out);
  std::span<const float> vector_of(const QueuedOp& op) const noexcept {
    return {pool_.data() + std::size_t(op.payload) * slot_floats_, vector_floats_};
  }
  std::span<const float> values_of(const QueuedOp& op) const noexcept {
    return {pool_.data() + std::size_t(op.payload) * slot_floats_ + vector_floats_, value_floats_};
  }
  /// Returns the pool slots of drained records, waking producers blocked in push().
  void release(std::span<const QueuedOp> ops);

  std::size_t capacity() const noexcept { return capacity_; }
  /// Records queued and not yet drained (exact once producers are quiet).
  std::size_t queued() const noexcept {
    const auto n = queued_.load(std::memory_order_relaxed);  // may dip below 0 transiently
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

 private:
  std::size_t capacity_;
  std::size_t vector_floats_;
  std::size_t value_floats_;
  std::size_t slot_floats_;
  std::vector<float> pool_;
  boost::lockfree::queue<QueuedOp> records_;
  boost::lockfree::queue<std::uint32_t> free_slots_;
  std::atomic<std::ptrdiff_t> queued_{0};
  std::atomic<std::uint64_t> releases_{0};  ///< bumped on release(); push() waits on it
};

}  // namespace streamknn::detail
