// The dense screen's selection (DenseParams, dense.hpp): one block per query (or several, screened)
// ranks exactly the pairs the product (dense_product.cu) cannot rule out, in phases A, B and C
// (dense.hpp), and writes the answers.
#include <math_constants.h>

#include <algorithm>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dense.cuh"
#include "cuda/kernels/dense.hpp"
#include "cuda/kernels/select.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr int kSelectThreads = 256;  // 8 warps scan the groups; a thread per candidate ranks
constexpr std::uint32_t kSelectWarps = kSelectThreads / 32;
constexpr std::uint32_t kWindowPerThread = 4;
constexpr std::uint32_t kWindow = kSelectThreads * kWindowPerThread;  // slots per window of the tie path
constexpr int kGroupLoads = 8;                // listed groups a warp of the selection loads at once
constexpr std::uint32_t kCountedMerge = 512;  // merges of at most this many entries order by counting
constexpr std::uint32_t kBoundSlack = 8;      // keys a first bound may admit past the k-th (bound_key)
/// Room left for the selection's static shared memory (counts, words, scratch: about 1.5 KB).
constexpr std::size_t kSelectStaticBytes = 2048;

/// Slots a batch holds: a merge's leftover (< k) plus a window, rounded to 16 bytes.
__host__ __device__ constexpr std::uint32_t batch_entries(std::uint32_t k) {
  return (ceil_pow2(k) + kWindow + 3) / 4 * 4;
}
/// The best list (k) and a full batch sorted together.
__host__ __device__ constexpr std::uint32_t merge_entries(std::uint32_t k) { return ceil_pow2(k + batch_entries(k)); }
/// float4s between two staged points: odd, so a quarter warp's loads of one chunk of eight
/// points fall in different banks.
__host__ __device__ constexpr std::uint32_t staged_stride(std::uint32_t chunks) { return chunks | 1u; }
/// Points staged at once whose room also holds the list of a row's groups to read (fill_batch).
__host__ __device__ constexpr std::uint32_t min_stage_points(std::uint32_t chunks, std::uint32_t groups) {
  const std::uint32_t groups_per_point = staged_stride(chunks) * 4;
  return groups <= groups_per_point ? 1 : (groups + groups_per_point - 1) / groups_per_point;
}
/// Shared memory of one selection block: the merge buffer, the batch's slots, the query, the
/// row's group keys (to 16 bytes), then stage_points points staged for their exact ranks.
std::size_t select_shared_bytes(std::uint32_t k, std::uint32_t chunks, std::uint32_t groups, std::uint32_t stage_points) {
  return std::size_t(merge_entries(k)) * sizeof(Candidate) + std::size_t(batch_entries(k)) * 4 +
         std::size_t(chunks) * sizeof(float4) + std::size_t((groups + 3) / 4 * 4) * 4 +
         std::size_t(stage_points) * staged_stride(chunks) * sizeof(float4);
}

/// A bound on the keys that key_at(i) gives for i < n, other than kEmptyKey: a key with at least
/// `want` of them at or below it and at most kBoundSlack more than that (the want-th smallest
/// itself where a pass leaves more), or kEmptyKey when fewer than want exist. One pass finds the
/// keys' common leading bits; then MSB-first passes of 8 bits below them (a row's keys share their
/// leading bits, so counting from the top byte put every key on one shared counter: with a
/// warp-aggregated count instead, 6-9 us of the selection). A pass whose digit holds at most
/// kBoundSlack keys past the want-th ends the search with that digit's largest key: the bound
/// only has to admit want keys, and each later pass cost about 1,000 cycles of barriers. Every
/// thread calls it.
template <class KeyAt>
__device__ std::uint32_t bound_key(std::uint32_t n, std::uint32_t want, std::uint32_t* counts, std::uint32_t* words,
                                 std::uint32_t* scratch, KeyAt key_at) {
  __syncthreads();  // a previous call's scratch, counts and words are read
  std::uint32_t all_and = ~0u, all_or = 0, count = 0;
  for (std::uint32_t i = threadIdx.x; i < n; i += kSelectThreads) {
    const std::uint32_t key = key_at(i);
    if (key == kEmptyKey) continue;
    all_and &= key;
    all_or |= key;
    ++count;
  }
  const BlockBits bits = block_and_or_sum(all_and, all_or, count, scratch);
  if (bits.count < want) return kEmptyKey;
  const KeyPrefix common = shared_prefix(bits);
  std::uint32_t prefix = common.value;
  for (std::uint32_t known = common.bits; known < 32; known += 8) {
    for (std::uint32_t i = threadIdx.x; i < 256; i += kSelectThreads) counts[i] = 0;
    __syncthreads();  // also: every thread has read the scratch and the previous pass's words
    for (std::uint32_t i = threadIdx.x; i < n; i += kSelectThreads) {
      const std::uint32_t key = key_at(i);
      if (key != kEmptyKey && (known == 0 || (key ^ prefix) >> (32 - known) == 0)) atomicAdd(&counts[(key << known) >> 24], 1u);
    }
    __syncthreads();
    const RadixStep step = radix_step(counts, want, words);
    prefix |= (step.digit << 24) >> known;
    if (known + 8 < 32 && step.left - step.want <= kBoundSlack) {
      __syncthreads();  // words and counts are read before the caller's next use
      return min(prefix | (~0u >> (known + 8)), kEmptyKey - 1);
    }
    want = step.want;
  }
  __syncthreads();  // words and counts are read before the caller's next use
  return prefix;
}

