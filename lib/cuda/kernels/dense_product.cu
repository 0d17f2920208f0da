// The dense screen's product (DenseParams, dense.hpp): every (query, slot) pair's exact rank or
// screened value in a workspace row per query, and every 32-slot group's smallest per query; the
// selection (dense_select.cu) then ranks the pairs that can be among the k best.
#include <math_constants.h>

#include <type_traits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dense.cuh"
#include "cuda/kernels/dense.hpp"

namespace streamknn::detail::gpu {

namespace {

// The exact product's pipeline: stages of 6 float4 chunks of every point and query, one loading
// while one is multiplied. MNIST-like Q = 5-16 0.92-0.98x against 4 x 3, and 8 x 2 0.94-1.0x
// (H100).
constexpr int kExactStepChunks = 6, kExactStages = 2;

/// The exact product's tiles by batch size: queries per block (bn), points (tm) and queries (tn)
/// per thread, and threads (measured on an H100): 4 x 2 tiles of 128-slot blocks up to 8 queries;
/// above 8, 3 x 4 tiles of 96-slot blocks (730 on the MNIST-like store, 5.5 per SM, where 547
/// blocks of 128 slots left 19 SMs a fifth one): product 105 -> 100 us, search 0.96-0.97x (3 x 2 up
/// to 8 queries 1.0-1.025x). 64-slot blocks (2 x 4 x 128 threads, or 4 x 4 x 64) and 32-slot ones
/// measured 1.04-1.28x and 1.3-1.5x slower.
/// Those blocks hold 16 queries in four warps, or 12 in three for batches of 9-12: from 9 queries
/// the product is bound by its FP32 work, which the tile of 16 spent on every query it could hold
/// (H200: MNIST-like Q = 12 product 96 -> 81 us, search Q = 9-12 0.89-0.91x; 100,000 x 128 Q = 12
/// 0.82-0.86x). Stages of 3 x 6, 3 x 4 or 4 x 4 chunks in place of 2 x 6 read 1.00-1.06x slower
/// there.
/// shares: the tile also has a kernel whose grid gives every SM an equal share of the store
/// (ProductShare), used where all its blocks are resident at once. On for the tile of 8; the
/// tile of 16 measured 1.00-1.02x with it.
struct ProductTile {
  int bn, tm, tn, threads;
  bool shares;
};
inline constexpr ProductTile kExactTileOf8{8, 4, 2, 128, true}, kExactTileOf12{12, 3, 4, 96, false},
    kExactTileOf16{16, 3, 4, 128, false};
static_assert(kExactTileOf16.bn == kDenseExactMaxQueries && kExactTileOf8.bn < kExactTileOf12.bn &&
              kExactTileOf12.bn < kExactTileOf16.bn);


/// Shared memory of one exact product block: the stages' point and query chunks.
template <int BN, int TM, int TN, int THREADS>
constexpr std::size_t product_shared_bytes() {
  constexpr int BM = THREADS / (BN / TN) * TM;
  return std::size_t(kExactStages) * kExactStepChunks * (BM + BN) * sizeof(float4);
}

/// The products' shared-memory pipeline over `steps` stages of a ring of kStages: kStages - 1
/// stages in flight while one is used. issue(step) starts a stage's copies (cp.async);
/// use(step) reads stage step % kStages once it has landed for every thread. Every thread calls it.
template <int kStages, class Issue, class Use>
__device__ __forceinline__ void staged_pipeline(std::uint32_t steps, Issue issue, Use use) {
#pragma unroll
  for (int s = 0; s + 1 < kStages; ++s) {
    if (std::uint32_t(s) < steps) issue(s);
    commit_async();
  }
  for (std::uint32_t step = 0; step < steps; ++step) {
    wait_async<kStages - 2>();
    __syncthreads();  // this stage landed for every thread; the stage refilled next was read by all
    if (step + kStages - 1 < steps) issue(step + kStages - 1);
    commit_async();
    use(step);
  }
}

/// The exact ranks of BN queries x BM points from first_slot (those before slot_end); thread
/// (tm, tn) holds points tm + PT i (i < TM) against queries tn + QT j (j < TN), so a warp's point
/// loads are consecutive float4s (no bank conflict) and its query loads are broadcasts.
template <int BN, int TM, int TN, int THREADS>
__device__ __forceinline__ void product_tile(const DenseParams& p, std::uint32_t first_slot, std::uint32_t slot_end) {
  constexpr int QT = BN / TN, PT = THREADS / QT, BM = PT * TM;
  constexpr int kStep = kExactStepChunks, kStages = kExactStages;
  extern __shared__ __align__(16) unsigned char shared[];
  float4* const point_stages = reinterpret_cast<float4*>(shared);   // [stage][u][BM]
  float4* const query_stages = point_stages + kStages * kStep * BM;  // [stage][u][BN]

  const StoreView store = *p.store;
  const std::uint32_t slots = min(min(store.slot_count, p.row_stride), slot_end), chunks = store.chunks;
  if (first_slot >= slots) return;  // the whole block: the grid is sized for the plan's capacity
  const std::uint32_t q0 = blockIdx.y * BN, nq = min(std::uint32_t(BN), p.num_queries - q0);
  const float4* const vectors = static_cast<const float4*>(store.vectors);
  const float4* const query_rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
  const std::uint32_t tm = threadIdx.x % PT, tn = threadIdx.x / PT;
  const std::uint32_t steps = (chunks + kStep - 1) / kStep;

  // A stage is kStep chunks of BM points, then of BN queries. Each thread copies chunks of one
  // point and of one query, whose addresses are worked out here once (per copy they had cost a
  // division, a remainder and a 64-bit multiply-add; product 117 -> 109 us): where THREADS is a multiple of BM, thread
  // t copies point t % BM, chunks t / BM + r THREADS / BM (all the threads share the copies);
  // otherwise threads t < BM copy every chunk of point t. The same for the queries and BN.
  static_assert(BM <= THREADS && THREADS % BN == 0);
  constexpr bool kPointsShared = THREADS % BM == 0;
  constexpr int kPointStride = kPointsShared ? THREADS / BM : 1, kQueryStride = THREADS / BN;
  constexpr int kPointCopies = kPointsShared ? (kStep * BM + THREADS - 1) / THREADS : kStep;
  constexpr int kQueryCopies = (kStep * BN + THREADS - 1) / THREADS;
  const std::uint32_t copy_point = kPointsShared ? threadIdx.x % BM : threadIdx.x;
  const std::uint32_t copy_slot = first_slot + copy_point, point_u0 = kPointsShared ? threadIdx.x / BM : 0;
  const std::uint32_t copy_query = threadIdx.x % BN, query_u0 = threadIdx.x / BN;
  const bool copies_point = copy_point < std::uint32_t(BM) && copy_slot < slots, copies_query = copy_query < nq;
  const float4* const point_from =
      vectors + (std::size_t(copies_point ? copy_slot / kTile : 0) * chunks + point_u0) * kTile + copy_slot % kTile;
  const float4* const query_from = query_rows + (copies_query ? std::size_t(copy_query) * chunks + query_u0 : 0);
  // The queries' copies go through L1 (cp.async.ca): every block reads the same query lines in the
  // same order (the ranks' chunk order is fixed), so without it the SMs' blocks asked the few L2
  // slices holding them for the same lines at once. H200 A/B against L2 only: MNIST-like Q = 2-8
  // 0.87-0.97x (product at Q = 8 69.5 -> 59.8 us, 77% of DRAM bandwidth), Q = 9-16 0.97-1.00x (the
  // FP32 work bounds those).
  // whole: std::true_type for a stage that ends by the last chunk, whose copies need no bound test;
  // there every source is in the store or the batch (a thread without a point or query copies
  // nothing from tile 0's or query 0's row), so the address needs no select either. The bound tests
  // and selects were 70 of a copying warp's 714 instructions per stage at Q = 16 (SASS counters);
  // without them the product took 95.7 -> 93.3 us there (H200, ncu).
  auto copy_stage = [&](std::uint32_t step, auto whole) {
    float4* const to_points = point_stages + (step % kStages) * kStep * BM;
    float4* const to_queries = query_stages + (step % kStages) * kStep * BN;
    const std::uint32_t step_chunk = step * kStep;
#pragma unroll
    for (int r = 0; r < kPointCopies; ++r) {
      // Entry u BM + point of the stage: t + r THREADS where the threads share the copies.
      const std::uint32_t u = point_u0 + r * kPointStride, c = step_chunk + u;
      const std::uint32_t entry = kPointsShared ? threadIdx.x + r * THREADS : u * BM + copy_point;
      const bool past = kPointsShared ? kStep * BM % THREADS != 0 && entry >= std::uint32_t(kStep * BM)
                                      : copy_point >= std::uint32_t(BM);
      if (past) break;
      const bool load = copies_point && (whole || c < chunks);
      const float4* const from = point_from + std::size_t(step_chunk + r * kPointStride) * kTile;
      copy_async16_or_zero(to_points + entry, whole || load ? from : vectors, load);
    }
#pragma unroll
    for (int r = 0; r < kQueryCopies; ++r) {
      const std::uint32_t entry = threadIdx.x + r * THREADS, c = step_chunk + query_u0 + r * kQueryStride;
      if (kStep * BN % THREADS != 0 && entry >= std::uint32_t(kStep * BN)) break;
      const bool load = copies_query && (whole || c < chunks);
      const float4* const from = query_from + step_chunk + r * kQueryStride;
      copy_async16_or_zero<true>(to_queries + entry, whole || load ? from : query_rows, load);
    }
  };
  auto issue = [&](std::uint32_t step) {
    if ((step + 1) * kStep <= chunks) {
      copy_stage(step, std::true_type{});
    } else {
      copy_stage(step, std::false_type{});
    }
  };

  float acc[TM][TN];  // per pair: its rank
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }
  staged_pipeline<kStages>(steps, issue, [&](std::uint32_t step) {
    const float4* const points = point_stages + (step % kStages) * kStep * BM;
    const float4* const queries = query_stages + (step % kStages) * kStep * BN;
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      float4 x[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) x[i] = points[u * BM + tm + PT * i];
      // Through accumulate, as the scan and the CPU backend rank: the same bits.
      float4 q[TN];
#pragma unroll
      for (int j = 0; j < TN; ++j) q[j] = queries[u * BN + tn + QT * j];
#pragma unroll
      for (int i = 0; i < TM; ++i) accumulate<TN, false>(acc[i], x[i], [&](int j) { return q[j]; });
    }
  });
  // An empty slot gets NaN (never selected). Each group of 32 slots also gets its smallest key
  // per query (kEmptyKey: none), so the selection reads only the groups that can hold what it
  // looks for.
  float* const rows = p.screened + std::size_t(q0) * p.row_stride;
  const std::uint32_t group_stride = p.row_stride / kTile, lane = threadIdx.x & 31;
  std::uint32_t keys[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::uint32_t slot = first_slot + tm + PT * i;
    const bool live = slot < slots && store.valid[slot] != 0;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const std::uint32_t n = tn + QT * j;
      const float w = live ? rank_of<false>(acc[i][j]) : CUDART_NAN_F;
      if (slot < slots && n < nq) rows[std::size_t(n) * p.row_stride + slot] = w;
      keys[i][j] = screened_key(w);
    }
  }
  // A warp's lanes hold 32 consecutive slots of one query tile row: group tm / 32 + (PT / 32) i.
  static_assert(PT % kTile == 0);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::uint32_t group = (first_slot + tm - lane + PT * i) / kTile;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const std::uint32_t smallest = __reduce_min_sync(kFullMask, keys[i][j]), n = tn + QT * j;
      if (lane == 0 && n < nq && group * kTile < slots) p.group_keys[std::size_t(q0 + n) * group_stride + group] = smallest;
    }
  }
}


