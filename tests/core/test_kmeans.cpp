// K-means on the CPU backend (streamknn/kmeans.hpp) against a float64 brute-force Lloyd written
// from the definitions (docs/kmeans.md): labels by (squared distance, index), exact centroid sums
// (128-bit integers here), the inertia by the fold tree written recursively, scikit-learn's
// stopping rules and empty-cluster relocation. Data
// on small integer grids make every distance exact in float64, so ties are real ties. Plus bad
// input, determinism across thread counts, fits over a reference set's snapshot, k-means++.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "kmeans/cluster_sums.hpp"
#include "kmeans/fold_layout.hpp"
#include "kmeans/fold_tree.hpp"
#include "streamknn/kmeans.hpp"
#include "support/test_support.hpp"

using namespace test;

namespace {

struct Ref {
  std::vector<float> centroids;
  std::vector<std::uint32_t> labels;
  double inertia = 0;
  std::size_t iterations = 0;
  std::size_t relocations = 0;  ///< iterations that relocated empty clusters
};

double sq(const float* x, const float* c, std::size_t d) {  // float64, fused, in dimension order
  double acc = 0;
  for (std::size_t j = 0; j < d; ++j) {
    const double t = double(x[j]) - double(c[j]);
    acc = std::fma(t, t, acc);
  }
  return acc;
}

/// A value's float32 exponent field, at least 1, from frexp (not from its bits).
std::uint32_t field_of(float v) {
  int e = 0;
  (void)std::frexp(double(v), &e);
  return v == 0 ? 1u : std::uint32_t(std::max(1, e + 126));
}

/// Each feature's sum top: the largest field_of over the points.
std::vector<std::uint32_t> tops_of(const std::vector<float>& x, std::size_t d) {
  std::vector<std::uint32_t> top(d, 1u);
  for (std::size_t i = 0; i < x.size(); ++i) top[i % d] = std::max(top[i % d], field_of(x[i]));
  return top;
}

/// A centroid sum by its definition (docs/kmeans.md, "Sums"): each value in units of
/// 2^(top - 246) as a 128-bit integer (bits below the unit rounded to nearest, ties to even), the
/// values' base-2^24 digits added up, then the float64 value of the digits.
double exact_sum(const std::vector<float>& values, std::uint32_t top) {
  namespace km = streamknn::detail::kmeans;
  std::int64_t digits[km::kSumDigits] = {0, 0, 0, 0, 0};
  for (const float v : values) {
    const std::uint32_t f = field_of(v);
    const double m = std::ldexp(std::fabs(double(v)), 150 - int(f));  // the significand, an integer
    const int sh = int(f) - int(top) + 96;
    const unsigned __int128 units = sh >= 0 ? (unsigned __int128)(std::uint64_t(m)) << sh
                                            : (unsigned __int128)(std::uint64_t(std::nearbyint(std::ldexp(m, sh))));
    for (int b = 0; b < km::kSumDigits; ++b) {
      const std::int64_t digit = std::int64_t((units >> (24 * b)) & 0xffffff);
      digits[b] += v < 0 ? -digit : digit;
    }
  }
  return km::digits_value(digits, std::ldexp(1.0, int(top) - 246));
}

/// The fold tree from its definition: groups of 32, left to right, until one node is left.
std::vector<double> fold(std::vector<std::vector<double>> nodes) {
  do {
    std::vector<std::vector<double>> up;
    for (std::size_t g = 0; g < nodes.size(); g += 32) {
      std::vector<double> acc = nodes[g];
      for (std::size_t c = g + 1; c < std::min(nodes.size(), g + 32); ++c) {
        for (std::size_t j = 0; j < acc.size(); ++j) acc[j] += nodes[c][j];
      }
      up.push_back(acc);
    }
    nodes = std::move(up);
  } while (nodes.size() > 1);
  return nodes[0];
}

std::vector<std::uint32_t> ref_labels(const std::vector<float>& x, const std::vector<float>& c, std::size_t d) {
  const std::size_t n = x.size() / d, k = c.size() / d;
  std::vector<std::uint32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < k; ++j) {
      if (sq(&x[i * d], &c[j * d], d) < sq(&x[i * d], &c[best * d], d)) best = j;
    }
    out[i] = std::uint32_t(best);
  }
  return out;
}

