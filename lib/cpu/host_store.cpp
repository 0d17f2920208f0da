#include "cpu/host_store.hpp"

#include <algorithm>

namespace streamknn::detail {

HostStore::HostStore(std::size_t stored_dim, TargetSpec target, std::size_t attribute_words)
    : stored_dim_(stored_dim),
      stride_(row_stride(stored_dim)),
      target_(target),
      value_count_(target.kind == TargetSpec::Kind::Outputs ? target.count : 0),
      attribute_words_(attribute_words) {}

void HostStore::reserve(std::size_t slots) {
  if (slots <= capacity()) return;
  const std::size_t grown = (std::max(slots, capacity() + capacity() / 2) + 7) / 8 * 8;
  // Grow every array before committing any, so a bad_alloc leaves the store as it was.
  AlignedVector<float> vectors(grown * stride_, 0.0f);
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

}  // namespace streamknn::detail