/// kShares: the grid's blocks take ProductShares (the tile's lanes are a warp's group), rather
/// than a whole tile each.
template <int BN, int TM, int TN, int THREADS, bool kShares>
__global__ void __launch_bounds__(THREADS) dense_product_kernel(DenseParams p) {
  start_chained_kernel();
  constexpr int PT = THREADS / (BN / TN), BM = PT * TM;
  if constexpr (kShares) {
    static_assert(PT == kTile && TM > 1);
    const ProductShare share = product_share(min(p.store->slot_count, p.row_stride), TM, p.sm_count, blockIdx.x);
    const std::uint32_t first = share.first_group * kTile, end = (share.first_group + share.groups) * kTile;
    // A share of TM - 1 groups runs a tile of its size: lanes past its end would still issue
    // their arithmetic. Smaller shares (stores of few tiles per SM) leave those lanes idle; an
    // SM still issues no more than whole tiles gave its busiest one (m blocks of TM groups).
    if (share.groups == TM - 1) {
      product_tile<BN, TM - 1, TN, THREADS>(p, first, end);
    } else if (share.groups > 0) {
      product_tile<BN, TM, TN, THREADS>(p, first, end);
    }
  } else {
    product_tile<BN, TM, TN, THREADS>(p, blockIdx.x * BM, ~0u);
  }
}

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

