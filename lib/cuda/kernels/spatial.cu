// The spatial index (launch_spatial_build) and its search (launch_spatial_search) for stores
// of one float4 chunk under L2 ranks: at most two stored elements (L2, cosine), or points on the
// unit sphere (haversine, cosine at three elements).
//
// Build: the valid slots sorted by the Hilbert index of the cell they fall in, on a 2^b x 2^b
// grid over the store's bounding box (on the sphere: over the face of the cube around it that
// the point's direction crosses, the faces one after another), b from the slot count (a few
// points per cell, b <= 10); a CUB radix sort of (cell, slot), stable, so a cell keeps its slots'
// order; their points gathered in that order; and a tree of boxes over them: a leaf is 32
// consecutive points (a warp's load), a node 32 consecutive nodes of the level below, up to one
// root. The boxes are the points' real bounds, so the grid only decides which points share a
// leaf: any order would give exact answers, a spatial one makes the boxes small.
//
// Refit (after a publish, in place of a build): the same entries, each point gathered again from
// its slot. Erased slots leave a NaN point (its rank is NaN: never admitted). A point that moved
// stays in its leaf while it is near the leaf's box of the last build (within that box grown by
// kNearExtents times its larger extent on every side), and the boxes are taken again from the
// points kept; a point that moved farther, and every valid slot without an entry (inserted since
// the build), goes to the overflow, a plain list that every search ranks after the walk. Boxes
// still bound exactly the points in them, so the proof below holds; the tree only gets slower
// (larger boxes, a longer overflow), which the backend watches through SpatialStats to decide on
// the next full build.
//
// Search: a warp per query walks the tree depth first from a stack in shared memory. At a node
// the 32 lanes bound the rank of every point in each child box; the children within the
// query's bound go on the stack with the nearest on top (so the first leaf reached is near the
// query and its points bound the rest), and a node's leaves are ranked in place, nearest
// first. At a leaf each lane ranks one point and those within the bound enter the query's list:
// k <= 128 entries in the (rank, id) order, up to four per lane, whose k-th is the bound once it
// is full. The warp writes the answers itself, as the selection would.
//
// Why no answer is lost. A box [lo, hi] holds points p with lo <= p <= hi element-wise. Let c
// be the query q clamped to the box. Then |q_i - c_i| <= |q_i - p_i| exactly for each element,
// and the rank is fma(dw, dw, fma(dz, dz, fma(dy, dy, fma(dx, dx, 0)))) (two terms at width 2)
// with dx = fl(q_x - p_x): a rounded difference is monotone in its exact value, and the FMAs are
// monotone in |dx|, .., |dw| and the accumulator, so rank(q, c) <= rank(q, p) in floats. A box
// whose bound exceeds the query's k-th rank therefore holds no point that could enter (an entry
// needs rank <= k-th, equal ranks then by id). An empty box (hi < lo: a leaf past the store's
// points) bounds to +inf and is skipped once the list is full.
#include <cub/device/device_radix_sort.cuh>
#include <math_constants.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "cuda/kernels.hpp"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/select.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr int kMaxAxisBits = 10;                               // at most 1,024 x 1,024 cells
constexpr int kBuildThreads = 256;
constexpr int kSearchWarps = 4;
constexpr int kLevelShift = 27;                                // stack entry: level << 27 | node
constexpr std::uint32_t kNodeMask = (1u << kLevelShift) - 1;
static_assert(kSpatialMaxLevels <= 8, "the level lives in three bits of a stack entry");
constexpr int kStackEntries = 32 * int(kSpatialMaxLevels);     // 31 siblings per level above, 32 at the bottom

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

/// How far a refit lets a point move from its leaf's built box, in extents of that box, before it
/// goes to the overflow. A grown box costs only the queries near it (a leaf of 1,000,000 x 2
/// uniform points grown to 7 times its side is opened by about 0.2% of K = 16 queries), an
/// overflow point costs every query a 32nd of a leaf; SpatialStats watches the total growth.
constexpr float kNearExtents = 3.0f;

/// A store's points and boxes by vector width (StoreView::chunk_floats): two elements (a float2
/// per point, a float4 (lo x, lo y, hi x, hi y) per box) or four (a float4 per point, two per box).
template <int kWidth>
struct Geometry;

