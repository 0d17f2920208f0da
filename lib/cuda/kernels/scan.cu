// The search kernel: one-point-per-lane exact k-NN with query aggregation.
//
// Persistent blocks each own a contiguous range of 32-slot tiles, and each warp streams its
// own share of them without block barriers: lane i scores slot (tile * 32 + i) against all QG
// queries of the block's query group, reading the point once in coalesced float4 chunks (see
// device_types.hpp) and accumulating each query's rank in a register in a fixed order (so a
// pair's rank does not depend on the batch). A lane whose rank is within the query's threshold
// is a survivor. Every warp keeps its own sorted (rank, id) list per query, in shared memory
// or, for large query groups after a sample pass (kGlobalLists), in a global workspace, so
// nothing is shared while streaming: no locks, no barriers. Survivors enter by a bulk merge
// (several at once) or a single insertion. Warps tighten each other's thresholds through a
// per-query bound in global memory (atomicMin of every full list's k-th, read back every tile),
// which a sample pass may already have set. At the end one barrier, then the block merges its
// warps' lists in parallel (each entry's final position is its index plus its count in the
// other lists) and writes one sorted list per query, truncated at the bound, for the select
// kernel. Stores of one float4 chunk per vector have kernels of their own (a tile prefetch, and
// where survivors are sparse several tiles per lane tested on their smallest rank). One query
// without a sample pass bounds itself: each block publishes the smallest rank of its warps' first
// tiles, the last block to do so lowers the grid-wide bound to the k-th of them, and the warps
// hold their first tile back until the end, so no warp merges a cold tile while the others do.
// Batches of more than 12 queries over stores of several chunks, after a sample pass, run the
// dot-product screen (kScreen): groups of 32 queries (16 for 13-16), each lane 4 points x 8 (4)
// queries by x.q and |x|^2 from its warp's ring, a proven margin (screen_bounds) deciding which
// L2 pairs need their exact rank (inner-product dot products are exact ranks already), and those
// pairs queued and ranked 32 at a time before they enter the lists.
// The kernel is its phases in order (scan_phases.cuh, scan_tiles.cuh, scan_screen.cuh; the warp
// lists' operations in scan_lists.cuh).
#include <math_constants.h>

#include <cmath>
#include <limits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scan_lists.cuh"
#include "cuda/kernels/scan_phases.cuh"
#include "cuda/kernels/scan_screen.cuh"
#include "cuda/kernels/scan_tiles.cuh"

