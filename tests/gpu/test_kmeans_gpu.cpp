// GPU suite (skips without a CUDA device): K-means on the CUDA backend against the CPU backend
// from the same start. The contract is identity: the same labels, the same centroid bits, the
// same inertia and iteration count (docs/kmeans.md). Shapes cover clusters 1..4,096 and dimensions
// 1..1,024 (centroid tiles through shared memory), tied grids, duplicated starts (empty clusters
// and their relocation), clusters of more than 32,768 points, blocks of the run kernel past one
// round of rescans, sums over values of every magnitude, k-means++ and n_init, predict, fits over
// a CUDA reference set's snapshot, repeated empty-cluster relocations, bad floats anywhere in the
// staged copy of the points, and the iterations the CUDA backend queues ahead (one-step kernels,
// or the run kernel) stopping where the host's loop stops (by max_iter, tol, unchanged labels),
// reporting the CPU's iterations to on_iteration, labels brought to the host during later runs
// (then only their changes), and one object's fits reusing the device memory its last fit left
// (from one thread and from several).
#include <algorithm>
#include <array>
#include <thread>

#include "gpu/kmeans_cases.hpp"
#include "streamknn/kmeans.hpp"
#include "support/test_support.hpp"

using namespace test;
using kmeans_cases::clustered;
using kmeans_cases::first_points;

namespace {

KMeansResult run(KMeansConfig c, BackendKind kind, const std::vector<float>& x, std::size_t d) {
  c.backend = kind;
  const auto r = KMeans(c).fit(x, d);
  REQUIRE(r.backend == kind);
  return r;
}

/// relocations: the fit may relocate empty clusters. A fit that stops on unchanged labels in an
/// iteration that relocated one keeps those labels while the relocation moved centroids (as
/// scikit-learn's), so there `predict` is compared across the backends, not with the labels.
void check_same(KMeansConfig c, const std::vector<float>& x, std::size_t d, bool relocations = false) {
  const auto cpu = run(c, BackendKind::Cpu, x, d);
  const auto gpu = run(c, BackendKind::Cuda, x, d);
  CHECK(gpu.iterations == cpu.iterations);
  CHECK(gpu.converged == cpu.converged);
  CHECK(gpu.labels == cpu.labels);
  CHECK(gpu.centroids == cpu.centroids);
  CHECK(gpu.inertia == cpu.inertia);
  c.backend = BackendKind::Cuda;
  const auto predicted = KMeans(c).predict(gpu.centroids, x, d);
  if (relocations) {
    c.backend = BackendKind::Cpu;
    CHECK(predicted == KMeans(c).predict(cpu.centroids, x, d));
  } else {
    CHECK(predicted == gpu.labels);
  }
}

}  // namespace

TEST_CASE("kmeans gpu: identical to the CPU on random shapes") {
  auto g = rng(201);
  kmeans_cases::each_shape(g, [](const KMeansConfig& c, const std::vector<float>& x, std::size_t d) {
    check_same(c, x, d);
  });
}

TEST_CASE("kmeans gpu: empty clusters, ties, long runs, large clusters") {
  auto g = rng(202);
  {  // duplicated starting centroids: empty clusters at once, relocated on the host for both
    const std::size_t n = 4000, d = 5, k = 12;
    auto x = clustered(g, n, d, 6, true);
    auto c = first_points(x, d, k, 100);
    for (std::size_t j = 0; j < d; ++j) c.initial_centroids[3 * d + j] = c.initial_centroids[j];
    c.tol = 0;
    check_same(c, x, d, true);
  }
  {  // two clusters of 40,000 points
    const std::size_t n = 80000, d = 3;
    const auto x = clustered(g, n, d, 2, false);
    auto c = first_points(x, d, 2, 50);
    check_same(c, x, d);
  }
  {  // the run kernel's blocks past one round of rescans (a block takes n / (4 x SMs) points):
     // overlapping blobs move many points an iteration; a tied grid puts close calls everywhere
    const std::size_t d = 2;
    const auto x = clustered(g, 600000, d, 24, false);
    check_same(first_points(x, d, 16, 60), x, d);
    const auto grid = clustered(g, 300000, d, 1, true);
    check_same(first_points(grid, d, 8, 30), grid, d, true);
  }
}

