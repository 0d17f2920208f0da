// Exact ranking of stored float32 vectors, shared by the CPU backend and the CUDA kernels (compiled
// by both: every function is __host__ __device__ under nvcc). The float32 passes only screen;
// this header turns a query's screened candidates into its answers:
//   - the float64 key of a pair (squared L2 of the stored forms, or -<q, p>) with a proven error
//     bound, so most comparisons are decided in float64;
//   - an error-free comparison (ExactSum: a 640-bit fixed-point sum of the exact pieces of every
//     term) for the pairs whose float64 intervals overlap: exact ties go to the smaller id;
//   - the certificate that the screen's k' candidates hold the exact k best (screen_certified);
//   - the reported distance, the exact distance rounded once to float32 (report()).
// docs/cuda.md ("Exact ranking") states the bounds and their proofs. Summation orders are fixed
// and every fused multiply-add is written out, so both backends compute the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"

namespace streamknn::detail::exact {

/// Candidates the float32 screen keeps per query for k answers (the selection kernels and the
/// CPU heaps take it as their k): k + kScreenSlack, at most `limit` (and at least k). The slack
/// only has to separate the k-th exact distance from the last candidate's by the screen's error
/// (about 10^-5 relative, 10^-4 at 1,000 dimensions): on random data the eight next neighbours
/// lie farther than that in every dimension from 1 to 4,096 (uniform 784-d: the 136th of 70,000
/// lies about 10^-3 beyond the 128th); ties wider than the slack fail the certificate and take
/// the fallback. Narrow, because every kernel before the re-rank runs at this k: a wider screen
/// keeps longer lists and leaves fewer strategies (kernels with a largest k) open to a batch.
inline constexpr std::uint32_t kScreenSlack = 8;
STREAMKNN_HD std::uint32_t screen_width(std::uint32_t k, std::uint32_t limit) {
  const std::uint32_t w = k + kScreenSlack;
  return w < limit ? w : (k > limit ? k : limit);
}

STREAMKNN_HD double fma64(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
STREAMKNN_HD double sqrt64(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}
STREAMKNN_HD std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
STREAMKNN_HD float float_of_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
STREAMKNN_HD std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
/// The next float32 above / below a finite non-negative x.
STREAMKNN_HD float next_up(float x) { return float_of_bits(bits_of(x) + 1); }
STREAMKNN_HD float next_down(float x) { return x == 0.0f ? 0.0f : float_of_bits(bits_of(x) - 1); }

/// An exact sum of doubles that are integer multiples of 2^-320 below 2^318 in magnitude:
/// 640-bit two's complement fixed point, bit 0 worth 2^-320. Every piece of every term of a
/// float32 pair lies on that grid (float32 values are multiples of 2^-149, so products of them
/// and of their float64 differences are multiples of 2^-298; the largest term is below 2^258).
struct ExactSum {
  static constexpr int kLimbs = 10;
  std::uint64_t limb[kLimbs] = {};

  /// Adds x (or -x) exactly. x must lie on the grid above (or be zero).
  STREAMKNN_HD void add(double x, bool negate = false) {
    if (x == 0.0) return;
    const std::uint64_t b = bits_of(x);
    if (b >> 63) negate = !negate;
    const int e = int((b >> 52) & 0x7ff);
    std::uint64_t m = (b & ((std::uint64_t(1) << 52) - 1)) | (e ? std::uint64_t(1) << 52 : 0);
    int pos = (e ? e : 1) - 1075 + 320;  // bit index of m's lowest bit
    if (pos < 0) {  // the low bits are zero (x is on the grid)
      m >>= -pos;
      pos = 0;
    }
    const int at = pos / 64, sh = pos % 64;
    const std::uint64_t lo = m << sh, hi = sh ? m >> (64 - sh) : 0;
    if (!negate) {
      std::uint64_t carry = 0;
      for (int i = at; i < kLimbs; ++i) {
        const std::uint64_t add = i == at ? lo : i == at + 1 ? hi : 0;
        const std::uint64_t s = limb[i] + add, t = s + carry;
        carry = std::uint64_t(s < add) + std::uint64_t(t < s);
        limb[i] = t;
        if (carry == 0 && i > at) break;
      }
    } else {
      std::uint64_t borrow = 0;
      for (int i = at; i < kLimbs; ++i) {
        const std::uint64_t sub = i == at ? lo : i == at + 1 ? hi : 0;
        const std::uint64_t s = limb[i] - sub, t = s - borrow;
        borrow = std::uint64_t(limb[i] < sub) + std::uint64_t(s < borrow);
        limb[i] = t;
        if (borrow == 0 && i > at) break;
      }
    }
  }
  /// -1, 0 or +1.
  STREAMKNN_HD int sign() const {
    if (limb[kLimbs - 1] >> 63) return -1;
    for (int i = 0; i < kLimbs; ++i) {
      if (limb[i]) return 1;
    }
    return 0;
  }
};

/// s + e == a - b exactly (Knuth's TwoSum, in float64).
STREAMKNN_HD void two_diff(double a, double b, double& s, double& e) {
  s = a - b;
  const double bb = a - s;  // the part of -b that made it into s
  e = (a - (s + bb)) + (bb - b);
}
/// h + l == a * b exactly (no underflow on the grid of ExactSum).
STREAMKNN_HD void two_product(double a, double b, double& h, double& l) {
  h = a * b;
  l = fma64(a, b, -h);
}

/// Adds (or subtracts) the exact squared L2 term (q - p)^2 of two float32 values.
STREAMKNN_HD void add_square_term(ExactSum& acc, float q, float p, bool negate) {
  double s, e;
  two_diff(double(q), double(p), s, e);
  double h, l;
  two_product(s, s, h, l);
  acc.add(h, negate);
  acc.add(l, negate);
  if (e != 0.0) {
    two_product(2.0 * s, e, h, l);
    acc.add(h, negate);
    acc.add(l, negate);
    two_product(e, e, h, l);
    acc.add(h, negate);
    acc.add(l, negate);
  }
}

/// A pair's float64 key and the bound on its error: |key - exact| <= err (docs/cuda.md).
struct Key {
  double key = 0;
  double err = 0;
};

/// float64 keys: squared L2 summed in dimension order by fused multiply-adds of the rounded
/// differences, or -<q, p> likewise. err = (2n + 8) 2^-53 times the key (L2) or sum |q_i p_i|
/// (inner product); n = dimensions. Coordinates come through the accessor `at(i)`.
template <class Point>
STREAMKNN_HD Key float64_key(const float* q, const Point& at, std::uint32_t n, bool inner_product) {
  double acc = 0, mag = 0;
  if (inner_product) {
    for (std::uint32_t i = 0; i < n; ++i) {
      const double a = q[i], b = at(i);
      acc = fma64(a, b, acc);
      mag = fma64(a < 0 ? -a : a, b < 0 ? -b : b, mag);
    }
    acc = -acc;
  } else {
    for (std::uint32_t i = 0; i < n; ++i) {
      const double d = double(q[i]) - double(at(i));
      acc = fma64(d, d, acc);
    }
    mag = acc;
  }
  return Key{acc, mag * (double(2 * n + 8) * 0x1p-53)};
}

/// sign(exact(a) - exact(b)) for the pairs (q, a) and (q, b).
template <class Point>
STREAMKNN_HD int exact_compare(const float* q, const Point& a, const Point& b, std::uint32_t n, bool inner_product) {
  ExactSum acc;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (inner_product) {
      acc.add(double(q[i]) * double(a(i)), true);  // float32 products are exact in float64
      acc.add(double(q[i]) * double(b(i)), false);
    } else {
      add_square_term(acc, q[i], a(i), false);
      add_square_term(acc, q[i], b(i), true);
    }
  }
  return acc.sign();
}

/// Adds the pair (q, p)'s exact key to the error-free sum acc: sum (q_i - p_i)^2, or -<q, p> for
/// the inner product (float32 products are exact in float64).
template <class Point>
STREAMKNN_HD void add_exact_key(ExactSum& acc, const float* q, const Point& p, std::uint32_t n, bool inner_product) {
  for (std::uint32_t i = 0; i < n; ++i) {
    if (inner_product) {
      acc.add(double(q[i]) * double(p(i)), true);
    } else {
      add_square_term(acc, q[i], p(i), false);
    }
  }
}

/// Whether two stored points hold the same coordinates (then every distance from a query ties).
template <class Point>
STREAMKNN_HD bool same_point(const Point& a, const Point& b, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    if (a(i) != b(i)) return false;
  }
  return true;
}

