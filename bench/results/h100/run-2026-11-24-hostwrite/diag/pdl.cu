// Diagnostic: the cost of a kernel boundary inside a CUDA graph, with and without programmatic
// dependent launch (PDL), on one-block and full-grid kernels.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

__global__ void plain_kernel(int* x, int spin) {
  long long t0 = clock64();
  while (clock64() - t0 < spin) {}
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(x, 1);
}
__global__ void pdl_kernel(int* x, int spin) {
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  long long t0 = clock64();
  while (clock64() - t0 < spin) {}
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(x, 1);
}

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int* x;
  cudaMalloc(&x, 4);
  int* host;
  cudaMallocHost(&host, 64);
  std::printf("%-6s %-5s %6s %6s %10s %10s\n", "pdl", "grid", "spin", "nodes", "p50 us", "p10 us");
  for (int grid : {1, 264}) {
    for (int spin : {0, 20000}) {
      for (int pdl = 0; pdl < 2; ++pdl) {
        for (int nodes : {1, 2, 4, 8}) {
          cudaGraph_t g;
          cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
          cudaMemcpyAsync(x, host, 4, cudaMemcpyHostToDevice, s);
          for (int i = 0; i < nodes; ++i) {
            cudaLaunchConfig_t cfg{};
            cfg.gridDim = grid;
            cfg.blockDim = 256;
            cfg.stream = s;
            cudaLaunchAttribute attr{};
            attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr.val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = &attr;
            cfg.numAttrs = (pdl && i > 0) ? 1 : 0;
            if (pdl) cudaLaunchKernelEx(&cfg, pdl_kernel, x, spin);
            else cudaLaunchKernelEx(&cfg, plain_kernel, x, spin);
          }
          cudaMemcpyAsync(host + 8, x, 4, cudaMemcpyDeviceToHost, s);
          cudaStreamEndCapture(s, &g);
          cudaGraphExec_t e;
          if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) { std::printf("instantiate failed\n"); return 1; }
          std::vector<double> t;
          for (int r = 0; r < 3000; ++r) {
            auto a = std::chrono::steady_clock::now();
            cudaGraphLaunch(e, s);
            cudaStreamSynchronize(s);
            auto b = std::chrono::steady_clock::now();
            if (r >= 200) t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
          }
          std::sort(t.begin(), t.end());
          std::printf("%-6d %-5d %6d %6d %10.2f %10.2f\n", pdl, grid, spin, nodes, t[t.size() / 2], t[t.size() / 10]);
          cudaGraphExecDestroy(e);
          cudaGraphDestroy(g);
        }
      }
    }
  }
  std::printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
