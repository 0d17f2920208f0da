// The K-means centroid sums on the device (lib/kmeans/cluster_sums.hpp): exact integer digit sums,
// so threads and blocks may add in any order and the sums are the CPU backend's bit for bit; and
// because they are exact, a labelling's sums are the last ones with the moved points taken from
// their old clusters and added to their new ones. A fit sums every point once after each start;
// later iterations touch only the points whose label changed (a few per thousand once the
// clusters settle). A term is one (point, feature) pair, consecutive threads taking consecutive
// features of a point. Where the k x d digit table fits in shared memory each block adds its terms
// there (in 12-bit pieces, point_rules.cuh) and then adds its table's non-zero digits to the
// global one; otherwise terms go to the global table directly.
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/kmeans/kmeans_kernels.hpp"
#include "cuda/kmeans/point_rules.cuh"
#include "kmeans/cluster_sums.hpp"

namespace streamknn::detail::gpu::kmeans {

namespace {

constexpr int kThreads = 256;
constexpr std::size_t kSharedTableBytes = 48 * 1024;  // no opt-in needed on any supported device

/// Adds sign x (value's digit terms) to cell (kSumDigits words, global memory: a native 64-bit
/// reduction in L2).
__device__ __forceinline__ void add_terms(unsigned long long* cell, const km::DigitTerms& t, std::int64_t sign) {
  atomicAdd(cell + t.at, static_cast<unsigned long long>(sign * t.low));
  if (t.high != 0) atomicAdd(cell + t.at + 1, static_cast<unsigned long long>(sign * t.high));
}

/// Shared: the block's table is k x d cells of kHalves 32-bit halves, then k counts.
template <bool Shared>
__global__ void __launch_bounds__(kThreads) move_sums_kernel(SumArgs a) {
  extern __shared__ int table[];
  if (a.loop != nullptr && a.loop->stop != 0) return;  // a queued iteration after the loop stopped
  const std::uint64_t items = a.moved ? *a.moved_count : a.n, terms = items * a.d;
  // Each block takes a contiguous range of terms, a multiple of the block's threads.
  std::uint64_t per = (terms + gridDim.x - 1) / gridDim.x;
  per = (per + kThreads - 1) / kThreads * kThreads;
  const std::uint64_t lo = std::uint64_t(blockIdx.x) * per;
  if (lo >= terms) return;  // the whole block: no table to zero or flush
  const std::uint64_t hi = min(terms, lo + per);
  const std::size_t cells = std::size_t(a.k) * a.d;
  int* shared_counts = table + cells * kHalves;
  if (Shared) {
    for (std::size_t w = threadIdx.x; w < cells * kHalves + a.k; w += kThreads) table[w] = 0;
    __syncthreads();
  }
  // The term t = item x d + j; the division once, then steps of kThreads terms.
  const std::uint32_t step_items = kThreads / a.d, step_j = kThreads % a.d;
  std::uint64_t item = (lo + threadIdx.x) / a.d;
  std::uint32_t j = std::uint32_t(lo + threadIdx.x - item * a.d);
  for (std::uint64_t t = lo + threadIdx.x; t < hi; t += kThreads, item += step_items, j += step_j) {
    if (j >= a.d) {
      j -= a.d;
      ++item;
    }
    const std::uint32_t point = a.moved ? a.moved[item] : std::uint32_t(item), now = a.labels[point];
    const std::uint32_t from = a.moved ? a.moved_from[item] : 0;
    const float value = a.x[std::size_t(point) * a.d + j];
    const std::uint32_t top = a.tops[j];
    if (Shared) {
      add_halves(table + (std::size_t(now) * a.d + j) * kHalves, value, top, 1);
      if (a.moved) add_halves(table + (std::size_t(from) * a.d + j) * kHalves, value, top, -1);
    } else {
      const km::DigitTerms v = km::digit_terms(value, top);
      add_terms(a.digits + (std::size_t(now) * a.d + j) * km::kSumDigits, v, 1);
      if (a.moved) add_terms(a.digits + (std::size_t(from) * a.d + j) * km::kSumDigits, v, -1);
    }
    if (j != 0) continue;
    if (Shared) {
      atomicAdd(shared_counts + now, 1);
      if (a.moved) atomicAdd(shared_counts + from, -1);
    } else {
      atomicAdd(a.counts + now, 1u);
      if (a.moved) atomicSub(a.counts + from, 1u);
    }
  }
  if (!Shared) return;
  __syncthreads();
  for (std::size_t w = threadIdx.x; w < cells * km::kSumDigits; w += kThreads) {
    const std::int64_t digit = half_digit(table + (w / km::kSumDigits) * kHalves, int(w % km::kSumDigits));
    if (digit != 0) atomicAdd(a.digits + w, static_cast<unsigned long long>(digit));
  }
  for (std::uint32_t c = threadIdx.x; c < a.k; c += kThreads) {
    if (shared_counts[c] != 0) atomicAdd(a.counts + c, static_cast<std::uint32_t>(shared_counts[c]));
  }
}

std::size_t shared_table_bytes(std::uint32_t k, std::uint32_t d) {
  return (std::size_t(k) * d * kHalves + k) * sizeof(int);
}

}  // namespace

unsigned move_sums_blocks(std::uint32_t n, std::uint32_t k, std::uint32_t d) {
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const std::size_t table = shared_table_bytes(k, d);
  if (table <= kSharedTableBytes) {
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, move_sums_kernel<true>, kThreads, table),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  } else {
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, move_sums_kernel<false>, kThreads, 0),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  }
  // One wave of resident blocks (a second, partial wave would double a full pass's time), and
  // at most kBlockItems items (points, or moved points: at most n) per block.
  const std::uint64_t wave = std::uint64_t(std::max(sms, 1)) * std::uint64_t(std::max(per_sm, 1));
  return unsigned(std::max<std::uint64_t>(wave, (std::uint64_t(n) + kBlockItems - 1) / kBlockItems));
}

void launch_move_sums(const SumArgs& a, unsigned blocks, cudaStream_t s) {
  if (!a.moved) {
    check_cuda(cudaMemsetAsync(a.digits, 0, std::size_t(a.k) * a.d * km::kSumDigits * sizeof(unsigned long long), s),
               "cudaMemsetAsync", "kmeans digit sums");
    check_cuda(cudaMemsetAsync(a.counts, 0, std::size_t(a.k) * sizeof(std::uint32_t), s), "cudaMemsetAsync",
               "kmeans counts");
  }
  const std::size_t table = shared_table_bytes(a.k, a.d);
  if (table <= kSharedTableBytes) {
    move_sums_kernel<true><<<blocks, kThreads, table, s>>>(a);
  } else {
    move_sums_kernel<false><<<blocks, kThreads, 0, s>>>(a);
  }
  check_launch("kmeans move_sums_kernel");
}

}  // namespace streamknn::detail::gpu::kmeans
