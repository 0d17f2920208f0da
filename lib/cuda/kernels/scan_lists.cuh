// The scan kernel's lists (only scan.cu and its scan_*.cuh parts include it): a warp's insertion
// and bulk merge into its sorted (rank, id) lists, the grid-wide part of the first-tile bound, and
// the block's merge of its warps' lists into one list per query at the end of the scan.
#pragma once

#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scan_layout.cuh"

namespace streamknn::detail::gpu {

namespace {

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

}  // namespace

}  // namespace streamknn::detail::gpu
