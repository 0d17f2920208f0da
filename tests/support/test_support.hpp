// Shared test helpers: a replayable seed, random data, a naive double-precision reference
// search and a tie-aware comparison of neighbour lists.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "streamknn/streamknn.hpp"

namespace test {

using namespace streamknn;

/// The run's seed: STREAMKNN_SEED if set, else fresh; printed once so a failure can be replayed.
inline std::uint64_t seed() {
  static const std::uint64_t value = [] {
    std::uint64_t s;
    if (const char* env = std::getenv("STREAMKNN_SEED")) {
      s = std::strtoull(env, nullptr, 10);
    } else {
      s = (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    }
    std::printf("[streamknn tests] seed = %llu (set STREAMKNN_SEED=%llu to replay)\n", (unsigned long long)s,
                (unsigned long long)s);
    return s;
  }();
  return value;
}

/// Text of any streamable values, concatenated.
template <class... Parts>
std::string concat_str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

/// A generator per test case, derived from the run seed and a case-specific salt.
inline std::mt19937_64 rng(std::uint64_t salt) { return std::mt19937_64(seed() ^ (salt * 0x9e3779b97f4a7c15ULL)); }

inline std::vector<float> uniform(std::mt19937_64& g, std::size_t n, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// Valid user vectors for a metric: lat/lon for haversine, non-zero for cosine.
inline std::vector<float> points_for(Metric metric, std::mt19937_64& g, std::size_t n, std::size_t dim) {
  if (metric == Metric::Haversine) {
    std::vector<float> v(n * 2);
    std::uniform_real_distribution<float> lat(-89.9f, 89.9f), lon(-180, 180);
    for (std::size_t i = 0; i < n; ++i) {
      v[2 * i] = lat(g);
      v[2 * i + 1] = lon(g);
    }
    return v;
  }
  auto v = uniform(g, n * dim);
  if (metric == Metric::Cosine) {
    for (std::size_t i = 0; i < n; ++i) v[i * dim] += v[i * dim] >= 0 ? 0.5f : -0.5f;  // never all zero
  }
  return v;
}

/// The ranking value of a pair in double precision, and a bound on the float error of a
/// backend's computation of it (summation of dim terms in fp32).
struct RefRank {
  double rank;
  double error_bound;
};

inline std::vector<double> stored_form(Metric metric, std::span<const float> v) {
  std::vector<double> out;
  if (metric == Metric::Haversine) {
    const double lat = v[0] * std::numbers::pi / 180, lon = v[1] * std::numbers::pi / 180;
    return {std::cos(lat) * std::cos(lon), std::cos(lat) * std::sin(lon), std::sin(lat)};
  }
  out.assign(v.begin(), v.end());
  if (metric == Metric::Cosine) {
    double n = 0;
    for (double x : out) n += x * x;
    n = std::sqrt(n);
    for (double& x : out) x /= n;
  }
  return out;
}

inline RefRank ref_rank(Metric metric, const std::vector<double>& q, const std::vector<double>& p) {
  double acc = 0, abs_sum = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (metric == Metric::InnerProduct) {
      acc += q[i] * p[i];
      abs_sum += std::fabs(q[i] * p[i]);
    } else {
      const double d = q[i] - p[i];
      acc += d * d;
      abs_sum += d * d;
    }
  }
  // fp32 summation error bound, plus the rounding of the stored forms (normalisation, sphere).
  const double eps = std::ldexp(1.0, -23);
  double bound = (double(q.size()) + 4) * eps * abs_sum + 1e-12;
  if (metric == Metric::Cosine || metric == Metric::Haversine) bound += 8 * eps * std::sqrt(acc + 1e-30) + 4 * eps * eps;
  return {metric == Metric::InnerProduct ? -acc : acc, bound};
}

inline double ref_reported(Metric metric, double rank) {
  switch (metric) {
    case Metric::L2: return std::sqrt(rank);
    case Metric::InnerProduct: return rank;
    case Metric::Cosine: return rank / 2;
    case Metric::Haversine: return 2 * kEarthRadiusMetres * std::asin(std::min(1.0, std::sqrt(rank) / 2));
  }
  return rank;
}

/// A model of the store's content: id -> user vector (and target).
struct Model {
  std::size_t dim = 0;
  std::unordered_map<PointId, std::vector<float>> vectors;
  std::unordered_map<PointId, std::int32_t> labels;
  std::unordered_map<PointId, std::vector<float>> values;
};

struct RefNeighbor {
  double rank;
  double bound;
  PointId id;
};

/// Naive exact k-NN on the model, in (rank, id) order.
inline std::vector<RefNeighbor> ref_knn(const Model& model, Metric metric, std::span<const float> query, std::size_t k,
                                        IdRange visible = {}) {
  const auto q = stored_form(metric, query);
  std::vector<RefNeighbor> all;
  all.reserve(model.vectors.size());
  for (const auto& [id, v] : model.vectors) {
    if (id < visible.begin || id >= visible.end) continue;
    const auto r = ref_rank(metric, q, stored_form(metric, v));
    all.push_back({r.rank, r.error_bound, id});
  }
  const std::size_t n = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                    [](const RefNeighbor& a, const RefNeighbor& b) { return a.rank < b.rank || (a.rank == b.rank && a.id < b.id); });
  all.resize(n);
  return all;
}

/// Checks one query's neighbours against the reference: same padding, distances within the
/// fp32 bound, and each id either the reference's or one whose rank ties with it within
/// rounding (so only the order inside equal-distance runs may differ). Returns false on a
/// mismatch (after reporting it through doctest).
inline bool matches_reference(const Model& model, Metric metric, std::span<const float> query,
                              std::span<const PointId> ids, std::span<const float> distances,
                              const std::vector<RefNeighbor>& ref, IdRange visible = {}) {
  const std::size_t k = ids.size();
  const auto q = stored_form(metric, query);
  std::unordered_set<PointId> seen;
  for (std::size_t j = 0; j < k; ++j) {
    if (j >= ref.size()) {
      if (ids[j] != kInvalidId || !std::isinf(distances[j]) || distances[j] < 0) {
        FAIL_CHECK("position ", j, " should be padding, got id ", ids[j], " distance ", distances[j]);
        return false;
      }
      continue;
    }
    if (ids[j] == kInvalidId) {
      FAIL_CHECK("position ", j, " is padding but ", ref.size(), " neighbours exist");
      return false;
    }
    if (!seen.insert(ids[j]).second) {
      FAIL_CHECK("id ", ids[j], " appears twice");
      return false;
    }
    const auto it = model.vectors.find(ids[j]);
    if (it == model.vectors.end() || ids[j] < visible.begin || ids[j] >= visible.end) {
      FAIL_CHECK("id ", ids[j], " at position ", j, " is not a visible point");
      return false;
    }
    const auto got = ref_rank(metric, q, stored_form(metric, it->second));
    const double slack = got.error_bound + ref[j].bound;
    if (std::fabs(got.rank - ref[j].rank) > slack) {
      FAIL_CHECK("position ", j, ": id ", ids[j], " has rank ", got.rank, " but the reference has id ", ref[j].id,
                 " at rank ", ref[j].rank, " (slack ", slack, ")");
      return false;
    }
    const double want = ref_reported(metric, ref[j].rank);
    const double tol = std::fabs(ref_reported(metric, ref[j].rank + slack) - want) +
                       std::fabs(ref_reported(metric, std::max(0.0, ref[j].rank - slack)) - want) +
                       1e-6 * std::fabs(want) + 1e-6;
    if (std::fabs(distances[j] - want) > tol) {
      FAIL_CHECK("position ", j, ": distance ", distances[j], " but the reference says ", want, " (tol ", tol, ")");
      return false;
    }
    if (j > 0 && distances[j] < distances[j - 1]) {
      FAIL_CHECK("distances not ascending at position ", j);
      return false;
    }
  }
  return true;
}

/// The backend the conformance suites run on (set per test executable).
inline BackendKind backend_under_test() {
#ifdef STREAMKNN_TEST_CUDA
  return BackendKind::Cuda;
#else
  return BackendKind::Cpu;
#endif
}

/// Checks that two publish reports hold the same counts.
inline void check_same_counts(const PublishReport& a, const PublishReport& b) {
  CHECK(a.drained == b.drained);
  CHECK(a.applied == b.applied);
  CHECK(a.moved == b.moved);
  CHECK(a.retargeted == b.retargeted);
  CHECK(a.inserted == b.inserted);
  CHECK(a.erased == b.erased);
  CHECK(a.size == b.size);
}

/// Checks that two publish reports agree: every count and the rejections, in order.
inline void check_same_report(const PublishReport& a, const PublishReport& b) {
  check_same_counts(a, b);
  REQUIRE(a.rejected.size() == b.rejected.size());
  for (std::size_t r = 0; r < a.rejected.size(); ++r) {
    CHECK(a.rejected[r].id == b.rejected[r].id);
    CHECK(a.rejected[r].kind == b.rejected[r].kind);
    CHECK(a.rejected[r].reason == b.rejected[r].reason);
  }
}

inline StoreConfig config_for(std::size_t dim, Metric metric = Metric::L2, TargetSpec target = TargetSpec::none()) {
  StoreConfig c;
  c.dim = dim;
  c.metric = metric;
  c.target = target;
  c.backend = backend_under_test();
  return c;
}

/// The same points (c.dim floats each) as a bulk load (from_points) and as pushed
/// inserts, both published.
struct LoadedAndPushed {
  ReferenceSet loaded, pushed;
};
inline LoadedAndPushed load_and_push(const StoreConfig& c, const std::vector<PointId>& ids, const std::vector<float>& data) {
  LoadedAndPushed out{ReferenceSet::from_points(c, ids, data), ReferenceSet(c)};
  const std::size_t dim = c.dim;
  for (std::size_t i = 0; i < ids.size(); ++i) out.pushed.insert(ids[i], std::span(data).subspan(i * dim, dim));
  out.pushed.publish();
  return out;
}

/// Exception message of a callable that must throw E (fails the check otherwise).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw the wrong exception type: ", e.what());
    return {};
  }
  FAIL_CHECK("did not throw");
  return {};
}

}  // namespace test