TEST_CASE("kmeans gpu: exact sums over values of every magnitude, in shared and global tables") {
  // Values 1e-30 .. 1e15 in one feature (bits more than 96 binades below its largest are rounded
  // to the unit), both signs, zeros and subnormals, a feature of zeros: the device's sums
  // (12-bit pieces in shared memory at k = 6, 64-bit digits in global memory at k = 400) are the
  // CPU's to the bit, iteration after iteration of moved points.
  auto g = rng(206);
  const std::size_t n = 20000, d = 4;
  auto x = clustered(g, n, d, 6, false);
  std::uniform_int_distribution<int> kind(0, 9), binade(-100, 50);
  for (std::size_t i = 0; i < n; ++i) {
    float& wide = x[i * d];
    const int what = kind(g);
    if (what == 0) wide = 0.0f;
    if (what == 1) wide = std::ldexp(float(1 + kind(g)), -149);                    // subnormal
    if (what >= 2 && what <= 4) wide = std::ldexp(wide, binade(g));                 // 2^-100 .. 2^50
    if (what == 5) wide = -std::ldexp(std::fabs(wide) + 1.0f, binade(g) / 2 + 20);  // large, negative
    x[i * d + 1] = 0.0f;
  }
  for (const std::size_t k : {6u, 400u}) {
    CAPTURE(k);
    auto c = first_points(x, d, k, 30);
    c.tol = 0;
    check_same(c, x, d, true);
  }
}

TEST_CASE("kmeans gpu: k-means++, random starts, n_init") {
  auto g = rng(203);
  const std::size_t n = 6000, d = 10;
  const auto x = clustered(g, n, d, 8, false);
  for (const KMeansInit init : {KMeansInit::KMeansPlusPlus, KMeansInit::Random}) {
    KMeansConfig c;
    c.clusters = 8;
    c.init = init;
    c.n_init = 3;
    c.seed = 17;
    check_same(c, x, d);
  }
}

TEST_CASE("kmeans gpu: over a CUDA reference set's snapshot") {
  // The CUDA store's live points are gathered into rows on its device (float2 slots at d = 2, the
  // float4 tiles elsewhere, a partial last chunk at 37), with erased slots, and an origin
  // subtracted at 6: the same fit as over a CPU store with the same points.
  auto g = rng(204);
  for (const std::size_t d : {2u, 6u, 37u}) {
    CAPTURE(d);
    const std::size_t n = 3000;
    const auto x = clustered(g, n, d, 5, false);
    KMeansResult fits[2];
    std::uint64_t epochs[2] = {0, 0};
    for (const BackendKind kind : {BackendKind::Cpu, BackendKind::Cuda}) {
      StoreConfig sc;
      sc.dim = d;
      sc.backend = kind;
      if (d == 6) sc.origin.assign(d, 1000.0);
      ReferenceSet set(sc);
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<float> p(x.begin() + std::ptrdiff_t(i * d), x.begin() + std::ptrdiff_t(i * d + d));
        if (d == 6) {
          for (auto& v : p) v += 1000.0f;
        }
        set.insert(PointId(i + 1), p);
      }
      set.publish();
      for (std::size_t i = 0; i < n; i += 5) set.erase(PointId(i + 1));
      set.publish();
      KMeansConfig c;
      c.clusters = 5;
      c.seed = 9;
      c.backend = kind;
      fits[kind == BackendKind::Cuda] = KMeans(c).fit(set);
      epochs[kind == BackendKind::Cuda] = set.epoch();
    }
    const KMeansResult &cpu = fits[0], &gpu = fits[1];
    CHECK(gpu.backend == BackendKind::Cuda);
    CHECK(gpu.ids.size() == n - n / 5);
    CHECK(gpu.ids == cpu.ids);
    CHECK(gpu.labels == cpu.labels);
    CHECK(gpu.centroids == cpu.centroids);
    CHECK(gpu.inertia == cpu.inertia);
    CHECK(gpu.iterations == cpu.iterations);
    CHECK(gpu.epoch == epochs[1]);
  }
}

