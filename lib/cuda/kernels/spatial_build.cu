// The spatial index's build and refit (launch_spatial_build; spatial.cuh has the design): the
// bounding box, the cells' keys, a CUB radix sort and the tree of boxes.
#include <cub/device/device_radix_sort.cuh>
#include <math_constants.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/spatial.cuh"
#include "cuda/kernels/spatial.hpp"

namespace streamknn::detail::gpu {

namespace {

constexpr int kMaxAxisBits = 10;                               // at most 1,024 x 1,024 cells
constexpr int kBuildThreads = 256;

/// The index of cell (x, y) along the Hilbert curve over a grid of side n (a power of two).
/// Consecutive cells along it are neighbours (a Morton order jumps at every power-of-two seam,
/// and a leaf straddling a seam has a box reaching across it, which every query near that box
/// must then open).
__device__ __forceinline__ std::uint32_t hilbert_index(std::uint32_t n, std::uint32_t x, std::uint32_t y) {
  std::uint32_t d = 0;
  for (std::uint32_t s = n / 2; s > 0; s /= 2) {
    const std::uint32_t rx = (x & s) ? 1u : 0u, ry = (y & s) ? 1u : 0u;
    d += s * s * ((3u * rx) ^ ry);
    if (ry == 0) {  // rotate the quadrant so that the curve's sub-curves join
      if (rx == 1) {
        x = n - 1 - x;
        y = n - 1 - y;
      }
      const std::uint32_t t = x;
      x = y;
      y = t;
    }
  }
  return d;
}


/// The build's scratch words: the valid points' min x, min y as ordered bits and max x, max y as
/// inverted ordered bits (so that all four start at ~0 and fall by atomicMin), and their count
/// (the tree's entries, kept until the next build); then a build's or refit's overflow count,
/// summed leaf area (SpatialStats) and blocks done, which its last block resets for the next
/// launch. After them, an arrival count per node of level 2 (reset by the node's last arrival).
struct BuildBounds {
  std::uint32_t lo_x, lo_y, inv_hi_x, inv_hi_y, count, overflow;
  float leaf_area;
  std::uint32_t blocks_done;
};
static_assert(sizeof(BuildBounds) == kSpatialScratchWords * sizeof(std::uint32_t));
constexpr std::size_t kBoundsWords = 4;  // memset 0xff by a build; the rest zero

/// The grid cell (its Hilbert index) of a point, from the bounds the first pass found.
struct CellGrid {
  float lo_x, lo_y, scale_x, scale_y, top;
  int bits;
  __device__ explicit CellGrid(const BuildBounds& b, int axis_bits) : bits(axis_bits) {
    lo_x = from_ordered_bits(b.lo_x);
    lo_y = from_ordered_bits(b.lo_y);
    const float hi_x = from_ordered_bits(~b.inv_hi_x), hi_y = from_ordered_bits(~b.inv_hi_y);
    top = float((1u << bits) - 1);
    // A zero, infinite (overflowed) or undefined extent puts every point in one cell of that
    // axis: the order gets worse, the answers stay exact.
    auto scale_of = [&](float lo, float hi) {
      const float s = top / (hi - lo);
      return hi > lo && isfinite(s) ? s : 0.0f;
    };
    scale_x = scale_of(lo_x, hi_x);
    scale_y = scale_of(lo_y, hi_y);
  }
  __device__ std::uint32_t operator()(float2 p) const {
    const auto axis = [&](float v, float lo, float scale) { return std::uint32_t(fminf(fmaxf((v - lo) * scale, 0.0f), top)); };
    return hilbert_index(1u << bits, axis(p.x, lo_x, scale_x), axis(p.y, lo_y, scale_y));
  }
};

/// The grid cell of a point on the unit sphere (haversine; cosine at three elements): the face
/// of the cube around the sphere its direction crosses, then the Hilbert index of the crossing on
/// a 2^b x 2^b grid over that face (six seams, at the cube's edges, where a plane grid would put
/// the two hemispheres in one cell).
struct SphereGrid {
  int bits;
  __device__ std::uint32_t operator()(const float4& p) const {
    const float ax = fabsf(p.x), ay = fabsf(p.y), az = fabsf(p.z);
    std::uint32_t face;
    float u, v;
    if (ax >= ay && ax >= az) {
      face = p.x >= 0.0f ? 0 : 1;
      u = p.y / ax;
      v = p.z / ax;
    } else if (ay >= az) {
      face = p.y >= 0.0f ? 2 : 3;
      u = p.x / ay;
      v = p.z / ay;
    } else {
      face = p.z >= 0.0f ? 4 : 5;
      u = p.x / az;
      v = p.y / az;
    }
    const float top = float((1u << bits) - 1);
    // fmaxf drops a NaN (a zero vector): such a point lands in a corner cell, still exact.
    const auto axis = [&](float t) { return std::uint32_t(fminf(fmaxf((t + 1.0f) * 0.5f * top, 0.0f), top)); };
    return (face << (2 * bits)) + hilbert_index(1u << bits, axis(u), axis(v));
  }
};

/// Cells of a build's grid (the sort's absent key: past every point's) and its key bits.
__host__ __device__ inline std::uint32_t grid_cells(int width, int bits) {
  return (width == 2 ? 1u : 6u) << (2 * bits);
}
inline int key_bits(int width, int bits) { return 2 * bits + (width == 2 ? 1 : 3); }

/// The valid points' bounds and count: a reduction per block, then one atomic per word and block.
/// (At width 4 the sphere's grid needs no bounds: the count only.)
template <int kWidth>
__global__ void __launch_bounds__(kBuildThreads) spatial_bounds_kernel(const StoreView* view, BuildBounds* bounds) {
  __shared__ BuildBounds partial[kBuildThreads / 32];
  const StoreView s = *view;
  const float2* const points = static_cast<const float2*>(s.vectors);
  BuildBounds b{~0u, ~0u, ~0u, ~0u, 0};
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < s.slot_count; i += gridDim.x * blockDim.x) {
    if (!s.valid[i]) continue;
    if constexpr (kWidth == 4) {
      ++b.count;
      continue;
    }
    const float2 p = points[i];
    b.lo_x = min(b.lo_x, ordered_bits(p.x));
    b.lo_y = min(b.lo_y, ordered_bits(p.y));
    b.inv_hi_x = min(b.inv_hi_x, ~ordered_bits(p.x));
    b.inv_hi_y = min(b.inv_hi_y, ~ordered_bits(p.y));
    ++b.count;
  }
  b.lo_x = __reduce_min_sync(kFullMask, b.lo_x);
  b.lo_y = __reduce_min_sync(kFullMask, b.lo_y);
  b.inv_hi_x = __reduce_min_sync(kFullMask, b.inv_hi_x);
  b.inv_hi_y = __reduce_min_sync(kFullMask, b.inv_hi_y);
  b.count = __reduce_add_sync(kFullMask, b.count);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kBuildThreads / 32; ++w) {
      b.lo_x = min(b.lo_x, partial[w].lo_x);
      b.lo_y = min(b.lo_y, partial[w].lo_y);
      b.inv_hi_x = min(b.inv_hi_x, partial[w].inv_hi_x);
      b.inv_hi_y = min(b.inv_hi_y, partial[w].inv_hi_y);
      b.count += partial[w].count;
    }
    if (b.count > 0) {
      atomicMin(&bounds->lo_x, b.lo_x);
      atomicMin(&bounds->lo_y, b.lo_y);
      atomicMin(&bounds->inv_hi_x, b.inv_hi_x);
      atomicMin(&bounds->inv_hi_y, b.inv_hi_y);
      atomicAdd(&bounds->count, b.count);
    }
  }
}

