// The int8 copy's parts of the reduced-precision screen (E8 of docs/cuda.md; reduced_copy.cu
// writes the copy): the query's 16-bit form and terms, the products of a segment's points by
// 4-way byte dot products (exact integer sums), and the pair's lower bound. Included by
// reduced_screen.cu only.
#pragma once

#include <math_constants.h>

#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

/// A query's terms: q = s_q (256 h + l) + rho with h, l signed bytes (a 16-bit code per element
/// split in two, so the products stay byte dot products), and the sums the bound needs.
struct Terms8 {
  float sigma_f, delta_f;  ///< sum q_i within delta_f of sigma_f
  float sq, rho_codes;  ///< s_q; |rho| 127 sqrt(dim), rounded up
  float norm2_lo, norm_hi;
};

/// One query's codes into `codes` (per 16-byte chunk of the copy: the 16 high bytes, then the 16
/// low ones) and its terms, by the calling warp; a query past the batch (`present` false) gets
/// zeros. s_q is the largest |q_i| over 32,639, rounded up, so every code fits 16 bits; each
/// residual rho_i = q_i - s_q b_i is exact in float64 (b_i = 0 gives q_i itself; otherwise
/// |q_i| >= s_q / 2, so both terms are multiples of half s_q's unit in the last place and their
/// difference, at most s_q / 2, has at most 25 significant bits).
__device__ __forceinline__ Terms8 stage_query_int8(const float4* row, std::uint32_t chunks, std::uint32_t pairs,
                                                   std::uint32_t stored_dim, bool present, uint4* codes) {
  const std::uint32_t lane = threadIdx.x & 31;
  double square = 0, sum = 0, abs_sum = 0;
  float maxabs = 0;
  if (present) {
    for (std::uint32_t c = lane; c < chunks; c += 32) {
      const float4 v = row[c];
      const float e[4] = {v.x, v.y, v.z, v.w};
      for (int t = 0; t < 4; ++t) {
        square = fma(double(e[t]), double(e[t]), square);
        sum += double(e[t]);
        abs_sum += fabs(double(e[t]));
        maxabs = fmaxf(maxabs, fabsf(e[t]));
      }
    }
  }
  for (int d = 16; d > 0; d >>= 1) {
    square += __shfl_xor_sync(kFullMask, square, d);
    sum += __shfl_xor_sync(kFullMask, sum, d);
    abs_sum += __shfl_xor_sync(kFullMask, abs_sum, d);
    maxabs = fmaxf(maxabs, __shfl_xor_sync(kFullMask, maxabs, d));
  }
  const float sq = __double2float_ru(__ddiv_ru(double(maxabs), 32639.0));
  // An element per lane at a time (a division each), its two bytes stored where its chunk's
  // high and low words hold them (element 4 w + t is byte t of word w, little-endian).
  double rho2 = 0;
  const float* const elements = reinterpret_cast<const float*>(row);
  auto* const bytes = reinterpret_cast<unsigned char*>(codes);
  for (std::uint32_t i = lane; i < 16 * pairs; i += 32) {
    const float x = present && i < 4 * chunks ? elements[i] : 0.0f;
    int b = sq > 0 ? int(rint(double(x) / double(sq))) : 0;
    b = max(-32639, min(32639, b));
    const double r = double(x) - double(sq) * double(b);  // exact (see above)
    rho2 = fma(r, r, rho2);
    const int h = (b + 128) >> 8, l = b - 256 * h;
    bytes[32 * (i / 16) + i % 16] = static_cast<unsigned char>(h & 0xff);
    bytes[32 * (i / 16) + 16 + i % 16] = static_cast<unsigned char>(l & 0xff);
  }
  for (int d = 16; d > 0; d >>= 1) rho2 += __shfl_xor_sync(kFullMask, rho2, d);
  const double n = double(4 * chunks + 64), f = n * 0x1p-52;
  Terms8 t;
  const double delta = n * 0x1p-53 * abs_sum * (1.0 + 0x1p-40);
  t.sigma_f = __double2float_rn(sum);
  t.delta_f = __double2float_ru(delta + fabs(sum - double(t.sigma_f)) * (1.0 + 0x1p-50));
  t.sq = sq;
  t.rho_codes = __double2float_ru(sqrt(rho2 * (1.0 + f)) * (1.0 + 0x1p-50) * 127.0 * sqrt(double(stored_dim)) *
                                  (1.0 + 0x1p-50));
  t.norm2_lo = __double2float_rd(square * (1.0 - f));
  t.norm_hi = __double2float_ru(sqrt(square * (1.0 + f)) * (1.0 + 0x1p-50));
  return t;
}

/// acc + <chunk x of a point, chunk of query codes q>.
__device__ __forceinline__ int dot16(const uint4& x, const uint4& q, int acc) {
  acc = __dp4a(int(x.x), int(q.x), acc);
  acc = __dp4a(int(x.y), int(q.y), acc);
  acc = __dp4a(int(x.z), int(q.z), acc);
  return __dp4a(int(x.w), int(q.w), acc);
}

/// Sums th = <a, h>, tl = <a, l> over the copy's chunks for each of this thread's points and queries.
template <int QG, int P>
__device__ __forceinline__ void score_points_int8(const uint4* codes, std::uint32_t pairs,
                                                  const uint4* const (&row)[P], int (&th)[P][QG], int (&tl)[P][QG]) {
#pragma unroll 2
  for (std::uint32_t c = 0; c < pairs; ++c) {
    uint4 x[P];
#pragma unroll
    for (int i = 0; i < P; ++i) x[i] = __ldg(row[i] + std::size_t(c) * kTile);
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      const uint4 h = codes[(std::size_t(j) * pairs + c) * 2], l = codes[(std::size_t(j) * pairs + c) * 2 + 1];
#pragma unroll
      for (int i = 0; i < P; ++i) {
        th[i][j] = dot16(x[i], h, th[i][j]);
        tl[i][j] = dot16(x[i], l, tl[i][j]);
      }
    }
  }
}

/// The lower bound of the pair's exact rank (L2 / cosine: |q - x|; inner product: -<q, x>).
/// <q, x> = c sigma' + s s_q T + s <rho, a> + <q, r>, with |sigma' - sigma| <= delta,
/// |<rho, a>| <= |rho| 127 sqrt(dim), |<q, r>| <= |q| e. Every float operation rounds towards
/// the bound (U up, the bound down); an overflow or NaN bounds nothing.
template <bool kInnerProduct>
__device__ __forceinline__ float lower_bound_int8(int th, int tl, const float4& m, const Terms8& t) {
  const long long T = 256ll * th + tl;
  const float t_up = __ll2float_ru(T);
  const float st = T >= 0 ? __fmul_ru(m.x, t.sq) : __fmul_rd(m.x, t.sq);
  const float p2 = __fmul_ru(st, t_up);
  const float p1 = __fmaf_ru(m.y, t.sigma_f, __fmul_ru(fabsf(m.y), t.delta_f));
  const float slack = __fmaf_ru(m.x, t.rho_codes, __fmul_ru(t.norm_hi, m.w));
  const float u = __fadd_ru(__fadd_ru(p1, p2), slack);
  float bound;
  if constexpr (kInnerProduct) {
    bound = -u;
  } else {
    const float d2 = __fsub_rd(__fadd_rd(t.norm2_lo, m.z), __fmul_ru(2.0f, u));
    bound = __fsqrt_rd(fmaxf(d2, 0.0f));
  }
  return bound == bound ? bound : (kInnerProduct ? -CUDART_INF_F : 0.0f);
}

}  // namespace streamknn::detail::gpu