/// The selection block's static shared memory (one kernel per translation unit holds it).
__shared__ std::uint32_t counts[256], words[3], scratch[96];
__shared__ std::uint32_t batch_count, best_count, listed_groups;
__shared__ float query_norm;
__shared__ bool overflow;

/// One selection block's view of its query, for the phases: it refers to the kernel's variables,
/// as a lambda's captures do (dynamic shared memory: merged, the best list first, then the batch;
/// batch, the slots to rank; the query; the row's group keys; the points staged for their ranks).
struct SelectBlock {
  const DenseParams& p;
  const StoreView& store;
  const std::uint32_t &k, &lane, &warp, &slots, &chunks, &groups, &batch_cap;
  Candidate* const& merged;
  std::uint32_t* const& batch;
  float4* const& query;
  std::uint32_t* const& group_keys;
  float4* const& staged;
  const float* const& row;
};

/// Ranks batch[from, from + count) exactly and hands each (index in the range, candidate) to
/// `put`: the points in slices of p.stage_points, each copied to shared memory by the whole block
/// (every chunk in flight at once), then ranked a thread per point from there (the ranking
/// thread's own chain of loads, 32 at a time, took 25 us of a 44 us selection on the MNIST-like
/// store: 196 chunks). Every thread calls it.
template <class Put>
__device__ void rank_slots(const SelectBlock& s, std::uint32_t from, std::uint32_t count, Put put) {
  const DenseParams& p = s.p;
  const std::uint32_t& chunks = s.chunks;
  float4* const& query = s.query;
  if (p.exact) {  // the row holds the ranks
    for (std::uint32_t i = threadIdx.x; i < count; i += kSelectThreads) {
      const std::uint32_t slot = s.batch[from + i];
      put(i, Candidate{__ldcg(s.row + slot), slot, s.store.ids[slot]});
    }
    __syncthreads();  // as below: the caller's next use of the batch waits for every put
    return;
  }
  for (std::uint32_t first = 0; first < count; first += p.stage_points) {
    const std::uint32_t m = min(p.stage_points, count - first);
    for (std::uint32_t i = threadIdx.x; i < m * chunks; i += kSelectThreads) {
      const std::uint32_t point = i / chunks, slot = s.batch[from + first + point], c = i % chunks;
      copy_async16(s.staged + point * staged_stride(chunks) + c,
                   static_cast<const float4*>(s.store.vectors) + (std::size_t(slot / kTile) * chunks + c) * kTile +
                       slot % kTile);
    }
    commit_async();
    wait_async<0>();
    __syncthreads();
    for (std::uint32_t i = threadIdx.x; i < m; i += kSelectThreads) {
      const std::uint32_t slot = s.batch[from + first + i];
      const std::uint64_t id = s.store.ids[slot];  // issued before the chain, used after it
      const float4* const point = s.staged + std::size_t(i) * staged_stride(chunks);
      float acc[1] = {0.0f};
#pragma unroll 4
      for (std::uint32_t c = 0; c < chunks; ++c) accumulate<1, false>(acc, point[c], [&](int) { return query[c]; });
      put(first + i, Candidate{acc[0], slot, id});
    }
    __syncthreads();  // the slice is read before the next one lands
  }
}

