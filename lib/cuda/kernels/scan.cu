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
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr std::uint32_t kBulkMinSurvivors = 4;   // fewer survivors are inserted one by one

// Staged point loads (multi-chunk stores, groups of 4 and 8 queries): each lane copies its point's
// chunks into its warp's shared-memory ring with cp.async, kStageChunks per stage, one stage ahead
// of the one it scores, so the warp's next loads are in flight while it does the arithmetic of the
// current ones, without holding them in registers. H100 A/B against the register-pipelined loop it
// replaced: MNIST-like K = 128 Q = 4 0.82x, K = 64 Q = 8 0.88x, GoogleNews-like K = 64 Q = 8 0.93x,
// the other Q = 4 / 8 rows 0.97-1.02x. Groups of 12 and 16 lost 4-16% with it (ptxas then spilled
// at 64 registers).
constexpr int kStageChunks = 4;
constexpr int kStages = 2;
constexpr std::uint32_t kPendingPairs = 64;  // the screen's queue of flagged pairs per warp (ranked from 32)

__host__ __device__ constexpr bool staged_loads(int qg, int one_chunk_width) {
  return one_chunk_width == 0 && (qg == 4 || qg == 8);
}
/// Stages of the warp's ring of point chunks (staged loads and the screen), or 0.
__host__ __device__ constexpr int ring_stages(int qg, int one_chunk_width, bool screen) {
  return screen || staged_loads(qg, one_chunk_width) ? kStages : 0;
}

/// Shared memory: the query group, its id ranges and (screen) squared norms, read-only; then per
/// warp: its lists, their lengths, its thresholds, the ranks of the current tile (screen: a queue
/// of pairs instead), a sort scratch and, with staged loads or the screen, its ring of point
/// chunks.
struct SharedLayout {
  std::size_t queries, ranges, norms, warp_base, warp_bytes, lists, counts, thresholds, ranks, scratch, stage, pending,
      total;
};

__host__ __device__ inline std::size_t align16(std::size_t x) { return (x + 15) & ~std::size_t(15); }

/// With global_lists the warps' lists live in ScanParams::warp_lists instead.
__host__ __device__ inline SharedLayout shared_layout(int qg, int warps, std::uint32_t chunks, std::uint32_t k,
                                                      bool global_lists, int stages, bool screen,
                                                      bool inner_product) {
  SharedLayout l{};
  std::size_t off = 0;
  l.queries = off;
  off += align16(std::size_t(qg) * chunks * sizeof(float4));
  l.ranges = off;
  off += align16(std::size_t(qg) * sizeof(IdRangeDevice));
  l.norms = off;
  if (screen) off += align16(std::size_t(qg) * sizeof(float));
  l.warp_base = off;
  std::size_t w = 0;  // offsets inside one warp's area
  l.lists = w;
  if (!global_lists) w += align16(std::size_t(qg) * k * sizeof(Candidate));
  l.counts = w;
  w += align16(std::size_t(qg) * sizeof(std::uint32_t));
  l.thresholds = w;
  w += align16(std::size_t(qg) * sizeof(std::uint32_t));
  l.ranks = w;  // the screen queues its pairs instead
  if (!screen) w += align16(std::size_t(qg) * 32 * sizeof(float));
  l.scratch = w;
  w += align16(32 * sizeof(Candidate));
  l.stage = w;
  w += std::size_t(stages) * kStageChunks * 32 * sizeof(float4);
  l.pending = w;
  if (screen) w += (inner_product ? 3 : 2) * kPendingPairs * sizeof(std::uint32_t);  // slot, query (, rank)
  l.warp_bytes = w;
  l.total = off + std::size_t(warps) * w;
  return l;
}

/// Inserts c into a sorted list of n (warp-uniform) entries, capacity k.
__device__ __forceinline__ void warp_insert(Candidate* list, std::uint32_t& n, std::uint32_t k, const Candidate& c,
                                            std::uint32_t lane) {
  std::uint32_t below = 0;
  for (std::uint32_t i = lane; i < n; i += 32) below += closer(list[i].rank, list[i].id, c.rank, c.id);
  const std::uint32_t pos = __reduce_add_sync(kFullMask, below);
  const std::uint32_t last = n < k ? n : k - 1;  // highest index written after the shift
  // Shift [pos, last) up by one, top chunk first so nothing is overwritten before it is read.
  for (int top = int(last) - 1; top >= int(pos); top -= 32) {
    const int i = top - int(lane);
    Candidate moved;
    if (i >= int(pos)) moved = list[i];
    __syncwarp();
    if (i >= int(pos)) list[i + 1] = moved;
    __syncwarp();
  }
  if (lane == 0) list[pos] = c;
  __syncwarp();
  if (n < k) ++n;
}


/// Number of entries of sorted[0, n) closer than c (binary search).
__device__ __forceinline__ std::uint32_t count_closer(const Candidate* sorted, std::uint32_t n, const Candidate& c) {
  std::uint32_t lo = 0, hi = n;
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (closer(sorted[mid].rank, sorted[mid].id, c.rank, c.id)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// Merges the warp's survivors (lane i's `mine` where bit i of `survivors` is set) into a
/// sorted list of n (warp-uniform) entries, capacity k: the survivors are sorted with a shuffle
/// bitonic network; each entry's final position is its own index plus the number of entries of
/// the other sequence closer than it. List entries only move up and their destinations
/// increase with their index, so moving the list in 32-entry chunks from the top down (read the
/// chunk, then write it) never overwrites an entry not yet read: it works in place.
__device__ void warp_merge(Candidate* list, std::uint32_t& n, std::uint32_t k, Candidate mine, unsigned survivors,
                           Candidate* scratch, std::uint32_t lane) {
  const std::uint32_t m = __popc(survivors);
  Candidate c = (survivors >> lane) & 1u ? mine : Candidate{CUDART_INF_F, ~0u, kNoId};
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      const Candidate other = shuffle_xor(c, stride);
      const bool ascending = (lane & size) == 0;
      const bool lower = (lane & stride) == 0;
      const bool other_closer = closer(other.rank, other.id, c.rank, c.id);
      if (lower == ascending ? other_closer : !other_closer) c = other;
    }
  }
  scratch[lane] = c;  // lane j now holds the j-th closest survivor
  const std::uint32_t mine_to = lane < m ? lane + count_closer(list, n, c) : k;
  __syncwarp();
  for (int top = int(n) - 1; top >= 0; top -= 32) {
    const int i = top - int(lane);
    Candidate moved;
    std::uint32_t to = k;
    if (i >= 0) {
      moved = list[i];
      to = std::uint32_t(i) + count_closer(scratch, m, moved);
    }
    __syncwarp();
    if (to < k) list[to] = moved;
    __syncwarp();
  }
  if (mine_to < k) list[mine_to] = c;
  __syncwarp();
  n = min(k, n + m);
}

