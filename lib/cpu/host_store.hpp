// One host copy of the reference buffers: vectors in stored form, ids (kInvalidId = free slot),
// and targets. Above 4 stored dimensions the vectors are rows padded to a multiple of 8 floats
// (every row starts 32-byte aligned and every pair of rows is reduced in the same order); up to
// 4 they are columns, one per dimension over every slot, so that 8 points are one vector load
// per dimension with no per-search transpose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/resolved_batch.hpp"
#include "core/store_vector.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail {

template <class T, std::size_t Alignment = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, Alignment>&) noexcept {}
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, Alignment>;
  };
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(Alignment))); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(Alignment)); }
  friend bool operator==(const AlignedAllocator&, const AlignedAllocator&) noexcept { return true; }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

// StoreVector (the store's vectors: 64-byte aligned, built uninitialised): core/store_vector.hpp.

/// Stores of at most this many stored dimensions are held column by column.
constexpr std::size_t kMaxColumnDim = 4;

/// Row stride of the stored form: exact up to kMaxColumnDim dimensions (queries are rows of
/// that length), else rounded up to 8 floats (one AVX register).
inline std::size_t row_stride(std::size_t stored_dim) noexcept {
  return stored_dim <= kMaxColumnDim ? stored_dim : (stored_dim + 7) / 8 * 8;
}

class HostStore {
 public:
  HostStore(std::size_t stored_dim, TargetSpec target, std::size_t attribute_words = 0);

  /// Grows to hold `slots` slots (capacity stays a multiple of 8), keeping the contents.
  /// Throws std::bad_alloc.
  void reserve(std::size_t slots);
  /// Writes a batch; capacity must already hold batch.slot_count slots.
  void apply(const ResolvedBatch& batch);
  /// True when `batch` writes every slot 0..slot_count-1 in order, all of them live (a load).
  static bool fills_every_slot(const ResolvedBatch& batch, bool has_targets, bool has_attributes) noexcept;
  /// Replaces the contents with such a batch, taking its arrays: capacity slot_count rounded up
  /// to 8, each float written once (rows copied, padding and spare slots zeroed; no fill before
  /// the copy), instead of reserve()'s zero fill followed by apply()'s row-by-row writes.
  /// batch.rows (set only where cpu_rows_unpadded(stored_dim)) become the vectors as they are,
  /// taken from the batch: no copy. Throws std::bad_alloc, leaving the store as it was (the
  /// batch perhaps partly taken).
  void load(ResolvedBatch& batch);

  std::size_t slot_count() const noexcept { return slot_count_; }
  std::size_t capacity() const noexcept { return ids_.size(); }
  std::size_t stride() const noexcept { return stride_; }
  std::size_t stored_dim() const noexcept { return stored_dim_; }
  /// True when the vectors are held column by column (stored dimension <= kMaxColumnDim).
  bool by_column() const noexcept { return stored_dim_ <= kMaxColumnDim; }
  /// Slot's row (row layout only).
  const float* row(std::size_t slot) const noexcept { return vectors_.data() + slot * stride_; }
  /// Element d of every slot (column layout only): capacity() floats, 32-byte aligned, so a
  /// vector load at any multiple of 8 below slot_count() stays inside.
  const float* column(std::size_t d) const noexcept { return vectors_.data() + d * capacity(); }
  PointId id(std::size_t slot) const noexcept { return ids_[slot]; }
  const PointId* ids() const noexcept { return ids_.data(); }
  std::int32_t label(std::size_t slot) const noexcept { return labels_[slot]; }
  const float* values(std::size_t slot) const noexcept { return values_.data() + slot * value_count_; }
  /// The slot's attribute words (attribute_words() of them; StoreConfig::attribute_words).
  const std::uint32_t* attributes(std::size_t slot) const noexcept { return attributes_.data() + slot * attribute_words_; }
  std::size_t attribute_words() const noexcept { return attribute_words_; }

 private:
  /// n rows of stored_dim floats at `from` written into `cap` slots of the layout at `to`,
  /// padding and spare slots zero.
  void copy_rows(const float* from, std::size_t n, std::size_t cap, float* to) const;

  std::size_t stored_dim_;
  std::size_t stride_;
  TargetSpec target_;
  std::size_t value_count_;
  std::size_t slot_count_ = 0;
  StoreVector vectors_;
  std::vector<PointId> ids_;
  std::vector<std::int32_t> labels_;
  std::vector<float> values_;
  std::size_t attribute_words_;
  std::vector<std::uint32_t> attributes_;
};

}  // namespace streamknn::detail
