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

/// Bounded max-heap of the k best candidates seen so far (worst on top).
class TopK {
 public:
  void reset(std::size_t k) {
    k_ = k;
    heap_.clear();
    heap_.reserve(k);
  }
  bool admits(float rank, PointId id) const noexcept {
    return heap_.size() < k_ || closer({rank, 0, id}, heap_.front());
  }
  void push(float rank, std::uint32_t slot, PointId id) {
    const Candidate c{rank, slot, id};
    if (heap_.size() < k_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), Closer{});
    } else {
      replace_top(c);
    }
  }
  /// Ranks above this cannot enter (+inf until the heap is full; equal ranks may, by id).
  float limit() const noexcept {
    return heap_.size() < k_ ? std::numeric_limits<float>::infinity() : heap_.front().rank;
  }
  std::vector<Candidate>& items() noexcept { return heap_; }

 private:
  /// Replaces the worst candidate by c (closer than it) in one sift-down.
  void replace_top(const Candidate& c) noexcept {
    const std::size_t n = heap_.size();
    std::size_t at = 0;
    for (std::size_t child = 1; child < n; child = 2 * at + 1) {
      if (child + 1 < n && closer(heap_[child], heap_[child + 1])) ++child;  // the worse child
      if (!closer(c, heap_[child])) break;
      heap_[at] = heap_[child];
      at = child;
    }
    heap_[at] = c;
  }

  std::size_t k_ = 0;
  std::vector<Candidate> heap_;
};

/// Offers every pair of queries [q0, q1) x slots [begin, end) that in admits to heaps[q - q0]
/// (each reset to in.k by the caller), ranked by the recipe cpu_scan.cpp states. The kernel (low
/// dimensions, the squared-L2 screening pass or the register-blocked direct form) is chosen by the
/// store's layout, the metric, the block size and the stride.
void scan_slots(const CpuSearchInput& in, std::size_t q0, std::size_t q1, std::size_t begin, std::size_t end,
                TopK* heaps);

}  // namespace streamknn::detail
