// The dense screen's product (DenseParams, dense.hpp): every (query, slot) pair's exact rank or
// screened value in a workspace row per query, and every 32-slot group's smallest per query; the
// selection (dense_select.cu) then ranks the pairs that can be among the k best.
#include <math_constants.h>

#include <type_traits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dense.cuh"
#include "cuda/kernels/dense.hpp"
#include "cuda/kernels/dense_tensor.cuh"

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

/// Where a thread's copies come from, and whether it has a point and a query to copy.
/// A stage is kStep chunks of BM points, then of BN queries. Each thread copies chunks of one
/// point and of one query, whose addresses are worked out here once (per copy they had cost a
/// division, a remainder and a 64-bit multiply-add; product 117 -> 109 us): where THREADS is a
/// multiple of BM, thread t copies point t % BM, chunks t / BM + r THREADS / BM (all the threads
/// share the copies); otherwise threads t < BM copy every chunk of point t. The same for the
/// queries and BN.
template <int BN, int TM, int TN, int THREADS>
struct ExactCopySources {
  static constexpr int QT = BN / TN, PT = THREADS / QT, BM = PT * TM;
  static_assert(BM <= THREADS && THREADS % BN == 0);
  static constexpr bool kPointsShared = THREADS % BM == 0;
  std::uint32_t copy_point, copy_slot, point_u0, copy_query, query_u0;
  bool copies_point, copies_query;
  const float4* point_from;
  const float4* query_from;

  __device__ __forceinline__ ExactCopySources(std::uint32_t first_slot, std::uint32_t slots, std::uint32_t nq,
                                              std::uint32_t chunks, const float4* vectors, const float4* query_rows) {
    copy_point = kPointsShared ? threadIdx.x % BM : threadIdx.x;
    copy_slot = first_slot + copy_point, point_u0 = kPointsShared ? threadIdx.x / BM : 0;
    copy_query = threadIdx.x % BN, query_u0 = threadIdx.x / BN;
    copies_point = copy_point < std::uint32_t(BM) && copy_slot < slots, copies_query = copy_query < nq;
    point_from =
        vectors + (std::size_t(copies_point ? copy_slot / kTile : 0) * chunks + point_u0) * kTile + copy_slot % kTile;
    query_from = query_rows + (copies_query ? std::size_t(copy_query) * chunks + query_u0 : 0);
  }
};

/// Issues one stage's copies (cp.async): the pipeline's issue(step); its state is the kernel's,
/// held by reference.
template <int BN, int TM, int TN, int THREADS>
struct ExactStageCopy {
  static constexpr int QT = BN / TN, PT = THREADS / QT, BM = PT * TM;
  static constexpr int kStep = kExactStepChunks, kStages = kExactStages;
  static constexpr bool kPointsShared = THREADS % BM == 0;
  static constexpr int kPointStride = kPointsShared ? THREADS / BM : 1, kQueryStride = THREADS / BN;
  static constexpr int kPointCopies = kPointsShared ? (kStep * BM + THREADS - 1) / THREADS : kStep;
  static constexpr int kQueryCopies = (kStep * BN + THREADS - 1) / THREADS;
  float4* const& point_stages;
  float4* const& query_stages;
  const float4* const& vectors;
  const float4* const& query_rows;
  const ExactCopySources<BN, TM, TN, THREADS>& sources;
  const std::uint32_t& chunks;

  __device__ __forceinline__ void operator()(std::uint32_t step) const {
    if ((step + 1) * kStep <= chunks) {
      copy_stage(step, std::true_type{});
    } else {
      copy_stage(step, std::false_type{});
    }
  }

