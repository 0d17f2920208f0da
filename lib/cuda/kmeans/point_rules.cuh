// Device rules the K-means kernels share: the one-step kernels of an iteration (kmeans_kernels.cu)
// and the queued run's one kernel (run_kernel.cu) apply the same Hamerly test in float32 rounded
// outward and the same full scan's nearest two and settle32, so a point gets the same bounds and
// label on either path; sum_kernels.cu's shared table of 12-bit halves of the exact sums.
#pragma once

#include <cstdint>

#include "cuda/kmeans/kmeans_kernels.hpp"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::gpu::kmeans {

namespace km = streamknn::detail::kmeans;
namespace ex = streamknn::detail::exact;

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

/// The screen's bound (km::PruneBound) with float32 constants rounded outward, for Hamerly's
/// test in float32: every step rounded up (an upper bound) or down (a lower one), so a result
/// bounds what the float64 formula of kmeans_exact.hpp bounds, with no float64 work per point.
struct Bound32 {
  float tiny;  // >= b.tiny
  float up;    // >= 1 / (1 - gamma)
  float down;  // <= 1 / (1 + gamma)
};
__device__ __forceinline__ Bound32 bound32(const km::PruneBound& b) {
  return Bound32{__double2float_ru(b.tiny), __double2float_ru(b.up), __double2float_rd(b.down)};
}
/// Bounds on the exact squared distance, and the distance, of a pair whose screen is r
/// (km::upper_sq, lower_sq, upper_dist, lower_dist).
__device__ __forceinline__ float upper_sq32(float r, const Bound32& b) { return __fmul_ru(__fadd_ru(r, b.tiny), b.up); }
__device__ __forceinline__ float lower_sq32(float r, const Bound32& b) {
  const float x = __fsub_rd(r, b.tiny);
  return x > 0 ? __fmul_rd(x, b.down) : 0.0f;
}
__device__ __forceinline__ float upper_dist32(float r, const Bound32& b) { return __fsqrt_ru(upper_sq32(r, b)); }
__device__ __forceinline__ float lower_dist32(float r, const Bound32& b) { return __fsqrt_rd(lower_sq32(r, b)); }

/// Hamerly's test of the point x labelled with `centroid`, in float32 rounded outward: its bounds
/// first move with the centroids (delta_c: its centroid's movement bound, delta_other: the largest
/// of the others'); true (the label stays, u and l are its bounds) when u is below the centroid's
/// half gap or l; where it is not at first, u is tightened to a fresh screen of the distance
/// before the second look.
__device__ __forceinline__ bool keeps_label(const float* x, const float* centroid, std::uint32_t d, const Bound32& b,
                                            float half_gap, float delta_c, float delta_other, float& u, float& l) {
  u = __fadd_ru(u, delta_c);
  l = fmaxf(__fsub_rd(l, delta_other), 0.0f);
  const float keep = fmaxf(half_gap, l);
  if (u < keep) return true;
  u = upper_dist32(km::screen(x, centroid, d), b);
  return u < keep;
}

/// A centroid's half gap (rounded down) from its smallest screen to another centroid: lower_dist
/// is non-decreasing in the screen, so that screen's bound is the smallest of the bounds.
__device__ __forceinline__ float half_gap_of(float nearest_screen, const Bound32& b) {
  return __fmul_rd(0.5f, lower_dist32(nearest_screen, b));
}

/// Movement bounds rounded up to float32 (Moves): what Hamerly's test adds to and takes away
/// from a point's bounds.
struct Moves32 {
  float max1, max2;
  std::uint32_t argmax;
  /// The largest movement of the centroids other than c.
  __device__ __forceinline__ float other_than(std::uint32_t c) const { return c == argmax ? max2 : max1; }
};
__device__ __forceinline__ Moves32 moves32(const Moves& m) {
  return Moves32{__double2float_ru(m.max1), __double2float_ru(m.max2), m.argmax};
}

/// Whether a queued iteration ends the loop: an empty cluster (the host relocates), or loop_stop.
/// A queued iteration is never a run's first (which labels every point): its `it` is 1.
__device__ __forceinline__ bool queued_stop(bool empty, std::uint32_t changed, const double* shift2, std::uint32_t k,
                                            double tol) {
  return empty || km::loop_stop(1, changed, shift2, k, tol) != km::LoopStop::Continue;
}

/// A point's label and bounds from its full scan (km::settle), in float32 where the screen
/// separates the nearest centroid, as it does but for close calls: settle's first test with
/// Bound32's outward-rounded factors (never looser than the float64 test), else km::settle, whose
/// bounds come back rounded outward. u >= the distance to `best`, l <= every other's.
__device__ __forceinline__ void settle32(const float* x, const float* centroids, std::uint32_t k, std::uint32_t d,
                                        const km::PruneBound& b, const Bound32& b32, const km::NearestTwo& near,
                                        std::uint32_t& best, float& u, float& l) {
  const float top = upper_sq32(near.r1, b32);
  if (k == 1 || lower_sq32(near.r2, b32) > top) {
    best = near.j1;
    u = __fsqrt_ru(top);
    l = k == 1 ? km::kInfinityF : lower_dist32(near.r2, b32);
    return;
  }
  double ud, ld;
  km::settle(x, centroids, k, d, b, near.r1, near.j1, near.r2, best, ud, ld);
  u = __double2float_ru(ud);
  l = __double2float_rd(ld);
}

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
