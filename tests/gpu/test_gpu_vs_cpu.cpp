// GPU suite (skips without a CUDA device): the CUDA backend against the CPU backend on the
// same operations, over random shapes (D 1..1024, K 1..2048 and K > size, Q 1..4096, stores
// up to 3,000,000 points, erased slots, exact ties), with the device's result buffers poisoned
// before every search (StoreConfig::debug); the scan's warp lists in global memory; one-chunk
// stores (several tiles per lane); small batches with ties in slot order; one query bounded by
// its first tiles; groups of 4 and 8 with staged loads; the split sample pass's margin on stores
// where every rank ties; batches screened by dot products in groups of 16 and 32 (12 for inner
// product; and a store where only the screen's margin keeps the answer); stores of about one
// tile per warp; the selection's first prefix; the dense screen of batches over small stores;
// the direct search of small batches over one-chunk stores; the query-resident scan of large
// batches over them (and the selection's 256-thread blocks after it); the spatial index of
// stores of one or two dimensions (forced on, and under Auto across publishes); aggregation parity;
// snapshots of in-flight searches across publishes on the device; graph replays after publishes;
// small batches whose input block the graph reads with a kernel (more than 16 KB); and the
// answers against the exact big-integer reference (support/exact_reference.hpp) on hard data:
// ties at the k-th place, duplicates, offsets of 1e3-1e6, grids, every metric, k to 4096.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <map>

#include "core/engine_access.hpp"
#include "cuda/kernels.hpp"
#include "support/exact_reference.hpp"
#include "support/test_support.hpp"

using namespace test;