/// scikit-learn's Lloyd loop with tol = tol_abs (already scaled).
Ref ref_lloyd(const std::vector<float>& x, std::size_t d, std::vector<float> c, std::size_t max_iter, double tol_abs) {
  const std::size_t n = x.size() / d, k = c.size() / d;
  std::vector<std::uint32_t> labels, old(n, ~0u);
  bool strict = false;
  std::size_t it = 0, relocations = 0;
  for (; it < max_iter; ++it) {
    labels = ref_labels(x, c, d);
    std::vector<std::uint64_t> count(k, 0);
    std::vector<double> sums(k * d, 0.0);
    const std::vector<std::uint32_t> tops = tops_of(x, d);
    for (std::size_t cl = 0; cl < k; ++cl) {
      for (std::size_t j = 0; j < d; ++j) {
        std::vector<float> column;
        for (std::size_t i = 0; i < n; ++i) {
          if (labels[i] == cl) column.push_back(x[i * d + j]);
        }
        count[cl] = column.size();
        sums[cl * d + j] = exact_sum(column, tops[j]);
      }
    }
    std::vector<std::size_t> empty;
    for (std::size_t cl = 0; cl < k; ++cl) {
      if (count[cl] == 0) empty.push_back(cl);
    }
    if (!empty.empty()) {  // farthest from their centroid first, ties to the smaller index
      ++relocations;
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return sq(&x[a * d], &c[labels[a] * d], d) > sq(&x[b * d], &c[labels[b] * d], d);
      });
      for (std::size_t e = 0; e < empty.size(); ++e) {
        const std::size_t p = order[e], from = labels[p], to = empty[e];
        for (std::size_t j = 0; j < d; ++j) {
          sums[from * d + j] -= double(x[p * d + j]);
          sums[to * d + j] = double(x[p * d + j]);
        }
        count[to] = 1;
        --count[from];
      }
    }
    std::vector<float> next(k * d);
    double shift = 0;
    for (std::size_t cl = 0; cl < k; ++cl) {
      double s2 = 0;
      for (std::size_t j = 0; j < d; ++j) {
        next[cl * d + j] = count[cl] ? float(sums[cl * d + j] / double(count[cl])) : float(sums[cl * d + j]);
        const double t = double(next[cl * d + j]) - double(c[cl * d + j]);
        s2 = std::fma(t, t, s2);
      }
      shift += s2;
    }
    c = next;
    if (labels == old) {
      strict = true;
      break;
    }
    if (shift <= tol_abs) break;
    old = labels;
  }
  Ref r;
  r.iterations = std::min(it + 1, max_iter);
  r.relocations = relocations;
  if (!strict) labels = ref_labels(x, c, d);
  std::vector<std::vector<double>> per;
  for (std::size_t i = 0; i < n; ++i) per.push_back({sq(&x[i * d], &c[labels[i] * d], d)});
  r.inertia = fold(per)[0];
  r.centroids = c;
  r.labels = labels;
  return r;
}

/// n points of d small-integer coordinates in [0, span): exact float64 distances, many ties.
std::vector<float> grid(std::mt19937_64& g, std::size_t n, std::size_t d, int span) {
  std::uniform_int_distribution<int> u(0, span - 1);
  std::vector<float> v(n * d);
  for (auto& x : v) x = float(u(g));
  return v;
}

/// Blobs: k centres in [-10, 10]^d, points around them (float32 values, not on a grid).
std::vector<float> blobs(std::mt19937_64& g, std::size_t n, std::size_t d, std::size_t k) {
  const auto centres = uniform(g, k * d, -10, 10);
  std::normal_distribution<float> noise(0, 1.5f);
  std::vector<float> v(n * d);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = g() % k;
    for (std::size_t j = 0; j < d; ++j) v[i * d + j] = centres[c * d + j] + noise(g);
  }
  return v;
}

