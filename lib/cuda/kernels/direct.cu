// The direct search (launch_direct): small batches over stores of one float4 chunk.
//
// On such a store a point is one 8- or 16-byte load and a few flops, so a search is one pass
// over the store's bytes plus the fixed cost of its kernels; the sample pass, its k-th and the
// scan were three launches, each a chain of dependent steps (ncu, 1,000,000 x 2, Q = 1: 3.9 +
// 5.9 + 13.4 us against 2.7 us to read the store). Here one kernel replaces them. Each block
// (one query: grid.y) steps through segments of kDirectSegment slots, 8 per thread:
//   1. ranks its points (accumulate and rank_of, so the scan's bits);
//   2. in its first segment, while the grid-wide bound is still loose, takes the k-th smallest
//      of the segment's 64 group minima (32 consecutive slots each): k groups each hold a point
//      at or below it, so it bounds the query's k-th rank, and the grid-wide bound is lowered
//      to it;
//   3. appends every point at or below its bounds (the list's k-th, the grid's, the first
//      segment's) to a list in shared memory; when the list could not take another segment,
//      it keeps its k best by (rank, id) and lowers the grid-wide bound to their k-th rank.
// Each block then writes its k best, ordered by counting, for the selection kernel (the scan's
// layout).
#include <math_constants.h>

#include <algorithm>
#include <type_traits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/direct.hpp"
#include "cuda/kernels/select.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = int(kDirectSegment) / kThreads;  // 8
constexpr std::uint32_t kGroups = kDirectSegment / kTile;  // 64: one per (warp, point of a thread)
static_assert(kDirectMaxK <= kGroups, "the segment bound needs k groups");
static_assert(2 * kDirectMaxK <= kThreads, "the last ordering by counting takes a thread per entry");
/// The block's list: a full list (up to 2 kDirectMaxK entries before it is cut to k) and a
/// whole segment after it.
constexpr std::uint32_t kListCapacity = kDirectSegment + 2 * kDirectMaxK;
/// Blocks per SM the unfiltered kernels are compiled for (48 registers, no spills): left to itself
/// ptxas gave them 64 (4 blocks per SM), so four queries over 1,000,000 x 2 ran more segments per
/// block, 1.10-1.18x slower (H100). The filtered kernels keep their point ids in registers: 3
/// blocks per SM, 80 registers (106 when left to itself).
constexpr int kUnfilteredBlocksPerSm = 5;
constexpr int kFilteredBlocksPerSm = 3;
/// The key of no point (an empty group, an erased or filtered slot, a NaN rank): above every rank.
constexpr std::uint32_t kNoKey = 0xffffffffu;

/// This thread's points of the segment from slot `first` of a store of `slots` slots (its
/// vectors, valid flags and ids): point i is slot first + i * kThreads + threadIdx.x, so each
/// warp's i-th points are one 32-slot group. Slots past the store are dead points; ids are loaded
/// for the filtered kernels only (kNoId otherwise).
template <int kWidth, bool kFiltered>
__device__ __forceinline__ void load_segment(const void* vectors, const std::uint8_t* valid, const std::uint64_t* ids,
                                             std::uint32_t slots, std::uint32_t first, float4 (&vector)[kPerThread],
                                             bool (&live)[kPerThread], std::uint64_t (&id)[kPerThread]) {
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const std::uint32_t slot = first + i * kThreads + threadIdx.x;
    vector[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    live[i] = false;
    id[i] = kNoId;
    if (slot < slots) {
      if constexpr (kWidth == 2) {  // one float2 per slot (StoreView::chunk_floats)
        const float2 v = __ldg(static_cast<const float2*>(vectors) + slot);
        vector[i] = make_float4(v.x, v.y, 0.0f, 0.0f);
      } else {
        vector[i] = __ldg(static_cast<const float4*>(vectors) + slot);
      }
      live[i] = __ldg(valid + slot) != 0;
      if constexpr (kFiltered) id[i] = __ldg(ids + slot);
    }
  }
}

/// Appends this thread's points of the segment whose key is within `limit` to the block's list
/// (`count` entries so far), a warp's admitted points of each group together (lane: this
/// thread's, lanes_below: the mask of the lanes before it).
template <bool kFiltered>
__device__ __forceinline__ void append_admitted(const std::uint32_t (&key)[kPerThread], const float (&rank)[kPerThread],
                                                const std::uint64_t (&id)[kPerThread], std::uint32_t limit,
                                                std::uint32_t first, const std::uint64_t* ids, Candidate* list,
                                                std::uint32_t& count, std::uint32_t lane, unsigned lanes_below) {
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const bool admit = key[i] != kNoKey && key[i] <= limit;
    const unsigned admitted = __ballot_sync(kFullMask, admit);
    if (admitted == 0) continue;
    std::uint32_t at = 0;
    if (lane == 0) at = atomicAdd(&count, std::uint32_t(__popc(admitted)));
    at = __shfl_sync(kFullMask, at, 0) + __popc(admitted & lanes_below);
    if (admit) {
      const std::uint32_t slot = first + i * kThreads + threadIdx.x;
      list[at] = Candidate{rank[i], slot, kFiltered ? id[i] : __ldg(ids + slot)};
    }
  }
}