// Five blocks of one query warp per SM: the MNIST-like store's shares (5 per SM) all resident.
template <int NT, int H, int G, bool kShares>
__global__ void __launch_bounds__(32 * G * H, H == 1 ? 5 : 1) dense_tensor_kernel(DenseParams p) {
  start_chained_kernel();
  constexpr TensorTile T{NT, H, G, kShares};
  constexpr int BN = tensor_bn<T>, BM = 32 * T.g, THREADS = tensor_threads<T>;
  constexpr int kStep = kTensorStepChunks, kStages = kTensorStages;
  constexpr int kPointRow = padded_row(BM), kQueryRow = padded_row(BN);
  extern __shared__ __align__(16) unsigned char shared[];
  float4* const point_stages = reinterpret_cast<float4*>(shared);            // [stage][u][kPointRow]
  float4* const query_stages = point_stages + kStages * kStep * kPointRow;  // [stage][u][kQueryRow]
  float* const point_norms = reinterpret_cast<float*>(query_stages + kStages * kStep * kQueryRow);

  const StoreView store = *p.store;
  std::uint32_t first_slot = blockIdx.x * BM, slot_end = ~0u;
  if constexpr (kShares) {
    const ProductShare share = product_share(min(store.slot_count, p.row_stride), T.g, p.sm_count, blockIdx.x);
    first_slot = share.first_group * kTile;
    slot_end = (share.first_group + share.groups) * kTile;
  }
  const std::uint32_t slots = min(min(store.slot_count, p.row_stride), slot_end), chunks = store.chunks;
  if (first_slot >= slots) return;  // the whole block: the grid is sized for the plan's capacity
  const std::uint32_t q0 = blockIdx.y * BN, nq = min(std::uint32_t(BN), p.num_queries - q0);
  const float4* const vectors = static_cast<const float4*>(store.vectors);
  const float4* const query_rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
  const std::uint32_t steps = (chunks + kStep - 1) / kStep;

  // A stage: kStep chunks of the BM points (tile-major in the store: a chunk of 32 slots is 512
  // consecutive bytes), then of the BN queries. Copy r of thread x is entry x + r THREADS: point
  // x % BM, chunk x / BM + r THREADS / BM (the same for the queries and BN), so each thread's
  // sources are worked out here once.
  static_assert(kStep * BM % THREADS == 0 && THREADS % BM == 0 && THREADS % BN == 0 && kStep % 4 == 0);
  constexpr int kPointCopies = kStep * BM / THREADS, kPointStride = THREADS / BM;
  constexpr int kQueryCopies = (kStep * BN + THREADS - 1) / THREADS, kQueryStride = THREADS / BN;
  const std::uint32_t tid = threadIdx.x;
  const std::uint32_t copy_point = tid % BM, point_chunk = tid / BM, copy_query = tid % BN, query_chunk = tid / BN;
  const bool point_live = first_slot + copy_point < slots, query_live = copy_query < nq;
  const float4* const point_from =
      vectors + (std::size_t(point_live ? (first_slot + copy_point) / kTile : 0) * chunks + point_chunk) * kTile +
      copy_point % kTile;
  const float4* const query_from = query_rows + (query_live ? std::size_t(copy_query) * chunks + query_chunk : 0);
  // Tiles of one query warp start each block at its own step and wrap around: their blocks move
  // through their shares in step, so with one order every SM asked for the same few lines of
  // queries at once, and the L2 slices holding them bound the product (MNIST-like Q = 32: 94 us
  // with the arithmetic taken out, 64 us without the queries' copies; 78 us turned). Any order
  // of the chunks is a dot product's. The tile of two query warps measured 1.03x slower turned.
  // The queries' copies also go through L1 (cp.async.ca), so an SM's blocks share them: H200 A/B
  // against L2 only: MNIST-like Q = 24-64 0.88-0.97x (product at Q = 32 93.9 -> 83.3 us),
  // 100,000 x 128 Q = 24-64 0.84-0.89x.
  const std::uint32_t first_step = T.h == 1 ? std::uint32_t(std::uint64_t(blockIdx.x) * steps / gridDim.x) : 0;
  auto issue = [&](std::uint32_t step) {
    float4* const to_points = point_stages + (step % kStages) * kStep * kPointRow + point_chunk * kPointRow + copy_point;
    float4* const to_queries = query_stages + (step % kStages) * kStep * kQueryRow + query_chunk * kQueryRow + copy_query;
    const std::uint32_t turned = first_step + step, first_chunk = (turned < steps ? turned : turned - steps) * kStep;
#pragma unroll
    for (int r = 0; r < kPointCopies; ++r) {
      const bool load = point_live && first_chunk + point_chunk + r * kPointStride < chunks;
      copy_async16_or_zero(to_points + r * kPointStride * kPointRow,
                           load ? point_from + (std::size_t(first_chunk) + r * kPointStride) * kTile : vectors, load);
    }
#pragma unroll
    for (int r = 0; r < kQueryCopies; ++r) {
      if (kStep * BN % THREADS != 0 && tid + r * THREADS >= std::uint32_t(kStep * BN)) break;
      const bool load = query_live && first_chunk + query_chunk + r * kQueryStride < chunks;
      copy_async16_or_zero<true>(to_queries + r * kQueryStride * kQueryRow,
                                 load ? query_from + first_chunk + r * kQueryStride : query_rows, load);
    }
  };

  const std::uint32_t warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const std::uint32_t point_warp = warp % T.g, query_warp = warp / T.g;
  const std::uint32_t warp_point = point_warp * 32, warp_query = query_warp * 8 * T.nt;
  // Within a stage: thread (g, t)'s fragments start at chunk t of point warp_point + g (and + 8,
  // + 16, + 24) and of query warp_query + g (+ 8 j); its norm's point is warp_point + lane.
  const std::uint32_t a_at = t * kPointRow + warp_point + g, b_at = t * kQueryRow + warp_query + g;
  const std::uint32_t norm_at = warp_point + lane;
  float acc[2][T.nt][4];  // [m16 tile][n8 tile][fragment]
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < T.nt; ++j) {
#pragma unroll
      for (int f = 0; f < 4; ++f) acc[i][j][f] = 0.0f;
    }
  }
  float norm[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // point norm_at's, in four partial sums (query warp 0)
  staged_pipeline<kStages>(steps, issue, [&](std::uint32_t step) {
    const float4* const points = point_stages + (step % kStages) * kStep * kPointRow;
    const float4* const queries = query_stages + (step % kStages) * kStep * kQueryRow;
    if (query_warp == 0) {
#pragma unroll
      for (int u = 0; u < kStep; ++u) {
        const float4 v = points[u * kPointRow + norm_at];
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
        const float4 low = points[a_at + 4 * four * kPointRow + 16 * i];
        const float4 high = points[a_at + 4 * four * kPointRow + 16 * i + 8];
        a[i][0][0] = to_tf32(low.x), a[i][0][1] = to_tf32(high.x), a[i][0][2] = to_tf32(low.y), a[i][0][3] = to_tf32(high.y);
        a[i][1][0] = to_tf32(low.z), a[i][1][1] = to_tf32(high.z), a[i][1][2] = to_tf32(low.w), a[i][1][3] = to_tf32(high.w);
      }
#pragma unroll
      for (int j = 0; j < T.nt; ++j) {
        const float4 q = queries[b_at + 4 * four * kQueryRow + 8 * j];
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
  });
  if (query_warp == 0) point_norms[norm_at] = (norm[0] + norm[1]) + (norm[2] + norm[3]);
  __syncthreads();

  // V = fl(N - 2P) less C N rounded down, as the FP32 form (product_tile); each group's smallest
  // key per query. Thread (g, t) holds points 16 i + 8 r + g against queries 8 j + 2 t + e.
  const std::uint32_t group = first_slot / kTile + point_warp;
  if (group * kTile >= slots) return;
  float* const rows = p.screened + std::size_t(q0) * p.row_stride;
  const std::uint32_t group_stride = p.row_stride / kTile;
  std::uint32_t smallest[T.nt][2];
#pragma unroll
  for (int j = 0; j < T.nt; ++j) smallest[j][0] = smallest[j][1] = kEmptyKey;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::uint32_t point = 16 * i + 8 * r + g, slot = group * kTile + point;
      const float n2 = point_norms[warp_point + point];
      const bool live = slot < slots && store.valid[slot] != 0, huge = n2 >= p.screen.huge;
#pragma unroll
      for (int j = 0; j < T.nt; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const std::uint32_t n = warp_query + 8 * j + 2 * t + e;
          const float w = !live ? CUDART_NAN_F
                          : huge ? -CUDART_INF_F
                                 : __fmaf_rd(-p.screen.norm_scale, n2, __fmaf_rn(-2.0f, acc[i][j][2 * r + e], n2));
          if (slot < slots && n < nq) rows[std::size_t(n) * p.row_stride + slot] = w;
          smallest[j][e] = min(smallest[j][e], screened_key(w));
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < T.nt; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      std::uint32_t key = smallest[j][e];
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) key = min(key, __shfl_xor_sync(kFullMask, key, offset));
      const std::uint32_t n = warp_query + 8 * j + 2 * t + e;
      if (g == 0 && n < nq) p.group_keys[std::size_t(q0 + n) * group_stride + group] = key;
    }
  }
}

