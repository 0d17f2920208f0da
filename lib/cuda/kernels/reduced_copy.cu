// The reduced-precision copy's writes at publish (reduced.hpp): one warp per written vector.
#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/reduced.hpp"

namespace streamknn::detail::gpu {

namespace {

/// float16's largest finite value: the copy clamps to it, and e(x) holds what that moved.
constexpr float kHalfMax = 65504.0f;

/// One warp per written vector: its float16 elements, 8 to a 16-byte chunk, and its two bounds
/// from float64 sums (each difference x_i - x~_i and square rounded at most once, each sum of n
/// terms within n 2^-53 of its value, so the factors below cover them).
__global__ void reduce_kernel(ReduceParams p) {
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t warps = gridDim.x * blockDim.x / 32;
  for (std::uint32_t n = (blockIdx.x * blockDim.x + threadIdx.x) / 32; n < p.vector_count; n += warps) {
    const std::uint32_t slot = p.vector_slots[n];
    const float* src = p.vectors_in + std::size_t(n) * p.dim;
    uint4* row = static_cast<uint4*>(p.reduced) + std::size_t(slot / kTile) * p.pairs * kTile + slot % kTile;
    double norm2 = 0, err2 = 0;
    for (std::uint32_t c = lane; c < p.pairs; c += 32) {
      unsigned words[4];
      for (int w = 0; w < 4; ++w) {
        unsigned short bits[2];
        for (int e = 0; e < 2; ++e) {
          const std::uint32_t i = 8 * c + 2 * w + e;
          const float x = i < p.dim ? src[i] : 0.0f;
          const __half h = __float2half_rn(fminf(fmaxf(x, -kHalfMax), kHalfMax));
          const double back = double(__half2float(h)), d = double(x) - back;
          err2 = fma(d, d, err2);
          norm2 = fma(back, back, norm2);
          bits[e] = __half_as_ushort(h);
        }
        words[w] = unsigned(bits[0]) | (unsigned(bits[1]) << 16);
      }
      row[std::size_t(c) * kTile] = make_uint4(words[0], words[1], words[2], words[3]);
    }
    for (int d = 16; d > 0; d >>= 1) {
      norm2 += __shfl_xor_sync(kFullMask, norm2, d);
      err2 += __shfl_xor_sync(kFullMask, err2, d);
    }
    if (lane == 0) {
      const double f = double(2 * p.pairs * 8 + 64) * 0x1p-52;
      p.meta[2 * std::size_t(slot)] = __double2float_rd(norm2 * (1.0 - f));
      p.meta[2 * std::size_t(slot) + 1] = __double2float_ru(sqrt(err2 * (1.0 + f)) * (1.0 + 0x1p-52));
    }
  }
}

/// One warp per written vector of the int8 copy (E8 of docs/cuda.md): the offset c (the middle of
/// the vector's range) and scale s (the range's half over 127, rounded up, so every code fits),
/// codes a_i = round((x_i - c) / s), 16 to a 16-byte chunk (padding codes 0), and the bounds
/// {s, c, n(x) <= |x|^2, e(x) >= |r|} with r_i = x_i - c - s a_i over the stored elements, from
/// float64 sums as reduce_kernel's.
__global__ void reduce_int8_kernel(ReduceParams p) {
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t warps = gridDim.x * blockDim.x / 32;
  for (std::uint32_t n = (blockIdx.x * blockDim.x + threadIdx.x) / 32; n < p.vector_count; n += warps) {
    const std::uint32_t slot = p.vector_slots[n];
    const float* src = p.vectors_in + std::size_t(n) * p.dim;
    float lo = CUDART_INF_F, hi = -CUDART_INF_F;
    double norm2 = 0;
    for (std::uint32_t i = lane; i < p.dim; i += 32) {
      const float x = src[i];
      lo = fminf(lo, x);
      hi = fmaxf(hi, x);
      norm2 = fma(double(x), double(x), norm2);
    }
    for (int d = 16; d > 0; d >>= 1) {
      lo = fminf(lo, __shfl_xor_sync(kFullMask, lo, d));
      hi = fmaxf(hi, __shfl_xor_sync(kFullMask, hi, d));
      norm2 += __shfl_xor_sync(kFullMask, norm2, d);
    }
    const float c = __double2float_rn(0.5 * double(lo) + 0.5 * double(hi));
    const double reach = fmax(__dsub_ru(double(hi), double(c)), __dsub_ru(double(c), double(lo)));
    const float s = __double2float_ru(__ddiv_ru(reach, 127.0));
    const double sd = s, cd = c;
    uint4* row = static_cast<uint4*>(p.reduced) + std::size_t(slot / kTile) * p.pairs * kTile + slot % kTile;
    double err2 = 0;
    for (std::uint32_t ch = lane; ch < p.pairs; ch += 32) {
      unsigned words[4];
      for (int w = 0; w < 4; ++w) {
        unsigned word = 0;
        for (int e = 0; e < 4; ++e) {
          const std::uint32_t i = 16 * ch + 4 * w + e;
          int a = 0;
          if (i < p.dim) {
            const double dx = double(src[i]) - cd;
            a = sd > 0 ? int(fmin(fmax(rint(dx / sd), -127.0), 127.0)) : 0;
            const double r = fma(-sd, double(a), dx);
            err2 = fma(r, r, err2);
          }
          word |= (unsigned(a) & 0xffu) << (8 * e);
        }
        words[w] = word;
      }
      row[std::size_t(ch) * kTile] = make_uint4(words[0], words[1], words[2], words[3]);
    }
    for (int d = 16; d > 0; d >>= 1) err2 += __shfl_xor_sync(kFullMask, err2, d);
    if (lane == 0) {
      const double f = double(2 * p.dim + 64) * 0x1p-52;
      // each r_i within 2^-52 (|x_i| + |c|) of its computed value (one rounded difference, one fma)
      const double drift = 0x1p-51 * (sqrt(norm2 * (1.0 + f)) + sqrt(double(p.dim)) * fabs(cd));
      float4 meta;
      meta.x = s;
      meta.y = c;
      meta.z = __double2float_rd(norm2 * (1.0 - f));
      meta.w = __double2float_ru((sqrt(err2 * (1.0 + f)) + drift) * (1.0 + 0x1p-50));
      reinterpret_cast<float4*>(p.meta)[slot] = meta;
    }
  }
}

}  // namespace

void launch_reduce(const ReduceParams& p, cudaStream_t stream) {
  if (p.vector_count == 0 || p.reduced == nullptr) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((std::size_t(p.vector_count) * 32 + threads - 1) / threads, 4096));
  if (p.format == ReducedFormat::Int8) {
    reduce_int8_kernel<<<blocks, threads, 0, stream>>>(p);
    check_launch("reduce_int8_kernel");
  } else {
    reduce_kernel<<<blocks, threads, 0, stream>>>(p);
    check_launch("reduce_kernel");
  }
}

}  // namespace streamknn::detail::gpu
