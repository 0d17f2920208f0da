// bench/latency: one query end to end (host vectors in, host answers out) on a 100,000 x 2
// store, K = 16, over many queries: p50 / p99 / p99.9, beside the raw floor of the same card:
// a pinned H2D of the query + one empty kernel + a D2H of the answer + a stream sync, issued
// directly and as a CUDA graph; and where the time goes: the host part of a search (submit) and
// the wait for its answers (get), the same search on a one-point store (the fixed costs), and a
// caller whose batches hold 1, 2, 3 and 4 queries in turn.
//   latency [--n 100000] [--queries 100000] [--k 16] [--metric l2|haversine] [--csv latency.csv]
//           [--samples FILE]   (every timed query of each path, for its distribution)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_check.hpp"

#include "streamknn/streamknn.hpp"

namespace {

using bench::check;

__global__ void empty_kernel(const float* in, float* out) {
  if (threadIdx.x == 0 && in[0] == 1234.5f) out[0] = in[0];
}

/// Reads the query from, and writes an answer of n words to, pinned host memory.
__global__ void zero_copy_kernel(const float* in, float* out, unsigned n) {
  const float v = in[0];
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = v;
}

struct Percentiles {
  double p50, p99, p999, mean;
};

Percentiles percentiles(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  auto at = [&](double f) { return us[std::min(us.size() - 1, std::size_t(f * us.size()))]; };
  return {at(0.5), at(0.99), at(0.999), sum / us.size()};
}

template <class F>
std::vector<double> time_us(int n, F&& f) {
  std::vector<double> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f(i);
    out.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace streamknn;
  std::map<std::string, std::string> args{{"--n", "100000"}, {"--queries", "100000"}, {"--k", "16"},
                                          {"--metric", "l2"}, {"--csv", "latency.csv"}};
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  const std::size_t n = std::stoul(args["--n"]), k = std::stoul(args["--k"]);
  const int queries = std::stoi(args["--queries"]);
  const Metric metric = parse_metric(args["--metric"]);

  // Raw floor: the same copies and one kernel, with nothing else.
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  float *h_in, *h_out, *d_in, *d_out;
  check(cudaMallocHost(&h_in, 64), "cudaMallocHost");
  check(cudaMallocHost(&h_out, k * 12), "cudaMallocHost");
  check(cudaMalloc(&d_in, 64), "cudaMalloc");
  check(cudaMalloc(&d_out, k * 12), "cudaMalloc");
  auto round_trip = [&] {
    cudaMemcpyAsync(d_in, h_in, 16, cudaMemcpyHostToDevice, stream);
    empty_kernel<<<1, 32, 0, stream>>>(d_in, d_out);
    cudaMemcpyAsync(h_out, d_out, k * 12, cudaMemcpyDeviceToHost, stream);
  };
  for (int i = 0; i < 1000; ++i) {
    round_trip();
    cudaStreamSynchronize(stream);
  }
  const auto raw_us = time_us(queries, [&](int) {
    round_trip();
    check(cudaStreamSynchronize(stream), "sync");
  });
  const auto raw = percentiles(raw_us);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  round_trip();
  check(cudaStreamEndCapture(stream, &graph), "capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int i = 0; i < 1000; ++i) {
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
  }
  const auto raw_graph_us = time_us(queries, [&](int) {
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaStreamSynchronize(stream), "sync");
  });
  const auto raw_graph = percentiles(raw_graph_us);
  // The same kernel reading its input from and writing its output to pinned host memory
  // (zero-copy over PCIe): no copy-engine steps, one kernel launch and a sync.
  for (int i = 0; i < 1000; ++i) {
    zero_copy_kernel<<<1, 32, 0, stream>>>(h_in, h_out, unsigned(k * 3));
    cudaStreamSynchronize(stream);
  }
  const auto zero_copy_us = time_us(queries, [&](int) {
    zero_copy_kernel<<<1, 32, 0, stream>>>(h_in, h_out, unsigned(k * 3));
    check(cudaStreamSynchronize(stream), "sync");
  });
  const auto zero_copy = percentiles(zero_copy_us);

