// The query-resident scan (kernels/resident.cu) for large batches over one-chunk stores.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/scan.hpp"

namespace streamknn::detail::gpu {

/// The query-resident scan (kernels/resident.cu) for large batches over stores of one float4
/// chunk (dims <= 4), L2 ranks, no id ranges, after a sample pass: each lane keeps
/// kResidentQueriesPerThread queries in registers, the warps of a block share
/// kResidentQueriesPerBlock queries and stream their shares of the block's slots past them
/// through shared memory, a dot-product screen with a proven margin (ScanParams::screen,
/// screen_bounds(4)) picks the pairs whose exact rank (the scan's bits) is computed, each warp
/// keeps a list per query (ScanParams::warp_lists: num_queries x blocks x warps x k entries of 8
/// bytes, rank and slot: half as many Candidates), and
/// each block merges them into one sorted list per query in the scan's layout (grid.x = blocks
/// lists per query). Of ScanParams it reads store, queries, num_queries, k (at most
/// kResidentMaxK), threshold (each query's bound, lowered as lists fill) and screen, and writes
/// warp_lists, candidates and lengths.
inline constexpr std::uint32_t kResidentQueriesPerThread = 4;
inline constexpr std::uint32_t kResidentQueriesPerBlock = 32 * kResidentQueriesPerThread;
inline constexpr std::uint32_t kResidentMaxWarps = 8;
inline constexpr std::uint32_t kResidentMaxK = 128;
/// Slots one warp of the resident scan stages at a time.
inline constexpr std::uint32_t kResidentTile = 128;
/// Resident kernel blocks per SM for a vector width (2 or 4) and warps per block.
int resident_blocks_per_sm(int width, std::uint32_t warps, Filtering filtering = Filtering::None);
/// Dynamic shared memory one resident block needs.
std::size_t resident_shared_bytes(int width, std::uint32_t warps);
/// Raises the resident kernels' shared-memory limit to the device's opt-in limit per block; call
/// once per device.
void configure_resident(std::size_t shared_limit);
/// width: StoreView::chunk_floats (2 or 4).
void launch_resident(const ScanParams& params, std::uint32_t blocks, std::uint32_t warps, int width,
                     cudaStream_t stream);

}  // namespace streamknn::detail::gpu
