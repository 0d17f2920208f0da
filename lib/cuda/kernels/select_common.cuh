// Block-wide selection helpers shared by the selection kernel (select.cu) and the small-batch
// filter path (filter.cu): the (rank, id) key order, an exact MSB-first radix select of the k-th
// key over any candidate source, the ordering of the winners and the reported distance.
#pragma once

#include <math_constants.h>

#include "cuda/kernels/common.cuh"
#include "streamknn/metric.hpp"

namespace streamknn::detail::gpu {

__device__ __forceinline__ bool less_candidate(const Candidate& a, const Candidate& b) {
  return closer(a.rank, a.id, b.rank, b.id);
}

/// Pads a result row past the last neighbour found; sorts after every real candidate.
__device__ __forceinline__ Candidate padding_candidate() { return Candidate{CUDART_INF_F, ~0u, kNoId}; }

/// A candidate read through L2: written by another block of the same kernel (L1 is not coherent).
__device__ __forceinline__ Candidate load_cg(const Candidate* c) {
  const auto* words = reinterpret_cast<const unsigned long long*>(c);
  const unsigned long long first = __ldcg(words), id = __ldcg(words + 1);  // (rank, slot), id
  return Candidate{__uint_as_float(std::uint32_t(first)), std::uint32_t(first >> 32), id};
}

/// Digit `pass` (0 = most significant) of the 96-bit key (ordered rank : 32, id : 64).
__device__ __forceinline__ std::uint32_t key_digit(std::uint32_t hi, std::uint64_t lo, int pass) {
  return pass < 4 ? (hi >> (24 - 8 * pass)) & 0xffu : std::uint32_t(lo >> (56 - 8 * (pass - 4))) & 0xffu;
}

/// True when the key agrees with the prefix on every digit before `pass`.
__device__ __forceinline__ bool key_matches(std::uint32_t hi, std::uint64_t lo, std::uint32_t prefix_hi,
                                            std::uint64_t prefix_lo, int pass) {
  if (pass == 0) return true;
  if (pass <= 4) return (hi >> (32 - 8 * pass)) == (prefix_hi >> (32 - 8 * pass));
  if (hi != prefix_hi) return false;
  return (lo >> (64 - 8 * (pass - 4))) == (prefix_lo >> (64 - 8 * (pass - 4)));
}

/// Fixes digit `pass` of the 96-bit key prefix (see key_digit).
__device__ __forceinline__ void set_digit(std::uint32_t& prefix_hi, std::uint64_t& prefix_lo, std::uint32_t digit,
                                          int pass) {
  if (pass < 4) {
    prefix_hi |= digit << (24 - 8 * pass);
  } else {
    prefix_lo |= std::uint64_t(digit) << (56 - 8 * (pass - 4));
  }
}

/// The k-th smallest (1-based) candidate by (rank, id) among those `for_each` visits, with the
/// whole block: an MSB-first radix select over the 96-bit key, 8 bits per pass, stopping once a
/// single candidate matches the fixed digits (usually after three or four passes on the rank
/// bits). for_each(f) calls f(candidate, real) in every thread the same number of times (so
/// warps stay converged), real == false for placeholders; it visits every candidate once per
/// pass, at least k of them. `count` is how many (an upper bound is enough: it only lets a
/// single candidate stop the search before the first pass). Candidates share few digits in the
/// first passes, so each warp adds its lanes' equal digits with one shared-memory atomic
/// (one atomic per lane serialised on the hot buckets). Every thread of the block must call it;
/// every thread gets the result.

template <class ForEach>
__device__ Candidate kth_smallest(ForEach for_each, std::uint32_t count, std::uint32_t k) {
  // One block barrier per pass: three histograms in rotation (a pass counts into one while
  // zeroing the next; the one zeroed was last read two passes ago, before the previous
  // barrier), and every warp finds the digit itself, so the search state lives in registers.
  __shared__ std::uint32_t histograms[3][256];
  __shared__ Candidate found_s;
  const std::uint32_t lane = threadIdx.x & 31u;
  std::uint32_t prefix_hi = 0, want = k, left = count;  // want: 1-based rank among the keys matching the prefix
  std::uint64_t prefix_lo = 0;
  int digits = 0;
  for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histograms[0][b] = 0;
  __syncthreads();
  while (digits < 12 && left > 1) {
    const int pass = digits;
    std::uint32_t* histogram = histograms[pass % 3];
    for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histograms[(pass + 1) % 3][b] = 0;
    for_each([&](const Candidate& c, bool real) {
      const std::uint32_t hi = ordered_bits(c.rank);
      const bool counted = real && key_matches(hi, c.id, prefix_hi, prefix_lo, pass);
      const std::uint32_t digit = counted ? key_digit(hi, c.id, pass) : 256u;
      const unsigned peers = __match_any_sync(kFullMask, digit);
      if (counted && lane == std::uint32_t(__ffs(peers) - 1)) atomicAdd(&histogram[digit], __popc(peers));
    });
    __syncthreads();
    std::uint32_t digit = 0, below = 0;
    const unsigned holder = __ballot_sync(kFullMask, find_digit(histogram, want, lane, digit, below));
    const int from = __ffs(holder) - 1;
    digit = __shfl_sync(kFullMask, digit, from);
    below = __shfl_sync(kFullMask, below, from);
    want -= below;
    left = histogram[digit];
    set_digit(prefix_hi, prefix_lo, digit, pass);
    digits = pass + 1;
  }
  // Exactly one key matches the fixed digits (or all 96 are fixed): it is the k-th.
  for_each([&](const Candidate& c, bool real) {
    if (real && key_matches(ordered_bits(c.rank), c.id, prefix_hi, prefix_lo, digits)) found_s = c;
  });
  __syncthreads();
  return found_s;
}
/// Calls f(at(i), true) for i in [0, n), spread over the block, and f(padding, false) to fill
/// the last round: every thread makes the same number of calls (see kth_smallest).
template <class At, class F>
__device__ __forceinline__ void block_uniform_for(std::uint32_t n, At at, F f) {
  for (std::uint32_t base = 0; base < n; base += blockDim.x) {
    const std::uint32_t i = base + threadIdx.x;
    if (i < n) {
      f(at(i), true);
    } else {
      f(padding_candidate(), false);
    }
  }
}

/// Up to this many winners are ordered by counting (each one's position is the number of
/// winners closer than it; one warp per winner, no block barrier).
inline constexpr std::uint32_t kRankSortMax = 256;

/// Calls emit(position, winner) for each of the n <= kRankSortMax winners (distinct keys, in any
/// order) with its position in the (rank, id) order. Every thread of the block calls it.
template <class Emit>
__device__ void emit_by_counting(const Candidate* winners, std::uint32_t n, Emit emit) {
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (std::uint32_t i = warp; i < n; i += warps) {
    const Candidate mine = winners[i];
    std::uint32_t before = 0;
    for (std::uint32_t j = lane; j < n; j += 32) before += less_candidate(winners[j], mine);
    before = __reduce_add_sync(kFullMask, before);
    if (lane == 0) emit(before, mine);
  }
}

/// The distance a result reports for a rank (the stored form's ranking value).
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

}  // namespace streamknn::detail::gpu
