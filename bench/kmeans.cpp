// bench_kmeans: exact K-means (streamknn/kmeans.hpp) on the seed study's grid and beyond.
//
//   bench_kmeans --grid  [--backend cuda]   1,000,000 points; 4/16/32 clusters x 2/16/256 features;
//                                           300 iterations or to convergence (iterations reported)
//   bench_kmeans --large [--backend cuda]   10,000,000 x 128, 1,024 clusters, 20 iterations
//   bench_kmeans --cpu                      100,000 x 32, 64 clusters on the CPU backend
//   bench_kmeans --n N --d D --k K [--iters I]   one shape
//   common: [--repeats 3] [--warmup 1] [--warmup-ms 200] [--seed 1] [--threads 0] [--csv kmeans.csv]
//           [--fresh]   a new KMeans object for every fit, so each pays what a program's one fit
//                       does (its device memory, its stream and, for host points, the pinned ring
//                       they are staged through); without it the fits of one object reuse the
//                       memory it keeps (streamknn/kmeans.hpp: Memory)
//           [--input host|device|both]   where the points are handed over (GPU runs): host memory
//                                        (fit, which copies them to the device) or device memory
//                                        (fit_device, read in place; the copy there is untimed)
//
// Data and starts come from a counter-based generator (splitmix64) that bench/peers_kmeans.py
// reproduces bit for bit, so the peers cluster the same points from the same centroids. Each
// shape runs untimed fits until both `warmup` fits and `warmup-ms` milliseconds have passed (one
// fit of a few milliseconds does not bring an idle device and a new process to a steady state),
// then `repeats` timed ones (CUDA events on the GPU, steady clock on the CPU); the table and the
// CSV give the median and the minimum, the iterations run and, for the grid, the seed study's
// own time for the cell. Public API only.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "streamknn/kmeans.hpp"
#include "streamknn/reference_set.hpp"

#if defined(STREAMKNN_BENCH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

using bench::splitmix64;
using bench::unit_float;

std::uint64_t hash(std::uint64_t seed, std::uint64_t tag, std::uint64_t a, std::uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed ^ tag) ^ a) ^ b);
}

/// n points in d dimensions around `blobs` centres in [-10, 10)^d, noise uniform in [-1, 1).
std::vector<float> make_points(std::size_t n, std::size_t d, std::size_t blobs, std::uint64_t seed) {
  std::vector<float> centres(blobs * d), x(n * d);
  for (std::size_t b = 0; b < blobs; ++b) {
    for (std::size_t j = 0; j < d; ++j) centres[b * d + j] = 20.0f * unit_float(hash(seed, 1, b, j)) - 10.0f;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = std::size_t(hash(seed, 2, i, 0) % blobs);
    for (std::size_t j = 0; j < d; ++j) x[i * d + j] = centres[b * d + j] + (2.0f * unit_float(hash(seed, 3, i, j)) - 1.0f);
  }
  return x;
}

/// The starting centroids: the points hash(seed, 4, c, 0) mod n.
std::vector<float> make_start(const std::vector<float>& x, std::size_t n, std::size_t d, std::size_t k,
                              std::uint64_t seed) {
  std::vector<float> c(k * d);
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t p = std::size_t(hash(seed, 4, i, 0) % n);
    std::copy_n(x.begin() + std::ptrdiff_t(p * d), d, c.begin() + std::ptrdiff_t(i * d));
  }
  return c;
}

/// The seed study's times (1,000,000 points, 300 iterations, a Colab GPU), or 0.
double seed_seconds(std::size_t k, std::size_t d) {
  static const std::map<std::pair<std::size_t, std::size_t>, double> t = {
      {{4, 2}, 0.353514},   {{4, 16}, 1.115973},  {{4, 256}, 20.048042}, {{16, 2}, 0.272245}, {{16, 16}, 1.490182},
      {{16, 256}, 46.201309}, {{32, 2}, 0.450959}, {{32, 16}, 1.943135}, {{32, 256}, 74.722580}};
  const auto it = t.find({k, d});
  return it == t.end() ? 0.0 : it->second;
}

struct Shape {
  std::string mode;
  std::size_t n, d, k, iters;
};