/// n points in `centres` tight blobs: integer centres in [0, 1000)^d plus an offset of 0 or 1 on
/// each of the first `vary` coordinates, so points coincide (2^vary places per blob) and distances
/// are exact in float64 (real ties).
std::vector<float> tight_blobs(std::mt19937_64& g, std::size_t n, std::size_t d, std::size_t centres,
                               std::size_t vary) {
  std::vector<float> c(centres * d), v(n * d);
  for (auto& e : c) e = float(g() % 1000);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = g() % centres;
    for (std::size_t j = 0; j < d; ++j) v[i * d + j] = c[b * d + j] + (j < vary ? float(g() % 2) : 0.0f);
  }
  return v;
}

KMeansConfig given(const std::vector<float>& x, std::size_t d, std::size_t k, std::size_t max_iter, std::size_t threads) {
  KMeansConfig c;
  c.clusters = k;
  c.max_iter = max_iter;
  c.tol = 0;
  c.init = KMeansInit::Given;
  c.initial_centroids.assign(x.begin(), x.begin() + std::ptrdiff_t(k * d));  // the first k points
  c.backend = BackendKind::Cpu;
  c.cpu_threads = threads;
  return c;
}

void check_equal(const KMeansResult& r, const Ref& ref) {
  CHECK(r.iterations == ref.iterations);
  CHECK(r.labels == ref.labels);
  CHECK(r.centroids == ref.centroids);
  CHECK(r.inertia == ref.inertia);
}

}  // namespace

TEST_CASE("kmeans: equals a float64 brute-force Lloyd on blobs and on tied grids") {
  auto g = rng(101);
  for (int round = 0; round < 6; ++round) {
    const std::size_t d = 1 + g() % 9, k = 1 + g() % 12, n = k + g() % 700;
    const bool tied = round % 2 == 1;
    const auto x = tied ? grid(g, n, d, 4) : blobs(g, n, d, 1 + g() % 8);
    CAPTURE(round);
    CAPTURE(n);
    CAPTURE(d);
    CAPTURE(k);
    const auto c = given(x, d, k, 60, 2);
    const KMeansResult r = KMeans(c).fit(x, d);
    check_equal(r, ref_lloyd(x, d, c.initial_centroids, 60, 0.0));
    CHECK(r.backend == BackendKind::Cpu);
    // Not r.labels: a tied grid's first points may repeat, and a fit that stops on unchanged
    // labels in an iteration that relocated an empty cluster keeps labels the relocation's
    // centroids do not give back (as scikit-learn's).
    CHECK(KMeans(c).predict(r.centroids, x, d) == ref_labels(x, r.centroids, d));
  }
}

TEST_CASE("kmeans: duplicates and ties go to the smaller centroid index") {
  // Points on a line, centroids 0 and 2 (twice): every point at 1 ties; duplicated centroids tie.
  const std::vector<float> x = {1, 1, 1, 0, 2, 2, 0, 1};
  const std::vector<float> cents = {0, 2, 2, 0};
  KMeansConfig c;
  c.clusters = 4;
  c.init = KMeansInit::Given;
  c.initial_centroids = cents;
  c.backend = BackendKind::Cpu;
  const auto labels = KMeans(c).predict(cents, x, 1);
  CHECK(labels == std::vector<std::uint32_t>{0, 0, 0, 0, 1, 1, 0, 0});
  c.max_iter = 1;
  const auto r = KMeans(c).fit(x, 1);
  check_equal(r, ref_lloyd(x, 1, cents, 1, 0.0));
}

