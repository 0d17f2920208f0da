// KMeansConfig::on_iteration: every Lloyd iteration of every start is reported once, in order,
// with the labels it changed and the centroids' squared movement; the reports only observe (the
// results are those of a fit without them), and an exception thrown by one ends the fit.
#include <algorithm>
#include <stdexcept>

#include "gpu/kmeans_cases.hpp"
#include "support/test_support.hpp"

using namespace streamknn;
using namespace test;

namespace {

/// The reports of one fit, and the fit's result.
struct Heard {
  std::vector<KMeansIteration> reports;
  KMeansResult result;
};

Heard fit_heard(KMeansConfig c, const std::vector<float>& x, std::size_t d) {
  Heard h;
  c.on_iteration = [&h](const KMeansIteration& it) { h.reports.push_back(it); };
  h.result = KMeans(c).fit(x, d);
  return h;
}

/// The reports of each start, in order: iterations 1, 2, .. with the last one marked last.
void check_sequence(const Heard& h, std::size_t starts, std::size_t n, std::size_t max_iter) {
  std::size_t at = 0;
  bool winner_seen = false;
  for (std::size_t start = 0; start < starts; ++start) {
    CAPTURE(start);
    const std::size_t first = at;
    while (at < h.reports.size() && h.reports[at].start == start) {
      const KMeansIteration& it = h.reports[at];
      CHECK(it.iteration == at - first + 1);
      CHECK(it.shift >= 0.0);
      CHECK(it.changed <= n);
      CHECK(it.last == (at + 1 == h.reports.size() || h.reports[at + 1].start != start));
      ++at;
    }
    const std::size_t ran = at - first;
    REQUIRE(ran >= 1);
    CHECK(ran <= max_iter);
    CHECK(h.reports[first].changed == n);  // the first labelling labels every point
    winner_seen |= ran == h.result.iterations;
  }
  CHECK(at == h.reports.size());
  CHECK(winner_seen);
}

}  // namespace

TEST_CASE("kmeans: on_iteration hears every iteration of every start, in order, and only observes") {
  auto g = rng(121);
  const std::size_t n = 4000, d = 3, k = 7;
  const auto x = kmeans_cases::clustered(g, n, d, 5, false);
  KMeansConfig c;
  c.clusters = k;
  c.init = KMeansInit::Random;
  c.n_init = 3;
  c.tol = 0;
  c.seed = 5;
  c.backend = BackendKind::Cpu;
  const Heard h = fit_heard(c, x, d);
  check_sequence(h, c.n_init, n, c.max_iter);
  const KMeansResult plain = KMeans(c).fit(x, d);
  CHECK(h.result.labels == plain.labels);
  CHECK(h.result.centroids == plain.centroids);
  CHECK(h.result.inertia == plain.inertia);
  CHECK(h.result.iterations == plain.iterations);
  // tol = 0 and converged: the last iteration of each start changed no label
  for (const KMeansIteration& it : h.reports) {
    if (it.last && it.iteration < c.max_iter) CHECK(it.changed == 0);
  }
}

TEST_CASE("kmeans: on_iteration at max_iter, within tol, and when it throws") {
  auto g = rng(122);
  const std::size_t n = 3000, d = 4, k = 6;
  const auto x = kmeans_cases::clustered(g, n, d, 6, false);
  KMeansConfig c = kmeans_cases::first_points(x, d, k, 2);
  c.backend = BackendKind::Cpu;
  const Heard capped = fit_heard(c, x, d);
  REQUIRE(capped.reports.size() == 2);
  CHECK(!capped.reports[0].last);
  CHECK(capped.reports[1].last);
  CHECK(capped.result.iterations == 2);

  c.max_iter = 300;
  c.tol = 1e-2;
  const Heard loose = fit_heard(c, x, d);
  check_sequence(loose, 1, n, c.max_iter);
  CHECK(loose.reports.back().iteration == loose.result.iterations);

  // A callback that throws at iteration 3 (or the last, where the loose fit converges sooner:
  // the data are random) ends the fit with its exception.
  const std::size_t stop = std::min<std::size_t>(3, loose.result.iterations);
  std::size_t calls = 0;
  c.on_iteration = [&calls, stop](const KMeansIteration& it) {
    ++calls;
    if (it.iteration == stop) throw std::runtime_error("stop");
  };
  CHECK_THROWS_WITH_AS(KMeans(c).fit(x, d), "stop", std::runtime_error);
  CHECK(calls == stop);
  c.on_iteration = nullptr;
  CHECK(KMeans(c).fit(x, d).centroids == loose.result.centroids);  // nothing left behind
}
