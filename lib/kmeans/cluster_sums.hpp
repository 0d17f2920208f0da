// The centroid sums of K-means (docs/kmeans.md, "Sums"), shared by the CPU backend and the CUDA
// kernels (__host__ __device__ under nvcc). They are exact integer sums, so the order in which
// points are added (threads, blocks, atomics, backends) never changes a bit.
//
// Each feature j has a unit 2^(top_j - 246), top_j the largest biased exponent field (taken as at
// least 1) among its float32 values: every value is then below 2^120 units. A value m x 2^(e - 150)
// (m its 24-bit significand, e its biased exponent, at least 1) is m shifted left by
// sh = e - top_j + 96 <= 96 bits in units, which touches at most two of five 24-bit digits; a
// cluster's sum keeps one int64 per digit (no carries: 2^32 points of digits below 2^24 stay below
// 2^56 in magnitude). Bits below the unit (of values more than 96 binades below the feature's
// largest, sh < 0) are rounded to the nearest unit, ties to even: the sum is exact to 2^-120 of
// the feature's bound 2^(top - 126), far within what a float64 sum of the values would lose.
// The float64 value of a sum is its digits carried to base 2^24 and added from the top, each
// addition rounded (a product by 2^24 is exact, so a fused multiply-add gives the same bits), times
// the unit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STREAMKNN_SUM_HD __host__ __device__ __forceinline__
#else
#define STREAMKNN_SUM_HD inline
#endif

namespace streamknn::detail::kmeans {

inline constexpr int kSumDigits = 5;      ///< 24-bit digits of a sum
inline constexpr int kDigitBits = 24;
inline constexpr int kHalfBits = kDigitBits / 2;  ///< half_terms' pieces
inline constexpr std::int64_t kDigitMask = (std::int64_t(1) << kDigitBits) - 1;

STREAMKNN_SUM_HD std::uint32_t float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#endif
}

/// v's biased exponent field, at least 1 (zero and subnormals share the exponent of 2^-126):
/// the per-feature maximum of these is the feature's `top`.
STREAMKNN_SUM_HD std::uint32_t exponent_field(float v) {
  const std::uint32_t e = (float_bits(v) >> 23) & 0xffu;
  return e == 0 ? 1u : e;
}

/// v (finite, of a feature whose top is `top`) as +-m x 2^sh units of 2^(top - 246): m its
/// significand (below 2^24), sh <= 96 the place of its lowest bit (negative: bits below the unit).
struct Scaled {
  std::uint64_t m;
  int sh;
  bool negative;
};
STREAMKNN_SUM_HD Scaled scaled(float v, std::uint32_t top) {
  const std::uint32_t bits = float_bits(v), e = (bits >> 23) & 0xffu;
  return Scaled{(bits & 0x7fffffu) | (e != 0 ? 0x800000u : 0u), int(e != 0 ? e : 1u) - int(top) + 96,
                (bits >> 31) != 0};
}

/// m x 2^-drop (drop >= 1) rounded to a whole number of units: to nearest, ties to even.
STREAMKNN_SUM_HD std::uint64_t round_to_unit(std::uint64_t m, int drop) {
  if (drop > kDigitBits) return 0;  // m < 2^24 <= half of 2^drop
  const std::uint64_t q = m >> drop, rest = m & ((std::uint64_t(1) << drop) - 1);
  const std::uint64_t half = std::uint64_t(1) << (drop - 1);
  return q + ((rest > half || (rest == half && (q & 1u) != 0)) ? 1u : 0u);
}

/// What one value adds to a sum's digits: `low` to digit `at`, `high` to digit at + 1 (zero when
/// at is the last digit).
struct DigitTerms {
  int at;
  std::int64_t low, high;
};

/// v (finite, of a feature whose top is `top`) in units of 2^(top - 246).
STREAMKNN_SUM_HD DigitTerms digit_terms(float v, std::uint32_t top) {
  const Scaled s = scaled(v, top);
  const std::int64_t sign = s.negative ? -1 : 1;
  if (s.sh >= 0) {
    const std::uint64_t t = s.m << (s.sh % kDigitBits);
    return DigitTerms{s.sh / kDigitBits, sign * std::int64_t(t & std::uint64_t(kDigitMask)),
                      sign * std::int64_t(t >> kDigitBits)};
  }
  return DigitTerms{0, sign * std::int64_t(round_to_unit(s.m, -s.sh)), 0};
}

/// The same integer as digit_terms in the form of the CUDA kernel's shared table of 12-bit halves
/// (sum_kernels.cu): +-t x 2^(12 h) units, t below 2^36, so three 12-bit pieces from half h (at
/// h = 8, sh = 96, t is below 2^24: two pieces, the last half 9).
struct HalfTerms {
  int h;
  std::uint64_t t;
  bool negative;
};
STREAMKNN_SUM_HD HalfTerms half_terms(float v, std::uint32_t top) {
  const Scaled s = scaled(v, top);
  if (s.sh >= 0) return HalfTerms{s.sh / kHalfBits, s.m << (s.sh % kHalfBits), s.negative};
  return HalfTerms{0, round_to_unit(s.m, -s.sh), s.negative};
}

inline constexpr int kHalfPieces = 3;  ///< a HalfTerms' pieces
/// Piece i (below 2^12) of t, added to half t.h + i.
STREAMKNN_SUM_HD int half_piece(const HalfTerms& t, int i) {
  return int((t.t >> (kHalfBits * i)) & ((std::uint64_t(1) << kHalfBits) - 1));
}

/// Adds (sign 1) or takes away (sign -1) the row x (d values) to a cluster's digits (d x
/// kSumDigits), feature j in units of tops[j]: exact, so the order of additions never matters.
inline void add_row(std::int64_t* digits, const float* x, const std::uint32_t* tops, std::size_t d, std::int64_t sign) {
  for (std::size_t j = 0; j < d; ++j) {
    const DigitTerms t = digit_terms(x[j], tops[j]);
    std::int64_t* at = digits + j * kSumDigits + std::size_t(t.at);
    at[0] += sign * t.low;
    if (t.high != 0) at[1] += sign * t.high;
  }
}

/// 2^(top - 246), the unit of a feature's sums (top in [1, 254]: an exact float64 power of two).
STREAMKNN_SUM_HD double sum_unit(std::uint32_t top) { return ldexp(1.0, int(top) - 246); }

/// The float64 value of a sum's digits (kSumDigits int64, each a sum of digit terms).
STREAMKNN_SUM_HD double digits_value(const std::int64_t* digits, double unit) {
  std::int64_t c[kSumDigits];
  std::int64_t carry = 0;
  for (int i = 0; i < kSumDigits; ++i) {
    const std::int64_t t = digits[i] + carry;
    carry = t >> kDigitBits;  // floor division (arithmetic shift)
    c[i] = t & kDigitMask;
  }
  double acc = double(carry);  // the top digit's overflow: the value is carry x 2^120 + ...
  for (int i = kSumDigits - 1; i >= 0; --i) acc = acc * 0x1p24 + double(c[i]);
  return acc * unit;
}

}  // namespace streamknn::detail::kmeans

#undef STREAMKNN_SUM_HD
