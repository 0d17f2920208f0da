// K-means arithmetic shared by the CPU backend and the CUDA kernels (every function is
// __host__ __device__ under nvcc), so both compute the same bits where results depend on them:
//   - the labelling rule: the nearest centroid by (exact squared L2 of the float32 values, index),
//     screened in float32 with exact_rank.hpp's proven bound, close calls re-ranked exactly;
//   - rigorous bounds (upper / lower) on distances for Hamerly's pruning, rounded outward: they
//     only decide which points are scanned again, never a label;
//   - the inertia's fixed-order float64 sum (the fold tree, docs/kmeans.md), the mean, the
//     movement (the centroid sums are cluster_sums.hpp's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/exact_rank.hpp"

#if defined(__CUDACC__)
#define STREAMKNN_KM_HD __host__ __device__ __forceinline__
#else
#define STREAMKNN_KM_HD inline
#endif

namespace streamknn::detail::kmeans {

namespace ex = streamknn::detail::exact;

/// Infinity as a constant: `1.0 / 0.0` is a division the device compiler may emit as a call,
/// hoisted ahead of the branch that needs it.
inline constexpr double kInfinity = std::numeric_limits<double>::infinity();
inline constexpr float kInfinityF = std::numeric_limits<float>::infinity();

/// Fan-out of the fold tree: a node is the left-to-right float64 sum of up to 32 children.
inline constexpr std::uint32_t kFold = 32;

/// A centroid or point row as exact_rank.hpp's accessors want it.
struct Row {
  const float* p;
  STREAMKNN_KM_HD float operator()(std::uint32_t i) const { return p[i]; }
};

STREAMKNN_KM_HD double round_up(double x) { return x * (1.0 + 0x1p-50); }    // x >= 0
STREAMKNN_KM_HD double round_down(double x) { return x * (1.0 - 0x1p-50); }  // x >= 0

/// The float32 screen's bound (exact_rank.hpp: |r - S| <= gamma S + tiny) with the factors the
/// bounds below multiply by, so no bound divides: S <= (r + tiny) up and S >= (r - tiny) down.
/// Each factor, and each bound from it, is rounded outward by round_up / round_down, whose 2^-50
/// covers the few float64 roundings between (docs/kmeans.md, "Pruning").
struct PruneBound {
  double tiny = 0;
  double up = kInfinity;  ///< >= 1 / (1 - gamma); +inf where the screen proves nothing (gamma >= 0.5)
  double down = 0;        ///< <= 1 / (1 + gamma); 0 there
};
STREAMKNN_KM_HD PruneBound prune_bound(std::uint32_t d) {
  const ex::ScreenBound b = ex::screen_bound(d);
  PruneBound p;
  p.tiny = b.tiny;
  if (b.gamma < 0.5) {
    p.up = round_up(1.0 / (1.0 - b.gamma));
    p.down = round_down(1.0 / (1.0 + b.gamma));
  }
  return p;
}

/// Bounds on the exact squared distance S of a pair whose float32 screen value is r.
STREAMKNN_KM_HD double upper_sq(float r, const PruneBound& b) { return round_up((double(r) + b.tiny) * b.up); }
STREAMKNN_KM_HD double lower_sq(float r, const PruneBound& b) {
  const double x = double(r) - b.tiny;
  return x > 0 ? round_down(x * b.down) : 0.0;
}
STREAMKNN_KM_HD double upper_dist(float r, const PruneBound& b) { return round_up(ex::sqrt64(upper_sq(r, b))); }
STREAMKNN_KM_HD double lower_dist(float r, const PruneBound& b) { return round_down(ex::sqrt64(lower_sq(r, b))); }

/// The float32 screen value of a pair (any summation order is covered by the bound). On the host
/// eight partial sums let the compiler vectorise without reassociating; on the device one
/// register takes fused multiply-adds in dimension order, as the scan kernels form theirs (eight
/// partial sums indexed at a dimension the compiler does not know would live in local memory).
STREAMKNN_KM_HD float screen(const float* x, const float* c, std::uint32_t d) {
#if defined(__CUDA_ARCH__)
  float sum = 0;
  for (std::uint32_t j = 0; j < d; ++j) {
    const float t = x[j] - c[j];
    sum = fmaf(t, t, sum);
  }
  return sum;
#else
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::uint32_t i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const float t = x[i + l] - c[i + l];
      acc[l] += t * t;
    }
  }
  for (int l = 0; i < d; ++i, ++l) {
    const float t = x[i] - c[i];
    acc[l] += t * t;
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
#endif
}

/// The float64 squared distance of a pair (exact_rank.hpp's key: fused multiply-adds in dimension
/// order, so both backends get the same bits); the inertia adds these.
STREAMKNN_KM_HD double squared_distance(const float* x, const float* c, std::uint32_t d) {
  return ex::float64_key(x, Row{c}, d, false).key;
}

/// A scan's two smallest screens: r1 at centroid j1, r2 the smallest of the others (of equal
/// screens the first taken is j1). The GPU kernels' full scans and settle's close call keep them.
struct NearestTwo {
  float r1 = kInfinityF, r2 = kInfinityF;
  std::uint32_t j1 = 0;
  STREAMKNN_KM_HD void take(float r, std::uint32_t c) {
    if (r < r1) {
      r2 = r1;
      r1 = r;
      j1 = c;
    } else if (r < r2) {
      r2 = r;
    }
  }
};

