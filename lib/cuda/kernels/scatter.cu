// Applies one resolved batch to a reference buffer: vectors into their tile slots (padded
// with zeros to whole float4 chunks, or one float2 per slot for at most two elements), targets,
// attribute words, ids and the validity mask. The batch holds at
// most one write per slot and channel, so the writes need no ordering.
#include <algorithm>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scatter.hpp"

namespace streamknn::detail::gpu {

namespace {

__global__ void scatter_kernel(ScatterParams p) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t start = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t vector_work = std::size_t(p.vector_count) * p.chunks;
  for (std::size_t i = start; i < vector_work; i += stride) {
    const std::uint32_t n = static_cast<std::uint32_t>(i / p.chunks), c = static_cast<std::uint32_t>(i % p.chunks);
    const std::uint32_t slot = p.vector_slots[n];
    const float* src = p.vectors_in + std::size_t(n) * p.dim;
    float4 v;
    const std::uint32_t d = 4 * c;
    v.x = d < p.dim ? src[d] : 0.0f;
    v.y = d + 1 < p.dim ? src[d + 1] : 0.0f;
    v.z = d + 2 < p.dim ? src[d + 2] : 0.0f;
    v.w = d + 3 < p.dim ? src[d + 3] : 0.0f;
    const std::size_t at = (std::size_t(slot / kTile) * p.chunks + c) * kTile + slot % kTile;
    if (p.chunk_floats == 2) {
      reinterpret_cast<float2*>(p.vectors)[at] = make_float2(v.x, v.y);
    } else {
      reinterpret_cast<float4*>(p.vectors)[at] = v;
    }
  }
  for (std::size_t i = start; i < p.target_count; i += stride) {
    const std::uint32_t slot = p.target_slots[i];
    if (p.labels) p.labels[slot] = p.labels_in[i];
    for (std::uint32_t o = 0; o < p.outputs; ++o) p.values[std::size_t(slot) * p.outputs + o] = p.values_in[i * p.outputs + o];
  }
  for (std::size_t i = start; i < p.attribute_count; i += stride) {
    const std::uint32_t slot = p.attribute_slots[i];
    for (std::uint32_t w = 0; w < p.attribute_words; ++w) {
      p.attributes[std::size_t(slot) * p.attribute_words + w] = p.attributes_in[i * p.attribute_words + w];
    }
  }
  for (std::size_t i = start; i < p.id_count; i += stride) {
    const std::uint32_t slot = p.id_slots[i];
    p.ids[slot] = p.ids_in[i];
    p.valid[slot] = p.ids_in[i] != kNoId;
  }
}

}  // namespace

void launch_scatter(const ScatterParams& params, cudaStream_t stream) {
  const std::size_t work = std::max<std::size_t>({std::size_t(params.vector_count) * params.chunks,
                                                  params.target_count, params.id_count, params.attribute_count});
  if (work == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((work + threads - 1) / threads, 4096));
  scatter_kernel<<<blocks, threads, 0, stream>>>(params);
  check_launch("scatter_kernel");
}

}  // namespace streamknn::detail::gpu
