// Free slots below a store's high-water mark. The lowest free slot is reused first, so the
// scanned range stays compact, and the mark shrinks past free slots at the top. After
// reserve(), no operation allocates: a publish resolves its batch without a way to fail.
// (A min-heap with lazy deletion; a bitmap says which slots are really free.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace streamknn::detail {

class FreeSlots {
 public:
  /// Makes room for slots [0, slots).
  void reserve(std::size_t slots) {
    if (is_free_.size() < slots) is_free_.resize(slots, 0);
    if (heap_.capacity() < 2 * slots + 64) heap_.reserve(2 * slots + 64);
  }

  /// A slot for an insert: the lowest free one below high_water, else high_water++.
  std::uint32_t allocate(std::uint32_t& high_water) {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
      const std::uint32_t slot = heap_.back();
      heap_.pop_back();
      if (slot < high_water && is_free_[slot]) {  // else a stale entry: the slot was reused or cut off
        is_free_[slot] = 0;
        return slot;
      }
    }
    return high_water++;
  }

  /// Returns a slot; freeing the top slot lowers high_water past every free slot below it.
  void release(std::uint32_t slot, std::uint32_t& high_water) {
    if (slot + 1 == high_water) {
      --high_water;
      while (high_water > 0 && is_free_[high_water - 1]) {
        is_free_[high_water - 1] = 0;  // its heap entry, if any, is now stale
        --high_water;
      }
      return;
    }
    is_free_[slot] = 1;
    if (heap_.size() == heap_.capacity()) drop_stale_entries();
    heap_.push_back(slot);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
  }

 private:
  /// Rebuilds the heap from the bitmap (each free slot once); it fits in the reserved room.
  void drop_stale_entries() {
    heap_.clear();
    for (std::size_t s = 0; s < is_free_.size(); ++s) {
      if (is_free_[s]) heap_.push_back(static_cast<std::uint32_t>(s));
    }
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>{});
  }

  std::vector<std::uint32_t> heap_;
  std::vector<std::uint8_t> is_free_;
};

}  // namespace streamknn::detail