struct Row {
  Shape shape;
  std::string backend, input;
  std::size_t iterations = 0;
  bool converged = false;
  double median = 0, best = 0, inertia = 0, seed = 0;
};

/// Seconds of one call of fit: CUDA events on the legacy default stream for a GPU run (the fit
/// waits for its results before it returns), else the steady clock.
double timed(const std::function<void()>& fit, bool gpu) {
#if defined(STREAMKNN_BENCH_CUDA)
  if (gpu) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, 0);
    fit();
    cudaEventRecord(stop, 0);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / 1e3;
  }
#endif
  (void)gpu;
  const auto t0 = std::chrono::steady_clock::now();
  fit();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The points in device memory for fit_device (nullptr where the build has no CUDA).
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<float>& x) {
#if defined(STREAMKNN_BENCH_CUDA)
    void* p = nullptr;
    if (cudaMalloc(&p, x.size() * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      std::fprintf(stderr, "cannot copy %zu floats to the device\n", x.size());
      std::exit(1);
    }
    p_ = static_cast<float*>(p);
#else
    (void)x;
#endif
  }
  ~DeviceCopy() {
#if defined(STREAMKNN_BENCH_CUDA)
    cudaFree(p_);
#endif
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  const float* get() const { return p_; }

 private:
  float* p_ = nullptr;
};

/// Untimed fits until at least `fits` of them and `ms` milliseconds have passed.
void warm_up(const std::function<void()>& fit, std::size_t fits, double ms) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t w = 0;; ++w) {
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (w >= fits && elapsed >= ms) return;
    fit();
  }
}

struct Timing {
  std::size_t warmup = 1;    // untimed fits, at least
  double warmup_ms = 200;    // untimed milliseconds, at least
  std::size_t repeats = 3;   // timed fits
  bool fresh = false;        // a new KMeans object for every fit
};

