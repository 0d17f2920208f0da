// What a KMeans object keeps between fits (streamknn/kmeans.hpp: Memory) on the CPU backend:
// its host threads, no memory. with_config() validates its configuration as the constructor does
// and fits as a fresh object of that configuration; release_workspace() changes no result; fits
// and predicts of one object (and its with_config() sharers) with other thread counts, and from
// several threads at once, each taking the kept threads or making their own, equal a fresh
// object's. The CUDA backend's kept memory is tested in tests/gpu (test_kmeans_gpu,
// test_kmeans_device).
#include <thread>
#include <vector>

#include "gpu/kmeans_cases.hpp"
#include "support/test_support.hpp"

using namespace streamknn;
using namespace test;

TEST_CASE("kmeans with_config: validated as constructed, fits as a fresh object") {
  auto g = rng(611);
  const auto x = kmeans_cases::clustered(g, 3000, 3, 5, false);
  KMeansConfig base;
  base.clusters = 4;
  base.seed = 3;
  base.backend = BackendKind::Cpu;
  const KMeans first(base);
  KMeansConfig bad = base;
  bad.clusters = 0;
  CHECK_THROWS_AS(first.with_config(bad), InvalidArgument);
  for (const std::size_t k : {2u, 5u, 9u}) {
    CAPTURE(k);
    KMeansConfig c = base;
    c.clusters = k;
    const KMeans shared = first.with_config(c);
    CHECK(shared.config().clusters == k);
    const auto got = shared.fit(x, 3);
    const auto want = KMeans(c).fit(x, 3);
    CHECK(got.labels == want.labels);
    CHECK(got.centroids == want.centroids);
    CHECK(got.inertia == want.inertia);
    shared.release_workspace();
    CHECK(shared.fit(x, 3).labels == want.labels);
  }
}

TEST_CASE("kmeans kept threads: other thread counts, several threads at once, fresh results") {
  auto g = rng(612);
  const std::size_t d = 4;
  const auto x = kmeans_cases::clustered(g, 6000, d, 6, false);
  KMeansConfig base;
  base.clusters = 6;
  base.seed = 5;
  base.n_init = 2;
  base.backend = BackendKind::Cpu;
  const auto want = KMeans(base).fit(x, d);
  const KMeans kept(base);
  for (const std::size_t threads : {1u, 3u, 2u, 3u, 0u}) {
    CAPTURE(threads);
    KMeansConfig c = base;
    c.cpu_threads = threads;
    const KMeans shared = kept.with_config(c);
    const auto got = shared.fit(x, d);
    CHECK(got.labels == want.labels);
    CHECK(got.centroids == want.centroids);
    CHECK(shared.predict(got.centroids, x, d) == want.labels);
  }
  std::vector<KMeansResult> got(4);
  std::vector<std::thread> fits;
  for (std::size_t t = 0; t < got.size(); ++t) fits.emplace_back([&, t] { got[t] = kept.fit(x, d); });
  for (auto& t : fits) t.join();
  for (const auto& r : got) {
    CHECK(r.labels == want.labels);
    CHECK(r.inertia == want.inertia);
  }
  kept.release_workspace();
  CHECK(kept.fit(x, d).labels == want.labels);
}
