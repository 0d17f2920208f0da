// The K-means kernels over the points themselves, for points the caller hands over in device
// memory (KMeans::fit_device) as for the backend's own copy: the check of their floats (with each
// feature's largest exponent, which the exact sums' units need, in the same pass), rows
// gathered for the host, and the mean variance's passes (tol's scale), whose partial sums must
// be the CPU backend's bit for bit (lib/kmeans/kmeans_init.cpp: each product and each sum
// rounded, left to right over a chunk's points).
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/kmeans/kmeans_kernels.hpp"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::gpu::kmeans {

namespace km = streamknn::detail::kmeans;

namespace {

constexpr int kThreads = 256;
constexpr std::uint32_t kStageFloats = 8192;  // the variance pass's shared-memory tile (32 KiB)

/// Over the count = n x d floats of x: *first = min(*first, the index of each float beyond
/// `limit`'s bits, NaN included: the lowest) unless first is null, and tops[j] = max(tops[j], the
/// exponent fields of feature j: cluster_sums.hpp) unless tops is null. Thread t reads elements
/// t, t + S, ... with S a multiple of d, so each thread sees one feature.
__global__ void scan_floats_kernel(const float* x, std::size_t count, std::uint32_t d, std::uint32_t limit,
                                   unsigned long long* first, std::uint32_t* tops) {
  __shared__ std::uint32_t block_top[kThreads];
  const std::size_t threads = std::size_t(gridDim.x) * blockDim.x, stride = threads / d * d;
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  std::uint32_t top = 1;
  if (t < stride) {
    for (std::size_t e = t; e < count; e += stride) {
      const float v = x[e];
      if (first && (__float_as_uint(v) & 0x7fffffffu) > limit) atomicMin(first, (unsigned long long)e);
      top = max(top, km::exponent_field(v));
    }
  }
  if (!tops) return;
  if (d > kThreads) {  // a block's threads see distinct features: straight to global
    if (t < stride) atomicMax(tops + t % d, top);
    return;
  }
  if (threadIdx.x < d) block_top[threadIdx.x] = 1;
  __syncthreads();
  if (t < stride) atomicMax(block_top + t % d, top);
  __syncthreads();
  if (threadIdx.x < d) atomicMax(tops + threadIdx.x, block_top[threadIdx.x]);
}

/// out[r * d + j] = x[rows[r] * d + j].
__global__ void gather_kernel(const float* x, const std::uint32_t* rows, std::uint32_t count, std::uint32_t d,
                              float* out) {
  const std::size_t total = std::size_t(count) * d, stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / d, j = e % d;
    out[e] = x[std::size_t(rows[r]) * d + j];
  }
}

/// out[i] = labels[i] as a T.
template <class T>
__global__ void narrow_kernel(const std::uint32_t* labels, std::uint32_t n, T* out) {
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = T(labels[i]);
}

/// Each point whose label differs from its narrow copy (in `newer` below `split`, in `older` from
/// there): its place and label go to the next pair of `changes` (in no order) while there are
/// fewer than `room` pairs; *count counts them all.
template <class T>
__global__ void changes_kernel(const std::uint32_t* labels, const T* newer, const T* older, std::uint32_t split,
                               std::uint32_t n, std::uint32_t room, std::uint32_t* count, std::uint32_t* changes) {
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint32_t label = labels[i];
    if (label == (i < split ? newer[i] : older[i])) continue;
    const std::uint32_t slot = atomicAdd(count, 1u);
    if (slot < room) {
      changes[2 * std::size_t(slot)] = i;
      changes[2 * std::size_t(slot) + 1] = label;
    }
  }
}

/// One block per (chunk, group of up to kThreads columns): the chunk's rows pass through shared
/// memory, coalesced, and thread j sums its column over them in point order.
__global__ void __launch_bounds__(kThreads) variance_kernel(const float* x, std::uint32_t n, std::uint32_t d,
                                                            const double* mean, double* out) {
  __shared__ float stage[kStageFloats];
  const std::uint32_t chunk = blockIdx.x, j0 = blockIdx.y * kThreads;
  const std::uint32_t width = min(std::uint32_t(kThreads), d - j0);
  constexpr std::uint32_t kChunk = std::uint32_t(streamknn::detail::kmeans::kVarianceChunk);
  const std::uint32_t lo = chunk * kChunk, hi = n - lo < kChunk ? n : lo + kChunk;
  const std::uint32_t rows_per_stage = kStageFloats / width;
  const std::uint32_t j = j0 + threadIdx.x;
  const double m = mean != nullptr && threadIdx.x < width ? mean[j] : 0.0;
  double acc = 0.0;
  for (std::uint32_t r0 = lo; r0 < hi; r0 += rows_per_stage) {
    const std::uint32_t rows = min(rows_per_stage, hi - r0);
    __syncthreads();
    for (std::uint32_t e = threadIdx.x; e < rows * width; e += kThreads) {
      const std::uint32_t r = e / width, c = e % width;
      stage[e] = x[std::size_t(r0 + r) * d + j0 + c];
    }
    __syncthreads();
    if (threadIdx.x >= width) continue;
    for (std::uint32_t r = 0; r < rows; ++r) {
      const double v = __dsub_rn(double(stage[r * width + threadIdx.x]), m);
      acc = __dadd_rn(acc, mean != nullptr ? __dmul_rn(v, v) : v);
    }
  }
  if (threadIdx.x < width) out[std::size_t(chunk) * d + j] = acc;
}