/// The grid-wide part of the first-tile bound (ScanParams::first_keys), run by the last warp of
/// each block to finish its first tile: publish the block's smallest rank per query; the block
/// that publishes last selects, per query, the k-th of all blocks' keys (k distinct points, so
/// at least k points of the store rank within it: a valid bound) and lowers the threshold to it.
__device__ __forceinline__ void publish_first_bound(std::uint32_t* first_keys, std::uint32_t* arrivals,
                                                   std::uint32_t* threshold, std::uint32_t* block_min,
                                                   std::uint32_t* staged, std::uint32_t q0, std::uint32_t nq,
                                                   std::uint32_t k, std::uint32_t lane) {
  if (lane < nq) {  // an atomic read: the other warps' atomicMin came before their arrival
    first_keys[std::size_t(q0 + lane) * gridDim.x + blockIdx.x] = atomicOr(&block_min[lane], 0u);
  }
  __threadfence();
  unsigned last = 0;
  if (lane == 0) last = atomicAdd(&arrivals[blockIdx.y], 1u) == gridDim.x - 1;
  if (!__shfl_sync(kFullMask, last, 0)) return;
  __threadfence();
  if (lane == 0) arrivals[blockIdx.y] = 0;  // every block has arrived: ready for the next launch
  for (std::uint32_t j = 0; j < nq; ++j) {
    const std::uint32_t kth = warp_kth(first_keys + std::size_t(q0 + j) * gridDim.x, gridDim.x, k, staged, lane);
    if (lane == 0 && kth < kNoBound) atomicMin(&threshold[q0 + j], kth);
  }
}

/// The block's merge for one query over a multi-chunk store (the end of scan_kernel): entry i of
/// warp w's list lands at i plus the number of entries of the other lists closer than it;
/// entries beyond k or beyond the bound are dropped. Only the entries within the bound take
/// part, a prefix of each list (`within`), so the loop runs over those alone, spread evenly over
/// the block's threads, and each binary search stops at the other list's prefix (the entries
/// past it rank above the bound, so they are closer than none of these). The kernel's loop over
/// every warp's k slots put up to four rounds of binary searches over whole lists one after
/// another in a thread at k = 128 (ncu, ImageNet-like Q = 1: the block's last barrier waited
/// 5.5% of the warps' time at k = 128, 3.0% at k = 64). Out of line, so that its registers do
/// not add to the scan loop's: inlined, it took the multi-chunk kernel from 4 to 16 bytes of
/// spill loads; out of line, none.
__device__ __noinline__ void merge_one_query(const unsigned char* warp_area, std::size_t warp_bytes, std::size_t lists,
                                             std::size_t counts, std::uint32_t warps, std::uint32_t k,
                                             std::uint32_t bound, Candidate* out, std::uint32_t* kept) {
  auto list_of = [&](std::uint32_t w) {
    return reinterpret_cast<const Candidate*>(warp_area + w * warp_bytes + lists);
  };
  __shared__ std::uint32_t within[32], first_of[33];
  if (threadIdx.x < 32) {
    const std::uint32_t w = threadIdx.x;
    std::uint32_t n = 0;
    if (w < warps) {
      const Candidate* list = list_of(w);
      for (std::uint32_t hi = *reinterpret_cast<const std::uint32_t*>(warp_area + w * warp_bytes + counts); n < hi;) {
        const std::uint32_t mid = (n + hi) / 2;
        if (ordered_bits(list[mid].rank) <= bound) {
          n = mid + 1;
        } else {
          hi = mid;
        }
      }
    }
    std::uint32_t sum = n;
    for (int d = 1; d < 32; d <<= 1) {
      const std::uint32_t up = __shfl_up_sync(kFullMask, sum, d);
      if (w >= std::uint32_t(d)) sum += up;
    }
    within[w] = n;
    first_of[w] = sum - n;
    if (w == 31) first_of[32] = sum;
  }
  __syncthreads();
  const std::uint32_t total = first_of[32];
  for (std::uint32_t e = threadIdx.x; e < total; e += blockDim.x) {
    // Its list: the last one starting at or before e (an empty list starts where the next does).
    std::uint32_t w = 0;
    for (std::uint32_t step = 16; step > 0; step >>= 1) {
      if (w + step < warps && first_of[w + step] <= e) w += step;
    }
    const std::uint32_t i = e - first_of[w];
    const Candidate c = list_of(w)[i];
    std::uint32_t at = i;
    for (std::uint32_t other = 0; other < warps && at < k; ++other) {
      if (other != w) at += count_closer(list_of(other), within[other], c);
    }
    if (at < k) {
      out[at] = c;
      atomicAdd(kept, 1u);
    }
  }
}

template <int QG, bool kScreen>
constexpr int max_threads() {
  return kScreen ? kScreenMaxWarps * 32 : QG <= 2 ? 1024 : QG <= 4 ? 512 : 256;
}

/// One query over a store of several chunks per vector and few tiles (blocks of at most 8 warps:
/// about one tile per warp, so the tiles bound the warps per SM, 16-17 on MNIST-like) runs a kernel
/// bounded to kNarrowThreads threads and kNarrowBlocksPerSm blocks per SM: ptxas then has 80
/// registers per thread instead of the 64 that max_threads' 1,024 leaves, room for all 16 chunk
/// loads the loop keeps in flight. H200: MNIST-like Q = 1 0.967-0.978x in a same-run A/B and
/// 0.984-0.986x in one process per shape, its scan 62.9 -> 61.1 us (ncu, DRAM 72.9 -> 75.1% of
/// peak); 18 loads unrolled at 80 registers (4 bytes spilled) 1.01-1.02x slower.
/// The other kernels keep no minimum of blocks per SM (0: none is emitted): an explicit 1 let ptxas
/// give groups of 12 96 registers instead of 64, and cost ImageNet- and GoogleNews-like Q = 12
/// 1.12-1.16x.
constexpr int kNarrowThreads = 256;
constexpr int kNarrowBlocksPerSm = 3;

