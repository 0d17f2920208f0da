// Device helpers of the k-selection, shared by the selection kernel (select.cu) and the direct
// search (direct.cu): the (rank, id) order, radix selects over candidates in shared memory or in
// the scan's lists, ordering by counting, and the distance a rank reports.
#pragma once

#include <math_constants.h>

#include <cmath>

#include "cuda/kernels/common.cuh"
#include "streamknn/metric.hpp"

namespace streamknn::detail::gpu {

// Device code only, compiled into each kernel file that includes it (no separate compilation).
namespace {

__device__ __forceinline__ bool less_candidate(const Candidate& a, const Candidate& b) {
  return closer(a.rank, a.id, b.rank, b.id);
}

__device__ void bitonic_sort(Candidate* s, std::uint32_t n) {
  block_bitonic_sort(s, n, [](const Candidate& a, const Candidate& b) { return less_candidate(a, b); });
}

/// Bits [off, off + 8) of the 96-bit key (hi : 32, lo : 64), counted from the most significant;
/// bits past the end read as zeros.
__device__ __forceinline__ std::uint32_t digit_at(std::uint32_t hi, std::uint64_t lo, std::uint32_t off) {
  const std::uint64_t top = (std::uint64_t(hi) << 32) | (lo >> 32);  // key bits [0, 64)
  if (off <= 56) return std::uint32_t(top >> (56 - off)) & 0xffu;
  if (off <= 88) return std::uint32_t(lo >> (88 - off)) & 0xffu;
  return std::uint32_t(lo << (off - 88)) & 0xffu;
}

/// Sets bits [off, off + 8) of a key prefix to digit (the inverse of digit_at).
__device__ __forceinline__ void set_digit_at(std::uint32_t& hi, std::uint64_t& lo, std::uint32_t digit,
                                             std::uint32_t off) {
  if (off <= 24) {
    hi |= digit << (24 - off);
  } else if (off < 32) {
    hi |= digit >> (off - 24);
    lo |= std::uint64_t(digit) << (88 - off);
  } else if (off <= 88) {
    lo |= std::uint64_t(digit) << (88 - off);
  } else {
    lo |= std::uint64_t(digit) >> (off - 88);
  }
}

/// True when the key's first `bits` bits are those of the prefix. (At 96 bits the whole id is
/// compared: an earlier version returned true there, so where more than kCountRankMax tied ranks
/// still shared all but the id's last byte, smem_kth gathered every tie and picked an arbitrary
/// one, and the direct search cut its list to too many entries.)
__device__ __forceinline__ bool top_bits_equal(std::uint32_t hi, std::uint64_t lo, std::uint32_t prefix_hi,
                                               std::uint64_t prefix_lo, std::uint32_t bits) {
  if (bits == 0) return true;
  if (bits <= 32) return ((hi ^ prefix_hi) >> (32 - bits)) == 0;
  if (hi != prefix_hi) return false;
  return ((lo ^ prefix_lo) >> (96 - bits)) == 0;  // a shift of 0 to 63
}

/// The scan's candidate lists of one query: `blocks` lists of up to k entries each.
struct Lists {
  const Candidate* base;
  const std::uint32_t* lengths;  // in shared memory once the kernel has staged them
  std::uint32_t blocks, k;
  __device__ std::uint32_t length(std::uint32_t b) const { return lengths[b]; }
  __device__ const Candidate& at(std::uint32_t b, std::uint32_t i) const { return base[std::size_t(b) * k + i]; }
  /// Calls f(candidate) for every listed candidate, spread over the block's threads.
  template <class F>
  __device__ void for_each(F f) const {
    for (std::uint32_t i = threadIdx.x; i < blocks * k; i += blockDim.x) {
      const std::uint32_t b = i / k, e = i % k;
      if (e < length(b)) f(at(b, e));
    }
  }
};

/// Gathers the k smallest of all listed candidates (more than k of them) into s, unsorted:
/// an exact MSB-first radix select over the key finds the k-th key, then a pass keeps every
/// candidate up to it.
__device__ void radix_gather(const Lists& lists, std::uint32_t k, Candidate* s) {
  __shared__ std::uint32_t histogram[256];
  __shared__ std::uint32_t step_words[3], gathered;
  if (threadIdx.x == 0) gathered = 0;
  std::uint32_t prefix_hi = 0, want = k;  // want: 1-based rank among the keys matching the prefix
  std::uint64_t prefix_lo = 0;
  for (std::uint32_t bits = 0; bits < 96; bits += 8) {
    for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histogram[b] = 0;
    __syncthreads();
    lists.for_each([&](const Candidate& c) {
      const std::uint32_t hi = ordered_bits(c.rank);
      if (top_bits_equal(hi, c.id, prefix_hi, prefix_lo, bits)) atomicAdd(&histogram[digit_at(hi, c.id, bits)], 1u);
    });
    __syncthreads();
    const RadixStep step = radix_step(histogram, want, step_words);
    want = step.want;
    set_digit_at(prefix_hi, prefix_lo, step.digit, bits);
  }
  // The prefix is now exactly the k-th smallest key: keep everything up to it (k entries).
  const std::uint32_t kth_hi = prefix_hi;
  const std::uint64_t kth_lo = prefix_lo;
  lists.for_each([&](const Candidate& c) {
    const std::uint32_t hi = ordered_bits(c.rank);
    if (hi < kth_hi || (hi == kth_hi && c.id <= kth_lo)) s[atomicAdd(&gathered, 1u)] = c;
  });
  __syncthreads();
}

__device__ __forceinline__ float reported(int metric, float rank) {
  switch (static_cast<Metric>(metric)) {
    case Metric::L2: return sqrtf(rank);
    case Metric::InnerProduct: return rank;
    case Metric::Cosine: return 0.5f * rank;
    case Metric::Haversine: {
      const double half_chord = 0.5 * sqrt(double(rank));
      return float(2.0 * kEarthRadiusMetres * asin(half_chord < 1.0 ? half_chord : 1.0));
    }
  }
  return rank;
}

/// Writes answer j of query q: the reported distance, the id and the slot (padding: +inf, no id),
/// to the outputs of `p` (SelectParams, or DenseParams, whose selection writes the answers itself).
template <class Outputs>
__device__ __forceinline__ void emit_answer(const Outputs& p, std::uint32_t q, std::uint32_t j, Candidate c) {
  const std::size_t at = std::size_t(q) * p.k + j;
  const bool real = c.id != kNoId;
  p.out_distance[at] = real ? reported(p.metric, c.rank) : CUDART_INF_F;
  p.out_id[at] = c.id;
  p.out_slot[at] = real ? c.slot : ~0u;
}

/// For each of s[0, n) (n <= blockDim.x), the number of entries closer than it, counted by
/// `parts` consecutive lanes together (each entry a broadcast read). Calls f(i, s[i], count) in
/// one thread per entry; every thread calls it. Ordering 64 winners took 1.6 us with a warp per
/// winner and a reduction each (clock64 phase stamps), 0.9 us this way.
template <class F>
__device__ void rank_by_counting(const Candidate* s, std::uint32_t n, F f) {
  const std::uint32_t parts = min(32u, floor_pow2(max(blockDim.x / max(n, 1u), 1u)));
  const std::uint32_t i = threadIdx.x / parts, part = threadIdx.x % parts;
  Candidate mine{};
  std::uint32_t before = 0;
  if (i < n) {
    mine = s[i];
    for (std::uint32_t j = part; j < n; j += parts) before += less_candidate(s[j], mine);
  }
  for (std::uint32_t d = parts >> 1; d > 0; d >>= 1) before += __shfl_xor_sync(kFullMask, before, d);
  if (i < n && part == 0) f(i, mine, before);
}

/// Hands the selection one block's list (s[0, n), n <= blockDim.x, keys unique) as the scan's
/// layout: its k best, sorted, as far as `bound` (what lies past it cannot be among the query's k
/// best), into out[0, k), and the length within the bound into *length. The k best are those with
/// fewer than k entries closer, so no cut is needed. Every thread calls it.
__device__ void write_block_list(const Candidate* s, std::uint32_t n, std::uint32_t k, std::uint32_t bound,
                                 Candidate* out, std::uint32_t* length) {
  bool within = false;
  rank_by_counting(s, n, [&](std::uint32_t, const Candidate& c, std::uint32_t before) {
    if (before >= k) return;
    out[before] = c;
    within = ordered_bits(c.rank) <= bound;
  });
  const std::uint32_t count = __syncthreads_count(within);
  if (threadIdx.x == 0) *length = count;
}

/// Keys the k-th search ranks by counting once radix digits have narrowed it down to them.
constexpr std::uint32_t kCountRankMax = 128;

/// The k-th smallest of s[0, n) by (rank, id) (1 <= k <= n); padding (id kNoId) is larger than
/// every real key and is returned when fewer than k keys are real. An MSB-first radix select, 8
/// bits per pass, that starts below the bits every real key shares (close ranks share their top
/// byte, which put every key in one bucket: an atomic on one address per key), and ranks the last
/// few keys by counting. clock64 phase stamps on MNIST-like one-query lists (1,370 keys):
/// 3.8 us with three or four passes from the top byte, 2.9 us with one pass and the count.
__device__ Candidate smem_kth(const Candidate* s, std::uint32_t n, std::uint32_t k) {
  __shared__ std::uint32_t histogram[2][256];
  __shared__ std::uint32_t scratch[96], step_words[3], gathered;
  __shared__ Candidate few[kCountRankMax];
  __shared__ Candidate found_s;
  const Candidate padding{CUDART_INF_F, ~0u, kNoId};
  std::uint32_t any_and = ~0u, any_or = 0, real = 0;
  for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (s[i].id == kNoId) continue;
    const std::uint32_t hi = ordered_bits(s[i].rank);
    any_and &= hi;
    any_or |= hi;
    ++real;
  }
  for (std::uint32_t b = threadIdx.x; b < 512; b += blockDim.x) histogram[b >> 8][b & 255] = 0;
  if (threadIdx.x == 0) gathered = 0;
  const BlockBits keys = block_and_or_sum(any_and, any_or, real, scratch);
  if (keys.count < k) return padding;
  // The prefix every real key shares; the passes fix one 8-bit digit after it at a time.
  const KeyPrefix common = shared_prefix(keys);
  std::uint32_t bits = common.bits, prefix_hi = common.value;
  std::uint64_t prefix_lo = 0;
  std::uint32_t want = k, left = keys.count;  // want: 1-based rank among the `left` keys matching the prefix
  for (int pass = 0; left > kCountRankMax && bits < 96; ++pass) {
    std::uint32_t* counts = histogram[pass & 1];
    for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const Candidate c = s[i];
      const std::uint32_t hi = ordered_bits(c.rank);
      if (c.id != kNoId && top_bits_equal(hi, c.id, prefix_hi, prefix_lo, bits)) {
        atomicAdd(&counts[digit_at(hi, c.id, bits)], 1u);
      }
    }
    // The next pass's histogram: its last reader finished before this pass's first barrier.
    for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histogram[(pass + 1) & 1][b] = 0;
    __syncthreads();
    const RadixStep step = radix_step(counts, want, step_words);
    want = step.want;
    left = step.left;
    set_digit_at(prefix_hi, prefix_lo, step.digit, bits);
    bits = min(bits + 8, 96u);
  }
  // Keys (rank, id) are unique, so the `left` keys matching the prefix hold exactly one with
  // want - 1 of them closer.
  for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const Candidate c = s[i];
    if (c.id != kNoId && top_bits_equal(ordered_bits(c.rank), c.id, prefix_hi, prefix_lo, bits)) {
      const std::uint32_t at = atomicAdd(&gathered, 1u);
      if (at < kCountRankMax) few[at] = c;
    }
  }
  __syncthreads();
  rank_by_counting(few, min(left, kCountRankMax), [&](std::uint32_t, const Candidate& c, std::uint32_t before) {
    if (before == want - 1) found_s = c;
  });
  __syncthreads();
  return found_s;
}

}  // namespace

}  // namespace streamknn::detail::gpu
