// A chunk's input block (queries, id ranges, thresholds) read from the mapped pinned staging by the
// first kernel of a small batch's graph, in place of a host-to-device copy node: in a graph a copy
// of 32 KB or more took 6-8 us longer host to host than one of up to 16 KB, and a kernel reading
// the staging over the bus did not (H200, bench_graph_copies; see kGraphCopyMaxBytes in
// cuda_backend.cpp).
#include <string>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/copy_in.hpp"

namespace streamknn::detail::gpu {

namespace {

constexpr int kCopyInThreads = 256;

/// One 16-byte word per thread: every load of the bus is in flight at once (a graph's block is at
/// most 16 queries of up to 64 KB, 256 blocks). Launched the usual way, and it never lets the next
/// kernel start early: the product after it, chained, would have its blocks placed on the SMs while
/// this kernel ran, unevenly (MNIST-like Q = 16 product 96.0 -> 109.5 us, Q = 8 56.0 -> 61.8 us;
/// globaltimer stamps).
__global__ void __launch_bounds__(kCopyInThreads) copy_in_kernel(const uint4* from, uint4* to, std::uint32_t words) {
  const std::uint32_t i = blockIdx.x * kCopyInThreads + threadIdx.x;
  if (i < words) to[i] = from[i];
}

}  // namespace

void launch_copy_in(const void* mapped_from, void* to, std::size_t bytes, cudaStream_t stream) {
  if (bytes % 16 != 0) throw CudaError("copy_in: " + std::to_string(bytes) + " bytes, not whole 16-byte words");
  if (bytes == 0) return;
  const std::size_t words = bytes / 16;  // the kernel indexes words with 32 bits
  if (words > 0xffffffffu) throw CudaError("copy_in: " + std::to_string(bytes) + " bytes, more than one launch copies");
  const std::size_t blocks = (words + kCopyInThreads - 1) / kCopyInThreads;
  copy_in_kernel<<<static_cast<unsigned>(blocks), kCopyInThreads, 0, stream>>>(
      static_cast<const uint4*>(mapped_from), static_cast<uint4*>(to), static_cast<std::uint32_t>(words));
  check_launch("copy_in_kernel");
}

}  // namespace streamknn::detail::gpu