template <>
struct Geometry<2> {
  using Point = float2;
  struct Box {
    float4 b;  // lo x, lo y, hi x, hi y
  };
  /// The rank the way every kernel computes it (accumulate at width 2).
  static __device__ __forceinline__ float rank(const float4& q, float px, float py) {
    float acc[1] = {0.0f};
    accumulate<1, false, 2>(acc, make_float4(px, py, 0.0f, 0.0f), [&](int) { return q; });
    return acc[0];
  }
  static __device__ __forceinline__ float rank(const float4& q, const Point& p) { return rank(q, p.x, p.y); }
  /// A lower bound of rank over the box: the query clamped to it (see the file comment).
  static __device__ __forceinline__ float box_rank(const float4& q, const Box& box) {
    return rank(q, fminf(fmaxf(q.x, box.b.x), box.b.z), fminf(fmaxf(q.y, box.b.y), box.b.w));
  }
  static __device__ __forceinline__ Box box_of(const Point& p) { return Box{make_float4(p.x, p.y, p.x, p.y)}; }
  static __device__ __forceinline__ Box empty_box() {
    return Box{make_float4(CUDART_INF_F, CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F)};
  }
  static __device__ __forceinline__ Point nan_point() { return make_float2(CUDART_NAN_F, CUDART_NAN_F); }
  /// The refit's measure of a box (its area; 0 when empty).
  static __device__ __forceinline__ float area(const Box& box) {
    const float w = box.b.z - box.b.x, h = box.b.w - box.b.y;
    return w >= 0.0f && h >= 0.0f ? w * h : 0.0f;
  }
  /// Whether a refit keeps p in the leaf whose last built box is `built`: within it grown on
  /// every side by kNearExtents times its larger extent (false for NaN).
  static __device__ __forceinline__ bool near(const Box& built, const Point& p) {
    const float m = kNearExtents * fmaxf(built.b.z - built.b.x, built.b.w - built.b.y);
    return p.x >= built.b.x - m && p.x <= built.b.z + m && p.y >= built.b.y - m && p.y <= built.b.w + m;
  }
  /// The element-wise bounds of each lane's box (empty: lo = +inf, hi = -inf) over the warp.
  static __device__ __forceinline__ Box warp_box(Box box) {
    float4& b = box.b;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
      b.x = fminf(b.x, __shfl_xor_sync(kFullMask, b.x, m));
      b.y = fminf(b.y, __shfl_xor_sync(kFullMask, b.y, m));
      b.z = fmaxf(b.z, __shfl_xor_sync(kFullMask, b.z, m));
      b.w = fmaxf(b.w, __shfl_xor_sync(kFullMask, b.w, m));
    }
    return box;
  }
};

template <>
struct Geometry<4> {
  using Point = float4;
  struct Box {
    float4 lo, hi;
  };
  /// The rank the way every kernel computes it (accumulate at width 4).
  static __device__ __forceinline__ float rank(const float4& q, const Point& p) {
    float acc[1] = {0.0f};
    accumulate<1, false, 4>(acc, p, [&](int) { return q; });
    return acc[0];
  }
  static __device__ __forceinline__ float box_rank(const float4& q, const Box& box) {
    const auto clamp = [](float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); };
    return rank(q, make_float4(clamp(q.x, box.lo.x, box.hi.x), clamp(q.y, box.lo.y, box.hi.y),
                               clamp(q.z, box.lo.z, box.hi.z), clamp(q.w, box.lo.w, box.hi.w)));
  }
  static __device__ __forceinline__ Box box_of(const Point& p) { return Box{p, p}; }
  static __device__ __forceinline__ Box empty_box() {
    return Box{make_float4(CUDART_INF_F, CUDART_INF_F, CUDART_INF_F, CUDART_INF_F),
               make_float4(-CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F)};
  }
  static __device__ __forceinline__ Point nan_point() {
    return make_float4(CUDART_NAN_F, CUDART_NAN_F, CUDART_NAN_F, CUDART_NAN_F);
  }
  /// Half the box's surface (points on the sphere fill thin boxes); 0 when empty.
  static __device__ __forceinline__ float area(const Box& box) {
    const float x = box.hi.x - box.lo.x, y = box.hi.y - box.lo.y, z = box.hi.z - box.lo.z;
    return x >= 0.0f && y >= 0.0f && z >= 0.0f ? x * y + y * z + z * x : 0.0f;
  }
  static __device__ __forceinline__ bool near(const Box& built, const Point& p) {
    const float m = kNearExtents * fmaxf(fmaxf(built.hi.x - built.lo.x, built.hi.y - built.lo.y),
                                         fmaxf(built.hi.z - built.lo.z, built.hi.w - built.lo.w));
    return p.x >= built.lo.x - m && p.x <= built.hi.x + m && p.y >= built.lo.y - m && p.y <= built.hi.y + m &&
           p.z >= built.lo.z - m && p.z <= built.hi.z + m && p.w >= built.lo.w - m && p.w <= built.hi.w + m;
  }
  static __device__ __forceinline__ Box warp_box(Box box) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
      box.lo.x = fminf(box.lo.x, __shfl_xor_sync(kFullMask, box.lo.x, m));
      box.lo.y = fminf(box.lo.y, __shfl_xor_sync(kFullMask, box.lo.y, m));
      box.lo.z = fminf(box.lo.z, __shfl_xor_sync(kFullMask, box.lo.z, m));
      box.lo.w = fminf(box.lo.w, __shfl_xor_sync(kFullMask, box.lo.w, m));
      box.hi.x = fmaxf(box.hi.x, __shfl_xor_sync(kFullMask, box.hi.x, m));
      box.hi.y = fmaxf(box.hi.y, __shfl_xor_sync(kFullMask, box.hi.y, m));
      box.hi.z = fmaxf(box.hi.z, __shfl_xor_sync(kFullMask, box.hi.z, m));
      box.hi.w = fmaxf(box.hi.w, __shfl_xor_sync(kFullMask, box.hi.w, m));
    }
    return box;
  }
};

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