/// Each slot's sort key, its cell (grid_cells where erased: after every point), and its slot.
template <int kWidth>
__global__ void __launch_bounds__(kBuildThreads) spatial_keys_kernel(const StoreView* view, const BuildBounds* bounds,
                                                                    int axis_bits, std::uint32_t* keys,
                                                                    std::uint32_t* order) {
  const StoreView s = *view;
  const std::uint32_t absent = grid_cells(kWidth, axis_bits);
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < s.slot_count; i += gridDim.x * blockDim.x) {
    std::uint32_t key = absent;
    if (s.valid[i]) {
      if constexpr (kWidth == 2) {
        key = CellGrid(*bounds, axis_bits)(static_cast<const float2*>(s.vectors)[i]);
      } else {
        key = SphereGrid{axis_bits}(static_cast<const float4*>(s.vectors)[i]);
      }
    }
    keys[i] = key;
    order[i] = i;
  }
}

/// Leaves per warp of the tree kernel: their loads are issued together (with one leaf per warp,
/// a point's gather was the only load in flight per thread, and the kernel waited on them).
constexpr int kLeavesPerWarp = 4;
constexpr int kTreeThreads = 32 * 32 / kLeavesPerWarp;  // a node of level 1 per block

/// A node's box from its children's (child_count of them from `children`, the node's 32 from
/// 32 node), a warp per node. The children were written by other blocks of this launch before
/// their fence: read from L2.
template <class G>
__device__ __forceinline__ void node_box(const typename G::Box* children, std::uint32_t child_count,
                                         typename G::Box* out, std::uint32_t node, std::uint32_t lane) {
  using Box = typename G::Box;
  const std::uint32_t child = node * 32 + lane;
  Box box = G::empty_box();
  if (child < child_count) {
    const float* from = reinterpret_cast<const float*>(children + child);
    float* to = reinterpret_cast<float*>(&box);
#pragma unroll
    for (std::size_t f = 0; f < sizeof(Box) / sizeof(float); ++f) to[f] = __ldcg(from + f);
  }
  box = G::warp_box(box);
  if (lane == 0) out[node] = box;
}

