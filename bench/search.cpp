// bench/search: exact k-NN throughput on the seed paper's shapes against the hardware floor.
//   search [--shapes mnist,imagenet,googlenews] [--k 64,128] [--q 1,2,4,8,12,16,32,64]
//          [--reps 30] [--sets 3] [--csv out.csv] [--split 1] [--device 1] [--spatial auto|always|off]
//          [--reduced auto|always|off] [--format float16|int8] [--moves M [--drift S]] [--copies C]
// For every (shape, K, Q): builds the store once through the public API (random uniform
// data, fixed seed), then times searches host-to-host (host queries in, host answers out)
// over `sets` different query sets, reps each after a warm-up, and reports the median.
// Floor = max(store bytes / measured read bandwidth, 3 N D Q flops / measured FP32 rate)
// (direct-form distances: a subtract and an FMA per element). Prints a table and writes CSV.
// --split 1 times the searches as submit() and Ticket::get() and prints each part's median
// under the row (the host's part of a search against its wait for the device and the unpacking).
// --moves M publishes M random moves before each timed search (untimed; the publishes' median is
// printed under the row), so every search reads a snapshot it has not seen (with a spatial index:
// the rebuild is part of the search's time).
// --drift S makes those moves small: each moved point goes from where it is by up to S per
// coordinate (uniform; degrees under haversine), as tracked objects move, instead of anywhere.
// --copies C stores each drawn point C times (consecutive ids), as snapped positions hold several
// objects: with C > k every query's k-th place ties with more points than the screen keeps, so
// the exact re-rank's certificate fails and its fallback answers (docs/cuda.md, E5).
// --spatial sets StoreConfig::spatial_index (stores of one or two dimensions; auto by default).
// --reduced sets StoreConfig::reduced_screen (the float16 copy and its screen; auto by default):
// off against auto in one run is the copy's same-run A/B.
// --device 1 also times search_device (queries and answers in device memory, streamknn/device.hpp)
// on the same query sets and prints under the row the median GPU time between CUDA events recorded
// on the caller's stream around it, the call's own (enqueueing) time and the host-to-host time of
// the call and get(): the search without the host's staging, its copies and the answers' way to
// the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bandwidth.hpp"
#include "bench/bench_util.hpp"
#include "bench/cuda_check.hpp"
#include "streamknn/device.hpp"
#include "streamknn/streamknn.hpp"

