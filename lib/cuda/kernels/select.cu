// The k-selection kernel: one block per query picks the k best (rank, id) among the sorted
// lists the scan blocks handed over, and writes them as reported distances, ids and slots for
// the exact re-rank, which orders them by their exact keys: in no particular order but the k-th
// (the largest) last. Usually a short prefix of every list suffices (random data puts about
// k / blocks of the answer in each list), checked exactly in shared memory; heavy ties or a k
// close to the store size fall back to an exact radix select over all candidates.
#include <math_constants.h>

#include <algorithm>
#include <cmath>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/select.hpp"
#include "cuda/kernels/select.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr int kSelectThreads = 512;
/// Batches of many queries, each with few candidates (the query-resident scan's), run blocks of
/// kSelectBatchThreads: twice the blocks per SM, so more queries' barrier chains overlap. ncu
/// (H100): 100,000 x 2 K = 16 Q = 4,096 77.7 -> 52.1 us, 1,000,000 x 2 Q = 1,024 22.4 -> 16.8 us
/// (128 threads: 50.4 and 18.6 us); same-run searches 0.93-1.00x at 1,000,000 x 2 Q = 1,024-32,768,
/// 10,000,000 x 2 1.00-1.02x.
constexpr int kSelectBatchThreads = 256;
constexpr std::uint32_t kSelectBatchQueries = 256;
constexpr std::uint32_t kSelectBatchCapacity = 2048;
/// The key of a loaded slot that holds no candidate (padding past a list's length): above every
/// rank's ordered bits (a rank is never NaN). Loaded padding carries the NaN whose ordered bits
/// it is, so an entry's key is read from its rank alone.
constexpr std::uint32_t kNoKey = 0xffffffffu;

/// The keys of the loaded entries: each one's ordered rank bits. (A separate array of keys took
/// a quarter more shared memory per block, and batches run several selection blocks per SM.)
struct LoadedKeys {
  const Candidate* s;
  __device__ __forceinline__ std::uint32_t operator[](std::uint32_t i) const { return ordered_bits(s[i].rank); }
};

/// Entries of the loaded prefixes: every list whole when they fit, else kSelectCapacity. Sized
/// by the launch (with ceil_pow2(k) winners after them), so a batch of small k runs many blocks
/// per SM: the full 196 KB allowed one, and 1,024 queries took 36 us (ncu, 1,000,000 x 2, k 16).
__host__ __device__ inline std::uint32_t select_capacity(std::uint32_t blocks, std::uint32_t k) {
  const std::uint64_t all = std::uint64_t(blocks) * k;
  return all < kSelectCapacity ? std::uint32_t(all) : kSelectCapacity;
}

/// Dynamic shared memory of a selection block: the loaded prefixes, then room for k winners.
__host__ __device__ inline std::size_t select_shared_bytes(std::uint32_t capacity, std::uint32_t k) {
  return (capacity + ceil_pow2(k)) * sizeof(Candidate);
}

/// True when key's first `bits` bits (0 to 32) are those of prefix.
__device__ __forceinline__ bool top_bits_match(std::uint32_t key, std::uint32_t prefix, std::uint32_t bits) {
  return bits == 0 || ((key ^ prefix) >> (32 - bits)) == 0;
}

/// The k-th smallest (rank, id) of s[0, n), given each entry's ordered rank bits (kNoKey for
/// padding) and their block-wide AND, OR and count, taken while loading. smem_kth's method on
/// the 32-bit keys alone: an 8-bit MSB-first radix pass at a time below the bits every key
/// shares, while more than kCountRankMax keys match, then the (rank, id) order among those left.
/// Ranks as close as 2^-24 apart with more than kCountRankMax ties left take smem_kth over the
/// whole (rank, id) key. histogram[0] and *gathered are zero on entry (the loads' barrier orders
/// that).
__device__ Candidate kth_of_loaded(const Candidate* s, LoadedKeys keys, std::uint32_t n, std::uint32_t k,
                                   const BlockBits& all, std::uint32_t (*histogram)[256], std::uint32_t* gathered) {
  __shared__ std::uint32_t step_words[3];
  __shared__ Candidate few[kCountRankMax];
  __shared__ Candidate found_s;
  const Candidate padding{CUDART_INF_F, ~0u, kNoId};
  if (all.count < k) return padding;
  const KeyPrefix common = shared_prefix(all);
  std::uint32_t bits = common.bits, prefix = common.value, want = k, left = all.count;
  for (int pass = 0; left > kCountRankMax && bits <= 24; ++pass) {
    std::uint32_t* counts = histogram[pass & 1];
    for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const std::uint32_t key = keys[i];
      if (key != kNoKey && top_bits_match(key, prefix, bits)) atomicAdd(&counts[(key >> (24 - bits)) & 0xffu], 1u);
    }
    // The next pass's histogram: its last reader finished before this pass's first barrier.
    for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histogram[(pass + 1) & 1][b] = 0;
    __syncthreads();
    const RadixStep step = radix_step(counts, want, step_words);
    want = step.want;
    left = step.left;
    prefix |= step.digit << (24 - bits);
    bits += 8;
  }
  if (left > kCountRankMax) return smem_kth(s, n, k);  // ties closer than the rank's bits tell apart
  // The `left` keys with the prefix hold exactly one with want - 1 of them closer by (rank, id).
  // (An atomic per key: the stamps of a warp-aggregated append, a ballot and one atomic per
  // warp, measured more time in the instructions every key pays than in the atomics it saves.)
  for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::uint32_t key = keys[i];
    if (key != kNoKey && top_bits_match(key, prefix, bits)) few[atomicAdd(gathered, 1u)] = s[i];
  }
  __syncthreads();
  rank_by_counting(few, left, [&](std::uint32_t, const Candidate& c, std::uint32_t before) {
    if (before == want - 1) found_s = c;
  });
  __syncthreads();
  return found_s;
}

