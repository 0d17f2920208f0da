// Device rules the K-means kernels share: the one-step kernels of an iteration (kmeans_kernels.cu,
// sum_kernels.cu) and the queued run's one kernel (run_kernel.cu) apply the same Hamerly test, the
// same full scan's nearest two and the same table of 12-bit halves of the exact sums, so a point
// gets the same bounds and label on either path.
#pragma once

#include <cstdint>

#include "cuda/kmeans/kmeans_kernels.hpp"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::gpu::kmeans {

namespace km = streamknn::detail::kmeans;
namespace ex = streamknn::detail::exact;

/// Stores a point's bounds rounded outward to float32.
__device__ __forceinline__ void write_bounds(float* upper, float* lower, std::uint32_t i, double u, double l) {
  upper[i] = __double2float_ru(u);
  lower[i] = __double2float_rd(l);
}

/// A point's bounds after the centroids moved (delta_c: its centroid's movement bound; the others
/// moved by at most the largest movement but its own).
__device__ __forceinline__ void move_bounds(double& u, double& l, std::uint32_t c, double delta_c, const Moves& m) {
  u = km::round_up(u + delta_c);
  l = km::round_down(l - (c == m.argmax ? m.max2 : m.max1));
  if (!(l > 0)) l = 0;
}

/// Adds centroid c's movement bound b to the largest two so far, as the host's loop in index
/// order: the first of equal largest is argmax, max2 the largest of the others.
__device__ __forceinline__ void take_move(Moves& m, double b, std::uint32_t c) {
  if (b > m.max1) {
    m.max2 = m.max1;
    m.max1 = b;
    m.argmax = c;
  } else if (b > m.max2) {
    m.max2 = b;
  }
}

/// Hamerly's test of the point x labelled with `centroid`: true (the label stays, u and l are its
/// bounds) when u is below the centroid's half gap or l; where it is not at first, u is tightened
/// to a fresh screen of the distance (b: screen_bound(d)) before the second look.
__device__ __forceinline__ bool keeps_label(const float* x, const float* centroid, std::uint32_t d,
                                            const ex::ScreenBound& b, float half_gap, double l, double& u) {
  const double keep = fmax(double(half_gap), l);
  if (u < keep) return true;
  u = km::upper_dist(km::screen(x, centroid, d), b);
  return u < keep;
}

/// A centroid's half gap (rounded down) from its smallest screen to another centroid: lower_dist
/// is non-decreasing in the screen, so that screen's bound is the smallest of the bounds.
__device__ __forceinline__ float half_gap_of(float nearest_screen, const ex::ScreenBound& b) {
  return __double2float_rd(km::round_down(0.5 * km::lower_dist(nearest_screen, b)));
}

/// Whether a queued iteration ends the loop: an empty cluster (the host relocates), or loop_stop.
/// A queued iteration is never a run's first (which labels every point): its `it` is 1.
__device__ __forceinline__ bool queued_stop(bool empty, std::uint32_t changed, const double* shift2, std::uint32_t k,
                                            double tol) {
  return empty || km::loop_stop(1, changed, shift2, k, tol) != km::LoopStop::Continue;
}

/// A full scan's nearest two screens: r1 at centroid j1, r2 the smallest of the others (the first
/// of equal screens is j1).
struct Nearest2 {
  float r1 = 1.0f / 0.0f, r2 = 1.0f / 0.0f;
  std::uint32_t j1 = 0;
  __device__ __forceinline__ void take(float r, std::uint32_t c) {
    if (r < r1) {
      r2 = r1;
      r1 = r;
      j1 = c;
    } else if (r < r2) {
      r2 = r;
    }
  }
};

/// A block's table of exact sums in shared memory keeps each digit as two 12-bit halves in 32-bit
/// words, for 32-bit shared atomics (the 64-bit ones are slower): a value's half_terms
/// (cluster_sums.hpp) are three 12-bit pieces, each added to its half. A half takes at most
/// kBlockItems pieces of magnitude below 2^12 from a block between flushes: no overflow. The
/// halves' digits are the same integer as digit_terms' (digit b = half 2b + 2^12 x half 2b + 1), and
/// a sum's value depends on that integer only.
constexpr int kHalves = 2 * km::kSumDigits;
constexpr std::uint64_t kBlockItems = std::uint64_t(1) << 18;

/// Adds sign x v (of a feature whose top is `top`) to a cell's kHalves halves.
__device__ __forceinline__ void add_halves(int* cell, float v, std::uint32_t top, int sign) {
  const km::HalfTerms t = km::half_terms(v, top);
  const int s = t.negative ? -sign : sign;
#pragma unroll
  for (int i = 0; i < km::kHalfPieces; ++i) {
    const int piece = km::half_piece(t, i);
    if (piece != 0) atomicAdd(cell + t.h + i, s * piece);
  }
}

/// Digit b of a cell's halves.
__device__ __forceinline__ std::int64_t half_digit(const int* cell, int b) {
  return std::int64_t(cell[2 * b]) + std::int64_t(cell[2 * b + 1]) * (std::int64_t(1) << km::kHalfBits);
}

}  // namespace streamknn::detail::gpu::kmeans