TEST_CASE("kmeans: empty clusters take the farthest points, as scikit-learn's") {
  auto g = rng(102);
  for (int round = 0; round < 4; ++round) {
    const std::size_t d = 2 + round, n = 300, k = 6;
    auto x = grid(g, n, d, 5);
    KMeansConfig c = given(x, d, k, 40, 2);
    for (std::size_t j = 0; j < d; ++j) {  // two centroids far from everything: empty at once
      c.initial_centroids[1 * d + j] = 1000.0f;
      c.initial_centroids[4 * d + j] = -1000.0f + float(j);
    }
    const auto r = KMeans(c).fit(x, d);
    check_equal(r, ref_lloyd(x, d, c.initial_centroids, 40, 0.0));
    for (std::size_t cl = 0; cl < k; ++cl) CHECK(std::count(r.labels.begin(), r.labels.end(), cl) > 0);
  }
}

TEST_CASE("kmeans: empty clusters again and again (tight blobs, clusters started on a few points)") {
  // More clusters than blobs, started on three points: every centroid but three is empty at once;
  // relocated ones land on coinciding points and tie, so clusters empty again. With fewer places
  // than clusters (the second shape) some cluster is empty at every iteration. The backend screens
  // the far points (far_points) before the exact ranking.
  auto g = rng(108);
  struct Shape {
    std::size_t n, d, k, blobs, vary, max_iter;
    bool always;  ///< an empty cluster at every iteration
  };
  for (const Shape s : {Shape{3000, 3, 30, 4, 3, 100, false}, Shape{2000, 20, 30, 3, 3, 40, true},
                        Shape{3000, 2, 12, 2, 2, 100, false}}) {
    CAPTURE(s.n);
    CAPTURE(s.d);
    CAPTURE(s.k);
    const auto x = tight_blobs(g, s.n, s.d, s.blobs, s.vary);
    KMeansConfig c = given(x, s.d, s.k, s.max_iter, 3);
    for (std::size_t i = 0; i < s.k; ++i) {
      std::copy_n(x.begin() + std::ptrdiff_t((i % 3) * s.d), s.d, c.initial_centroids.begin() + std::ptrdiff_t(i * s.d));
    }
    const Ref ref = ref_lloyd(x, s.d, c.initial_centroids, s.max_iter, 0.0);
    CHECK(ref.relocations >= 2);
    if (s.always) CHECK(ref.relocations == ref.iterations);
    const auto r = KMeans(c).fit(x, s.d);
    check_equal(r, ref);
    c.cpu_threads = 1;
    const auto one = KMeans(c).fit(x, s.d);
    CHECK(one.labels == r.labels);
    CHECK(one.centroids == r.centroids);
  }
}

TEST_CASE("kmeans: results do not depend on the thread count") {
  auto g = rng(103);
  // 70,000 points in two clusters: more than one level-2 node of the inertia's fold tree.
  const std::size_t n = 70000, d = 3;
  const auto x = blobs(g, n, d, 2);
  KMeansConfig c;
  c.clusters = 2;
  c.backend = BackendKind::Cpu;
  c.seed = 7;
  c.cpu_threads = 1;
  const auto one = KMeans(c).fit(x, d);
  for (const std::size_t t : {2u, 3u, 5u}) {
    c.cpu_threads = t;
    const auto r = KMeans(c).fit(x, d);
    CHECK(r.labels == one.labels);
    CHECK(r.centroids == one.centroids);
    CHECK(r.inertia == one.inertia);
    CHECK(r.iterations == one.iterations);
  }
  // and against the definition, from the same start
  auto cg = given(x, d, 2, 30, 3);
  check_equal(KMeans(cg).fit(x, d), ref_lloyd(x, d, cg.initial_centroids, 30, 0.0));
}

TEST_CASE("kmeans: many clusters, long runs (the bounds prune, labels stay exact)") {
  auto g = rng(104);
  const std::size_t n = 4000, d = 16, k = 40;
  const auto x = blobs(g, n, d, 25);
  const auto c = given(x, d, k, 100, 2);
  check_equal(KMeans(c).fit(x, d), ref_lloyd(x, d, c.initial_centroids, 100, 0.0));
  // clusters close to the points' count (no centroid gaps: the lower bounds alone prune)
  const auto few = blobs(g, 90, 3, 30);
  const auto cf = given(few, 3, 60, 50, 2);
  check_equal(KMeans(cf).fit(few, 3), ref_lloyd(few, 3, cf.initial_centroids, 50, 0.0));
}

