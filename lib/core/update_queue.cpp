#include "core/update_queue.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <new>
#include <thread>

#include "core/check.hpp"
#include "core/memory.hpp"
#include "core/metric_space.hpp"

namespace streamknn::detail {

// A function-try-block: the pool and the ring are allocated up front, and a configuration whose
// queue cannot be allocated is refused with OutOfMemory naming it.
namespace {

std::size_t queue_bytes(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats,
                        std::size_t cell_bytes) {
  return capacity * ((vector_floats + value_floats) * sizeof(float) + cell_bytes);
}

std::size_t checked_pool_floats(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats,
                                std::size_t cell_bytes) {
  if (capacity < 1 || capacity > (std::size_t(1) << 32)) {
    fail_argument("UpdateQueue: capacity=", capacity, " is not in [1, 2^32]");
  }
  const double bytes = double(capacity) * (double(vector_floats + value_floats) * sizeof(float) + double(cell_bytes));
  refuse_beyond_memory(bytes, "ReferenceSet(StoreConfig): the update queue (queue_capacity=", capacity, " updates of ",
                       vector_floats + value_floats, " floats)");
  return capacity * (vector_floats + value_floats);
}

/// One step of a short busy wait.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

}  // namespace

UpdateQueue::UpdateQueue(std::size_t capacity, std::size_t vector_floats, std::size_t value_floats, Metric metric,
                         std::vector<double> origin, std::size_t attribute_words) try
    : capacity_(capacity),
      metric_(metric),
      origin_(std::move(origin)),
      vector_floats_(vector_floats),
      value_floats_(value_floats),
      attribute_words_(attribute_words),
      slot_floats_(vector_floats + value_floats + attribute_words),
      lap_(std::bit_ceil(std::uint64_t(capacity) + 1)),
      index_mask_(lap_ - 1),
      lap_shift_(unsigned(std::countr_zero(lap_))),
      pool_(checked_pool_floats(capacity, vector_floats, value_floats + attribute_words, sizeof(Cell))),
      cells_(new Cell[capacity]()) {
  // Cell i is free for the push at position i (lap 0).
  for (std::size_t i = 0; i < capacity; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
} catch (const std::bad_alloc&) {
  throw OutOfMemory(concat("ReferenceSet(StoreConfig): out of memory allocating the update queue: queue_capacity=",
                           capacity, " updates of ", vector_floats + value_floats, " floats (",
                           queue_bytes(capacity, vector_floats, value_floats, sizeof(Cell)), " bytes)"));
}

bool UpdateQueue::try_push(const Update& update) noexcept {
  std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = cells_[pos & index_mask_];
    // Acquire: pairs with release(), so the publisher's reads of this cell's payload are done.
    const std::uint64_t sequence = cell.sequence.load(std::memory_order_acquire);
    const auto diff = static_cast<std::int64_t>(sequence - pos);
    if (diff == 0) {
      if (tail_.compare_exchange_weak(pos, next(pos), std::memory_order_relaxed, std::memory_order_relaxed)) break;
      // pos now holds the current tail: retry there.
    } else if (diff < 0) {
      // The cell still holds the update pushed `capacity` positions earlier (queued, or drained
      // and not released) or is still being given it. pos cannot be stale here (a claim of pos
      // would have needed this cell free), so `capacity` updates are queued: full.
      return false;
    } else {
      pos = tail_.load(std::memory_order_relaxed);  // another producer took pos
    }
  }
  fill(pos, update);
  return true;
}

void UpdateQueue::fill(std::uint64_t pos, const Update& update) noexcept {
  const auto index = static_cast<std::uint32_t>(pos & index_mask_);
  float* payload = pool_.data() + std::size_t(index) * slot_floats_;
  if (!update.vector64.empty() || !origin_.empty()) {
    // Minus the origin in double, rounded once (StoreConfig::origin); then the stored form, in
    // place (stored_dim >= dim, and to_stored_form reads each input before it writes there).
    const std::size_t n = update.vector64.empty() ? update.vector.size() : update.vector64.size();
    for (std::size_t i = 0; i < n; ++i) {
      const double x = update.vector64.empty() ? double(update.vector[i]) : update.vector64[i];
      payload[i] = static_cast<float>(origin_.empty() ? x : x - origin_[i]);
    }
    if (!stored_as_given(metric_)) to_stored_form(metric_, std::span<const float>(payload, n), payload);
  } else if (!update.vector.empty()) {
    to_stored_form(metric_, update.vector, payload);
  }
  if (!update.values.empty()) std::copy(update.values.begin(), update.values.end(), payload + vector_floats_);
  if (attribute_words_ > 0) {
    float* words = payload + vector_floats_ + value_floats_;
    if (update.attributes.size() == attribute_words_) {
      std::memcpy(words, update.attributes.data(), attribute_words_ * sizeof(std::uint32_t));
    } else {
      std::memset(words, 0, attribute_words_ * sizeof(std::uint32_t));  // an insert without attributes
    }
  }
  Cell& cell = cells_[index];
  cell.record = QueuedOp{update.id, index, update.label, update.kind, update.has_target};
  cell.sequence.store(pos + 1, std::memory_order_release);  // publishes payload and record
}

std::size_t UpdateQueue::try_push(std::span<const Update> updates) noexcept {
  if (updates.empty()) return 0;
  std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  std::size_t m = 0;
  for (;;) {
    // A run of free cells from pos: cells are released in position order, so when the run's
    // last cell is free (for this lap) every cell before it is too. Halve until one is.
    m = std::min(updates.size(), capacity_);
    while (m > 0) {
      const std::uint64_t last = advance(pos, m - 1);
      // Acquire: pairs with release() of that cell and, through the publisher's program order,
      // of every cell released before it.
      if (cells_[last & index_mask_].sequence.load(std::memory_order_acquire) == last) break;
      m /= 2;
    }
    if (m == 0) {
      const std::uint64_t now = tail_.load(std::memory_order_relaxed);
      if (now == pos) return 0;  // the cell at the tail still holds an update: full
      pos = now;                 // another producer claimed pos: retry at the new tail
      continue;
    }
    if (tail_.compare_exchange_weak(pos, advance(pos, m), std::memory_order_relaxed, std::memory_order_relaxed)) break;
  }
  for (std::size_t i = 0; i < m; ++i, pos = next(pos)) fill(pos, updates[i]);
  return m;
}

void UpdateQueue::push(std::span<const Update> updates) {
  while (!updates.empty()) {
    const std::uint64_t seen = releases_.load(std::memory_order_acquire);
    const std::size_t queued = try_push(updates);
    if (queued == 0) {
      releases_.wait(seen, std::memory_order_acquire);  // until a publish frees cells
      continue;
    }
    updates = updates.subspan(queued);
  }
}

void UpdateQueue::push(const Update& update) {
  for (;;) {
    const std::uint64_t seen = releases_.load(std::memory_order_acquire);
    if (try_push(update)) return;
    releases_.wait(seen, std::memory_order_acquire);  // until a publish frees cells
  }
}

std::size_t UpdateQueue::drain(std::size_t max, std::vector<QueuedOp>& out) {
  std::uint64_t head = head_.load(std::memory_order_relaxed);  // written by this (the only) consumer
  const std::uint64_t tail = tail_.load(std::memory_order_acquire);
  const std::size_t count = std::min<std::uint64_t>(max, ordinal(tail) - ordinal(head));
  if (count == 0) return 0;
  out.reserve(out.size() + count);  // the only step that can throw, before anything is taken
  for (std::size_t taken = 0; taken < count; ++taken) {
    const Cell& cell = cells_[head & index_mask_];
    // The cell was claimed before the tail was read; wait until its producer has filled it.
    for (unsigned spins = 0; cell.sequence.load(std::memory_order_acquire) != head + 1; ++spins) {
      if (spins < 128) {
        cpu_relax();
      } else {
        std::this_thread::yield();  // the producer was preempted between its claim and its store
      }
    }
    out.push_back(cell.record);
    head = next(head);
  }
  head_.store(head, std::memory_order_relaxed);
  return count;
}

void UpdateQueue::release(std::span<const QueuedOp> ops) {
  if (ops.empty()) return;
  assert(ops.size() <= ordinal(head_.load(std::memory_order_relaxed)) - ordinal(freed_));
  // The drained records are the oldest ones, in order: free their cells from freed_ on. Plain
  // stores; the release pairs with the acquire in try_push (the payloads have been read).
  std::uint64_t pos = freed_;
  for (const QueuedOp& op : ops) {
    assert(op.payload == (pos & index_mask_));
    (void)op;
    cells_[pos & index_mask_].sequence.store(pos + lap_, std::memory_order_release);
    pos = next(pos);
  }
  freed_ = pos;
  releases_.fetch_add(1, std::memory_order_release);
  releases_.notify_all();
}

}  // namespace streamknn::detail