/// The block's first segment, while the grid-wide bound is still loose: the k-th smallest of its
/// 64 group minima (ties by group index), four threads per group counting the minima below their
/// group's; an empty group's kNoKey bounds nothing. Lowers the grid-wide bound to it and returns
/// it (block-uniform). Every thread calls it.
/// group_min and segment_bound: the block's shared memory for it.
__device__ __forceinline__ std::uint32_t first_segment_bound(const std::uint32_t (&key)[kPerThread], std::uint32_t k,
                                                             std::uint32_t* grid_bound, std::uint32_t* group_min,
                                                             std::uint32_t& segment_bound, std::uint32_t lane,
                                                             std::uint32_t warp) {
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const std::uint32_t smallest = __reduce_min_sync(kFullMask, key[i]);
    if (lane == 0) group_min[i * (kThreads / 32) + warp] = smallest;
  }
  __syncthreads();
  const std::uint32_t g = threadIdx.x / 4, part = threadIdx.x % 4;
  const std::uint32_t mine = group_min[g];
  std::uint32_t before = 0;
#pragma unroll
  for (std::uint32_t j = part; j < kGroups; j += 4) {
    const std::uint32_t other = group_min[j];
    before += other < mine || (other == mine && j < g);
  }
  before += __shfl_xor_sync(kFullMask, before, 1);
  before += __shfl_xor_sync(kFullMask, before, 2);
  if (part == 0 && before == k - 1) {
    segment_bound = mine;
    if (mine != kNoKey) atomicMin(grid_bound, mine);
  }
  __syncthreads();
  return segment_bound;
}

template <int kWidth, bool kInnerProduct, bool kFiltered>
__global__ void __launch_bounds__(kThreads, kFiltered ? kFilteredBlocksPerSm : kUnfilteredBlocksPerSm) direct_kernel(ScanParams p) {
  start_chained_kernel();
  __shared__ Candidate list[kListCapacity];
  __shared__ Candidate kept[kDirectMaxK];
  __shared__ std::uint32_t group_min[kGroups];
  __shared__ std::uint32_t count, kept_count, segment_bound;
  const std::uint32_t q = blockIdx.y, k = p.k, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::uint32_t slots = p.store->slot_count;
  const void* const vectors = p.store->vectors;
  const std::uint8_t* const valid = p.store->valid;
  const std::uint64_t* const ids = p.store->ids;
  const float4 query = reinterpret_cast<const float4*>(p.queries)[q];
  IdRangeDevice range{0, 0};
  if constexpr (kFiltered) range = p.ranges[q];
  std::uint32_t* const grid_bound = p.threshold + q;
  const unsigned lanes_below = (1u << lane) - 1;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();

  // Keeps the list's k best (rank, id) (every thread calls it, n > k): their k-th rank then
  // bounds the query's, here and grid-wide.
  std::uint32_t own_bound = kNoKey;  // block-uniform
  auto cut_to_k = [&](std::uint32_t n) {
    const Candidate kth = smem_kth(list, n, k);  // n > k real entries: a real one
    if (threadIdx.x == 0) kept_count = 0;
    __syncthreads();
    for (std::uint32_t i = threadIdx.x; i < n; i += kThreads) {
      const Candidate c = list[i];
      if (!less_candidate(kth, c)) kept[atomicAdd(&kept_count, 1u)] = c;
    }
    __syncthreads();
    for (std::uint32_t i = threadIdx.x; i < k; i += kThreads) list[i] = kept[i];  // (rank, id) unique: k of them
    own_bound = ordered_bits(kth.rank);
    if (threadIdx.x == 0) {
      count = k;
      atomicMin(grid_bound, own_bound);
    }
    __syncthreads();
  };

  const std::uint32_t segments = (slots + kDirectSegment - 1) / kDirectSegment;
  for (std::uint32_t segment = blockIdx.x; segment < segments; segment += gridDim.x) {
    const std::uint32_t first = segment * kDirectSegment;
    // Every load first, then the arithmetic.
    float4 vector[kPerThread];
    bool live[kPerThread];
    std::uint64_t id[kPerThread];
    load_segment<kWidth, kFiltered>(vectors, valid, ids, slots, first, vector, live, id);
    // The grid-wide bound, read after the loads were issued (a bound read early is still one).
    std::uint32_t limit = min(own_bound, __ldcg(grid_bound));
    float rank[kPerThread];
    std::uint32_t key[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      float acc[1] = {0.0f};
      accumulate<1, kInnerProduct, kWidth>(acc, vector[i], [&](int) { return query; });
      rank[i] = rank_of<kInnerProduct>(acc[0]);
      bool admissible = live[i] && rank[i] == rank[i];  // a NaN rank is never admitted (as in the scan)
      if constexpr (kFiltered) admissible = admissible && id[i] >= range.begin && id[i] < range.end;
      key[i] = admissible ? ordered_bits(rank[i]) : kNoKey;
    }
    if constexpr (kFiltered) {
      // The predicate on the points within the bound only: their attribute words are the rare
      // loads (in the first segment, while the bound is loose, every point's).
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const std::uint32_t slot = first + i * kThreads + threadIdx.x;
        if (key[i] != kNoKey && key[i] <= limit && !attributes_pass(p.predicates[q], *p.store, slot)) key[i] = kNoKey;
      }
    }
    if (segment == blockIdx.x) {  // while the grid-wide bound is still loose
      limit = min(limit, first_segment_bound(key, k, grid_bound, group_min, segment_bound, lane, warp));
    }
    // Every thread has read the list's length of the last segment before this barrier, and no
    // thread appends before it; a segment with nothing to admit (most, once the bound is tight)
    // ends here.
    bool any = false;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) any |= key[i] != kNoKey && key[i] <= limit;
    if (!__syncthreads_or(any)) continue;
    append_admitted<kFiltered>(key, rank, id, limit, first, ids, list, count, lane, lanes_below);
    __syncthreads();
    const std::uint32_t n = count;
    if (n > kListCapacity - kDirectSegment) cut_to_k(n);  // the next segment fits after it
  }
  // Every pass of the loop ended on a barrier after its last write to the list and its count
  // (the admission's, a cut's, or the one that found nothing to admit), so both read the same
  // here. At most kListCapacity - kDirectSegment entries (the loop cut longer lists): a thread
  // each for the ordering by counting.
  const std::uint32_t n = count;

  // Hand the selection this block's k best, sorted, as far as the grid-wide bound: the scan's
  // layout, one list per block. A bound read by any thread counts: the entries within the query's
  // k-th pass every one of them and lead the list.
  const std::size_t at = std::size_t(q) * gridDim.x + blockIdx.x;
  write_block_list(list, n, k, __ldcg(grid_bound), p.candidates + at * k, p.lengths + at);
}