/// The (exact key, id) order: float64 intervals decide where they are apart, else the exact sum.
template <class Point>
STREAMKNN_HD bool exact_less(const float* q, const Key& ka, std::uint64_t ida, const Point& a, const Key& kb,
                             std::uint64_t idb, const Point& b, std::uint32_t n, bool inner_product) {
  if (ka.key + ka.err < kb.key - kb.err) return true;
  if (kb.key + kb.err < ka.key - ka.err) return false;
  if (ida == idb) return false;
  if (same_point(a, b, n)) return ida < idb;  // duplicates tie without the exact sum
  const int s = exact_compare(q, a, b, n, inner_product);
  return s < 0 || (s == 0 && ida < idb);
}

/// The float32 screen's error (docs/cuda.md): for any evaluation order of one pair's float32 rank
/// r over `padded` terms (the stored dimension padded as either backend pads it),
///   L2: |r - S| <= gamma S + tiny,   inner product: |r - X| <= gamma sum|q_i p_i| + tiny.
struct ScreenBound {
  double gamma = 0;  ///< +inf where the dimension is too large for the bound (every query then falls back)
  double tiny = 0;   ///< the subnormal results' absolute error
};
STREAMKNN_HD ScreenBound screen_bound(std::uint32_t stored_dim) {
  const double m = double((stored_dim + 7) / 8 * 8 + 8);
  const double mu = m * 0x1p-24;
  ScreenBound b;
  b.gamma = mu < 0.5 ? mu / (1.0 - mu) * (1.0 + 0x1p-40) : 1.0 / 0.0;
  b.tiny = m * 0x1p-146;
  return b;
}