/// A product's kernels, either form: whole tiles of `groups` 32-slot groups by bn queries, and
/// (where the tile has them) the kernel with shares (ProductShare), used where all its blocks are
/// resident at once.
using ProductKernel = void (*)(DenseParams);
struct ProductKernels {
  const char* name;
  ProductKernel tiles, shares;  // shares: nullptr where the tile has none
  std::uint32_t groups, bn, threads;
  std::size_t shared_bytes;
};

template <ProductTile T>
ProductKernels exact_kernels() {
  constexpr std::uint32_t kBlockSlots = T.threads / (T.bn / T.tn) * T.tm;
  ProductKernel shares = nullptr;
  if constexpr (T.shares) shares = dense_product_kernel<T.bn, T.tm, T.tn, T.threads, true>;
  return {"dense_product_kernel", dense_product_kernel<T.bn, T.tm, T.tn, T.threads, false>, shares,
          kBlockSlots / kTile, std::uint32_t(T.bn), std::uint32_t(T.threads),
          product_shared_bytes<T.bn, T.tm, T.tn, T.threads>()};
}

template <TensorTile T>
ProductKernels tensor_kernels() {
  ProductKernel shares = nullptr;
  if constexpr (T.shares) shares = dense_tensor_kernel<T.nt, T.h, T.g, true>;
  return {"dense_tensor_kernel", dense_tensor_kernel<T.nt, T.h, T.g, false>, shares, std::uint32_t(T.g),
          std::uint32_t(tensor_bn<T>), std::uint32_t(tensor_threads<T>), tensor_shared_bytes<T>()};
}

