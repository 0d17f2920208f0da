// The float16 copy's parts of the reduced-precision screen (E7 of docs/cuda.md; reduced_copy.cu
// writes the copy): the query's terms of the bound, the products of a segment's points by
// float32 fused multiply-adds, and the pair's lower bound. Included by reduced_screen.cu only.
#pragma once

#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstring>

#include "core/exact_rank.hpp"
#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

/// A query's terms of the bound, rounded outwards (E7): |q|^2 from below, |q| from above, the
/// float32 dot product's relative error times |q| (twice that for L2) and its underflow term.
struct QueryTerms {
  float norm2_lo, norm_hi, gamma_norm, tiny;
};

/// The 8 float16 elements of a 16-byte chunk, as floats (exactly).
__device__ __forceinline__ void unpack8(const uint4& v, float (&x)[8]) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    __half2 h;
    std::memcpy(&h, &words[w], sizeof h);
    const float2 f = __half22float2(h);
    x[2 * w] = f.x;
    x[2 * w + 1] = f.y;
  }
}

/// acc + <8 query elements (a, b), 8 elements of the copy>, fused multiply-adds in order.
__device__ __forceinline__ float dot8(const float (&x)[8], const float4& a, const float4& b, float acc) {
  acc = __fmaf_rn(a.x, x[0], acc);
  acc = __fmaf_rn(a.y, x[1], acc);
  acc = __fmaf_rn(a.z, x[2], acc);
  acc = __fmaf_rn(a.w, x[3], acc);
  acc = __fmaf_rn(b.x, x[4], acc);
  acc = __fmaf_rn(b.y, x[5], acc);
  acc = __fmaf_rn(b.z, x[6], acc);
  acc = __fmaf_rn(b.w, x[7], acc);
  return acc;
}

/// The lower bound L of a pair's exact rank from t (the float32 <q, x~>) and the point's bounds
/// (E7): every operation rounds towards the bound, and a t that overflowed bounds nothing (-inf).
template <bool kInnerProduct>
__device__ __forceinline__ float lower_bound(float t, float norm2_lo, float err, const QueryTerms& qt) {
  if (!isfinite(t)) return -CUDART_INF_F;
  // |x~|^2 <= n(x) (1 + 2^-22) + 2^-148 (n(x) was rounded down once from a float64 sum).
  const float norm_hi = __fsqrt_ru(__fmaf_ru(norm2_lo, 1.0f + 0x1p-22f, 0x1p-148f));
  float bound;
  if constexpr (kInnerProduct) {
    // -<q, x> >= -t - (gamma |q| |x~| + tiny) - |q| e(x)
    const float slack = __fmaf_ru(qt.gamma_norm, norm_hi, __fmaf_ru(qt.norm_hi, err, qt.tiny));
    bound = __fsub_rd(-t, slack);
  } else {
    // |q - x~|^2 >= |q|^2 + n(x) - 2 t - 2 (gamma |q| |x~| + tiny); |q - x| >= |q - x~| - e(x)
    const float s = __fsub_rd(__fmaf_rd(-2.0f, t, __fadd_rd(qt.norm2_lo, norm2_lo)),
                              __fmaf_ru(qt.gamma_norm, norm_hi, qt.tiny));
    bound = __fsub_rd(__fsqrt_rd(fmaxf(s, 0.0f)), err);
  }
  return bound == bound ? bound : -CUDART_INF_F;
}

/// One query's terms from its staged row, summed by the calling warp (every lane gets them).
__device__ QueryTerms query_terms(const float4* row, std::uint32_t chunks, std::uint32_t stored_dim, bool ip) {
  const std::uint32_t lane = threadIdx.x & 31;
  double square = 0;
  for (std::uint32_t c = lane; c < chunks; c += 32) {
    const float4 v = row[c];
    square = fma(double(v.x), double(v.x), fma(double(v.y), double(v.y), fma(double(v.z), double(v.z), fma(double(v.w), double(v.w), square))));
  }
  for (int d = 16; d > 0; d >>= 1) square += __shfl_xor_sync(kFullMask, square, d);
  const double f = double(chunks * 4 + 64) * 0x1p-52;
  const exact::ScreenBound b = exact::screen_bound(stored_dim);
  const double norm = sqrt(square * (1.0 + f)) * (1.0 + 0x1p-52);
  const double factor = ip ? 1.0 : 2.0;
  return QueryTerms{__double2float_rd(square * (1.0 - f)), __double2float_ru(norm),
                    __double2float_ru(factor * b.gamma * norm * (1.0 + 0x1p-50)),
                    __double2float_ru(factor * b.tiny * (1.0 + 0x1p-50))};
}

/// Sums t = <q, x~> over the copy's chunks for each of this thread's points and the group's queries.
template <int QG, int P>
__device__ __forceinline__ void score_points(const float4* query, std::uint32_t pairs, const uint4* const (&row)[P],
                                             float (&acc)[P][QG]) {
#pragma unroll 4
  for (std::uint32_t c = 0; c < pairs; ++c) {
    float x[P][8];
#pragma unroll
    for (int i = 0; i < P; ++i) unpack8(__ldg(row[i] + std::size_t(c) * kTile), x[i]);
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      const float4 a = query[(std::size_t(j) * pairs + c) * 2], b = query[(std::size_t(j) * pairs + c) * 2 + 1];
#pragma unroll
      for (int i = 0; i < P; ++i) acc[i][j] = dot8(x[i], a, b, acc[i][j]);
    }
  }
}

}  // namespace streamknn::detail::gpu
