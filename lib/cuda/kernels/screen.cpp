// The dot-product screen's proven margins (screen.hpp): host code, computed once per store shape
// from the padded dimension; the scan, the dense screen and the query-resident scan apply them.
#include "cuda/kernels/screen.hpp"

#include <cmath>
#include <limits>

namespace streamknn::detail::gpu {

// Why the screen never drops a pair within the threshold. u = 2^-24, D = padded_dim,
// g = (D + 8) u / (1 - (D + 8) u); X = |x|^2, Qn = |q|^2, d^2 = |x - q|^2 (exact reals), and N,
// qn the float sums of x_i^2, q_i^2 (any order; FMA or not): |N - X| <= g X, |qn - Qn| <= g Qn;
// P the dot product, |P - x.q| <= h |x||q| (float sums in any order: h = g; the tensor product's
// h is below). The exact rank R (the direct form: a rounded difference squared and added, D
// times, all terms >= 0) is >= (1 - g) d^2, so R <= T gives d^2 <= T / (1 - g). With
// N - 2P = d^2 - Qn + e, |e| <= g X + 2 h |x||q| <= (g + h) X + h Qn, and the screened value
// V = fl(N - 2P) (one rounding):
//   V <= (N - 2P) + u (d^2 + Qn + |e|) <= (1 + u) d^2 - (1 - u - (1 + u) h) Qn + (1 + u)(g + h) X
//     <= A T - B qn + C N,   A = (1 + u) / (1 - g), B = (1 - u - (1 + u) h) / (1 + g),
//                            C = (1 + u)(g + h) / (1 - g)
// using X <= N / (1 - g) and Qn >= qn / (1 + g). The kernel evaluates A T - B qn in double with
// A raised and B lowered by 2^-40 (more than double rounding can take away), rounds it up to
// float, and adds C N with an upward-rounded FMA, so its limit is at least the real bound. The
// slack (2^-100 for float sums) covers roundings in the subnormal range (each at most 2^-150
// absolute), and norms of FLT_MAX / 16 or more (where a sum could overflow) skip the test.
namespace {
/// g above: the relative error bound of a float sum of padded_dim products or squares.
double float_sum_error(std::uint32_t padded_dim) {
  const double u = std::ldexp(1.0, -24), n = double(padded_dim) + 8;
  return n * u / (1 - n * u);
}

ScreenBounds screen_bounds_for(std::uint32_t padded_dim, double h, double slack) {
  const double u = std::ldexp(1.0, -24), g = float_sum_error(padded_dim);
  const double widen = std::ldexp(1.0, -40);
  ScreenBounds s;
  s.bound_scale = (1 + u) / (1 - g) * (1 + widen);
  s.query_scale = (1 - u - (1 + u) * h) / (1 + g) * (1 - widen);
  s.slack = slack;
  const double c = (1 + u) * (g + h) / (1 - g);
  s.norm_scale = static_cast<float>(c);
  if (double(s.norm_scale) < c) s.norm_scale = std::nextafter(s.norm_scale, std::numeric_limits<float>::infinity());
  s.huge = std::numeric_limits<float>::max() / 16;
  return s;
}
}  // namespace

ScreenBounds screen_bounds(std::uint32_t padded_dim) {
  return screen_bounds_for(padded_dim, float_sum_error(padded_dim), std::ldexp(1.0, -100));
}

// The tensor product's h (dense_product.cu: mma.sync m16n8k8, 8 products per instruction, TF32
// operands). Each operand is rounded to TF32 (cvt.rna: 10 fraction bits, |x~ - x| <= 2^-11 |x|),
// so |x~_i q~_i - x_i q_i| <= t |x_i q_i|, t = 2^-10 + 2^-22. A tensor core's sum is not IEEE's;
// the published models of the V100 to the B200 (Fasi et al. 2021, Khattak and Mikaitis 2025)
// form the products exactly, align them and the accumulator to the largest keeping at least 24
// bits, truncate, and normalize the sum once: an error of at most 10 units of 2^-23 of the sum
// of the terms' magnitudes. This takes e = 2^-19 (16 units) per instruction. Over S = ceil(D / 8)
// instructions the accumulator's error is at most ((1 + e)^S - 1) sum |x~_i q~_i| (each
// instruction's terms are the accumulator, at most (1 + e)^(s - 1) of the magnitudes so far,
// and its products), so
//   h = (1 + t)(1 + e)^S - 1 + 2^-100,
// the last term for operands a tensor core may flush to zero where they are subnormal (each
// |x_i q_i| < 2^-126 |q_i|: in all at most 2^-116 (1 + Qn) for the engine's dims, at most 2^20,
// and the same with X);
// products it may flush (each below 2^-126) add at most 2^-106 absolute, so the slack is 2^-99.
ScreenBounds tensor_screen_bounds(std::uint32_t padded_dim) {
  const double t = std::ldexp(1.0, -10) + std::ldexp(1.0, -22), e = std::ldexp(1.0, -19);
  const double steps = std::ceil(double(padded_dim) / 8);
  const double h = (1 + t) * std::pow(1 + e, steps) - 1 + std::ldexp(1.0, -100);
  return screen_bounds_for(padded_dim, h, std::ldexp(1.0, -99));
}

}  // namespace streamknn::detail::gpu
