// The card's measured ceilings, taken in the same run as the benchmarks that use them:
// device read bandwidth (a streaming read of a buffer much larger than L2) and the FP32 FMA
// rate (a register-resident FMA loop).
#include "bench/bandwidth.hpp"
#include "bench/cuda_check.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

namespace {

__global__ void read_kernel(const float4* __restrict__ in, std::size_t n, float* out) {
  float4 acc = make_float4(0, 0, 0, 0);
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(in + i);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  if (acc.x + acc.y + acc.z + acc.w == 1234.5f) *out = acc.x;  // keeps the loads alive
}

__global__ void fma_kernel(float* out, int iterations) {
  float a = threadIdx.x * 1e-7f, b = 0.999f, c0 = 1e-3f, c1 = 2e-3f, c2 = 3e-3f, c3 = 4e-3f;
  float x0 = a, x1 = a + 1, x2 = a + 2, x3 = a + 3, x4 = a + 4, x5 = a + 5, x6 = a + 6, x7 = a + 7;
  for (int i = 0; i < iterations; ++i) {
    x0 = fmaf(x0, b, c0); x1 = fmaf(x1, b, c1); x2 = fmaf(x2, b, c2); x3 = fmaf(x3, b, c3);
    x4 = fmaf(x4, b, c0); x5 = fmaf(x5, b, c1); x6 = fmaf(x6, b, c2); x7 = fmaf(x7, b, c3);
  }
  const float s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  if (s == 1234.5f) *out = s;
}

float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

}  // namespace

Ceilings measure_ceilings() {
  Ceilings c;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  c.device = prop.name;
  c.sms = prop.multiProcessorCount;
  const std::size_t bytes = std::size_t(2) << 30;  // 2 GiB, far above L2
  float4* buf = nullptr;
  float* out = nullptr;
  check(cudaMalloc(&buf, bytes), "cudaMalloc(bandwidth buffer)");
  check(cudaMalloc(&out, sizeof(float)), "cudaMalloc");
  check(cudaMemset(buf, 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> times;
  for (int r = 0; r < 12; ++r) {
    cudaEventRecord(e0);
    read_kernel<<<c.sms * 8, 512>>>(buf, bytes / sizeof(float4), out);
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "read_kernel");
    if (r >= 2) times.push_back(time_ms(e0, e1));
  }
  std::sort(times.begin(), times.end());
  c.read_gbps = double(bytes) / (times[times.size() / 2] * 1e-3) / 1e9;
  times.clear();
  const int iterations = 1 << 16;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0);
    fma_kernel<<<c.sms * 16, 256>>>(out, iterations);
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "fma_kernel");
    if (r >= 2) times.push_back(time_ms(e0, e1));
  }
  std::sort(times.begin(), times.end());
  const double fmas = double(c.sms) * 16 * 256 * iterations * 8;
  c.fp32_tflops = 2 * fmas / (times[times.size() / 2] * 1e-3) / 1e12;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(buf);
  cudaFree(out);
  return c;
}

}  // namespace bench