/// Keeps the k best by (rank, id) of merged[0, total) in merged[0, min(total, k)) and empties the
/// batch. Every thread calls it.
__device__ void merge_best(const SelectBlock& s, std::uint32_t total) {
  const std::uint32_t& k = s.k;
  Candidate* const& merged = s.merged;
  Candidate* const ordered = reinterpret_cast<Candidate*>(s.staged);  // free once the points are ranked
  if (total <= kCountedMerge && std::size_t(total) <= std::size_t(s.p.stage_points) * staged_stride(s.chunks)) {
    // Each entry's place is the number of entries closer than it (ids are distinct): one barrier,
    // where the bitonic sort of 128 entries took 28 (about 3-4 us).
    for (std::uint32_t i = threadIdx.x; i < total; i += kSelectThreads) {
      const Candidate e = merged[i];
      std::uint32_t place = 0;
      for (std::uint32_t j = 0; j < total; ++j) place += closer(merged[j].rank, merged[j].id, e.rank, e.id);
      if (place < k) ordered[place] = e;
    }
    __syncthreads();
    for (std::uint32_t i = threadIdx.x; i < min(total, k); i += kSelectThreads) merged[i] = ordered[i];
  } else {
    const std::uint32_t size = ceil_pow2(total);
    for (std::uint32_t i = total + threadIdx.x; i < size; i += kSelectThreads) merged[i] = Candidate{CUDART_INF_F, ~0u, kNoId};
    __syncthreads();
    block_bitonic_sort(merged, size, [](const Candidate& a, const Candidate& b) { return closer(a.rank, a.id, b.rank, b.id); });
  }
  if (threadIdx.x == 0) {
    best_count = min(total, k);
    batch_count = 0;
  }
  __syncthreads();
}

/// Ranks the batch exactly and merges it with the best list. Every thread calls it.
__device__ void rank_and_merge(const SelectBlock& s) {
  Candidate* const& merged = s.merged;
  __syncthreads();
  const std::uint32_t n = batch_count, best = best_count;
  if (n == 0) return;
  rank_slots(s, 0, n, [&](std::uint32_t i, const Candidate& c) { merged[best + i] = c; });
  merge_best(s, best + n);
}

/// Puts every slot that passes `take` into the batch, reading only the groups whose smallest key is
/// at most group_bound: they are listed first (in the staging room, free until the batch is
/// ranked), then each warp loads kGroupLoads listed groups at once. Walking the row's groups a warp
/// window at a time instead was a chain of dependent L2 loads per warp (clock64 stamps, MNIST-like
/// K = 128: 10,900 cycles of a 61,400-cycle selection). True where the batch overflowed (ties: many
/// slots share the bound's value, or the screen cannot tell them apart); then the batch holds part
/// of them only.
template <class Take>
__device__ bool fill_batch(const SelectBlock& s, std::uint32_t group_bound, Take take) {
  const std::uint32_t& slots = s.slots;
  std::uint32_t* const listed = reinterpret_cast<std::uint32_t*>(s.staged);  // min_stage_points: room for every group
  if (threadIdx.x == 0) {
    overflow = false;
    listed_groups = 0;
  }
  __syncthreads();
  for (std::uint32_t g = threadIdx.x; g < s.groups; g += kSelectThreads) {
    if (s.group_keys[g] <= group_bound) listed[atomicAdd(&listed_groups, 1u)] = g;
  }
  __syncthreads();
  const std::uint32_t n_listed = listed_groups;
  for (std::uint32_t first = s.warp * kGroupLoads; first < n_listed; first += kSelectWarps * kGroupLoads) {
    std::uint32_t at_slot[kGroupLoads];
    float value[kGroupLoads];
#pragma unroll
    for (int u = 0; u < kGroupLoads; ++u) {
      at_slot[u] = first + u < n_listed ? listed[first + u] * kTile + s.lane : slots;
      value[u] = at_slot[u] < slots ? __ldcg(s.row + at_slot[u]) : CUDART_NAN_F;
    }
#pragma unroll
    for (int u = 0; u < kGroupLoads; ++u) {
      if (at_slot[u] < slots && take(at_slot[u], value[u])) {
        const std::uint32_t at = atomicAdd(&batch_count, 1u);
        if (at < s.batch_cap) {
          s.batch[at] = at_slot[u];
        } else {
          overflow = true;
        }
      }
    }
  }
  __syncthreads();
  return overflow;
}

