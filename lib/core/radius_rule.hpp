// The radius rule shared by the CPU backend and (compiled by nvcc) the CUDA kernels: a pair is
// within a radius when its exact key (the squared L2 of the stored forms, or -<q, p>) is at most
// a bound hi + lo the engine derived from the radius (engine_filters.cpp: r * r exactly for l2,
// 2 r for cosine, r for the inner product, the squared chord of r metres for haversine). The
// float64 key and its error bound (exact_rank.hpp) decide almost every pair; the rest are decided
// by the error-free sum, so both backends include exactly the same points.
#pragma once

#include "core/exact_rank.hpp"
#include "core/host_device.hpp"

namespace streamknn::detail::exact {

/// sign(exact key of (q, p) - hi - lo); hi and lo on ExactSum's grid (or zero).
template <class Point>
struct ExactMinusPair {
  const float* q;
  const Point* p;
  std::uint32_t n;
  bool inner_product;
  STREAMKNN_HD int operator()(double hi, double lo) const {
    ExactSum acc;
    add_exact_key(acc, q, *p, n, inner_product);
    acc.add(hi, true);
    acc.add(lo, true);
    return acc.sign();
  }
};

/// Whether a pair whose float64 key is k lies within hi + lo (|lo| at most half an ulp of hi).
template <class ExactMinus>
STREAMKNN_HD bool within_limit(const Key& k, double hi, double lo, const ExactMinus& exact_minus) {
  const double margin = (hi < 0 ? -hi : hi) * 0x1p-50 + 2.0 * (lo < 0 ? -lo : lo);
  if (k.key + k.err < hi - margin) return true;
  if (k.key - k.err > hi + margin) return false;
  return exact_minus(hi, lo) <= 0;
}

}  // namespace streamknn::detail::exact