/// `resident`: DenseResidency's count for k's kernel with shares.
void launch_product(const ProductKernels& k, const DenseParams& p, std::uint32_t resident, cudaStream_t stream) {
  const std::uint32_t queries = (p.num_queries + k.bn - 1) / k.bn, groups = p.row_stride / kTile;
  if (k.shares != nullptr) {
    const std::uint32_t per_sm = product_blocks_per_sm(groups, k.groups, p.sm_count);
    if (per_sm * queries <= resident) {
      launch_chained(k.name, k.shares, dim3(p.sm_count * per_sm, queries), k.threads, k.shared_bytes, stream, p);
      return;
    }
  }
  launch_chained(k.name, k.tiles, dim3((groups + k.groups - 1) / k.groups, queries), k.threads, k.shared_bytes,
                 stream, p);
}

/// Raises k's shared-memory limits; returns the blocks per SM its kernel with shares holds at
/// once (0 without shares).
std::uint32_t configure_product(const ProductKernels& k) {
  int resident = 0;
  for (const ProductKernel kernel : {k.tiles, k.shares}) {
    if (kernel == nullptr) continue;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(k.shared_bytes)),
               "cudaFuncSetAttribute", k.name);
  }
  if (k.shares != nullptr) {
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, k.shares, int(k.threads), k.shared_bytes),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor", k.name);
  }
  return std::uint32_t(resident);
}

}  // namespace