Row run(const Shape& s, const std::vector<float>& x, streamknn::BackendKind backend, bool on_device,
        std::size_t threads, const Timing& timing, std::uint64_t seed) {
  streamknn::KMeansConfig c;
  c.clusters = s.k;
  c.max_iter = s.iters;
  c.tol = 0;  // to convergence (an unchanged labelling) or max_iter
  c.init = streamknn::KMeansInit::Given;
  c.initial_centroids = make_start(x, s.n, s.d, s.k, seed);
  c.backend = backend;
  c.cpu_threads = threads;
  const streamknn::KMeans kept(c);
  streamknn::KMeansResult r;
  std::unique_ptr<DeviceCopy> dev;
  if (on_device) dev = std::make_unique<DeviceCopy>(x);
  const auto fit = [&] {
    const auto fit_with = [&](const streamknn::KMeans& km) {
      r = on_device ? km.fit_device(dev->get(), s.n, s.d) : km.fit(x, s.d);
    };
    if (timing.fresh) {
      fit_with(streamknn::KMeans(c));
    } else {
      fit_with(kept);
    }
  };
  warm_up(fit, timing.warmup, timing.warmup_ms);
  std::vector<double> times;
  const bool gpu = backend != streamknn::BackendKind::Cpu && streamknn::cuda_available();
  for (std::size_t i = 0; i < timing.repeats; ++i) times.push_back(timed(fit, gpu));
  Row row;
  row.shape = s;
  row.backend = r.backend == streamknn::BackendKind::Cuda ? "cuda" : "cpu";
  row.input = on_device ? "device" : "host";
  row.iterations = r.iterations;
  row.converged = r.converged;
  row.median = bench::median(times);
  row.best = *std::min_element(times.begin(), times.end());
  row.inertia = r.inertia;
  row.seed = s.mode == "grid" ? seed_seconds(s.k, s.d) : 0.0;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {
      {"--backend", "auto"}, {"--repeats", "3"},  {"--warmup", "1"},          {"--warmup-ms", "200"},
      {"--seed", "1"},       {"--threads", "0"},  {"--csv", "kmeans.csv"},    {"--n", "0"},
      {"--d", "0"},          {"--k", "0"},        {"--iters", "300"},         {"--input", "host"}};
  std::vector<Shape> shapes;
  bool fresh = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--grid") {
      for (const std::size_t k : {4, 16, 32}) {
        for (const std::size_t d : {2, 16, 256}) shapes.push_back({"grid", 1000000, d, k, 300});
      }
    } else if (a == "--large") {
      shapes.push_back({"large", 10000000, 128, 1024, 20});
    } else if (a == "--fresh") {
      fresh = true;
    } else if (a == "--cpu") {
      shapes.push_back({"cpu", 100000, 32, 64, 300});
      args["--backend"] = "cpu";
    } else if (args.count(a) && i + 1 < argc) {
      args[a] = argv[++i];
    } else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of bench/kmeans.cpp)\n", a.c_str());
      return 2;
    }
  }
  if (std::stoul(args["--n"]) > 0) {
    shapes.push_back({"shape", std::stoul(args["--n"]), std::stoul(args["--d"]), std::stoul(args["--k"]),
                      std::stoul(args["--iters"])});
  }
  if (shapes.empty()) {
    std::fprintf(stderr, "nothing to run: give --grid, --large, --cpu or --n/--d/--k\n");
    return 2;
  }
  const std::string b = args["--backend"];
  const auto backend = b == "cpu" ? streamknn::BackendKind::Cpu
                       : b == "cuda" ? streamknn::BackendKind::Cuda
                                     : streamknn::BackendKind::Auto;
  const std::string input = args["--input"];
  if (input != "host" && input != "device" && input != "both") {
    std::fprintf(stderr, "--input %s: choose host, device or both\n", input.c_str());
    return 2;
  }
  std::vector<bool> inputs;
  if (input != "device") inputs.push_back(false);
  if (input != "host") inputs.push_back(true);
  if (inputs.back() && (backend == streamknn::BackendKind::Cpu || !streamknn::cuda_available())) {
    std::fprintf(stderr, "--input %s needs the CUDA backend and a device\n", input.c_str());
    return 2;
  }
  std::FILE* csv = std::fopen(args["--csv"].c_str(), "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", args["--csv"].c_str());
    return 1;
  }
  std::fprintf(csv, "# bench_kmeans");
  for (int i = 1; i < argc; ++i) std::fprintf(csv, " %s", argv[i]);
  std::fprintf(csv, "\nmode,backend,input,n,d,k,max_iter,iterations,converged,median_s,min_s,per_iteration_ms,inertia,"
                    "seed_study_s,speedup_vs_seed\n");
  std::printf("%-6s %-5s %-6s %10s %5s %5s %6s %5s %10s %10s %10s %10s %9s\n", "mode", "back", "input", "n", "d", "k",
              "iters", "conv", "median s", "min s", "ms/iter", "seed s", "vs seed");
  const Timing timing{std::stoul(args["--warmup"]), std::stod(args["--warmup-ms"]), std::stoul(args["--repeats"]),
                      fresh};
  for (const Shape& s : shapes) {
    const std::uint64_t seed = std::stoull(args["--seed"]);
    const auto x = make_points(s.n, s.d, s.k, seed);
    for (const bool on_device : inputs) {
      const Row r = run(s, x, backend, on_device, std::stoul(args["--threads"]), timing, seed);
      const double per = r.median / double(r.iterations) * 1e3;
      const double speedup = r.seed > 0 ? r.seed / r.median : 0.0;
      std::printf("%-6s %-5s %-6s %10zu %5zu %5zu %6zu %5s %10.4f %10.4f %10.3f %10.3f %8.1fx\n", s.mode.c_str(),
                  r.backend.c_str(), r.input.c_str(), s.n, s.d, s.k, r.iterations, r.converged ? "yes" : "no",
                  r.median, r.best, per, r.seed, speedup);
      std::fprintf(csv, "%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%d,%.6f,%.6f,%.4f,%.9g,%.6f,%.2f\n", s.mode.c_str(),
                   r.backend.c_str(), r.input.c_str(), s.n, s.d, s.k, s.iters, r.iterations, r.converged ? 1 : 0,
                   r.median, r.best, per, r.inertia, r.seed, speedup);
      std::fflush(stdout);
    }
  }
  std::fclose(csv);
  return 0;
}