TEST_CASE("kmeans: k-means++, random starts and n_init are seeded and reproducible") {
  auto g = rng(105);
  const std::size_t n = 2000, d = 4;
  const auto x = blobs(g, n, d, 5);
  for (const KMeansInit init : {KMeansInit::KMeansPlusPlus, KMeansInit::Random}) {
    KMeansConfig c;
    c.clusters = 5;
    c.init = init;
    c.n_init = 3;
    c.seed = 11;
    c.backend = BackendKind::Cpu;
    const auto a = KMeans(c).fit(x, d), b = KMeans(c).fit(x, d);
    CHECK(a.centroids == b.centroids);
    CHECK(a.labels == b.labels);
    CHECK(a.converged);
    // the best of three starts is no worse than each start alone
    for (std::uint64_t s = 11; s < 14; ++s) {
      KMeansConfig one = c;
      one.n_init = 1;
      one.seed = s;
      CHECK(a.inertia <= KMeans(one).fit(x, d).inertia);
    }
  }
}

TEST_CASE("kmeans: tol stops early, then labels the final centroids") {
  auto g = rng(106);
  const std::size_t n = 3000, d = 6;
  const auto x = blobs(g, n, d, 6);
  KMeansConfig c = given(x, d, 6, 300, 2);
  c.tol = 1e-2;
  const auto loose = KMeans(c).fit(x, d);
  c.tol = 0;
  const auto tight = KMeans(c).fit(x, d);
  CHECK(loose.converged);
  CHECK(loose.iterations <= tight.iterations);
  CHECK(KMeans(c).predict(loose.centroids, x, d) == loose.labels);
  c.max_iter = 2;
  const auto capped = KMeans(c).fit(x, d);
  CHECK(capped.iterations == 2);
  check_equal(capped, ref_lloyd(x, d, c.initial_centroids, 2, 0.0));
}

TEST_CASE("kmeans: over a reference set's published snapshot") {
  auto g = rng(107);
  const std::size_t n = 500, d = 3;
  const auto x = blobs(g, n, d, 4);
  StoreConfig sc;
  sc.dim = d;
  sc.backend = BackendKind::Cpu;
  ReferenceSet set(sc);
  for (std::size_t i = 0; i < n; ++i) set.insert(PointId(1000 + i), std::span<const float>(&x[i * d], d));
  set.publish();
  for (std::size_t i = 0; i < n; i += 7) set.erase(PointId(1000 + i));
  set.publish();
  set.insert(PointId(5), std::span<const float>(&x[0], d));  // queued, not published: not clustered
  KMeansConfig c;
  c.clusters = 4;
  c.seed = 3;
  c.backend = BackendKind::Cpu;
  const auto r = KMeans(c).fit(set);
  REQUIRE(r.ids.size() == n - (n + 6) / 7);
  CHECK(r.epoch == set.epoch());
  std::vector<float> live;
  for (const PointId id : r.ids) {
    CHECK(id != 5);
    const std::size_t i = std::size_t(id - 1000);
    live.insert(live.end(), x.begin() + std::ptrdiff_t(i * d), x.begin() + std::ptrdiff_t(i * d + d));
  }
  const auto m = KMeans(c).fit(live, d);
  CHECK(m.labels == r.labels);
  CHECK(m.centroids == r.centroids);
  StoreConfig ip = sc;
  ip.metric = Metric::InnerProduct;
  CHECK_THROWS_AS(KMeans(c).fit(ReferenceSet(ip)), InvalidArgument);
}