DenseResidency configure_dense_product() {
  DenseResidency residency;
  residency.few_queries = configure_product(exact_kernels<kExactTileOf8>());
  configure_product(exact_kernels<kExactTileOf12>());
  configure_product(exact_kernels<kExactTileOf16>());
  residency.mid_queries = configure_product(tensor_kernels<kTensorMidTile>());
  configure_product(tensor_kernels<kTensorLargeTile>());
  return residency;
}

void launch_dense_product(const DenseParams& params, cudaStream_t stream) {
  if (params.exact) {
    if (params.num_queries <= kExactTileOf8.bn) {
      launch_product(exact_kernels<kExactTileOf8>(), params, params.residency.few_queries, stream);
    } else if (params.num_queries <= kExactTileOf12.bn) {
      launch_product(exact_kernels<kExactTileOf12>(), params, 0, stream);
    } else {
      launch_product(exact_kernels<kExactTileOf16>(), params, 0, stream);
    }
  } else {
    if (params.num_queries <= std::uint32_t(tensor_bn<kTensorMidTile>)) {
      launch_product(tensor_kernels<kTensorMidTile>(), params, params.residency.mid_queries, stream);
    } else {
      launch_product(tensor_kernels<kTensorLargeTile>(), params, 0, stream);
    }
  }
}

}  // namespace streamknn::detail::gpu