/// After an overflow: every slot that passes `take`, over the whole row a window at a time, ranked
/// and merged whenever the batch reaches k, so that each next window fits.
template <class Take>
__device__ void gather_by_windows(const SelectBlock& s, Take take) {
  // Every thread has read the count fill_batch left (phase B's split test reads it): racecheck
  // reported this reset racing that read.
  __syncthreads();
  if (threadIdx.x == 0) batch_count = 0;
  for (std::uint32_t base = 0; base < s.slots; base += kWindow) {
    __syncthreads();
#pragma unroll
    for (std::uint32_t r = 0; r < kWindowPerThread; ++r) {
      const std::uint32_t at = base + r * kSelectThreads + threadIdx.x;
      if (at < s.slots && take(at, s.row[at])) s.batch[atomicAdd(&batch_count, 1u)] = at;
    }
    __syncthreads();
    const bool full = batch_count >= s.k;
    __syncthreads();  // every thread has read the count before the next window adds to it
    if (full) rank_and_merge(s);
  }
  rank_and_merge(s);
}

template <class Take>
__device__ void gather(const SelectBlock& s, std::uint32_t group_bound, Take take) {
  if (fill_batch(s, group_bound, take)) {
    gather_by_windows(s, take);
  } else {
    rank_and_merge(s);
  }
}

/// Setup: the query into shared memory (screened: with its squared norm, in any order, as
/// ScreenBounds allows) and the row's group keys; the block's counts zeroed.
__device__ __forceinline__ void stage_select_query(const SelectBlock& s, std::uint32_t q) {
  const DenseParams& p = s.p;
  const float4* const query_row = reinterpret_cast<const float4*>(p.queries) + std::size_t(q) * s.chunks;
  const std::uint32_t* const group_row = p.group_keys + std::size_t(q) * (p.row_stride / kTile);
  float qn = 0.0f;
  for (std::uint32_t c = threadIdx.x; c < (p.exact ? 0 : s.chunks); c += kSelectThreads) {
    const float4 v = query_row[c];
    s.query[c] = v;
    qn = __fmaf_rn(v.x, v.x, __fmaf_rn(v.y, v.y, __fmaf_rn(v.z, v.z, __fmaf_rn(v.w, v.w, qn))));
  }
  for (std::uint32_t g = threadIdx.x; g < s.groups; g += kSelectThreads) s.group_keys[g] = __ldcg(group_row + g);
  if (threadIdx.x == 0) {
    query_norm = 0.0f;
    batch_count = 0;
    best_count = 0;
  }
  __syncthreads();
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) qn = __fadd_rn(qn, __shfl_xor_sync(kFullMask, qn, offset));
  if (s.lane == 0) atomicAdd(&query_norm, qn);
}

/// A. A key with at least k slots at or below it: a bound on the group minima that admits k of them
/// (k groups, each with a slot at or below it), or where fewer than k groups hold a value, one on
/// the whole row (or every value, where there are at most k).
__device__ __forceinline__ std::uint32_t first_bound_key(const SelectBlock& s) {
  std::uint32_t* const& group_keys = s.group_keys;
  const float* const& row = s.row;
  std::uint32_t bound = bound_key(s.groups, s.k, counts, words, scratch, [&](std::uint32_t g) { return group_keys[g]; });
  if (bound == kEmptyKey) {
    bound = bound_key(s.slots, s.k, counts, words, scratch, [&](std::uint32_t at) { return screened_key(__ldcg(row + at)); });
    if (bound == kEmptyKey) bound = ordered_bits(CUDART_INF_F);  // at most k values: all of them
  }
  return bound;
}