/// The whole tree in one launch, after a build's sort or for a refit: blocks [0, tree_blocks) each
/// take a node of level 1 (kLeavesPerWarp leaves per warp: gather their points in sorted order,
/// take their boxes, then the node's box, and add the leaves' areas); the last of a level-2 node's
/// children to arrive takes that node's box; a refit's other blocks send the valid slots without
/// an entry to the overflow; the last block of all takes the levels above 2 and writes the view
/// and the figures. A refit gathers each entry's slot again: an erased one leaves a NaN point, and
/// a point no longer near its leaf's built box (kNearExtents) goes to the overflow instead; a build
/// keeps its leaf boxes for the refits.
template <int kWidth, bool kRefit>
__global__ void __launch_bounds__(kTreeThreads, 1) spatial_tree_kernel(SpatialBuildParams p, SpatialView view,
                                                                   std::uint32_t tree_blocks, std::uint32_t absent) {
  using G = Geometry<kWidth>;
  using Point = typename G::Point;
  using Box = typename G::Box;
  __shared__ Box boxes[32];
  const StoreView* const store = p.store;
  BuildBounds* const bounds = reinterpret_cast<BuildBounds*>(p.scratch);
  std::uint32_t* const level2_arrivals = p.scratch + kSpatialScratchWords;
  Box* const tree_boxes = reinterpret_cast<Box*>(p.boxes);
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (blockIdx.x < tree_blocks) {
    Point* const points = reinterpret_cast<Point*>(p.points);
    Box* const built = reinterpret_cast<Box*>(p.built_leaf_boxes);
    const std::uint32_t first_leaf = blockIdx.x * 32 + warp * kLeavesPerWarp, count = bounds->count;
    const std::uint32_t leaves = view.level_size[0];
    std::uint32_t slot[kLeavesPerWarp];
    Box near_box[kLeavesPerWarp];
#pragma unroll
    for (int u = 0; u < kLeavesPerWarp; ++u) {
      const std::uint32_t i = (first_leaf + u) * 32 + lane;
      slot[u] = i < count ? p.slots_sorted[i] : ~0u;
      if (kRefit && i < count) near_box[u] = built[first_leaf + u];
    }
    Point v[kLeavesPerWarp];
    bool kept[kLeavesPerWarp];
#pragma unroll
    for (int u = 0; u < kLeavesPerWarp; ++u) {
      kept[u] = slot[u] != ~0u;
      if (kept[u]) v[u] = static_cast<const Point*>(store->vectors)[slot[u]];
      if (kRefit && kept[u]) kept[u] = store->valid[slot[u]] != 0;
    }
#pragma unroll
    for (int u = 0; u < kLeavesPerWarp; ++u) {
      const std::uint32_t leaf = first_leaf + u, i = leaf * 32 + lane;
      if constexpr (kRefit) {
        if (kept[u] && !G::near(near_box[u], v[u])) {
          const std::uint32_t at = atomicAdd(&bounds->overflow, 1u);
          p.overflow_slots[at] = slot[u];
          reinterpret_cast<Point*>(p.overflow_points)[at] = v[u];
          kept[u] = false;
        }
      }
      if (i < count) points[i] = kept[u] ? v[u] : G::nan_point();
      const Box box = G::warp_box(kept[u] ? G::box_of(v[u]) : G::empty_box());
      if (lane == 0) {
        boxes[warp * kLeavesPerWarp + u] = box;
        if (leaf < leaves) {
          tree_boxes[leaf] = box;
          if (!kRefit) built[leaf] = box;
        }
      }
    }
    __syncthreads();
    if (warp == 0) {
      float area = G::area(boxes[lane]);
#pragma unroll
      for (int m = 16; m > 0; m >>= 1) area += __shfl_xor_sync(kFullMask, area, m);
      if (lane == 0) atomicAdd(&bounds->leaf_area, area);
      if (view.levels > 1) {  // else a single leaf: the root
        const Box box = G::warp_box(boxes[lane]);
        if (lane == 0) tree_boxes[view.level_start[1] + blockIdx.x] = box;
      }
    }
    if (view.levels > 2) {  // the last of the 32 (or fewer) children of a node of level 2 takes its box
      const std::uint32_t parent = blockIdx.x / 32, children = min(32u, view.level_size[1] - parent * 32);
      if (last_block_to_arrive(&level2_arrivals[parent], children) && warp == 0) {
        node_box<G>(tree_boxes + view.level_start[1], view.level_size[1], tree_boxes + view.level_start[2], parent, lane);
        if (lane == 0) level2_arrivals[parent] = 0;
      }
    }
  } else if constexpr (kRefit) {
    const StoreView s = *store;
    const std::uint32_t threads = (gridDim.x - tree_blocks) * blockDim.x;
    for (std::uint32_t i = (blockIdx.x - tree_blocks) * blockDim.x + threadIdx.x; i < s.slot_count; i += threads) {
      if (!s.valid[i] || (i < p.tree_slots && p.keys[i] != absent)) continue;
      const std::uint32_t at = atomicAdd(&bounds->overflow, 1u);
      p.overflow_slots[at] = i;
      reinterpret_cast<Point*>(p.overflow_points)[at] = static_cast<const Point*>(s.vectors)[i];
    }
  }
  // The last block of all: the levels above 2, then the view, the figures, and the counters reset.
  if (!last_block_to_arrive(&bounds->blocks_done, gridDim.x)) return;
  // (Shared copies of the level table: indexing the parameter by level would copy it to the stack.)
  __shared__ std::uint32_t level_start[kSpatialMaxLevels], level_size[kSpatialMaxLevels];
  if (threadIdx.x == 0) {
#pragma unroll
    for (std::uint32_t l = 0; l < kSpatialMaxLevels; ++l) {
      level_start[l] = view.level_start[l];
      level_size[l] = view.level_size[l];
    }
  }
  __syncthreads();
  for (std::uint32_t level = 3; level < view.levels; ++level) {
    for (std::uint32_t node = warp; node < level_size[level]; node += kTreeThreads / 32) {
      node_box<G>(tree_boxes + level_start[level - 1], level_size[level - 1], tree_boxes + level_start[level], node, lane);
    }
    __threadfence();
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const std::uint32_t overflow = __ldcg(&bounds->overflow);
    const float area = __ldcg(&bounds->leaf_area);
    view.count = __ldcg(&bounds->count);
    view.overflow_count = overflow;
    *p.view = view;
    if (p.stats != nullptr) {
      p.stats->overflow = overflow;
      p.stats->leaf_area = area;
      if (!kRefit) p.stats->built_leaf_area = area;
    }
    bounds->overflow = 0;
    bounds->leaf_area = 0.0f;
    bounds->blocks_done = 0;
  }
}

}  // namespace