  // The library: a store of n random points, one query at a time, host to host.
  StoreConfig config;
  config.dim = 2;
  config.metric = metric;
  config.capacity_hint = n;
  config.queue_capacity = n;
  config.backend = BackendKind::Cuda;
  ReferenceSet store(config);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> lat(-60, 60), lon(-180, 180), unit(0, 1);
  auto point = [&] {
    return metric == Metric::Haversine ? std::vector<float>{lat(g), lon(g)} : std::vector<float>{unit(g), unit(g)};
  };
  for (PointId id = 0; id < n; ++id) store.insert(id, point());
  store.publish();
  std::vector<std::vector<float>> qs(4096);
  for (auto& q : qs) q = point();
  for (int i = 0; i < 1000; ++i) store.search(qs[i % qs.size()], k);
  const auto ours_us = time_us(queries, [&](int i) { store.search(qs[i % qs.size()], k); });
  const auto ours = percentiles(ours_us);
  // Where the time goes: the host's part of a search (submit returns once the work is queued)
  // and the wait for its answers; and the library's floor, the same search on a one-point store
  // (every fixed cost: host, copies, launches, the kernels' dependent steps).
  std::vector<double> submit_us, get_us;
  for (int i = 0; i < queries; ++i) {
    const auto a = std::chrono::steady_clock::now();
    auto ticket = store.submit(qs[i % qs.size()], k);
    const auto b = std::chrono::steady_clock::now();
    ticket.get();
    const auto c = std::chrono::steady_clock::now();
    submit_us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    get_us.push_back(std::chrono::duration<double, std::micro>(c - b).count());
  }
  const auto submit_part = percentiles(submit_us), get_part = percentiles(get_us);
  // A caller whose batches vary: 1, 2, 3, 4 queries in turn (each call's own latency).
  std::vector<std::vector<float>> mixed(4096);
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    for (std::size_t j = 0; j <= i % 4; ++j) {
      const auto& q = qs[(i * 4 + j) % qs.size()];
      mixed[i].insert(mixed[i].end(), q.begin(), q.end());
    }
  }
  for (int i = 0; i < 1000; ++i) store.search(mixed[i % mixed.size()], k);
  const auto mixed_us = time_us(queries, [&](int i) { store.search(mixed[i % mixed.size()], k); });
  const auto mixed_part = percentiles(mixed_us);
  StoreConfig tiny_config = config;
  tiny_config.capacity_hint = 1;
  tiny_config.queue_capacity = 16;
  ReferenceSet tiny(tiny_config);
  tiny.insert(0, point());
  tiny.publish();
  for (int i = 0; i < 1000; ++i) tiny.search(qs[i % qs.size()], k);
  const auto one_point_us = time_us(queries, [&](int i) { tiny.search(qs[i % qs.size()], k); });
  const auto one_point = percentiles(one_point_us);

  std::printf("device %s: one query, %zu x 2 store (%s), k = %zu, %d timed queries after 1000 warm-up\n",
              store.backend_name().c_str(), n, to_string(metric).data(), k, queries);
  std::printf("%-40s %9s %9s %9s %9s\n", "path", "p50 us", "p99 us", "p99.9 us", "mean us");
  auto row = [](const char* name, const Percentiles& p) {
    std::printf("%-40s %9.1f %9.1f %9.1f %9.1f\n", name, p.p50, p.p99, p.p999, p.mean);
  };
  row("raw floor: H2D + empty kernel + D2H", raw);
  row("raw floor as a CUDA graph", raw_graph);
  row("zero-copy kernel (host memory in and out)", zero_copy);
  row("streamknn search (host to host)", ours);
  row("  of which submit (host, until queued)", submit_part);
  row("  of which get (wait + unpack)", get_part);
  row("streamknn search, one-point store", one_point);
  row("streamknn, batches of 1, 2, 3, 4 in turn", mixed_part);
  if (std::FILE* csv = std::fopen(args["--csv"].c_str(), "w")) {
    std::fprintf(csv, "path,n,k,metric,p50_us,p99_us,p999_us,mean_us\n");
    for (auto [name, p] : {std::pair<const char*, Percentiles>{"raw", raw}, {"raw_graph", raw_graph},
                           {"zero_copy", zero_copy}, {"streamknn", ours}, {"submit", submit_part}, {"get", get_part},
                           {"one_point_store", one_point}, {"mixed_batches_1_4", mixed_part}}) {
      std::fprintf(csv, "%s,%zu,%zu,%s,%.2f,%.2f,%.2f,%.2f\n", name, n, k, to_string(metric).data(), p.p50, p.p99,
                   p.p999, p.mean);
    }
    std::fclose(csv);
  }
  // --samples FILE: every timed query (us) of each path, in order, for distributions.
  if (args.count("--samples")) {
    if (std::FILE* out = std::fopen(args["--samples"].c_str(), "w")) {
      std::fprintf(out, "raw,raw_graph,zero_copy,streamknn,submit,get,one_point_store\n");
      for (int i = 0; i < queries; ++i) {
        std::fprintf(out, "%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", raw_us[i], raw_graph_us[i], zero_copy_us[i], ours_us[i],
                     submit_us[i], get_us[i], one_point_us[i]);
      }
      std::fclose(out);
    }
  }
}
