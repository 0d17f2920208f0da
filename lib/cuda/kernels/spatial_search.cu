// The spatial index's search (launch_spatial_search; spatial.cuh has the design and the proof): a
// warp per query walks the tree depth first and writes its answers.
#include <math_constants.h>

#include <limits>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/select.cuh"
#include "cuda/kernels/spatial.cuh"
#include "cuda/kernels/spatial.hpp"

namespace streamknn::detail::gpu {

namespace {

constexpr int kSearchWarps = 4;
constexpr int kLevelShift = 27;                                // stack entry: level << 27 | node
constexpr std::uint32_t kNodeMask = (1u << kLevelShift) - 1;
static_assert(kSpatialMaxLevels <= 8, "the level lives in three bits of a stack entry");
constexpr int kStackEntries = 32 * int(kSpatialMaxLevels);     // 31 siblings per level above, 32 at the bottom

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

/// kWidth: the store's vector width; R: the list's registers per lane (k <= 32 R); kBounded: the
/// walk starts from each query's threshold (SpatialSearchParams::threshold). Unbounded walks keep
/// a kernel without the load: with it, 10,000,000 x 2 K = 100 Q = 1,024 ran 6.7% slower (H200).
template <int kWidth, int R, bool kBounded>
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
  // A bounded walk starts from the query's threshold (a radius's rank limit); the entries stay
  // padding until points within it arrive.
  if constexpr (kBounded) list.bound.rank = from_ordered_bits(__ldg(p.threshold + q));

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

void launch_spatial_search(const SpatialSearchParams& p, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  const std::uint32_t blocks = (p.num_queries + kSearchWarps - 1) / kSearchWarps;
  auto launch = [&](auto width, auto bounded) {
    constexpr int kWidth = decltype(width)::value;
    constexpr bool kBounded = decltype(bounded)::value;
    if (p.k <= 32) {
      launch_chained("spatial_search_kernel", spatial_search_kernel<kWidth, 1, kBounded>, blocks, kSearchWarps * 32, 0,
                     stream, p);
    } else if (p.k <= 64) {
      launch_chained("spatial_search_kernel", spatial_search_kernel<kWidth, 2, kBounded>, blocks, kSearchWarps * 32, 0,
                     stream, p);
    } else {
      launch_chained("spatial_search_kernel", spatial_search_kernel<kWidth, 4, kBounded>, blocks, kSearchWarps * 32, 0,
                     stream, p);
    }
  };
  auto with_bound = [&](auto width) {
    if (p.threshold != nullptr) {
      launch(width, std::true_type{});
    } else {
      launch(width, std::false_type{});
    }
  };
  if (p.width == 2) {
    with_bound(std::integral_constant<int, 2>{});
  } else {
    with_bound(std::integral_constant<int, 4>{});
  }
}

}  // namespace streamknn::detail::gpu
