// Diagnostic: host-to-host latency of tiny pipelines: n empty kernels with or without the H2D and
// D2H copies around them, as a graph or plain launches, waited by cudaStreamSynchronize or by
// polling cudaStreamQuery.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

__global__ void k_dev(const int* in, int* out) { if (threadIdx.x == 0) out[0] = in[0] + 1; }
// zero copy: the first kernel reads pinned host memory, the last writes it
__global__ void k_zc(const volatile int* in, volatile int* out) { if (threadIdx.x == 0) out[0] = in[0] + 1; }

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int *d_a, *d_b, *h;
  cudaMalloc(&d_a, 64);
  cudaMalloc(&d_b, 64);
  cudaHostAlloc(&h, 4096, cudaHostAllocMapped);
  int* h_dev;
  cudaHostGetDevicePointer(&h_dev, h, 0);
  std::printf("%-28s %5s %5s %9s %9s\n", "pipeline", "nodes", "poll", "p50 us", "p10 us");
  for (int mode = 0; mode < 4; ++mode) {    // 0 graph+copies, 1 graph kernels only, 2 plain+copies, 3 graph zero-copy
    for (int poll = 0; poll < 2; ++poll) {
      for (int n : {1, 2, 3, 5}) {
        auto enqueue = [&] {
          if (mode == 0 || mode == 2) cudaMemcpyAsync(d_a, h, 4, cudaMemcpyHostToDevice, s);
          for (int i = 0; i < n; ++i) {
            if (mode == 3 && i == 0 && n == 1) k_zc<<<1, 32, 0, s>>>(h_dev, h_dev + 16);
            else if (mode == 3 && i == 0) k_zc<<<1, 32, 0, s>>>(h_dev, d_a);
            else if (mode == 3 && i == n - 1) k_zc<<<1, 32, 0, s>>>(d_a, h_dev + 16);
            else k_dev<<<1, 32, 0, s>>>(d_a, d_b);
          }
          if (mode == 0 || mode == 2) cudaMemcpyAsync(h + 16, d_b, 4, cudaMemcpyDeviceToHost, s);
        };
        cudaGraphExec_t e = nullptr;
        if (mode != 2) {
          cudaGraph_t g;
          cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
          enqueue();
          cudaStreamEndCapture(s, &g);
          cudaGraphInstantiate(&e, g, 0);
          cudaGraphDestroy(g);
        }
        std::vector<double> t;
        for (int r = 0; r < 4000; ++r) {
          auto a = std::chrono::steady_clock::now();
          if (e) cudaGraphLaunch(e, s); else enqueue();
          if (poll) { while (cudaStreamQuery(s) == cudaErrorNotReady) {} }
          else cudaStreamSynchronize(s);
          auto b = std::chrono::steady_clock::now();
          if (r >= 300) t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
        }
        std::sort(t.begin(), t.end());
        const char* names[] = {"graph: H2D + kernels + D2H", "graph: kernels only", "plain: H2D + kernels + D2H", "graph: zero-copy kernels"};
        std::printf("%-28s %5d %5d %9.2f %9.2f\n", names[mode], n, poll, t[t.size() / 2], t[t.size() / 10]);
        if (e) cudaGraphExecDestroy(e);
      }
    }
  }
  std::printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
