// The dense screen's tensor-core product (dense_tensor_kernel; only dense_product.cu, which
// launches it beside the exact product, includes it): the tile shapes, the TF32 mma.sync step,
// the stages' copies and products, and the writes of the screened values and group keys.
// Split into phases as scan_block.cuh describes: the kernel declares its state, the parts take
// it by reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dense.cuh"
#include "cuda/kernels/dense.hpp"

namespace streamknn::detail::gpu {

namespace {

/// The tensor product (screened): the dot products from the tensor cores (mma.sync m16n8k8, TF32
/// operands, float accumulators), whose margin tensor_screen_bounds proves. The FP32 form it
/// replaced issued an FMA per element and pair, so it was bound by the issue rate, not by the
/// store's reads (MNIST-like Q = 32: 123 us on an H200 against a 50 us read floor); here a warp's
/// 16 instructions cover 16,384 of those FMAs. A block: G warps of points (a 32-slot group each) by
/// H warps of queries (8 NT each); every warp multiplies its group's 32 points by its 8 NT queries,
/// two m16 tiles by NT n8 tiles. Measured on an H200:
///   - 17-32 queries: 4 x 1 warps of 4 n8 tiles, all 5 blocks per SM resident (the shares);
///   - 33+: 4 x 2 warps (64 queries a block, whole tiles: 108 registers x 256 threads);
///   - 9-16 in 4 x 1 warps of 2 n8 tiles: product 68 against the exact form's 97 us, but the
///     screened selection 38 against 14 us (1.01-1.17x slower): the exact form stays there;
///   - stages of 8 chunks (2 or 3) instead of 4 x 4, TF32 by truncation instead of rounding
///     (half the conversion instructions, twice the margin: selection 51 against 44 us), and
///     queries copied in 64-byte runs: no faster.
struct TensorTile {
  int nt, h, g;
  bool shares;
};
inline constexpr TensorTile kTensorMidTile{4, 1, 4, true}, kTensorLargeTile{4, 2, 4, false};
// Chunks per stage: a thread's float4 (chunk t of four) feeds two k8 steps. Stages: three
// loading while one is multiplied.
inline constexpr int kTensorStepChunks = 4, kTensorStages = 4;
template <TensorTile T>
inline constexpr int tensor_bn = 8 * T.nt * T.h;
template <TensorTile T>
inline constexpr int tensor_threads = 32 * T.g * T.h;
/// float4s per chunk row of a stage: two past the tile, so that the quarter warp loading one
/// fragment (points or queries g, g + 1 of chunks t = 0..3) touches every bank once.
__host__ __device__ constexpr int padded_row(int n) { return n + 2; }
template <TensorTile T>
constexpr std::size_t tensor_shared_bytes() {
  return std::size_t(kTensorStages) * kTensorStepChunks *
             (padded_row(32 * T.g) + padded_row(tensor_bn<T>)) * sizeof(float4) +
         32 * T.g * sizeof(float);
}

/// v rounded to TF32 (to nearest, ties away): |error| <= 2^-11 |v|.
__device__ __forceinline__ std::uint32_t to_tf32(float v) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}
/// d += a b: a 16 x 8 (points x dims), b 8 x 8 (dims x queries), thread (g, t) = (lane / 4,
/// lane % 4) holding a (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); b (t, g), (t + 4, g); d (g,
/// 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// The block's slots [first_slot, slots): its tile of G groups, or its share (ProductShare), cut
/// at the store's end and the workspace row's.
template <TensorTile T>
__device__ __forceinline__ void tensor_block_slots(const DenseParams& p, const StoreView& store,
                                                   std::uint32_t& first_slot, std::uint32_t& slots) {
  first_slot = blockIdx.x * (32 * T.g);
  std::uint32_t slot_end = ~0u;
  if constexpr (T.shares) {
    const ProductShare share = product_share(min(store.slot_count, p.row_stride), T.g, p.sm_count, blockIdx.x);
    first_slot = share.first_group * kTile;
    slot_end = (share.first_group + share.groups) * kTile;
  }
  slots = min(min(store.slot_count, p.row_stride), slot_end);
}

/// A thread's place in the tensor tile: its warp (point_warp of G by query_warp of H), its
/// fragment row g and column t, and where its fragments and its norm's point start in a stage.
template <TensorTile T>
struct TensorThread {
  static constexpr int kPointRow = padded_row(32 * T.g), kQueryRow = padded_row(tensor_bn<T>);
  std::uint32_t warp, lane, g, t, point_warp, query_warp, warp_point, warp_query, a_at, b_at, norm_at;