/// B, shared by several blocks of one query (the copies of their points into one SM were most of
/// the selection): the same n_first slots in every block in one order (ascending: each slot's place
/// is the number of smaller ones), each block ranks its share into p.split, and the last to finish
/// merges them all and goes on alone. False in the other blocks, which are done.
__device__ __forceinline__ bool rank_first_shares(const SelectBlock& s, std::uint32_t q, std::uint32_t part,
                                                  std::uint32_t parts, std::uint32_t n_first) {
  const DenseParams& p = s.p;
  std::uint32_t* const& batch = s.batch;
  std::uint32_t* const sorted = reinterpret_cast<std::uint32_t*>(s.staged);
  for (std::uint32_t i = threadIdx.x; i < n_first; i += kSelectThreads) {
    const std::uint32_t slot = batch[i];
    std::uint32_t place = 0;
    for (std::uint32_t j = 0; j < n_first; ++j) place += batch[j] < slot;
    sorted[place] = slot;
  }
  __syncthreads();
  for (std::uint32_t i = threadIdx.x; i < n_first; i += kSelectThreads) batch[i] = sorted[i];
  __syncthreads();
  const std::uint32_t from = part * n_first / parts, to = (part + 1) * n_first / parts;
  Candidate* const shares = p.split + std::size_t(q) * kDenseSplitMax;
  rank_slots(s, from, to - from, [&](std::uint32_t i, const Candidate& c) { shares[from + i] = c; });
  if (!last_block_to_arrive(&p.arrivals[q], parts)) return false;  // the last merges every block's candidates
  for (std::uint32_t i = threadIdx.x; i < n_first; i += kSelectThreads) {
    const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(shares + i));
    s.merged[i] = *reinterpret_cast<const Candidate*>(&raw);
  }
  if (threadIdx.x == 0) p.arrivals[q] = 0;  // zero again for the next launch
  __syncthreads();
  merge_best(s, n_first);
  return true;
}

/// The selection: setup, then phases A (the first bound), B (every pair at or below it ranked) and
/// C (the pairs the screen cannot rule out for the k-th rank), then the answers (see dense.hpp).
__global__ void __launch_bounds__(kSelectThreads) dense_select_kernel(DenseParams p) {
  start_chained_kernel();
  extern __shared__ __align__(16) unsigned char shared[];
  const std::uint32_t parts = p.blocks_per_query, q = blockIdx.x / parts, part = blockIdx.x % parts;
  const std::uint32_t k = p.k, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const StoreView store = *p.store;
  const std::uint32_t slots = min(store.slot_count, p.row_stride), chunks = store.chunks;
  const std::uint32_t groups = (slots + kTile - 1) / kTile;
  const std::uint32_t batch_cap = batch_entries(k);
  Candidate* const merged = reinterpret_cast<Candidate*>(shared);  // best list first, then the batch
  std::uint32_t* const batch = reinterpret_cast<std::uint32_t*>(merged + merge_entries(k));  // slots to rank
  float4* const query = reinterpret_cast<float4*>(batch + batch_cap);
  std::uint32_t* const group_keys = reinterpret_cast<std::uint32_t*>(query + chunks);
  float4* const staged = reinterpret_cast<float4*>(group_keys + (p.row_stride / kTile + 3) / 4 * 4);
  const float* const row = p.screened + std::size_t(q) * p.row_stride;
  const SelectBlock s{p, store, k, lane, warp, slots, chunks, groups, batch_cap, merged, batch, query, group_keys, staged, row};
  stage_select_query(s, q);

  const std::uint32_t first_bound = first_bound_key(s);
  auto in_first = [&](float v) { return v == v && ordered_bits(v) <= first_bound; };

  // B. Every pair at or below the first bound: at least k distinct points, or every value. With
  // several blocks per query each ranks a share of them (rank_first_shares).
  const auto take_first = [&](std::uint32_t, float v) { return in_first(v); };
  const bool overflowed = fill_batch(s, first_bound, take_first);
  const std::uint32_t n_first = batch_count;
  const bool split = !p.exact && parts > 1 && !overflowed && n_first > 0 && n_first <= kDenseSplitMax &&
                     std::size_t(n_first) <= std::size_t(p.stage_points) * staged_stride(chunks) * 4;
  if (split) {
    if (!rank_first_shares(s, q, part, parts, n_first)) return;
  } else {
    if (part != 0) return;
    if (overflowed) {
      gather_by_windows(s, take_first);
    } else {
      rank_and_merge(s);
    }
  }

  // C. The other pairs the screen cannot rule out for T, the best list's k-th rank (+inf while it
  // holds fewer than k: then every remaining valid slot is ranked). limit + 0 turns -0 into +0,
  // whose key is above every key of a value that compares equal. Exact rows have none: B took
  // every pair of rank <= the first bound, T is at most that bound (or B took every value).
  if (!p.exact) {
    const float bound = best_count == k ? merged[k - 1].rank : CUDART_INF_F;
    const ScreenBounds b = p.screen;
    const float qn_all = query_norm;
    const float limit = __fadd_rn(screen_limit(b, bound, qn_all), 0.0f);
    const bool huge_query = qn_all >= b.huge;
    gather(s, huge_query ? kEmptyKey : ordered_bits(limit), [&](std::uint32_t at, float v) {
      if (v == v) return !in_first(v) && (v <= limit || huge_query);
      return huge_query && store.valid[at] != 0;  // NaN: an empty slot, or a query whose norm may overflow
    });
  }

  // The answers, here rather than in a selection kernel after this one (4 us and a launch).
  const std::uint32_t best = best_count;
  const Candidate padding{CUDART_INF_F, ~0u, kNoId};
  for (std::uint32_t j = threadIdx.x; j < k; j += kSelectThreads) emit_answer(p, q, j, j < best ? merged[j] : padding);
}

}  // namespace

