// Diagnostic: the select kernel alone on synthetic scan lists, event-timed, with phase stamps.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>
#include "cuda/kernels/select.cu"
#include "cuda/cuda_check.cpp"

using namespace streamknn::detail::gpu;

__global__ void empty_kernel(int x) { extern __shared__ char s[]; if (x == 12345) s[threadIdx.x] = 1; }

struct Case { const char* name; unsigned blocks, k, q, per_block; double mean, sd; int truncate; };

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  configure_select();
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200000);
  const Case cases[] = {
      {"mnist-q1-k64", 274, 64, 1, 256, 130.7, 5.5, 0},
      {"mnist-q1-k128", 274, 128, 1, 256, 130.7, 5.5, 0},
      {"imagenet-q1-k64", 264, 64, 1, 4830, 21.3, 2.23, 0},
      {"gis1m-q1-k16", 264, 16, 1, 3788, 0, 0, 48},
      {"lat100k-q1-k16", 391, 16, 1, 256, 0, 0, 48},
      {"mnist-q16-k64", 274, 64, 16, 256, 130.7, 5.5, 0},
  };
  std::mt19937 g(7);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("%-18s %7s %9s %9s | stamps (us from entry): load kth exact [r1: load kth exact] winners end | kth: reduced passes gathered\n", "case", "n", "select", "empty");
  for (const Case& c : cases) {
    std::vector<Candidate> lists(std::size_t(c.q) * c.blocks * c.k);
    std::vector<unsigned> lengths(std::size_t(c.q) * c.blocks);
    std::normal_distribution<double> nd(c.mean, c.sd);
    std::uniform_real_distribution<double> u(0, 1);
    for (unsigned q = 0; q < c.q; ++q) {
      std::vector<std::vector<Candidate>> all(c.blocks);
      std::vector<float> every;
      for (unsigned b = 0; b < c.blocks; ++b) {
        std::vector<Candidate> pts(c.per_block);
        for (unsigned i = 0; i < c.per_block; ++i) {
          float r;
          if (c.sd > 0) r = float(nd(g));
          else { double dx = u(g) - 0.5, dy = u(g) - 0.5; r = float(dx * dx + dy * dy); }
          pts[i] = Candidate{r, b * c.per_block + i, std::uint64_t(b) * c.per_block + i};
        }
        std::sort(pts.begin(), pts.end(), [](auto& a, auto& b2) { return a.rank < b2.rank || (a.rank == b2.rank && a.id < b2.id); });
        pts.resize(c.k);
        for (auto& p : pts) every.push_back(p.rank);
        all[b] = pts;
      }
      float bound = INFINITY;
      if (c.truncate) { std::sort(every.begin(), every.end()); bound = every[c.truncate]; }
      for (unsigned b = 0; b < c.blocks; ++b) {
        unsigned len = 0;
        for (unsigned i = 0; i < c.k; ++i) {
          lists[(std::size_t(q) * c.blocks + b) * c.k + i] = all[b][i];
          if (all[b][i].rank <= bound) ++len;
        }
        lengths[std::size_t(q) * c.blocks + b] = len;
      }
    }
    Candidate* d_lists; unsigned* d_len; float* d_dist; std::uint64_t* d_id; std::uint32_t* d_slot;
    cudaMalloc(&d_lists, lists.size() * sizeof(Candidate));
    cudaMalloc(&d_len, lengths.size() * 4);
    cudaMalloc(&d_dist, c.q * c.k * 4);
    cudaMalloc(&d_id, c.q * c.k * 8);
    cudaMalloc(&d_slot, c.q * c.k * 4);
    cudaMemcpy(d_lists, lists.data(), lists.size() * sizeof(Candidate), cudaMemcpyHostToDevice);
    cudaMemcpy(d_len, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice);
    SelectParams p;
    p.candidates = d_lists; p.lengths = d_len; p.blocks = c.blocks; p.num_queries = c.q; p.k = c.k; p.metric = 0;
    p.out_distance = d_dist; p.out_id = d_id; p.out_slot = d_slot;
    const std::size_t shared = (select_capacity(c.blocks, c.k) + next_pow2(c.k)) * sizeof(Candidate);
    std::vector<float> ts, te;
    std::vector<double> st(13, 0);
    const int reps = 200;
    for (int r = 0; r < reps + 10; ++r) {
      float ms;
      cudaEventRecord(e0);
      launch_select(p, 0);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&ms, e0, e1);
      long long s[16] = {};
#ifndef PLAIN
      cudaMemcpyFromSymbol(s, g_stamps, sizeof(s));
#endif
      if (r >= 10) {
        ts.push_back(ms * 1000);
        for (int i = 1; i < 13; ++i) st[i] += (s[i] > 0 ? double(s[i] - s[0]) : 0) / (clock_khz * 1e-3) / reps;
      }
#ifndef PLAIN
      long long zero[16] = {};
      cudaMemcpyToSymbol(g_stamps, zero, sizeof(zero));
#endif
      cudaEventRecord(e0);
      empty_kernel<<<c.q, 512, shared>>>(r);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&ms, e0, e1);
      if (r >= 10) te.push_back(ms * 1000);
    }
    std::sort(ts.begin(), ts.end());
    std::sort(te.begin(), te.end());
    std::printf("%-18s %7u %8.2fus %8.2fus |", c.name, first_take(c.blocks, c.k) * c.blocks, ts[ts.size() / 2], te[te.size() / 2]);
    for (int i = 1; i < 13; ++i) std::printf(" %5.2f", st[i]);
    std::printf("\n");
    std::vector<std::uint64_t> ids(std::size_t(c.q) * c.k);
    cudaMemcpy(ids.data(), d_id, ids.size() * 8, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (unsigned q = 0; q < c.q; ++q) {
      std::vector<Candidate> all;
      for (unsigned b = 0; b < c.blocks; ++b)
        for (unsigned i = 0; i < lengths[q * c.blocks + b]; ++i) all.push_back(lists[(std::size_t(q) * c.blocks + b) * c.k + i]);
      std::sort(all.begin(), all.end(), [](auto& a, auto& b2) { return a.rank < b2.rank || (a.rank == b2.rank && a.id < b2.id); });
      for (unsigned j = 0; j < c.k; ++j) {
        const std::uint64_t want = j < all.size() ? all[j].id : kNoId;
        if (ids[q * c.k + j] != want) ok = false;
      }
    }
    std::printf("   %s: %s\n", c.name, ok ? "ids match the host sort" : "MISMATCH");
    cudaFree(d_lists); cudaFree(d_len); cudaFree(d_dist); cudaFree(d_id); cudaFree(d_slot);
  }
  std::printf("clock %d kHz, err %s\n", clock_khz, cudaGetErrorString(cudaGetLastError()));
}