namespace streamknn::detail::gpu {

namespace {

/// The scan: see the top of this file for what it does, and ScanVariant for its template
/// parameters. Its variables are declared here and handed to the phases by reference (ScanBlock);
/// the kernel is then the phases in order: setup, the tile loop of its kind (tiled, screened, or
/// one point per lane), the block merge. Asking ptxas for one block per SM (no spills, more
/// registers) made groups of 8-16 5-18% slower.
template <int QG, bool kInnerProduct, bool kFiltered, bool kGlobalLists, int kOneChunk, bool kTiled,
          bool kScreen = false, bool kNarrow = false>
__global__ void __launch_bounds__(kNarrow ? kNarrowThreads : max_threads<QG, kScreen>(), kNarrow ? kNarrowBlocksPerSm : 0)
    scan_kernel(ScanParams p) {
  static_assert(!kNarrow || (QG == 1 && kOneChunk == 0 && !kGlobalLists && !kScreen));
  static_assert(!kTiled || (kOneChunk != 0 && QG >= 4 && !kFiltered));
  static_assert(!kScreen || (!kFiltered && kGlobalLists && kOneChunk == 0 && !kTiled &&
                              (QG == kScreenGroup || QG == kScreenSmallGroup || QG == kScreenFewGroup)));
  using V = ScanVariant<QG, kInnerProduct, kFiltered, kGlobalLists, kOneChunk, kTiled, kScreen>;
  start_chained_kernel();
  const StoreView store = *p.store;
  const std::uint32_t warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::uint32_t chunks = store.chunks, k = p.k;
  const std::uint32_t q0 = blockIdx.y * QG;
  const std::uint32_t nq = min(std::uint32_t(QG), p.num_queries - q0);
  const SharedLayout layout = shared_layout(QG, int(warps), chunks, k, kGlobalLists, V::kRing, kScreen, kInnerProduct);
  // This block's lists in global memory: warp w's lists for query j at (w * QG + j) * k.
  Candidate* const block_lists =
      kGlobalLists ? p.warp_lists + std::size_t(blockIdx.y * gridDim.x + blockIdx.x) * warps * QG * k : nullptr;
  float4* queries = reinterpret_cast<float4*>(shared + layout.queries);
  IdRangeDevice* ranges = reinterpret_cast<IdRangeDevice*>(shared + layout.ranges);
  unsigned char* mine = shared + layout.warp_base + warp * layout.warp_bytes;
  Candidate* lists = kGlobalLists ? block_lists + std::size_t(warp) * QG * k
                                  : reinterpret_cast<Candidate*>(mine + layout.lists);  // this warp's, QG x k
  std::uint32_t* counts = reinterpret_cast<std::uint32_t*>(mine + layout.counts);
  float* thresholds = reinterpret_cast<float*>(mine + layout.thresholds);  // this warp's, per query
  float* ranks = reinterpret_cast<float*>(mine + layout.ranks);
  Candidate* scratch = reinterpret_cast<Candidate*>(mine + layout.scratch);
  std::uint32_t tile_begin = 0, tile_end = 0;  // the block's tiles, once the setup is done
  const float4* const vectors = static_cast<const float4*>(store.vectors);
  bool first_bound;  // once the setup is done
  const ScanBlock<V> b{p,      store,       warps,   warp,   lane,       chunks,     k,        q0,
                       nq,     layout,      block_lists, queries, ranges, mine,   lists,    counts,
                       thresholds, ranks,   scratch, tile_begin, tile_end, vectors, first_bound};

  stage_query_group(b);
  block_tiles(store.slot_count, tile_begin, tile_end);
  first_bound = V::kFirstBound && p.first_keys != nullptr;

  if (b.first_bound && b.tile_begin + b.warp >= b.tile_end) arrive_first_tile(b, [](int) { return kNoBound; });
  if constexpr (kTiled) {
    scan_tile_groups(b);
  } else if constexpr (kScreen) {
    scan_screened(b);
  } else {
    scan_tiles(b);
  }
  __syncthreads();

  __shared__ std::uint32_t kept[QG > 16 ? QG : 16], bound[QG > 16 ? QG : 16];
  merge_bound(b, kept, bound);
  if constexpr (QG == 1 && kOneChunk == 0) {
    static_assert(!kGlobalLists, "one query keeps its warps' lists in shared memory");
    merge_one_query(shared + b.layout.warp_base, b.layout.warp_bytes, b.layout.lists, b.layout.counts, b.warps, b.k,
                    bound[0], p.candidates + (std::size_t(b.q0) * gridDim.x + blockIdx.x) * b.k, &kept[0]);
  } else {
    merge_group_lists(b, kept, bound);
  }
  __syncthreads();
  if (threadIdx.x < b.nq) p.lengths[std::size_t(b.q0 + threadIdx.x) * gridDim.x + blockIdx.x] = kept[threadIdx.x];
}

using ScanKernel = void (*)(ScanParams);

/// kNarrow: the kernel of blocks of at most kNarrowThreads (see kNarrowThreads).
template <int QG, bool kGlobalLists, int kOneChunk, bool kNarrow = false>
ScanKernel pick(bool inner_product, bool filtered, bool tiled) {
  if constexpr (kOneChunk != 0 && QG >= 4) {
    if (tiled && !filtered) {
      return inner_product ? scan_kernel<QG, true, false, kGlobalLists, kOneChunk, true>
                           : scan_kernel<QG, false, false, kGlobalLists, kOneChunk, true>;
    }
  }
  if (tiled) throw CudaError("scan kernel: several tiles per lane need one-chunk vectors, 4+ queries and no ranges");
  if (inner_product) {
    return filtered ? scan_kernel<QG, true, true, kGlobalLists, kOneChunk, false, false, kNarrow>
                    : scan_kernel<QG, true, false, kGlobalLists, kOneChunk, false, false, kNarrow>;
  }
  return filtered ? scan_kernel<QG, false, true, kGlobalLists, kOneChunk, false, false, kNarrow>
                  : scan_kernel<QG, false, false, kGlobalLists, kOneChunk, false, false, kNarrow>;
}

template <int QG, bool kGlobalLists>
ScanKernel pick(const ScanShape& s) {
  if constexpr (QG == 1 && !kGlobalLists) {
    if (s.one_chunk_width == 0 && !s.tiled && s.warps_per_block * 32 <= kNarrowThreads) {
      return pick<1, false, 0, true>(s.inner_product, s.filtered, s.tiled);
    }
  }
  switch (s.one_chunk_width) {
    case 0: return pick<QG, kGlobalLists, 0>(s.inner_product, s.filtered, s.tiled);
    case 2: return pick<QG, kGlobalLists, 2>(s.inner_product, s.filtered, s.tiled);
    case 4: return pick<QG, kGlobalLists, 4>(s.inner_product, s.filtered, s.tiled);
  }
  throw CudaError("scan kernel: unsupported one-chunk width " + std::to_string(s.one_chunk_width));
}

/// Global lists only for the groups whose shared lists crowd out warps (8 queries and up).
template <int QG>
ScanKernel pick(const ScanShape& s) {
  if constexpr (QG >= 8) {
    if (s.global_lists) return pick<QG, true>(s);
  }
  if (s.global_lists) throw CudaError("scan kernel: global lists need a query group of 8 or more");
  return pick<QG, false>(s);
}

/// The screen's kernel for a group of QG queries (no ranges, global lists, several chunks).
template <int QG>
ScanKernel screen_kernel(bool inner_product) {
  return inner_product ? scan_kernel<QG, true, false, true, 0, false, true> : scan_kernel<QG, false, false, true, 0, false, true>;
}

ScanKernel kernel_for(const ScanShape& s) {
  if (s.screen) {
    if (s.filtered || !s.global_lists || s.one_chunk_width != 0 || s.tiled) {
      throw CudaError("scan kernel: the screen needs no ranges, global lists and vectors of several chunks");
    }
    switch (s.query_group) {
      case kScreenGroup: return screen_kernel<kScreenGroup>(s.inner_product);
      case kScreenSmallGroup: return screen_kernel<kScreenSmallGroup>(s.inner_product);
      case kScreenFewGroup:  // inner product only (choose_screen): L2 keeps the exact form there
        if (s.inner_product) return scan_kernel<kScreenFewGroup, true, false, true, 0, false, true>;
        throw CudaError("scan kernel: the screen's group of " + std::to_string(kScreenFewGroup) + " is for inner product");
      default:
        throw CudaError("scan kernel: the screen needs groups of " + std::to_string(kScreenGroup) + ", " +
                        std::to_string(kScreenSmallGroup) + " or " + std::to_string(kScreenFewGroup) + " queries");
    }
  }
  switch (s.query_group) {
    case 1: return pick<1>(s);
    case 2: return pick<2>(s);
    case 4: return pick<4>(s);
    case 8: return pick<8>(s);
    case 12: return pick<12>(s);
    case 16: return pick<16>(s);
  }
  throw CudaError("scan kernel: unsupported query group " + std::to_string(s.query_group));
}

}  // namespace

// Why the screen never drops a pair within the threshold. u = 2^-24, D = padded_dim,
// g = (D + 8) u / (1 - (D + 8) u); X = |x|^2, Qn = |q|^2, d^2 = |x - q|^2 (exact reals), and N,
// qn the float sums of x_i^2, q_i^2 (any order; FMA or not): |N - X| <= g X, |qn - Qn| <= g Qn;
// P the dot product, |P - x.q| <= h |x||q| (float sums in any order: h = g; the tensor product's
// h is below). The exact rank R (the direct form: a rounded difference squared and added, D
// times, all terms >= 0) is >= (1 - g) d^2, so R <= T gives d^2 <= T / (1 - g). With
// N - 2P = d^2 - Qn + e, |e| <= g X + 2 h |x||q| <= (g + h) X + h Qn, and the screened value
// V = fl(N - 2P) (one rounding):
//   V <= (N - 2P) + u (d^2 + Qn + |e|) <= (1 + u) d^2 - (1 - u - (1 + u) h) Qn + (1 + u)(g + h) X
//     <= A T - B qn + C N,   A = (1 + u) / (1 - g), B = (1 - u - (1 + u) h) / (1 + g),
//                            C = (1 + u)(g + h) / (1 - g)
// using X <= N / (1 - g) and Qn >= qn / (1 + g). The kernel evaluates A T - B qn in double with
// A raised and B lowered by 2^-40 (more than double rounding can take away), rounds it up to
// float, and adds C N with an upward-rounded FMA, so its limit is at least the real bound. The
// slack (2^-100 for float sums) covers roundings in the subnormal range (each at most 2^-150
// absolute), and norms of FLT_MAX / 16 or more (where a sum could overflow) skip the test.
namespace {
/// g above: the relative error bound of a float sum of padded_dim products or squares.
double float_sum_error(std::uint32_t padded_dim) {
  const double u = std::ldexp(1.0, -24), n = double(padded_dim) + 8;
  return n * u / (1 - n * u);
}

ScreenBounds screen_bounds_for(std::uint32_t padded_dim, double h, double slack) {
  const double u = std::ldexp(1.0, -24), g = float_sum_error(padded_dim);
  const double widen = std::ldexp(1.0, -40);
  ScreenBounds s;
  s.bound_scale = (1 + u) / (1 - g) * (1 + widen);
  s.query_scale = (1 - u - (1 + u) * h) / (1 + g) * (1 - widen);
  s.slack = slack;
  const double c = (1 + u) * (g + h) / (1 - g);
  s.norm_scale = static_cast<float>(c);
  if (double(s.norm_scale) < c) s.norm_scale = std::nextafter(s.norm_scale, std::numeric_limits<float>::infinity());
  s.huge = std::numeric_limits<float>::max() / 16;
  return s;
}
}  // namespace

ScreenBounds screen_bounds(std::uint32_t padded_dim) {
  return screen_bounds_for(padded_dim, float_sum_error(padded_dim), std::ldexp(1.0, -100));
}

// The tensor product's h (dense_product.cu: mma.sync m16n8k8, 8 products per instruction, TF32
// operands). Each operand is rounded to TF32 (cvt.rna: 10 fraction bits, |x~ - x| <= 2^-11 |x|),
// so |x~_i q~_i - x_i q_i| <= t |x_i q_i|, t = 2^-10 + 2^-22. A tensor core's sum is not IEEE's;
// the published models of the V100 to the B200 (Fasi et al. 2021, Khattak and Mikaitis 2025)
// form the products exactly, align them and the accumulator to the largest keeping at least 24
// bits, truncate, and normalize the sum once: an error of at most 10 units of 2^-23 of the sum
// of the terms' magnitudes. This takes e = 2^-19 (16 units) per instruction. Over S = ceil(D / 8)
// instructions the accumulator's error is at most ((1 + e)^S - 1) sum |x~_i q~_i| (each
// instruction's terms are the accumulator, at most (1 + e)^(s - 1) of the magnitudes so far,
// and its products), so
//   h = (1 + t)(1 + e)^S - 1 + 2^-100,
// the last term for operands a tensor core may flush to zero where they are subnormal (each
// |x_i q_i| < 2^-126 |q_i|: in all at most 2^-116 (1 + Qn) for the engine's dims, at most 2^20,
// and the same with X);
// products it may flush (each below 2^-126) add at most 2^-106 absolute, so the slack is 2^-99.
ScreenBounds tensor_screen_bounds(std::uint32_t padded_dim) {
  const double t = std::ldexp(1.0, -10) + std::ldexp(1.0, -22), e = std::ldexp(1.0, -19);
  const double steps = std::ceil(double(padded_dim) / 8);
  const double h = (1 + t) * std::pow(1 + e, steps) - 1 + std::ldexp(1.0, -100);
  return screen_bounds_for(padded_dim, h, std::ldexp(1.0, -99));
}

std::size_t scan_shared_bytes(const ScanShape& shape, std::uint32_t k) {
  return shared_layout(shape.query_group, shape.warps_per_block, shape.chunks, k, shape.global_lists,
                       ring_stages(shape.query_group, shape.one_chunk_width, shape.screen), shape.screen,
                       shape.inner_product)
             .total +
         32 * sizeof(std::uint32_t);
}

std::size_t scan_warp_list_entries(const ScanShape& shape, std::uint32_t num_queries, std::uint32_t k) {
  if (!shape.global_lists) return 0;
  const std::size_t groups = (num_queries + shape.query_group - 1) / shape.query_group;
  return groups * shape.blocks_per_group * shape.warps_per_block * shape.query_group * k;
}

int configure_scan(const ScanShape& shape, std::uint32_t k) {
  const ScanKernel kernel = kernel_for(shape);
  const std::size_t shared = scan_shared_bytes(shape, k);
  // The limit is a property of the kernel in the whole process, shared by every store: raise it
  // to the most a launch may ask for (the device's opt-in maximum less the kernel's static
  // shared memory), never lowering it under another store's launch.
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(max shared memory per block)");
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes(scan_kernel)");
  const int dynamic_limit = optin - int(attributes.sharedSizeBytes);
  if (int(shared) > dynamic_limit) {
    throw CudaError("scan kernel: " + std::to_string(shared) + " bytes of shared memory requested, the device allows " +
                    std::to_string(dynamic_limit));
  }
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit),
             "cudaFuncSetAttribute(scan_kernel)", std::to_string(dynamic_limit) + " bytes of shared memory");
  int blocks = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, shape.warps_per_block * 32, shared),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor(scan_kernel)");
  return blocks;
}

void launch_scan(const ScanParams& params, const ScanShape& shape, cudaStream_t stream) {
  const ScanKernel kernel = kernel_for(shape);
  const std::size_t shared = scan_shared_bytes(shape, params.k);
  const dim3 grid(shape.blocks_per_group, (params.num_queries + shape.query_group - 1) / shape.query_group);
  launch_chained("scan_kernel", kernel, grid, shape.warps_per_block * 32, shared, stream, params);
}

}  // namespace streamknn::detail::gpu