template <int kWidth, bool kInnerProduct>
void launch_for(const ScanParams& p, dim3 grid, bool filtered, cudaStream_t stream) {
  if (filtered) {
    launch_chained("direct_kernel", direct_kernel<kWidth, kInnerProduct, true>, grid, kThreads, 0, stream, p);
  } else {
    launch_chained("direct_kernel", direct_kernel<kWidth, kInnerProduct, false>, grid, kThreads, 0, stream, p);
  }
}

}  // namespace

int direct_blocks_per_sm(int width, bool inner_product, bool filtered) {
  const void* kernel = nullptr;
  auto pick = [&](auto w, auto ip) {
    kernel = filtered ? reinterpret_cast<const void*>(direct_kernel<w.value, ip.value, true>)
                      : reinterpret_cast<const void*>(direct_kernel<w.value, ip.value, false>);
  };
  using Two = std::integral_constant<int, 2>;
  using Four = std::integral_constant<int, 4>;
  if (width == 2) {
    inner_product ? pick(Two{}, std::true_type{}) : pick(Two{}, std::false_type{});
  } else {
    inner_product ? pick(Four{}, std::true_type{}) : pick(Four{}, std::false_type{});
  }
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor(direct_kernel)");
  return std::max(per_sm, 1);
}

std::uint32_t direct_blocks(std::uint32_t capacity, std::uint32_t num_queries, std::uint32_t resident) {
  const std::uint32_t segments = std::max<std::uint32_t>(1, (capacity + kDirectSegment - 1) / kDirectSegment);
  return std::clamp<std::uint32_t>(resident / std::max<std::uint32_t>(num_queries, 1), 1, segments);
}

void launch_direct(const ScanParams& p, std::uint32_t blocks, int width, bool inner_product, cudaStream_t stream) {
  const dim3 grid(blocks, p.num_queries);
  const bool filtered = p.ranges != nullptr;
  if (width == 2) {
    inner_product ? launch_for<2, true>(p, grid, filtered, stream) : launch_for<2, false>(p, grid, filtered, stream);
  } else {
    inner_product ? launch_for<4, true>(p, grid, filtered, stream) : launch_for<4, false>(p, grid, filtered, stream);
  }
}

}  // namespace streamknn::detail::gpu
