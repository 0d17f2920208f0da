// Helpers shared by the reliability suites: an exact model of one producer's points on an
// integer grid (so every distance is exact in fp32 and fp64 and answers can be compared id for
// id, ties included), the per-producer id spaces of the stress tests, and a bounded collector
// of failure messages that worker threads can write to.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/test_support.hpp"

// Sanitizer runtimes cannot throw std::bad_alloc from a throwing operator new: an allocation
// they cannot satisfy ends the process ("allocator is out of memory"), whatever
// allocator_may_return_null says, and they map terabytes of shadow memory, so RLIMIT_AS cannot
// be lowered under them. Tests of allocations that must fail skip themselves there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STREAMKNN_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define STREAMKNN_UNDER_SANITIZER 1
#endif
#endif

namespace reliability {

/// True in a sanitizer build (see STREAMKNN_UNDER_SANITIZER above).
inline constexpr bool kUnderSanitizer =
#if defined(STREAMKNN_UNDER_SANITIZER)
    true;
#else
    false;
#endif

using namespace streamknn;

/// Seconds a timed stress test runs: STREAMKNN_STRESS_SECONDS if set, else the default.
inline double stress_seconds(double fallback) {
  if (const char* env = std::getenv("STREAMKNN_STRESS_SECONDS")) {
    const double s = std::strtod(env, nullptr);
    if (s > 0) return s;
  }
  return fallback;
}

/// Producer p owns ids [p * 2^61, (p + 1) * 2^61); the last of 8 producers counts down from
/// kInvalidId - 1, so the ids at the top of the 64-bit range are exercised under load.
inline constexpr int kIdSpaces = 8;
inline PointId id_in_space(int p, std::uint64_t j) {
  return p == kIdSpaces - 1 ? kInvalidId - 1 - j : (PointId(p) << 61) + j;
}
inline IdRange space_range(int p) {
  return p == kIdSpaces - 1 ? IdRange{PointId(p) << 61, kInvalidId} : IdRange{PointId(p) << 61, PointId(p + 1) << 61};
}
inline int space_of(PointId id) { return static_cast<int>(id >> 61); }
/// Ids that a producer never inserts (the j of its fresh ids stays far below 2^59).
inline PointId unknown_id_in_space(int p, std::uint64_t j) { return id_in_space(p, (std::uint64_t(1) << 59) + j); }

inline constexpr std::size_t kGridDim = 3;
using GridPoint = std::array<std::int8_t, kGridDim>;

inline std::array<float, kGridDim> to_floats(const GridPoint& g) {
  return {float(g[0]), float(g[1]), float(g[2])};
}

struct GridEntry {
  GridPoint at;
  std::int32_t label;
};

/// Exact k-NN over integer points: squared distances are small integers, so the backends'
/// fp32 ranks are exact and the (distance, id) order is fully determined.
struct ExactNeighbor {
  std::int64_t rank;
  PointId id;
  std::int32_t label;
};

inline std::vector<ExactNeighbor> exact_knn(const std::unordered_map<PointId, GridEntry>& points, const GridPoint& q,
                                            std::size_t k, std::vector<ExactNeighbor>& scratch) {
  scratch.clear();
  for (const auto& [id, e] : points) {
    std::int64_t r = 0;
    for (std::size_t i = 0; i < kGridDim; ++i) {
      const std::int64_t d = std::int64_t(q[i]) - e.at[i];
      r += d * d;
    }
    scratch.push_back({r, id, e.label});
  }
  const std::size_t n = std::min(k, scratch.size());
  std::partial_sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n), scratch.end(),
                    [](const ExactNeighbor& a, const ExactNeighbor& b) { return a.rank < b.rank || (a.rank == b.rank && a.id < b.id); });
  return {scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n)};
}

/// The L2 distance a backend reports for an exact integer rank (tolerating a last-bit
/// difference where a backend takes the square root in fp32).
inline bool same_distance(float got, std::int64_t rank) {
  const double want = std::sqrt(double(rank));
  return std::fabs(double(got) - want) <= 1e-6 * std::max(1.0, want);
}

/// Streams every part into one string (for messages built off the doctest thread).
template <class... Parts>
std::string concat_message(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

/// Collects failure messages from any thread; reports at most `limit` through doctest.
class Failures {
 public:
  explicit Failures(std::size_t limit = 20) : limit_(limit) {}
  template <class... Parts>
  void add(Parts&&... parts) {
    std::lock_guard lock(mutex_);
    if (count_++ < limit_) messages_.push_back(concat_message(std::forward<Parts>(parts)...));
  }
  std::size_t count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }
  /// Reports the collected messages; true if there were none.
  bool report() const {
    std::lock_guard lock(mutex_);
    for (const auto& m : messages_) FAIL_CHECK(m);
    if (count_ > messages_.size()) FAIL_CHECK("... and ", count_ - messages_.size(), " more failures");
    return count_ == 0;
  }

 private:
  mutable std::mutex mutex_;
  std::size_t limit_;
  std::size_t count_ = 0;
  std::vector<std::string> messages_;
};

}  // namespace reliability
