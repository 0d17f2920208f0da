// Aggregation after the selection, one block per query: majority vote (labels or
// probabilities) or mean / weighted mean / median per output. Sums run in double in neighbour
// order, exactly as the CPU backend does them (lib/core/aggregate.cpp), so both backends agree
// to the last bit when their distances do.
#include <math_constants.h>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/aggregate.hpp"

namespace streamknn::detail::gpu {

namespace {

constexpr int kAggregateThreads = 256;

/// Neighbour j's weight under the zero-distance rule.
__device__ __forceinline__ double weight(const float* distance, std::uint32_t j, bool distance_weights, bool any_zero) {
  if (!distance_weights) return 1.0;
  if (any_zero) return distance[j] == 0.0f ? 1.0 : 0.0;
  return 1.0 / double(distance[j]);
}

__device__ void bitonic_sort_doubles(double* s, std::uint32_t n) {
  block_bitonic_sort(s, n, [](double a, double b) { return a < b; });
}

__global__ void __launch_bounds__(kAggregateThreads) aggregate_kernel(AggregateParams p) {
  start_chained_kernel();
  extern __shared__ __align__(16) unsigned char shared[];
  __shared__ std::uint32_t found_s;
  __shared__ bool any_zero_s;
  __shared__ double total_s;
  const std::uint32_t q = blockIdx.x, k = p.k;
  const StoreView store = *p.store;
  const float* distance = p.distance + std::size_t(q) * k;
  const std::uint64_t* id = p.id + std::size_t(q) * k;
  const std::uint32_t* slot = p.slot + std::size_t(q) * k;
  if (threadIdx.x == 0) {
    std::uint32_t n = 0;
    while (n < k && id[n] != kNoId) ++n;
    bool zero = false;
    for (std::uint32_t j = 0; j < n; ++j) zero |= distance[j] == 0.0f;
    found_s = n;
    any_zero_s = zero;
  }
  __syncthreads();
  const std::uint32_t n = found_s;
  const bool any_zero = any_zero_s, by_distance = p.distance_weights != 0;

  if (p.mode == 2) {  // regression, one thread per output
    if (p.median) {
      double* values = reinterpret_cast<double*>(shared);
      std::uint32_t padded = 1;
      while (padded < n) padded <<= 1;
      for (std::uint32_t o = 0; o < p.outputs; ++o) {
        for (std::uint32_t j = threadIdx.x; j < padded; j += blockDim.x) {
          values[j] = j < n ? double(store.values[std::size_t(slot[j]) * store.outputs + o]) : CUDART_INF;
        }
        __syncthreads();
        bitonic_sort_doubles(values, padded);
        if (threadIdx.x == 0) {
          double m = CUDART_NAN;
          if (n > 0) m = n % 2 ? values[n / 2] : 0.5 * (values[n / 2] + values[n / 2 - 1]);
          p.out_value[std::size_t(q) * p.outputs + o] = float(m);
        }
        __syncthreads();
      }
      return;
    }
    for (std::uint32_t o = threadIdx.x; o < p.outputs; o += blockDim.x) {
      double sum = 0, norm = 0;
      for (std::uint32_t j = 0; j < n; ++j) {
        const double w = weight(distance, j, by_distance, any_zero);
        sum += w * double(store.values[std::size_t(slot[j]) * store.outputs + o]);
        norm += w;
      }
      p.out_value[std::size_t(q) * p.outputs + o] = n ? float(sum / norm) : CUDART_NAN_F;
    }
    return;
  }

  // Classification: class weights in shared memory, or global scratch for many classes.
  double* weights = p.classes <= kSharedClasses ? reinterpret_cast<double*>(shared)
                                                : p.class_scratch + std::size_t(q) * p.classes;
  for (std::uint32_t c = threadIdx.x; c < p.classes; c += blockDim.x) weights[c] = 0.0;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (std::uint32_t j = 0; j < n; ++j) {
      const double w = weight(distance, j, by_distance, any_zero);
      weights[store.labels[slot[j]]] += w;
      total += w;
    }
    total_s = total;
  }
  __syncthreads();
  // Arg-max with ties to the smaller label: reduce (weight, label) pairs.
  __shared__ double best_weight[kAggregateThreads];
  __shared__ std::uint32_t best_label[kAggregateThreads];
  double bw = -1.0;
  std::uint32_t bl = 0;
  for (std::uint32_t c = threadIdx.x; c < p.classes; c += blockDim.x) {
    if (weights[c] > bw) {
      bw = weights[c];
      bl = c;
    }
  }
  best_weight[threadIdx.x] = bw;
  best_label[threadIdx.x] = bl;
  __syncthreads();
  for (std::uint32_t half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      const double ow = best_weight[threadIdx.x + half];
      const std::uint32_t ol = best_label[threadIdx.x + half];
      if (ow > best_weight[threadIdx.x] || (ow == best_weight[threadIdx.x] && ol < best_label[threadIdx.x])) {
        best_weight[threadIdx.x] = ow;
        best_label[threadIdx.x] = ol;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) p.out_label[q] = n ? std::int32_t(best_label[0]) : -1;
  if (p.mode == 1) {
    const double norm = total_s > 0 ? total_s : 1.0;
    for (std::uint32_t c = threadIdx.x; c < p.classes; c += blockDim.x) {
      p.out_probability[std::size_t(q) * p.classes + c] = n ? float(weights[c] / norm) : 0.0f;
    }
  }
}

}  // namespace

void launch_aggregate(const AggregateParams& params, cudaStream_t stream) {
  std::size_t shared = 0;
  if (params.mode == 2 && params.median) {
    std::uint32_t padded = 1;
    while (padded < params.k) padded <<= 1;
    shared = padded * sizeof(double);
  } else if (params.mode != 2 && params.classes <= kSharedClasses) {
    shared = params.classes * sizeof(double);
  }
  launch_chained("aggregate_kernel", aggregate_kernel, params.num_queries, kAggregateThreads, shared, stream, params);
}

}  // namespace streamknn::detail::gpu
