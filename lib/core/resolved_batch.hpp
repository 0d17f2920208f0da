// A publish's updates resolved to slots: what a backend writes into its reference buffers.
// Each channel holds at most one write per slot (the last op of the batch wins), so a scatter
// kernel can apply a channel without ordering between writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/store_vector.hpp"
#include "streamknn/update.hpp"

namespace streamknn::detail {

struct ResolvedBatch {
  std::uint32_t slot_count = 0;         ///< slots to scan after this batch (high-water mark)
  std::vector<std::uint32_t> vector_slots;
  std::vector<float> vectors;           ///< vector_slots.size() x stored_dim, in stored form
  std::vector<std::uint32_t> target_slots;
  std::vector<std::int32_t> labels;     ///< classification: one per target slot
  std::vector<float> values;            ///< regression: target_slots.size() x outputs
  std::vector<std::uint32_t> id_slots;
  std::vector<PointId> ids;             ///< kInvalidId marks the slot as erased
  std::vector<std::uint32_t> attribute_slots;
  std::vector<std::uint32_t> attributes;  ///< attribute_slots.size() x StoreConfig::attribute_words
  /// A load's vectors (from_points, StoreImage::rows) in place of `vectors`, which is then empty:
  /// the same floats, in storage the CPU backend keeps as its buffer instead of copying it.
  /// Capacity for slot_count rounded up to 8 rows. A backend that does not take them calls
  /// rows_to_vectors() first.
  StoreVector rows;

  /// Moves `rows` into `vectors` (a copy), for a consumer that reads `vectors`.
  void rows_to_vectors() {
    if (rows.empty()) return;
    vectors.assign(rows.begin(), rows.end());
    rows = StoreVector();
  }

  bool empty() const noexcept {
    return vector_slots.empty() && target_slots.empty() && id_slots.empty() && attribute_slots.empty();
  }
  /// Room for a batch of `ops` operations, so that filling it cannot allocate.
  void reserve(std::size_t ops, std::size_t stored_dim, std::size_t outputs, std::size_t attribute_words = 0) {
    if (attribute_words > 0) {
      attribute_slots.reserve(ops);
      attributes.reserve(ops * attribute_words);
    }
    vector_slots.reserve(ops);
    vectors.reserve(ops * stored_dim);
    target_slots.reserve(ops);
    labels.reserve(ops);
    values.reserve(ops * outputs);
    id_slots.reserve(ops);
    ids.reserve(ops);
  }
  void clear() noexcept {
    vector_slots.clear(); vectors.clear(); target_slots.clear(); labels.clear(); values.clear();
    id_slots.clear(); ids.clear(); attribute_slots.clear(); attributes.clear(); rows.clear();
  }
};

}  // namespace streamknn::detail