  /// Copies stage `step`. whole: std::true_type for a stage that ends by the last chunk, whose
  /// copies need no bound test; there every source is in the store or the batch (a thread without
  /// a point or query copies nothing from tile 0's or query 0's row), so the address needs no
  /// select either. The bound tests and selects were 70 of a copying warp's 714 instructions per
  /// stage at Q = 16 (SASS counters); without them the product took 95.7 -> 93.3 us there (H200,
  /// ncu).
  template <class Whole>
  __device__ __forceinline__ void copy_stage(std::uint32_t step, Whole whole) const {
    float4* const to_points = point_stages + (step % kStages) * kStep * BM;
    float4* const to_queries = query_stages + (step % kStages) * kStep * BN;
    const std::uint32_t step_chunk = step * kStep;
#pragma unroll
    for (int r = 0; r < kPointCopies; ++r) {
      // Entry u BM + point of the stage: t + r THREADS where the threads share the copies.
      const std::uint32_t u = sources.point_u0 + r * kPointStride, c = step_chunk + u;
      const std::uint32_t entry = kPointsShared ? threadIdx.x + r * THREADS : u * BM + sources.copy_point;
      const bool past = kPointsShared ? kStep * BM % THREADS != 0 && entry >= std::uint32_t(kStep * BM)
                                      : sources.copy_point >= std::uint32_t(BM);
      if (past) break;
      const bool load = sources.copies_point && (whole || c < chunks);
      const float4* const from = sources.point_from + std::size_t(step_chunk + r * kPointStride) * kTile;
      copy_async16_or_zero(to_points + entry, whole || load ? from : vectors, load);
    }
    // The queries' copies go through L1 (cp.async.ca): every block reads the same query lines in the
    // same order (the ranks' chunk order is fixed), so without it the SMs' blocks asked the few L2
    // slices holding them for the same lines at once. H200 A/B against L2 only: MNIST-like Q = 2-8
    // 0.87-0.97x (product at Q = 8 69.5 -> 59.8 us, 77% of DRAM bandwidth), Q = 9-16 0.97-1.00x (the
    // FP32 work bounds those).
#pragma unroll
    for (int r = 0; r < kQueryCopies; ++r) {
      const std::uint32_t entry = threadIdx.x + r * THREADS, c = step_chunk + sources.query_u0 + r * kQueryStride;
      if (kStep * BN % THREADS != 0 && entry >= std::uint32_t(kStep * BN)) break;
      const bool load = sources.copies_query && (whole || c < chunks);
      const float4* const from = sources.query_from + step_chunk + r * kQueryStride;
      copy_async16_or_zero<true>(to_queries + entry, whole || load ? from : query_rows, load);
    }
  }
};

/// Sets a thread's partial ranks to zero.
template <int TM, int TN>
__device__ __forceinline__ void zero_ranks(float (&acc)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }
}

/// Adds one landed stage's chunks to thread (tm, tn)'s ranks: the pipeline's use(step); its
/// state is the kernel's, held by reference.
template <int BN, int TM, int TN, int THREADS>
struct ExactStageProduct {
  static constexpr int QT = BN / TN, PT = THREADS / QT, BM = PT * TM;
  static constexpr int kStep = kExactStepChunks, kStages = kExactStages;
  float4* const& point_stages;
  float4* const& query_stages;
  const std::uint32_t& tm;
  const std::uint32_t& tn;
  float (&acc)[TM][TN];

  __device__ __forceinline__ void operator()(std::uint32_t step) const {
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
  }
};

/// Writes thread (tm, tn)'s ranks (points tm + PT i against queries tn + QT j) to the rows, NaN
/// for an empty slot, and each one's key to `keys`.
template <int BN, int TM, int TN, int THREADS>
__device__ __forceinline__ void write_exact_ranks(const DenseParams& p, const StoreView& store,
                                                  const float (&acc)[TM][TN], std::uint32_t (&keys)[TM][TN],
                                                  float* rows, std::uint32_t first_slot, std::uint32_t slots,
                                                  std::uint32_t nq, std::uint32_t tm, std::uint32_t tn) {
  constexpr int QT = BN / TN, PT = THREADS / QT;
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
}

/// Writes each 32-slot group's smallest key per query, reduced over the warp.
template <int BN, int TM, int TN, int THREADS>
__device__ __forceinline__ void write_exact_group_keys(const DenseParams& p, const std::uint32_t (&keys)[TM][TN],
                                                       std::uint32_t first_slot, std::uint32_t slots,
                                                       std::uint32_t q0, std::uint32_t nq, std::uint32_t tm,
                                                       std::uint32_t tn, std::uint32_t lane,
                                                       std::uint32_t group_stride) {
  constexpr int QT = BN / TN, PT = THREADS / QT;
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

  const ExactCopySources<BN, TM, TN, THREADS> sources(first_slot, slots, nq, chunks, vectors, query_rows);
  const ExactStageCopy<BN, TM, TN, THREADS> issue{point_stages, query_stages, vectors, query_rows, sources, chunks};

  float acc[TM][TN];  // per pair: its rank
  zero_ranks(acc);
  staged_pipeline<kStages>(steps, issue,
                           ExactStageProduct<BN, TM, TN, THREADS>{point_stages, query_stages, tm, tn, acc});
  // An empty slot gets NaN (never selected). Each group of 32 slots also gets its smallest key
  // per query (kEmptyKey: none), so the selection reads only the groups that can hold what it
  // looks for.
  float* const rows = p.screened + std::size_t(q0) * p.row_stride;
  const std::uint32_t group_stride = p.row_stride / kTile, lane = threadIdx.x & 31;
  std::uint32_t keys[TM][TN];
  write_exact_ranks<BN, TM, TN, THREADS>(p, store, acc, keys, rows, first_slot, slots, nq, tm, tn);
  write_exact_group_keys<BN, TM, TN, THREADS>(p, keys, first_slot, slots, q0, nq, tm, tn, lane, group_stride);
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
