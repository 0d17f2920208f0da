// The internal interface between the CPU search's driver (cpu_search.cpp: exact_search splits the
// work into slot chunks x query blocks and merges the per-chunk lists) and its scan kernels
// (cpu_scan.cpp): the bounded (rank, id) heap the kernels feed and the driver merges, and the one
// entry point of the kernels. Included only by files built with the search kernels' ISA flags.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/cpu_search.hpp"

namespace streamknn::detail {


/// closer() as a function object, so the heap algorithms inline it.
struct Closer {
  bool operator()(const Candidate& a, const Candidate& b) const noexcept { return closer(a, b); }
};

/// The k best candidates seen so far, by (rank, id). Below kReservoirMinK a bounded max-heap
/// (worst on top, O(log k) per admission); from it a buffer cut back to its k best by a
/// selection whenever it holds 3k / 2 (O(1) per admission): with k in the thousands the heap's
/// sift-downs dominated the scan (1,000,000 x 2, 16 queries, k 1,528: 34 ms against 3 ms at
/// k 16). Either way items() holds the k best (the buffer: among fewer than 3k / 2), unordered.
class TopK {
 public:
  static constexpr std::size_t kReservoirMinK = 256;

  void reset(std::size_t k) {
    k_ = k;
    reservoir_ = k >= kReservoirMinK;
    cut_ = false;
    items_.clear();
    items_.reserve(reservoir_ ? k + k / 2 : k);
  }
  bool admits(float rank, PointId id) const noexcept {
    if (reservoir_) return !cut_ || closer({rank, 0, id}, items_[k_ - 1]);
    return items_.size() < k_ || closer({rank, 0, id}, items_.front());
  }
  void push(float rank, std::uint32_t slot, PointId id) {
    const Candidate c{rank, slot, id};
    if (reservoir_) {
      items_.push_back(c);
      if (items_.size() >= k_ + k_ / 2) cut();
    } else if (items_.size() < k_) {
      items_.push_back(c);
      std::push_heap(items_.begin(), items_.end(), Closer{});
    } else {
      replace_top(c);
    }
  }
  /// Ranks above this cannot enter (+inf until the first k are held; equal ranks may, by id).
  float limit() const noexcept {
    if (reservoir_) return cut_ ? items_[k_ - 1].rank : std::numeric_limits<float>::infinity();
    return items_.size() < k_ ? std::numeric_limits<float>::infinity() : items_.front().rank;
  }
  std::vector<Candidate>& items() noexcept { return items_; }

 private:
  /// Keeps the buffer's k best; the k-th of them, items_[k - 1] until the next cut (admissions
  /// are appended after it), bounds every later admission.
  void cut() {
    std::nth_element(items_.begin(), items_.begin() + std::ptrdiff_t(k_ - 1), items_.end(), Closer{});
    items_.resize(k_);
    cut_ = true;
  }
  /// Replaces the worst candidate by c (closer than it) in one sift-down.
  void replace_top(const Candidate& c) noexcept {
    const std::size_t n = items_.size();
    std::size_t at = 0;
    for (std::size_t child = 1; child < n; child = 2 * at + 1) {
      if (child + 1 < n && closer(items_[child], items_[child + 1])) ++child;  // the worse child
      if (!closer(c, items_[child])) break;
      items_[at] = items_[child];
      at = child;
    }
    items_[at] = c;
  }

  std::size_t k_ = 0;
  bool reservoir_ = false, cut_ = false;
  std::vector<Candidate> items_;
};

/// Offers every pair of queries [q0, q1) x slots [begin, end) that in admits to heaps[q - q0]
/// (each reset to in.k by the caller), ranked by the recipe cpu_scan.cpp states. The kernel (low
/// dimensions, the squared-L2 screening pass or the register-blocked direct form) is chosen by the
/// store's layout, the metric, the block size and the stride.
void scan_slots(const CpuSearchInput& in, std::size_t q0, std::size_t q1, std::size_t begin, std::size_t end,
                TopK* heaps);

}  // namespace streamknn::detail
