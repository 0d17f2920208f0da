// One published epoch copied out of a backend, slot by slot: what a checkpoint holds and what a
// load rebuilds a store from. Keeping the slots (free ones included) keeps the catalogue's free
// list, so a loaded store gives new inserts the slots the saved one would have.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/resolved_batch.hpp"
#include "streamknn/update.hpp"

namespace streamknn::detail {

struct StoreImage {
  std::uint64_t epoch = 0;
  std::uint32_t slot_count = 0;      ///< the high-water mark: slot_count - 1 holds a point (or 0)
  std::vector<PointId> ids;          ///< slot_count; kInvalidId marks a free slot
  std::vector<float> vectors;        ///< slot_count x stored_dim, stored form; free slots zero
  std::vector<std::int32_t> labels;  ///< classification stores: slot_count (free slots 0)
  std::vector<float> values;         ///< regression stores: slot_count x outputs (free slots 0)
  std::size_t attribute_words = 0;   ///< StoreConfig::attribute_words
  /// slot_count x attribute_words (free slots 0); may be empty where every word is 0 (from_points)
  std::vector<std::uint32_t> attributes;
  /// from_points only, in place of `vectors` (then empty): the same floats as ResolvedBatch::rows
  /// holds them, taken by take_batch. Set only where every slot holds a point.
  StoreVector rows;

  /// Grows (or shrinks) to n slots; new slots are free and zero.
  void resize(std::size_t n, std::size_t stored_dim, bool classes, std::size_t outputs) {
    attributes.resize(n * attribute_words, 0u);
    ids.resize(n, kInvalidId);
    vectors.resize(n * stored_dim, 0.0f);
    labels.resize(classes ? n : 0, 0);
    values.resize(n * outputs, 0.0f);
  }

  /// Writes a resolved batch as a backend does (journal replay), then clears the rows of slots
  /// it freed, so that the image equals a fresh read of the store. False (the image then
  /// unusable) when a point would be left at or above the batch's slot count.
  bool apply(const ResolvedBatch& batch, std::size_t stored_dim, bool classes, std::size_t outputs) {
    std::size_t top = batch.slot_count;
    for (const auto* s : {&batch.vector_slots, &batch.target_slots, &batch.id_slots, &batch.attribute_slots}) {
      for (const std::uint32_t slot : *s) top = std::max<std::size_t>(top, std::size_t(slot) + 1);
    }
    if (top > ids.size()) resize(top, stored_dim, classes, outputs);
    attributes.resize(ids.size() * attribute_words, 0u);
    for (std::size_t i = 0; i < batch.attribute_slots.size(); ++i) {
      std::copy_n(batch.attributes.data() + i * attribute_words, attribute_words,
                  attributes.data() + batch.attribute_slots[i] * attribute_words);
    }
    for (std::size_t i = 0; i < batch.vector_slots.size(); ++i) {
      std::copy_n(batch.vectors.data() + i * stored_dim, stored_dim, vectors.data() + batch.vector_slots[i] * stored_dim);
    }
    for (std::size_t i = 0; i < batch.target_slots.size(); ++i) {
      const std::size_t slot = batch.target_slots[i];
      if (classes) {
        labels[slot] = batch.labels[i];
      } else if (outputs) {
        std::copy_n(batch.values.data() + i * outputs, outputs, values.data() + slot * outputs);
      }
    }
    for (std::size_t i = 0; i < batch.id_slots.size(); ++i) ids[batch.id_slots[i]] = batch.ids[i];
    slot_count = batch.slot_count;
    for (std::size_t s = slot_count; s < ids.size(); ++s) {
      if (ids[s] != kInvalidId) return false;
    }
    resize(slot_count, stored_dim, classes, outputs);
    for (std::size_t i = 0; i < batch.id_slots.size(); ++i) {
      const std::size_t s = batch.id_slots[i];
      if (batch.ids[i] != kInvalidId || s >= slot_count) continue;
      std::fill_n(vectors.data() + s * stored_dim, stored_dim, 0.0f);
      if (classes) labels[s] = 0;
      std::fill_n(values.data() + s * outputs, outputs, 0.0f);
      std::fill_n(attributes.data() + s * attribute_words, attribute_words, 0u);
    }
    return true;
  }

  /// Whether every slot holds a point (no id is kInvalidId).
  bool every_slot_live() const { return std::find(ids.begin(), ids.end(), kInvalidId) == ids.end(); }

  /// The batch that writes every point of the image into an empty store; takes the image's
  /// arrays where every slot holds a point (`every_live`: every_slot_live(), asked once by the
  /// caller), with no copy of a store of millions, else copies.
  ResolvedBatch take_batch(std::size_t stored_dim, bool classes, std::size_t outputs, bool every_live) {
    ResolvedBatch b;
    b.slot_count = slot_count;
    const std::size_t words = attribute_words;
    attributes.resize(std::size_t(slot_count) * words, 0u);
    if (every_live) {
      b.vector_slots.resize(slot_count);
      for (std::uint32_t s = 0; s < slot_count; ++s) b.vector_slots[s] = s;
      if (classes || outputs) b.target_slots = b.vector_slots;
      b.id_slots = b.vector_slots;
      if (words) b.attribute_slots = b.vector_slots;
      b.attributes = std::move(attributes);
      b.vectors = std::move(vectors);
      b.rows = std::move(rows);
      b.labels = std::move(labels);
      b.values = std::move(values);
      b.ids = std::move(ids);
      *this = StoreImage{};
      return b;
    }
    if (!rows.empty()) {  // where a slot is free (never from from_points): read as `vectors`
      vectors.assign(rows.begin(), rows.end());
      rows = StoreVector();
    }
    const std::size_t live = static_cast<std::size_t>(std::count_if(ids.begin(), ids.end(), [](PointId id) { return id != kInvalidId; }));
    b.reserve(live, stored_dim, outputs, words);
    for (std::uint32_t s = 0; s < slot_count; ++s) {
      // Every slot's id is written, free slots' as kInvalidId: a backend's new arrays need not
      // hold the free marker (the CUDA store's are zeroed), and a snapshot reads ids slot by slot.
      b.id_slots.push_back(s);
      b.ids.push_back(ids[s]);
      if (ids[s] == kInvalidId) continue;
      b.vector_slots.push_back(s);
      b.vectors.insert(b.vectors.end(), vectors.begin() + std::ptrdiff_t(s * stored_dim),
                       vectors.begin() + std::ptrdiff_t((s + 1) * stored_dim));
      if (classes || outputs) b.target_slots.push_back(s);
      if (classes) b.labels.push_back(labels[s]);
      if (outputs) {
        b.values.insert(b.values.end(), values.begin() + std::ptrdiff_t(s * outputs),
                        values.begin() + std::ptrdiff_t((s + 1) * outputs));
      }
      if (words) {
        b.attribute_slots.push_back(s);
        b.attributes.insert(b.attributes.end(), attributes.begin() + std::ptrdiff_t(s * words),
                            attributes.begin() + std::ptrdiff_t((s + 1) * words));
      }
    }
    return b;
  }
};

}  // namespace streamknn::detail
