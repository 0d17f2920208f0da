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
// (spatial.cuh: what the build, spatial_build.cu, and the search, spatial_search.cu, share.)
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/spatial.hpp"

namespace streamknn::detail::gpu {

namespace {

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

}  // namespace

}  // namespace streamknn::detail::gpu