TEST_CASE("kmeans: the level-by-level tree of the CUDA kernels (fold_layout.hpp) sums as the CPU's") {
  // The kernels' index arithmetic, run here one "thread" at a time: the tables (as the tables
  // kernel scans them), the level-0 nodes, the levels above, the roots.
  namespace km = streamknn::detail::kmeans;
  auto g = rng(108);
  for (int round = 0; round < 4; ++round) {
    // round 0: two big clusters (so k >= 2); the others: 1 to 40 clusters
    const std::uint32_t k = std::max(round == 0 ? 2u : 1u, 1 + std::uint32_t(g() % 40));
    const std::uint32_t d = 1 + std::uint32_t(g() % 3);
    const std::uint32_t n = round == 0 ? 70000 : 1 + std::uint32_t(g() % 5000);
    std::vector<std::uint32_t> labels(n);
    for (auto& l : labels) l = std::uint32_t(g() % (round == 0 ? 2 : k));
    std::vector<double> x(std::size_t(n) * d);
    std::uniform_real_distribution<double> unit(-1, 1);
    for (auto& v : x) v = std::ldexp(unit(g), int(g() % 60) - 30);  // wide exponents: the order shows
    std::vector<std::uint32_t> counts(k, 0), moff(k + 1, 0), members(n);
    for (const auto l : labels) ++counts[l];
    for (std::uint32_t c = 0; c < k; ++c) moff[c + 1] = moff[c] + counts[c];
    std::vector<std::uint32_t> at(moff.begin(), moff.end() - 1);
    for (std::uint32_t i = 0; i < n; ++i) members[at[labels[i]]++] = i;
    const std::uint32_t levels = km::fold_levels_for(n);
    std::vector<std::uint32_t> offs(std::size_t(levels) * (k + 1), 0), v(counts);
    for (std::uint32_t level = 0; level < levels; ++level) {
      for (auto& e : v) e = km::nodes_above(e);
      std::uint32_t* row = offs.data() + std::size_t(level) * (k + 1);
      for (std::uint32_t c = 0; c < k; ++c) row[c + 1] = row[c] + v[c];
    }
    std::vector<double> below(static_cast<std::size_t>(offs[k]) * d);
    for (std::uint32_t node = 0; node < offs[k]; ++node) {
      const km::NodeRange r = km::leaf_range(moff.data(), offs.data(), k, node);
      for (std::uint32_t j = 0; j < d; ++j) {
        double acc = x[std::size_t(members[r.first]) * d + j];
        for (std::uint32_t p = r.first + 1; p < r.end; ++p) acc += x[std::size_t(members[p]) * d + j];
        below[std::size_t(node) * d + j] = acc;
      }
    }
    for (std::uint32_t level = 1; level < levels; ++level) {
      const std::uint32_t* ob = offs.data() + std::size_t(level - 1) * (k + 1);
      const std::uint32_t* ol = offs.data() + std::size_t(level) * (k + 1);
      std::vector<double> out(static_cast<std::size_t>(ol[k]) * d);
      for (std::uint32_t node = 0; node < ol[k]; ++node) {
        const km::NodeRange r = km::level_range(ob, ol, k, node);
        for (std::uint32_t j = 0; j < d; ++j) {
          double acc = below[std::size_t(r.first) * d + j];
          for (std::uint32_t p = r.first + 1; p < r.end; ++p) acc += below[std::size_t(p) * d + j];
          out[std::size_t(node) * d + j] = acc;
        }
      }
      below = std::move(out);
    }
    const std::uint32_t* top = offs.data() + std::size_t(levels - 1) * (k + 1);
    for (std::uint32_t c = 0; c < k; ++c) {
      CAPTURE(c);
      CHECK(top[c + 1] - top[c] <= 1);
      // the CPU's fold: level-2 nodes over the cluster's members, then the levels above
      const std::size_t rows = moff[c + 1] - moff[c], units = (rows + km::kUnit - 1) / km::kUnit;
      std::vector<double> want(d, 0.0), nodes(units * d), scratch(2 * d);
      for (std::size_t u = 0; u < units; ++u) {
        km::fold_unit([&](std::size_t r) { return x.data() + std::size_t(members[moff[c] + r]) * d; }, u * km::kUnit,
                      std::min(rows, (u + 1) * km::kUnit), d, nodes.data() + u * d, scratch.data());
      }
      if (units > 0) std::copy_n(km::fold_levels(nodes, units, d), d, want.begin());
      for (std::uint32_t j = 0; j < d; ++j) {
        const double got = top[c + 1] > top[c] ? below[std::size_t(top[c]) * d + j] : 0.0;
        CHECK(std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(want[j]));
      }
    }
  }
}

