// GPU suite (skips without a CUDA device): KMeans::fit_device, points read in place from device
// memory, against KMeans::fit of the same points in host memory on the CPU backend. The contract
// is identity (docs/kmeans.md): the same labels, centroid bits, inertia and iteration count, for
// given, random and k-means++ starts, empty-cluster relocations (their rows gathered from the
// device), tol's scale (the mean variance, computed on the device: a tol stop in the same
// iteration), rows wider than one block's columns, the points written on the caller's stream
// just before the call, and one object's fits from device and host memory in turn. Bad floats are
// named as fit() names them; pointers that are not device memory, backend Cpu and bad shapes are
// refused. Built with CUDA (links the CUDA runtime).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "gpu/kmeans_cases.hpp"
#include "streamknn/kmeans.hpp"
#include "support/test_support.hpp"

using namespace test;
using kmeans_cases::clustered;
using kmeans_cases::first_points;

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what, ": ", cudaGetErrorString(e));
}

/// The points in device memory, poisoned with NaN first, then written by a copy queued on a
/// stream of the caller's that the fit must wait for.
struct DevicePoints {
  explicit DevicePoints(const std::vector<float>& x) : count(x.size()) {
    ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(count, 1) * sizeof(float)), "cudaMalloc");
    ok(cudaMallocHost(reinterpret_cast<void**>(&staged), std::max<std::size_t>(count, 1) * sizeof(float)),
       "cudaMallocHost");
    ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ok(cudaMemset(p, 0xff, count * sizeof(float)), "cudaMemset");  // 0xffffffff: a NaN
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::copy(x.begin(), x.end(), staged);
    ok(cudaMemcpyAsync(p, staged, count * sizeof(float), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  }
  ~DevicePoints() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    cudaFreeHost(staged);
    cudaFree(p);
  }
  DevicePoints(const DevicePoints&) = delete;
  DevicePoints& operator=(const DevicePoints&) = delete;
  std::uintptr_t ready() const { return reinterpret_cast<std::uintptr_t>(stream); }
  float* p = nullptr;
  float* staged = nullptr;
  cudaStream_t stream = nullptr;
  std::size_t count;
};

/// fit_device of x (n x d, copied to the device) against the CPU backend's fit of x.
void check_same(KMeansConfig c, const std::vector<float>& x, std::size_t d) {
  c.backend = BackendKind::Cpu;
  const auto cpu = KMeans(c).fit(x, d);
  c.backend = BackendKind::Cuda;
  const DevicePoints dev(x);
  const auto gpu = KMeans(c).fit_device(dev.p, x.size() / d, d, dev.ready());
  CHECK(gpu.backend == BackendKind::Cuda);
  CHECK(gpu.iterations == cpu.iterations);
  CHECK(gpu.converged == cpu.converged);
  CHECK(gpu.labels == cpu.labels);
  CHECK(gpu.centroids == cpu.centroids);
  CHECK(gpu.inertia == cpu.inertia);
}

/// The message of an InvalidArgument from f, or "no exception".
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace

TEST_CASE("kmeans fit_device: identical to fit on the CPU, every start") {
  auto g = rng(301);
  kmeans_cases::each_shape(g, [](const KMeansConfig& c, const std::vector<float>& x, std::size_t d) {
    check_same(c, x, d);
  });
  const auto x = clustered(g, 30000, 10, 8, false);
  for (const KMeansInit init : {KMeansInit::KMeansPlusPlus, KMeansInit::Random}) {
    CAPTURE(int(init));
    KMeansConfig c;
    c.clusters = 8;
    c.init = init;
    c.n_init = 3;
    c.seed = 23;
    check_same(c, x, 10);
  }
}

TEST_CASE("kmeans fit_device: empty clusters relocated from rows on the device") {
  auto g = rng(302);
  for (const std::size_t d : {3u, 20u, 256u}) {
    CAPTURE(d);
    const std::size_t n = 6000, k = 30;
    std::vector<float> centre(4 * d), x(n * d);
    for (auto& e : centre) e = float(g() % 1000);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t b = g() % 4;
      for (std::size_t j = 0; j < d; ++j) x[i * d + j] = centre[b * d + j] + (j < 3 ? float(g() % 2) : 0.0f);
    }
    KMeansConfig c = first_points(x, d, k, 60);
    for (std::size_t i = 0; i < k; ++i) {
      std::copy_n(x.begin() + std::ptrdiff_t((i % 3) * d), d, c.initial_centroids.begin() + std::ptrdiff_t(i * d));
    }
    c.tol = 0;
    check_same(c, x, d);
  }
}

