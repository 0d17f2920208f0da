// Exact k-nearest-neighbour search over one HostStore: register-blocked direct-form kernels
// (4 queries x 2 rows per call above 4 stored dimensions; below, 8 points per vector from the
// store's columns against groups of 2-8 queries), a
// vector threshold test, and a bounded max-heap per query ordered by (rank, id) for the few
// pairs that pass it. Every pair's rank is computed by one fixed sequence of operations,
// whatever the batch, slot or thread split (cpu_scan.cpp states it). Uses every thread of
// the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/host_store.hpp"
#include "core/thread_pool.hpp"
#include "streamknn/predicate.hpp"
#include "streamknn/radius.hpp"
#include "streamknn/search.hpp"

namespace streamknn::detail {

struct Candidate {
  float rank = std::numeric_limits<float>::infinity();
  std::uint32_t slot = std::numeric_limits<std::uint32_t>::max();
  PointId id = kInvalidId;
};

/// Strict (rank, id) order: the total order every result follows.
inline bool closer(const Candidate& a, const Candidate& b) noexcept {
  return a.rank < b.rank || (a.rank == b.rank && a.id < b.id);
}

struct CpuSearchInput {
  const HostStore* store = nullptr;
  const float* queries = nullptr;   ///< num_queries x store->stride(), stored form, zero padded
  std::size_t num_queries = 0;
  std::size_t k = 0;
  const IdRange* visible = nullptr; ///< nullptr or one per query
  const Predicate* where = nullptr; ///< nullptr, or one for every query (where_per_query false) or one per query
  bool where_per_query = false;
  bool inner_product = false;       ///< rank by -<q,p> instead of squared L2

  /// Whether query q sees the point in slot (id its id, not kInvalidId): its IdRange and its
  /// predicate on the slot's attribute words, tested as the scan meets the point.
  bool admits(std::size_t q, std::size_t slot, PointId id) const noexcept {
    if (visible && (id < visible[q].begin || id >= visible[q].end)) return false;
    if (!where) return true;
    const Predicate& p = where[where_per_query ? q : 0];
    return p.passes({store->attributes(slot), store->attribute_words()});
  }
};

/// What exact_neighbours needs beyond the screen's input.
struct ExactInput {
  CpuSearchInput screen;            ///< k there is ignored: the screen keeps exact::screen_width(k)
  std::size_t k = 0;
  int metric = 0;                   ///< streamknn::Metric as int (exact_rank.hpp)
  std::size_t stored_dim = 0;
  double max_norm = 0;              ///< >= the L2 norm of every stored vector (inner product only)
};

/// The exact answers (exact_rank.hpp): the float32 screen keeps screen_width(k) candidates per
/// query, which are re-ranked exactly; a query whose certificate fails is screened again 8 times
/// wider (up to 65,536), then answered from every stored point. found[q * k + j] holds the answers in (exact distance, id) order, with rank the
/// exact key rounded once to float32; distances[q * k + j] the reported distance (+inf for padding).
void exact_neighbours(const ExactInput& input, ThreadPool& pool, std::vector<Candidate>& found,
                      std::vector<float>& distances);

/// Pads each row of found / distances (exact_neighbours' answers) from its first answer whose exact
/// key exceeds hi + lo (core/radius_rule.hpp): the k nearest within a radius.
void limit_to_radius(const ExactInput& input, double hi, double lo, ThreadPool& pool, std::vector<Candidate>& found,
                     std::vector<float>& distances);

/// Every point each query sees whose exact key is at most hi + lo, in (exact key, id) order, at most
/// cap per query (cap_hit set where more were within); distances reported as exact_neighbours
/// reports them. input.k is ignored. The scan computes each seen pair's float64 key (the float32
/// screen is not used), so its cost is one float64 pass over the store per query.
void radius_neighbours(const ExactInput& input, double hi, double lo, std::size_t cap, ThreadPool& pool,
                       RadiusNeighbors& out);

/// Returns the instruction-set level the search kernels were compiled for, e.g. "x86-64-v3".
const char* cpu_search_isa() noexcept;
/// True when this CPU can run the compiled search kernels.
bool cpu_search_supported() noexcept;

/// Fills out (num_queries x k) with each query's k best candidates in (rank, id) order,
/// padded with default Candidates.
void exact_search(const CpuSearchInput& input, ThreadPool& pool, std::vector<Candidate>& out);

}  // namespace streamknn::detail