/// The end of scan_kernel, after its last barrier: the block's merge of its warps' lists into one
/// sorted list per query (p.candidates), truncated at k and at the bound; kept[j] counts query
/// j's entries once the block has passed a barrier. kept and bound: the block's shared arrays for
/// it (QG entries, at least 16).
template <int QG, bool kGlobalLists, int kOneChunk>
__device__ __forceinline__ void merge_block_lists(const ScanParams& p, const unsigned char* shared,
                                                  const SharedLayout& layout, const Candidate* block_lists,
                                                  std::uint32_t warps, std::uint32_t k, std::uint32_t q0,
                                                  std::uint32_t nq, std::uint32_t* kept, std::uint32_t* bound) {
  // The bound, one value per block: the grid-wide bound as it stands now, or for one query over a
  // one-chunk store the smallest of the warps' thresholds (each the k-th of a full list or a
  // grid-wide bound read earlier), from shared memory. Re-reading the grid-wide bound was an L2
  // round trip (clock64 stamps: 0.6-1.0 us of the 9 us scan at 100,000 x 2, Q = 1); elsewhere
  // the change altered the kernels' register allocation (new spills in the multi-chunk one-query
  // kernel), so they keep the read.
  if (threadIdx.x < QG) {
    kept[threadIdx.x] = 0;
    if constexpr (QG == 1 && kOneChunk != 0) {
      float smallest = CUDART_INF_F;
      for (std::uint32_t w = 0; w < warps; ++w) {
        smallest = fminf(smallest, reinterpret_cast<const float*>(shared + layout.warp_base + w * layout.warp_bytes +
                                                                  layout.thresholds)[0]);
      }
      bound[0] = ordered_bits(smallest);
    } else {
      bound[threadIdx.x] = threadIdx.x < nq ? __ldcg(&p.threshold[q0 + threadIdx.x]) : kNoBound;
    }
  }
  __syncthreads();
  if constexpr (QG == 1 && kOneChunk == 0) {
    static_assert(!kGlobalLists, "one query keeps its warps' lists in shared memory");
    merge_one_query(shared + layout.warp_base, layout.warp_bytes, layout.lists, layout.counts, warps, k, bound[0],
                    p.candidates + (std::size_t(q0) * gridDim.x + blockIdx.x) * k, &kept[0]);
  } else {
    // One query over a one-chunk store keeps this loop: merge_one_query's preamble and call cost
    // 1.01-1.05x on the low-dimension shapes' Q = 1-16.
    auto list_of = [&](std::uint32_t w, std::uint32_t j) {
      if constexpr (kGlobalLists) return static_cast<const Candidate*>(block_lists + (std::size_t(w) * QG + j) * k);
      return reinterpret_cast<const Candidate*>(shared + layout.warp_base + w * layout.warp_bytes + layout.lists) +
             std::size_t(j) * k;
    };
    auto count_of = [&](std::uint32_t w, std::uint32_t j) {
      return reinterpret_cast<const std::uint32_t*>(shared + layout.warp_base + w * layout.warp_bytes +
                                                    layout.counts)[j];
    };
    // 32-bit index arithmetic (at most 16 queries x 32 warps x 4096 entries): 64-bit divisions
    // were a third of this kernel's instructions on small stores (ncu, 100,000 x 2, Q = 1).
    // Entry-major: consecutive threads take the same place i of consecutive (query, warp) lists.
    // After a sample pass a list holds a few entries, and list-major order gave the threads with
    // i = 0 (one in k) every list's first entries, one merge chain after another while the block
    // waited (GoogleNews-like K = 128 Q = 12: 48 entries per such thread, barrier stalls at the
    // block's end 4x those at K = 64; SASS stall samples). H100 A/B against list-major (two
    // rounds): ImageNet-like K = 128 Q = 12-64 0.84-0.93x, K = 64 0.95-0.96x, GoogleNews-like
    // K = 128 Q = 8-64 0.89-0.98x, the other rows 0.95-1.02x.
    const std::uint32_t lists_n = nq * warps, entries = lists_n * k;
    constexpr std::uint32_t kSearchTogether = 8;
    const std::uint32_t top_step = floor_pow2(k);
    for (std::uint32_t e = threadIdx.x; e < entries; e += blockDim.x) {
      const std::uint32_t i = e / lists_n, list = e - i * lists_n;
      const std::uint32_t j = list / warps, w = list - j * warps;
      if (i >= count_of(w, j)) continue;
      const Candidate c = list_of(w, j)[i];
      if (ordered_bits(c.rank) > bound[j]) continue;
      // Its position: i plus the entries closer than it in each other list. One query over a
      // one-chunk store steps the binary searches of kSearchTogether lists together, so their loads
      // are in flight at once: one search after another was a chain of about 5 x 7 dependent loads
      // per entry (clock64 stamps: the merge took 3 us of the 9 us scan at 100,000 x 2, Q = 1). A/B
      // against the plain searches: 100,000 x 2 Q = 1-4 0.95-0.96x. Elsewhere the stepped searches
      // changed the kernels' code: MNIST-like Q = 1 1.04x slower, larger groups up to 92 bytes of
      // new spills; they keep the plain searches.
      std::uint32_t at = i;
      if constexpr (QG == 1 && kOneChunk != 0) {
        for (std::uint32_t first = 0; first < warps; first += kSearchTogether) {
          std::uint32_t pos[kSearchTogether], length[kSearchTogether];
#pragma unroll
          for (std::uint32_t u = 0; u < kSearchTogether; ++u) {
            const std::uint32_t other = first + u;
            length[u] = other < warps && other != w ? count_of(other, j) : 0;
            pos[u] = 0;
          }
          // Binary lifting: pos[u] grows to the number of entries closer than c (a prefix: sorted).
          for (std::uint32_t step = top_step; step > 0; step >>= 1) {
#pragma unroll
            for (std::uint32_t u = 0; u < kSearchTogether; ++u) {
              const std::uint32_t probe = pos[u] + step;
              if (probe <= length[u]) {
                const Candidate probed = list_of(first + u, j)[probe - 1];
                if (closer(probed.rank, probed.id, c.rank, c.id)) pos[u] = probe;
              }
            }
          }
#pragma unroll
          for (std::uint32_t u = 0; u < kSearchTogether; ++u) at += pos[u];
        }
      } else {
        for (std::uint32_t other = 0; other < warps && at < k; ++other) {
          if (other != w) at += count_closer(list_of(other, j), count_of(other, j), c);
        }
      }
      if (at < k) {
        p.candidates[(std::size_t(q0 + j) * gridDim.x + blockIdx.x) * k + at] = c;
        atomicAdd(&kept[j], 1u);
      }
    }
  }
}

