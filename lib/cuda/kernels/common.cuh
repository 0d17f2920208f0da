// Device helpers shared by the kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/device_types.hpp"
#include "cuda/kernels/screen.hpp"

namespace streamknn::detail::gpu {

inline constexpr unsigned kFullMask = 0xffffffffu;

/// Monotone map float -> uint32, so atomicMin on the bits is a min on the floats.
__device__ __forceinline__ std::uint32_t ordered_bits(float f) {
  const std::uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(std::uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/// The (rank, id) total order of every result.
__device__ __forceinline__ bool closer(float ra, std::uint64_t ia, float rb, std::uint64_t ib) {
  return ra < rb || (ra == rb && ia < ib);
}

/// Whether the point in `slot` passes a query's predicate: streamknn::Predicate::passes on the
/// store's attribute words, word for word, so both backends admit the same points. A store
/// without attributes admits every point (a predicate on one is refused at the boundary).
__device__ __forceinline__ bool attributes_pass(const PredicateDevice& p, const StoreView& store, std::uint32_t slot) {
  const std::uint32_t words = store.attribute_words;
  if (words == 0) return true;
  const std::uint32_t* a = store.attributes + std::size_t(slot) * words;
  for (std::uint32_t w = 0; w < words; ++w) {
    const std::uint32_t v = a[w];
    if ((v & p.required[w]) != p.required[w] || (v & p.forbidden[w]) != 0) return false;
  }
  if (p.range_word < 0) return true;
  if (std::uint32_t(p.range_word) >= words) return false;
  const std::uint32_t v = a[p.range_word];
  return v >= p.range_min && v <= p.range_max;
}

/// The filtered searches' admission test beyond validity: the query's id range and predicate.
__device__ __forceinline__ bool filter_admits(const IdRangeDevice& range, const PredicateDevice& predicate,
                                              const StoreView& store, std::uint32_t slot, std::uint64_t id) {
  return id >= range.begin && id < range.end && attributes_pass(predicate, store, slot);
}

/// A Candidate from the lane `mask` away (xor), from lane `src`, or from `delta` lanes below.
__device__ __forceinline__ Candidate shuffle_xor(const Candidate& c, int mask) {
  return Candidate{__shfl_xor_sync(kFullMask, c.rank, mask), __shfl_xor_sync(kFullMask, c.slot, mask),
                   __shfl_xor_sync(kFullMask, c.id, mask)};
}
__device__ __forceinline__ Candidate shuffle(const Candidate& c, int src) {
  return Candidate{__shfl_sync(kFullMask, c.rank, src), __shfl_sync(kFullMask, c.slot, src),
                   __shfl_sync(kFullMask, c.id, src)};
}
__device__ __forceinline__ Candidate shuffle_up(const Candidate& c, unsigned delta) {
  return Candidate{__shfl_up_sync(kFullMask, c.rank, delta), __shfl_up_sync(kFullMask, c.slot, delta),
                   __shfl_up_sync(kFullMask, c.id, delta)};
}

/// One step of an MSB-first radix select: one warp (every lane calls it) finds the digit of a
/// 256-bucket histogram that holds the want-th key (1-based, want <= the histogram's total).
/// True in the one lane that holds it, which gets the digit and the keys in smaller digits.
__device__ __forceinline__ bool find_digit(const std::uint32_t* histogram, std::uint32_t want, std::uint32_t lane,
                                           std::uint32_t& digit, std::uint32_t& below) {
  std::uint32_t local = 0;
  for (int b = 0; b < 8; ++b) local += histogram[lane * 8 + b];
  std::uint32_t inclusive = local;
  for (int d = 1; d < 32; d <<= 1) {
    const std::uint32_t up = __shfl_up_sync(kFullMask, inclusive, d);
    if (lane >= std::uint32_t(d)) inclusive += up;
  }
  below = inclusive - local;
  if (!(below < want && want <= inclusive)) return false;
  digit = lane * 8;
  while (below + histogram[digit] < want) below += histogram[digit++];
  return true;
}

/// Largest power of two <= x (x >= 1).
__device__ __forceinline__ std::uint32_t floor_pow2(std::uint32_t x) { return 1u << (31 - __clz(x)); }
/// Smallest power of two >= n (1 for n = 0): sizes of bitonic sorts and of shared buffers, on the
/// host and the device alike.
__host__ __device__ constexpr std::uint32_t ceil_pow2(std::uint32_t n) {
  std::uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/// The block-wide AND and OR of every thread's `bits_and` / `bits_or` and the sum of its `count`:
/// warp reductions, one word per warp each in `scratch` (3 x 32 words), one block barrier. Every
/// thread calls it and gets the totals; shared-memory set-up the caller needs before that barrier
/// goes before the call.
struct BlockBits {
  std::uint32_t all_and, all_or, count;
};
__device__ __forceinline__ BlockBits block_and_or_sum(std::uint32_t bits_and, std::uint32_t bits_or, std::uint32_t count,
                                                      std::uint32_t* scratch) {
  const std::uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  bits_and = __reduce_and_sync(kFullMask, bits_and);
  bits_or = __reduce_or_sync(kFullMask, bits_or);
  count = __reduce_add_sync(kFullMask, count);
  if (lane == 0) {
    scratch[warp] = bits_and;
    scratch[32 + warp] = bits_or;
    scratch[64 + warp] = count;
  }
  __syncthreads();
  BlockBits total{~0u, 0, 0};
  for (std::uint32_t w = 0; w < warps; ++w) {
    total.all_and &= scratch[w];
    total.all_or |= scratch[32 + w];
    total.count += scratch[64 + w];
  }
  return total;
}

/// The leading bits every key shares, from the keys' AND and OR: how many (32 when all keys are
/// equal) and their value (the rest zero).
struct KeyPrefix {
  std::uint32_t bits, value;
};
__device__ __forceinline__ KeyPrefix shared_prefix(const BlockBits& b) {
  const std::uint32_t bits = b.all_and == b.all_or ? 32 : __clz(b.all_and ^ b.all_or);
  return KeyPrefix{bits, bits == 32 ? b.all_and : b.all_and & ~(0xffffffffu >> bits)};
}

/// One step of an MSB-first radix select once a pass's digit counts are complete (after a block
/// barrier): warp 0 finds the digit holding the want-th key, and after one barrier every thread
/// has the digit, the wanted key's rank among the keys in that digit, and how many they are.
/// `words`: 3 words used for nothing else (the caller's block_and_or_sum scratch included: with
/// the two sharing words, compute-sanitizer racecheck reported read/write hazards on them in the
/// select's k-th search; with words of their own, none).
struct RadixStep {
  std::uint32_t digit, want, left;
};
__device__ __forceinline__ RadixStep radix_step(const std::uint32_t* counts, std::uint32_t want, std::uint32_t* words) {
  if (threadIdx.x < 32) {
    std::uint32_t digit, below;
    if (find_digit(counts, want, threadIdx.x, digit, below)) {
      words[0] = digit;
      words[1] = want - below;
      words[2] = counts[digit];
    }
  }
  __syncthreads();
  return RadixStep{words[0], words[1], words[2]};
}

/// Sorts s[0, n) in shared memory (n a power of two) with the whole block, ascending by `less`;
/// every thread of the block must call it.
template <class T, class Less>
__device__ void block_bitonic_sort(T* s, std::uint32_t n, Less less) {
  for (std::uint32_t size = 2; size <= n; size <<= 1) {
    for (std::uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const std::uint32_t partner = i ^ stride;
        if (partner > i) {
          const bool ascending = (i & size) == 0;
          const T a = s[i], b = s[partner];
          if (ascending ? less(b, a) : less(a, b)) {
            s[i] = b;
            s[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

/// acc + a.x b.x + a.y b.y + a.z b.z + a.w b.w, one FMA at a time in that order: a chunk's dot
/// product (or squared norm, a = b) the way every kernel accumulates it.
__device__ __forceinline__ float add_dot4(float acc, const float4& a, const float4& b) {
  acc = __fmaf_rn(a.x, b.x, acc);
  acc = __fmaf_rn(a.y, b.y, acc);
  acc = __fmaf_rn(a.z, b.z, acc);
  return __fmaf_rn(a.w, b.w, acc);
}

/// Adds one float4 chunk v of a point to the ranks of G queries, element by element (L2:
/// subtract, then FMA; inner product: FMA); query(j) returns query j's same chunk. The scan and
/// the sample pass both rank through it, so a (query, point) rank has the same bits in both,
/// whatever the batch or the loop shape: the sample's bound is valid for the scan.
/// kWidth = 2 scores only .x and .y, for a store whose vectors have at most two elements (the
/// rest of the chunk is zeros in point and query alike): the terms it leaves out add +0 to the
/// accumulator, which changes no L2 rank and at most the sign of a zero dot product, which
/// rank_of() makes +0 anyway. So the rank's bits are those of the full chunk.
template <int G, bool kInnerProduct, int kWidth = 4, class Query>
__device__ __forceinline__ void accumulate(float (&acc)[G], const float4& v, Query query) {
  static_assert(kWidth == 2 || kWidth == 4);
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const float4 q = query(j);
    if constexpr (kInnerProduct && kWidth == 4) {
      acc[j] = add_dot4(acc[j], q, v);
    } else if constexpr (kInnerProduct) {
      acc[j] = __fmaf_rn(q.y, v.y, __fmaf_rn(q.x, v.x, acc[j]));
    } else {
      const float dx = __fsub_rn(q.x, v.x), dy = __fsub_rn(q.y, v.y);
      acc[j] = __fmaf_rn(dx, dx, acc[j]);
      acc[j] = __fmaf_rn(dy, dy, acc[j]);
      if constexpr (kWidth == 4) {
        const float dz = __fsub_rn(q.z, v.z), dw = __fsub_rn(q.w, v.w);
        acc[j] = __fmaf_rn(dz, dz, acc[j]);
        acc[j] = __fmaf_rn(dw, dw, acc[j]);
      }
    }
  }
}

/// A point's rank from its accumulator. Inner product ranks by the negated dot product, plus
/// +0 so that an exact zero is always +0: the (rank, id) order compares -0 and +0 as equal but
/// their ordered_bits differ, and the sample pass and the selection order keys by those bits.
/// (The scan admits a point when rank <= threshold as floats, the same test on these ranks.)
template <bool kInnerProduct>
__device__ __forceinline__ float rank_of(float acc) {
  return kInnerProduct ? __fadd_rn(-acc, 0.0f) : acc;
}

/// The dot-product screen's limit before its C |x|^2 term: A T - B |q|^2 + slack for a bound T
/// and a query's squared norm qn, evaluated in double and rounded up to float (screen_bounds in
/// screen.cpp has the proof), so that it is at least the real bound. The scan's screen, the dense
/// screen and the query-resident scan share it.
__device__ __forceinline__ float screen_limit(const ScreenBounds& b, float threshold, float qn) {
  return __double2float_ru(b.bound_scale * double(threshold) - b.query_scale * double(qn) + b.slack);
}

/// 16 bytes global -> shared, asynchronous, through L2 only (cp.async.cg).
__device__ __forceinline__ void copy_async16(float4* to, const float4* from) {
  const auto shared_address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address), "l"(from) : "memory");
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}
/// As copy_async16, but fills the 16 bytes with zeros instead of reading them where !load
/// (from must still be a valid address). kViaL1: through L1 as well (cp.async.ca), for lines
/// that the SM's other blocks read too.
template <bool kViaL1 = false>
__device__ __forceinline__ void copy_async16_or_zero(float4* to, const float4* from, bool load) {
  const auto shared_address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  const unsigned bytes = load ? 16u : 0u;
  if constexpr (kViaL1) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address), "l"(from), "r"(bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address), "l"(from), "r"(bytes)
                 : "memory");
  }
}

/// True, in every thread, for the block that arrives last of `blocks` counted on *arrivals: that
/// block then sees every arrived block's writes from before its arrival. Every thread of the
/// block calls it; the caller zeroes *arrivals again (in the last block) for the next launch.
__device__ __forceinline__ bool last_block_to_arrive(std::uint32_t* arrivals, std::uint32_t blocks) {
  __shared__ bool last;
  __threadfence();  // this block's writes before its arrival
  __syncthreads();  // every thread's (and the previous call's reads of `last`)
  if (threadIdx.x == 0) last = atomicAdd(arrivals, 1u) == blocks - 1;
  __syncthreads();
  if (last) __threadfence();  // the other blocks' writes before this block's reads
  return last;
}

/// Asks L2 to fetch the line holding `at` (no register waits on it).
__device__ __forceinline__ void prefetch_l2(const void* at) { asm volatile("prefetch.global.L2 [%0];" ::"l"(at)); }

/// The smallest key in [lo, hi] with at least k keys at or below it (hi has), by a warp: a binary
/// search in which count_at_or_below(mid) gives this lane's count of keys at or below mid.
template <class Count>
__device__ __forceinline__ std::uint32_t warp_search_kth(std::uint32_t lo, std::uint32_t hi, std::uint32_t k,
                                                         Count&& count_at_or_below) {
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (__reduce_add_sync(kFullMask, count_at_or_below(mid)) >= k) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

/// The k-th smallest of n keys (k <= n) in global memory, by one warp: the keys are staged in
/// `staged` (room for n) and warp_search_kth runs over the key's bits (32 steps; in registers
/// they cost the scans' hot loops spills).
__device__ __forceinline__ std::uint32_t warp_kth(const std::uint32_t* keys, std::uint32_t n, std::uint32_t k,
                                                  std::uint32_t* staged, std::uint32_t lane) {
  for (std::uint32_t i = lane; i < n; i += 32) staged[i] = __ldcg(keys + i);
  __syncwarp();
  const std::uint32_t kth = warp_search_kth(0, ~0u, k, [&](std::uint32_t mid) {
    std::uint32_t count = 0;
    for (std::uint32_t i = lane; i < n; i += 32) count += staged[i] <= mid;
    return count;
  });
  __syncwarp();
  return kth;
}

/// Chained kernels (programmatic dependent launch, sm_90). A search's kernels follow one another on
/// one stream; launched the usual way, each is scheduled only once the one before it has finished
/// (1.3 us from one kernel's last block to the next one's first in a captured search on an H200;
/// chained, one query end to end took 0.96-0.98x the time).
/// A kernel launched with launch_chained may be scheduled while the kernel before it runs; it must call
/// start_chained_kernel() before anything else, which waits until the work before it on the
/// stream has finished and its writes are visible, then lets the next chained kernel be
/// scheduled (its blocks then wait on an SM, not in the launch queue). Kernels launched the
/// usual way keep the full dependency, so a chain never waits on less than the stream order.
__device__ __forceinline__ void start_chained_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Whether `kernel` may be launched chained on the current device: only where the image the
/// driver loaded for it was compiled for sm_90 or later (its PTX version), since only such code
/// holds the wait in start_chained_kernel. That covers every case at run time: sm_90 machine code
/// on a Hopper card, sm_80 code or compute_80 PTX (a build for older cards, JIT-compiled on a newer
/// one), and devices before sm_90, which load no sm_90 image at all.
template <class... Params>
bool chained_on_this_device(void (*kernel)(Params...)) {
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
  return attributes.ptxVersion >= 90;
}

/// Launches `kernel` (which starts with start_chained_kernel) on `stream`, chained where
/// chained_on_this_device says the device and the loaded image allow it, else the usual way;
/// `name` names it in the CudaError of a failed launch.
template <class... Params, class... Args>
void launch_chained(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared,
                    cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute chained{};
  chained.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  chained.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &chained;
  config.numAttrs = chained_on_this_device(kernel) ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, args...), "cudaLaunchKernelEx", name);
}

}  // namespace streamknn::detail::gpu