std::size_t dense_select_min_shared(std::uint32_t k, std::uint32_t chunks, std::uint32_t groups) {
  return select_shared_bytes(k, chunks, groups, min_stage_points(chunks, groups)) + kSelectStaticBytes;
}

DenseResidency configure_dense(std::size_t shared_limit) {
  const DenseResidency residency = configure_dense_product();
  check_cuda(cudaFuncSetAttribute(dense_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(shared_limit - kSelectStaticBytes)),
             "cudaFuncSetAttribute(dense_select_kernel)");
  return residency;
}
void launch_dense(const DenseParams& p, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  if (p.k == 0 || p.k > kDenseMaxK) throw CudaError("dense screen: k must be in [1, " + std::to_string(kDenseMaxK) + "]");
  if (p.row_stride % kTile != 0 || p.row_stride / kTile > kDenseMaxGroups) {
    throw CudaError("dense screen: " + std::to_string(p.row_stride) + " slots per row, at most " +
                    std::to_string(kDenseMaxGroups * kTile) + " in whole tiles");
  }
  if (p.sm_count == 0) throw CudaError("dense screen: sm_count (the device's multiprocessors) must be set");
  DenseParams params = p;
  params.exact = p.num_queries <= kDenseExactMaxQueries;
  if (params.exact) params.blocks_per_query = 1;  // the rows hold the ranks: nothing to share
  launch_dense_product(params, stream);
  // Points staged for their exact ranks: as many as the rest of the shared memory holds (at least
  // min_stage_points, whose room fill_batch lists the groups in; `least` checked it fits).
  const std::size_t fixed = select_shared_bytes(p.k, p.chunks, p.row_stride / kTile, 0) + kSelectStaticBytes;
  const std::size_t point_bytes = std::size_t(staged_stride(p.chunks)) * sizeof(float4);
  const std::size_t least = dense_select_min_shared(p.k, p.chunks, p.row_stride / kTile);
  if (p.shared_limit < least) {
    throw CudaError("dense screen: k=" + std::to_string(p.k) + " with " + std::to_string(p.chunks) + " chunks needs " +
                    std::to_string(least) + " bytes of shared memory per block, more than the device's " +
                    std::to_string(p.shared_limit));
  }
  params.stage_points = std::max(min_stage_points(p.chunks, p.row_stride / kTile),
                                 std::uint32_t(std::min<std::size_t>(kSelectThreads, (p.shared_limit - fixed) / point_bytes)));
  launch_chained("dense_select_kernel", dense_select_kernel, p.num_queries * params.blocks_per_query, kSelectThreads,
                 select_shared_bytes(p.k, p.chunks, p.row_stride / kTile, params.stage_points), stream, params);
}

}  // namespace streamknn::detail::gpu