/// An upper bound on the float32 screen rank of any squared-L2 pair whose exact key is at most
/// `limit` (the screen's error: |r - S| <= gamma S + tiny): a float32 pass that keeps every pair
/// ranked at or below it misses none of them.
STREAMKNN_HD double screen_rank_bound(double limit, const ScreenBound& b) {
  return (limit * (1.0 + b.gamma) + b.tiny) * (1.0 + 0x1p-40);
}

/// The float a float32 screen compares squared-L2 ranks against for the key bound hi + lo over
/// vectors of stored_dim floats: screen_rank_bound rounded up, so `rank <= limit` keeps every pair
/// whose exact key may lie within the bound and `rank > limit` proves a pair beyond it (the
/// radius rule's pass, the exact fallback's gather). +inf, which proves nothing, for the inner
/// product (its float32 rank's error grows with the norms) and for bounds past 2^127: a rank that
/// overflowed to +inf shows only that its key is that large.
STREAMKNN_HD float screen_rank_limit(double hi, double lo, std::uint32_t stored_dim, bool inner_product) {
  const float infinity = float_of_bits(0x7f800000u);
  if (inner_product) return infinity;
  const double bound = screen_rank_bound(hi + lo, screen_bound(stored_dim));
  if (!(bound < 0x1p127)) return infinity;  // NaN too
  if (bound <= 0) return 0.0f;  // no rank lies below zero
  float limit = float(bound);
  if (double(limit) < bound) limit = float_of_bits(bits_of(limit) + 1);  // the next float up
  return limit;
}

/// True when no point outside a full list of screened candidates can rank before the k-th answer
/// (docs/cuda.md, the certificate). kth: the k-th answer's key; far: the largest key of the list
/// (with far_mag its sum |q_i p_i| for the inner product); outside_mag: a bound on sum |q_i x_i|
/// of every stored x (|q| times the largest stored norm; inner product only).
STREAMKNN_HD bool screen_certified(const Key& kth, const Key& far, double far_mag, double outside_mag,
                                   const ScreenBound& b, bool inner_product) {
  const double kth_hi = (kth.key + kth.err) * (1.0 + 0x1p-50);
  if (inner_product) {
    const double far_lo = far.key - far.err - b.gamma * far_mag - b.tiny;
    const double slack = (b.gamma * outside_mag + b.tiny) * (1.0 + 0x1p-50);
    const double bound = far_lo - slack;
    return bound - (bound < 0 ? -bound : bound) * 0x1p-50 > kth_hi;
  }
  double far_lo = far.key - far.err;
  if (far_lo < 0) far_lo = 0;
  // Outside x: S_x >= (r_x - tiny) / (1 + gamma) >= (r_far - tiny) / (1 + gamma)
  //                 >= (S_far (1 - gamma) - 2 tiny) / (1 + gamma).
  const double lhs = (far_lo * (1.0 - b.gamma) - 2.0 * b.tiny) * (1.0 - 0x1p-50);
  return lhs > kth_hi * (1.0 + b.gamma) * (1.0 + 0x1p-50);
}

// ---- reported distances -------------------------------------------------------------------------

