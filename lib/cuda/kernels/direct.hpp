// The direct search (kernels/direct.cu) for small batches over one-chunk stores.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/scan.hpp"

namespace streamknn::detail::gpu {

/// The direct search (kernels/direct.cu) for small batches over stores of one float4 chunk
/// (dims <= 4: positions, RL states), in place of the sample pass and the scan: one kernel whose
/// blocks each stream segments of kDirectSegment slots per query, bound their first segment by
/// the k-th smallest of its 32-slot groups' minima (k groups each hold a point at or below it)
/// and every segment by the grid-wide bound, keep the k best (rank, id) of what passes, publish
/// their k-th rank as the grid-wide bound, and hand the selection a sorted list each. It takes
/// the scan's parameters and writes the scan's layout (grid.x lists per query, grid.y queries):
/// of ScanParams it reads store, queries, ranges, num_queries, k (at most kDirectMaxK),
/// threshold (each query's grid-wide bound) and writes candidates and lengths. Ranks are the
/// scan's bits.
inline constexpr std::uint32_t kDirectMaxK = 64;
/// Slots one direct block scores per step: 256 threads x 8, so 64 groups of 32 (>= kDirectMaxK).
inline constexpr std::uint32_t kDirectSegment = 2048;
/// Direct blocks resident per SM for a store's vector width (2 or 4), metric kind and filter
/// (the occupancy calculator's; ask once per store).
int direct_blocks_per_sm(int width, bool inner_product, bool filtered);
/// Blocks per query for a store of `capacity` slots where `resident` direct blocks fit at once:
/// a segment each, the resident blocks shared between the queries (then several segments each).
std::uint32_t direct_blocks(std::uint32_t capacity, std::uint32_t num_queries, std::uint32_t resident);
/// width: StoreView::chunk_floats (2 or 4).
void launch_direct(const ScanParams& params, std::uint32_t blocks, int width, bool inner_product, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