TEST_CASE("kmeans: centroid sums are exact, whatever the order (cluster_sums.hpp)") {
  namespace km = streamknn::detail::kmeans;
  auto g = rng(109);
  const auto digits_of = [](const std::vector<float>& v, std::uint32_t top) {
    std::vector<std::int64_t> digits(km::kSumDigits, 0);
    for (const float e : v) {
      const km::DigitTerms t = km::digit_terms(e, top);
      digits[std::size_t(t.at)] += t.low;
      if (t.high != 0) digits[std::size_t(t.at) + 1] += t.high;
    }
    return digits;
  };
  for (int round = 0; round < 200; ++round) {
    // wide exponents, both signs, zeros and subnormals: every digit and the rounding below the unit
    std::vector<float> v(1 + g() % 300);
    for (auto& e : v) {
      const int kind = int(g() % 10);
      e = kind == 0 ? 0.0f : kind == 1 ? std::ldexp(float(g() % 8), -149 + int(g() % 4)) :
          std::ldexp(float(std::int32_t(g() % 2000001) - 1000000), int(g() % 120) - 60);
    }
    std::uint32_t top = 1, want = 1;
    for (const float e : v) {
      top = std::max(top, km::exponent_field(e));
      want = std::max(want, field_of(e));
    }
    CHECK(top == want);
    const auto digits = digits_of(v, top);
    const double sum = km::digits_value(digits.data(), km::sum_unit(top));
    CHECK(std::bit_cast<std::uint64_t>(sum) == std::bit_cast<std::uint64_t>(exact_sum(v, top)));
    std::shuffle(v.begin(), v.end(), g);
    CHECK(digits_of(v, top) == digits);
    // The CUDA kernel's shared table adds half_terms' 12-bit pieces: the same integer, in its halves.
    for (const float e : v) {
      const km::DigitTerms d = km::digit_terms(e, top);
      const km::HalfTerms h = km::half_terms(e, top);
      const __int128 want = (__int128(d.low) << (km::kDigitBits * d.at)) +
                            (__int128(d.high) << (km::kDigitBits * (d.at + 1)));
      CHECK((h.t >> (km::kHalfBits * km::kHalfPieces)) == 0u);  // every bit in some piece
      __int128 got = 0;
      for (int i = 0; i < km::kHalfPieces; ++i) {
        const int piece = km::half_piece(h, i);
        if (piece == 0) continue;
        CHECK(h.h + i < 2 * km::kSumDigits);
        CHECK(piece < 4096);
        got += __int128(piece) << (km::kHalfBits * (h.h + i));
      }
      CHECK(bool((h.negative ? -got : got) == want));
    }
  }
  // Where the exact sum is a float64 it is the sum (integers, binary fractions, cancellation);
  // bits below the unit, 2^-120 of the feature's bound 2^(top - 126), are rounded to it.
  const auto sum_of = [&](const std::vector<float>& v) {
    std::uint32_t top = 1;
    for (const float e : v) top = std::max(top, km::exponent_field(e));
    return km::digits_value(digits_of(v, top).data(), km::sum_unit(top));
  };
  CHECK(sum_of({1e6f, -3.0f, 0.5f, 16777215.0f, -1e6f, 0.25f}) == 16777212.75);
  CHECK(sum_of({1e10f, 1.0f, -1e10f}) == 1.0);   // a float32 sum in this order gives 0
  CHECK(sum_of({3e30f, 1.0f, -3e30f}) == 1.0);               // 3e30 < 2^102: the unit is 2^-18
  CHECK(sum_of({3e30f, 1.0000001f, -3e30f}) == 1.0);         // 1 + 2^-23: its last bit rounded away
  CHECK(sum_of({3e30f, 0x1.8p-19f, -3e30f}) == 0x1p-18);     // 0.75 of a unit: one unit
  CHECK(sum_of({3e30f, 0x1.8p-18f, -3e30f}) == 0x1p-17);     // 1.5 units: a tie, to even (2)
  CHECK(sum_of({3e30f, 0x1p-19f, -3e30f}) == 0.0);           // half a unit: a tie, to even (0)
  CHECK(sum_of({-0.0f, 0.0f}) == 0.0);
}

