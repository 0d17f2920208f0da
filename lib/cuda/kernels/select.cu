// The k-selection kernel: one block per query picks the k best (rank, id) among the sorted
// lists the scan blocks handed over, and writes them as reported distances, ids and slots.
// Usually a short prefix of every list suffices (random data puts about k / blocks of the
// answer in each list), checked exactly and sorted in shared memory; heavy ties or a k close
// to the store size fall back to an exact radix select over all candidates.
#include <math_constants.h>

#include <algorithm>
#include <cmath>

#include "cuda/kernels.hpp"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/select.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr int kSelectThreads = 512;

/// Entries of the loaded prefixes: every list whole when they fit, else kSelectCapacity. Sized
/// by the launch (with ceil_pow2(k) winners after them), so a batch of small k runs many blocks
/// per SM: the full 196 KB allowed one, and 1,024 queries took 36 us (ncu, 1,000,000 x 2, k 16).
__host__ __device__ inline std::uint32_t select_capacity(std::uint32_t blocks, std::uint32_t k) {
  const std::uint64_t all = std::uint64_t(blocks) * k;
  return all < kSelectCapacity ? std::uint32_t(all) : kSelectCapacity;
}

/// first_take: entries of each list the first round loads (first_take(), on the host).
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SelectParams p, std::uint32_t first_take) {
  extern __shared__ __align__(16) unsigned char shared[];
  const std::uint32_t capacity = select_capacity(p.blocks, p.k);
  Candidate* loaded = reinterpret_cast<Candidate*>(shared);     // capacity
  Candidate* winners = loaded + capacity;                        // ceil_pow2(k)
  __shared__ std::uint32_t won;
  const std::uint32_t q = blockIdx.x, k = p.k, blocks = p.blocks;
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // The list lengths are staged in shared memory for every step after the first load.
  constexpr std::uint32_t kStagedLengths = 4096;
  __shared__ std::uint32_t lengths[kStagedLengths];
  const std::uint32_t* global_lengths = p.lengths + std::size_t(q) * blocks;
  const std::uint32_t staged = min(blocks, kStagedLengths);
  const Lists lists{p.candidates + std::size_t(q) * blocks * k, blocks <= kStagedLengths ? lengths : global_lengths,
                    blocks, k};
  const Candidate padding{CUDART_INF_F, ~0u, kNoId};
  if (threadIdx.x == 0) won = 0;
  // Every list is sorted, so the answer is a prefix of each. Load as long a prefix of every
  // list as fits; the k-th key among them is the true k-th unless some list was cut before it.
  bool done = false;
  // Round 1 loads first_take entries of each list (see first_take), round 2 as much as fits;
  // only if both are cut off too early do we select over everything.
  const std::uint32_t most = min(k, capacity / max(blocks, 1u));
  const std::uint32_t first = min(most, first_take);
  for (int round = 0; round < 2; ++round) {
    const std::uint32_t take = round == 0 ? first : most;
    if (take == 0 || done || (round == 1 && most == first)) break;
    const std::uint32_t n = take * blocks;
    // Four loads in flight per thread, each entry's list length read beside it (from global
    // memory in round 1, which also stages them): one memory round trip instead of two. The
    // entries past a list's length are read too (the workspace is always initialised) and
    // replaced by padding.
    constexpr std::uint32_t kBatch = 4;
    for (std::uint32_t i0 = threadIdx.x; i0 < n; i0 += kBatch * blockDim.x) {
      Candidate c[kBatch];
      std::uint32_t length[kBatch], entry[kBatch];
#pragma unroll
      for (std::uint32_t u = 0; u < kBatch; ++u) {
        const std::uint32_t i = min(i0 + u * blockDim.x, n - 1);
        const std::uint32_t b = i / take;
        entry[u] = i - b * take;
        length[u] = round == 0 ? global_lengths[b] : lists.length(b);
        c[u] = lists.at(b, entry[u]);
      }
#pragma unroll
      for (std::uint32_t u = 0; u < kBatch; ++u) {
        const std::uint32_t i = i0 + u * blockDim.x;
        if (i < n) loaded[i] = entry[u] < length[u] ? c[u] : padding;
      }
    }
    if (round == 0) {
      for (std::uint32_t b = threadIdx.x; b < staged; b += blockDim.x) lengths[b] = global_lengths[b];
    }
    __syncthreads();
    const Candidate kth = k <= n ? smem_kth(loaded, n, k) : padding;
    // Exact when no list was cut before the k-th: a cut list's last loaded entry (in shared
    // memory) is not closer than it.
    bool exact = true;
    for (std::uint32_t b = threadIdx.x; b < blocks; b += blockDim.x) {
      if (lists.length(b) > take) exact &= !less_candidate(loaded[b * take + take - 1], kth);
    }
    done = __syncthreads_and(exact) != 0;
    if (done) {
      for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const Candidate c = loaded[i];
        if (c.id != kNoId && !less_candidate(kth, c)) winners[atomicAdd(&won, 1u)] = c;
      }
    }
  }
  if (!done) {  // heavy ties or k near the store size: radix select over every candidate
    std::uint32_t total = 0;
    for (std::uint32_t b = threadIdx.x; b < blocks; b += blockDim.x) total += lists.length(b);
    for (int d = 16; d > 0; d >>= 1) total += __shfl_xor_sync(kFullMask, total, d);
    __shared__ std::uint32_t warp_totals[kSelectThreads / 32];
    if (lane == 0) warp_totals[warp] = total;
    __syncthreads();
    total = 0;
    for (std::uint32_t w = 0; w < warps; ++w) total += warp_totals[w];
    if (total <= k) {
      lists.for_each([&](const Candidate& c) { winners[atomicAdd(&won, 1u)] = c; });
      __syncthreads();
    } else {
      radix_gather(lists, k, winners);
      if (threadIdx.x == 0) won = k;
    }
  }
  __syncthreads();
  const std::uint32_t n = won;  // at most k winners, in no particular order
  const std::size_t row = std::size_t(q) * k;
  auto emit = [&](std::uint32_t j, const Candidate& c) {
    const bool real = c.id != kNoId;
    p.out_distance[row + j] = real ? reported(p.metric, c.rank) : CUDART_INF_F;
    p.out_id[row + j] = c.id;
    p.out_slot[row + j] = real ? c.slot : ~0u;
  };
  if (n <= blockDim.x) {
    // Keys (rank, id) are unique, so the positions are a permutation of [0, n).
    rank_by_counting(winners, n, [&](std::uint32_t, const Candidate& c, std::uint32_t before) { emit(before, c); });
  } else {
    const std::uint32_t padded = ceil_pow2(n);
    for (std::uint32_t i = n + threadIdx.x; i < padded; i += blockDim.x) winners[i] = padding;
    __syncthreads();
    bitonic_sort(winners, padded);
    for (std::uint32_t j = threadIdx.x; j < n; j += blockDim.x) emit(j, winners[j]);
  }
  for (std::uint32_t j = n + threadIdx.x; j < k; j += blockDim.x) emit(j, padding);
}

}  // namespace

void configure_select() {
  check_cuda(cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int((kSelectCapacity + kMaxSelectK) * sizeof(Candidate))),
             "cudaFuncSetAttribute(select_kernel)");
}

std::uint32_t first_take(std::uint32_t blocks, std::uint32_t k) {
  blocks = std::max(blocks, 1u);
  const double mean = double(k) / blocks;
  if (mean >= 8) return std::min(k, (4 * k + blocks - 1) / blocks);  // four shares: far past the tail
  double p_t = std::exp(-mean), below = p_t;  // P(X = t) and P(X <= t), from t = 0
  std::uint32_t take = 1;
  while (take < k && (take < 4 || blocks * (1.0 - below) > 1.0 / 256)) {
    p_t *= mean / take;  // P(X = take)
    below += p_t;
    ++take;
  }
  return take;
}

void launch_select(const SelectParams& params, cudaStream_t stream) {
  const std::size_t shared = (select_capacity(params.blocks, params.k) + ceil_pow2(params.k)) * sizeof(Candidate);
  select_kernel<<<params.num_queries, kSelectThreads, shared, stream>>>(params, first_take(params.blocks, params.k));
  check_launch("select_kernel");
}

}  // namespace streamknn::detail::gpu
