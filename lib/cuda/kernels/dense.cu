// The dense screen (DenseParams): batches over small stores of many dimensions.
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
#include <math_constants.h>

#include <algorithm>
#include <type_traits>

#include "cuda/kernels.hpp"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/select.cuh"

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

/// A screened value's key: ordered bits, NaN (an empty slot) as kEmptyKey, above every value.
inline constexpr std::uint32_t kEmptyKey = 0xffffffffu;
__device__ __forceinline__ std::uint32_t screened_key(float w) { return w == w ? ordered_bits(w) : kEmptyKey; }

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
__host__ __device__ constexpr std::uint32_t product_blocks_per_sm(std::uint32_t groups, std::uint32_t tm,
                                                                  std::uint32_t sms) {
  return ((groups + tm - 1) / tm + sms - 1) / sms;
}
__host__ __device__ constexpr ProductShare product_share(std::uint32_t slots, std::uint32_t tm, std::uint32_t sms,
                                                         std::uint32_t block) {
  const std::uint32_t groups = (slots + kTile - 1) / kTile, per_sm = product_blocks_per_sm(groups, tm, sms);
  const std::uint32_t sm = block % sms, j = block / sms;
  if (j >= per_sm) return {0, 0};  // the grid is sized for the plan's capacity
  const std::uint32_t base = groups / sms, extra = groups % sms;  // the first `extra` SMs take one more
  const std::uint32_t sm_groups = base + (sm < extra), sm_first = sm * base + (sm < extra ? sm : extra);
  const std::uint32_t least = sm_groups / per_sm, more = sm_groups % per_sm;  // the first `more` take one more
  return {sm_first + j * least + (j < more ? j : more), least + (j < more)};
}
/// Checked here at compile time: the grid's shares cover groups [0, groups) once, in order, at
/// most tm each, and tm or tm - 1 each where every SM's part holds that many.
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
static_assert(shares_cover(70'000, 3, 132) && shares_cover(70'000, 4, 132) && shares_cover(70'000, 4, 114));
static_assert(shares_cover(20'000, 3, 132) && shares_cover(19'200, 4, 132) && shares_cover(3'000, 4, 132));
static_assert(shares_cover(1, 4, 132) && shares_cover(32, 3, 1) && shares_cover(1'000'000, 4, 132));

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

constexpr int kSelectThreads = 256;  // 8 warps scan the groups; a thread per candidate ranks
constexpr std::uint32_t kSelectWarps = kSelectThreads / 32;
constexpr std::uint32_t kWindowPerThread = 4;
constexpr std::uint32_t kWindow = kSelectThreads * kWindowPerThread;  // slots per window of the tie path
constexpr int kGroupLoads = 8;                // listed groups a warp of the selection loads at once
constexpr std::uint32_t kCountedMerge = 512;  // merges of at most this many entries order by counting
constexpr std::uint32_t kBoundSlack = 8;      // keys a first bound may admit past the k-th (bound_key)
/// Room left for the selection's static shared memory (counts, words, scratch: about 1.5 KB).
constexpr std::size_t kSelectStaticBytes = 2048;

/// Slots a batch holds: a merge's leftover (< k) plus a window, rounded to 16 bytes.
__host__ __device__ constexpr std::uint32_t batch_entries(std::uint32_t k) {
  return (ceil_pow2(k) + kWindow + 3) / 4 * 4;
}
/// The best list (k) and a full batch sorted together.
__host__ __device__ constexpr std::uint32_t merge_entries(std::uint32_t k) { return ceil_pow2(k + batch_entries(k)); }
/// float4s between two staged points: odd, so a quarter warp's loads of one chunk of eight
/// points fall in different banks.
__host__ __device__ constexpr std::uint32_t staged_stride(std::uint32_t chunks) { return chunks | 1u; }
/// Points staged at once whose room also holds the list of a row's groups to read (fill_batch).
__host__ __device__ constexpr std::uint32_t min_stage_points(std::uint32_t chunks, std::uint32_t groups) {
  const std::uint32_t groups_per_point = staged_stride(chunks) * 4;
  return groups <= groups_per_point ? 1 : (groups + groups_per_point - 1) / groups_per_point;
}
/// Shared memory of one selection block: the merge buffer, the batch's slots, the query, the
/// row's group keys (to 16 bytes), then stage_points points staged for their exact ranks.
std::size_t select_shared_bytes(std::uint32_t k, std::uint32_t chunks, std::uint32_t groups, std::uint32_t stage_points) {
  return std::size_t(merge_entries(k)) * sizeof(Candidate) + std::size_t(batch_entries(k)) * 4 +
         std::size_t(chunks) * sizeof(float4) + std::size_t((groups + 3) / 4 * 4) * 4 +
         std::size_t(stage_points) * staged_stride(chunks) * sizeof(float4);
}

/// A bound on the keys that key_at(i) gives for i < n, other than kEmptyKey: a key with at least
/// `want` of them at or below it and at most kBoundSlack more than that (the want-th smallest
/// itself where a pass leaves more), or kEmptyKey when fewer than want exist. One pass finds the
/// keys' common leading bits; then MSB-first passes of 8 bits below them (a row's keys share their
/// leading bits, so counting from the top byte put every key on one shared counter: with a
/// warp-aggregated count instead, 6-9 us of the selection). A pass whose digit holds at most
/// kBoundSlack keys past the want-th ends the search with that digit's largest key: the bound
/// only has to admit want keys, and each later pass cost about 1,000 cycles of barriers. Every
/// thread calls it.
template <class KeyAt>
__device__ std::uint32_t bound_key(std::uint32_t n, std::uint32_t want, std::uint32_t* counts, std::uint32_t* words,
                                 std::uint32_t* scratch, KeyAt key_at) {
  __syncthreads();  // a previous call's scratch, counts and words are read
  std::uint32_t all_and = ~0u, all_or = 0, count = 0;
  for (std::uint32_t i = threadIdx.x; i < n; i += kSelectThreads) {
    const std::uint32_t key = key_at(i);
    if (key == kEmptyKey) continue;
    all_and &= key;
    all_or |= key;
    ++count;
  }
  const BlockBits bits = block_and_or_sum(all_and, all_or, count, scratch);
  if (bits.count < want) return kEmptyKey;
  const KeyPrefix common = shared_prefix(bits);
  std::uint32_t prefix = common.value;
  for (std::uint32_t known = common.bits; known < 32; known += 8) {
    for (std::uint32_t i = threadIdx.x; i < 256; i += kSelectThreads) counts[i] = 0;
    __syncthreads();  // also: every thread has read the scratch and the previous pass's words
    for (std::uint32_t i = threadIdx.x; i < n; i += kSelectThreads) {
      const std::uint32_t key = key_at(i);
      if (key != kEmptyKey && (known == 0 || (key ^ prefix) >> (32 - known) == 0)) atomicAdd(&counts[(key << known) >> 24], 1u);
    }
    __syncthreads();
    const RadixStep step = radix_step(counts, want, words);
    prefix |= (step.digit << 24) >> known;
    if (known + 8 < 32 && step.left - step.want <= kBoundSlack) {
      __syncthreads();  // words and counts are read before the caller's next use
      return min(prefix | (~0u >> (known + 8)), kEmptyKey - 1);
    }
    want = step.want;
  }
  __syncthreads();  // words and counts are read before the caller's next use
  return prefix;
}

__global__ void __launch_bounds__(kSelectThreads) dense_select_kernel(DenseParams p) {
  start_chained_kernel();
  extern __shared__ __align__(16) unsigned char shared[];
  const std::uint32_t parts = p.blocks_per_query, q = blockIdx.x / parts, part = blockIdx.x % parts;
  const std::uint32_t k = p.k, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const StoreView store = *p.store;
  const std::uint32_t slots = min(store.slot_count, p.row_stride), chunks = store.chunks;
  const std::uint32_t groups = (slots + kTile - 1) / kTile;
  const std::uint32_t batch_cap = batch_entries(k);
  Candidate* const merged = reinterpret_cast<Candidate*>(shared);  // best list first, then the batch
  std::uint32_t* const batch = reinterpret_cast<std::uint32_t*>(merged + merge_entries(k));  // slots to rank
  float4* const query = reinterpret_cast<float4*>(batch + batch_cap);
  std::uint32_t* const group_keys = reinterpret_cast<std::uint32_t*>(query + chunks);
  float4* const staged = reinterpret_cast<float4*>(group_keys + (p.row_stride / kTile + 3) / 4 * 4);
  __shared__ std::uint32_t counts[256], words[3], scratch[96];
  __shared__ std::uint32_t batch_count, best_count, listed_groups;
  __shared__ float query_norm;
  __shared__ bool overflow;

  const float* const row = p.screened + std::size_t(q) * p.row_stride;
  const float4* const query_row = reinterpret_cast<const float4*>(p.queries) + std::size_t(q) * chunks;
  const std::uint32_t* const group_row = p.group_keys + std::size_t(q) * (p.row_stride / kTile);
  float qn = 0.0f;
  for (std::uint32_t c = threadIdx.x; c < (p.exact ? 0 : chunks); c += kSelectThreads) {
    const float4 v = query_row[c];
    query[c] = v;
    qn = __fmaf_rn(v.x, v.x, __fmaf_rn(v.y, v.y, __fmaf_rn(v.z, v.z, __fmaf_rn(v.w, v.w, qn))));
  }
  for (std::uint32_t g = threadIdx.x; g < groups; g += kSelectThreads) group_keys[g] = __ldcg(group_row + g);
  // |q|^2 in any order (ScreenBounds allows it).
  if (threadIdx.x == 0) {
    query_norm = 0.0f;
    batch_count = 0;
    best_count = 0;
  }
  __syncthreads();
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) qn = __fadd_rn(qn, __shfl_xor_sync(kFullMask, qn, offset));
  if (lane == 0) atomicAdd(&query_norm, qn);

  // A. A key with at least k slots at or below it: a bound on the group minima that admits k of
  // them (k groups, each with a slot at or below it), or where fewer than k groups hold a value,
  // one on the whole row (or every value, where there are at most k).
  std::uint32_t first_bound = bound_key(groups, k, counts, words, scratch, [&](std::uint32_t g) { return group_keys[g]; });
  if (first_bound == kEmptyKey) {
    first_bound = bound_key(slots, k, counts, words, scratch, [&](std::uint32_t s) { return screened_key(__ldcg(row + s)); });
    if (first_bound == kEmptyKey) first_bound = ordered_bits(CUDART_INF_F);  // at most k values: all of them
  }
  auto in_first = [&](float v) { return v == v && ordered_bits(v) <= first_bound; };

  // Ranks batch[from, from + count) exactly and hands each (index in the range, candidate) to
  // `put`: the points in slices of p.stage_points, each copied to shared memory by the whole
  // block (every chunk in flight at once), then ranked a thread per point from there (the
  // ranking thread's own chain of loads, 32 at a time, took 25 us of a 44 us selection on the
  // MNIST-like store: 196 chunks). Every thread calls it.
  auto rank_slots = [&](std::uint32_t from, std::uint32_t count, auto put) {
    if (p.exact) {  // the row holds the ranks
      for (std::uint32_t i = threadIdx.x; i < count; i += kSelectThreads) {
        const std::uint32_t slot = batch[from + i];
        put(i, Candidate{__ldcg(row + slot), slot, store.ids[slot]});
      }
      __syncthreads();  // as below: the caller's next use of the batch waits for every put
      return;
    }
    for (std::uint32_t first = 0; first < count; first += p.stage_points) {
      const std::uint32_t m = min(p.stage_points, count - first);
      for (std::uint32_t i = threadIdx.x; i < m * chunks; i += kSelectThreads) {
        const std::uint32_t point = i / chunks, slot = batch[from + first + point], c = i % chunks;
        copy_async16(staged + point * staged_stride(chunks) + c,
                     static_cast<const float4*>(store.vectors) + (std::size_t(slot / kTile) * chunks + c) * kTile + slot % kTile);
      }
      commit_async();
      wait_async<0>();
      __syncthreads();
      for (std::uint32_t i = threadIdx.x; i < m; i += kSelectThreads) {
        const std::uint32_t slot = batch[from + first + i];
        const std::uint64_t id = store.ids[slot];  // issued before the chain, used after it
        const float4* const point = staged + std::size_t(i) * staged_stride(chunks);
        float acc[1] = {0.0f};
#pragma unroll 4
        for (std::uint32_t c = 0; c < chunks; ++c) accumulate<1, false>(acc, point[c], [&](int) { return query[c]; });
        put(first + i, Candidate{acc[0], slot, id});
      }
      __syncthreads();  // the slice is read before the next one lands
    }
  };
  // Keeps the k best by (rank, id) of merged[0, total) in merged[0, min(total, k)) and empties
  // the batch. Every thread calls it.
  auto merge_best = [&](std::uint32_t total) {
    Candidate* const ordered = reinterpret_cast<Candidate*>(staged);  // free once the points are ranked
    if (total <= kCountedMerge && std::size_t(total) <= std::size_t(p.stage_points) * staged_stride(chunks)) {
      // Each entry's place is the number of entries closer than it (ids are distinct): one
      // barrier, where the bitonic sort of 128 entries took 28 (about 3-4 us).
      for (std::uint32_t i = threadIdx.x; i < total; i += kSelectThreads) {
        const Candidate e = merged[i];
        std::uint32_t place = 0;
        for (std::uint32_t j = 0; j < total; ++j) place += closer(merged[j].rank, merged[j].id, e.rank, e.id);
        if (place < k) ordered[place] = e;
      }
      __syncthreads();
      for (std::uint32_t i = threadIdx.x; i < min(total, k); i += kSelectThreads) merged[i] = ordered[i];
    } else {
      const std::uint32_t size = ceil_pow2(total);
      for (std::uint32_t i = total + threadIdx.x; i < size; i += kSelectThreads) merged[i] = Candidate{CUDART_INF_F, ~0u, kNoId};
      __syncthreads();
      block_bitonic_sort(merged, size, [](const Candidate& a, const Candidate& b) { return closer(a.rank, a.id, b.rank, b.id); });
    }
    if (threadIdx.x == 0) {
      best_count = min(total, k);
      batch_count = 0;
    }
    __syncthreads();
  };
  // Ranks the batch exactly and merges it with the best list. Every thread calls it.
  auto rank_and_merge = [&] {
    __syncthreads();
    const std::uint32_t n = batch_count, best = best_count;
    if (n == 0) return;
    rank_slots(0, n, [&](std::uint32_t i, const Candidate& c) { merged[best + i] = c; });
    merge_best(best + n);
  };
  // Puts every slot that passes `take` into the batch, reading only the groups whose smallest key
  // is at most group_bound: they are listed first (in the staging room, free until the batch is
  // ranked), then each warp loads kGroupLoads listed groups at once. Walking the row's groups a
  // warp window at a time instead was a chain of dependent L2 loads per warp (clock64 stamps,
  // MNIST-like K = 128: 10,900 cycles of a 61,400-cycle selection).
  // True where the batch overflowed (ties: many slots share the bound's value, or the screen
  // cannot tell them apart); then the batch holds part of them only.
  auto fill_batch = [&](std::uint32_t group_bound, auto take) {
    std::uint32_t* const listed = reinterpret_cast<std::uint32_t*>(staged);  // min_stage_points: room for every group
    if (threadIdx.x == 0) {
      overflow = false;
      listed_groups = 0;
    }
    __syncthreads();
    for (std::uint32_t g = threadIdx.x; g < groups; g += kSelectThreads) {
      if (group_keys[g] <= group_bound) listed[atomicAdd(&listed_groups, 1u)] = g;
    }
    __syncthreads();
    const std::uint32_t n_listed = listed_groups;
    for (std::uint32_t first = warp * kGroupLoads; first < n_listed; first += kSelectWarps * kGroupLoads) {
      std::uint32_t at_slot[kGroupLoads];
      float value[kGroupLoads];
#pragma unroll
      for (int u = 0; u < kGroupLoads; ++u) {
        at_slot[u] = first + u < n_listed ? listed[first + u] * kTile + lane : slots;
        value[u] = at_slot[u] < slots ? __ldcg(row + at_slot[u]) : CUDART_NAN_F;
      }
#pragma unroll
      for (int u = 0; u < kGroupLoads; ++u) {
        if (at_slot[u] < slots && take(at_slot[u], value[u])) {
          const std::uint32_t at = atomicAdd(&batch_count, 1u);
          if (at < batch_cap) {
            batch[at] = at_slot[u];
          } else {
            overflow = true;
          }
        }
      }
    }
    __syncthreads();
    return overflow;
  };
  // After an overflow: every slot that passes `take`, over the whole row a window at a time,
  // ranked and merged whenever the batch reaches k, so that each next window fits.
  auto gather_by_windows = [&](auto take) {
    // Every thread has read the count fill_batch left (phase B's split test reads it): racecheck
    // reported this reset racing that read.
    __syncthreads();
    if (threadIdx.x == 0) batch_count = 0;
    for (std::uint32_t base = 0; base < slots; base += kWindow) {
      __syncthreads();
#pragma unroll
      for (std::uint32_t r = 0; r < kWindowPerThread; ++r) {
        const std::uint32_t s = base + r * kSelectThreads + threadIdx.x;
        if (s < slots && take(s, row[s])) batch[atomicAdd(&batch_count, 1u)] = s;
      }
      __syncthreads();
      const bool full = batch_count >= k;
      __syncthreads();  // every thread has read the count before the next window adds to it
      if (full) rank_and_merge();
    }
    rank_and_merge();
  };
  auto gather = [&](std::uint32_t group_bound, auto take) {
    if (fill_batch(group_bound, take)) {
      gather_by_windows(take);
    } else {
      rank_and_merge();
    }
  };

  // B. Every pair at or below the first bound: at least k distinct points, or every value. With
  // several blocks per query each ranks a share of them (the copies of their points into one SM
  // were most of the selection), the last to finish merges them and goes on alone.
  const auto take_first = [&](std::uint32_t, float v) { return in_first(v); };
  const bool overflowed = fill_batch(first_bound, take_first);
  const std::uint32_t n_first = batch_count;
  const bool split = !p.exact && parts > 1 && !overflowed && n_first > 0 && n_first <= kDenseSplitMax &&
                     std::size_t(n_first) <= std::size_t(p.stage_points) * staged_stride(chunks) * 4;
  if (split) {
    // The same slots in every block, in one order (ascending): each slot's place is the number
    // of smaller ones.
    std::uint32_t* const sorted = reinterpret_cast<std::uint32_t*>(staged);
    for (std::uint32_t i = threadIdx.x; i < n_first; i += kSelectThreads) {
      const std::uint32_t slot = batch[i];
      std::uint32_t place = 0;
      for (std::uint32_t j = 0; j < n_first; ++j) place += batch[j] < slot;
      sorted[place] = slot;
    }
    __syncthreads();
    for (std::uint32_t i = threadIdx.x; i < n_first; i += kSelectThreads) batch[i] = sorted[i];
    __syncthreads();
    const std::uint32_t from = part * n_first / parts, to = (part + 1) * n_first / parts;
    Candidate* const shares = p.split + std::size_t(q) * kDenseSplitMax;
    rank_slots(from, to - from, [&](std::uint32_t i, const Candidate& c) { shares[from + i] = c; });
    if (!last_block_to_arrive(&p.arrivals[q], parts)) return;  // the last merges every block's candidates
    for (std::uint32_t i = threadIdx.x; i < n_first; i += kSelectThreads) {
      const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(shares + i));
      merged[i] = *reinterpret_cast<const Candidate*>(&raw);
    }
    if (threadIdx.x == 0) p.arrivals[q] = 0;  // zero again for the next launch
    __syncthreads();
    merge_best(n_first);
  } else {
    if (part != 0) return;
    if (overflowed) {
      gather_by_windows(take_first);
    } else {
      rank_and_merge();
    }
  }

  // C. The other pairs the screen cannot rule out for T, the best list's k-th rank (+inf while it
  // holds fewer than k: then every remaining valid slot is ranked). limit + 0 turns -0 into +0,
  // whose key is above every key of a value that compares equal. Exact rows have none: B took
  // every pair of rank <= the first bound, T is at most that bound (or B took every value).
  if (!p.exact) {
    const float bound = best_count == k ? merged[k - 1].rank : CUDART_INF_F;
    const ScreenBounds b = p.screen;
    const float qn_all = query_norm;
    const float limit = __fadd_rn(screen_limit(b, bound, qn_all), 0.0f);
    const bool huge_query = qn_all >= b.huge;
    gather(huge_query ? kEmptyKey : ordered_bits(limit), [&](std::uint32_t s, float v) {
      if (v == v) return !in_first(v) && (v <= limit || huge_query);
      return huge_query && store.valid[s] != 0;  // NaN: an empty slot, or a query whose norm may overflow
    });
  }

  // The answers, here rather than in a selection kernel after this one (4 us and a launch).
  const std::uint32_t best = best_count;
  const Candidate padding{CUDART_INF_F, ~0u, kNoId};
  for (std::uint32_t j = threadIdx.x; j < k; j += kSelectThreads) emit_answer(p, q, j, j < best ? merged[j] : padding);
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

std::size_t dense_select_min_shared(std::uint32_t k, std::uint32_t chunks, std::uint32_t groups) {
  return select_shared_bytes(k, chunks, groups, min_stage_points(chunks, groups)) + kSelectStaticBytes;
}

DenseResidency configure_dense(std::size_t shared_limit) {
  DenseResidency residency;
  residency.few_queries = configure_product(exact_kernels<kExactTileOf8>());
  configure_product(exact_kernels<kExactTileOf12>());
  configure_product(exact_kernels<kExactTileOf16>());
  residency.mid_queries = configure_product(tensor_kernels<kTensorMidTile>());
  configure_product(tensor_kernels<kTensorLargeTile>());
  check_cuda(cudaFuncSetAttribute(dense_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(shared_limit - kSelectStaticBytes)),
             "cudaFuncSetAttribute(dense_select_kernel)");
  return residency;
}

void launch_dense(const DenseParams& p, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  if (p.k == 0 || p.k > kDenseMaxK) throw CudaError("dense screen: k must be in [1, " + std::to_string(kDenseMaxK) + "]");
  if (p.row_stride % kTile != 0 || p.row_stride / kTile > kDenseMaxGroups) {
    throw CudaError("dense screen: " + std::to_string(p.row_stride) + " slots per row, at most " +
                    std::to_string(kDenseMaxGroups * kTile) + " in whole tiles");
  }
  if (p.sm_count == 0) throw CudaError("dense screen: sm_count (the device's multiprocessors) must be set");
  DenseParams params = p;
  params.exact = p.num_queries <= kDenseExactMaxQueries;
  if (params.exact) {
    params.blocks_per_query = 1;  // the rows hold the ranks: nothing to share
    if (p.num_queries <= kExactTileOf8.bn) {
      launch_product(exact_kernels<kExactTileOf8>(), params, p.residency.few_queries, stream);
    } else if (p.num_queries <= kExactTileOf12.bn) {
      launch_product(exact_kernels<kExactTileOf12>(), params, 0, stream);
    } else {
      launch_product(exact_kernels<kExactTileOf16>(), params, 0, stream);
    }
  } else {
    if (p.num_queries <= std::uint32_t(tensor_bn<kTensorMidTile>)) {
      launch_product(tensor_kernels<kTensorMidTile>(), params, p.residency.mid_queries, stream);
    } else {
      launch_product(tensor_kernels<kTensorLargeTile>(), params, 0, stream);
    }
  }
  // Points staged for their exact ranks: as many as the rest of the shared memory holds (at least
  // min_stage_points, whose room fill_batch lists the groups in; `least` checked it fits).
  const std::size_t fixed = select_shared_bytes(p.k, p.chunks, p.row_stride / kTile, 0) + kSelectStaticBytes;
  const std::size_t point_bytes = std::size_t(staged_stride(p.chunks)) * sizeof(float4);
  const std::size_t least = dense_select_min_shared(p.k, p.chunks, p.row_stride / kTile);
  if (p.shared_limit < least) {
    throw CudaError("dense screen: k=" + std::to_string(p.k) + " with " + std::to_string(p.chunks) + " chunks needs " +
                    std::to_string(least) + " bytes of shared memory per block, more than the device's " +
                    std::to_string(p.shared_limit));
  }
  params.stage_points = std::max(min_stage_points(p.chunks, p.row_stride / kTile),
                                 std::uint32_t(std::min<std::size_t>(kSelectThreads, (p.shared_limit - fixed) / point_bytes)));
  launch_chained("dense_select_kernel", dense_select_kernel, p.num_queries * params.blocks_per_query, kSelectThreads,
                 select_shared_bytes(p.k, p.chunks, p.row_stride / kTile, params.stage_points), stream, params);
}

}  // namespace streamknn::detail::gpu