namespace {

/// The same store on both backends; every op goes to both.
struct Twin {
  /// The spatial index is off unless asked for: the other tests aim at the scan kernels, and
  /// under Auto large batches over stores of one or two dimensions would take the index.
  Twin(std::size_t dim, Metric metric, TargetSpec target, std::size_t queue = 1 << 16,
       SpatialIndex spatial = SpatialIndex::Off)
      : cpu(make(dim, metric, target, BackendKind::Cpu, queue, spatial)),
        gpu(make(dim, metric, target, BackendKind::Cuda, queue, spatial)) {
    model.dim = dim;
  }
  static StoreConfig make(std::size_t dim, Metric metric, TargetSpec target, BackendKind kind, std::size_t queue,
                          SpatialIndex spatial) {
    StoreConfig c;
    c.spatial_index = spatial;
    c.dim = dim;
    c.metric = metric;
    c.target = target;
    c.backend = kind;
    c.queue_capacity = queue;
    c.debug = kind == BackendKind::Cuda;
    return c;
  }
  void push(const Update& u) {
    while (!cpu.try_push(u)) cpu.publish();
    while (!gpu.try_push(u)) gpu.publish();
  }
  void publish() {
    const auto a = cpu.publish(), b = gpu.publish();
    REQUIRE(a.applied == b.applied);
    REQUIRE(a.rejected.size() == b.rejected.size());
    REQUIRE(a.epoch == b.epoch);
  }
  ReferenceSet cpu, gpu;
  Model model;
};

void fill(Twin& t, Metric metric, std::size_t n, std::mt19937_64& g, double erase_fraction, bool duplicates = false) {
  const std::size_t dim = t.model.dim;
  const auto data = points_for(metric, g, duplicates ? n / 4 + 1 : n, dim);
  const std::size_t distinct = data.size() / dim;
  PointId id = std::uniform_int_distribution<PointId>(0, 1u << 20)(g);
  for (std::size_t i = 0; i < n; ++i, id += 1 + g() % 3) {
    const std::size_t row = i % distinct;
    std::vector<float> v(data.begin() + row * dim, data.begin() + (row + 1) * dim);
    t.push(Update::insert(id, v));
    t.model.vectors[id] = std::move(v);
  }
  t.publish();
  std::bernoulli_distribution erase(erase_fraction);
  std::vector<PointId> gone;
  for (const auto& [pid, v] : t.model.vectors) {
    if (erase(g)) gone.push_back(pid);
  }
  for (PointId pid : gone) {
    t.push(Update::erase(pid));
    t.model.vectors.erase(pid);
  }
  t.publish();
}

/// A store and batch shape of the one-chunk tests below.
struct StoreShape {
  std::size_t dim, n, k, q;
  Metric metric;
  double erased;
  bool duplicates;
  bool one_point = false;  // n copies of one point, ids in slot order (every rank ties)
  SpatialIndex spatial = SpatialIndex::Off;
};

std::string describe(const StoreShape& s) {
  return concat_str("dim=", s.dim, " n=", s.n, " k=", s.k, " q=", s.q, " ", to_string(s.metric), " erased=", s.erased,
                    s.duplicates ? " duplicates" : "", s.one_point ? " one point" : "",
                    s.spatial == SpatialIndex::Always ? " spatial index" : s.spatial == SpatialIndex::Auto ? " spatial Auto" : "");
}

/// Fills both backends' stores as the shape says.
void fill(Twin& t, const StoreShape& s, std::mt19937_64& g) {
  if (!s.one_point) {
    fill(t, s.metric, s.n, g, s.erased, s.duplicates);
    return;
  }
  const auto point = points_for(s.metric, g, 1, s.dim);
  for (std::size_t i = 0; i < s.n; ++i) {
    t.push(Update::insert(PointId(1000 + i), point));
    t.model.vectors[PointId(1000 + i)] = point;
  }
  t.publish();
}

/// The smallest and largest id in the store (the model is never empty where it is used).
std::pair<PointId, PointId> id_bounds(const Model& model) {
  PointId lo = ~PointId(0), hi = 0;
  for (const auto& [pid, v] : model.vectors) {
    lo = std::min(lo, pid);
    hi = std::max(hi, pid);
  }
  return {lo, hi};
}

double tolerance(double d) { return 2e-4 * std::max(1.0, std::fabs(d)) + 1e-5; }

/// Tie-aware comparison of the two backends' neighbours. Returns the number of bad queries.
std::size_t compare(const Neighbors& gpu, const Neighbors& cpu, const Model& model, Metric metric,
                    const std::vector<float>& queries, std::size_t report = 3) {
  std::size_t bad_queries = 0;
  const std::size_t dim = model.dim;
  for (std::size_t q = 0; q < cpu.num_queries; ++q) {
    const auto gi = gpu.ids_of(q), ci = cpu.ids_of(q);
    const auto gd = gpu.distances_of(q), cd = cpu.distances_of(q);
    const auto qv = stored_form(metric, std::span<const float>(queries).subspan(q * dim, dim));
    std::unordered_set<PointId> seen;
    std::string why;
    for (std::size_t j = 0; j < cpu.k && why.empty(); ++j) {
      // Exact answers: the same ids and the same distance bits on both backends.
      if (gi[j] != ci[j] || std::bit_cast<std::uint32_t>(gd[j]) != std::bit_cast<std::uint32_t>(cd[j])) {
        why = concat_str("position ", j, ": gpu id ", gi[j], " distance ", gd[j], ", cpu id ", ci[j], " distance ", cd[j]);
      } else if ((gi[j] == kInvalidId) != (ci[j] == kInvalidId)) {
        why = concat_str("padding differs at ", j);
      } else if (gi[j] == kInvalidId) {
        if (!std::isinf(gd[j])) why = concat_str("padding distance ", gd[j], " at ", j);
      } else if (!(std::fabs(gd[j] - cd[j]) <= tolerance(cd[j]))) {
        why = concat_str("distance ", gd[j], " vs cpu ", cd[j], " at ", j);
      } else if (!seen.insert(gi[j]).second) {
        why = concat_str("duplicate id ", gi[j]);
      } else if (gi[j] != ci[j]) {  // allowed only inside a tie: check the gpu id's real distance
        const auto it = model.vectors.find(gi[j]);
        if (it == model.vectors.end()) {
          why = concat_str("unknown id ", gi[j], " at ", j);
        } else {
          const double real = ref_reported(metric, ref_rank(metric, qv, stored_form(metric, it->second)).rank);
          if (!(std::fabs(real - gd[j]) <= tolerance(real))) why = concat_str("id ", gi[j], " is at ", real, " not ", gd[j]);
        }
      }
    }
    if (!why.empty()) {
      if (bad_queries++ < report) MESSAGE("query ", q, ": ", why);
    }
  }
  return bad_queries;
}

/// The first `count` queries of a batch against the exact big-integer reference (ids exact,
/// distances bit for bit; haversine faithful and non-decreasing). Returns the bad queries.
std::size_t check_exact(const Neighbors& got, const Model& model, Metric metric, const std::vector<float>& queries,
                        std::size_t count = 4) {
  std::size_t bad = 0;
  const std::size_t dim = model.dim;
  for (std::size_t q = 0; q < std::min(count, got.num_queries); ++q) {
    const auto ref = exact_ref::knn(metric, model.vectors, std::span<const float>(queries).subspan(q * dim, dim), got.k);
    const auto ids = got.ids_of(q);
    const auto d = got.distances_of(q);
    for (std::size_t j = 0; j < got.k; ++j) {
      const bool ok = j >= ref.size() ? ids[j] == kInvalidId && std::isinf(d[j])
                      : metric == Metric::Haversine
                          ? ids[j] == ref[j].id && exact_ref::faithful(d[j], ref[j].metres) && (j == 0 || d[j] >= d[j - 1])
                          : ids[j] == ref[j].id && std::bit_cast<std::uint32_t>(d[j]) == std::bit_cast<std::uint32_t>(ref[j].distance);
      if (!ok) {
        if (bad < 3) {
          MESSAGE("query ", q, " position ", j, ": id ", ids[j], " distance ", d[j], ", exact reference id ",
                  j < ref.size() ? ref[j].id : kInvalidId, " distance ", j < ref.size() ? ref[j].distance : INFINITY);
        }
        ++bad;
        break;
      }
    }
  }
  return bad;
}

/// Fills both backends as the shape says, then searches s.q random queries as one batch and/or
/// each alone (one query: its own graph): the GPU's answers equal the CPU's, and on a store of
/// one repeated point, where every rank ties, both are the k smallest ids.
void check_shape(const StoreShape& s, std::mt19937_64& g, bool as_batch, bool each_alone) {
  CAPTURE(describe(s));
  Twin t(s.dim, s.metric, TargetSpec::none(), 1 << 16, s.spatial);
  fill(t, s, g);
  const auto queries = points_for(s.metric, g, s.q, s.dim);
  auto check = [&](const std::vector<float>& batch) {
    const Neighbors gpu = t.gpu.search(batch, s.k), cpu = t.cpu.search(batch, s.k);
    CHECK(compare(gpu, cpu, t.model, s.metric, batch) == 0);
    if (t.model.vectors.size() * s.dim <= 400'000) CHECK(check_exact(gpu, t.model, s.metric, batch) == 0);
    if (s.one_point) CHECK(gpu.ids == cpu.ids);
  };
  if (as_batch) check(queries);
  for (std::size_t q = 0; each_alone && q < s.q; ++q) {
    check(std::vector<float>(queries.begin() + q * s.dim, queries.begin() + (q + 1) * s.dim));
  }
}

/// check_shape for each shape in turn, from one random stream seeded by salt.
void check_shapes(std::uint64_t salt, std::initializer_list<StoreShape> shapes, bool as_batch, bool each_alone) {
  auto g = rng(salt);
  for (const StoreShape& s : shapes) check_shape(s, g, as_batch, each_alone);
}

/// n points and q queries of 64 dims, each element about 10,000 from the origin and the vectors
/// about 1 apart per element (|x|^2 about 10^10, neighbours about 100 apart): k = 20 answers
/// equal the CPU's. A screen's float dot products err by hundreds here, so only its proven
/// margin keeps the answer.
void check_far_points(std::uint64_t seed, std::size_t n, std::size_t q) {
  auto g = rng(seed);
  const std::size_t dim = 64, k = 20;
  Twin t(dim, Metric::L2, TargetSpec::none());
  std::normal_distribution<float> noise(0.0f, 1.0f);
  auto far_point = [&] {
    std::vector<float> v(dim);
    for (float& x : v) x = 10'000.0f + noise(g);
    return v;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = far_point();
    t.push(Update::insert(PointId(i), v));
    t.model.vectors[PointId(i)] = v;
  }
  t.publish();
  std::vector<float> queries;
  for (std::size_t i = 0; i < q; ++i) {
    const auto v = far_point();
    queries.insert(queries.end(), v.begin(), v.end());
  }
  const Neighbors gpu = t.gpu.search(queries, k);
  CHECK(compare(gpu, t.cpu.search(queries, k), t.model, Metric::L2, queries) == 0);
  if (n <= 5000) CHECK(check_exact(gpu, t.model, Metric::L2, queries) == 0);
}

}  // namespace

TEST_CASE("GPU equals CPU when one caller alternates batch sizes and k (cached graphs)") {
  // Batches of up to 16 replay a CUDA graph per (batch size, k, ..) of one pooled context, larger
  // ones launch directly into the same staging. A graph holds the offsets of its own batch's
  // staging layout, so a caller that alternates sizes and k reuses each graph while the arrays
  // stay where they are, and captures again only after they grew: each answer here must equal
  // the CPU's, with the outputs poisoned before every search, over a sequence that goes back and
  // forth (and grows the arrays once in the middle).
  auto g = rng(5010);
  for (const Metric metric : {Metric::L2, Metric::Haversine}) {
    const std::size_t dim = metric == Metric::Haversine ? 2 : 24;
    Twin t(dim, metric, TargetSpec::none());
    fill(t, metric, 30'000, g, 0.1);
    const std::pair<std::size_t, std::size_t> batches[] = {{1, 16}, {3, 5},  {16, 16}, {2, 64}, {40, 16}, {1, 5},
                                                           {16, 5}, {64, 5}, {5, 16}, {1, 16}, {3, 5},   {40, 16}};
    std::size_t bad = 0;
    for (int round = 0; round < 3; ++round) {
      for (const auto& [nq, k] : batches) {
        // The middle round first asks for a larger k, which grows the context's arrays.
        const std::size_t kk = round == 1 && nq == 16 ? 300 : k;
        const auto queries = points_for(metric, g, nq, dim);
        const std::size_t b = compare(t.gpu.search(queries, kk), t.cpu.search(queries, kk), t.model, metric, queries);
        CAPTURE(round);
        CAPTURE(nq);
        CAPTURE(kk);
        CHECK(b == 0);
        bad += b;
      }
    }
    // More shapes than a context keeps graphs for (64): the cache is dropped when full and
    // refilled, every answer still the CPU's.
    for (std::size_t k = 1; k <= 70; ++k) {
      const auto queries = points_for(metric, g, 1 + k % 3, dim);
      const std::size_t b = compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, metric, queries);
      CAPTURE(k);
      CHECK(b == 0);
      bad += b;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("GPU equals CPU where a small batch's input block exceeds 16 KB (its graph reads it with a kernel)") {
  // A graph brings a chunk's input block (queries, id ranges, thresholds) of up to 16 KB in with
  // a copy node and a larger one with a kernel that reads the mapped staging (launch_copy_in):
  // 1-16 queries of 1,024 dims (4 KB each: the kernel from 4 queries) and of 300 dims (1.2 KB:
  // from 14), with and without id ranges, each batch searched twice (the second replays the
  // first's graph). Every batch has new queries, so a block left uncopied answers the last one's.
  auto g = rng(5020);
  for (const std::size_t dim : {300, 1024}) {
    CAPTURE(dim);
    Twin t(dim, Metric::L2, TargetSpec::none());
    fill(t, Metric::L2, 3'000, g, 0.1);
    const auto [lo, hi] = id_bounds(t.model);
    std::size_t bad = 0;
    for (std::size_t nq = 1; nq <= 16; ++nq) {
      for (const std::size_t k : {1, 20}) {
        const auto queries = points_for(Metric::L2, g, nq, dim);
        std::vector<IdRange> ranges(nq);
        for (std::size_t q = 0; q < nq; ++q) ranges[q] = {lo + 50 * q, hi + 1 - 50 * q};
        for (int replay = 0; replay < 2; ++replay) {
          CAPTURE(nq);
          CAPTURE(k);
          CAPTURE(replay);
          const std::size_t all = compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, Metric::L2, queries);
          const std::size_t ranged =
              compare(t.gpu.search(queries, k, ranges), t.cpu.search(queries, k, ranges), t.model, Metric::L2, queries);
          CHECK(all == 0);
          CHECK(ranged == 0);
          bad += all + ranged;
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("GPU equals CPU over random shapes, with poisoned outputs") {
  auto g = rng(5000);
  const std::size_t dims[] = {1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 100, 128, 300, 784, 1024};
  const std::size_t ks[] = {1, 2, 5, 16, 31, 64, 100, 128, 256, 1000, 2048};
  const std::size_t qs[] = {1, 2, 3, 5, 8, 12, 16, 17, 33, 100, 1000, 4096};
  const Metric metrics[] = {Metric::L2, Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine};
  std::size_t total_bad = 0, cases = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < 60; ++c) {
    const Metric metric = metrics[g() % std::size(metrics)];
    const std::size_t dim = metric == Metric::Haversine ? 2 : dims[g() % std::size(dims)];
    const std::size_t k = ks[g() % std::size(ks)];
    std::size_t nq = qs[g() % std::size(qs)];
    // Keep each case's work (and the CPU reference's) bounded.
    const std::size_t budget = 4'000'000'000ull;
    std::size_t n = std::size_t(1) << (g() % 18);  // 1 .. 131072
    if (c % 10 == 0) n = 0;
    if (c % 10 == 1) n = k / 2;  // k > size
    while (n * dim * nq > budget && nq > 1) nq /= 2;
    CAPTURE(c);
    CAPTURE(to_string(metric));
    CAPTURE(dim);
    CAPTURE(n);
    CAPTURE(k);
    CAPTURE(nq);
    Twin t(dim, metric, TargetSpec::none());
    fill(t, metric, n, g, 0.15, c % 7 == 3);
    const auto queries = points_for(metric, g, nq, dim);
    const Neighbors cpu = t.cpu.search(queries, k);
    const Neighbors gpu = t.gpu.search(queries, k);
    REQUIRE(gpu.num_queries == nq);
    CHECK(gpu.epoch == cpu.epoch);
    const std::size_t bad = compare(gpu, cpu, t.model, metric, queries);
    CHECK(bad == 0);
    total_bad += bad;
    ++cases;
  }
  MESSAGE(cases, " random shapes compared in ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  CHECK(total_bad == 0);
}

TEST_CASE("GPU equals CPU on large stores: 3,000,000 x 2, 1,000,000 x 16 with erased slots, K = 2048") {
  auto g = rng(5100);
  struct Big {
    std::size_t dim, n, k, q;
    Metric metric;
  };
  for (const Big& b : {Big{2, 3'000'000, 16, 64, Metric::L2}, Big{2, 1'000'000, 2048, 8, Metric::Haversine},
                       Big{16, 1'000'000, 100, 33, Metric::L2}, Big{128, 200'000, 2048, 3, Metric::L2}}) {
    CAPTURE(b.dim);
    CAPTURE(b.n);
    CAPTURE(b.k);
    Twin t(b.dim, b.metric, TargetSpec::none());
    fill(t, b.metric, b.n, g, 0.05);
    const auto queries = points_for(b.metric, g, b.q, b.dim);
    CHECK(compare(t.gpu.search(queries, b.k), t.cpu.search(queries, b.k), t.model, b.metric, queries) == 0);
  }
}

TEST_CASE("GPU equals CPU with visibility ranges on large low-dimension stores (sample pass from one query)") {
  // Stores large enough for the sample pass, which at dim <= 8 runs from Q = 1: its bound must
  // respect each query's id range (a narrow range may hold fewer than k sample points).
  auto g = rng(5150);
  struct Shape {
    std::size_t dim, n, k;
    Metric metric;
  };
  for (const Shape& s : {Shape{2, 600'000, 16, Metric::L2}, Shape{2, 400'000, 64, Metric::Haversine},
                         Shape{8, 400'000, 32, Metric::L2}}) {
    CAPTURE(s.dim);
    CAPTURE(s.n);
    CAPTURE(s.k);
    Twin t(s.dim, s.metric, TargetSpec::none());
    fill(t, s.metric, s.n, g, 0.05);
    const auto [lo, hi] = id_bounds(t.model);
    for (std::size_t nq : {1, 2, 3, 5}) {
      CAPTURE(nq);
      const auto queries = points_for(s.metric, g, nq, s.dim);
      std::vector<IdRange> ranges(nq);
      const PointId span = hi - lo + 1;
      for (std::size_t q = 0; q < nq; ++q) {
        // Wide, half, narrow (a few hundred ids: fewer than k sample points) and empty ranges.
        const PointId width = q % 4 == 0 ? span : q % 4 == 1 ? span / 2 : q % 4 == 2 ? 300 : 0;
        const PointId begin = lo + g() % (span - std::min(width, span) + 1);
        ranges[q] = {begin, begin + width};
      }
      const Neighbors cpu = t.cpu.search(queries, s.k, ranges);
      const Neighbors gpu = t.gpu.search(queries, s.k, ranges);
      REQUIRE(gpu.num_queries == nq);
      CHECK(compare(gpu, cpu, t.model, s.metric, queries) == 0);
      std::size_t outside = 0;
      for (std::size_t q = 0; q < nq; ++q) {
        for (PointId id : gpu.ids_of(q)) outside += id != kInvalidId && (id < ranges[q].begin || id >= ranges[q].end);
      }
      CHECK(outside == 0);
      const Neighbors all_cpu = t.cpu.search(queries, s.k), all_gpu = t.gpu.search(queries, s.k);
      CHECK(compare(all_gpu, all_cpu, t.model, s.metric, queries) == 0);
    }
  }
}

TEST_CASE("GPU equals CPU where the scan's warp lists live in global memory (batches of 8-33 queries)") {
  // Each shape runs a sample pass and its query group's lists (group x k per warp) would cost the
  // scan warps or a smaller group in shared memory, so the plan keeps them in global memory:
  // large stores from Q = 4 (every 32nd tile sampled), smaller stores from Q = 12, or 8 at
  // k >= 128 (every 8th tile). Each metric's kernel, erased slots and visibility ranges. From 8
  // queries the sample pass stages them in shared memory, 8 per warp (up to 1,536 dims; 1,540
  // takes the kernel that reads them from global memory).
  auto g = rng(5170);
  struct Shape {
    std::size_t dim, n, k, q;
    Metric metric;
  };
  for (const Shape& s : {Shape{128, 300'000, 128, 16, Metric::L2}, Shape{300, 300'000, 64, 12, Metric::InnerProduct},
                         Shape{40, 300'000, 200, 9, Metric::Cosine}, Shape{784, 70'000, 128, 33, Metric::L2},
                         Shape{2, 100'000, 100, 16, Metric::Haversine}, Shape{64, 120'000, 64, 12, Metric::L2},
                         Shape{1536, 20'000, 32, 12, Metric::L2}, Shape{1540, 20'000, 32, 12, Metric::InnerProduct}}) {
    CAPTURE(s.dim);
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(s.q);
    Twin t(s.dim, s.metric, TargetSpec::none());
    fill(t, s.metric, s.n, g, 0.05);
    const auto queries = points_for(s.metric, g, s.q, s.dim);
    CHECK(compare(t.gpu.search(queries, s.k), t.cpu.search(queries, s.k), t.model, s.metric, queries) == 0);
    const auto [lo, hi] = id_bounds(t.model);
    std::vector<IdRange> ranges(s.q);
    for (std::size_t q = 0; q < s.q; ++q) {
      const PointId width = q % 3 == 0 ? (hi - lo + 1) / 2 : q % 3 == 1 ? 500 : 0;
      const PointId begin = lo + g() % (hi - lo + 1 - width);
      ranges[q] = {begin, begin + width};
    }
    CHECK(compare(t.gpu.search(queries, s.k, ranges), t.cpu.search(queries, s.k, ranges), t.model, s.metric, queries) == 0);
  }
}

TEST_CASE("GPU equals CPU on one-chunk stores, where each lane scores several tiles (dim 1-4, batches of 4-300)") {
  // Stores of at most four elements per vector run kernels of their own; where survivors are
  // sparse (large stores, small k x group) each lane scores 2-4 tiles at once and tests their
  // smallest rank (erased slots score NaN), then re-scores a group with survivors tile by tile.
  // Every shape but the last takes that path: partial tile groups, erased slots, duplicates
  // (exact ties), every metric kind, groups of 4, 8, 12 and 16. (A mutant that skips each
  // group's last tile when re-scoring fails six of the seven; the dim-1 shape's ties hide it.)
  check_shapes(5190,
             {StoreShape{2, 1'000'003, 16, 4, Metric::L2, 0.2, false},
              StoreShape{2, 1'000'003, 3, 300, Metric::L2, 0.05, true},
              StoreShape{1, 600'000, 2, 16, Metric::L2, 0.1, true},
              StoreShape{3, 1'000'000, 8, 8, Metric::InnerProduct, 0.1, false},
              StoreShape{4, 700'000, 5, 33, Metric::L2, 0.3, true},
              StoreShape{2, 1'000'000, 4, 12, Metric::Haversine, 0.1, false},
              StoreShape{3, 1'000'000, 1, 17, Metric::Cosine, 0.0, false},
              StoreShape{2, 100'000, 16, 64, Metric::L2, 0.5, true}},
             /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU on small batches over one-chunk stores (1-4 queries, ties in slot order)") {
  // Stores of at most four stored elements, batches of one to four queries (graph replays; k <=
  // 64 takes the direct search, larger k the sample pass and the scan): every metric kind,
  // erased slots, duplicates, k near or above the store size, tiny and empty stores, and stores
  // of one point repeated with ids in slot order, where every rank ties and the answer must be
  // the k smallest ids (a scan warp's first tiles, or a direct block's segment, tie its list).
  check_shapes(5230,
             {StoreShape{2, 100'000, 16, 1, Metric::L2, 0.1, false},
              StoreShape{2, 1'000'003, 16, 1, Metric::L2, 0.2, false},
              StoreShape{2, 3'000'000, 100, 2, Metric::Haversine, 0.1, false},
              StoreShape{1, 200'000, 256, 4, Metric::L2, 0.0, true},
              StoreShape{3, 500'000, 5, 3, Metric::InnerProduct, 0.1, false},
              StoreShape{3, 300'000, 64, 4, Metric::Cosine, 0.3, true},
              StoreShape{4, 50'000, 1, 1, Metric::L2, 0.5, false},
              StoreShape{2, 5'000, 200, 2, Metric::L2, 0.2, false},
              StoreShape{2, 100, 16, 4, Metric::L2, 0.0, false},
              StoreShape{2, 10, 16, 1, Metric::L2, 0.0, false},
              StoreShape{2, 0, 8, 2, Metric::L2, 0.0, false},
              StoreShape{2, 200'000, 16, 1, Metric::L2, 0.0, false, true},
              StoreShape{2, 300'000, 256, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("small batches over one-chunk stores: the scan's paths (sanitizer-sized)") {
  // The case above at racecheck's scale: one to four queries at k above the direct search's 64
  // (the scan; one query bounds itself from its first tiles), every metric kind, erased slots,
  // duplicates, k above the store size, an empty store and one repeated point (every rank ties).
  check_shapes(5240,
             {StoreShape{2, 20'000, 100, 1, Metric::L2, 0.1, false},
              StoreShape{2, 20'000, 100, 4, Metric::Haversine, 0.1, false},
              StoreShape{1, 5'000, 256, 2, Metric::L2, 0.0, true},
              StoreShape{3, 8'000, 128, 3, Metric::Cosine, 0.3, true},
              StoreShape{3, 6'000, 80, 1, Metric::InnerProduct, 0.1, false},
              StoreShape{2, 100, 200, 2, Metric::L2, 0.0, false},
              StoreShape{2, 0, 100, 2, Metric::L2, 0.0, false},
              StoreShape{2, 3'000, 200, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("GPU equals CPU where small batches over one-chunk stores take the direct search") {
  // One to four queries at k <= 64 over stores of at most four stored elements: one kernel in
  // place of the sample pass and the scan, whose blocks bound their segments by their group
  // minima and the grid-wide bound and hand the selection their k best. Blocks of several
  // segments (3,000,000 points, or four queries sharing the SMs), every metric kind, erased
  // slots (90% of one store), duplicates, k = 1 and k = 64, and stores of one repeated point:
  // every rank ties, so each segment admits all its points, the list is cut to k between
  // segments by the k-th smallest id (a radix select down to the id's last byte), and the answer
  // is the k smallest ids.
  check_shapes(5260,
             {StoreShape{2, 3'000'000, 16, 1, Metric::L2, 0.1, false},
              StoreShape{2, 1'000'000, 16, 4, Metric::L2, 0.2, false},
              StoreShape{2, 1'500'000, 16, 1, Metric::L2, 0.0, false, true},
              StoreShape{2, 100'000, 64, 2, Metric::L2, 0.0, false, true},
              StoreShape{4, 300'000, 64, 3, Metric::InnerProduct, 0.1, false},
              StoreShape{3, 200'000, 33, 2, Metric::Cosine, 0.5, true},
              StoreShape{2, 50'000, 64, 4, Metric::Haversine, 0.9, false},
              StoreShape{1, 2'000'000, 1, 1, Metric::L2, 0.0, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("the direct search: each path (sanitizer-sized)") {
  // Small enough for compute-sanitizer: one block and many, lists cut between segments (four
  // queries share the SMs, so blocks take several segments of one repeated point), all ties at
  // k = 64, erased slots and an empty store.
  check_shapes(5265,
             {StoreShape{2, 20'000, 16, 2, Metric::L2, 0.1, false},
              StoreShape{2, 1'000, 5, 1, Metric::L2, 0.0, false},
              StoreShape{2, 700'000, 32, 4, Metric::L2, 0.0, false, true},
              StoreShape{2, 80'000, 64, 1, Metric::L2, 0.0, false, true},
              StoreShape{3, 30'000, 8, 3, Metric::InnerProduct, 0.5, true},
              StoreShape{2, 0, 4, 1, Metric::L2, 0.0, false}},
             /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU through the spatial index (dims 1-2, the sphere, k to 128, erased slots, ties, empty stores)") {
  // StoreConfig::spatial_index = Always: every search of a store of one or two stored elements
  // (L2, cosine), or of points on the unit sphere (haversine; cosine at three dims: a grid on
  // each face of a cube, boxes of four elements), at k <= 128 without id ranges builds the tree
  // of boxes and walks it, a warp per query. Stores from empty to 2,000,000 points (a root that is a leaf, partial leaves, up to
  // five levels), erased slots (90% of one store),
  // duplicates, every rank tied (one repeated point: the answer is the k smallest ids, so
  // boxes whose bound equals the k-th must still be opened), k = 1 to 128 (lists of one, two and
  // four entries per lane, the entry pushed out of a full list and across registers), batches of 1 to 4,096
  // and one query at a time (graph replays of the spatial plan).
  constexpr SpatialIndex on = SpatialIndex::Always;
  check_shapes(5280,
               {StoreShape{2, 1'000'003, 16, 1024, Metric::L2, 0.2, false, false, on},
                StoreShape{2, 2'000'000, 32, 4096, Metric::L2, 0.0, false, false, on},
                StoreShape{2, 300'000, 1, 17, Metric::L2, 0.9, true, false, on},
                StoreShape{1, 500'000, 7, 300, Metric::L2, 0.1, true, false, on},
                StoreShape{2, 200'000, 32, 64, Metric::Cosine, 0.3, false, false, on},
                StoreShape{2, 1'000'000, 16, 1024, Metric::Haversine, 0.1, false, false, on},
                StoreShape{2, 300'000, 32, 100, Metric::Haversine, 0.5, true, false, on},
                StoreShape{3, 400'000, 8, 200, Metric::Cosine, 0.2, false, false, on},
                StoreShape{2, 40'000, 12, 30, Metric::Haversine, 0.0, false, true, on},
                StoreShape{2, 1'000'000, 128, 1024, Metric::L2, 0.1, false, false, on},
                StoreShape{2, 200'000, 64, 300, Metric::L2, 0.3, true, false, on},
                StoreShape{2, 300'000, 33, 50, Metric::Haversine, 0.2, false, false, on},
                StoreShape{2, 20'000, 100, 20, Metric::L2, 0.0, false, true, on},
                StoreShape{2, 90, 128, 5, Metric::L2, 0.1, false, false, on},
                StoreShape{2, 100'000, 20, 50, Metric::L2, 0.0, false, true, on},
                StoreShape{2, 5'000, 32, 40, Metric::L2, 0.0, false, true, on},
                StoreShape{2, 33, 32, 8, Metric::L2, 0.1, false, false, on},
                StoreShape{2, 20, 32, 3, Metric::L2, 0.0, false, false, on},
                StoreShape{2, 1, 4, 2, Metric::L2, 0.0, false, false, on},
                StoreShape{2, 0, 8, 2, Metric::L2, 0.0, false, false, on}},
               /*as_batch=*/true, /*each_alone=*/false);
  check_shapes(5281,
               {StoreShape{2, 1'000'000, 16, 6, Metric::L2, 0.1, false, false, on},
                StoreShape{1, 70'000, 32, 3, Metric::L2, 0.0, true, false, on},
                StoreShape{2, 50'000, 5, 4, Metric::L2, 0.0, false, true, on}},
               /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("the spatial index: each path (sanitizer-sized)") {
  // Small enough for compute-sanitizer: a tree of three levels and of one leaf, an empty store,
  // erased slots, ties everywhere (one repeated point), merges by sorting and by insertion, and
  // points on the sphere (boxes of four elements).
  constexpr SpatialIndex on = SpatialIndex::Always;
  check_shapes(5285,
               {StoreShape{2, 20'000, 16, 64, Metric::L2, 0.5, false, false, on},
                StoreShape{2, 2'000, 32, 8, Metric::L2, 0.0, false, true, on},
                StoreShape{1, 3'000, 3, 5, Metric::L2, 0.0, true, false, on},
                StoreShape{2, 10'000, 16, 32, Metric::Haversine, 0.3, false, false, on},
                StoreShape{2, 8'000, 100, 16, Metric::L2, 0.2, false, false, on},
                StoreShape{2, 30, 8, 2, Metric::L2, 0.2, false, false, on},
                StoreShape{2, 0, 4, 1, Metric::L2, 0.0, false, false, on}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the spatial index on clustered points, points far from the origin, and through publishes (Auto)") {
  // Clustered data (most points in a few tight clusters, some far away, queries anywhere) gives
  // leaves of very different sizes; points near 10^6 with neighbours 10^-2 apart put the ranks'
  // rounding in play. Under Auto the index is built once 1,024 queries have been searched since
  // the last publish: the searches before and after it, and after moves and erases (each publish
  // makes the index stale; the two buffers each keep their own), equal the CPU's.
  auto g = rng(5290);
  for (const bool far : {false, true}) {
    CAPTURE(far);
    Twin t(2, Metric::L2, TargetSpec::none(), 1 << 16, SpatialIndex::Auto);
    std::normal_distribution<float> tight(0.0f, far ? 0.01f : 0.001f);
    std::uniform_real_distribution<float> anywhere(far ? 1e6f - 10.0f : -1.0f, far ? 1e6f + 10.0f : 1.0f);
    std::vector<std::array<float, 2>> centres(5);
    for (auto& c : centres) c = {anywhere(g), anywhere(g)};
    auto point = [&] {
      if (g() % 10 == 0) return std::vector<float>{anywhere(g), anywhere(g)};
      const auto& c = centres[g() % centres.size()];
      return std::vector<float>{c[0] + tight(g), c[1] + tight(g)};
    };
    for (PointId id = 0; id < 300'000; ++id) {
      const auto v = point();
      t.push(Update::insert(id, v));
      t.model.vectors[id] = v;
    }
    t.publish();
    for (int round = 0; round < 6; ++round) {
      CAPTURE(round);
      for (const std::size_t q : {1, 40, 200, 900}) {  // the index is built during each round
        std::vector<float> queries;
        for (std::size_t i = 0; i < q; ++i) {
          const auto v = i % 2 ? point() : std::vector<float>{anywhere(g), anywhere(g)};
          queries.insert(queries.end(), v.begin(), v.end());
        }
        for (const std::size_t k : {1, 16, 32}) {
          CHECK(compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, Metric::L2, queries) == 0);
        }
      }
      for (int i = 0; i < 2000; ++i) {  // moves, erases and inserts
        const PointId id = g() % 300'000;
        if (t.model.vectors.count(id) && g() % 4 == 0) {
          t.push(Update::erase(id));
          t.model.vectors.erase(id);
        } else {
          const auto v = point();
          t.push(t.model.vectors.count(id) ? Update::move(id, v) : Update::insert(id, v));
          t.model.vectors[id] = v;
        }
      }
      t.publish();
    }
  }
}

/// Rounds of publishes over a store under the spatial index, each checked against the CPU: drifts
/// (a twentieth of the points moved a little: they stay in their leaves, whose boxes grow), jumps
/// (points moved anywhere: the overflow), erases and inserts (new ids, and ids erased before).
/// Each round's first search finds the index stale: a refit where SpatialTree::refittable allows
/// (each buffer's index sees two rounds of writes, a tenth of the store: under the quarter that a
/// refit takes; the overflow grows by the jumps and inserts and crosses its limit of 2,048 within
/// the rounds, which makes the next one a build), else a build; the searches after it use the
/// index as it is. A build whose search skipped the overflow fails here (checked on an H100).
void check_refits(std::uint64_t seed, Metric metric, std::size_t n, std::size_t rounds, std::size_t jumps,
                  std::size_t churn, SpatialIndex spatial, std::initializer_list<std::size_t> batches) {
  auto g = rng(seed);
  const std::size_t dim = 2;
  Twin t(dim, metric, TargetSpec::none(), 1 << 17, spatial);
  const bool sphere = metric == Metric::Haversine;
  std::normal_distribution<float> step(0.0f, sphere ? 0.05f : 0.002f);
  auto drifted = [&](const std::vector<float>& v) {
    if (!sphere) return std::vector<float>{v[0] + step(g), v[1] + step(g)};
    const float lon = v[1] + step(g);
    return std::vector<float>{std::clamp(v[0] + step(g), -89.9f, 89.9f), lon > 180 ? lon - 360 : lon < -180 ? lon + 360 : lon};
  };
  const auto data = points_for(metric, g, n, dim);
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<float> v(data.begin() + i * dim, data.begin() + (i + 1) * dim);
    t.push(Update::insert(PointId(i), v));
    t.model.vectors[PointId(i)] = v;
  }
  t.publish();
  PointId next_id = n;
  for (std::size_t round = 0; round < rounds; ++round) {
    CAPTURE(round);
    for (std::size_t i = 0; i < n / 20; ++i) {
      const PointId id = g() % next_id;
      const auto it = t.model.vectors.find(id);
      if (it == t.model.vectors.end()) continue;
      it->second = drifted(it->second);
      t.push(Update::move(id, it->second));
    }
    for (std::size_t i = 0; i < jumps; ++i) {
      const PointId id = g() % next_id;
      if (!t.model.vectors.count(id)) continue;
      const auto v = points_for(metric, g, 1, dim);
      t.push(Update::move(id, v));
      t.model.vectors[id] = v;
    }
    for (std::size_t i = 0; i < churn; ++i) {
      const PointId gone = g() % next_id;
      if (t.model.vectors.erase(gone)) t.push(Update::erase(gone));
      // half new ids, half ids erased before (their slots were freed)
      const PointId id = i % 2 ? next_id++ : g() % next_id;
      if (t.model.vectors.count(id)) continue;
      const auto v = points_for(metric, g, 1, dim);
      t.push(Update::insert(id, v));
      t.model.vectors[id] = v;
    }
    t.publish();
    for (const std::size_t q : batches) {
      CAPTURE(q);
      const auto queries = points_for(metric, g, q, dim);
      for (const std::size_t k : {1, 16, 100}) {
        CAPTURE(k);
        CHECK(compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, metric, queries) == 0);
      }
    }
  }
}

TEST_CASE("the spatial index refit across publishes: drifts, jumps, erases, inserts (Always and Auto)") {
  check_refits(5300, Metric::L2, 200'000, 6, 500, 300, SpatialIndex::Always, {300, 1});
  check_refits(5301, Metric::Haversine, 100'000, 5, 700, 200, SpatialIndex::Always, {200});
  // Auto: 64 queries at a time, so the scans serve the first after each publish and the index
  // is refit once 128 have waited; k = 100 takes the index from 1,024 queries only.
  check_refits(5302, Metric::L2, 100'000, 4, 300, 300, SpatialIndex::Auto, {64, 64, 1024});
  // 20,000 jumps a buffer: each refit leaves more than SpatialTree::kMaxSearchOverflow in the
  // overflow. The first search ranks it (the refit's figures are not read yet), the second finds
  // the index unusable and builds; each buffer tries a refit again after 8 builds (rounds 18 and 19).
  check_refits(5303, Metric::L2, 200'000, 20, 10'000, 100, SpatialIndex::Always, {8, 8});
}

TEST_CASE("the spatial index refit: each path (sanitizer-sized)") {
  check_refits(5305, Metric::L2, 20'000, 3, 900, 100, SpatialIndex::Always, {40});
  check_refits(5306, Metric::Haversine, 10'000, 2, 900, 100, SpatialIndex::Always, {20});
}

TEST_CASE("GPU equals CPU where large batches over one-chunk stores take the query-resident scan") {
  // Batches of 16+ queries at k <= 128 (queries x k >= 1,024 on large stores, 4,096 on small
  // ones) over stores of at most four stored elements, L2 ranks (haversine and cosine included),
  // after a sample pass: each lane holds 4 queries, the warps of a block share 128 and split its
  // slots, a dot-product screen with a proven margin picks the pairs to rank exactly, each warp
  // keeps a list per query (unsorted until it is full, then replacing its largest entry) and the
  // block merges them. 17 to 4,096 queries (1 to 32 rows of blocks), k = 1 and k = 128, erased
  // slots (half of one store), duplicates (exact ties), a store of one repeated point (every list
  // fills and replaces by id: the answer is the k smallest ids), small and large stores, and two
  // shapes that keep the scan (no sample pass).
  check_shapes(5280,
               {StoreShape{2, 1'000'003, 16, 1024, Metric::L2, 0.1, false},
                StoreShape{2, 300'000, 1, 1100, Metric::L2, 0.2, true},
                StoreShape{1, 300'000, 128, 513, Metric::L2, 0.0, true},
                StoreShape{3, 500'000, 64, 200, Metric::Cosine, 0.3, false},
                StoreShape{2, 400'000, 16, 4096, Metric::Haversine, 0.05, false},
                StoreShape{4, 300'000, 64, 17, Metric::L2, 0.5, true},
                StoreShape{2, 60'000, 64, 64, Metric::L2, 0.0, false, true},
                StoreShape{2, 3'000, 16, 300, Metric::L2, 0.1, false},
                StoreShape{2, 2'000, 100, 300, Metric::L2, 0.1, false},
                StoreShape{2, 0, 8, 20, Metric::L2, 0.0, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where a resident batch exceeds the workspace (chunks of whole rows)") {
  // 30,000 queries at k = 128 over 60,000 x 2: the sample's keys and one block's lists per query
  // (about 21 KB) exceed the 512 MB candidate workspace, so the plan runs the batch in chunks of
  // whole rows of 128 queries, each with its own sample pass.
  check_shapes(5288, {StoreShape{2, 60'000, 128, 30'000, Metric::L2, 0.1, false}}, /*as_batch=*/true,
               /*each_alone=*/false);
}

TEST_CASE("the query-resident scan: lists that fill and replace, and norms that may overflow") {
  auto g = rng(5285);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  auto run = [&](Twin& t, const std::vector<float>& queries, std::size_t k) {
    CHECK(compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, Metric::L2, queries) == 0);
  };
  SUBCASE("points in slot order along a line: each query's neighbours lie in one block's share") {
    // Every query's survivors crowd one block, whose list fills, then replaces its largest entry
    // (k = 16 and 128) and lowers the query's bound.
    Twin t(2, Metric::L2, TargetSpec::none());
    const std::size_t n = 300'000;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> v{float(i) / float(n), 0.5f};
      t.push(Update::insert(PointId(i), v));
      t.model.vectors[PointId(i)] = v;
    }
    t.publish();
    std::vector<float> queries;
    for (int q = 0; q < 300; ++q) {
      queries.push_back(unit(g));
      queries.push_back(0.5f + 0.01f * unit(g));
    }
    run(t, queries, 16);
    run(t, queries, 128);
  }
  SUBCASE("norms of 10^37 and more: those tiles and queries rank every pair exactly") {
    // Half the points (and 8 of the 64 queries) lie about 4e18 from the origin (within the
    // coordinate bound of streamknn/metric.hpp, 4.6e18 at dim 2), where |x|^2 reaches
    // screen_bounds' `huge` and a float dot product could overflow: the screen is skipped there,
    // and the answers still equal the CPU's (k = 64: 64 x 64 takes the resident scan on this
    // small store).
    Twin t(2, Metric::L2, TargetSpec::none());
    auto point = [&](bool far) {
      return far ? std::vector<float>{4e18f + 1e14f * unit(g), 4e18f + 1e14f * unit(g)} : std::vector<float>{unit(g), unit(g)};
    };
    for (std::size_t i = 0; i < 100'000; ++i) {
      const auto v = point(i % 2 == 1);
      t.push(Update::insert(PointId(i), v));
      t.model.vectors[PointId(i)] = v;
    }
    t.publish();
    std::vector<float> queries;
    for (int q = 0; q < 64; ++q) {
      const auto v = point(q % 8 == 0);
      queries.insert(queries.end(), v.begin(), v.end());
    }
    run(t, queries, 64);
  }
}

TEST_CASE("the query-resident scan keeps every pair within the bound where the norms dwarf the distances") {
  // 2-D points and queries about 10,000 from the origin on both axes, 0.01 apart: |x|^2 is about
  // 2 x 10^8, so fl(|x|^2 - 2 x.q) errs by tens while neighbours lie about 10^-3 apart (squared).
  // Only the screen's proven margin keeps their pairs; the answers equal the CPU's.
  auto g = rng(5287);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  Twin t(2, Metric::L2, TargetSpec::none());
  auto far_point = [&] { return std::vector<float>{10'000.0f + noise(g), 10'000.0f + noise(g)}; };
  for (std::size_t i = 0; i < 40'000; ++i) {
    const auto v = far_point();
    t.push(Update::insert(PointId(i), v));
    t.model.vectors[PointId(i)] = v;
  }
  t.publish();
  std::vector<float> queries;
  for (int q = 0; q < 128; ++q) {
    const auto v = far_point();
    queries.insert(queries.end(), v.begin(), v.end());
  }
  CHECK(compare(t.gpu.search(queries, 32), t.cpu.search(queries, 32), t.model, Metric::L2, queries) == 0);
}

TEST_CASE("the query-resident scan: each path (sanitizer-sized)") {
  // Small enough for compute-sanitizer: 600 queries (five rows of blocks), lists that fill and
  // merges in several rounds (one repeated point: every warp's list holds k), erased slots, a
  // dimension-3 store (float4 slots). Batches of 256+ queries select in blocks of 256 threads
  // (every rank tied in one of them).
  check_shapes(5290,
               {StoreShape{2, 20'000, 64, 64, Metric::L2, 0.1, false},
                StoreShape{2, 30'000, 8, 600, Metric::L2, 0.0, false},
                StoreShape{2, 30'000, 64, 64, Metric::L2, 0.0, false, true},
                StoreShape{2, 30'000, 16, 300, Metric::L2, 0.0, false, true},
                StoreShape{3, 20'000, 16, 256, Metric::Cosine, 0.3, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where one query bounds itself from its first tiles (large stores, no sample pass)") {
  // One query over a store of three tiles or more per scan warp and dim > 8 runs no sample pass:
  // the scan's blocks publish their first tiles' smallest ranks and the last block lowers the
  // threshold to the k-th of them (up to k = the scan's block count; k = 300 is past it, the
  // plain cold start). Each metric kind, erased slots, duplicates, a store of one repeated point
  // (every rank ties: the answer is the k smallest ids), and different queries one after another
  // (each launch counts its blocks afresh).
  check_shapes(5210,
             {StoreShape{16, 600'000, 1, 3, Metric::L2, 0.2, false},
              StoreShape{128, 500'000, 64, 3, Metric::L2, 0.05, false},
              StoreShape{12, 700'000, 100, 2, Metric::InnerProduct, 0.1, false},
              StoreShape{40, 450'000, 33, 2, Metric::Cosine, 0.0, true},
              StoreShape{9, 1'000'000, 256, 2, Metric::L2, 0.5, false},
              StoreShape{16, 450'000, 300, 1, Metric::L2, 0.1, false},
              StoreShape{16, 500'000, 16, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/false, /*each_alone=*/true);
}

TEST_CASE("GPU equals CPU on groups of 3-8 queries over multi-chunk stores (staged point loads)") {
  // Groups of 4 and 8 copy each warp's points into shared memory a stage of four chunks ahead,
  // as one stream across the warp's tiles: chunk counts that are and are not a multiple of the
  // stage (2, 5, 25, 32, 75, 196), stores with and without a sample pass, a warp with one tile or
  // many, partial groups, every multi-chunk metric kind, erased slots, duplicates, one repeated
  // point, visible ranges, each query alone (groups of one) and all in one batch. Where these
  // batches run a sample pass it gives the SMs few warps, so it loads eight chunks per round
  // (SampleParams::batched_loads), here also in partial rounds.
  check_shapes(5270,
               {StoreShape{8, 400'000, 16, 8, Metric::L2, 0.1, false},
                StoreShape{17, 300'000, 64, 4, Metric::InnerProduct, 0.05, true},
                StoreShape{100, 350'000, 128, 7, Metric::L2, 0.2, false},
                StoreShape{128, 500'000, 1, 5, Metric::Cosine, 0.0, true},
                StoreShape{300, 200'000, 100, 8, Metric::L2, 0.3, false},
                StoreShape{784, 70'000, 128, 4, Metric::L2, 0.0, false},
                StoreShape{784, 70'000, 64, 8, Metric::InnerProduct, 0.1, false},
                StoreShape{40, 20'000, 33, 3, Metric::L2, 0.1, false},
                StoreShape{128, 300'000, 64, 6, Metric::L2, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("GPU equals CPU where the sample pass's tiles exceed L2 (tile-major sample blocks)") {
  // 1,500,000 x 300 and 1,600,000 x 256: the sample (every 32nd tile, about 56 MB) is larger
  // than an H100's 50 MB L2, so one tile's query groups rank it in consecutive blocks
  // (SampleParams::tile_major); 14 queries are 2 groups of 8 and 20 are 2 groups of 16, so a
  // block that took another group's or tile's queries would bound the wrong query; 10 queries are
  // one group of 12, two of its rows empty.
  check_shapes(5510,
               {StoreShape{300, 1'500'000, 32, 10, Metric::L2, 0.1, false},
                StoreShape{300, 1'500'000, 40, 14, Metric::L2, 0.0, false},
                StoreShape{256, 1'600'000, 50, 20, Metric::InnerProduct, 0.0, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the split sample pass bounds every query where all ranks tie (its margin for the summation order)") {
  // With L2 ranks over 16+ chunks and 8+ queries the sample pass splits each sampled tile's
  // chunks between a block's warps, so its ranks are summed in another order than the scan's and
  // may come out an ulp or so below them; the k-th is raised by a proven margin. On a store of one
  // repeated point every rank ties: a bound below the scan's common rank would admit no point at
  // all. Dims 128 (two slices) to 1,024 (eight), small stores (every 8th tile sampled) and large
  // ones (every 32nd), partial query groups, k up to 128.
  check_shapes(5285,
               {StoreShape{784, 70'000, 64, 16, Metric::L2, 0.0, false, true},
                StoreShape{300, 300'000, 32, 8, Metric::L2, 0.0, false, true},
                StoreShape{1024, 20'000, 16, 12, Metric::L2, 0.0, false, true},
                StoreShape{128, 300'000, 128, 9, Metric::L2, 0.0, false, true},
                StoreShape{200, 100'000, 100, 20, Metric::Cosine, 0.0, false, true},
                StoreShape{132, 300'000, 8, 24, Metric::L2, 0.0, false, true},
                StoreShape{784, 70'000, 128, 8, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where inner-product batches of 9-12 queries are screened (groups of 12)") {
  // Inner product's screen in groups of 12: each lane scores 4 points x 3 queries, whose dot
  // products are the exact ranks. Partial groups (9, 10, 11 queries) and partial last stages
  // (dims 5, 40, 100, 300, 784), large stores (every 16th or 32nd tile sampled) and small ones
  // (every 8th, for these batches at any k), k up to 128, erased slots, duplicates, a store of
  // one repeated point. L2 batches of this size keep the exact form (one L2 row here).
  check_shapes(5296,
               {StoreShape{300, 400'000, 128, 12, Metric::InnerProduct, 0.1, false},
                StoreShape{784, 70'000, 64, 9, Metric::InnerProduct, 0.1, false},
                StoreShape{128, 300'000, 16, 9, Metric::InnerProduct, 0.05, true},
                StoreShape{5, 300'000, 16, 11, Metric::InnerProduct, 0.2, false},
                StoreShape{40, 600'000, 30, 10, Metric::InnerProduct, 0.1, true},
                StoreShape{100, 100'000, 20, 12, Metric::InnerProduct, 0.0, false, true},
                StoreShape{300, 400'000, 64, 12, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where batches of 13-16 queries are screened by dot products (groups of 16)") {
  // The screen's group of 16: each lane scores 4 points x 4 queries, a stage's chunks two at a
  // time. Partial groups (13, 14, 15 queries) and partial last stages (dims 5, 40, 100, 300), a
  // large store (every 32nd tile sampled) and small ones (every 8th), erased slots, duplicates, a
  // store of one repeated point; L2, cosine and inner product.
  check_shapes(5295,
               {StoreShape{300, 400'000, 32, 16, Metric::L2, 0.1, false},
                StoreShape{128, 300'000, 16, 13, Metric::L2, 0.05, true},
                StoreShape{5, 300'000, 16, 15, Metric::L2, 0.2, false},
                StoreShape{40, 600'000, 30, 14, Metric::Cosine, 0.1, true},
                StoreShape{784, 70'000, 64, 16, Metric::L2, 0.0, false},
                StoreShape{100, 100'000, 20, 16, Metric::L2, 0.0, false, true},
                StoreShape{300, 400'000, 32, 13, Metric::InnerProduct, 0.1, false},
                StoreShape{128, 100'000, 30, 16, Metric::InnerProduct, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where batches of 17+ queries are screened by dot products (groups of 32)") {
  // Stores of several chunks with a sample pass sparse enough for the screen: each lane scores 4
  // points x 8 queries by dot products and only the pairs the screen passes get an exact rank,
  // queued and ranked 32 at a time (inner product: the dot products are the exact ranks, the
  // same FMAs in the same order as the one-point-per-lane loop). Partial groups (20, 33, 40, 48 queries) and
  // partial last stages (dims 5, 40, 100, 300), large stores (every 32nd tile sampled) and a
  // small one (every 8th), k from 1 to 50, erased slots, duplicates and stores of one repeated
  // point (every pair ties: the k smallest ids); L2, cosine and inner product.
  check_shapes(5290,
               {StoreShape{300, 400'000, 32, 33, Metric::L2, 0.1, false},
                StoreShape{128, 300'000, 16, 20, Metric::L2, 0.05, true},
                StoreShape{400, 300'000, 8, 40, Metric::L2, 0.0, false},
                StoreShape{5, 300'000, 16, 40, Metric::L2, 0.2, false},
                StoreShape{40, 600'000, 30, 48, Metric::Cosine, 0.1, true},
                StoreShape{100, 100'000, 1, 20, Metric::L2, 0.3, false},
                StoreShape{64, 200'000, 50, 17, Metric::L2, 0.0, false, true},
                StoreShape{300, 400'000, 32, 40, Metric::InnerProduct, 0.1, false},
                StoreShape{17, 300'000, 8, 64, Metric::InnerProduct, 0.2, true},
                StoreShape{100, 100'000, 30, 20, Metric::InnerProduct, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the dot-product screen: each group (sanitizer-sized)") {
  // Stores of 20,000 points of fewer than 64 dims (so the dense screen does not take them), small
  // enough for compute-sanitizer: groups of 12 (inner product), 16 and 32 (partial ones), a
  // sample pass over every 8th tile, k up to 4 so the screen's sparsity rule holds, queued pairs
  // ranked 32 at a time, erased slots, duplicates, a store of one repeated point.
  check_shapes(5297,
               {StoreShape{40, 20'000, 4, 10, Metric::InnerProduct, 0.1, false},
                StoreShape{60, 20'000, 3, 12, Metric::InnerProduct, 0.0, false, true},
                StoreShape{40, 20'000, 4, 14, Metric::L2, 0.1, true},
                StoreShape{60, 20'000, 2, 20, Metric::Cosine, 0.2, false},
                StoreShape{40, 20'000, 4, 33, Metric::L2, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the screen keeps every pair within the threshold where the norms dwarf the distances") {
  // Points and queries about 10,000 from the origin in every dimension, 1 apart: |x|^2 is about
  // 10^10, so the float dot products err by hundreds while neighbours are about 100 apart. A
  // screen without its proven margin drops true neighbours here (checked once with the margin
  // set to zero: 33 of 33 queries wrong); with it every answer equals the CPU's.
  check_far_points(5300, 300'000, 33);
}

TEST_CASE("GPU equals CPU where the screen's 32 queries of many dims take one block per SM") {
  // 32 queries of 700+ dims fill half an SM's shared memory, so the screen runs one block per
  // SM with 16 warps (8 where 16 do not fit: dim 1,200), compiled for 512 threads. Without that
  // launch bound the 16-warp block does not launch at all.
  namespace gpu = streamknn::detail::gpu;
  gpu::ScanShape shape;
  shape.query_group = gpu::kScreenGroup;
  shape.screen = true;
  shape.global_lists = true;
  shape.chunks = 196;  // 784 dims
  shape.warps_per_block = gpu::kScreenMaxWarps;
  for (const bool inner_product : {false, true}) {
    shape.inner_product = inner_product;
    CHECK(gpu::configure_scan(shape, 128) >= 1);
  }
  // Small stores (every 8th tile sampled) with at most one pair to rank per query in 4 tiles;
  // partial groups, erased slots, duplicates; L2, cosine and inner product.
  check_shapes(5310,
               {StoreShape{784, 20'000, 16, 40, Metric::L2, 0.1, false},
                StoreShape{1024, 12'000, 8, 33, Metric::L2, 0.0, true},
                StoreShape{1200, 12'000, 8, 20, Metric::L2, 0.2, false},
                StoreShape{784, 24'000, 20, 64, Metric::InnerProduct, 0.1, false},
                StoreShape{800, 12'000, 5, 17, Metric::Cosine, 0.0, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where batches over small stores of many dims take the dense screen") {
  // Batches of 12+ queries (2+ over 256+ dims, 6+ at k >= 128) over stores of fewer than 64
  // tiles per SM with 64+ dims (L2, cosine): a tiled product screens every pair, one block per
  // query ranks the pairs at or below the k-th group minimum exactly and then every pair the
  // screen's margin cannot rule out. Query tiles of 8, 12, 16, 32 and 64 (partial ones too; 5,
  // 6, 7, 10, 13 and 17 queries), product blocks whose share of the store is a whole tile or a
  // group less (70,000 slots at 5 queries, 30,000 at 17) or a few groups (smaller stores), k from
  // 1 to kDenseMaxK and k above the valid points, erased slots, duplicates (ties broken by id), a
  // store of one repeated point (every pair ties: the selection's batches fill and merge many
  // times), dims up to 2,000, and a batch split into launch chunks by the workspace budget (1,100
  // queries over 70,000 slots).
  check_shapes(5320,
               {StoreShape{784, 70'000, 64, 64, Metric::L2, 0.1, false},
                StoreShape{784, 70'000, 128, 16, Metric::L2, 0.0, false},
                StoreShape{100, 30'000, 1, 17, Metric::L2, 0.3, true},
                StoreShape{64, 5'000, 1'024, 40, Metric::L2, 0.0, false},
                StoreShape{1'024, 2'000, 700, 33, Metric::Cosine, 0.2, false},
                StoreShape{300, 500, 600, 20, Metric::L2, 0.5, false},
                StoreShape{2'000, 3'000, 10, 24, Metric::L2, 0.0, true},
                StoreShape{128, 50'000, 50, 100, Metric::L2, 0.0, false, true},
                StoreShape{65, 3'000, 16, 1'000, Metric::Cosine, 0.1, false},
                StoreShape{64, 70'000, 8, 1'100, Metric::L2, 0.05, false},
                StoreShape{300, 8'000, 40, 12, Metric::L2, 0.1, false},
                StoreShape{128, 6'000, 9, 13, Metric::Cosine, 0.0, true},
                StoreShape{784, 70'000, 64, 5, Metric::L2, 0.1, false},
                StoreShape{300, 8'000, 128, 7, Metric::Cosine, 0.2, true},
                StoreShape{128, 6'000, 128, 6, Metric::L2, 0.1, false},
                StoreShape{300, 20'000, 32, 12, Metric::L2, 0.1, false},
                StoreShape{784, 70'000, 100, 10, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the dense screen on small stores: each selection path (sanitizer-sized)") {
  // Stores of a few thousand points so compute-sanitizer runs in seconds: the k-th group minimum
  // (k below the store's 32-slot groups), the whole row's k-th (k above them), at most k values
  // (every valid slot), ties on one repeated point (the batch overflows and runs window by
  // window), a query tile of 8 (5 queries), 12 (11), 16, 32 and 64.
  check_shapes(5340,
               {StoreShape{100, 3'000, 16, 40, Metric::L2, 0.2, false},
                StoreShape{64, 2'000, 100, 17, Metric::Cosine, 0.1, true},
                StoreShape{200, 1'500, 300, 33, Metric::L2, 0.3, false},
                StoreShape{72, 400, 500, 16, Metric::L2, 0.2, false},
                StoreShape{128, 2'000, 30, 64, Metric::L2, 0.0, false, true},
                StoreShape{300, 2'000, 40, 5, Metric::L2, 0.2, false},
                StoreShape{300, 2'000, 50, 11, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the dense screen keeps every pair within the bound where the norms dwarf the distances") {
  // As the screen's case above, on a small store (the dense path): |x|^2 about 10^10 against
  // neighbours about 100 apart, so only the proven margin keeps the answer.
  check_far_points(5330, 20'000, 40);
}

TEST_CASE("GPU equals CPU on stores of about one tile per scan warp (lists full of the answer)") {
  // Multi-chunk stores of 500 to 4,300 tiles, one or two queries, no sample pass: every warp
  // scores about one tile, so every block's list holds about k / blocks of the answer and the
  // selection's first round must load enough of each (or fall back). Each metric kind, erased
  // slots, duplicates, a store of one repeated point (the k smallest ids), and each query alone
  // as well as both in one group.
  check_shapes(5250,
             {StoreShape{784, 70'000, 64, 2, Metric::L2, 0.1, false},
              StoreShape{16, 20'000, 1, 2, Metric::InnerProduct, 0.2, false},
              StoreShape{100, 135'000, 100, 1, Metric::L2, 0.0, true},
              StoreShape{40, 50'000, 33, 2, Metric::Cosine, 0.3, true},
              StoreShape{300, 17'000, 128, 2, Metric::L2, 0.1, false},
              StoreShape{8, 30'000, 16, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("the selection's first prefix covers every list's share of the answer but for 1 in 256") {
  // first_take(lists, k): the shortest prefix of at least 2 for which lists x P(share >= prefix)
  // <= 1/256, the share Poisson(k / lists); four shares once they average 8 or more; never past k.
  using streamknn::detail::gpu::first_take;
  auto tail = [](double mean, std::uint32_t t) {  // P(Poisson(mean) >= t), summed on its own
    double below = 0;
    for (std::uint32_t i = 0; i < t; ++i) below += std::exp(i * std::log(mean) - mean - std::lgamma(i + 1.0));
    return 1 - below;
  };
  CHECK(first_take(391, 16) == 4);   // one query on 100,000 x 2
  CHECK(first_take(648, 16) == 3);   // one query on 1,000,000 x 2 through the direct search
  CHECK(first_take(274, 64) == 5);   // MNIST-like, K = 64
  CHECK(first_take(274, 128) == 6);  // MNIST-like, K = 128 (the flat 4 failed a third of these)
  CHECK(first_take(8, 128) == 64);   // shares of 16: four of them
  CHECK(first_take(512, 4096) == 32);
  CHECK(first_take(1, 1) == 1);
  CHECK(first_take(3, 2) == 2);      // never past k
  CHECK(first_take(0, 5) == 5);      // no lists: as one
  for (std::uint32_t lists : {1u, 7u, 64u, 132u, 264u, 391u, 1000u}) {
    for (std::uint32_t k : {1u, 5u, 16u, 64u, 100u, 128u, 1000u}) {
      CAPTURE(lists);
      CAPTURE(k);
      const std::uint32_t t = first_take(lists, k);
      const double mean = double(k) / lists;
      CHECK(t <= k);
      if (mean >= 8) {
        CHECK(t == std::min(k, (4 * k + lists - 1) / lists));
      } else if (t < k) {
        CHECK(t >= 2);
        CHECK(lists * tail(mean, t) <= 1.0 / 256 + 1e-12);
        if (t > 2) CHECK(lists * tail(mean, t - 1) > 1.0 / 256 - 1e-12);
      }
    }
  }
}

TEST_CASE("GPU aggregation equals the CPU's: votes, probabilities, mean, weighted mean, median") {
  auto g = rng(5200);
  for (std::size_t k : {1, 4, 15, 64, 300}) {
    CAPTURE(k);
    // Classification with duplicate points (zero distances, ties) and visibility ranges.
    Twin t(6, Metric::L2, TargetSpec::classes(7));
    const auto data = uniform(g, 800 * 6);
    std::uniform_int_distribution<std::int32_t> label(0, 6);
    for (PointId id = 0; id < 2000; ++id) {
      const std::span<const float> v(data.data() + (id % 800) * 6, 6);
      t.push(Update::insert(id, v, label(g)));
    }
    t.publish();
    auto queries = uniform(g, 200 * 6);
    std::copy(data.begin(), data.begin() + 20 * 6, queries.begin());
    std::vector<IdRange> ranges(200);
    for (std::size_t q = 0; q < 200; ++q) ranges[q] = {q * 5, q * 5 + 1500};
    for (Weights w : {Weights::Uniform, Weights::Distance}) {
      for (bool visible : {false, true}) {
        const std::span<const IdRange> vis = visible ? std::span<const IdRange>(ranges) : std::span<const IdRange>();
        const auto a = KnnClassifier(t.gpu, k, w).predict_proba(queries, vis);
        const auto b = KnnClassifier(t.cpu, k, w).predict_proba(queries, vis);
        const auto na = t.gpu.search(queries, k, vis), nb = t.cpu.search(queries, k, vis);
        std::size_t compared = 0;
        for (std::size_t q = 0; q < 200; ++q) {
          if (!std::equal(na.ids_of(q).begin(), na.ids_of(q).end(), nb.ids_of(q).begin())) continue;  // tie: other neighbours
          ++compared;
          CHECK(a.labels[q] == b.labels[q]);
          for (std::size_t c = 0; c < 7; ++c) CHECK(a.probabilities_of(q)[c] == doctest::Approx(b.probabilities_of(q)[c]).epsilon(1e-5));
        }
        CHECK(compared > 150);
      }
    }
    // Regression, 3 outputs.
    Twin r(4, Metric::L2, TargetSpec::outputs(3));
    const auto xs = uniform(g, 1500 * 4);
    for (PointId id = 0; id < 1500; ++id) {
      const auto y = uniform(g, 3, -5, 5);
      r.push(Update::insert(id, std::span<const float>(xs.data() + (id % 1000) * 4, 4), y));
    }
    r.publish();
    const auto rq = uniform(g, 100 * 4);
    for (auto agg : {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
      const auto a = KnnRegressor(r.gpu, k, agg).predict(rq), b = KnnRegressor(r.cpu, k, agg).predict(rq);
      const auto na = r.gpu.search(rq, k), nb = r.cpu.search(rq, k);
      for (std::size_t q = 0; q < 100; ++q) {
        if (!std::equal(na.ids_of(q).begin(), na.ids_of(q).end(), nb.ids_of(q).begin())) continue;
        for (std::size_t o = 0; o < 3; ++o) CHECK(a.values_of(q)[o] == doctest::Approx(b.values_of(q)[o]).epsilon(1e-5));
      }
      // Three queries at k <= 64 take the direct search (a one-chunk store): the aggregation
      // reads the slots it writes.
      const std::vector<float> few(rq.begin(), rq.begin() + 3 * 4);
      const auto fa = KnnRegressor(r.gpu, k, agg).predict(few), fb = KnnRegressor(r.cpu, k, agg).predict(few);
      const auto fna = r.gpu.search(few, k), fnb = r.cpu.search(few, k);
      for (std::size_t q = 0; q < 3; ++q) {
        if (!std::equal(fna.ids_of(q).begin(), fna.ids_of(q).end(), fnb.ids_of(q).begin())) continue;
        for (std::size_t o = 0; o < 3; ++o) CHECK(fa.values_of(q)[o] == doctest::Approx(fb.values_of(q)[o]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("in-flight searches on the device keep their snapshot while publishes run") {
  auto g = rng(5300);
  StoreConfig c = config_for(4);
  c.backend = BackendKind::Cuda;
  ReferenceSet store(c);
  constexpr PointId kPoints = 20000;
  std::vector<std::vector<float>> where(kPoints);
  for (PointId id = 0; id < kPoints; ++id) {
    where[id] = uniform(g, 4);
    store.insert(id, where[id]);
  }
  store.publish();
  // Each round: ask (asynchronously) for the nearest point to 64 points' current positions,
  // then move those points far away and publish, before collecting the answers.
  std::size_t checked = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<PointId> probe(64);
    std::vector<float> queries;
    for (auto& p : probe) {
      p = g() % kPoints;
      queries.insert(queries.end(), where[p].begin(), where[p].end());
    }
    const std::uint64_t epoch_at_submit = store.epoch();
    auto ticket = store.submit(queries, 1);
    auto small = store.submit(std::span<const float>(queries).first(4), 1);  // graph path
    for (PointId p : probe) {
      where[p] = uniform(g, 4, 10 + round, 11 + round);  // far from every old position
      store.move(p, where[p]);
    }
    store.publish();
    const Neighbors got = ticket.get();
    const Neighbors got_small = small.get();
    CHECK(got.epoch == epoch_at_submit);
    CHECK(got_small.epoch == epoch_at_submit);
    for (std::size_t i = 0; i < probe.size(); ++i) {
      // At the submitted epoch the probed point sat exactly at the query: distance 0.
      CHECK(got.distances[i] == 0.0f);
      ++checked;
    }
    CHECK(got_small.distances[0] == 0.0f);
    // After the publish, the same query no longer finds distance 0 at that point.
    const Neighbors now = store.search(std::span<const float>(queries).first(4), 1);
    CHECK(now.epoch == store.epoch());
    CHECK((now.ids[0] != probe[0] || now.distances[0] > 0.0f));
  }
  MESSAGE(checked, " answers checked against the snapshot they were submitted on");
}

TEST_CASE("graph replays see every publish (slot count, growth, swaps)") {
  StoreConfig c = config_for(2);
  c.backend = BackendKind::Cuda;
  c.capacity_hint = 32;
  ReferenceSet store(c);
  const float q[2] = {0, 0};
  for (PointId id = 0; id < 3000; ++id) {
    const float v[2] = {float(3000 - id), 0};  // each new point is the nearest so far
    store.insert(id, v);
    store.publish();
    const Neighbors nn = store.search(q, 1);
    REQUIRE(nn.ids[0] == id);
    REQUIRE(nn.distances[0] == float(3000 - id));
  }
}

TEST_CASE("GPU equals CPU equals the exact reference on hard data (ties, duplicates, offsets, grids, every metric)") {
  // The float32 tie reproducer: ids 0, 1 on both backends.
  {
    Twin t(4, Metric::L2, TargetSpec::none());
    const std::vector<float> a{6.0f, 2.9f, 4.5f, 1.5f}, b{6.3f, 2.7f, 4.9f, 1.8f};
    t.push(Update::insert(0, a));
    t.push(Update::insert(1, b));
    t.publish();
    t.model.vectors[0] = a;
    t.model.vectors[1] = b;
    const std::vector<float> query{6.0f, 3.0f, 4.8f, 1.8f};
    const Neighbors gpu = t.gpu.search(query, 2);
    CHECK(gpu.ids[0] == 0);
    CHECK(gpu.ids[1] == 1);
    CHECK(compare(gpu, t.cpu.search(query, 2), t.model, Metric::L2, query) == 0);
  }
  auto g = rng(5400);
  for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    for (std::size_t dim : {2, 3, 8, 40, 130}) {
      if (metric == Metric::Haversine && dim != 2) continue;
      for (float offset : {0.0f, 1e3f, 1e6f}) {
        if (metric != Metric::L2 && offset != 0.0f) continue;
        CAPTURE(to_string(metric));
        CAPTURE(dim);
        CAPTURE(offset);
        Twin t(dim, metric, TargetSpec::none());
        // Integer grid points, each stored 1-3 times; a third erased.
        std::uniform_int_distribution<int> coord(-3, 3), copies(1, 3);
        PointId id = 10;
        for (int i = 0; i < 700; ++i) {
          std::vector<float> v(dim);
          for (auto& x : v) x = offset + float(coord(g));
          if (metric == Metric::Haversine) v = {float(coord(g)) * 0.5f, float(coord(g)) * 0.5f};
          if (metric == Metric::Cosine) v[0] = 1.0f + float(i % 3);
          for (int c = copies(g); c > 0; --c, id += 1 + g() % 2) {
            t.push(Update::insert(id, v));
            t.model.vectors[id] = v;
          }
        }
        t.publish();
        for (auto it = t.model.vectors.begin(); it != t.model.vectors.end();) {
          if (it->first % 3 == 0) {
            t.push(Update::erase(it->first));
            it = t.model.vectors.erase(it);
          } else {
            ++it;
          }
        }
        t.publish();
        std::vector<float> queries(9 * dim);
        for (auto& x : queries) x = offset + 0.5f * float(coord(g));
        if (metric == Metric::Haversine) {
          for (std::size_t q = 0; q < 9; ++q) queries[2 * q] = float(coord(g)) * 0.5f;
        }
        if (metric == Metric::Cosine) {
          for (std::size_t q = 0; q < 9; ++q) queries[q * dim] = 1.5f;
        }
        for (std::size_t k : {1, 2, 7, 64, 300, 4096}) {
          CAPTURE(k);
          const Neighbors gpu = t.gpu.search(queries, k), cpu = t.cpu.search(queries, k);
          CHECK(compare(gpu, cpu, t.model, metric, queries) == 0);
          CHECK(check_exact(gpu, t.model, metric, queries, 9) == 0);
        }
      }
    }
  }
}

TEST_CASE("the exact re-rank's fallback: hundreds of duplicates tied at the k-th place, every strategy's batch size") {
  for (std::size_t dim : {2, 16, 300}) {
    CAPTURE(dim);
    Twin t(dim, Metric::L2, TargetSpec::none());
    const std::vector<float> far(dim, 1.0f), near(dim, 0.25f);
    for (PointId id = 5000; id > 3000; --id) {
      t.push(Update::insert(id, far));
      t.model.vectors[id] = far;
    }
    t.push(Update::insert(7, near));
    t.model.vectors[7] = near;
    t.publish();
    for (std::size_t nq : {1, 8, 40, 300}) {
      const std::vector<float> queries(nq * dim, 0.0f);
      for (std::size_t k : {1, 2, 16, 128, 2048}) {
        CAPTURE(nq);
        CAPTURE(k);
        const Neighbors gpu = t.gpu.search(queries, k), cpu = t.cpu.search(queries, k);
        CHECK(compare(gpu, cpu, t.model, Metric::L2, queries) == 0);
        CHECK(check_exact(gpu, t.model, Metric::L2, queries, 2) == 0);
      }
    }
  }
}

TEST_CASE("both backends read the same stored rows for the sharded store's exact merge (points_of)") {
  auto g = rng(5500);
  for (Metric metric : {Metric::L2, Metric::Cosine, Metric::Haversine}) {
    for (std::size_t dim : {1, 2, 5, 37}) {
      if (metric == Metric::Haversine && dim != 2) continue;
      CAPTURE(to_string(metric));
      CAPTURE(dim);
      Twin t(dim, metric, TargetSpec::classes(3));
      for (PointId id = 0; id < 300; ++id) t.push(Update::insert(id, points_for(metric, g, 1, dim), int(id % 3)));
      t.publish();
      for (PointId id = 0; id < 300; id += 7) t.push(Update::erase(id));
      for (PointId id = 1; id < 300; id += 5) t.push(Update::move(id, points_for(metric, g, 1, dim)));
      t.publish();
      std::vector<PointId> ids;
      for (PointId id = 0; id < 320; id += 3) ids.push_back(id);  // erased and never-inserted ids too
      std::vector<std::int32_t> cpu_labels, gpu_labels;
      std::vector<float> cpu_values, gpu_values, cpu_rows, gpu_rows;
      REQUIRE(streamknn::detail::EngineAccess::of(t.cpu).points_of(ids, cpu_labels, cpu_values, &cpu_rows));
      REQUIRE(streamknn::detail::EngineAccess::of(t.gpu).points_of(ids, gpu_labels, gpu_values, &gpu_rows));
      CHECK(cpu_labels == gpu_labels);
      CHECK(cpu_rows == gpu_rows);
    }
  }
}
