// streamknn/q_update.hpp — the result of ReferenceSet::lookup_and_update (KNN-Q in one call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "streamknn/update.hpp"

namespace streamknn {

struct QUpdate {
  std::uint64_t epoch = 0;        ///< epoch published by the write-back (unchanged if nothing was written)
  std::size_t num_queries = 0;
  std::size_t k = 0;
  std::size_t num_actions = 0;
  std::vector<float> q_before;    ///< num_queries x num_actions: the estimates before the update (NaN: no neighbour)
  std::vector<PointId> ids;       ///< num_queries x k: the neighbours read and written (kInvalidId padding)
};

}  // namespace streamknn
