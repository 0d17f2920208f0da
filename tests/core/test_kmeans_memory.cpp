// The memory a KMeans object keeps between fits (streamknn/kmeans.hpp: Memory) on the CPU
// backend, which keeps none: with_config() validates its configuration as the constructor does
// and fits as a fresh object of that configuration; release_workspace() changes no result. The
// CUDA backend's kept memory is tested in tests/gpu (test_kmeans_gpu, test_kmeans_device).
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
