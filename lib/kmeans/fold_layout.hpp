// Where the fold tree's nodes lie when it is built level by level for k sequences at once (the
// CUDA kernels, lib/cuda/kmeans/, which build the inertia's tree: one sequence, the points in
// index order; __host__ __device__ under nvcc, so the host tests check the same index arithmetic
// against fold_tree.hpp). Level 0 holds, sequence after sequence, the nodes over up to 32
// consecutive members; level L + 1 the nodes over up to 32 consecutive level-L nodes of the same
// sequence. offs (k + 1 entries per level) gives each sequence's first node; moff each
// sequence's first member in the members array.
#pragma once

#include <cstdint>

#include "kmeans/kmeans_exact.hpp"

#if defined(__CUDACC__)
#define STREAMKNN_FL_HD __host__ __device__ __forceinline__
#else
#define STREAMKNN_FL_HD inline
#endif

namespace streamknn::detail::kmeans {

/// Nodes of the next level over `count` nodes (or members) of one cluster.
STREAMKNN_FL_HD std::uint32_t nodes_above(std::uint32_t count) { return (count + kFold - 1) / kFold; }

/// The cluster whose nodes [offs[c], offs[c + 1]) hold `node` (offs: k + 1 non-decreasing, node < offs[k]).
STREAMKNN_FL_HD std::uint32_t cluster_of(const std::uint32_t* offs, std::uint32_t k, std::uint32_t node) {
  std::uint32_t lo = 0, hi = k;  // the last c with offs[c] <= node
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (offs[mid] <= node) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// What a node sums: positions [first, end) in the level below (absolute node indices), or, for a
/// level-0 node, in the members array.
struct NodeRange {
  std::uint32_t cluster, first, end;
};

/// Level-0 node `node`: its members' positions in the members array.
STREAMKNN_FL_HD NodeRange leaf_range(const std::uint32_t* moff, const std::uint32_t* offs0, std::uint32_t k,
                                     std::uint32_t node) {
  const std::uint32_t c = cluster_of(offs0, k, node);
  const std::uint32_t first = moff[c] + (node - offs0[c]) * kFold;
  const std::uint32_t end = moff[c + 1] - first < kFold ? moff[c + 1] : first + kFold;
  return {c, first, end};
}

/// Node `node` of a level above 0: its children in the level below.
STREAMKNN_FL_HD NodeRange level_range(const std::uint32_t* offs_below, const std::uint32_t* offs_level,
                                      std::uint32_t k, std::uint32_t node) {
  const std::uint32_t c = cluster_of(offs_level, k, node);
  const std::uint32_t first = offs_below[c] + (node - offs_level[c]) * kFold;
  const std::uint32_t end = offs_below[c + 1] - first < kFold ? offs_below[c + 1] : first + kFold;
  return {c, first, end};
}

/// Levels for sequences of up to n members: the top level has at most one node per cluster.
STREAMKNN_FL_HD std::uint32_t fold_levels_for(std::uint64_t n) {
  std::uint32_t levels = 1;
  for (std::uint64_t span = kFold; span < n; span *= kFold) ++levels;
  return levels;
}

}  // namespace streamknn::detail::kmeans

#undef STREAMKNN_FL_HD
