// The row gather (gather.hpp): one thread per element of the output rows.
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/gather.hpp"

namespace streamknn::detail::gpu {

namespace {

__global__ void gather_rows_kernel(GatherParams p) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= std::size_t(p.count) * p.stored_dim) return;
  const std::uint32_t row = std::uint32_t(i / p.stored_dim), d = std::uint32_t(i % p.stored_dim);
  const std::uint32_t slot = p.slots[row];
  const float* v = static_cast<const float*>(p.vectors);
  p.rows[i] = p.chunk_floats == 2
                  ? v[std::size_t(slot) * 2 + d]
                  : v[((std::size_t(slot / kTile) * p.chunks + d / 4) * kTile + slot % kTile) * 4 + d % 4];
}

}  // namespace

void launch_gather_rows(const GatherParams& p, cudaStream_t stream) {
  const std::size_t n = std::size_t(p.count) * p.stored_dim;
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  gather_rows_kernel<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
  check_launch("gather_rows_kernel");
}

}  // namespace streamknn::detail::gpu
