// The fixed-order float64 sum of a sequence of rows (docs/kmeans.md, "Sums": the inertia): a tree
// of fan-out 32 over the sequence. A level-0 node is the left-to-right sum of up to 32 consecutive
// rows (the first row, plus the second, ...), a level-L node that of up to 32 consecutive
// level-(L-1) nodes; the root is the single node of the first level that has one. The order
// depends only on the sequence (the points in index order), never on threads or blocks, and the
// CUDA kernels (lib/cuda/kmeans/) build the same tree level by level, so both backends get the
// same bits. The CPU computes level-2 nodes (32,768 rows each) independently (fold_unit), then
// the levels above (fold_levels).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::kmeans {

inline constexpr std::size_t kUnit = std::size_t(kFold) * kFold * kFold;  ///< rows under a level-2 node

/// Adds (or, when first, copies) d values into acc.
template <class T>
inline void fold_into(double* acc, const T* row, std::size_t d, bool first) {
  if (first) {
    for (std::size_t i = 0; i < d; ++i) acc[i] = double(row[i]);
  } else {
    for (std::size_t i = 0; i < d; ++i) acc[i] += double(row[i]);
  }
}

/// The level-2 node over rows [begin, end) of a sequence (end - begin <= kUnit, begin a multiple
/// of kUnit): row(j) gives row j's d values. scratch holds 2 d doubles.
template <class RowAt>
void fold_unit(const RowAt& row, std::size_t begin, std::size_t end, std::size_t d, double* out, double* scratch) {
  double* l0 = scratch;
  double* l1 = scratch + d;
  std::uint32_t n0 = 0, n1 = 0, n2 = 0;
  const auto push1 = [&] {
    fold_into(out, l1, d, n2 == 0);
    ++n2;
    n1 = 0;
  };
  const auto push0 = [&] {
    fold_into(l1, l0, d, n1 == 0);
    ++n1;
    n0 = 0;
    if (n1 == kFold) push1();
  };
  for (std::size_t j = begin; j < end; ++j) {
    fold_into(l0, row(j), d, n0 == 0);
    if (++n0 == kFold) push0();
  }
  if (n0) push0();
  if (n1) push1();
}

/// The root over `count` nodes (count x d, row-major, count >= 1) that are the level-L nodes of
/// one sequence: the levels above L, in place. Returns a pointer to the root's d values.
inline const double* fold_levels(std::vector<double>& nodes, std::size_t count, std::size_t d) {
  while (count > 1) {
    const std::size_t next = (count + kFold - 1) / kFold;
    for (std::size_t g = 0; g < next; ++g) {
      double* acc = nodes.data() + g * d;  // g <= g * 32: never overwrites a node not yet read
      const std::size_t lo = g * kFold, hi = std::min(count, lo + kFold);
      if (g != lo) std::copy_n(nodes.data() + lo * d, d, acc);
      for (std::size_t c = lo + 1; c < hi; ++c) fold_into(acc, nodes.data() + c * d, d, false);
    }
    count = next;
  }
  return nodes.data();
}

}  // namespace streamknn::detail::kmeans
