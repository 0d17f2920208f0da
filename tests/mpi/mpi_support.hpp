// Helpers of the sharded suites: the world's rank and size, a check that every rank makes the
// same collective calls whatever it finds, and exact comparisons with one ReferenceSet.
#pragma once

#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "streamknn/distributed_reference_set.hpp"
#include "support/test_support.hpp"

namespace mpitest {

using namespace streamknn;

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// The values bit for bit (memcmp never sees an empty vector's null data()).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// Same bits (distances) and same ids, row by row.
inline void check_same(const Neighbors& got, const Neighbors& want) {
  REQUIRE(got.num_queries == want.num_queries);
  REQUIRE(got.k == want.k);
  CHECK(got.ids == want.ids);
  CHECK(same_bits(got.distances, want.distances));
}

inline void check_same(const ClassPredictions& got, const ClassPredictions& want) {
  CHECK(got.labels == want.labels);
  CHECK(got.probabilities == want.probabilities);
}

inline void check_same(const RegressionPredictions& got, const RegressionPredictions& want) {
  REQUIRE(got.values.size() == want.values.size());
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    const bool both_nan = std::isnan(got.values[i]) && std::isnan(want.values[i]);
    if (!both_nan) CHECK(got.values[i] == want.values[i]);
  }
}

inline std::vector<std::tuple<PointId, int, int>> sorted_rejections(const PublishReport& r) {
  std::vector<std::tuple<PointId, int, int>> out;
  for (const Rejection& j : r.rejected) out.emplace_back(j.id, int(j.kind), int(j.reason));
  std::sort(out.begin(), out.end());
  return out;
}

/// The counts and rejections (as a set: shards list theirs in rank order) of two reports.
inline void check_same(const PublishReport& got, const PublishReport& want) {
  CHECK(got.epoch == want.epoch);
  test::check_same_counts(got, want);
  CHECK(sorted_rejections(got) == sorted_rejections(want));
}

}  // namespace mpitest
