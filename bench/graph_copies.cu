// bench/graph_copies: what a small search's CUDA graph pays for the way its answers reach the
// host. A graph of N tiny kernels, with the input brought in by a host-to-device copy or a kernel
// reading mapped pinned memory, and the output taken out by a device-to-host copy, a kernel
// copying into mapped pinned memory, or the last kernel writing mapped pinned memory itself.
// Host to host: graph launch, then cudaStreamSynchronize; p50 and p10 over `--reps` launches.
//   graph_copies [--reps 4000] [--csv graph_copies.csv]
// On the H100 a copy out after two kernels or more cost about 8 us (17.4-19.5 us against
// 10.7-13.6 us), which is why the library's last kernel writes small answers itself.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_check.hpp"

namespace {

using bench::check;

constexpr int kInWords = 1024, kOutWords = 256;  // 4 KB in, 1 KB out: a few queries' worth

__global__ void work_kernel(const int* in, int* out) { out[threadIdx.x] = in[threadIdx.x] + 1; }
__global__ void copy_kernel(const int* from, int* to, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
}

enum class In { Copy, Kernel };
enum class Out { Copy, Kernel, LastKernel };

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--reps", "4000"}, {"--csv", "graph_copies.csv"}};
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  const int reps = std::stoi(args["--reps"]);
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  int *d_in, *d_out, *host, *host_dev;
  check(cudaMalloc(&d_in, kInWords * 4), "cudaMalloc");
  check(cudaMalloc(&d_out, kInWords * 4), "cudaMalloc");
  check(cudaHostAlloc(&host, 64 * 1024, cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostGetDevicePointer(&host_dev, host, 0), "cudaHostGetDevicePointer");
  int* h_in = host;
  int* h_out = host + 4 * kInWords;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::FILE* csv = std::fopen(args["--csv"].c_str(), "w");
  std::fprintf(csv, "# device,%s\nin,out,kernels,p50_us,p10_us\n", prop.name);
  std::printf("device %s: a CUDA graph of N tiny kernels, host to host (%d launches each)\n", prop.name, reps);
  std::printf("%-24s %-34s %7s %9s %9s\n", "input", "output", "kernels", "p50 us", "p10 us");
  const std::pair<In, const char*> ins[] = {{In::Copy, "H2D copy"}, {In::Kernel, "kernel reads mapped"}};
  const std::pair<Out, const char*> outs[] = {{Out::Copy, "D2H copy"},
                                              {Out::Kernel, "copy kernel writes mapped"},
                                              {Out::LastKernel, "last kernel writes mapped"}};
  for (const auto& [in, in_name] : ins) {
    for (const auto& [out, out_name] : outs) {
      for (int n : {1, 2, 4}) {
        check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        if (in == In::Copy) cudaMemcpyAsync(d_in, h_in, kInWords * 4, cudaMemcpyHostToDevice, s);
        else copy_kernel<<<1, 256, 0, s>>>(host_dev, d_in, kInWords);
        for (int i = 0; i < n; ++i) {
          int* to = out == Out::LastKernel && i == n - 1 ? host_dev + 4 * kInWords : d_out;
          work_kernel<<<1, kOutWords, 0, s>>>(d_in, to);
        }
        if (out == Out::Copy) cudaMemcpyAsync(h_out, d_out, kOutWords * 4, cudaMemcpyDeviceToHost, s);
        if (out == Out::Kernel) copy_kernel<<<1, 256, 0, s>>>(d_out, host_dev + 4 * kInWords, kOutWords);
        cudaGraph_t graph;
        check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
        cudaGraphExec_t exec;
        check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        cudaGraphDestroy(graph);
        std::vector<double> t;
        for (int r = 0; r < reps + 300; ++r) {
          const auto a = std::chrono::steady_clock::now();
          check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
          check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          const auto b = std::chrono::steady_clock::now();
          if (r >= 300) t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
        }
        cudaGraphExecDestroy(exec);
        std::sort(t.begin(), t.end());
        const double p50 = t[t.size() / 2], p10 = t[t.size() / 10];
        std::printf("%-24s %-34s %7d %9.2f %9.2f\n", in_name, out_name, n, p50, p10);
        std::fprintf(csv, "%s,%s,%d,%.2f,%.2f\n", in_name, out_name, n, p50, p10);
      }
    }
  }
  std::fclose(csv);
}
