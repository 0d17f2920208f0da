// The scan's warp lists (kernels/scan.cu): the list insert (one survivor, or a tile's survivors
// merged at once), the first-tile bound's grid-wide k-th, and the block merge of one query's
// lists over a multi-chunk store.
#pragma once

#include <math_constants.h>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/scan.hpp"

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

/// The k-th smallest of n keys (k <= n <= kFirstBoundMaxBlocks) in global memory, by one warp:
/// the keys are staged in shared memory and a binary search over the key's bits counts those at
/// or below the midpoint (32 steps; in registers they cost the scan's hot loop spills).
__device__ __forceinline__ std::uint32_t warp_kth(const std::uint32_t* keys, std::uint32_t n, std::uint32_t k,
                                                  std::uint32_t* staged, std::uint32_t lane) {
  for (std::uint32_t i = lane; i < n; i += 32) staged[i] = __ldcg(keys + i);
  __syncwarp();
  std::uint32_t lo = 0, hi = ~0u;  // the smallest key with at least k keys at or below it
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    std::uint32_t count = 0;
    for (std::uint32_t i = lane; i < n; i += 32) count += staged[i] <= mid;
    if (__reduce_add_sync(kFullMask, count) >= k) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  __syncwarp();
  return lo;
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

}  // namespace

}  // namespace streamknn::detail::gpu
