// Device-resident queries (streamknn/device.hpp): validation and conversion to the stored form on
// the device, one warp per query, so the caller's queries never cross to the host. The
// conversion follows core/metric_space.cpp operation for operation (double arithmetic, rounded
// once), with explicit round-to-nearest intrinsics so nothing is contracted into an FMA.
// One thread per query took 44 us for one MNIST-like query (784 elements, a chain of dependent
// loads and double adds; ncu, H100), half the search it prepared; the warp's lanes now check and
// copy the elements together, and only a cosine norm, whose double sum must keep the CPU's order,
// is summed by one lane (from L1: the warp has just read the row). A bad row's index goes to a
// status word, which the kernel's last block hands to the host (DeviceQueryParams::host_status).
#include <algorithm>
#include <cmath>

#include "cuda/kernels/device_queries.hpp"
#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

// streamknn::Metric: L2, InnerProduct, Cosine, Haversine (checked in metric.hpp's order).
constexpr int kCosine = 2, kHaversine = 3;

constexpr int kWarpsPerBlock = 4;

/// Query i of the chunk, by one warp.
__device__ void prepare_query(const DeviceQueryParams& p, std::uint32_t i, std::uint32_t lane) {
  const std::uint32_t q = p.first + i;
  const float* row = p.in + std::size_t(q) * p.row_stride;
  float* out = p.queries_out + std::size_t(i) * p.chunks * 4;
  const bool copy = p.metric != kCosine && p.metric != kHaversine;
  bool in_range = true;
  for (std::uint32_t d = lane; d < p.dim; d += 32) {
    const float v = row[d];
    in_range &= fabsf(v) <= p.bound;  // false for NaN and +-Inf too
    if (copy) out[d] = v;  // overwritten with zeros below if the row is bad
  }
  bool bad = !__all_sync(kFullMask, in_range);
  double inv = 0;
  if (!bad && p.metric == kCosine) {
    if (lane == 0) {
      double norm2 = 0;
      for (std::uint32_t d = 0; d < p.dim; ++d) norm2 = __dadd_rn(norm2, __dmul_rn(double(row[d]), double(row[d])));
      inv = norm2 == 0.0 ? 0.0 : 1.0 / sqrt(norm2);
    }
    inv = __shfl_sync(kFullMask, inv, 0);
    bad = inv == 0.0;  // a zero vector has no direction
  }
  if (!bad && p.metric == kHaversine) bad = fabsf(row[0]) > 90.0f || fabsf(row[1]) > 180.0f;
  std::uint32_t written = 0;
  if (bad) {
    if (lane == 0) atomicMin(&p.status[0], static_cast<unsigned long long>(q));
  } else if (p.metric == kCosine) {
    for (std::uint32_t d = lane; d < p.dim; d += 32) out[d] = static_cast<float>(__dmul_rn(double(row[d]), inv));
    written = p.dim;
  } else if (p.metric == kHaversine) {
    if (lane == 0) {
      constexpr double kRad = 3.141592653589793238462643383279502884 / 180.0;
      const double lat = __dmul_rn(double(row[0]), kRad), lon = __dmul_rn(double(row[1]), kRad);
      out[0] = static_cast<float>(__dmul_rn(cos(lat), cos(lon)));
      out[1] = static_cast<float>(__dmul_rn(cos(lat), sin(lon)));
      out[2] = static_cast<float>(sin(lat));
    }
    written = 3;
  } else {
    written = p.dim;
  }
  for (std::uint32_t d = written + lane; d < p.chunks * 4; d += 32) out[d] = 0.0f;  // padding, or a bad row's zeros
  if (lane != 0) return;
  p.thresholds[i] = kNoBound;
  if (p.visible) {
    IdRangeDevice r = p.visible[q];
    if (r.begin > r.end) {
      atomicMin(&p.status[1], static_cast<unsigned long long>(q));
      r.begin = r.end = 0;
    }
    p.ranges_out[i] = r;
    PredicateDevice all{};  // no bits, no range word: every point passes
    all.range_word = -1;
    p.predicates_out[i] = all;
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) prepare_device_queries_kernel(DeviceQueryParams p) {
  start_chained_kernel();
  const std::uint32_t lane = threadIdx.x & 31;
  const std::uint32_t i = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (i < p.num_queries) prepare_query(p, i, lane);
  if (p.host_status == nullptr) return;
  // The status reaches the host from here, not by a copy after the search: a copy node after a
  // small search's kernels cost its graph about 8 us (bench_graph_copies), and the kernels after
  // this one do not touch the status.
  if (!last_block_to_arrive(p.arrivals, gridDim.x) || threadIdx.x != 0) return;
  if (p.last_chunk) {
    p.host_status[0] = atomicExch(&p.status[0], ~0ull);
    p.host_status[1] = atomicExch(&p.status[1], ~0ull);
  }
  *p.arrivals = 0;
}

}  // namespace

void launch_prepare_device_queries(const DeviceQueryParams& params, cudaStream_t stream) {
  if (params.num_queries == 0) return;
  const int blocks = static_cast<int>((params.num_queries + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_chained("prepare_device_queries_kernel", prepare_device_queries_kernel, blocks, kWarpsPerBlock * 32, 0, stream,
                 params);
}

}  // namespace streamknn::detail::gpu