std::vector<std::uint32_t> spatial_level_sizes(std::uint32_t slots) {
  std::vector<std::uint32_t> sizes;
  if (slots == 0) return sizes;
  sizes.push_back((slots + 31) / 32);
  while (sizes.back() > 1) sizes.push_back((sizes.back() + 31) / 32);
  return sizes;
}

int spatial_axis_bits(std::uint32_t slots, int width) {
  // 1 to 4 slots per cell, or 2^20 cells (per face of the sphere's cube at width 4)
  const std::uint64_t per_grid = width == 2 ? slots : slots / 6;
  int bits = 1;
  while (bits < kMaxAxisBits && (per_grid >> (2 * bits)) > 4) ++bits;
  return bits;
}

std::size_t spatial_scratch_words(std::uint32_t slots) {
  const std::vector<std::uint32_t> sizes = spatial_level_sizes(slots);
  return kSpatialScratchWords + (sizes.size() > 2 ? sizes[2] : 0);
}

std::size_t spatial_sort_bytes(std::uint32_t slots) {
  std::size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::uint32_t*>(nullptr),
                                             static_cast<std::uint32_t*>(nullptr),
                                             static_cast<const std::uint32_t*>(nullptr),
                                             static_cast<std::uint32_t*>(nullptr), slots, 0, key_bits(4, kMaxAxisBits)),
             "cub::DeviceRadixSort::SortPairs (temporary storage size)");
  return bytes;
}