template <int QG, bool kInnerProduct, bool kFiltered, bool kGlobalLists, int kOneChunk, bool kTiled,
          bool kScreen = false, bool kNarrow = false>
__global__ void __launch_bounds__(kNarrow ? kNarrowThreads : max_threads<QG, kScreen>(), kNarrow ? kNarrowBlocksPerSm : 0)
    scan_kernel(ScanParams p) {
  static_assert(!kNarrow || (QG == 1 && kOneChunk == 0 && !kGlobalLists && !kScreen));
  start_chained_kernel();
  // Asking ptxas for one block per SM (no spills, more registers) made groups of 8-16 5-18% slower.
  // kTiled (ScanShape::tiled): each lane scores kTilesPerLane tiles at a time (2 at four
  // elements, where 4 spilled registers).
  static_assert(!kTiled || (kOneChunk != 0 && QG >= 4 && !kFiltered));
  static_assert(!kScreen || (!kFiltered && kGlobalLists && kOneChunk == 0 && !kTiled &&
                              (QG == kScreenGroup || QG == kScreenSmallGroup || QG == kScreenFewGroup)));
  constexpr int kTilesPerLane = kOneChunk == 2 ? 4 : 2;
  extern __shared__ __align__(16) unsigned char shared[];
  const StoreView store = *p.store;
  const std::uint32_t warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::uint32_t chunks = store.chunks, k = p.k;
  const std::uint32_t q0 = blockIdx.y * QG;
  const std::uint32_t nq = min(std::uint32_t(QG), p.num_queries - q0);
  constexpr bool kStaged = staged_loads(QG, kOneChunk);
  constexpr int kRing = ring_stages(QG, kOneChunk, kScreen);
  const SharedLayout layout =
      shared_layout(QG, int(warps), chunks, k, kGlobalLists, kRing, kScreen, kInnerProduct);
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

  const float4* query_rows = reinterpret_cast<const float4*>(p.queries) + std::size_t(q0) * chunks;
#pragma unroll(kScreen ? 4 : 1)
  for (std::uint32_t i = threadIdx.x; i < QG * chunks; i += blockDim.x) {
    // The screen reads one chunk of several queries at once: chunk-major there.
    queries[kScreen ? (i % chunks) * QG + i / chunks : i] = i < nq * chunks ? query_rows[i] : make_float4(0, 0, 0, 0);
  }
  if constexpr (kScreen && !kInnerProduct) {
    // Squared norms for the screen, from the staged chunks, a warp per query (rows past the batch
    // are zeros: 0). The bound holds for any summation order (screen_bounds). One thread per query
    // walking its row in global memory held the block for a chain of loads: MNIST-like, 196.
    __syncthreads();
    for (std::uint32_t j = warp; j < std::uint32_t(QG); j += warps) {
      float norm = 0.0f;
      for (std::uint32_t c = lane; c < chunks; c += 32) {
        const float4 v = queries[c * QG + j];
        norm = __fmaf_rn(v.x, v.x, __fmaf_rn(v.y, v.y, __fmaf_rn(v.z, v.z, __fmaf_rn(v.w, v.w, norm))));
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) norm = __fadd_rn(norm, __shfl_xor_sync(kFullMask, norm, offset));
      if (lane == 0) reinterpret_cast<float*>(shared + layout.norms)[j] = norm;
    }
  }
  if (kFiltered && threadIdx.x < QG) {
    ranges[threadIdx.x] = threadIdx.x < nq ? p.ranges[q0 + threadIdx.x] : IdRangeDevice{0, 0};
  }
  if (lane < QG) {
    counts[lane] = 0;  // start from the bound a sample pass may have found; NaN admits nothing
    thresholds[lane] = lane < nq ? from_ordered_bits(__ldcg(&p.threshold[q0 + lane])) : CUDART_NAN_F;
  }
  // First-tile bound: the smallest rank of the block's first tiles per query, and the warps done.
  __shared__ std::uint32_t first_min[16], first_arrived, next_tile;
  __shared__ std::uint32_t first_staged[QG == 1 ? kFirstBoundMaxBlocks : 1];  // the last block's selection
  if (threadIdx.x < 16) first_min[threadIdx.x] = kNoBound;
  if (threadIdx.x == 0) {
    first_arrived = 0;
    next_tile = 0;
  }
  __syncthreads();

  const std::uint32_t tiles = (store.slot_count + kTile - 1) / kTile;
  const std::uint32_t per_block = (tiles + gridDim.x - 1) / gridDim.x;
  const std::uint32_t tile_begin = min(tiles, blockIdx.x * per_block);
  const std::uint32_t tile_end = min(tiles, tile_begin + per_block);
  const float4* vectors = static_cast<const float4*>(store.vectors);
  // Each warp arrives once, with its first tile's ranks (key_of(j): this lane's ordered rank for
  // query j, kNoBound for none); the block's last warp goes on to the grid-wide part.
  auto arrive_first = [&](auto key_of) {
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      if (j < int(nq)) {
        const std::uint32_t smallest = __reduce_min_sync(kFullMask, key_of(j));
        if (lane == 0) atomicMin(&first_min[j], smallest);
      }
    }
    __threadfence_block();
    unsigned last = 0;
    if (lane == 0) last = atomicAdd(&first_arrived, 1u) == warps - 1;
    if (__shfl_sync(kFullMask, last, 0)) {
      publish_first_bound(p.first_keys, p.first_arrivals, p.threshold, first_min, first_staged, q0, nq, k, lane);
    }
  };
  // Compiled for one query per group only (larger groups of large stores have a sample pass):
  // with groups of 2 ptxas spilled registers in the hot loop.
  const bool first_bound = QG == 1 && !kTiled && !kFiltered && p.first_keys != nullptr;
  if (first_bound && tile_begin + warp >= tile_end) arrive_first([](int) { return kNoBound; });
  // Inserts one tile's survivors into the warp's lists: the queries in with_survivors have their
  // ranks of this tile staged in `ranks`. Rare once the thresholds are tight, so it exists once
  // in the code and in the registers.
  auto insert_tile = [&](std::uint32_t slot, bool valid, std::uint64_t id, unsigned with_survivors) {
#pragma unroll 1
    while (with_survivors) {
      const int j = __ffs(with_survivors) - 1;
      with_survivors &= with_survivors - 1;
      const float rank = ranks[j * 32 + lane];
      bool admit = valid && rank <= thresholds[j];
      if constexpr (kFiltered) admit = admit && filter_admits(ranges[j], p.predicates[q0 + j], store, slot, id);
      unsigned survivors = __ballot_sync(kFullMask, admit);
      Candidate* list = lists + std::size_t(j) * k;
      std::uint32_t n = counts[j];
      if (__popc(survivors) >= kBulkMinSurvivors) {
        warp_merge(list, n, k, Candidate{rank, slot, id}, survivors, scratch, lane);
        survivors = 0;
      }
      while (survivors) {
        const int from = __ffs(survivors) - 1;
        survivors &= survivors - 1;
        const Candidate c{__shfl_sync(kFullMask, rank, from), __shfl_sync(kFullMask, slot, from),
                          __shfl_sync(kFullMask, id, from)};
        if (n == k && !closer(c.rank, c.id, list[k - 1].rank, list[k - 1].id)) continue;
        warp_insert(list, n, k, c, lane);
      }
      __syncwarp();
      if (lane == 0) {
        counts[j] = n;
        if (n == k) {
          const float kth = list[k - 1].rank;
          thresholds[j] = fminf(thresholds[j], kth);
          atomicMin(&p.threshold[q0 + j], ordered_bits(kth));
        }
      }
      __syncwarp();
    }
  };
  // This warp's thresholds, read once per tile (four at a time where the group allows).
  auto load_limits = [&](float (&limit)[QG]) {
    if constexpr (QG % 4 == 0) {
#pragma unroll
      for (int i = 0; i < QG / 4; ++i) {
        const float4 t = reinterpret_cast<const float4*>(thresholds)[i];
        limit[4 * i] = t.x;
        limit[4 * i + 1] = t.y;
        limit[4 * i + 2] = t.z;
        limit[4 * i + 3] = t.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < QG; ++j) limit[j] = thresholds[j];
    }
  };
  if constexpr (kTiled) {
    // Lane i scores point i of kTilesPerLane tiles at once (tile, tile + warps, ..): each
    // query's chunk is read from shared memory once for all of them and the threshold test
    // runs on their smallest rank, so a (point, query) pair costs its arithmetic and a min
    // (ncu, 1,000,000 x 2, Q = 1,024: 15 instructions per pair with one tile per lane). Erased
    // slots score NaN, which the min skips. A tile group with any survivor is then scored tile
    // by tile from memory again (in L1) by the insertion path.
    auto load_point = [&](std::uint32_t tile) {  // two elements: one float2 per slot
      if constexpr (kOneChunk == 2) {
        const float2 v = __ldg(static_cast<const float2*>(store.vectors) + std::size_t(tile) * kTile + lane);
        return make_float4(v.x, v.y, 0.0f, 0.0f);
      } else {
        return __ldg(vectors + std::size_t(tile) * kTile + lane);
      }
    };
    float4 vector_ahead[kTilesPerLane];
    bool valid_ahead[kTilesPerLane];
    std::uint32_t bound_ahead = kNoBound;
    auto load_group = [&](std::uint32_t first) {
#pragma unroll
      for (int t = 0; t < kTilesPerLane; ++t) {
        const std::uint32_t tile = first + t * warps;
        valid_ahead[t] = tile < tile_end && store.valid[tile * kTile + lane] != 0;
        if (tile < tile_end) vector_ahead[t] = load_point(tile);
      }
      if (lane < nq) bound_ahead = __ldcg(&p.threshold[q0 + lane]);
    };
    if (tile_begin + warp < tile_end) load_group(tile_begin + warp);
    const float kNaN = CUDART_NAN_F;
    for (std::uint32_t first = tile_begin + warp; first < tile_end; first += kTilesPerLane * warps) {
      float4 v[kTilesPerLane];
#pragma unroll
      for (int t = 0; t < kTilesPerLane; ++t) {
        v[t] = valid_ahead[t] ? vector_ahead[t] : make_float4(kNaN, kNaN, kNaN, kNaN);
      }
      const std::uint32_t grid_bound = bound_ahead;
      if (first + kTilesPerLane * warps < tile_end) load_group(first + kTilesPerLane * warps);
      if (lane < nq) thresholds[lane] = fminf(thresholds[lane], from_ordered_bits(grid_bound));
      __syncwarp();
      float limit[QG];
      load_limits(limit);
      unsigned admitted = 0;
#pragma unroll
      for (int j = 0; j < QG; ++j) {
        float closest = kNaN;
#pragma unroll
        for (int t = 0; t < kTilesPerLane; ++t) {
          float acc[1] = {0.0f};
          accumulate<1, kInnerProduct, kOneChunk>(acc, v[t], [&](int) { return queries[j]; });
          closest = fminf(closest, rank_of<kInnerProduct>(acc[0]));
        }
        admitted |= unsigned(closest <= limit[j]) << j;
      }
      const unsigned with_any = __reduce_or_sync(kFullMask, admitted);
      if (with_any == 0) continue;
#pragma unroll 1
      for (std::uint32_t tile = first; tile < min(tile_end, first + kTilesPerLane * warps); tile += warps) {
        const std::uint32_t slot = tile * kTile + lane;
        const bool valid = store.valid[slot] != 0;
        const float4 point = load_point(tile);
        unsigned admitted_here = 0;
#pragma unroll
        for (int j = 0; j < QG; ++j) {
          if ((with_any >> j) & 1u) {
            float acc[1] = {0.0f};
            accumulate<1, kInnerProduct, kOneChunk>(acc, point, [&](int) { return queries[j]; });
            const float rank = rank_of<kInnerProduct>(acc[0]);
            ranks[j * 32 + lane] = rank;
            admitted_here |= unsigned(rank <= thresholds[j]) << j;
          }
        }
        const unsigned with_survivors = __reduce_or_sync(kFullMask, valid ? admitted_here : 0u);
        __syncwarp();
        if (with_survivors == 0) continue;
        insert_tile(slot, valid, valid ? store.ids[slot] : kNoId, with_survivors);
      }
    }
  } else {
    // kOneChunk (ScanShape::one_chunk_width): vectors of one float4 chunk. A tile is then one
    // load, so the next tile's loads (vector, valid flags, grid-wide bound) are issued before this
    // one is scored (else every tile waits a full round trip: ncu, 1,000,000 x 2, Q = 1,024), and
    // stores of at most two elements score only those (the same rank bits, see accumulate).
    // Kernels of their own: the prefetch's registers cost the other shapes blocks.
    float4 vector_ahead{};
    std::uint8_t valid_ahead = 0;
    float first_rank = CUDART_NAN_F;  // first-tile bound: this lane's rank in the warp's first tile
    std::uint32_t bound_ahead = kNoBound;
    auto load_ahead = [&](std::uint32_t tile) {
      if constexpr (kOneChunk == 2) {  // one float2 per slot (StoreView::chunk_floats)
        const float2 v = __ldg(static_cast<const float2*>(store.vectors) + std::size_t(tile) * kTile + lane);
        vector_ahead = make_float4(v.x, v.y, 0.0f, 0.0f);
      } else {
        vector_ahead = __ldg(vectors + std::size_t(tile) * kTile + lane);
      }
      valid_ahead = store.valid[tile * kTile + lane];
      if (lane < nq) bound_ahead = __ldcg(&p.threshold[q0 + lane]);
    };
    if (kOneChunk && tile_begin + warp < tile_end) load_ahead(tile_begin + warp);

    // With the first-tile bound (multi-chunk) each warp takes its next tile from a block-wide
    // counter after its first: warps that end early take the tiles of those still busy.
    const bool take_tiles = first_bound && kOneChunk == 0;
    auto next = [&](std::uint32_t tile) {
      if (!take_tiles) return tile + warps;
      std::uint32_t taken = 0;
      if (lane == 0) taken = atomicAdd(&next_tile, 1u);
      return tile_begin + warps + __shfl_sync(kFullMask, taken, 0);
    };
    // Staged loads: the warp's tiles (tile_begin + warp, + warps, ..) as one stream of stages of
    // kStageChunks chunks; `issue` copies the next stage into the ring and commits it (an empty
    // group past the end, so every wait below counts the same groups).
    float4* const ring = reinterpret_cast<float4*>(mine + layout.stage);
    const std::uint32_t stages_per_tile = (chunks + kStageChunks - 1) / kStageChunks;
    std::uint32_t issue_tile = tile_begin + warp, issue_stage = 0, issued = 0;
    auto issue = [&] {
      if (issue_tile < tile_end) {
        const float4* from = vectors + (std::size_t(issue_tile) * chunks + issue_stage * kStageChunks) * kTile + lane;
        float4* to = ring + (issued % kStages) * kStageChunks * 32 + lane;
#pragma unroll
        for (int u = 0; u < kStageChunks; ++u) {
          if (issue_stage * kStageChunks + u < chunks) copy_async16(to + u * 32, from + std::size_t(u) * kTile);
        }
        if (++issue_stage == stages_per_tile) {
          issue_stage = 0;
          issue_tile += warps;
        }
      }
      commit_async();
      ++issued;
    };
    if constexpr (kStaged || kScreen) {
#pragma unroll
      for (int i = 0; i + 1 < kStages; ++i) issue();
    }
    // The stage to score next. It equals issued - kStages after each issue(), but deriving it so
    // made groups of 4 3-4% slower on large stores (code generation; H100).
    [[maybe_unused]] std::uint32_t consumed = 0;
    if constexpr (kScreen) {
      // Lane a + 8 b scores points a, a + 8, a + 16, a + 24 of the tile against queries b, b + 4,
      // .. by dot products (a point chunk read from the ring serves QG / 4 queries, a query chunk 4
      // points: one shared load per 11 FMAs, and half the arithmetic of the exact form) and keeps
      // the squared norm of point `lane`. A pair whose exact rank is within the threshold always
      // passes the screen (ScreenBounds); the pairs that pass get that exact rank, from the same
      // direct form and chunk order as every other path. Inner product: the dot products are
      // the exact ranks (same FMAs in the same order), so the test is the exact one.
      constexpr int kPerLane = QG / 4;
      const std::uint32_t a = lane & 7, b = lane >> 3;
      const ScreenBounds bounds = p.screen;
      const float* norms = reinterpret_cast<const float*>(shared + layout.norms);
      // Flagged pairs wait in a per-warp queue (slot, query) and get their exact ranks 32 at a
      // time, a lane each: a pair's rank is a chain of loads through every chunk, and one flagged
      // pair per tile ranked alone left the warp waiting on that chain (MNIST-like, where nearly
      // every tile holds a flagged pair). Thresholds only fall, so a pair ranked later is admitted
      // exactly as it would have been at once. Inner product queues the rank the tile computed.
      std::uint32_t* const pending_slot = reinterpret_cast<std::uint32_t*>(mine + layout.pending);
      std::uint32_t* const pending_query = pending_slot + kPendingPairs;
      float* const pending_rank = reinterpret_cast<float*>(pending_query + kPendingPairs);  // inner product
      std::uint32_t pending_count = 0;  // warp-uniform
      auto rank_pending = [&] {
        __syncwarp();
        for (std::uint32_t first = 0; first < pending_count; first += 32) {
          const bool here = first + lane < pending_count;
          std::uint32_t slot = 0, j = 0;
          float rank = CUDART_NAN_F;
          bool admit = false;
          if (here) {
            slot = pending_slot[first + lane];
            j = pending_query[first + lane];
            if constexpr (kInnerProduct) {
              rank = pending_rank[first + lane];
            } else {
              const float4* point = vectors + std::size_t(slot / kTile) * chunks * kTile + slot % kTile;
              float acc[1] = {0.0f};
              // 16 loads in flight (8 before): GoogleNews- and ImageNet-like Q = 24-64 0.98-0.99x.
#pragma unroll 16
              for (std::uint32_t c = 0; c < chunks; ++c) {
                accumulate<1, false>(acc, __ldg(point + std::size_t(c) * kTile),
                                     [&](int) { return queries[c * QG + j]; });
              }
              rank = acc[0];
            }
            admit = store.valid[slot] != 0 && rank <= thresholds[j];
          }
          const std::uint64_t id = admit ? store.ids[slot] : kNoId;
          for (unsigned admitted = __ballot_sync(kFullMask, admit); admitted != 0; admitted &= admitted - 1) {
            const int from = __ffs(admitted) - 1;
            const std::uint32_t jj = __shfl_sync(kFullMask, j, from);
            const Candidate c{__shfl_sync(kFullMask, rank, from), __shfl_sync(kFullMask, slot, from),
                              __shfl_sync(kFullMask, id, from)};
            Candidate* list = lists + std::size_t(jj) * k;
            std::uint32_t n = counts[jj];
            // An insertion before this one may have lowered the threshold.
            if (!(c.rank <= thresholds[jj])) continue;
            if (n == k && !closer(c.rank, c.id, list[k - 1].rank, list[k - 1].id)) continue;
            warp_insert(list, n, k, c, lane);
            // The same count and bound update as insert_tile's. One lambda for both moved this
            // kernel from 114 to 122 registers and cost 3-7% here and in groups of 12 (H100), so
            // each keeps its copy.
            if (lane == 0) {
              counts[jj] = n;
              if (n == k) {
                const float kth = list[k - 1].rank;
                thresholds[jj] = fminf(thresholds[jj], kth);
                atomicMin(&p.threshold[q0 + jj], ordered_bits(kth));
              }
            }
            __syncwarp();
          }
        }
        pending_count = 0;
        __syncwarp();
      };
      for (std::uint32_t tile = tile_begin + warp; tile < tile_end; tile += warps) {
        float dot[4][kPerLane];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int m = 0; m < kPerLane; ++m) dot[i][m] = 0.0f;
        }
        float norm = 0.0f;
        for (std::uint32_t c0 = 0; c0 < chunks; c0 += kStageChunks) {
          issue();
          wait_async<kStages - 1>();
          __syncwarp();  // every lane's copies of this stage have landed
          const float4* here = ring + (consumed % kStages) * kStageChunks * 32;
          ++consumed;
          // Groups of 16 take a stage's chunks two at a time: fully unrolled, ptxas hoisted all
          // their loads and spilled 148 bytes (groups of 32 compile as before).
#pragma unroll(QG == kScreenGroup ? kStageChunks : 2)
          for (int u = 0; u < kStageChunks; ++u) {
            const std::uint32_t c = c0 + u;
            if (c < chunks) {
              float4 point[4];
#pragma unroll
              for (int i = 0; i < 4; ++i) point[i] = here[u * 32 + a + 8 * i];
              if constexpr (!kInnerProduct) {
                const float4 own = here[u * 32 + lane];
                norm = add_dot4(norm, own, own);
              }
#pragma unroll
              for (int m = 0; m < kPerLane; ++m) {
                const float4 q = queries[c * QG + b + 4 * m];
#pragma unroll
                for (int i = 0; i < 4; ++i) dot[i][m] = add_dot4(dot[i][m], q, point[i]);
              }
            }
          }
          __syncwarp();  // every lane has read the stage before issue() refills it
        }
        if (lane < nq) thresholds[lane] = fminf(thresholds[lane], from_ordered_bits(__ldcg(&p.threshold[q0 + lane])));
        __syncwarp();
        // The screen: bit i * kPerLane + m of `flags` for point a + 8 i and query b + 4 m. A norm
        // that may have overflowed flags its pairs unconditionally; a NaN threshold (rows past
        // the batch) flags nothing.
        float point_norm[4] = {};
        bool huge_point[4] = {};
        if constexpr (!kInnerProduct) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            point_norm[i] = __shfl_sync(kFullMask, norm, a + 8 * i);
            huge_point[i] = point_norm[i] >= bounds.huge;
          }
        }
        unsigned flags = 0;