namespace {

using bench::check;
using bench::median;
using bench::numbers;
using bench::split;

struct Shape {
  std::string name;
  std::size_t n, d;
};


/// Device memory of n T, freed with its holder.
template <class T>
std::unique_ptr<T, decltype(&cudaFree)> device_array(std::size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  return {static_cast<T*>(p), &cudaFree};
}

/// Medians of search_device over the query sets (copied to the device beforehand): the GPU time
/// between events recorded on the caller's stream before the call and after it (before get()),
/// the call alone (the host's enqueueing), and the call plus get() host to host.
struct DeviceTimes {
  double gpu_ms, call_ms, total_ms;
};
DeviceTimes time_device_search(const streamknn::ReferenceSet& store, const std::vector<std::vector<float>>& query_sets,
                               std::size_t dim, std::size_t k, int reps) {
  using namespace streamknn;
  const std::size_t q = query_sets[0].size() / dim;
  std::vector<std::unique_ptr<float, decltype(&cudaFree)>> queries;
  for (const auto& set : query_sets) {
    queries.push_back(device_array<float>(set.size()));
    check(cudaMemcpy(queries.back().get(), set.data(), set.size() * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy(queries)");
  }
  const auto distances = device_array<float>(q * k);
  const auto ids = device_array<PointId>(q * k);
  cudaStream_t raw_stream = nullptr;
  check(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream(raw_stream, &cudaStreamDestroy);
  cudaEvent_t raw_events[2] = {};
  for (cudaEvent_t& e : raw_events) check(cudaEventCreate(&e), "cudaEventCreate");
  const std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> start(raw_events[0], &cudaEventDestroy),
      stop(raw_events[1], &cudaEventDestroy);
  auto search = [&](std::size_t set) {
    const DeviceQueries in{queries[set].get(), q, 0, 0, nullptr};
    return search_device(store, in, k, DeviceNeighbors{distances.get(), ids.get()},
                         reinterpret_cast<std::uintptr_t>(stream.get()));
  };
  for (int w = 0; w < 3; ++w) search(0).get();  // warm-up (workspace)
  std::vector<double> gpu_ms, call_ms, total_ms;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    check(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord");
    Ticket<std::uint64_t> ticket = search(std::size_t(r) % query_sets.size());
    check(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord");
    const auto called = std::chrono::steady_clock::now();
    ticket.get();
    const auto b = std::chrono::steady_clock::now();
    call_ms.push_back(std::chrono::duration<double, std::milli>(called - a).count());
    total_ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    check(cudaEventSynchronize(stop.get()), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
    gpu_ms.push_back(ms);
  }
  return {median(gpu_ms), median(call_ms), median(total_ms)};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace streamknn;
  std::map<std::string, std::string> args{{"--shapes", "mnist,imagenet,googlenews"},
                                          {"--k", "64,128"},
                                          {"--q", "1,2,4,8,12,16,32,64"},
                                          {"--reps", "30"},
                                          {"--sets", "3"},
                                          {"--csv", "search.csv"},
                                          {"--backend", "cuda"},
                                          {"--metric", "l2"},
                                          {"--split", "0"},
                                          {"--device", "0"},
                                          {"--spatial", "auto"},
                                          {"--reduced", "auto"},
                                          {"--format", "float16"},
                                          {"--moves", "0"},
                                          {"--drift", "0"},
                                          {"--copies", "1"}};
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  const std::map<std::string, Shape> known{{"mnist", {"MNIST-like", 70000, 784}},
                                           {"imagenet", {"ImageNet-like", 1275219, 128}},
                                           {"googlenews", {"GoogleNews-like", 3000000, 300}},
                                           {"small", {"small", 100000, 128}},
                                           {"tiny", {"tiny (fixed cost)", 1000, 16}},
                                           {"gis100k", {"low-dim 100k x 2", 100000, 2}},
                                           {"gis1m", {"low-dim 1M x 2", 1000000, 2}},
                                           {"gis10m", {"low-dim 10M x 2", 10000000, 2}}};
  const auto ks = numbers(args["--k"]), qs = numbers(args["--q"]);
  const int reps = std::stoi(args["--reps"]), sets = std::stoi(args["--sets"]);
  const bool split_times = args["--split"] != "0";
  const bool device_times = args["--device"] != "0";
  const std::size_t moves = std::stoul(args["--moves"]);
  const float drift = std::stof(args["--drift"]);
  const std::size_t copies = std::stoul(args["--copies"]);
  if (copies == 0) throw std::invalid_argument("--copies must be at least 1");
  const bench::Ceilings ceil = bench::measure_ceilings();
  std::printf("device %s, %d SMs: read %.0f GB/s, FP32 %.1f TFLOP/s (measured)\n", ceil.device.c_str(), ceil.sms,
              ceil.read_gbps, ceil.fp32_tflops);
  std::FILE* csv = std::fopen(args["--csv"].c_str(), "w");
  std::fprintf(csv, "# device,%s,read_gbps,%.1f,fp32_tflops,%.2f\n", ceil.device.c_str(), ceil.read_gbps, ceil.fp32_tflops);
  std::fprintf(csv, "shape,N,D,K,Q,median_ms,p10_ms,p90_ms,qps,floor_ms,achieved_over_floor\n");
  std::printf("%-16s %8s %5s %5s %4s %10s %10s %10s %8s\n", "shape", "N", "D", "K", "Q", "ms", "q/s", "floor ms", "floor%");
  for (const auto& name : split(args["--shapes"])) {
    const Shape shape = known.at(name);
    std::mt19937 g(42);
    std::uniform_real_distribution<float> u(0, 1);
    StoreConfig config;
    config.dim = shape.d;
    config.metric = parse_metric(args["--metric"]);
    if (config.metric == Metric::Haversine && shape.d != 2) continue;
    config.capacity_hint = shape.n;
    config.queue_capacity = 1 << 16;
    config.backend = args["--backend"] == "cpu" ? BackendKind::Cpu : BackendKind::Cuda;
    const std::string spatial = args["--spatial"];
    if (spatial != "auto" && spatial != "always" && spatial != "off") throw std::invalid_argument("--spatial auto|always|off");
    config.spatial_index = spatial == "always" ? SpatialIndex::Always : spatial == "off" ? SpatialIndex::Off : SpatialIndex::Auto;
    const std::string reduced = args["--reduced"];
    if (reduced != "auto" && reduced != "always" && reduced != "off") throw std::invalid_argument("--reduced auto|always|off");
    config.reduced_screen = reduced == "always" ? ReducedScreen::Always : reduced == "off" ? ReducedScreen::Off : ReducedScreen::Auto;
    const std::string format = args["--format"];
    if (format != "float16" && format != "int8") throw std::invalid_argument("--format float16|int8");
    config.reduced_format = format == "int8" ? ReducedFormat::Int8 : ReducedFormat::Float16;
    ReferenceSet store(config);
    std::vector<float> v(shape.d);
    const bool geo = config.metric == Metric::Haversine;  // (lat, lon) in degrees
    auto fill = [&](float* x, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i) x[i] = geo ? (i % 2 ? 360 * u(g) - 180 : 120 * u(g) - 60) : u(g);
    };
    std::vector<float> where;  // each point's vector, where moves drift
    if (moves > 0 && drift > 0) where.resize(shape.n * shape.d);
    const auto t0 = std::chrono::steady_clock::now();
    for (PointId id = 0; id < shape.n; ++id) {
      if (id % copies == 0) fill(v.data(), v.size());
      if (!where.empty()) std::copy(v.begin(), v.end(), where.begin() + id * shape.d);
      while (!store.try_push(Update::insert(id, v))) store.publish();
    }
    store.publish();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("# %s: %zu x %zu loaded in %.1f s on %s\n", shape.name.c_str(), shape.n, shape.d, load_s,
                store.backend_name().c_str());
    // The floor counts the bytes the data needs (N x D floats), not the library's padding.
    const double store_bytes = double(shape.n) * shape.d * 4;
    for (std::size_t k : ks) {
      for (std::size_t q : qs) {
        std::vector<std::vector<float>> query_sets(sets, std::vector<float>(q * shape.d));
        for (auto& qset : query_sets) fill(qset.data(), qset.size());
        for (int w = 0; w < 3; ++w) store.search(query_sets[0], k);  // warm-up (graphs, workspace)
        std::vector<double> ms, submit_ms, get_ms, publish_ms;
        for (int r = 0; r < reps; ++r) {
          const auto& qset = query_sets[r % sets];
          if (moves > 0) {  // a store that changes between searches: each search sees a new snapshot
            for (std::size_t m = 0; m < moves; ++m) {
              const PointId id = g() % shape.n;
              if (where.empty()) {
                fill(v.data(), v.size());
              } else {  // a small step from where the point is, kept inside the data's range
                float* x = where.data() + id * shape.d;
                for (std::size_t i = 0; i < shape.d; ++i) {
                  const float lo = geo ? (i % 2 ? -180.0f : -60.0f) : 0.0f, hi = geo ? (i % 2 ? 180.0f : 60.0f) : 1.0f;
                  x[i] = std::clamp(x[i] + drift * (2 * u(g) - 1), lo, hi);
                }
                std::copy(x, x + shape.d, v.begin());
              }
              while (!store.try_push(Update::move(id, v))) store.publish();
            }
            const auto p0 = std::chrono::steady_clock::now();
            store.publish();
            publish_ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count());
          }
          const auto a = std::chrono::steady_clock::now();
          Neighbors nn;
          if (split_times) {
            Ticket<Neighbors> ticket = store.submit(qset, k);
            const auto submitted = std::chrono::steady_clock::now();
            nn = ticket.get();
            submit_ms.push_back(std::chrono::duration<double, std::milli>(submitted - a).count());
            get_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - submitted).count());
          } else {
            nn = store.search(qset, k);
          }
          const auto b = std::chrono::steady_clock::now();
          ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
          if (nn.ids.size() != q * k) std::printf("bad result size\n");
        }
        std::vector<double> sorted = ms;
        std::sort(sorted.begin(), sorted.end());
        const double med = median(ms), p10 = sorted[sorted.size() / 10], p90 = sorted[sorted.size() * 9 / 10];
        const double floor_ms = std::max(store_bytes / (ceil.read_gbps * 1e9),
                                         3.0 * shape.n * shape.d * q / (ceil.fp32_tflops * 1e12)) * 1e3;
        std::printf("%-16s %8zu %5zu %5zu %4zu %10.4f %10.0f %10.4f %7.1f%%\n", shape.name.c_str(), shape.n, shape.d, k,
                    q, med, q / (med * 1e-3), floor_ms, 100 * floor_ms / med);
        std::fprintf(csv, "%s,%zu,%zu,%zu,%zu,%.5f,%.5f,%.5f,%.1f,%.5f,%.4f\n", shape.name.c_str(), shape.n, shape.d, k, q,
                     med, p10, p90, q / (med * 1e-3), floor_ms, floor_ms / med);
        if (split_times) std::printf("#   submit %.4f ms, get %.4f ms (medians)\n", median(submit_ms), median(get_ms));
        if (moves > 0) std::printf("#   publish of %zu moves %.4f ms (median, untimed above)\n", moves, median(publish_ms));
        if (device_times) {
          const DeviceTimes t = time_device_search(store, query_sets, shape.d, k, reps);
          std::printf("#   device-resident: %.4f ms on the GPU (events), call %.4f ms, %.4f ms host to host (medians)\n",
                      t.gpu_ms, t.call_ms, t.total_ms);
        }
        std::fflush(stdout);
      }
    }
  }
  std::fclose(csv);
}