/// Rounds the exact value V (> 0) of a pair, known to lie in [key - err, key + err], to the float32
/// that `f` of V rounds to, where f is sqrt (L2, haversine's chord) or the identity scaled by
/// `scale` (cosine's 0.5, inner product's 1): fast where the interval falls inside one rounding
/// interval, else decided exactly against the midpoints. `exact_minus(m)` returns the sign of
/// V - m exactly for a double m on ExactSum's grid.
template <class ExactMinus>
STREAMKNN_HD float round_once(const Key& k, bool root, double scale, const ExactMinus& exact_minus) {
  const double v = k.key * scale;
  const bool neg = v < 0;
  const double a = neg ? -v : v + 0.0;  // (+0.0 for a zero of either sign)
  const float f0 = float(root ? sqrt64(a) : a);
  const float below = next_down(f0), above = next_up(f0);
  // Rounding interval of f0 in terms of V: the midpoints to its neighbours, mapped back.
  const double mlo = 0.5 * (double(below) + double(f0)), mhi = 0.5 * (double(f0) + double(above));
  const double vlo = root ? mlo * mlo : mlo, vhi = root ? mhi * mhi : mhi;  // exact: 25-bit midpoints
  const double e = k.err * (scale < 0 ? -scale : scale) * (1.0 + 0x1p-50);
  float r;
  if ((f0 == 0.0f || a - e > vlo) && a + e < vhi) {
    r = f0;
  } else {
    // Signs of |V| - vlo and |V| - vhi, exactly: V = scale * exact, so compare exact to v / scale.
    const double s = neg ? -scale : scale;
    const int lo = f0 == 0.0f ? 1 : exact_minus(vlo / s) * (s < 0 ? -1 : 1);
    const int hi = exact_minus(vhi / s) * (s < 0 ? -1 : 1);
    const bool f0_even = (bits_of(f0) & 1u) == 0;
    if (lo < 0) {
      r = below;  // the neighbour below (never further: the float64 error is far below an ulp)
    } else if (lo == 0) {
      r = f0_even ? f0 : below;
    } else if (hi < 0) {
      r = f0;
    } else if (hi == 0) {
      r = f0_even ? f0 : above;
    } else {
      r = above;
    }
  }
  return neg ? -r : r;
}

/// asin(x) for 0 <= x <= 1 from + - * / sqrt only (bit-identical on both backends): the Taylor
/// series below 0.5 (error below 2^-52 relative), asin(x) = pi/2 - 2 asin(sqrt((1 - x) / 2)) above.
STREAMKNN_HD double portable_asin(double x) {
  bool reflect = x > 0.5;
  double t = reflect ? sqrt64(0.5 * (1.0 - x)) : x;
  const double t2 = t * t;
  double term = t, sum = t, c = 1.0;  // term: t^(2j+1) times (2j)! / (4^j j!^2)
  for (int j = 1; j < 60; ++j) {
    c = c * double(2 * j - 1) / double(2 * j);
    term = term * t2;
    const double add = c * term / double(2 * j + 1);
    sum += add;
    if (add < sum * 0x1p-60) break;
  }
  return reflect ? 1.5707963267948966 - 2.0 * sum : sum;
}

/// Metric numbers as streamknn::Metric orders them (the kernels pass the metric as an int).
inline constexpr int kL2 = 0, kInnerProduct = 1, kCosine = 2, kHaversine = 3;

/// The reported distance of a pair whose key is k, the exact distance rounded once to float32:
/// L2 sqrt(S), inner product -<q, p> and cosine S / 2 correctly rounded (to nearest, ties to
/// even); haversine 2 R asin(sqrt(S) / 2) evaluated in float64 (portable_asin, relative error
/// below 2^-40) and rounded to nearest: within one float32 step of the exact value (faithful).
/// `exact_minus(m)` returns sign(exact key - m) (see round_once).
template <class ExactMinus>
STREAMKNN_HD float report(int metric, const Key& k, const ExactMinus& exact_minus) {
  switch (metric) {
    case kL2: return round_once(k, true, 1.0, exact_minus);
    case kCosine: return round_once(k, false, 0.5, exact_minus);
    case kHaversine: {
      const double s = k.key > 0 ? k.key : 0.0;
      const double half_chord = 0.5 * sqrt64(s);
      return float(2.0 * 6371008.8 * portable_asin(half_chord < 1.0 ? half_chord : 1.0));
    }
    default: return round_once(k, false, 1.0, exact_minus);
  }
}

/// The pair (q, p)'s exact key minus m, as a sign (the exact_minus of report()).
template <class Point>
struct ExactMinus {
  const float* q;
  const Point* p;
  std::uint32_t n;
  bool inner_product;
  STREAMKNN_HD int operator()(double m) const {
    ExactSum acc;
    add_exact_key(acc, q, *p, n, inner_product);
    acc.add(m, true);
    return acc.sign();
  }
};

}  // namespace streamknn::detail::exact
