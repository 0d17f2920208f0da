// Filtered and radius queries against their unfiltered counterparts, side by side in one run
// (docs/filters.md; the targets of the "filtered and radius queries" work):
//   - a filtered search keeping 10% of an N x 2 haversine store (default 1,000,000), K = 16, at each
//     Q, against the unfiltered search (target: at most 1.2x at Q = 1, 1.5x at Q = 1,024), and
//     against the host-side workaround: over-fetch K x 10 unfiltered, filter on the host (reported
//     with how many of its rows came out exact);
//   - a radius search returning about 100 points per query on an M x 2 haversine store (default
//     10,000,000) against the K = 100 search (target: within 1.5x).
// Public API only. Prints a table and writes CSV (--csv). A backend that refuses predicates or radius
// searches (BackendUnavailable) is reported as such, and the rows it could run are still timed.
//
//   bench_filters [--backend auto|cpu|cuda] [--points 1000000] [--radius-points 10000000]
//                 [--queries 1,1024] [--repeats 5] [--csv filters.csv]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "streamknn/streamknn.hpp"

namespace {

using namespace streamknn;
using Clock = std::chrono::steady_clock;

constexpr double kPi = 3.14159265358979323846;
constexpr double kEarthRadiusM = 6371008.8;
// The region the points fill: latitudes 40..50, longitudes 0..10 (degrees).
constexpr double kLat0 = 40, kLat1 = 50, kLon0 = 0, kLon1 = 10;

struct Row {
  std::string name;
  std::size_t points = 0, queries = 0, k = 0;
  double ms = 0;
  std::string note;
};

/// Median milliseconds of `repeats` runs of f (after one warm-up run); NaN where f throws
/// BackendUnavailable (note says why).
double time_ms(std::size_t repeats, const std::function<void()>& f, std::string& note) {
  try {
    f();
  } catch (const BackendUnavailable& e) {
    note = e.what();
    return std::nan("");
  }
  std::vector<double> ms;
  for (std::size_t r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return bench::median(ms);
}

std::vector<float> points_in_region(std::mt19937_64& g, std::size_t n, double margin) {
  std::uniform_real_distribution<double> lat(kLat0 + margin, kLat1 - margin), lon(kLon0 + margin, kLon1 - margin);
  std::vector<float> v(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    v[2 * i] = float(lat(g));
    v[2 * i + 1] = float(lon(g));
  }
  return v;
}

/// The radius (metres) around which n uniform points of the region hold `want` points on average.
double radius_for(std::size_t n, double want) {
  const double height = (kLat1 - kLat0) * kPi / 180 * kEarthRadiusM;
  const double width = (kLon1 - kLon0) * kPi / 180 * kEarthRadiusM * std::cos((kLat0 + kLat1) / 2 * kPi / 180);
  const double density = double(n) / (height * width);
  return std::sqrt(want / (kPi * density));
}

std::string exact_note(std::size_t exact, std::size_t total) {
  return std::to_string(exact) + " of " + std::to_string(total) + " rows exact";
}

ReferenceSet make_store(BackendKind backend, std::size_t n, std::size_t words, const std::vector<float>& v,
                        const std::vector<std::uint32_t>& attrs) {
  StoreConfig c;
  c.dim = 2;
  c.metric = Metric::Haversine;
  c.backend = backend;
  c.attribute_words = words;
  c.capacity_hint = n;
  c.queue_capacity = 1 << 20;
  ReferenceSet store(c);
  for (std::size_t i = 0; i < n; ++i) {
    const std::span<const float> row(v.data() + 2 * i, 2);
    const Update u = words ? Update::insert(i, row).with_attributes({attrs.data() + i, 1}) : Update::insert(i, row);
    while (!store.try_push(u)) store.publish();
  }
  store.publish();
  return store;
}

void filtered_rows(BackendKind backend, std::size_t n, const std::vector<std::size_t>& qs, std::size_t repeats,
                   std::vector<Row>& rows) {
  constexpr std::size_t k = 16;
  std::mt19937_64 g(1);
  const auto v = points_in_region(g, n, 0);
  std::vector<std::uint32_t> attrs(n);
  std::bernoulli_distribution keep(0.10);
  for (auto& a : attrs) a = keep(g) ? 1u : 0u;
  const ReferenceSet store = make_store(backend, n, 1, v, attrs);
  const Predicate available = Predicate{}.require(0, 1);
  for (const std::size_t nq : qs) {
    const auto queries = points_in_region(g, nq, 0.5);
    std::string note;
    rows.push_back({"unfiltered", n, nq, k, time_ms(repeats, [&] { (void)store.search(queries, k); }, note), note});
    note.clear();
    Neighbors exact;
    rows.push_back({"filtered 10%", n, nq, k, time_ms(repeats, [&] {
                      exact = store.search(queries, k, {}, std::span(&available, 1));
                    }, note), note});
    // The workaround: over-fetch 10 x K, keep the first K that pass (on the host).
    std::size_t exact_rows = 0;
    note.clear();
    const double ms = time_ms(repeats, [&] {
      const Neighbors wide = store.search(queries, 10 * k);
      exact_rows = 0;
      for (std::size_t q = 0; q < nq; ++q) {
        std::vector<PointId> kept;
        for (const PointId id : wide.ids_of(q)) {
          if (id != kInvalidId && attrs[id] == 1 && kept.size() < k) kept.push_back(id);
        }
        if (!exact.ids.empty()) {
          const auto want = exact.ids_of(q);
          exact_rows += kept.size() == k && std::equal(kept.begin(), kept.end(), want.begin());
        }
      }
    }, note);
    rows.push_back({"over-fetch 10x + host filter", n, nq, k, ms,
                    note.empty() && !exact.ids.empty() ? exact_note(exact_rows, nq) : note});
  }
}

void radius_rows(BackendKind backend, std::size_t n, const std::vector<std::size_t>& qs, std::size_t repeats,
                 std::vector<Row>& rows) {
  constexpr std::size_t k = 100;
  std::mt19937_64 g(2);
  const auto v = points_in_region(g, n, 0);
  const ReferenceSet store = make_store(backend, n, 0, v, {});
  const double r = radius_for(n, 100);
  for (const std::size_t nq : qs) {
    const auto queries = points_in_region(g, nq, 0.5);
    std::string note;
    rows.push_back({"k = 100", n, nq, k, time_ms(repeats, [&] { (void)store.search(queries, k); }, note), note});
    note.clear();
    RadiusNeighbors found;
    const double ms = time_ms(repeats, [&] { found = store.radius_search(queries, r); }, note);
    if (note.empty()) {
      note = "r = " + std::to_string(int(r)) + " m, " +
             std::to_string(found.num_queries ? found.ids.size() / found.num_queries : 0) + " points per query";
    }
    rows.push_back({"radius (~100 points)", n, nq, 0, ms, note});
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "auto", csv, queries = "1,1024";
  std::size_t points = 1000000, radius_points = 10000000, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], b = argv[i + 1];
    if (a == "--backend") backend_name = b;
    else if (a == "--points") points = std::stoul(b);
    else if (a == "--radius-points") radius_points = std::stoul(b);
    else if (a == "--queries") queries = b;
    else if (a == "--repeats") repeats = std::stoul(b);
    else if (a == "--csv") csv = b;
    else {
      std::fprintf(stderr, "bench_filters: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const BackendKind backend = backend_name == "cpu" ? BackendKind::Cpu : backend_name == "cuda" ? BackendKind::Cuda
                                                                                                 : BackendKind::Auto;
  const auto qs = bench::numbers(queries);
  std::vector<Row> rows;
  filtered_rows(backend, points, qs, repeats, rows);
  radius_rows(backend, radius_points, qs, repeats, rows);

  std::printf("%-30s %10s %6s %5s %10s  %s\n", "case", "points", "Q", "K", "ms", "note");
  for (const Row& r : rows) {
    std::printf("%-30s %10zu %6zu %5zu %10.3f  %s\n", r.name.c_str(), r.points, r.queries, r.k, r.ms, r.note.c_str());
  }
  // The targets' ratios, per Q.
  for (std::size_t i = 0; i + 1 < rows.size(); ++i) {
    if (rows[i].name == "unfiltered" && i + 2 < rows.size()) {
      std::printf("Q = %zu: filtered / unfiltered = %.2fx, over-fetch / filtered = %.2fx\n", rows[i].queries,
                  rows[i + 1].ms / rows[i].ms, rows[i + 2].ms / rows[i + 1].ms);
    }
    if (rows[i].name == "k = 100") {
      std::printf("Q = %zu: radius / k = 100 = %.2fx\n", rows[i].queries, rows[i + 1].ms / rows[i].ms);
    }
  }
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "case,points,queries,k,ms,note\n";
    for (const Row& r : rows) out << r.name << ',' << r.points << ',' << r.queries << ',' << r.k << ',' << r.ms << ",\"" << r.note << "\"\n";
  }
  return 0;
}
