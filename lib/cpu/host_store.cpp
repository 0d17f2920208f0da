#include "cpu/host_store.hpp"

#include <algorithm>
#include <cstring>

namespace streamknn::detail {

HostStore::HostStore(std::size_t stored_dim, TargetSpec target, std::size_t attribute_words)
    : stored_dim_(stored_dim),
      stride_(row_stride(stored_dim)),
      target_(target),
      value_count_(target.value_count()),
      attribute_words_(attribute_words) {}

void HostStore::reserve(std::size_t slots) {
  if (slots <= capacity()) return;
  const std::size_t grown = (std::max(slots, capacity() + capacity() / 2) + 7) / 8 * 8;
  // Grow every array before committing any, so a bad_alloc leaves the store as it was.
  StoreVector vectors(grown * stride_, 0.0f);
  if (by_column()) {
    for (std::size_t d = 0; d < stored_dim_; ++d) {
      std::copy_n(vectors_.data() + d * capacity(), capacity(), vectors.data() + d * grown);
    }
  } else {
    std::copy(vectors_.begin(), vectors_.end(), vectors.begin());
  }
  std::vector<PointId> ids(grown, kInvalidId);
  std::vector<std::int32_t> labels(target_.kind == TargetSpec::Kind::Classes ? grown : 0, 0);
  std::vector<float> values(grown * value_count_, 0.0f);
  std::copy(ids_.begin(), ids_.end(), ids.begin());
  std::copy(labels_.begin(), labels_.end(), labels.begin());
  std::copy(values_.begin(), values_.end(), values.begin());
  std::vector<std::uint32_t> attributes(grown * attribute_words_, 0u);
  std::copy(attributes_.begin(), attributes_.end(), attributes.begin());
  vectors_.swap(vectors);
  attributes_.swap(attributes);
  ids_.swap(ids);
  labels_.swap(labels);
  values_.swap(values);
}

void HostStore::apply(const ResolvedBatch& batch) {
  const std::size_t column_len = capacity();
  for (std::size_t i = 0; i < batch.vector_slots.size(); ++i) {
    const float* src = batch.vectors.data() + i * stored_dim_;
    const std::size_t slot = batch.vector_slots[i];
    if (by_column()) {
      for (std::size_t d = 0; d < stored_dim_; ++d) vectors_[d * column_len + slot] = src[d];
    } else {
      std::copy(src, src + stored_dim_, vectors_.data() + slot * stride_);
    }
  }
  for (std::size_t i = 0; i < batch.target_slots.size(); ++i) {
    const std::size_t slot = batch.target_slots[i];
    if (target_.kind == TargetSpec::Kind::Classes) {
      labels_[slot] = batch.labels[i];
    } else {
      std::copy_n(batch.values.data() + i * value_count_, value_count_, values_.data() + slot * value_count_);
    }
  }
  for (std::size_t i = 0; i < batch.attribute_slots.size(); ++i) {
    std::copy_n(batch.attributes.data() + i * attribute_words_, attribute_words_,
                attributes_.data() + std::size_t(batch.attribute_slots[i]) * attribute_words_);
  }
  for (std::size_t i = 0; i < batch.id_slots.size(); ++i) ids_[batch.id_slots[i]] = batch.ids[i];
  slot_count_ = batch.slot_count;
}

void HostStore::copy_rows(const float* from, std::size_t n, std::size_t cap, float* to) const {
  if (by_column()) {
    for (std::size_t d = 0; d < stored_dim_; ++d) {
      float* column = to + d * cap;
      for (std::size_t s = 0; s < n; ++s) column[s] = from[s * stored_dim_ + d];
      std::fill(column + n, column + cap, 0.0f);
    }
  } else if (stride_ == stored_dim_) {
    if (n) std::memcpy(to, from, n * stored_dim_ * sizeof(float));
    std::fill(to + n * stride_, to + cap * stride_, 0.0f);
  } else {
    for (std::size_t s = 0; s < n; ++s) {
      float* row = to + s * stride_;
      std::copy_n(from + s * stored_dim_, stored_dim_, row);
      std::fill(row + stored_dim_, row + stride_, 0.0f);
    }
    std::fill(to + n * stride_, to + cap * stride_, 0.0f);
  }
}

bool HostStore::fills_every_slot(const ResolvedBatch& batch, bool has_targets, bool has_attributes) noexcept {
  const std::size_t n = batch.slot_count;
  const auto in_order = [n](const std::vector<std::uint32_t>& slots) {
    if (slots.size() != n) return false;
    for (std::size_t s = 0; s < n; ++s) {
      if (slots[s] != s) return false;
    }
    return true;
  };
  if (!in_order(batch.vector_slots) || !in_order(batch.id_slots)) return false;
  if (has_targets ? !in_order(batch.target_slots) : !batch.target_slots.empty()) return false;
  if (has_attributes ? !in_order(batch.attribute_slots) : !batch.attribute_slots.empty()) return false;
  return std::find(batch.ids.begin(), batch.ids.end(), kInvalidId) == batch.ids.end();
}

void HostStore::load(ResolvedBatch& batch) {
  const std::size_t n = batch.slot_count, cap = (n + 7) / 8 * 8;
  StoreVector vectors;
  if (!batch.rows.empty()) {  // unpadded rows (the caller checks), taken as they are
    vectors.swap(batch.rows);
    vectors.resize(cap * stride_, 0.0f);  // the spare slots' rows, within the capacity from_points reserved
  } else {
    vectors.resize(cap * stride_);  // uninitialised: every float is written below
    copy_rows(batch.vectors.data(), n, cap, vectors.data());
  }
  // Each array taken from the batch and grown to the capacity (a copy only where it lacks room).
  const auto filled = [cap](auto& out, auto& in, std::size_t per_slot, auto blank) {
    out.swap(in);
    out.resize(cap * per_slot, blank);
  };
  std::vector<PointId> ids;
  std::vector<std::int32_t> labels;
  std::vector<float> values;
  std::vector<std::uint32_t> attributes;
  filled(ids, batch.ids, 1, kInvalidId);
  if (target_.kind == TargetSpec::Kind::Classes) filled(labels, batch.labels, 1, std::int32_t{0});
  filled(values, batch.values, value_count_, 0.0f);
  if (batch.attribute_slots.empty()) {
    attributes.assign(cap * attribute_words_, 0u);
  } else {
    filled(attributes, batch.attributes, attribute_words_, 0u);
  }
  vectors_.swap(vectors);
  ids_.swap(ids);
  labels_.swap(labels);
  values_.swap(values);
  attributes_.swap(attributes);
  slot_count_ = n;
}

}  // namespace streamknn::detail
