// KNN-Q lookup and write-back on the device (ReferenceSet::lookup_and_update).
//
// estimate: one block per query; thread a computes the mean of action a over the query's
// neighbours (double sum in neighbour order, as the Mean aggregate), and the thread of the
// query's action its increment alpha * (target - q[action]), materialised as a float.
// rows: one thread per (query, neighbour) entry; it rebuilds its slot's new row: the snapshot's
// row plus, in query order, the increment of every query that found the slot (a slot appears
// at most once per query). The result is deterministic and equal to the CPU backend's: the same
// float additions in the same order. Cost: O((num_queries x k)^2) comparisons, fine for the
// batches KNN-Q uses (a sort by slot would make it O(n k log(n k)) for very large ones).
// A new value that is not finite is flagged (the smallest entry x outputs + action): the host
// reads the flag before the rows are scattered and then publishes nothing.
#include "cuda/kernels/knnq.hpp"
#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

constexpr std::uint32_t kPadding = ~0u;

__global__ void knnq_estimate_kernel(KnnqParams p) {
  start_chained_kernel();
  const std::uint32_t q = blockIdx.x;
  const std::uint32_t* slots = p.slots + std::size_t(q) * p.k;
  std::uint32_t n = 0;
  while (n < p.k && slots[n] != kPadding) ++n;
  const std::int32_t action = p.actions[q];
  for (std::uint32_t a = threadIdx.x; a < p.outputs; a += blockDim.x) {
    double sum = 0;
    for (std::uint32_t j = 0; j < n; ++j) sum = __dadd_rn(sum, double(p.values[std::size_t(slots[j]) * p.outputs + a]));
    const float mean = n ? static_cast<float>(__ddiv_rn(sum, double(n))) : __int_as_float(0x7fc00000);
    p.q_before[std::size_t(q) * p.outputs + a] = mean;
    if (a == std::uint32_t(action)) p.increment[q] = n ? __fmul_rn(p.alpha, __fsub_rn(p.targets[q], mean)) : 0.0f;
  }
}

__global__ void knnq_rows_kernel(KnnqParams p) {
  start_chained_kernel();
  const std::size_t entries = std::size_t(p.num_queries) * p.k;
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  std::uint32_t slot = p.slots[e];
  // Padding: write the query's first neighbour's row again (identical bytes), or, for a query
  // without any, slot 0's unchanged row (no query found slot 0 then... or its updated row if
  // one did: the scan below adds every increment of that slot either way).
  if (slot == kPadding) slot = p.slots[e - e % p.k];
  if (slot == kPadding) slot = 0;
  float* row = p.out_values + e * p.outputs;
  const float* old = p.values + std::size_t(slot) * p.outputs;
  for (std::uint32_t a = 0; a < p.outputs; ++a) row[a] = old[a];
  for (std::size_t f = 0; f < entries; ++f) {
    if (p.slots[f] != slot) continue;
    const std::size_t q = f / p.k;
    float& v = row[p.actions[q]];
    v = __fadd_rn(v, p.increment[q]);
  }
  p.out_slots[e] = slot;
  for (std::uint32_t a = 0; a < p.outputs; ++a) {
    if (!isfinite(row[a])) {
      atomicMin(p.non_finite, static_cast<unsigned long long>(e) * p.outputs + a);
      break;
    }
  }
}

}  // namespace

void launch_knnq_estimate(const KnnqParams& params, cudaStream_t stream) {
  if (params.num_queries == 0) return;
  const int threads = static_cast<int>(params.outputs < 128 ? (params.outputs + 31) / 32 * 32 : 128);
  launch_chained("knnq_estimate_kernel", knnq_estimate_kernel, params.num_queries, threads, 0, stream, params);
}

void launch_knnq_rows(const KnnqParams& params, cudaStream_t stream) {
  const std::size_t entries = std::size_t(params.num_queries) * params.k;
  if (entries == 0) return;
  const int threads = 128;
  const unsigned blocks = static_cast<unsigned>((entries + threads - 1) / threads);
  launch_chained("knnq_rows_kernel", knnq_rows_kernel, blocks, threads, 0, stream, params);
}

}  // namespace streamknn::detail::gpu