/// A point's label from its full scan: r1 (at j1) the smallest screen and r2 the smallest of the
/// others. Sets best (the exact nearest by (distance, index)), u >= its distance and l <= the
/// distance of every other centroid. Where the screen cannot separate j1 from the rest (a close
/// call, rare but for ties), every centroid is screened again (no stored screens: the GPU takes
/// this path on single threads); those the screen cannot rule out get their float64 key
/// (exact_rank.hpp: within err of the exact squared distance) and are ranked against the best so
/// far in index order, exactly (exact_less: the keys where their intervals are apart, else the
/// exact sum).
STREAMKNN_KM_HD void settle(const float* x, const float* centroids, std::uint32_t k, std::uint32_t d,
                            const PruneBound& b, float r1, std::uint32_t j1, float r2, std::uint32_t& best, double& u,
                            double& l) {
  const double top = upper_sq(r1, b);
  best = j1;
  u = upper_dist(r1, b);
  l = k == 1 ? kInfinity : lower_dist(r2, b);
  if (k == 1 || lower_sq(r2, b) > top) return;
  const float* at_best = centroids + std::size_t(j1) * d;
  ex::Key key_best = ex::float64_key(x, Row{at_best}, d, false);
  float r_best = r1;
  // The two smallest screens again: l is the bound of the smallest but the best's.
  NearestTwo low{r1, kInfinityF, j1};
  for (std::uint32_t j = 0; j < k; ++j) {
    if (j == j1) continue;
    const float* at_j = centroids + std::size_t(j) * d;
    const float r = screen(x, at_j, d);
    low.take(r, j);
    if (lower_sq(r, b) > top) continue;  // farther than j1, so than the best so far
    const ex::Key key_j = ex::float64_key(x, Row{at_j}, d, false);
    if (ex::exact_less(x, key_j, j, Row{at_j}, key_best, best, Row{at_best}, d, false)) {
      best = j;
      at_best = at_j;
      key_best = key_j;
      r_best = r;
    }
  }
  u = upper_dist(r_best, b);
  l = lower_dist(low.j1 == best ? low.r2 : low.r1, b);
}

/// Squared movement of a centroid (float64 of the float32 values, fused multiply-adds in dimension
/// order: the convergence test adds these over the clusters in order on the host).
STREAMKNN_KM_HD double squared_shift(const float* now, const float* before, std::uint32_t d) {
  double acc = 0;
  for (std::uint32_t i = 0; i < d; ++i) {
    const double t = double(now[i]) - double(before[i]);
    acc = ex::fma64(t, t, acc);
  }
  return acc;
}
/// An upper bound on the centroid's movement (Euclidean) from its squared_shift.
STREAMKNN_KM_HD double movement_bound(double shift2, std::uint32_t d) {
  return round_up(ex::sqrt64(round_up(shift2 * (1.0 + double(2 * d + 10) * 0x1p-53))));
}

/// Why a Lloyd run stops after an iteration (scikit-learn's rules): no label changed (after the
/// first iteration, which labels every point), or the total squared movement is within tol.
enum class LoopStop : std::uint32_t { Continue = 0, Unchanged = 1, WithinTol = 2 };

/// The stopping rule after iteration `it` (from 0), whose labelling changed `changed` labels and
/// moved the centroids by shift2 (k squared_shift values, added in index order). The host's loop
/// and the CUDA backend's queued iterations (lloyd_cuda.cpp) both decide with it, on the same values.
STREAMKNN_KM_HD LoopStop loop_stop(std::size_t it, std::size_t changed, const double* shift2, std::uint32_t k,
                                   double tol) {
  if (it > 0 && changed == 0) return LoopStop::Unchanged;
  double total = 0;
  for (std::uint32_t c = 0; c < k; ++c) total += shift2[c];
  return total <= tol ? LoopStop::WithinTol : LoopStop::Continue;
}

/// A new centroid coordinate: the float64 mean rounded once to float32.
STREAMKNN_KM_HD float mean(double sum, std::uint64_t count) { return float(sum / double(count)); }

/// The relative error margin of a float64 squared distance of dimension d, as the empty-cluster
/// relocation (kmeans.cpp) compares two: a is farther than b at once when
/// S_a - S_a * m > S_b + S_b * m, else exactly (ties to the smaller index).
STREAMKNN_KM_HD double far_margin(std::uint32_t d) { return double(2 * std::uint64_t(d) + 8) * 0x1p-53; }
/// The backends' screen before that comparison: with T = far_low of the m-th largest squared
/// distance, a point whose far_high is below T has m points farther by the comparison's first test
/// (far_low(S_a) <= S_a (1 - 2 margin) <= S_a - S_a * m rounded, and far_high(S_b) >= S_b (1 + 2
/// margin) >= S_b + S_b * m rounded, for margin >= 10 x 2^-53), so it is not among the m farthest.
/// 1 -/+ 4 margin is exact in float64; one product, so no fused multiply-add can change the bits.
STREAMKNN_KM_HD double far_low(double s, std::uint32_t d) { return s * (1.0 - (double(d) + 4) * 0x1p-50); }
STREAMKNN_KM_HD double far_high(double s, std::uint32_t d) { return s * (1.0 + (double(d) + 4) * 0x1p-50); }

}  // namespace streamknn::detail::kmeans

#undef STREAMKNN_KM_HD