unsigned grid_for(std::size_t work) {
  const std::size_t blocks = (work + kThreads - 1) / kThreads;
  return unsigned(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

/// scan_floats_kernel over n x d floats: at least one thread per feature.
void launch_scan_floats(const float* x, std::uint32_t n, std::uint32_t d, std::uint32_t limit, unsigned long long* first,
                        std::uint32_t* tops, cudaStream_t stream) {
  if (tops) {
    check_cuda(cudaMemsetAsync(tops, 0, d * sizeof(std::uint32_t), stream), "cudaMemsetAsync", "kmeans feature tops");
  }
  const unsigned least = (d + kThreads - 1) / kThreads;
  const unsigned grid = std::max(grid_for(std::size_t(n) * d), least);
  scan_floats_kernel<<<grid, kThreads, 0, stream>>>(x, std::size_t(n) * d, d, limit, first, tops);
  check_launch("kmeans scan_floats_kernel");
}

}  // namespace

void launch_first_beyond(const float* x, std::uint32_t n, std::uint32_t d, float bound, unsigned long long* first,
                         std::uint32_t* tops, cudaStream_t stream) {
  std::uint32_t limit = 0;
  static_assert(sizeof limit == sizeof bound);
  __builtin_memcpy(&limit, &bound, sizeof limit);
  launch_scan_floats(x, n, d, limit, first, tops, stream);
}

void launch_feature_tops(const float* x, std::uint32_t n, std::uint32_t d, std::uint32_t* tops, cudaStream_t stream) {
  launch_scan_floats(x, n, d, 0, nullptr, tops, stream);
}

void launch_gather(const float* x, const std::uint32_t* rows, std::uint32_t count, std::uint32_t d, float* out,
                   cudaStream_t stream) {
  if (count == 0) return;
  gather_kernel<<<grid_for(std::size_t(count) * d), kThreads, 0, stream>>>(x, rows, count, d, out);
  check_launch("kmeans gather_kernel");
}

void launch_narrow_labels(const std::uint32_t* labels, std::uint32_t n, int width, void* out, cudaStream_t stream) {
  if (n == 0) return;
  if (width == 1) {
    narrow_kernel<<<grid_for(n), kThreads, 0, stream>>>(labels, n, static_cast<std::uint8_t*>(out));
  } else {
    narrow_kernel<<<grid_for(n), kThreads, 0, stream>>>(labels, n, static_cast<std::uint16_t*>(out));
  }
  check_launch("kmeans narrow_kernel");
}

void launch_label_changes(const std::uint32_t* labels, const void* newer, const void* older, std::uint32_t split,
                          int width, std::uint32_t n, std::uint32_t room, std::uint32_t* count,
                          std::uint32_t* changes, cudaStream_t stream) {
  if (n == 0) return;
  if (width == 1) {
    using T = std::uint8_t;
    changes_kernel<<<grid_for(n), kThreads, 0, stream>>>(labels, static_cast<const T*>(newer),
                                                         static_cast<const T*>(older), split, n, room, count, changes);
  } else {
    using T = std::uint16_t;
    changes_kernel<<<grid_for(n), kThreads, 0, stream>>>(labels, static_cast<const T*>(newer),
                                                         static_cast<const T*>(older), split, n, room, count, changes);
  }
  check_launch("kmeans changes_kernel");
}

void launch_variance_pass(const float* x, std::uint32_t n, std::uint32_t d, const double* mean, double* out,
                          cudaStream_t stream) {
  const std::size_t chunks = (n + streamknn::detail::kmeans::kVarianceChunk - 1) /
                             streamknn::detail::kmeans::kVarianceChunk;
  const dim3 grid(unsigned(chunks), (d + kThreads - 1) / kThreads);
  variance_kernel<<<grid, kThreads, 0, stream>>>(x, n, d, mean, out);
  check_launch("kmeans variance_kernel");
}

}  // namespace streamknn::detail::gpu::kmeans