  __device__ __forceinline__ explicit TensorThread(std::uint32_t tid) {
    warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    point_warp = warp % T.g, query_warp = warp / T.g;
    warp_point = point_warp * 32, warp_query = query_warp * 8 * T.nt;
    // Within a stage: thread (g, t)'s fragments start at chunk t of point warp_point + g (and + 8,
    // + 16, + 24) and of query warp_query + g (+ 8 j); its norm's point is warp_point + lane.
    a_at = t * kPointRow + warp_point + g, b_at = t * kQueryRow + warp_query + g;
    norm_at = warp_point + lane;
  }
};

/// Sets a thread's accumulator fragments to zero.
template <TensorTile T>
__device__ __forceinline__ void zero_fragments(float (&acc)[2][T.nt][4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < T.nt; ++j) {
#pragma unroll
      for (int f = 0; f < 4; ++f) acc[i][j][f] = 0.0f;
    }
  }
}

/// Where a thread's copies come from, and whether it has a point and a query to copy (live).
/// A stage: kStep chunks of the BM points (tile-major in the store: a chunk of 32 slots is 512
/// consecutive bytes), then of the BN queries. Copy r of thread x is entry x + r THREADS: point
/// x % BM, chunk x / BM + r THREADS / BM (the same for the queries and BN), so each thread's
/// sources are worked out here once.
template <TensorTile T>
struct TensorCopySources {
  static constexpr int kStep = kTensorStepChunks, BM = 32 * T.g, BN = tensor_bn<T>, THREADS = tensor_threads<T>;
  static_assert(kStep * BM % THREADS == 0 && THREADS % BM == 0 && THREADS % BN == 0 && kStep % 4 == 0);
  std::uint32_t copy_point, point_chunk, copy_query, query_chunk;
  bool point_live, query_live;
  const float4* point_from;
  const float4* query_from;

  __device__ __forceinline__ TensorCopySources(std::uint32_t tid, std::uint32_t first_slot, std::uint32_t slots,
                                               std::uint32_t nq, std::uint32_t chunks, const float4* vectors,
                                               const float4* query_rows) {
    copy_point = tid % BM, point_chunk = tid / BM, copy_query = tid % BN, query_chunk = tid / BN;
    point_live = first_slot + copy_point < slots, query_live = copy_query < nq;
    point_from = vectors +
                 (std::size_t(point_live ? (first_slot + copy_point) / kTile : 0) * chunks + point_chunk) * kTile +
                 copy_point % kTile;
    query_from = query_rows + (query_live ? std::size_t(copy_query) * chunks + query_chunk : 0);
  }
};

/// Issues one stage's copies (cp.async), turned by first_step: the pipeline's issue(step); its
/// state is the kernel's, held by reference.
template <TensorTile T>
struct TensorStageCopy {
  static constexpr int kStep = kTensorStepChunks, kStages = kTensorStages;
  static constexpr int BM = 32 * T.g, BN = tensor_bn<T>, THREADS = tensor_threads<T>;
  static constexpr int kPointRow = padded_row(BM), kQueryRow = padded_row(BN);
  static constexpr int kPointCopies = kStep * BM / THREADS, kPointStride = THREADS / BM;
  static constexpr int kQueryCopies = (kStep * BN + THREADS - 1) / THREADS, kQueryStride = THREADS / BN;
  float4* const& point_stages;
  float4* const& query_stages;
  const float4* const& vectors;
  const float4* const& query_rows;
  const TensorCopySources<T>& sources;
  const std::uint32_t& tid;
  const std::uint32_t& chunks;
  const std::uint32_t& steps;
  const std::uint32_t& first_step;

  __device__ __forceinline__ void operator()(std::uint32_t step) const {
    float4* const to_points =
        point_stages + (step % kStages) * kStep * kPointRow + sources.point_chunk * kPointRow + sources.copy_point;
    float4* const to_queries =
        query_stages + (step % kStages) * kStep * kQueryRow + sources.query_chunk * kQueryRow + sources.copy_query;
    const std::uint32_t turned = first_step + step, first_chunk = (turned < steps ? turned : turned - steps) * kStep;
#pragma unroll
    for (int r = 0; r < kPointCopies; ++r) {
      const bool load = sources.point_live && first_chunk + sources.point_chunk + r * kPointStride < chunks;
      copy_async16_or_zero(to_points + r * kPointStride * kPointRow,
                           load ? sources.point_from + (std::size_t(first_chunk) + r * kPointStride) * kTile : vectors,
                           load);
    }
    // The queries' copies also go through L1 (cp.async.ca), so an SM's blocks share them: H200 A/B
    // against L2 only: MNIST-like Q = 24-64 0.88-0.97x (product at Q = 32 93.9 -> 83.3 us),
    // 100,000 x 128 Q = 24-64 0.84-0.89x.
#pragma unroll
    for (int r = 0; r < kQueryCopies; ++r) {
      if (kStep * BN % THREADS != 0 && tid + r * THREADS >= std::uint32_t(kStep * BN)) break;
      const bool load = sources.query_live && first_chunk + sources.query_chunk + r * kQueryStride < chunks;
      copy_async16_or_zero<true>(to_queries + r * kQueryStride * kQueryRow,
                                 load ? sources.query_from + first_chunk + r * kQueryStride : query_rows, load);
    }
  }
};

