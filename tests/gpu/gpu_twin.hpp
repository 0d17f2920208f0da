// The GPU suites' twin stores (test_gpu_vs_cpu.cpp, test_gpu_one_chunk.cpp, test_gpu_screens.cpp):
// the same store on both backends, filled and searched alike, and the comparisons of their answers
// with each other and with the exact big-integer reference (support/exact_reference.hpp).
#pragma once

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
#include "support/twin_stores.hpp"

namespace gpu_twin {

using namespace test;


/// The same store on both backends (TwinStores) and its model: every op goes to both.
struct Twin : TwinStores {
  /// The spatial index is off unless asked for: the other tests aim at the scan kernels, and
  /// under Auto large batches over stores of one or two dimensions would take the index.
  Twin(std::size_t dim, Metric metric, TargetSpec target, std::size_t queue = 1 << 16,
       SpatialIndex spatial = SpatialIndex::Off)
      : TwinStores(config(dim, metric, target, queue, spatial)) {
    model.dim = dim;
  }
  static StoreConfig config(std::size_t dim, Metric metric, TargetSpec target, std::size_t queue,
                            SpatialIndex spatial) {
    StoreConfig c;
    c.spatial_index = spatial;
    c.dim = dim;
    c.metric = metric;
    c.target = target;
    c.queue_capacity = queue;
    return c;
  }
  Model model;
};

inline void fill(Twin& t, Metric metric, std::size_t n, std::mt19937_64& g, double erase_fraction, bool duplicates = false) {
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

inline std::string describe(const StoreShape& s) {
  return concat_str("dim=", s.dim, " n=", s.n, " k=", s.k, " q=", s.q, " ", to_string(s.metric), " erased=", s.erased,
                    s.duplicates ? " duplicates" : "", s.one_point ? " one point" : "",
                    s.spatial == SpatialIndex::Always ? " spatial index" : s.spatial == SpatialIndex::Auto ? " spatial Auto" : "");
}

/// Fills both backends' stores as the shape says.
inline void fill(Twin& t, const StoreShape& s, std::mt19937_64& g) {
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
inline std::pair<PointId, PointId> id_bounds(const Model& model) {
  PointId lo = ~PointId(0), hi = 0;
  for (const auto& [pid, v] : model.vectors) {
    lo = std::min(lo, pid);
    hi = std::max(hi, pid);
  }
  return {lo, hi};
}

inline double tolerance(double d) { return 2e-4 * std::max(1.0, std::fabs(d)) + 1e-5; }

/// Tie-aware comparison of the two backends' neighbours. Returns the number of bad queries.
inline std::size_t compare(const Neighbors& gpu, const Neighbors& cpu, const Model& model, Metric metric,
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
inline std::size_t check_exact(const Neighbors& got, const Model& model, Metric metric, const std::vector<float>& queries,
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
inline void check_shape(const StoreShape& s, std::mt19937_64& g, bool as_batch, bool each_alone) {
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
inline void check_shapes(std::uint64_t salt, std::initializer_list<StoreShape> shapes, bool as_batch, bool each_alone) {
  auto g = rng(salt);
  for (const StoreShape& s : shapes) check_shape(s, g, as_batch, each_alone);
}

/// n points and q queries of 64 dims, each element about 10,000 from the origin and the vectors
/// about 1 apart per element (|x|^2 about 10^10, neighbours about 100 apart): k = 20 answers
/// equal the CPU's. A screen's float dot products err by hundreds here, so only its proven
/// margin keeps the answer.
inline void check_far_points(std::uint64_t seed, std::size_t n, std::size_t q) {
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

}  // namespace gpu_twin