#pragma unroll
        for (int m = 0; m < kPerLane; ++m) {
          const std::uint32_t j = b + 4 * m;
          if constexpr (kInnerProduct) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              flags |= unsigned(rank_of<true>(dot[i][m]) <= thresholds[j]) << (i * kPerLane + m);
            }
            continue;
          }
          const float query_norm = norms[j];
          const float limit = screen_limit(bounds, thresholds[j], query_norm);
          const bool huge_query = query_norm >= bounds.huge;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float screened = __fmaf_rn(-2.0f, dot[i][m], point_norm[i]);
            const bool pass =
                screened <= __fmaf_ru(bounds.norm_scale, point_norm[i], limit) || huge_point[i] || huge_query;
            flags |= unsigned(pass) << (i * kPerLane + m);
          }
        }
        // Queue the flagged pairs, one bit position (point, query) at a time across the warp.
        for (unsigned bits = __reduce_or_sync(kFullMask, flags); bits != 0; bits &= bits - 1) {
          const int r = __ffs(bits) - 1;
          const bool mine = (flags >> r) & 1u;
          const unsigned queued = __ballot_sync(kFullMask, mine);
          if (mine) {
            const std::uint32_t at = pending_count + __popc(queued & ((1u << lane) - 1));
            pending_slot[at] = tile * kTile + a + 8 * (r / kPerLane);
            pending_query[at] = b + 4 * (r % kPerLane);
            if constexpr (kInnerProduct) {  // the exact rank: dot[r / kPerLane][r % kPerLane]
              float dot_r = 0.0f;
#pragma unroll
              for (int t = 0; t < 4 * kPerLane; ++t) {
                if (t == r) dot_r = dot[t / kPerLane][t % kPerLane];
              }
              pending_rank[at] = rank_of<true>(dot_r);
            }
          }
          pending_count += __popc(queued);
          if (pending_count >= 32) rank_pending();
        }
      }
      rank_pending();
    } else {
      for (std::uint32_t tile = tile_begin + warp; tile < tile_end; tile = next(tile)) {
        const std::uint32_t slot = tile * kTile + lane;
        // The grid-wide bound (what every full list found) is applied after the arithmetic (read a
        // tile early by one-chunk kernels: a bound read earlier is still a bound).
        bool valid;
        std::uint32_t grid_bound;
        float4 vector{};  // one-chunk kernels: this tile's
        if constexpr (kOneChunk != 0) {
          valid = valid_ahead != 0;
          grid_bound = bound_ahead;
          vector = vector_ahead;
          if (tile + warps < tile_end) load_ahead(tile + warps);
        } else {
          valid = store.valid[slot] != 0;
          // With the first-tile bound it is read after the arithmetic instead (below), so the bound
          // the grid publishes while the warps score their second tile applies to that tile.
          grid_bound = lane < nq && !first_bound ? __ldcg(&p.threshold[q0 + lane]) : kNoBound;
        }
        float acc[QG];
#pragma unroll
        for (int j = 0; j < QG; ++j) acc[j] = 0.0f;
        const float4* point = vectors + std::size_t(tile) * chunks * kTile + lane;
        if constexpr (kOneChunk != 0) {
          accumulate<QG, kInnerProduct, kOneChunk>(acc, vector, [&](int j) { return queries[j]; });
        } else if constexpr (kStaged) {
          // Issue the stage kStages - 1 ahead, wait for this one (this lane's own copies, so no
          // warp barrier), score it. The chunk order is the same as the loaded paths'.
          for (std::uint32_t c0 = 0; c0 < chunks; c0 += kStageChunks) {
            issue();
            wait_async<kStages - 1>();
            const float4* here = ring + (consumed % kStages) * kStageChunks * 32 + lane;
            ++consumed;
#pragma unroll
            for (int u = 0; u < kStageChunks; ++u) {
              const std::uint32_t c = c0 + u;
              if (c < chunks) accumulate<QG, kInnerProduct>(acc, here[u * 32], [&](int j) { return queries[j * chunks + c]; });
            }
          }
        } else {
          // Groups of 1, 2, 12 and 16: an unrolled loop with 16 loads in flight per warp for one
          // query, 8 for two, 4 for 16 and 2 for 12 (ptxas spilled registers at 4; 10-30% faster at 2).
          // One query reads each point once, so its loads stream past the caches (ld.global.cs;
          // H100 A/B against __ldg: MNIST-like 0.945x, ImageNet-like 0.98x, GoogleNews-like 0.99x;
          // larger groups may read a tile again from L1 when they insert its survivors).
#pragma unroll(QG == 1 ? 16 : QG == 2 ? 8 : QG == 12 ? 2 : 4)
          for (std::uint32_t c = 0; c < chunks; ++c) {
            const float4* at = point + std::size_t(c) * kTile;
            accumulate<QG, kInnerProduct>(acc, QG == 1 ? __ldcs(at) : __ldg(at),
                                          [&](int j) { return queries[j * chunks + c]; });
          }
        }
        if (first_bound) {
          if (tile == tile_begin + warp) {
            // A NaN rank (an overflowed dot product) never counts, as in the scan and the sample pass.
            arrive_first([&](int j) {
              const float rank = rank_of<kInnerProduct>(acc[j]);
              return valid && rank <= CUDART_INF_F ? ordered_bits(rank) : kNoBound;
            });
            // Every warp ends its first tile at about the same time: merging it now (into an empty
            // list, so all of it) would leave the memory system idle grid-wide. It is held back
            // and tested against the grid's bound after the last tile (below).
            first_rank = rank_of<kInnerProduct>(acc[0]);
            continue;
          }
          if (kOneChunk == 0 && lane < nq) grid_bound = __ldcg(&p.threshold[q0 + lane]);
        }
        if (lane < nq) thresholds[lane] = fminf(thresholds[lane], from_ordered_bits(grid_bound));
        __syncwarp();
        std::uint64_t id = kNoId;
        if (kFiltered && valid) id = store.ids[slot];
        // Which queries have survivors in this tile: the arithmetic above is unrolled per query,
        // the (rare) insertion below is not, so it exists once in the code and in the registers.
        // A float compare per query and one warp-wide OR for the whole group (ncu, 1,000,000 x 2,
        // Q = 1,024: a vote and an ordered-bits compare per query were half of the scan's
        // instructions); on these ranks (never -0, see rank_of) it is the ordered-bits test.
        float limit[QG];
        load_limits(limit);
        unsigned admitted = 0;
#pragma unroll
        for (int j = 0; j < QG; ++j) {
          bool admit = rank_of<kInnerProduct>(acc[j]) <= limit[j];
          if constexpr (kFiltered) admit = admit && id >= ranges[j].begin && id < ranges[j].end;
          admitted |= unsigned(admit) << j;
        }
        unsigned with_survivors = __reduce_or_sync(kFullMask, valid ? admitted : 0u);
        if (with_survivors == 0) continue;
#pragma unroll
        for (int j = 0; j < QG; ++j) {
          if ((with_survivors >> j) & 1u) ranks[j * 32 + lane] = rank_of<kInnerProduct>(acc[j]);
        }
        __syncwarp();
        if (!kFiltered && valid) id = store.ids[slot];
        insert_tile(slot, valid, id, with_survivors);
      }
      if (first_bound && tile_begin + warp < tile_end) {  // the first tile, held back (one query)
        if (lane == 0) thresholds[0] = fminf(thresholds[0], from_ordered_bits(__ldcg(&p.threshold[q0])));
        __syncwarp();
        if (__any_sync(kFullMask, first_rank <= thresholds[0])) {
          const std::uint32_t slot = (tile_begin + warp) * kTile + lane;
          const bool valid = store.valid[slot] != 0;
          ranks[lane] = first_rank;
          __syncwarp();
          insert_tile(slot, valid, valid ? store.ids[slot] : kNoId, 1u);
        }
      }
    }
  }
  __syncthreads();

  // Merge the warps' lists of each query: entry i of warp w's list lands at i plus the number
  // of entries of the other lists closer than it. Entries beyond k, or beyond the grid-wide
  // bound (worse than some list's k-th, so not in the answer), are dropped.
  __shared__ std::uint32_t kept[QG > 16 ? QG : 16], bound[QG > 16 ? QG : 16];
  merge_block_lists<QG, kGlobalLists, kOneChunk>(p, shared, layout, block_lists, warps, k, q0, nq, kept, bound);
  __syncthreads();
  if (threadIdx.x < nq) p.lengths[std::size_t(q0 + threadIdx.x) * gridDim.x + blockIdx.x] = kept[threadIdx.x];
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