/// The fallback of select_kernel where no loaded prefix held the k-th (heavy ties, or k near the
/// store's size): every list's entries are the winners if there are at most k of them, else a
/// radix select over all of them takes the k best. warp_totals: the block's shared scratch.
__device__ __forceinline__ void gather_every_winner(const Lists& lists, std::uint32_t k, Candidate* winners,
                                                    std::uint32_t& won, std::uint32_t* warp_totals,
                                                    std::uint32_t lane, std::uint32_t warp, std::uint32_t warps) {
  std::uint32_t total = 0;
  for (std::uint32_t b = threadIdx.x; b < lists.blocks; b += blockDim.x) total += lists.length(b);
  for (int d = 16; d > 0; d >>= 1) total += __shfl_xor_sync(kFullMask, total, d);
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

/// first_take: entries of each list the first round loads (first_take(), on the host).
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SelectParams p, std::uint32_t first_take) {
  start_chained_kernel();
  const Candidate padding{CUDART_INF_F, ~0u, kNoId};
  if (p.blocks == 1) {
    // One list per query: sorted by (rank, id) and at most k long (as every list), so it is the
    // answer as it stands. The general path took 7.8 us for it (ncu, MNIST-like K = 128 Q = 6).
    const std::uint32_t q = blockIdx.x, length = min(p.lengths[q], p.k);
    const Candidate* const list = p.candidates + std::size_t(q) * p.k;
    for (std::uint32_t j = threadIdx.x; j < p.k; j += blockDim.x) emit_answer(p, q, j, j < length ? list[j] : padding);
    return;
  }
  extern __shared__ __align__(16) unsigned char shared[];
  const std::uint32_t capacity = select_capacity(p.blocks, p.k);
  Candidate* loaded = reinterpret_cast<Candidate*>(shared);  // capacity
  Candidate* winners = loaded + capacity;                   // ceil_pow2(k)
  const LoadedKeys keys{loaded};
  __shared__ std::uint32_t won, gathered;
  __shared__ std::uint32_t kth_at;  // where the k-th winner was gathered (~0u: none, fewer than k)
  __shared__ std::uint32_t histogram[2][256];
  __shared__ std::uint32_t scratch[96];
  const std::uint32_t q = blockIdx.x, k = p.k, blocks = p.blocks;
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // The list lengths are staged in shared memory for every step after the first load.
  constexpr std::uint32_t kStagedLengths = 4096;
  __shared__ std::uint32_t lengths[kStagedLengths];
  const std::uint32_t* global_lengths = p.lengths + std::size_t(q) * blocks;
  const std::uint32_t staged = min(blocks, kStagedLengths);
  const Lists lists{p.candidates + std::size_t(q) * blocks * k, blocks <= kStagedLengths ? lengths : global_lengths,
                    blocks, k};
  const Candidate no_entry{__uint_as_float(0x7fffffffu), ~0u, kNoId};  // its key is kNoKey
  if (threadIdx.x == 0) {
    won = 0;
    kth_at = ~0u;
  }
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
    // replaced by an entry of key kNoKey. The keys' AND, OR and count for the k-th search are
    // taken here, from registers (a pass over shared memory and its barrier cost 2,500 of the
    // 7,600 cycles the k-th took: clock64 stamps, MNIST-like k 128).
    std::uint32_t keys_and = ~0u, keys_or = 0, real = 0;
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
        if (i >= n) continue;
        const bool listed = entry[u] < length[u] && c[u].id != kNoId;
        const std::uint32_t key = listed ? ordered_bits(c[u].rank) : kNoKey;
        loaded[i] = listed ? c[u] : no_entry;
        if (listed) {
          keys_and &= key;
          keys_or |= key;
          ++real;
        }
      }
    }
    if (round == 0) {
      for (std::uint32_t b = threadIdx.x; b < staged; b += blockDim.x) lengths[b] = global_lengths[b];
    }
    for (std::uint32_t b = threadIdx.x; b < 256; b += blockDim.x) histogram[0][b] = 0;
    if (threadIdx.x == 0) gathered = 0;
    // Its barrier also orders the loads, the staging and the zeroing above before any reader.
    const BlockBits all = block_and_or_sum(keys_and, keys_or, real, scratch);
    const Candidate kth = kth_of_loaded(loaded, keys, n, k, all, histogram, &gathered);
    // Exact when no list was cut before the k-th: a cut list's last loaded entry (in shared
    // memory) is not closer than it. The winners are gathered beside that check and dropped if
    // it fails (one barrier instead of two).
    bool exact = true;
    for (std::uint32_t b = threadIdx.x; b < blocks; b += blockDim.x) {
      if (lists.length(b) > take) exact &= !less_candidate(loaded[b * take + take - 1], kth);
    }
    for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const std::uint32_t key = keys[i];
      if (key == kNoKey) continue;
      const Candidate c = loaded[i];
      if (less_candidate(kth, c)) continue;
      const std::uint32_t at = atomicAdd(&won, 1u);
      winners[at] = c;
      if (!less_candidate(c, kth)) kth_at = at;  // c is the k-th itself
    }
    done = __syncthreads_and(exact) != 0;
    // The next round's or the fallback's first append comes after at least one more barrier.
    if (!done && threadIdx.x == 0) {
      won = 0;
      kth_at = ~0u;
    }
  }
  __shared__ std::uint32_t warp_totals[kSelectThreads / 32];
  if (!done) gather_every_winner(lists, k, winners, won, warp_totals, lane, warp, warps);
  __syncthreads();
  const std::uint32_t n = won;  // at most k winners, in no particular order
  auto emit = [&](std::uint32_t j, const Candidate& c) { emit_answer(p, q, j, c); };
  if (done) {
    // The exact re-rank orders the winners by their exact keys, so they go out as gathered, but
    // for the k-th, which goes last: after the reduced-precision screen the re-rank's certificate
    // reads its bound there. (Ordering 64-256 winners by counting took 2-4.5 us of one query's
    // selection: clock64 phase stamps, ImageNet-like.)
    const std::uint32_t last = n - 1, kth_index = kth_at < n ? kth_at : last;
    for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      emit(i == kth_index ? last : i == last ? kth_index : i, winners[i]);
    }
  } else if (n <= blockDim.x) {  // the fallback's winners, ordered: the k-th among them is last
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
                                  int(select_shared_bytes(kSelectCapacity, kMaxSelectK))),
             "cudaFuncSetAttribute(select_kernel)");
}

