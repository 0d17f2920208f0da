// The dense screen (kernels/dense_product.cu, kernels/dense_select.cu): a matrix product, then a
// selection per query.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/screen.hpp"

namespace streamknn::detail::gpu {

/// Blocks per SM the product kernels that can give every SM an equal share of the store (see
/// dense.cu's ProductShare) hold at once: of up to 8 queries (exact) and of 17-32 (screened).
/// configure_dense works them out once per device.
struct DenseResidency {
  std::uint32_t few_queries = 0, mid_queries = 0;
};

/// The dense screen (kernels/dense.cu), for batches over small stores of many dimensions, in
/// place of the sample pass and the scan: a tiled matrix product gives every (query, slot) pair
/// its screened value fl(|x|^2 - 2 x.q) less its margin, and every 32-slot group its smallest
/// per query; then one block per query ranks exactly the pairs at or below the k-th group
/// minimum, and every other pair whose screened value could hide a rank within the k-th
/// (ScreenBounds). It hands the selection one sorted list of k per query (ScanParams' layout
/// with one block). L2 ranks only (cosine included), no id ranges.
struct DenseParams {
  const StoreView* store = nullptr;
  const float* queries = nullptr;          // num_queries x chunks float4, as ScanParams
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;                     // at most kDenseMaxK
  std::uint32_t chunks = 0;                // float4 chunks per vector (the store's)
  std::uint32_t row_stride = 0;            // floats per row of `screened` (>= the store's slots)
  float* screened = nullptr;               // workspace: num_queries rows of row_stride
  std::uint32_t* group_keys = nullptr;     // workspace: num_queries rows of row_stride / kTile
  // The answers, written by the selection itself (as select_kernel writes them: SelectParams).
  int metric = 0;                          // streamknn::Metric as int
  float* out_distance = nullptr;           // num_queries x k, reported distances
  std::uint64_t* out_id = nullptr;
  std::uint32_t* out_slot = nullptr;
  // Set by launch_dense: batches of up to kDenseExactMaxQueries queries, whose product writes each
  // pair's exact rank (twice the arithmetic; no screen, no phase C, one selection block per query)
  // rather than its screened value.
  bool exact = false;
  ScreenBounds screen;                     // tensor_screen_bounds(padded dim): the screened product's margin
  std::size_t shared_limit = 0;            // the device's opt-in shared memory per block (sharedMemPerBlockOptin)
  std::uint32_t sm_count = 0;              // the device's multiprocessors (the product's shares)
  DenseResidency residency;                // from configure_dense (0: every grid of whole tiles)
  std::uint32_t stage_points = 0;          // set by launch_dense: points staged at once for exact ranks
  // Selection blocks per query (1 to kDenseMaxParts; launch_dense keeps 1 where exact): each
  // ranks a share of the pairs at or below the first bound, the last to arrive merges them (up to
  // kDenseSplitMax of them; more, or an overflow, and the first block does it all).
  std::uint32_t blocks_per_query = 1;
  Candidate* split = nullptr;              // workspace: num_queries x kDenseSplitMax
  std::uint32_t* arrivals = nullptr;       // per query: blocks arrived (zero before a launch; left zero)
};
inline constexpr std::uint32_t kDenseMaxParts = 8;
/// The most queries the exact product takes (DenseParams::exact).
inline constexpr std::uint32_t kDenseExactMaxQueries = 16;
inline constexpr std::uint32_t kDenseSplitMax = 512;
inline constexpr std::uint32_t kDenseMaxK = 1024;
/// Most tiles per row: the selection holds a row's group keys in shared memory.
inline constexpr std::uint32_t kDenseMaxGroups = 16384;
/// 4-byte words of the workspace one launch of num_queries queries needs (rows, group keys).
inline std::size_t dense_workspace_words(std::uint32_t num_queries, std::uint32_t row_stride) {
  return std::size_t(num_queries) * (row_stride + row_stride / kTile);
}
/// Shared memory one dense selection block needs at least (one point staged at a time); plans
/// that need more than the device allows keep the scan.
std::size_t dense_select_min_shared(std::uint32_t k, std::uint32_t chunks, std::uint32_t groups);
/// Raises the dense kernels' shared-memory limits to the device's opt-in limit per block and
/// returns their residency; call once per device.
DenseResidency configure_dense(std::size_t shared_limit);
void launch_dense(const DenseParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
