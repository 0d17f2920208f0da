// The float16 copy's writes at publish (reduced.hpp): one warp per written vector.
#include <cuda_fp16.h>

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

}  // namespace

void launch_reduce(const ReduceParams& p, cudaStream_t stream) {
  if (p.vector_count == 0 || p.reduced == nullptr) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((std::size_t(p.vector_count) * 32 + threads - 1) / threads, 4096));
  reduce_kernel<<<blocks, threads, 0, stream>>>(p);
  check_launch("reduce_kernel");
}

}  // namespace streamknn::detail::gpu
