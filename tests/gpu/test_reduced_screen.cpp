// GPU suite (skips without a CUDA device): the reduced-precision screen (StoreConfig::
// reduced_screen, lib/cuda/kernels/reduced.hpp) forced on, against the CPU backend (ids and
// distance bits) and the exact big-integer reference (support/exact_reference.hpp), with the
// device's result buffers poisoned before every search: hard data (grids of ties, duplicates,
// offsets of 1e3-1e6, every metric it serves, k up to its widest screen and past it), random
// stores of several blocks per query and batches of 1-40 queries, int8 stores of several
// segments per block, values beyond float16's range and below its smallest, and a store whose
// copy is kept in step across publishes (inserts, moves, erases, growth); each in both forms of
// the copy (float16 and int8), and int8 points whose range dwarfs their neighbours' distances.
// Auto against Off on a large store closes it.
#include <algorithm>
#include <cmath>

#include "support/exact_reference.hpp"
#include "support/test_support.hpp"
#include "support/twin_stores.hpp"

using namespace test;

namespace {

using Points = std::unordered_map<PointId, std::vector<float>>;

/// The same store on the CPU backend and on the CUDA backend with the reduced screen as given
/// (TwinStores), and its points: every op goes to both.
struct Twin : TwinStores {
  Twin(std::size_t dim, Metric metric, ReducedFormat format, ReducedScreen reduced = ReducedScreen::Always)
      : TwinStores(config(dim, metric, reduced, format)), dim(dim) {}
  static StoreConfig config(std::size_t dim, Metric metric, ReducedScreen reduced, ReducedFormat format) {
    StoreConfig c;
    c.dim = dim;
    c.metric = metric;
    c.reduced_screen = reduced;
    c.reduced_format = format;
    return c;
  }
  void insert(PointId id, const std::vector<float>& v) {
    push(Update::insert(id, v));
    points[id] = v;
  }
  void move(PointId id, const std::vector<float>& v) {
    push(Update::move(id, v));
    points[id] = v;
  }
  void erase(PointId id) {
    push(Update::erase(id));
    points.erase(id);
  }
  Points points;
  std::size_t dim;
};

/// Every form of the copy: each case runs on both.
constexpr ReducedFormat kFormats[] = {ReducedFormat::Float16, ReducedFormat::Int8};
const char* name(ReducedFormat f) { return f == ReducedFormat::Int8 ? "int8" : "float16"; }

/// Bad queries where the GPU's answers differ from the CPU's in an id or a distance's bits, or
/// (the first `exact` queries) from the exact reference's.
std::size_t check(Twin& t, Metric metric, const std::vector<float>& queries, std::size_t k, std::size_t exact) {
  const Neighbors gpu = t.gpu.search(queries, k), cpu = t.cpu.search(queries, k);
  std::size_t bad = 0;
  for (std::size_t q = 0; q < gpu.num_queries; ++q) {
    const auto gi = gpu.ids_of(q), ci = cpu.ids_of(q);
    const auto gd = gpu.distances_of(q), cd = cpu.distances_of(q);
    std::string why;
    for (std::size_t j = 0; j < k && why.empty(); ++j) {
      if (gi[j] != ci[j] || std::bit_cast<std::uint32_t>(gd[j]) != std::bit_cast<std::uint32_t>(cd[j])) {
        why = concat_str("position ", j, ": gpu id ", gi[j], " distance ", gd[j], ", cpu id ", ci[j], " distance ", cd[j]);
      }
    }
    if (why.empty() && q < exact) {
      const auto ref = exact_ref::knn(metric, t.points, std::span<const float>(queries).subspan(q * t.dim, t.dim), k);
      for (std::size_t j = 0; j < k && why.empty(); ++j) {
        const bool ok = j >= ref.size() ? gi[j] == kInvalidId && std::isinf(gd[j])
                                        : gi[j] == ref[j].id && std::bit_cast<std::uint32_t>(gd[j]) ==
                                                                    std::bit_cast<std::uint32_t>(ref[j].distance);
        if (!ok) why = concat_str("position ", j, ": id ", gi[j], " distance ", gd[j], " against the exact reference");
      }
    }
    if (!why.empty() && bad++ < 3) MESSAGE("query ", q, ": ", why);
  }
  return bad;
}

std::vector<float> gaussian(std::mt19937_64& g, std::size_t n, float offset = 0.0f, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = offset + d(g);
  return v;
}

}  // namespace

