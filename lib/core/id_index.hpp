// id -> slot map: open addressing with linear probing and backward-shift deletion, so a lookup
// touches one or two cache lines (key and slot share a bucket) and erasing leaves no tombstones
// behind. kInvalidId marks an empty bucket, which is why that id is reserved for callers.
// A publish resolves up to millions of ids whose buckets are cache misses: prefetch() lets it
// request a bucket several operations ahead.
// An index made by dense_prefix(n) holds ids 0..n-1 at slot = id without a table (what a load
// of ids 0..n-1, as the scikit-learn estimators give, needs: building the table cost more than
// copying the vectors); the first insert or erase builds the table, so every answer stays the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "streamknn/update.hpp"

namespace streamknn::detail {

class IdIndex {
 public:
  IdIndex() { rehash(16); }
  /// Ids 0..n-1 at slots 0..n-1, without a table (n < 2^32).
  static IdIndex dense_prefix(std::size_t n) { return IdIndex(n); }
  /// Whether ids are exactly 0, 1, ..., ids.size() - 1 in that order.
  static bool is_dense_prefix(std::span<const PointId> ids) noexcept {
    if (!ids.empty() && (ids.front() != 0 || ids.back() != ids.size() - 1)) return false;  // most other ids
    PointId mismatch = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) mismatch |= ids[i] ^ PointId(i);  // no branch: vectorises
    return mismatch == 0;
  }
  bool dense() const noexcept { return dense_; }
  /// Builds the table of a dense index (no effect otherwise; may throw std::bad_alloc). insert,
  /// erase and reserve call it where they change a dense index; a publish calls it before its
  /// first change, so that it cannot fail half-way.
  void materialize() {
    if (!dense_) return;
    IdIndex table;
    table.reserve(size_);
    for (std::size_t id = 0; id < size_; ++id) table.insert(id, static_cast<std::uint32_t>(id));
    *this = std::move(table);
  }

  std::optional<std::uint32_t> find(PointId id) const noexcept {
    if (dense_) return id < size_ ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(id)) : std::nullopt;
    for (std::size_t b = bucket_of(id);; b = (b + 1) & mask_) {
      if (buckets_[b].key == id) return buckets_[b].slot;
      if (buckets_[b].key == kInvalidId) return std::nullopt;
    }
  }
  /// Starts loading id's bucket into the cache (a hint; no effect on the contents).
  /// No branch: a dense index has no buckets and mask_ 0, so it prefetches data() + 0, which
  /// cannot fault. (Behind a test of dense_, GCC 14 at -O2/-O3 dropped the prefetch from the
  /// publish loop, and a publish of 1,000 random moves took 2.3x as long.)
  void prefetch(PointId id) const noexcept { __builtin_prefetch(buckets_.data() + bucket_of(id)); }
  /// Inserts id -> slot; false if id is already present (nothing changed). A dense index builds
  /// its table first (materialize).
  bool insert(PointId id, std::uint32_t slot) {
    if (dense_ && id < size_) return false;
    materialize();
    if ((size_ + 1) * 2 > buckets_.size()) rehash(buckets_.size() * 2);
    std::size_t b = bucket_of(id);
    for (; buckets_[b].key != kInvalidId; b = (b + 1) & mask_) {
      if (buckets_[b].key == id) return false;
    }
    buckets_[b] = Bucket{id, slot};
    ++size_;
    return true;
  }
  /// Calls f(id, slot) for every member, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    if (dense_) {
      for (std::size_t id = 0; id < size_; ++id) f(PointId(id), static_cast<std::uint32_t>(id));
      return;
    }
    for (const Bucket& b : buckets_) {
      if (b.key != kInvalidId) f(b.key, b.slot);
    }
  }

  /// Removes id; returns its slot, or nullopt if absent. A dense index builds its table first
  /// where id is present (materialize: it may throw std::bad_alloc).
  std::optional<std::uint32_t> erase(PointId id) {
    if (dense_) {
      if (id >= size_) return std::nullopt;
      materialize();
    }
    std::size_t b = bucket_of(id);
    for (; buckets_[b].key != id; b = (b + 1) & mask_) {
      if (buckets_[b].key == kInvalidId) return std::nullopt;
    }
    const std::uint32_t slot = buckets_[b].slot;
    // Backward shift: pull later members of the probe run into the hole.
    std::size_t hole = b;
    for (std::size_t next = (hole + 1) & mask_; buckets_[next].key != kInvalidId; next = (next + 1) & mask_) {
      const std::size_t home = bucket_of(buckets_[next].key);
      // Move next into the hole unless its home lies cyclically in (hole, next].
      const bool home_after_hole = ((next - home) & mask_) < ((next - hole) & mask_);
      if (!home_after_hole) {
        buckets_[hole] = buckets_[next];
        hole = next;
      }
    }
    buckets_[hole].key = kInvalidId;
    --size_;
    return slot;
  }
  /// Makes room for n ids without rehashing later (so a publish cannot fail half-way).
  /// A dense index builds its table where n exceeds its size (an insert would need it).
  void reserve(std::size_t n) {
    if (dense_) {
      if (n <= size_) return;
      materialize();
    }
    std::size_t buckets = buckets_.size();
    while (n * 2 > buckets) buckets *= 2;
    if (buckets != buckets_.size()) rehash(buckets);
  }
  std::size_t size() const noexcept { return size_; }

 private:
  explicit IdIndex(std::size_t dense_size) : size_(dense_size), dense_(true) {}

  std::size_t bucket_of(PointId id) const noexcept {
    std::uint64_t x = id;  // splitmix64 finaliser: consecutive ids spread over the table
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return static_cast<std::size_t>(x) & mask_;
  }
  struct Bucket {
    PointId key = kInvalidId;
    std::uint32_t slot = 0;
  };

  void rehash(std::size_t buckets) {
    std::vector<Bucket> old(buckets);
    old.swap(buckets_);
    mask_ = buckets - 1;
    for (const Bucket& entry : old) {
      if (entry.key == kInvalidId) continue;
      std::size_t b = bucket_of(entry.key);
      while (buckets_[b].key != kInvalidId) b = (b + 1) & mask_;
      buckets_[b] = entry;
    }
  }

  std::vector<Bucket> buckets_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
  bool dense_ = false;  ///< ids 0..size_-1 at slot = id; buckets_ empty
};

}  // namespace streamknn::detail