/// Multiplies one landed stage: the warp's point norms (query warp 0), then its m16 x n8 tiles.
/// The pipeline's use(step); its state is the kernel's, held by reference.
template <TensorTile T>
struct TensorStageProduct {
  static constexpr int kStep = kTensorStepChunks, kStages = kTensorStages;
  static constexpr int kPointRow = padded_row(32 * T.g), kQueryRow = padded_row(tensor_bn<T>);
  float4* const& point_stages;
  float4* const& query_stages;
  const TensorThread<T>& at;
  float (&acc)[2][T.nt][4];
  float (&norm)[4];

  __device__ __forceinline__ void operator()(std::uint32_t step) const {
    const float4* const points = point_stages + (step % kStages) * kStep * kPointRow;
    const float4* const queries = query_stages + (step % kStages) * kStep * kQueryRow;
    if (at.query_warp == 0) {
#pragma unroll
      for (int u = 0; u < kStep; ++u) {
        const float4 v = points[u * kPointRow + at.norm_at];
        norm[u % 4] = add_dot4(norm[u % 4], v, v);
      }
    }
    // Four chunks at a time, two k8 steps: column t (t + 4) of the first is element x (y) of
    // chunk t, of the second z (w); any order of the dims is a dot product's, as long as a and
    // b agree.
#pragma unroll
    for (int four = 0; four < kStep / 4; ++four) {
      std::uint32_t a[2][2][4];  // [m16 tile][k8 step][fragment]
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float4 low = points[at.a_at + 4 * four * kPointRow + 16 * i];
        const float4 high = points[at.a_at + 4 * four * kPointRow + 16 * i + 8];
        a[i][0][0] = to_tf32(low.x), a[i][0][1] = to_tf32(high.x), a[i][0][2] = to_tf32(low.y), a[i][0][3] = to_tf32(high.y);
        a[i][1][0] = to_tf32(low.z), a[i][1][1] = to_tf32(high.z), a[i][1][2] = to_tf32(low.w), a[i][1][3] = to_tf32(high.w);
      }
#pragma unroll
      for (int j = 0; j < T.nt; ++j) {
        const float4 q = queries[at.b_at + 4 * four * kQueryRow + 8 * j];
        const std::uint32_t b[2][2] = {{to_tf32(q.x), to_tf32(q.y)}, {to_tf32(q.z), to_tf32(q.w)}};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            mma_tf32(acc[i][j], a[i][k][0], a[i][k][1], a[i][k][2], a[i][k][3], b[k][0], b[k][1]);
          }
        }
      }
    }
  }
};

/// Writes thread (g, t)'s screened values (points 16 i + 8 r + g of the warp's group against
/// queries 8 j + 2 t + e) to the rows, and keeps each query's smallest key in `smallest`.
template <TensorTile T>
__device__ __forceinline__ void write_screened(const DenseParams& p, const StoreView& store, const TensorThread<T>& at,
                                               const float (&acc)[2][T.nt][4], const float* point_norms,
                                               std::uint32_t (&smallest)[T.nt][2], float* rows, std::uint32_t nq,
                                               std::uint32_t slots, std::uint32_t group) {
  const std::uint32_t g = at.g, t = at.t;
#pragma unroll
  for (int j = 0; j < T.nt; ++j) smallest[j][0] = smallest[j][1] = kEmptyKey;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::uint32_t point = 16 * i + 8 * r + g, slot = group * kTile + point;
      const float n2 = point_norms[at.warp_point + point];
      const bool live = slot < slots && store.valid[slot] != 0, huge = n2 >= p.screen.huge;
#pragma unroll
      for (int j = 0; j < T.nt; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const std::uint32_t n = at.warp_query + 8 * j + 2 * t + e;
          const float w = !live ? CUDART_NAN_F
                          : huge ? -CUDART_INF_F
                                 : __fmaf_rd(-p.screen.norm_scale, n2, __fmaf_rn(-2.0f, acc[i][j][2 * r + e], n2));
          if (slot < slots && n < nq) rows[std::size_t(n) * p.row_stride + slot] = w;
          smallest[j][e] = min(smallest[j][e], screened_key(w));
        }
      }
    }
  }
}

