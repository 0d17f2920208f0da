// The dense screen (DenseParams; kernels/dense_product.cu, kernels/dense_select.cu): batches over
// small stores of many dimensions.
//
// The scan streams the store once per query group and keeps per-warp lists; on a small store
// every warp sees one or two tiles, so its lists never tighten and the dot products run from a
// per-warp ring. Here the pairs are one tiled matrix product instead (a block's points and
// queries staged in shared memory with cp.async), which writes one value per pair to a
// workspace row per query, and each 32-slot group's smallest value per query. The product takes
// one of two forms (DenseParams::exact):
//   - exact (up to kDenseExactMaxQueries): each pair's exact rank (the direct form, in the
//     chunk order of every other path; each thread TM points x TN queries), twice the
//     arithmetic of a dot product; for small batches, whose product is bound by the store's
//     reads, not by the arithmetic;
//   - screened, on the tensor cores (TF32 operands, float accumulators): V = fl(|x|^2 - 2 x.q),
//     less its margin C |x|^2 rounded down (W), with tensor_screen_bounds' margin.
// Then one block per query (or several, screened):
//   A. takes a bound with at least k group minima at or below it (the k-th smallest, or at
//      most kBoundSlack minima past it): k groups each hold a slot at or below it, so at least
//      k points are (where fewer than k groups hold a value: the same over the row's values, or
//      every value);
//   B. ranks every pair at or below it exactly (exact: reads its rank from the row; screened:
//      the direct form from the point) and keeps the k best by (rank, id): their k-th rank T
//      bounds the answer's. Exact, that is the answer: every pair of rank <= T <= the bound
//      was taken;
//   C. screened only: ranks every other pair whose W passes the screen for T (ScreenBounds: a
//      pair whose exact rank is <= T always passes) and merges it in.
// Every answer is an exact rank, and every pair that could be among the k best was ranked. The
// selection writes the answers (reported distances, ids, slots) itself.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/screen.hpp"

namespace streamknn::detail::gpu {

/// Blocks per SM the product kernels that can give every SM an equal share of the store (see
/// ProductShare, below) hold at once: of up to 8 queries (exact) and of 17-32 (screened).
/// configure_dense works them out once per device.
struct DenseResidency {
  std::uint32_t few_queries = 0, mid_queries = 0;
};

/// The dense screen (kernels/dense_product.cu, dense_select.cu), for batches over small stores of
/// many dimensions, in place of the sample pass and the scan: a tiled matrix product gives every
/// (query, slot) pair its screened value fl(|x|^2 - 2 x.q) less its margin, and every 32-slot group
/// its smallest per query; then one block per query ranks exactly the pairs at or below the k-th
/// group minimum, and every other pair whose screened value could hide a rank within the k-th
/// (ScreenBounds). It hands the selection one sorted list of k per query (ScanParams' layout with
/// one block). L2 ranks only (cosine included), no id ranges.
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

/// A product block's share of the store's groups (32 slots, a warp's lanes): the grid is m blocks
/// per SM (m: the store's tiles of TM groups over the SMs, rounded up), and SM s's blocks s,
/// s + S, ... split an equal part of the groups: at most TM each, TM or TM - 1 where the store
/// holds TM - 1 or more tiles per SM (the MNIST-like one 4-5.5). Used where every block is resident
/// at once, so the hardware hands each SM m blocks (ncu: 5 on every SM at MNIST-like Q = 4 and 32,
/// where 547 whole tiles gave 4 or 5). H200 A/B against whole tiles: MNIST-like Q = 4-8
/// 0.950-0.985x, Q = 24-32 0.915-0.928x (the FP32 screened product since replaced by the tensor
/// product, which takes shares the same way: 138.7 -> 122.9 us, 96 registers, no spills, against 72
/// and 8 bytes spilled). Where its blocks would queue (100,000 x 128: 8 per SM of the tile of 16, 6
/// of 32) shares lost 1.07-1.16x, so whole tiles stay there. A grid of whole tiles, then one-group
/// tiles for the remainder, lost 1.10-1.18x (ncu: the SMs' mean active cycles fell from 0.92 to
/// 0.82 of the busiest one's).
struct ProductShare {
  std::uint32_t first_group, groups;
};
constexpr std::uint32_t product_blocks_per_sm(std::uint32_t groups, std::uint32_t tm, std::uint32_t sms) {
  return ((groups + tm - 1) / tm + sms - 1) / sms;
}
constexpr ProductShare product_share(std::uint32_t slots, std::uint32_t tm, std::uint32_t sms,
                                     std::uint32_t block) {
  const std::uint32_t groups = (slots + kTile - 1) / kTile, per_sm = product_blocks_per_sm(groups, tm, sms);
  const std::uint32_t sm = block % sms, j = block / sms;
  if (j >= per_sm) return {0, 0};  // the grid is sized for the plan's capacity
  const std::uint32_t base = groups / sms, extra = groups % sms;  // the first `extra` SMs take one more
  const std::uint32_t sm_groups = base + (sm < extra), sm_first = sm * base + (sm < extra ? sm : extra);
  const std::uint32_t least = sm_groups / per_sm, more = sm_groups % per_sm;  // the first `more` take one more
  return {sm_first + j * least + (j < more ? j : more), least + (j < more)};
}
/// Whether the grid's shares of a store of `slots` slots cover its groups [0, groups) once, in order,
/// at most tm each, and tm or tm - 1 each where every SM's part holds that many. Constant, so that a
/// test checks it at compile time for the tiles (tm 3 and 4) and the store and SM counts the
/// planner meets (product_share is called on the device too: the build's --expt-relaxed-constexpr).
constexpr bool shares_cover(std::uint32_t slots, std::uint32_t tm, std::uint32_t sms) {
  const std::uint32_t groups = (slots + kTile - 1) / kTile, per_sm = product_blocks_per_sm(groups, tm, sms);
  const bool full = groups / sms >= (tm - 1) * per_sm;
  std::uint32_t next = 0;
  for (std::uint32_t sm = 0; sm < sms; ++sm) {
    for (std::uint32_t j = 0; j < per_sm + 1; ++j) {  // one row of blocks past the grid: empty
      const ProductShare share = product_share(slots, tm, sms, j * sms + sm);
      if (share.groups > tm || (j == per_sm && share.groups != 0)) return false;
      if (share.groups == 0) continue;
      if (share.first_group != next || (full && share.groups < tm - 1)) return false;
      next += share.groups;
    }
  }
  return next == groups;
}

/// The dense screen's two steps, which launch_dense runs in order: configure_dense_product raises
/// the product kernels' shared-memory limits and returns their residency; launch_dense_product
/// launches the product for params.exact (set by launch_dense) and the batch size.
DenseResidency configure_dense_product();
void launch_dense_product(const DenseParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