namespace {

template <int kWidth>
void build(const SpatialBuildParams& p, cudaStream_t stream) {
  const std::vector<std::uint32_t> sizes = spatial_level_sizes(p.tree_slots);  // at most 7 for 2^32 slots
  SpatialView view;
  view.points = p.points;
  view.slots = p.slots_sorted;
  view.boxes = p.boxes;
  view.overflow_points = p.overflow_points;
  view.overflow_slots = p.overflow_slots;
  view.levels = std::uint32_t(sizes.size());
  std::uint32_t start = 0;
  for (std::size_t l = 0; l < sizes.size(); ++l) {
    view.level_start[l] = start;
    view.level_size[l] = sizes[l];
    start += sizes[l];
  }
  auto* const bounds = reinterpret_cast<BuildBounds*>(p.scratch);
  const std::uint32_t blocks = std::min<std::uint32_t>((p.slots + kBuildThreads - 1) / kBuildThreads, p.max_blocks);
  // Blocks of the tree kernel: a node of level 1 each (one for a single leaf; at least one, which
  // writes the view), and for a refit as many again over the slots, up to a few per SM.
  const std::uint32_t tree_blocks = sizes.empty() ? 0 : sizes.size() > 1 ? sizes[1] : 1;
  if (p.refit) {
    // No memset: the last launch's last block left the counters at zero.
    const std::uint32_t scan_blocks = std::min<std::uint32_t>((p.slots + kTreeThreads - 1) / kTreeThreads, p.max_blocks);
    const std::uint32_t absent = grid_cells(kWidth, spatial_axis_bits(p.tree_slots, kWidth));
    spatial_tree_kernel<kWidth, true><<<std::max(1u, tree_blocks + scan_blocks), kTreeThreads, 0, stream>>>(
        p, view, tree_blocks, absent);
    check_launch("spatial_tree_kernel (refit)");
    return;
  }
  check_cuda(cudaMemsetAsync(bounds, 0xff, kBoundsWords * sizeof(std::uint32_t), stream), "cudaMemsetAsync(spatial bounds)");
  check_cuda(cudaMemsetAsync(p.scratch + kBoundsWords, 0, (spatial_scratch_words(p.tree_slots) - kBoundsWords) * sizeof(std::uint32_t),
                             stream),
             "cudaMemsetAsync(spatial counts)");
  if (p.slots > 0) {
    const int bits = spatial_axis_bits(p.slots, kWidth);
    spatial_bounds_kernel<kWidth><<<blocks, kBuildThreads, 0, stream>>>(p.store, bounds);
    check_launch("spatial_bounds_kernel");
    spatial_keys_kernel<kWidth><<<blocks, kBuildThreads, 0, stream>>>(p.store, bounds, bits, p.keys, p.order);
    check_launch("spatial_keys_kernel");
    std::size_t bytes = p.temp_bytes;
    check_cuda(cub::DeviceRadixSort::SortPairs(p.temp, bytes, p.keys, p.keys_sorted, p.order, p.slots_sorted, p.slots,
                                               0, key_bits(kWidth, bits), stream),
               "cub::DeviceRadixSort::SortPairs (spatial cells)");
  }
  spatial_tree_kernel<kWidth, false><<<std::max(1u, tree_blocks), kTreeThreads, 0, stream>>>(p, view, tree_blocks, 0);
  check_launch("spatial_tree_kernel");
}

}  // namespace

void launch_spatial_build(const SpatialBuildParams& p, cudaStream_t stream) {
  if (p.width == 2) {
    build<2>(p, stream);
  } else {
    build<4>(p, stream);
  }
}

}  // namespace streamknn::detail::gpu