/// One stack entry: (level << kLevelShift | node) and the node's bound.
struct StackEntry {
  std::uint32_t code;
  float bound;
};

/// A query's list of up to 32 R entries: entry e = 32 r + lane lives in register r of that
/// lane; entries e < n hold the n best in the (rank, id) order, the rest padding (+inf, kNoId);
/// `bound` is the k-th once n = k.
template <int R>
struct WarpList {
  Candidate entry[R];
  std::uint32_t n = 0;
  Candidate bound{std::numeric_limits<float>::infinity(), ~0u, kNoId};
  __device__ WarpList() {
#pragma unroll
    for (int r = 0; r < R; ++r) entry[r] = bound;
  }
  /// bound from entry k - 1 (every lane calls it once n = k).
  __device__ __forceinline__ void take_bound(std::uint32_t k) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const Candidate b = shuffle(entry[r], (k - 1) % 32);
      if (std::uint32_t(r) == (k - 1) / 32) bound = b;
    }
  }
  /// Inserts c (the same in every lane) where it belongs, if it is among the k best.
  __device__ __forceinline__ void insert(const Candidate& c, std::uint32_t k, std::uint32_t lane) {
    if (n == k && !less_candidate(c, bound)) return;
    std::uint32_t at = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) at += __popc(__ballot_sync(kFullMask, 32 * r + lane < n && less_candidate(entry[r], c)));
    // Every entry from `at` on moves up one place; register r's lane 0 takes register r - 1's
    // lane 31 (read before register r - 1 changes: the registers go from the top down).
#pragma unroll
    for (int r = R - 1; r >= 0; --r) {
      const std::uint32_t e = 32 * r + lane;
      Candidate up = shuffle_up(entry[r], 1);
      if (r > 0) {
        const Candidate carry = shuffle(entry[r > 0 ? r - 1 : 0], 31);
        if (lane == 0) up = carry;
      }
      if (e > at) {
        entry[r] = up;
      } else if (e == at) {
        entry[r] = c;
      }
      if (e >= k) entry[r] = Candidate{CUDART_INF_F, ~0u, kNoId};  // pushed past the k-th: out
    }
    if (n < k) ++n;
    if (n == k) take_bound(k);
  }
};

/// Compare-exchange with the lane `stride` away: the lane keeps the smaller of the two by (rank,
/// id) where keep_min, else the larger.
__device__ __forceinline__ void exchange(Candidate& c, std::uint32_t stride, bool keep_min) {
  const Candidate other = shuffle_xor(c, int(stride));
  if (keep_min == less_candidate(other, c)) c = other;
}

/// Leaves with more admitted points than this merge them into a list of at most 32 by sorting
/// (two networks of 15 and 6 exchanges) rather than one insertion each (a chain of 7 dependent
/// warp operations per point). Longer lists insert each point.
constexpr int kInsertEach = 4;

