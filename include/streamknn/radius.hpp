// streamknn/radius.hpp — radius search results: every point within a distance, per query.
//
// ReferenceSet::radius_search returns, for each query, the points whose exact distance is at
// most r, in ascending (exact distance, id) order, as one flat list: query q's ids and distances
// are ids[offsets[q] .. offsets[q + 1]). With a cap (max_results), each query keeps its nearest
// `cap` points and capped(q) says that more lay within r.
//
// The rule "within r", decided exactly on the stored float32 values (docs/filters.md):
//   l2:            squared distance <= r * r, both exact (r as given, in double);
//   inner product: -<q, p> <= r (r of any sign);   cosine: 1 - cos <= r, that is |q - p|^2 <= 2 r on the stored
//                  unit vectors;
//   haversine:     r in metres; the squared chord of the stored unit vectors <= (2 sin(r / 2R))^2,
//                  that bound computed once in double on the host (R = 6,371,008.8 m).
// Distances are reported as search() reports them (the exact distance rounded once to float32),
// so a reported distance never exceeds r rounded up to float32 (haversine: by a float32 step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "streamknn/update.hpp"

namespace streamknn {

/// No cap on the points a radius search returns per query.
inline constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

struct RadiusNeighbors {
  std::size_t num_queries = 0;
  std::uint64_t epoch = 0;
  std::vector<std::size_t> offsets;       ///< num_queries + 1 entries, offsets[0] = 0
  std::vector<PointId> ids;               ///< offsets[num_queries] entries
  std::vector<float> distances;           ///< offsets[num_queries] entries
  std::vector<std::uint8_t> cap_hit;      ///< per query: 1 where more than the cap lay within r

  std::size_t count(std::size_t query) const { return offsets[query + 1] - offsets[query]; }
  std::span<const PointId> ids_of(std::size_t query) const {
    return {ids.data() + offsets[query], count(query)};
  }
  std::span<const float> distances_of(std::size_t query) const {
    return {distances.data() + offsets[query], count(query)};
  }
  bool capped(std::size_t query) const { return cap_hit[query] != 0; }
};

}  // namespace streamknn