TEST_CASE("the reduced screen equals the CPU and the exact reference on hard data (ties, duplicates, offsets, grids)") {
  for (ReducedFormat format : kFormats) {
    CAPTURE(name(format));
    auto g = rng(7100);
    for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine}) {
      for (std::size_t dim : {8, 40, 130, 300}) {
        for (float offset : {0.0f, 1e3f, 1e6f}) {
          if (metric != Metric::L2 && offset != 0.0f) continue;
          CAPTURE(to_string(metric));
          CAPTURE(dim);
          CAPTURE(offset);
          Twin t(dim, metric, format);
          // Integer grid points, each stored 1-3 times; a third erased.
          std::uniform_int_distribution<int> coord(-3, 3), copies(1, 3);
          PointId id = 10;
          for (int i = 0; i < 700; ++i) {
            std::vector<float> v(dim);
            for (auto& x : v) x = offset + float(coord(g));
            if (metric == Metric::Cosine) v[0] = 1.0f + float(i % 3);
            for (int c = copies(g); c > 0; --c, id += 1 + g() % 2) t.insert(id, v);
          }
          t.publish();
          std::vector<PointId> gone;
          for (const auto& [pid, v] : t.points) {
            if (pid % 3 == 0) gone.push_back(pid);
          }
          for (PointId pid : gone) t.erase(pid);
          t.publish();
          std::vector<float> queries(9 * dim);
          for (auto& x : queries) x = offset + 0.5f * float(coord(g));
          if (metric == Metric::Cosine) {
            for (std::size_t q = 0; q < 9; ++q) queries[q * dim] = 1.5f;
          }
          for (std::size_t k : {1, 2, 7, 64, 200, 240, 300}) {
            CAPTURE(k);
            CHECK(check(t, metric, queries, k, 9) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("the reduced screen on random stores of several blocks per query, batches of 1-40") {
  for (ReducedFormat format : kFormats) {
    CAPTURE(name(format));
    auto g = rng(7101);
    for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine}) {
      for (std::size_t dim : {20, 128, 300}) {
        CAPTURE(to_string(metric));
        CAPTURE(dim);
        Twin t(dim, metric, format);
        const std::size_t n = 40'000;
        const auto data = gaussian(g, n * dim);
        for (std::size_t i = 0; i < n; ++i) {
          t.insert(PointId(3 * i + 1), std::vector<float>(data.begin() + i * dim, data.begin() + (i + 1) * dim));
        }
        t.publish();
        for (PointId pid = 1; pid < 3 * n; pid += 3 * 97) t.erase(pid);
        t.publish();
        for (std::size_t nq : {1, 2, 3, 16, 40}) {
          const auto queries = gaussian(g, nq * dim);
          for (std::size_t k : {1, 10, 64, 128}) {
            CAPTURE(nq);
            CAPTURE(k);
            CHECK(check(t, metric, queries, k, nq == 1 && dim == 20 ? 1 : 0) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("the int8 screen over stores of several segments per block, one and two queries") {
  // Stores of 8 and 40 dimensions (one and three 16-byte chunks a point) over enough slots for
  // every block to take several segments, some of them erased, against the exact reference.
  auto g = rng(7106);
  for (std::size_t dim : {8, 40}) {
    CAPTURE(dim);
    Twin t(dim, Metric::L2, ReducedFormat::Int8);
    const std::size_t n = dim == 8 ? 700'000 : 400'000;
    const auto data = gaussian(g, n * dim);
    for (std::size_t i = 0; i < n; ++i) {
      t.insert(PointId(i), std::vector<float>(data.begin() + i * dim, data.begin() + (i + 1) * dim));
    }
    t.publish();
    for (PointId id = 5; id < n; id += 13) t.erase(id);
    t.publish();
    for (std::size_t nq : {1, 2}) {
      const auto queries = gaussian(g, nq * dim);
      for (std::size_t k : {1, 16, 128}) {
        CAPTURE(nq);
        CAPTURE(k);
        CHECK(check(t, Metric::L2, queries, k, k == 16 ? 1 : 0) == 0);
      }
    }
  }
}

TEST_CASE("the reduced screen where values exceed float16's range or lie below its smallest") {
  for (ReducedFormat format : kFormats) {
    CAPTURE(name(format));
    auto g = rng(7102);
    for (Metric metric : {Metric::L2, Metric::InnerProduct}) {
      // 1e17 is near the largest coordinate a 24-dimensional L2 store takes (its distances must
      // not overflow float32).
      for (float scale : {1e-9f, 1e-5f, 3e4f, 1e5f, 1e17f}) {
        CAPTURE(to_string(metric));
        CAPTURE(scale);
        const std::size_t dim = 24;
        Twin t(dim, metric, format);
        for (PointId id = 0; id < 3000; ++id) t.insert(id, gaussian(g, dim, 0.0f, scale));
        // A few points of mixed magnitudes: some elements clamp, others round normally.
        for (PointId id = 5000; id < 5040; ++id) {
          auto v = gaussian(g, dim);
          v[id % dim] = scale * 4.0f;
          t.insert(id, v);
        }
        t.publish();
        const auto queries = gaussian(g, 5 * dim, 0.0f, scale);
        for (std::size_t k : {1, 16, 100}) {
          CAPTURE(k);
          CHECK(check(t, metric, queries, k, 5) == 0);
        }
      }
    }
  }
}

TEST_CASE("the int8 copy where a point's range dwarfs its neighbours' distances (the certificate fails)") {
  // One coordinate of each point near 1e4 (a scale of about 80 per code) and the rest within
  // 1: the copy cannot separate neighbours, so the re-rank's certificate fails and the queries
  // take the exact fallback. Queries of the same shape, and ones whose small elements round to
  // a zero code (a range of 1e6 within the query).
  auto g = rng(7106);
  for (Metric metric : {Metric::L2, Metric::InnerProduct}) {
    CAPTURE(to_string(metric));
    const std::size_t dim = 48;
    Twin t(dim, metric, ReducedFormat::Int8);
    for (PointId id = 0; id < 4000; ++id) {
      auto v = gaussian(g, dim);
      v[id % 3] = 1e4f + float(id % 5);
      t.insert(id, v);
    }
    t.publish();
    auto queries = gaussian(g, 6 * dim);
    for (std::size_t q = 0; q < 3; ++q) queries[q * dim + q] = 1e4f;
    for (std::size_t q = 3; q < 6; ++q) queries[q * dim] = 1e6f;
    for (std::size_t k : {1, 20, 100}) {
      CAPTURE(k);
      CHECK(check(t, metric, queries, k, 6) == 0);
    }
  }
}

TEST_CASE("the reduced screen's copy follows every publish: inserts, moves, erases, growth") {
  for (ReducedFormat format : kFormats) {
    CAPTURE(name(format));
    auto g = rng(7103);
    const std::size_t dim = 72;
    Twin t(dim, Metric::L2, format);
    PointId next = 0;
    for (int round = 0; round < 12; ++round) {
      CAPTURE(round);
      for (int i = 0; i < 700 * (round + 1); ++i) t.insert(next++, gaussian(g, dim));
      std::vector<PointId> ids;
      for (const auto& [pid, v] : t.points) ids.push_back(pid);
      std::sort(ids.begin(), ids.end());
      for (std::size_t i = round % 5; i < ids.size(); i += 5) t.move(ids[i], gaussian(g, dim, 0.1f));
      for (std::size_t i = round % 7; i < ids.size(); i += 7) t.erase(ids[i]);
      t.publish();
      const auto queries = gaussian(g, 4 * dim);
      CHECK(check(t, Metric::L2, queries, 20, round % 4 == 0 ? 1 : 0) == 0);
    }
  }
}

TEST_CASE("Auto and Off give the same answers as Always on a large store (the planner's choice only)") {
  auto g = rng(7104);
  const std::size_t dim = 128, n = 400'000;
  const auto data = gaussian(g, n * dim);
  std::vector<ReferenceSet> stores;
  const std::pair<ReducedScreen, ReducedFormat> modes[] = {
      {ReducedScreen::Always, ReducedFormat::Float16}, {ReducedScreen::Auto, ReducedFormat::Float16},
      {ReducedScreen::Off, ReducedFormat::Float16},    {ReducedScreen::Always, ReducedFormat::Int8},
      {ReducedScreen::Auto, ReducedFormat::Int8}};
  for (const auto& [mode, format] : modes) {
    stores.emplace_back(TwinStores::on(Twin::config(dim, Metric::L2, mode, format), BackendKind::Cuda));
    for (std::size_t i = 0; i < n; ++i) {
      const Update u = Update::insert(PointId(i), std::span<const float>(data).subspan(i * dim, dim));
      while (!stores.back().try_push(u)) stores.back().publish();
    }
    stores.back().publish();
  }
  for (std::size_t nq : {1, 2, 8, 12}) {
    const auto queries = gaussian(g, nq * dim);
    for (std::size_t k : {1, 64, 128}) {
      CAPTURE(nq);
      CAPTURE(k);
      const Neighbors always = stores[0].search(queries, k);
      for (std::size_t s = 1; s < stores.size(); ++s) {
        const Neighbors other = stores[s].search(queries, k);
        CHECK(other.ids == always.ids);
        CHECK(std::equal(other.distances.begin(), other.distances.end(), always.distances.begin(),
                         [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }));
      }
    }
  }
}

TEST_CASE("the reduced screen: each path (sanitizer-sized)") {
  for (ReducedFormat format : kFormats) {
    CAPTURE(name(format));
    // 2,400 slots: segments whose lists are cut (a segment admits more than twice the width at
    // first), a last partial one; one query, two (a group of 2), a batch of 3 (a group of 4) and
    // one of 17 (groups of 8, 8 and 1); a publish of moves and erases between.
    auto g = rng(7105);
    for (Metric metric : {Metric::L2, Metric::InnerProduct}) {
      for (std::size_t dim : {40, 300}) {
        CAPTURE(to_string(metric));
        CAPTURE(dim);
        Twin t(dim, metric, format);
        for (PointId id = 0; id < 2400; ++id) t.insert(id, gaussian(g, dim));
        t.publish();
        for (PointId id = 0; id < 2400; id += 7) t.move(id, gaussian(g, dim));
        for (PointId id = 3; id < 2400; id += 11) t.erase(id);
        t.publish();
        for (std::size_t nq : {1, 2, 3, 17}) {
          const auto queries = gaussian(g, nq * dim);
          for (std::size_t k : {5, 100}) CHECK(check(t, metric, queries, k, 1) == 0);
        }
      }
    }
  }
}