TEST_CASE("kmeans: bad input is refused, naming the argument") {
  const std::vector<float> x = {0, 0, 1, 1, 2, 2};
  const auto refuses = [](auto&& call, const char* word) {
    try {
      call();
      FAIL("no exception");
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find(word) != std::string::npos);
    }
  };
  KMeansConfig c;
  c.backend = BackendKind::Cpu;
  c.clusters = 0;
  refuses([&] { KMeans{c}; }, "clusters=0");
  c.clusters = 4;
  refuses([&] { KMeans(c).fit(x, 2); }, "clusters=4");
  c.clusters = 2;
  c.max_iter = 0;
  refuses([&] { KMeans{c}; }, "max_iter=0");
  c.max_iter = 10;
  c.tol = std::nan("");
  refuses([&] { KMeans{c}; }, "tol=");
  c.tol = -1;
  refuses([&] { KMeans{c}; }, "tol=-1");
  c.tol = 0;
  c.n_init = 0;
  refuses([&] { KMeans{c}; }, "n_init=0");
  c.n_init = 1;
  refuses([&] { KMeans(c).fit(x, 4); }, "dim=4");
  refuses([&] { KMeans(c).fit(x, 0); }, "dim=0");
  auto bad = x;
  bad[3] = std::numeric_limits<float>::infinity();
  refuses([&] { KMeans(c).fit(bad, 2); }, "row 1");
  bad[3] = std::nanf("");
  refuses([&] { KMeans(c).fit(bad, 2); }, "row 1");
  bad[3] = 3e38f;
  refuses([&] { KMeans(c).fit(bad, 2); }, "largest magnitude");
  {  // points checked in blocks on several threads: the lowest bad index is named, as a serial scan
    std::vector<float> many(300000 * 2, 1.0f);
    many[2 * 250000 + 1] = std::nanf("");
    many[2 * 140001] = -3e38f;
    many[2 * 140003 + 1] = std::numeric_limits<float>::infinity();
    c.cpu_threads = 3;
    refuses([&] { KMeans(c).fit(many, 2); }, "points row 140001 holds -3e+38 at column 0");
    refuses([&] { KMeans(c).predict(std::vector<float>{0, 0, 1, 1}, many, 2); }, "points row 140001 holds -3e+38");
    c.cpu_threads = 0;
  }
  c.init = KMeansInit::Given;
  c.initial_centroids = {0, 0, 1};
  refuses([&] { KMeans{c}; }, "initial_centroids");
  c.initial_centroids = {0, 0, 1, 1};
  c.n_init = 2;
  refuses([&] { KMeans{c}; }, "n_init=2");
  c.n_init = 1;
  refuses([&] { KMeans(c).fit(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, 4); }, "initial_centroids have dim=2");
  c.initial_centroids = {0, 0, 1, std::nanf("")};
  refuses([&] { KMeans{c}; }, "initial_centroids row 1");
  c.init = KMeansInit::Random;
  c.initial_centroids = {0, 0, 1, 1};
  refuses([&] { KMeans{c}; }, "init=Random");
  c.initial_centroids.clear();
  c.init = static_cast<KMeansInit>(9);
  refuses([&] { KMeans{c}; }, "init=9");
  c.init = KMeansInit::Random;
  refuses([&] { KMeans(c).predict(std::vector<float>{0, 0, 1}, x, 2); }, "centroids");
  if (!cuda_available()) {
    c.backend = BackendKind::Cuda;
    CHECK_THROWS_AS(KMeans(c).fit(x, 2), BackendUnavailable);
  }
}