TEST_CASE("kmeans gpu: points staged in several buffers, and refused with the CPU's message") {
  // 300,000 x 16 floats: ten 2 MiB staging buffers, so each of the ring's four is filled again
  // (staged_upload.hpp); a bad float stops the copy and is named as the CPU names it.
  auto g = rng(205);
  const std::size_t n = 300000, d = 16;
  auto x = clustered(g, n, d, 4, false);
  check_same(first_points(x, d, 4, 20), x, d);
  const auto message = [&](BackendKind kind, bool predict) {
    KMeansConfig c;
    c.clusters = 4;
    c.backend = kind;
    try {
      if (predict) {
        (void)KMeans(c).predict(std::vector<float>(d, 0.0f), x, d);
      } else {
        (void)KMeans(c).fit(x, d);
      }
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::size_t bad[] = {n * d - 1, 3 * (std::size_t(1) << 20) + 5, (std::size_t(1) << 20) - 1};
  const float values[] = {std::numeric_limits<float>::infinity(), 3e38f, std::nanf("")};
  for (int i = 0; i < 3; ++i) {  // each lower than the last: the message names the lowest
    x[bad[i]] = values[i];
    for (const bool predict : {false, true}) {
      const std::string cpu = message(BackendKind::Cpu, predict);
      CAPTURE(cpu);
      CHECK(cpu.find("points row " + std::to_string(bad[i] / d)) != std::string::npos);
      CHECK(message(BackendKind::Cuda, predict) == cpu);
    }
  }
}

TEST_CASE("kmeans gpu: a bad float anywhere in the staging ring is named as the CPU names it") {
  // One bad float at a time: first and last float, the ends of a 256 KiB block and of a 2 MiB
  // buffer, the first buffer that reuses a slot of the ring, and two at once (the lower named).
  auto g = rng(207);
  const std::size_t n = 200000, d = 24, block = std::size_t(1) << 16, buffer = std::size_t(1) << 19;
  const auto clean = clustered(g, n, d, 3, false);
  const std::vector<std::vector<std::size_t>> cases = {
      {0}, {n * d - 1}, {block - 1}, {block}, {buffer - 1}, {buffer}, {4 * buffer + 7}, {9 * buffer + 3, 2 * block + 1}};
  for (const auto& at : cases) {
    auto x = clean;
    for (const std::size_t i : at) x[i] = std::numeric_limits<float>::infinity();
    CAPTURE(at[0]);
    std::string messages[2];
    for (const BackendKind kind : {BackendKind::Cpu, BackendKind::Cuda}) {
      KMeansConfig c;
      c.clusters = 3;
      c.backend = kind;
      try {
        (void)KMeans(c).fit(x, d);
        messages[kind == BackendKind::Cuda] = "no exception";
      } catch (const InvalidArgument& e) {
        messages[kind == BackendKind::Cuda] = e.what();
      }
    }
    const std::size_t lowest = *std::min_element(at.begin(), at.end());
    CHECK(messages[0].find("points row " + std::to_string(lowest / d) + " ") != std::string::npos);
    CHECK(messages[1] == messages[0]);
  }
}

TEST_CASE("kmeans gpu: empty clusters again and again, relocated alike") {
  // Tight blobs on a grid (many coinciding points, exact ties) and far more clusters than blobs,
  // started on three points: clusters empty at the first iteration and again later; with fewer
  // places than clusters, at every iteration. The far points come from the device's sort of the
  // costs and its screen (far_points), then the host ranks them exactly, as for the CPU.
  auto g = rng(206);
  struct Shape {
    std::size_t n, d, k, blobs, vary;
  };
  for (const Shape s : {Shape{6000, 3, 30, 4, 3}, Shape{2000, 20, 30, 3, 3}, Shape{200000, 8, 64, 5, 8},
                        Shape{10000, 64, 40, 3, 2}, Shape{50000, 256, 32, 4, 256}}) {
    CAPTURE(s.n);
    CAPTURE(s.d);
    CAPTURE(s.k);
    std::vector<float> centre(s.blobs * s.d), x(s.n * s.d);
    for (auto& e : centre) e = float(g() % 1000);
    for (std::size_t i = 0; i < s.n; ++i) {
      const std::size_t b = g() % s.blobs;
      for (std::size_t j = 0; j < s.d; ++j) x[i * s.d + j] = centre[b * s.d + j] + (j < s.vary ? float(g() % 2) : 0.0f);
    }
    KMeansConfig c = first_points(x, s.d, s.k, 60);
    for (std::size_t i = 0; i < s.k; ++i) {
      std::copy_n(x.begin() + std::ptrdiff_t((i % 3) * s.d), s.d, c.initial_centroids.begin() + std::ptrdiff_t(i * s.d));
    }
    c.tol = 0;
    check_same(c, x, s.d, true);
  }
}

TEST_CASE("kmeans gpu: iterations queued ahead stop where the loop stops") {
  // Queued runs of the one-step kernels are 2, 4, 8, then 16 iterations; the run kernel's (at most
  // 64 clusters and 256 cells, as here) are 32, then 64: stops by max_iter at every place of the
  // first runs and about the run kernel's next two, by tol at a spread of iterations, and by
  // unchanged labels.
  // (An empty cluster stops a run where it occurs: "empty clusters again and again" has one in
  // every iteration.)
  auto g = rng(207);
  for (const std::size_t n : {20000u, 200000u}) {
    const std::size_t d = 2, k = 16;
    const auto x = clustered(g, n, d, 6, false);
    CAPTURE(n);
    std::size_t unlimited = 0;
    {
      auto c = first_points(x, d, k, 300);
      c.tol = 0;
      c.backend = BackendKind::Cpu;
      unlimited = KMeans(c).fit(x, d).iterations;
      CAPTURE(unlimited);
      REQUIRE(unlimited > 31);  // past the first three runs (2 + 4 + 8 after the first iteration)
      check_same(c, x, d);
    }
    std::vector<std::size_t> limits;
    for (std::size_t max_iter = 1; max_iter <= 33; ++max_iter) limits.push_back(max_iter);
    for (const std::size_t max_iter : {63u, 64u, 65u, 66u, 96u, 97u, 98u, 127u, 128u, 129u}) {
      if (max_iter < unlimited) limits.push_back(max_iter);
    }
    for (const std::size_t max_iter : limits) {
      CAPTURE(max_iter);
      auto c = first_points(x, d, k, max_iter);
      c.tol = 0;
      check_same(c, x, d);
    }
    for (const double tol : {1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6}) {
      CAPTURE(tol);
      auto c = first_points(x, d, k, 300);
      c.tol = tol;
      check_same(c, x, d);
    }
  }
}

TEST_CASE("kmeans gpu: labels brought to the host while later iterations run") {
  // From 262,144 points the run kernel's labels come over to the host before each run after the
  // first (33 iterations), and the fit's end brings only those that changed since, or all of them
  // where more changed than that list holds (a sixteenth of the points): stops on both sides of
  // the second run's start, blobs whose labels settle early, uniform points on a line whose
  // clusters creep from one end over hundreds of iterations, and n_init's several runs.
  auto g = rng(211);
  const std::size_t n = 300000;
  {
    const std::size_t d = 2, k = 16;
    const auto x = clustered(g, n, d, 12, false);
    for (const std::size_t max_iter : {33u, 34u, 40u, 97u, 98u, 300u}) {
      CAPTURE(max_iter);
      auto c = first_points(x, d, k, max_iter);
      c.tol = 0;
      check_same(c, x, d);
    }
    auto c = first_points(x, d, k, 300);
    c.init = KMeansInit::Random;
    c.initial_centroids.clear();
    c.n_init = 3;
    check_same(c, x, d);
  }
  {
    auto x = uniform(g, n, 0, 1);
    KMeansConfig c;
    c.clusters = 8;
    c.max_iter = 300;
    c.tol = 0;
    c.init = KMeansInit::Given;
    for (std::size_t i = 0; i < c.clusters; ++i) c.initial_centroids.push_back(0.001f * float(i));
    check_same(c, x, 1);
  }
}

TEST_CASE("kmeans gpu: on_iteration hears the CPU's reports, through queued runs and the run kernel") {
  // The host's loop reports both backends' iterations; the CUDA backend's come from its queued
  // runs (the run kernel at 16 clusters x 2, the one-step kernels at 40 x 16), so each report's
  // labels changed and squared movement must equal the CPU's, bit for bit.
  auto g = rng(208);
  for (const auto& [n, d, k] : {std::array<std::size_t, 3>{20000, 2, 16}, std::array<std::size_t, 3>{8000, 16, 40}}) {
    CAPTURE(d);
    const auto x = clustered(g, n, d, 6, false);
    auto c = first_points(x, d, k, 300);
    c.tol = 0;
    std::vector<KMeansIteration> heard[2];
    for (const int b : {0, 1}) {
      c.on_iteration = [&heard, b](const KMeansIteration& it) { heard[b].push_back(it); };
      run(c, b == 0 ? BackendKind::Cpu : BackendKind::Cuda, x, d);
    }
    REQUIRE(heard[0].size() == heard[1].size());
    REQUIRE(heard[0].size() > 1);
    for (std::size_t i = 0; i < heard[0].size(); ++i) {
      CAPTURE(i);
      CHECK(heard[1][i].iteration == heard[0][i].iteration);
      CHECK(heard[1][i].changed == heard[0][i].changed);
      CHECK(heard[1][i].shift == heard[0][i].shift);
      CHECK(heard[1][i].last == heard[0][i].last);
    }
  }
}

TEST_CASE("kmeans gpu: one object's fits reuse its device memory, whatever the last fit left there") {
  // A KMeans object keeps its last CUDA fit's arrays and points (class comment: Memory). Each fit
  // below follows one of another shape whose values are still in that memory (larger and smaller,
  // the run kernel's and the one-step kernels', a predict's labels-only layout), and must equal a
  // fresh object's fit on the CPU; then a search over k sharing the memory (with_config), and
  // fits from several threads at once, each making its own where another holds the kept one.
  auto g = rng(209);
  struct Fit {
    std::size_t n, d;
  };
  const Fit fits[] = {{20000, 8}, {1000, 2}, {50000, 2}, {3000, 16}, {20000, 8}, {700, 3}, {50000, 2}};
  KMeansConfig c;
  c.clusters = 16;
  c.tol = 0;
  c.seed = 7;
  c.backend = BackendKind::Cuda;
  const KMeans gpu(c);
  c.backend = BackendKind::Cpu;
  const KMeans cpu(c);
  std::vector<std::vector<float>> xs;
  for (const Fit& f : fits) xs.push_back(clustered(g, f.n, f.d, 9, false));
  for (std::size_t i = 0; i < std::size(fits); ++i) {
    CAPTURE(i);
    const std::size_t d = fits[i].d;
    const auto want = cpu.fit(xs[i], d);
    const auto got = gpu.fit(xs[i], d);
    CHECK(got.labels == want.labels);
    CHECK(got.centroids == want.centroids);
    CHECK(got.inertia == want.inertia);
    CHECK(got.iterations == want.iterations);
    // A predict's labels-only layout is what the next fit finds in the kept memory.
    CHECK(gpu.predict(want.centroids, xs[i], d) == cpu.predict(want.centroids, xs[i], d));
    if (i == 3) gpu.release_workspace();
  }
  for (const std::size_t k : {4u, 33u, 9u}) {  // a search over k, one memory (with_config)
    CAPTURE(k);
    KMeansConfig ck = c;
    ck.clusters = k;
    ck.backend = BackendKind::Cuda;
    const auto got = gpu.with_config(ck).fit(xs[2], fits[2].d);
    ck.backend = BackendKind::Cpu;
    const auto want = KMeans(ck).fit(xs[2], fits[2].d);
    CHECK(got.labels == want.labels);
    CHECK(got.centroids == want.centroids);
  }
  std::vector<KMeansResult> want(std::size(fits)), got(std::size(fits));
  for (std::size_t i = 0; i < std::size(fits); ++i) want[i] = cpu.fit(xs[i], fits[i].d);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < std::size(fits); ++i) {
    threads.emplace_back([&, i] { got[i] = gpu.fit(xs[i], fits[i].d); });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < std::size(fits); ++i) {
    CAPTURE(i);
    CHECK(got[i].labels == want[i].labels);
    CHECK(got[i].centroids == want[i].centroids);
  }
}