/// Reduces each query's smallest key over the warp's eight row groups (lanes g = 0..7) and
/// writes it as the group's key.
template <TensorTile T>
__device__ __forceinline__ void write_group_keys(const DenseParams& p, const TensorThread<T>& at,
                                                 const std::uint32_t (&smallest)[T.nt][2], std::uint32_t q0,
                                                 std::uint32_t nq, std::uint32_t group, std::uint32_t group_stride) {
#pragma unroll
  for (int j = 0; j < T.nt; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      std::uint32_t key = smallest[j][e];
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) key = min(key, __shfl_xor_sync(kFullMask, key, offset));
      const std::uint32_t n = at.warp_query + 8 * j + 2 * at.t + e;
      if (at.g == 0 && n < nq) p.group_keys[std::size_t(q0 + n) * group_stride + group] = key;
    }
  }
}

// Five blocks of one query warp per SM: the MNIST-like store's shares (5 per SM) all resident.
template <int NT, int H, int G, bool kShares>
__global__ void __launch_bounds__(32 * G * H, H == 1 ? 5 : 1) dense_tensor_kernel(DenseParams p) {
  start_chained_kernel();
  constexpr TensorTile T{NT, H, G, kShares};
  constexpr int BN = tensor_bn<T>, BM = 32 * T.g;
  constexpr int kStep = kTensorStepChunks, kStages = kTensorStages;
  constexpr int kPointRow = padded_row(BM), kQueryRow = padded_row(BN);
  extern __shared__ __align__(16) unsigned char shared[];
  float4* const point_stages = reinterpret_cast<float4*>(shared);            // [stage][u][kPointRow]
  float4* const query_stages = point_stages + kStages * kStep * kPointRow;  // [stage][u][kQueryRow]
  float* const point_norms = reinterpret_cast<float*>(query_stages + kStages * kStep * kQueryRow);

  const StoreView store = *p.store;
  std::uint32_t first_slot, slots;
  tensor_block_slots<T>(p, store, first_slot, slots);
  const std::uint32_t chunks = store.chunks;
  if (first_slot >= slots) return;  // the whole block: the grid is sized for the plan's capacity
  const std::uint32_t q0 = blockIdx.y * BN, nq = min(std::uint32_t(BN), p.num_queries - q0);
  const float4* const vectors = static_cast<const float4*>(store.vectors);
  const float4* const query_rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
  const std::uint32_t steps = (chunks + kStep - 1) / kStep;

  const std::uint32_t tid = threadIdx.x;
  const TensorCopySources<T> sources(tid, first_slot, slots, nq, chunks, vectors, query_rows);
  // Tiles of one query warp start each block at its own step and wrap around: their blocks move
  // through their shares in step, so with one order every SM asked for the same few lines of
  // queries at once, and the L2 slices holding them bound the product (MNIST-like Q = 32: 94 us
  // with the arithmetic taken out, 64 us without the queries' copies; 78 us turned). Any order
  // of the chunks is a dot product's. The tile of two query warps measured 1.03x slower turned.
  const std::uint32_t first_step = T.h == 1 ? std::uint32_t(std::uint64_t(blockIdx.x) * steps / gridDim.x) : 0;
  const TensorStageCopy<T> issue{point_stages, query_stages, vectors, query_rows, sources,
                                 tid,          chunks,       steps,   first_step};

  const TensorThread<T> at(tid);
  float acc[2][T.nt][4];  // [m16 tile][n8 tile][fragment]
  zero_fragments<T>(acc);
  float norm[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // point norm_at's, in four partial sums (query warp 0)
  staged_pipeline<kStages>(steps, issue, TensorStageProduct<T>{point_stages, query_stages, at, acc, norm});
  if (at.query_warp == 0) point_norms[at.norm_at] = (norm[0] + norm[1]) + (norm[2] + norm[3]);
  __syncthreads();

  // V = fl(N - 2P) less C N rounded down, as the FP32 form (product_tile); each group's smallest
  // key per query. Thread (g, t) holds points 16 i + 8 r + g against queries 8 j + 2 t + e.
  const std::uint32_t group = first_slot / kTile + at.point_warp;
  if (group * kTile >= slots) return;
  float* const rows = p.screened + std::size_t(q0) * p.row_stride;
  const std::uint32_t group_stride = p.row_stride / kTile;
  std::uint32_t smallest[T.nt][2];
  write_screened<T>(p, store, at, acc, point_norms, smallest, rows, nq, slots, group);
  write_group_keys<T>(p, at, smallest, q0, nq, group, group_stride);
}

}  // namespace

}  // namespace streamknn::detail::gpu