TEST_CASE("kmeans fit_device: one object's fits from device and host memory share its kept memory") {
  // The object keeps its last fit's device arrays and its copy of host points (kmeans.hpp: Memory):
  // device fits after host fits and after larger ones (the copy and the arrays still holding
  // their values) equal fresh CPU fits.
  auto g = rng(305);
  KMeansConfig c;
  c.clusters = 8;
  c.init = KMeansInit::Random;
  c.seed = 11;
  c.tol = 0;
  c.backend = BackendKind::Cuda;
  const KMeans gpu(c);
  c.backend = BackendKind::Cpu;
  const KMeans cpu(c);
  for (const auto& [n, d, on_device] : {std::tuple<std::size_t, std::size_t, bool>{40000, 6, false},
                                        {3000, 2, true}, {40000, 6, true}, {5000, 3, false}, {30000, 2, true}}) {
    CAPTURE(n);
    CAPTURE(on_device);
    const auto x = clustered(g, n, d, 5, false);
    const auto want = cpu.fit(x, d);
    KMeansResult got;
    if (on_device) {
      const DevicePoints dev(x);
      got = gpu.fit_device(dev.p, n, d, dev.ready());
    } else {
      got = gpu.fit(x, d);
    }
    CHECK(got.labels == want.labels);
    CHECK(got.centroids == want.centroids);
    CHECK(got.inertia == want.inertia);
    CHECK(got.iterations == want.iterations);
  }
}

TEST_CASE("kmeans fit_device: small fits (sanitizer-sized)") {
  // Every kernel of a device-input fit on small inputs, for compute-sanitizer: the check, the
  // variance passes over two column groups, gathered rows (random start, relocations), the sums
  // in shared memory and (64 x 64: a table too large for it) in global memory, and runs of queued
  // iterations stopped by max_iter and by unchanged labels (one-step kernels at 300 and 64
  // features, the run kernel at 2 and 3, with empty clusters at 3).
  auto g = rng(304);
  {
    const auto x = clustered(g, 3000, 300, 5, false);
    auto c = first_points(x, 300, 5, 10);
    c.tol = 1e-3;
    check_same(c, x, 300);
  }
  {
    const auto x = clustered(g, 3000, 64, 20, false);
    check_same(first_points(x, 64, 64, 8), x, 64);
  }
  {
    const auto x = clustered(g, 2000, 2, 6, false);
    for (const std::size_t max_iter : {9, 300}) {
      auto c = first_points(x, 2, 16, max_iter);
      c.tol = 0;
      check_same(c, x, 2);
    }
  }
  {
    const auto x = clustered(g, 2000, 3, 4, true);
    auto c = first_points(x, 3, 8, 20);
    for (std::size_t j = 0; j < 3; ++j) c.initial_centroids[3 * 3 + j] = c.initial_centroids[j];
    c.tol = 0;
    check_same(c, x, 3);
    c.init = KMeansInit::Random;
    c.initial_centroids.clear();
    c.seed = 5;
    check_same(c, x, 3);
  }
}

TEST_CASE("kmeans fit_device: a bad float is named as fit names it") {
  auto g = rng(303);
  const std::size_t n = 50000, d = 24;
  const auto clean = clustered(g, n, d, 3, false);
  const std::vector<std::vector<std::size_t>> cases = {{0}, {n * d - 1}, {777 * d + 5}, {40000 * d, 123 * d + 1}};
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {inf, std::nanf(""), 3e38f, -inf};
  int v = 0;
  for (const auto& at : cases) {
    auto x = clean;
    for (const std::size_t i : at) x[i] = values[v++ % 4];
    CAPTURE(at[0]);
    KMeansConfig c;
    c.clusters = 3;
    c.backend = BackendKind::Cpu;
    std::string host = refusal([&] { (void)KMeans(c).fit(x, d); });
    c.backend = BackendKind::Cuda;
    const DevicePoints dev(x);
    std::string device = refusal([&] { (void)KMeans(c).fit_device(dev.p, n, d, dev.ready()); });
    const std::size_t lowest = *std::min_element(at.begin(), at.end());
    CHECK(host.find("KMeans::fit: points row " + std::to_string(lowest / d) + " ") == 0);
    CHECK(device == "KMeans::fit_device" + host.substr(std::string("KMeans::fit").size()));
  }
}

TEST_CASE("kmeans fit_device: refusals name the problem") {
  const std::vector<float> x(40, 1.0f);
  const DevicePoints dev(x);
  ok(cudaStreamSynchronize(dev.stream), "cudaStreamSynchronize");
  KMeansConfig c;
  c.clusters = 2;
  c.backend = BackendKind::Cuda;
  const KMeans km(c);
  CHECK(refusal([&] { (void)km.fit_device(x.data(), 10, 4); }).find("host memory, not device memory") !=
        std::string::npos);
  CHECK(refusal([&] { (void)km.fit_device(dev.staged, 10, 4); }).find("pinned host memory") != std::string::npos);
  CHECK(refusal([&] { (void)km.fit_device(nullptr, 10, 4); }) == "KMeans::fit_device: points is null");
  CHECK(refusal([&] { (void)km.fit_device(dev.p, 10, 0); }) == "KMeans::fit_device: dim=0 must be at least 1");
  CHECK(refusal([&] { (void)km.fit_device(dev.p, 1, 4); }).find("clusters=2 exceeds the 1 points") !=
        std::string::npos);
  c.backend = BackendKind::Cpu;
  CHECK(refusal([&] { (void)KMeans(c).fit_device(dev.p, 10, 4); }).find("config.backend is Cpu") != std::string::npos);
  c.backend = BackendKind::Auto;
  const auto r = KMeans(c).fit_device(dev.p, 10, 4);
  CHECK(r.backend == BackendKind::Cuda);
  CHECK(r.labels.size() == 10);
}
