// bench/graph_copies: what a small search's CUDA graph pays for the way its answers reach the
// host. A graph of N tiny kernels, with the input brought in by a host-to-device copy or a kernel
// reading mapped pinned memory, and the output taken out by a device-to-host copy, a kernel
// copying into mapped pinned memory, or the last kernel writing mapped pinned memory itself.
// Then, by the input's size (1-100 KB, the input block of 1-16 queries up to 1,600 dims), two
// kernels whose last writes mapped memory (a small search's graph) after an H2D copy node or a
// kernel that reads the input from mapped memory a 16-byte word per thread (launch_copy_in), and
// the same H2D copy launched on a stream instead of a graph; and, up to 24 KB, the input passed as
// the first kernel's parameter (cudaGraphExecKernelNodeSetParams before each launch).
// Host to host: graph launch, then cudaStreamSynchronize; p50 and p10 over `--reps` launches.
//   graph_copies [--reps 4000] [--csv graph_copies.csv]
// These rows are why the library's last kernel writes small answers itself (a copy out after
// two kernels or more costs several microseconds more on Hopper cards), why its graphs read
// input blocks over 16 KB with a kernel instead of a copy node, and why the input is not passed
// as a kernel parameter (setting the node's parameters costs about what the copy does).
// docs/performance.md has the figures.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_check.hpp"

namespace {

using bench::check;

constexpr int kInWords = 1024, kOutWords = 256;  // 4 KB in, 1 KB out: a few queries' worth
constexpr int kMaxInKb = 100;                    // the sized inputs' largest

__global__ void work_kernel(const int* in, int* out) { out[threadIdx.x] = in[threadIdx.x] + 1; }
__global__ void copy_kernel(const int* from, int* to, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
}
/// The library's launch_copy_in: one 16-byte word per thread, every load in flight at once.
__global__ void copy_words_kernel(const uint4* from, uint4* to, int words) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < words) to[i] = from[i];
}

/// An input block passed as the first kernel's parameter (a graph's kernel node, its parameters
/// set before each launch), which that kernel writes to device memory.
template <int Words>
struct ParamBlock {
  uint4 words[Words];
};
template <int Words>
__global__ void param_copy_kernel(const __grid_constant__ ParamBlock<Words> block, uint4* to) {
  for (int i = threadIdx.x; i < Words; i += blockDim.x) to[i] = block.words[i];
}

/// p50 and p10 of launch() to its stream's sync (after 300 unmeasured), in us.
std::pair<double, double> time_launches(const std::function<void()>& launch, cudaStream_t s, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps + 300; ++r) {
    const auto a = std::chrono::steady_clock::now();
    launch();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto b = std::chrono::steady_clock::now();
    if (r >= 300) t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[t.size() / 10]};
}

/// What enqueue() puts on s, captured as a graph and instantiated; destroyed with this. The graph
/// is kept too: its nodes name the executable's (cudaGraphExecKernelNodeSetParams).
struct CapturedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedGraph(cudaStream_t s, const std::function<void()>& enqueue) {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    enqueue();
    check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  /// p50 and p10 of a launch to its stream's sync, in us.
  std::pair<double, double> time(cudaStream_t s, int reps) const {
    return time_launches([&] { check(cudaGraphLaunch(exec, s), "cudaGraphLaunch"); }, s, reps);
  }
};

