// The reduced-precision screen: a copy of the store in float16 or int8 (ReducedFormat), written
// at publish beside the float32 vectors (kernels/reduced_copy.cu), and the screen that reads it
// for small batches (kernels/reduced_screen.cu; the int8 parts in reduced_int8.cuh).
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
//
// Float16: for each stored vector x the copy holds x~ (each element rounded to float16, clamped
// to +-65504) and two bounds: n(x) <= |x~|^2 and e(x) >= |x - x~| (E7 of docs/cuda.md).
// Int8: an offset c and a scale s, codes a_i in [-127, 127] with x_i = c + s a_i + r_i, and
// n(x) <= |x|^2, e(x) >= |r| (E8). The screen computes <q, x~> (float32 products; int8: exact
// integer ones against a 16-bit form of the query) and from it a proven lower bound L of the
// pair's exact rank (L2 and cosine: the distance |q - x|; inner product: -<q, x>), so a point is
// never ranked above a bound it could beat. Each query keeps the `width` smallest L (the scan's
// candidate lists, then the selection); the exact re-rank takes them and certifies its k answers
// when the k-th exact distance lies below the width-th L, which every point left out is at least.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/scan.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail::gpu {

/// Most candidates per query the screen keeps (the last ordering by counting takes a thread per entry).
inline constexpr std::uint32_t kReducedMaxWidth = 256;
/// Query groups the screen is compiled for (accumulators per thread): a block scores one group.
inline constexpr std::uint32_t kReducedGroups[] = {1, 2, 4, 8};
/// Most queries per launch chunk: one group.
inline constexpr std::uint32_t kReducedMaxQueries = 8;
/// Most blocks per group (the first-segment bound ranks one key of each).
inline constexpr std::uint32_t kReducedMaxBlocks = 1024;
/// Counters per group in ScanParams::first_arrivals: the first bound's arrivals, the next
/// segment to score, the blocks done (zero before the first launch; each launch leaves them zero).
inline constexpr std::uint32_t kReducedCounters = 4;
/// StoreConfig::reduced_screen Auto keeps the copy for stores of this many float4 chunks or more
/// (64 stored dimensions): narrower vectors cost a search little to read in float32.
inline constexpr std::uint32_t kReducedAutoMinChunks = 16;
/// Threads of a screen block.
inline constexpr std::uint32_t kReducedThreads = 256;
/// Slots a block scores per segment: two per thread for every group. For one or two queries that
/// is more loads in flight; for four and eight it halves the query loads from shared memory per
/// product (each query element feeds two points), which bounds the larger groups. A group of
/// eight admits its pairs in rounds of one slot per thread, so its lists need no more shared
/// memory than with one slot per thread.
inline constexpr std::uint32_t reduced_segment(std::uint32_t /*group*/) { return kReducedThreads * 2; }
/// The group that runs a chunk of `queries` (<= kReducedMaxQueries): the smallest that holds it.
inline constexpr std::uint32_t reduced_group(std::uint32_t queries) {
  return queries <= 1 ? 1 : queries <= 2 ? 2 : queries <= 4 ? 4 : 8;
}

/// 16-byte chunks of the copy per vector of `chunks` float4 chunks: 8 float16 or 16 int8 elements each.
inline constexpr std::uint32_t reduced_pairs_for(std::uint32_t chunks, ReducedFormat format) {
  return format == ReducedFormat::Int8 ? (chunks + 3) / 4 : (chunks + 1) / 2;
}
/// Floats of bounds per slot (StoreView::reduced_meta): float16 {n(x), e(x)}; int8 {s, c, n(x), e(x)}.
inline constexpr std::uint32_t reduced_meta_floats(ReducedFormat format) {
  return format == ReducedFormat::Int8 ? 4 : 2;
}

/// One publish's vector writes into a buffer's copy (ScatterParams' vector channel).
struct ReduceParams {
  void* reduced = nullptr;          ///< the buffer's copy (StoreView::reduced)
  float* meta = nullptr;            ///< reduced_meta_floats per slot (StoreView::reduced_meta)
  ReducedFormat format = ReducedFormat::Float16;
  std::uint32_t pairs = 0;
  std::uint32_t dim = 0;            ///< floats per input vector (the stored dimension)
  const std::uint32_t* vector_slots = nullptr;
  const float* vectors_in = nullptr;  ///< vector_count x dim
  std::uint32_t vector_count = 0;
};
void launch_reduce(const ReduceParams& params, cudaStream_t stream);

/// Dynamic shared memory of a screen block: the group's staged queries and a list per query
/// (2 width entries between cuts and a segment's admissions).
std::size_t reduced_shared_bytes(std::uint32_t group, std::uint32_t width, std::uint32_t pairs);
/// Screen blocks resident per SM (the occupancy calculator's) for a group, width and store of
/// `pairs` chunks, 0 where a block does not fit; raises the kernels' shared-memory limit to what
/// `optin` bytes per block leave (call before the first launch).
int reduced_blocks_per_sm(bool inner_product, ReducedFormat format, std::uint32_t group, std::uint32_t width,
                          std::uint32_t pairs, std::size_t optin);
/// The screen over the copy, a block row per group of `group` queries: of ScanParams it reads
/// store, queries (rows of chunks float4), num_queries, k (the width, at most kReducedMaxWidth)
/// and threshold (each query's grid-wide bound, kNoBound at first), uses first_keys
/// (num_queries x blocks) and first_arrivals (kReducedCounters per group) and writes candidates
/// and lengths: `blocks` sorted lists per query of up to k (L, slot, id), the scan's layout.
/// stored_dim: the float32 vectors' (the bound's term count).
void launch_reduced_screen(const ScanParams& params, std::uint32_t blocks, std::uint32_t group,
                           std::uint32_t stored_dim, bool inner_product, ReducedFormat format, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