/// Offers each admitted lane's point to the list.
template <int R>
__device__ __forceinline__ void offer(WarpList<R>& list, unsigned admit, const Candidate& mine, std::uint32_t k,
                                      std::uint32_t lane) {
  if (R == 1 && __popc(admit) > kInsertEach) {
    // Sort the candidates descending, so that the list (ascending) and they form one bitonic
    // sequence; the element-wise smaller of the two halves are the 32 best of both, bitonic,
    // and one merge network orders them.
    Candidate c = (admit >> lane) & 1u ? mine : Candidate{CUDART_INF_F, ~0u, kNoId};
#pragma unroll
    for (std::uint32_t size = 2; size <= 32; size <<= 1) {
#pragma unroll
      for (std::uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
        // descending overall: blocks alternate, the last (size 32) descending
        const bool descending_block = (lane & size) == 0 || size == 32;
        exchange(c, stride, ((lane & stride) == 0) != descending_block);
      }
    }
    if (less_candidate(c, list.entry[0])) list.entry[0] = c;
#pragma unroll
    for (std::uint32_t stride = 16; stride > 0; stride >>= 1) exchange(list.entry[0], stride, (lane & stride) == 0);
    list.n = min(k, list.n + __popc(admit));
    if (lane >= k) list.entry[0] = Candidate{CUDART_INF_F, ~0u, kNoId};
    if (list.n == k) list.take_bound(k);
    return;
  }
  while (admit) {
    const int from = __ffs(admit) - 1;
    admit &= admit - 1;
    list.insert(shuffle(mine, from), k, lane);
  }
}

/// A leaf's points as one lane's share: its point and slot (i >= count: none).
template <int kWidth>
struct LeafLoad {
  typename Geometry<kWidth>::Point point;
  std::uint32_t slot;
};

template <int kWidth>
__device__ __forceinline__ LeafLoad<kWidth> load_leaf(const SpatialView& index, std::uint32_t leaf, std::uint32_t lane) {
  using Point = typename Geometry<kWidth>::Point;
  const std::uint32_t i = leaf * 32 + lane;
  LeafLoad<kWidth> l{};
  l.slot = ~0u;
  if (i < index.count) {
    l.point = reinterpret_cast<const Point*>(index.points)[i];
    l.slot = index.slots[i];
  }
  return l;
}

/// Ranks a loaded leaf against the query and offers the points within the bound to the list.
template <int kWidth, int R>
__device__ __forceinline__ void rank_leaf(WarpList<R>& list, const LeafLoad<kWidth>& l, const float4& query,
                                          const std::uint64_t* ids, std::uint32_t k, std::uint32_t lane) {
  const bool present = l.slot != ~0u;
  const float r = present ? Geometry<kWidth>::rank(query, l.point) : CUDART_INF_F;
  const unsigned admit = __ballot_sync(kFullMask, present && r <= list.bound.rank);
  if (!admit) return;
  const std::uint64_t id = (admit >> lane) & 1u ? ids[l.slot] : kNoId;
  offer(list, admit, Candidate{r, l.slot, id}, k, lane);
}

/// Of the lanes in `open`, the one whose key (a bound's float bits: bounds are >= +0, so their
/// bits order as they do) is smallest; -1 where open is empty.
__device__ __forceinline__ int nearest_lane(unsigned open, float key, std::uint32_t lane) {
  if (!open) return -1;
  const std::uint32_t bits = (open >> lane) & 1u ? __float_as_uint(key) : ~0u;
  const std::uint32_t least = __reduce_min_sync(kFullMask, bits);
  return __ffs(__ballot_sync(kFullMask, bits == least && ((open >> lane) & 1u))) - 1;
}