/// One row of the table and of the CSV.
void report(std::FILE* csv, int in_width, const std::string& in, const char* out, int kernels, std::pair<double, double> t) {
  std::printf("%-*s %-34s %7d %9.2f %9.2f\n", in_width, in.c_str(), out, kernels, t.first, t.second);
  std::fprintf(csv, "%s,%s,%d,%.2f,%.2f\n", in.c_str(), out, kernels, t.first, t.second);
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
  check(cudaMalloc(&d_in, kMaxInKb * 1024), "cudaMalloc");
  check(cudaMalloc(&d_out, kInWords * 4), "cudaMalloc");
  check(cudaHostAlloc(&host, (kMaxInKb + 64) * 1024, cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostGetDevicePointer(&host_dev, host, 0), "cudaHostGetDevicePointer");
  int* h_in = host;
  int* h_out = host + 4 * kInWords;
  unsigned char* const sized_in = reinterpret_cast<unsigned char*>(host) + 64 * 1024;  // the sized inputs
  unsigned char* const sized_in_dev = reinterpret_cast<unsigned char*>(host_dev) + 64 * 1024;
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
        const CapturedGraph g(s, [&] {
          if (in == In::Copy) cudaMemcpyAsync(d_in, h_in, kInWords * 4, cudaMemcpyHostToDevice, s);
          else copy_kernel<<<1, 256, 0, s>>>(host_dev, d_in, kInWords);
          for (int i = 0; i < n; ++i) {
            int* to = out == Out::LastKernel && i == n - 1 ? host_dev + 4 * kInWords : d_out;
            work_kernel<<<1, kOutWords, 0, s>>>(d_in, to);
          }
          if (out == Out::Copy) cudaMemcpyAsync(h_out, d_out, kOutWords * 4, cudaMemcpyDeviceToHost, s);
          if (out == Out::Kernel) copy_kernel<<<1, 256, 0, s>>>(d_out, host_dev + 4 * kInWords, kOutWords);
        });
        report(csv, 24, in_name, out_name, n, g.time(s, reps));
      }
    }
  }
  std::printf("\nby input size, two kernels, the last writing mapped memory:\n");
  std::printf("%-34s %-34s %7s %9s %9s\n", "input", "output", "kernels", "p50 us", "p10 us");
  for (int kb : {1, 4, 8, 12, 16, 20, 24, 32, 50, 64, kMaxInKb}) {
    const int words = kb * 1024 / 16;
    auto enqueue = [&](int how) {  // 0: H2D copy, 1: kernel reads mapped
      if (how == 0) {
        check(cudaMemcpyAsync(d_in, sized_in, std::size_t(kb) * 1024, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
      } else {
        copy_words_kernel<<<(words + 255) / 256, 256, 0, s>>>(reinterpret_cast<const uint4*>(sized_in_dev),
                                                             reinterpret_cast<uint4*>(d_in), words);
      }
      work_kernel<<<1, kOutWords, 0, s>>>(d_in, d_out);
      work_kernel<<<1, kOutWords, 0, s>>>(d_in, host_dev + 4 * kInWords);
    };
    for (int how : {0, 1, 2}) {  // 2: the H2D copy and kernels launched on the stream
      const auto t = how == 2 ? time_launches([&] { enqueue(0); }, s, reps)
                              : CapturedGraph(s, [&] { enqueue(how); }).time(s, reps);
      const std::string in_name = std::string(how == 1 ? "kernel reads mapped " : how == 0 ? "H2D copy " : "stream: H2D copy ") +
                                  std::to_string(kb) + " KB";
      report(csv, 34, in_name, "last kernel writes mapped", 2, t);
    }
  }
  std::printf("\nby input size, the input as the first kernel's parameter (set before each launch), then two\n"
              "kernels, the last writing mapped memory:\n");
  auto by_parameter = [&]<int Kb>() {
    constexpr int kWords = Kb * 1024 / 16;
    const auto block = std::make_unique<ParamBlock<kWords>>();
    std::memcpy(block->words, sized_in, sizeof(*block));
    uint4* to = reinterpret_cast<uint4*>(d_in);
    const CapturedGraph g(s, [&] {
      param_copy_kernel<kWords><<<1, 256, 0, s>>>(*block, to);
      work_kernel<<<1, kOutWords, 0, s>>>(d_in, d_out);
      work_kernel<<<1, kOutWords, 0, s>>>(d_in, host_dev + 4 * kInWords);
    });
    std::size_t roots = 1;
    cudaGraphNode_t first;
    check(cudaGraphGetRootNodes(g.graph, &first, &roots), "cudaGraphGetRootNodes");
    cudaKernelNodeParams params{};
    check(cudaGraphKernelNodeGetParams(first, &params), "cudaGraphKernelNodeGetParams");
    void* args[] = {block.get(), &to};
    params.kernelParams = args;
    params.extra = nullptr;
    const auto t = time_launches(
        [&] {
          block->words[0].x += 1;  // a new block each time, as a new query
          check(cudaGraphExecKernelNodeSetParams(g.exec, first, &params), "cudaGraphExecKernelNodeSetParams");
          check(cudaGraphLaunch(g.exec, s), "cudaGraphLaunch");
        },
        s, reps);
    report(csv, 34, "parameter " + std::to_string(Kb) + " KB", "last kernel writes mapped", 2, t);
  };
  by_parameter.operator()<1>();
  by_parameter.operator()<4>();
  by_parameter.operator()<8>();
  by_parameter.operator()<16>();
  by_parameter.operator()<24>();
  std::fclose(csv);
}
