#include "core/update_queue.hpp"

#include <algorithm>
#include <new>

#include "core/check.hpp"
#include "core/memory.hpp"

namespace streamknn::detail {

// A function-try-block: the pool and the two queues allocate everything up front, and a
// configuration whose queue cannot be allocated is refused with OutOfMemory naming it.
namespace {

std::size_t checked_pool_floats(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats) {
  const double bytes = double(capacity) * double(vector_floats + value_floats) * sizeof(float);
  refuse_beyond_memory(bytes, "ReferenceSet(StoreConfig): the update queue (queue_capacity=", capacity, " updates of ",
                       vector_floats + value_floats, " floats)");
  return capacity * (vector_floats + value_floats);
}

}  // namespace

UpdateQueue::UpdateQueue(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats) try
    : capacity_(capacity),
      vector_floats_(vector_floats),
      value_floats_(value_floats),
      slot_floats_(vector_floats + value_floats),
      pool_(checked_pool_floats(capacity, vector_floats, value_floats)),
      records_(capacity + 1),   // +1: the queue keeps one dummy node
      free_slots_(capacity + 1) {
  for (std::size_t slot = 0; slot < capacity; ++slot) {
    if (!free_slots_.bounded_push(static_cast<std::uint32_t>(slot))) {
      throw OutOfMemory(concat("UpdateQueue: could not reserve ", capacity, " queue slots"));
    }
  }
} catch (const std::bad_alloc&) {
  throw OutOfMemory(concat("ReferenceSet(StoreConfig): out of memory allocating the update queue: queue_capacity=",
                           capacity, " updates of ", vector_floats + value_floats, " floats (",
                           capacity * (vector_floats + value_floats) * sizeof(float), " bytes)"));
}

bool UpdateQueue::try_push(const Update& update) noexcept {
  std::uint32_t slot = 0;
  if (!free_slots_.pop(slot)) return false;
  float* payload = pool_.data() + std::size_t(slot) * slot_floats_;
  if (!update.vector.empty()) std::copy(update.vector.begin(), update.vector.end(), payload);
  if (!update.values.empty()) std::copy(update.values.begin(), update.values.end(), payload + vector_floats_);
  const QueuedOp record{update.id, slot, update.label, update.kind, update.has_target};
  // Cannot fail: records never outnumber pool slots, and the record queue has a node per slot.
  records_.bounded_push(record);
  queued_.fetch_add(1, std::memory_order_release);
  return true;
}

void UpdateQueue::push(const Update& update) {
  for (;;) {
    const std::uint64_t seen = releases_.load(std::memory_order_acquire);
    if (try_push(update)) return;
    releases_.wait(seen, std::memory_order_acquire);  // until a publish frees slots
  }
}

std::size_t UpdateQueue::drain(std::size_t max, std::vector<QueuedOp>& out) {
  std::size_t taken = 0;
  QueuedOp record{};
  while (taken < max && records_.pop(record)) {
    out.push_back(record);
    ++taken;
  }
  queued_.fetch_sub(static_cast<std::ptrdiff_t>(taken), std::memory_order_relaxed);
  return taken;
}

void UpdateQueue::release(std::span<const QueuedOp> ops) {
  if (ops.empty()) return;
  for (const QueuedOp& op : ops) free_slots_.bounded_push(op.payload);
  releases_.fetch_add(1, std::memory_order_release);
  releases_.notify_all();
}

}  // namespace streamknn::detail
