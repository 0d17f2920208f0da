// Device-resident queries (streamknn/device.hpp): validation and conversion to the stored form on
// the device, one thread per query, so the caller's queries never cross to the host. The
// conversion follows core/metric_space.cpp operation for operation (double arithmetic, rounded
// once), with explicit round-to-nearest intrinsics so nothing is contracted into an FMA.
#include <algorithm>
#include <cmath>

#include "cuda/kernels.hpp"
#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

// streamknn::Metric: L2, InnerProduct, Cosine, Haversine (checked in metric.hpp's order).
constexpr int kCosine = 2, kHaversine = 3;

__global__ void prepare_device_queries_kernel(DeviceQueryParams p) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.num_queries) return;
  const std::uint32_t q = p.first + i;
  const float* row = p.in + std::size_t(q) * p.row_stride;
  float* out = p.queries_out + std::size_t(i) * p.chunks * 4;
  bool bad = false;
  double norm2 = 0;
  for (std::uint32_t d = 0; d < p.dim; ++d) {
    const float v = row[d];
    bad |= !isfinite(v);
    norm2 = __dadd_rn(norm2, __dmul_rn(double(v), double(v)));
  }
  if (!bad && p.metric == kCosine && norm2 == 0.0) bad = true;
  if (!bad && p.metric == kHaversine && fabsf(row[0]) > 90.0f) bad = true;
  std::uint32_t written = 0;
  if (bad) {
    atomicMin(&p.status[0], static_cast<unsigned long long>(q));
  } else if (p.metric == kCosine) {
    const double inv = 1.0 / sqrt(norm2);
    for (std::uint32_t d = 0; d < p.dim; ++d) out[d] = static_cast<float>(__dmul_rn(double(row[d]), inv));
    written = p.dim;
  } else if (p.metric == kHaversine) {
    constexpr double kRad = 3.141592653589793238462643383279502884 / 180.0;
    const double lat = __dmul_rn(double(row[0]), kRad), lon = __dmul_rn(double(row[1]), kRad);
    out[0] = static_cast<float>(__dmul_rn(cos(lat), cos(lon)));
    out[1] = static_cast<float>(__dmul_rn(cos(lat), sin(lon)));
    out[2] = static_cast<float>(sin(lat));
    written = 3;
  } else {
    for (std::uint32_t d = 0; d < p.dim; ++d) out[d] = row[d];
    written = p.dim;
  }
  for (std::uint32_t d = written; d < p.chunks * 4; ++d) out[d] = 0.0f;  // padding, or a bad row's zeros
  p.thresholds[i] = kNoBound;
  if (p.visible) {
    IdRangeDevice r = p.visible[q];
    if (r.begin > r.end) {
      atomicMin(&p.status[1], static_cast<unsigned long long>(q));
      r.begin = r.end = 0;
    }
    p.ranges_out[i] = r;
  }
}

}  // namespace

void launch_prepare_device_queries(const DeviceQueryParams& params, cudaStream_t stream) {
  if (params.num_queries == 0) return;
  const int threads = 128;
  const int blocks = static_cast<int>((params.num_queries + threads - 1) / threads);
  prepare_device_queries_kernel<<<blocks, threads, 0, stream>>>(params);
  check_launch("prepare_device_queries_kernel");
}

}  // namespace streamknn::detail::gpu
