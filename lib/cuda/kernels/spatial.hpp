// The spatial index (kernels/spatial_build.cu, kernels/spatial_search.cu) of a one-chunk store.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/device_types.hpp"
#include "cuda/kernels/select.hpp"

namespace streamknn::detail::gpu {

/// The spatial index (kernels/spatial_build.cu, spatial_search.cu) of a store of one float4 chunk
/// under L2 ranks: width 2 (at most two stored elements: L2, cosine; a grid over the points'
/// bounding box) or width 4 for points on the unit sphere (haversine, cosine at three elements; a
/// grid on each face of the cube around it): built on the query stream from one buffer's valid
/// slots (a radix sort by grid cell along a Hilbert curve, a 32-way tree of boxes over the sorted
/// points), then searched a warp per query for up to kSpatialMaxK neighbours, pruning every box
/// whose bound exceeds the query's k-th rank. The search writes the answers itself (as the
/// selection); ranks are the scan's bits.
inline constexpr std::uint32_t kSpatialMaxK = 128;
/// Boxes per level for a store of `slots` slots (leaves of 32 first, up to one root; empty for 0).
std::vector<std::uint32_t> spatial_level_sizes(std::uint32_t slots);
/// Bits per axis of the build's grid for a store of `slots` slots (2^(2 bits) cells per grid).
int spatial_axis_bits(std::uint32_t slots, int width);
/// Bytes of CUB temporary storage the build's sort of `slots` keys needs.
std::size_t spatial_sort_bytes(std::uint32_t slots);
/// What a build or refit found, written by its last kernel to host memory (SpatialBuildParams::stats).
struct SpatialStats {
  std::uint32_t overflow = 0;  ///< valid points outside the tree (SpatialView::overflow_count)
  float leaf_area = 0.0f;      ///< the leaf boxes' summed area (at width 4: half their surface)
  float built_leaf_area = 0.0f;  ///< leaf_area as the last build left it (a refit keeps it)
};
/// A build sorts the buffer's valid points into a new tree. A refit (refit = true) keeps the
/// tree of the last build on the same arrays and gathers each entry's point again: erased slots
/// drop out, points still near their leaf's built box stay and grow it, and the others (points
/// moved far, slots inserted since the build) go to the overflow, which every search ranks
/// whole. No sort: about a tenth of a build's time.
struct SpatialBuildParams {
  const StoreView* store = nullptr;       // the buffer's device view
  std::uint32_t slots = 0;                // the buffer's slot count (as its view)
  std::uint32_t tree_slots = 0;           // the slot count the tree was built for (= slots in a build)
  int width = 2;                          // StoreView::chunk_floats: 2, or 4 (points on the unit sphere)
  bool refit = false;
  std::uint32_t max_blocks = 0;           // blocks of the per-slot passes (a few per SM)
  std::uint32_t* scratch = nullptr;       // spatial_scratch_words(tree_slots): bounds, counts, arrivals
  std::uint32_t* keys = nullptr;          // slots each: the cells, unsorted (kept: a refit reads them) and sorted
  std::uint32_t* keys_sorted = nullptr;
  std::uint32_t* order = nullptr;         // slots: 0, 1, ... before the sort
  std::uint32_t* slots_sorted = nullptr;  // leaves x 32: SpatialView::slots
  void* temp = nullptr;                   // spatial_sort_bytes(slots)
  std::size_t temp_bytes = 0;
  float* points = nullptr;                // leaves x 32 x width floats, sorted
  float* boxes = nullptr;                 // sum of spatial_level_sizes x 2 x width floats
  float* built_leaf_boxes = nullptr;      // leaves x 2 x width floats: the last build's leaf boxes
  std::uint32_t* overflow_slots = nullptr;  // capacity: SpatialView::overflow_slots
  float* overflow_points = nullptr;       // capacity x width floats
  SpatialStats* stats = nullptr;          // host memory the device can write, or nullptr
  SpatialView* view = nullptr;            // device copy, written last
};
/// Words of SpatialBuildParams::scratch for a tree of `slots` slots: kSpatialScratchWords, then a
/// word per node of level 2.
inline constexpr std::size_t kSpatialScratchWords = 8;
std::size_t spatial_scratch_words(std::uint32_t slots);
void launch_spatial_build(const SpatialBuildParams& params, cudaStream_t stream);
struct SpatialSearchParams {
  const SpatialView* index = nullptr;
  const StoreView* store = nullptr;      // the indexed buffer (ids)
  int width = 2;                         // the index's (SpatialBuildParams::width)
  const float* queries = nullptr;        // num_queries float4 (one chunk)
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;                   // at most kSpatialMaxK
  const std::uint32_t* threshold = nullptr;  // per query: its starting bound (ordered bits), or nullptr: none
  SelectParams out;                      // the answers (metric, k, out_distance, out_id, out_slot)
};
void launch_spatial_search(const SpatialSearchParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
