// id -> slot map: open addressing with linear probing and backward-shift deletion, so a lookup
// touches one or two cache lines and erasing leaves no tombstones behind. kInvalidId marks an
// empty bucket, which is why that id is reserved for callers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "streamknn/update.hpp"

namespace streamknn::detail {

class IdIndex {
 public:
  IdIndex() { rehash(16); }

  std::optional<std::uint32_t> find(PointId id) const noexcept {
    for (std::size_t b = bucket_of(id);; b = (b + 1) & mask_) {
      if (keys_[b] == id) return slots_[b];
      if (keys_[b] == kInvalidId) return std::nullopt;
    }
  }
  /// Inserts id -> slot; false if id is already present (nothing changed).
  bool insert(PointId id, std::uint32_t slot) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    std::size_t b = bucket_of(id);
    for (; keys_[b] != kInvalidId; b = (b + 1) & mask_) {
      if (keys_[b] == id) return false;
    }
    keys_[b] = id;
    slots_[b] = slot;
    ++size_;
    return true;
  }
  /// Removes id; returns its slot, or nullopt if absent.
  std::optional<std::uint32_t> erase(PointId id) noexcept {
    std::size_t b = bucket_of(id);
    for (; keys_[b] != id; b = (b + 1) & mask_) {
      if (keys_[b] == kInvalidId) return std::nullopt;
    }
    const std::uint32_t slot = slots_[b];
    // Backward shift: pull later members of the probe run into the hole.
    std::size_t hole = b;
    for (std::size_t next = (hole + 1) & mask_; keys_[next] != kInvalidId; next = (next + 1) & mask_) {
      const std::size_t home = bucket_of(keys_[next]);
      // Move next into the hole unless its home lies cyclically in (hole, next].
      const bool home_after_hole = ((next - home) & mask_) < ((next - hole) & mask_);
      if (!home_after_hole) {
        keys_[hole] = keys_[next];
        slots_[hole] = slots_[next];
        hole = next;
      }
    }
    keys_[hole] = kInvalidId;
    --size_;
    return slot;
  }
  /// Makes room for n ids without rehashing later (so a publish cannot fail half-way).
  void reserve(std::size_t n) {
    std::size_t buckets = keys_.size();
    while (n * 2 > buckets) buckets *= 2;
    if (buckets != keys_.size()) rehash(buckets);
  }
  std::size_t size() const noexcept { return size_; }

 private:
  std::size_t bucket_of(PointId id) const noexcept {
    std::uint64_t x = id;  // splitmix64 finaliser: consecutive ids spread over the table
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return static_cast<std::size_t>(x) & mask_;
  }
  void rehash(std::size_t buckets) {
    std::vector<PointId> old_keys(buckets, kInvalidId);
    std::vector<std::uint32_t> old_slots(buckets);
    old_keys.swap(keys_);
    old_slots.swap(slots_);
    mask_ = buckets - 1;
    for (std::size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] == kInvalidId) continue;
      std::size_t b = bucket_of(old_keys[i]);
      while (keys_[b] != kInvalidId) b = (b + 1) & mask_;
      keys_[b] = old_keys[i];
      slots_[b] = old_slots[i];
    }
  }

  std::vector<PointId> keys_;
  std::vector<std::uint32_t> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace streamknn::detail