/// The shortest first prefix. The Poisson rule alone asks for 3 entries of each of the 648 lists
/// of one query over 1,000,000 x 2 (K = 16, the direct search's lists); a floor of 4 loaded a
/// third more, two memory round trips per thread instead of one.
constexpr std::uint32_t kMinFirstTake = 2;

std::uint32_t first_take(std::uint32_t blocks, std::uint32_t k) {
  blocks = std::max(blocks, 1u);
  const double mean = double(k) / blocks;
  if (mean >= 8) return std::min(k, (4 * k + blocks - 1) / blocks);  // four shares: far past the tail
  double p_t = std::exp(-mean), below = p_t;  // P(X = t) and P(X <= t), from t = 0
  std::uint32_t take = 1;
  while (take < k && (take < kMinFirstTake || blocks * (1.0 - below) > 1.0 / 256)) {
    p_t *= mean / take;  // P(X = take)
    below += p_t;
    ++take;
  }
  return take;
}

void launch_select(const SelectParams& params, cudaStream_t stream) {
  const std::uint32_t capacity = select_capacity(params.blocks, params.k);
  const std::size_t shared = select_shared_bytes(capacity, params.k);
  const bool batch = params.num_queries >= kSelectBatchQueries && capacity <= kSelectBatchCapacity;
  const int threads = batch ? kSelectBatchThreads : kSelectThreads;
  launch_chained("select_kernel", select_kernel, params.num_queries, threads, shared, stream, params,
                 first_take(params.blocks, params.k));
}

}  // namespace streamknn::detail::gpu