/// kWidth: the store's vector width; R: the list's registers per lane (k <= 32 R).
template <int kWidth, int R>
__global__ void __launch_bounds__(kSearchWarps * 32) spatial_search_kernel(SpatialSearchParams p) {
  start_chained_kernel();
  using G = Geometry<kWidth>;
  __shared__ StackEntry stacks[kSearchWarps][kStackEntries];
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::uint32_t q = blockIdx.x * kSearchWarps + warp;
  if (q >= p.num_queries) return;  // the whole warp: no block-wide barrier below
  StackEntry* const stack = stacks[warp];
  const SpatialView& index = *p.index;
  const std::uint32_t levels = index.levels, k = p.k;
  const auto* const boxes = reinterpret_cast<const typename G::Box*>(index.boxes);
  const std::uint64_t* const ids = p.store->ids;
  const float4 query = reinterpret_cast<const float4*>(p.queries)[q];
  const unsigned lanes_below = (1u << lane) - 1;
  WarpList<R> list;

  std::uint32_t top = 0;
  if (levels > 0) {
    if (lane == 0) stack[0] = StackEntry{(levels - 1) << kLevelShift, 0.0f};
    top = 1;
  }
  __syncwarp();
  while (top > 0) {
    const StackEntry entry = stack[--top];
    __syncwarp();  // every lane has read the entry before any lane pushes over it
    if (entry.bound > list.bound.rank) continue;
    const std::uint32_t level = entry.code >> kLevelShift, node = entry.code & kNodeMask;
    if (level == 0) {  // a root that is a leaf
      rank_leaf<kWidth, R>(list, load_leaf<kWidth>(index, node, lane), query, ids, k, lane);
      continue;
    }
    const std::uint32_t child_level = level - 1, child = node * 32 + lane;
    float b = CUDART_INF_F;
    const bool present = child < index.level_size[child_level];
    if (present) b = G::box_rank(query, boxes[index.level_start[child_level] + child]);
    unsigned open = __ballot_sync(kFullMask, present && b <= list.bound.rank);
    if (!open) continue;
    if (child_level == 0) {
      // The leaves: nearest first, the next one's points loaded while this one's are ranked; a
      // leaf whose bound the list has since passed is skipped, and once the nearest left is
      // past it, all are.
      int at = nearest_lane(open, b, lane);
      open &= ~(1u << at);
      LeafLoad<kWidth> current = load_leaf<kWidth>(index, node * 32 + at, lane);
      while (at >= 0) {
        const int next = nearest_lane(open, b, lane);
        LeafLoad<kWidth> following{};
        if (next >= 0) {
          open &= ~(1u << next);
          following = load_leaf<kWidth>(index, node * 32 + next, lane);
        }
        rank_leaf<kWidth, R>(list, current, query, ids, k, lane);
        at = next;
        current = following;
        if (at >= 0 && __shfl_sync(kFullMask, b, at) > list.bound.rank) break;  // nearest first: the rest are farther
      }
      continue;
    }
    // Inner nodes: the nearest on top of the stack, the others under it in lane order.
    const std::uint32_t m = __popc(open);
    const int nearest = nearest_lane(open, b, lane);
    if ((open >> lane) & 1u) {
      const std::uint32_t slot = lane == std::uint32_t(nearest) ? m - 1 : __popc(open & ~(1u << nearest) & lanes_below);
      stack[top + slot] = StackEntry{(child_level << kLevelShift) | child, b};
    }
    top += m;
    __syncwarp();
  }
  // The overflow (points a refit left out of the tree), ranked whole, last: by now the bound
  // rejects nearly all of them, and a slot is read only for a point it admits. Every warp reads
  // the same short list (in L1 after the first), so one load at a time: loads issued ahead cost
  // the walk registers, and blocks per SM.
  const auto* const overflow_points = reinterpret_cast<const typename G::Point*>(index.overflow_points);
  const std::uint32_t overflow = index.overflow_count;
#pragma unroll 1
  for (std::uint32_t first = 0; first < overflow; first += 32) {
    const std::uint32_t i = first + lane;
    const bool present = i < overflow;
    const float r = present ? G::rank(query, overflow_points[i]) : CUDART_INF_F;
    const unsigned admit = __ballot_sync(kFullMask, present && r <= list.bound.rank);
    if (!admit) continue;
    const bool mine = (admit >> lane) & 1u;
    const std::uint32_t slot = mine ? index.overflow_slots[i] : ~0u;
    offer(list, admit, Candidate{r, slot, mine ? ids[slot] : kNoId}, k, lane);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::uint32_t e = 32 * r + lane;
    if (e < k) {
      emit_answer(p.out, q, e, list.entry[r]);  // past n: padding
    }
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

void launch_spatial_search(const SpatialSearchParams& p, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  const std::uint32_t blocks = (p.num_queries + kSearchWarps - 1) / kSearchWarps;
  auto launch = [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    if (p.k <= 32) {
      launch_chained("spatial_search_kernel", spatial_search_kernel<kWidth, 1>, blocks, kSearchWarps * 32, 0, stream,
                     p);
    } else if (p.k <= 64) {
      launch_chained("spatial_search_kernel", spatial_search_kernel<kWidth, 2>, blocks, kSearchWarps * 32, 0, stream,
                     p);
    } else {
      launch_chained("spatial_search_kernel", spatial_search_kernel<kWidth, 4>, blocks, kSearchWarps * 32, 0, stream,
                     p);
    }
  };
  if (p.width == 2) {
    launch(std::integral_constant<int, 2>{});
  } else {
    launch(std::integral_constant<int, 4>{});
  }
}

}  // namespace streamknn::detail::gpu
