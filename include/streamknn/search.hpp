// streamknn/search.hpp — neighbour search results and the per-query visibility filter.
//
// Results are exact: row q holds the k smallest distances of query q, computed exactly (not as
// float32 rounding happens to order them) on the stored float32 values, in ascending (exact
// distance, id) order, ties going to the smaller id. Reported distances are the exact distance
// rounded once to float32 (haversine: to one of the two float32 values around it), so two
// different exact distances may report the same float and then show their ids in either order.
// Both backends return the same ids and the same distance bits. When fewer than k points are
// visible the row ends with padding: id == kInvalidId, distance == +infinity. Every result
// carries the epoch of the snapshot it was computed on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "streamknn/update.hpp"

namespace streamknn {

/// Largest k any search accepts (both backends).
inline constexpr std::size_t kMaxK = 4096;

/// Restricts one query to the points whose id lies in [begin, end). Used for causal
/// (test-then-train) batches: query i of a stream sees only ids that arrived before it.
struct IdRange {
  PointId begin = 0;
  PointId end = kInvalidId;
};

struct Neighbors {
  std::size_t num_queries = 0;
  std::size_t k = 0;
  std::uint64_t epoch = 0;
  std::vector<float> distances;  ///< num_queries x k, row-major
  std::vector<PointId> ids;      ///< num_queries x k, row-major

  std::span<const float> distances_of(std::size_t query) const {
    return {distances.data() + query * k, k};
  }
  std::span<const PointId> ids_of(std::size_t query) const { return {ids.data() + query * k, k}; }
  /// Number of real (non-padding) neighbours of a query.
  std::size_t found(std::size_t query) const {
    std::size_t n = 0;
    for (PointId id : ids_of(query)) n += id != kInvalidId;
    return n;
  }
};

}  // namespace streamknn
