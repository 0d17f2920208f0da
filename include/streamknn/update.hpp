// streamknn/update.hpp — the operations producers push into a reference set.
//
// An Update is a non-owning view: push()/try_push() validate it and copy its payload into the
// queue's preallocated pool before returning, so the caller may reuse its buffers at once.
// Points are keyed by a caller-chosen 64-bit id; kInvalidId is reserved (it marks padding in
// search results) and is refused, as is a kind that is not an UpdateKind (a cast from an integer).
#pragma once

#include <cstdint>
#include <limits>
#include <span>

namespace streamknn {

using PointId = std::uint64_t;

/// Reserved id: never a valid point; pads results when fewer than k points exist.
inline constexpr PointId kInvalidId = std::numeric_limits<PointId>::max();

enum class UpdateKind : unsigned char { Insert, Move, Erase, SetTarget, SetAttributes };

struct Update {
  UpdateKind kind = UpdateKind::Erase;
  PointId id = kInvalidId;
  std::span<const float> vector;   ///< Insert and Move: dim floats
  std::span<const float> values;   ///< regression target (Insert / SetTarget on an Outputs store)
  std::int32_t label = -1;         ///< class target (Insert / SetTarget on a Classes store)
  bool has_target = false;
  /// Insert and Move: dim doubles, in place of `vector` (the store subtracts its origin in double
  /// before rounding to float32: StoreConfig::origin). Give one of the two.
  std::span<const double> vector64 = {};
  /// Insert (optional: zeros where empty) and SetAttributes: StoreConfig::attribute_words words.
  std::span<const std::uint32_t> attributes = {};

  /// This update with attribute words (an Insert on a store with StoreConfig::attribute_words):
  /// `ReferenceSet::push(Update::insert(id, v).with_attributes(words))`.
  Update with_attributes(std::span<const std::uint32_t> words) const noexcept {
    Update u = *this;
    u.attributes = words;
    return u;
  }

  /// Insert into a store whose points carry no target.
  static Update insert(PointId id, std::span<const float> vector) noexcept {
    return {UpdateKind::Insert, id, vector, {}, -1, false};
  }
  /// Insert a labelled point into a classification store.
  static Update insert(PointId id, std::span<const float> vector, std::int32_t label) noexcept {
    return {UpdateKind::Insert, id, vector, {}, label, true};
  }
  /// Insert a point with float outputs into a regression store.
  static Update insert(PointId id, std::span<const float> vector, std::span<const float> values) noexcept {
    return {UpdateKind::Insert, id, vector, values, -1, true};
  }
  /// Give an existing point a new vector; its target is kept.
  static Update move(PointId id, std::span<const float> vector) noexcept {
    return {UpdateKind::Move, id, vector, {}, -1, false};
  }
  /// The same from double vectors (StoreConfig::origin keeps their precision).
  static Update insert(PointId id, std::span<const double> vector) noexcept {
    return {UpdateKind::Insert, id, {}, {}, -1, false, vector};
  }
  static Update insert(PointId id, std::span<const double> vector, std::int32_t label) noexcept {
    return {UpdateKind::Insert, id, {}, {}, label, true, vector};
  }
  static Update insert(PointId id, std::span<const double> vector, std::span<const float> values) noexcept {
    return {UpdateKind::Insert, id, {}, values, -1, true, vector};
  }
  static Update move(PointId id, std::span<const double> vector) noexcept {
    return {UpdateKind::Move, id, {}, {}, -1, false, vector};
  }
  static Update erase(PointId id) noexcept { return {UpdateKind::Erase, id, {}, {}, -1, false}; }
  static Update set_target(PointId id, std::int32_t label) noexcept {
    return {UpdateKind::SetTarget, id, {}, {}, label, true};
  }
  static Update set_target(PointId id, std::span<const float> values) noexcept {
    return {UpdateKind::SetTarget, id, {}, values, -1, true};
  }
  /// Replaces an existing point's attribute words (all StoreConfig::attribute_words of them).
  static Update set_attributes(PointId id, std::span<const std::uint32_t> words) noexcept {
    return {UpdateKind::SetAttributes, id, {}, {}, -1, false, {}, words};
  }
};

const char* to_string(UpdateKind kind) noexcept;

}  // namespace streamknn
