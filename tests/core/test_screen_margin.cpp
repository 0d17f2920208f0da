// The dense screen's tensor-core margin (tensor_screen_bounds, kernels/screen.cpp), checked on the
// host against a model of the tensor product's arithmetic: operands rounded to TF32 (cvt.rna),
// and per mma.sync m16n8k8 the accumulator and 8 exact products aligned to the largest with 24
// bits kept, truncated, summed, and truncated to a float: the arithmetic the proof's per-instruction
// error e covers with room (10 units of 2^-23 of the terms' magnitudes against e's 16). For every
// pair the screened value W the product writes must pass the selection's test for a threshold
// equal to the pair's own exact rank, W <= screen_limit(T, |q|^2), as phase C of the selection
// needs. Runs without a GPU: the bounds are host code. The FP32 product's margin (screen_bounds)
// under the same model must fail on far points, so the check can fail. Last, the float32 screen's
// rank limit (exact::screen_rank_limit, E3 of docs/cuda.md), which the radius pass and the exact
// fallback skip points by, against float32 ranks of the same pairs summed in several orders.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/exact_rank.hpp"
#include "cuda/kernels.hpp"

namespace {

using streamknn::detail::gpu::ScreenBounds;

/// cvt.rna.tf32.f32: 10 fraction bits, to nearest, ties away from zero.
float to_tf32(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = (bits + 0x1000u) & 0xffffe000u;  // finite inputs far below FLT_MAX: no overflow here
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

/// A double rounded toward zero to float.
float to_float_rz(double r) {
  float f = static_cast<float>(r);
  if (std::fabs(double(f)) > std::fabs(r)) f = std::nextafter(f, 0.0f);
  return f;
}

/// One modeled mma step: acc + sum of 8 exact products, each term truncated toward zero to the
/// largest term's 24 bits, the sum truncated to a float.
float modeled_mma(float acc, const double* products) {
  double terms[9] = {acc};
  std::copy(products, products + 8, terms + 1);
  double largest = 0;
  for (double t : terms) largest = std::max(largest, std::fabs(t));
  if (largest == 0) return 0.0f;
  int exponent = 0;
  std::frexp(largest, &exponent);  // largest < 2^exponent
  const double quantum = std::ldexp(1.0, exponent - 24);
  double sum = 0;
  for (double t : terms) sum += std::trunc(t / quantum) * quantum;  // exact: integers below 2^28
  return to_float_rz(sum);
}

/// The tensor product's dot product under the model, 8 dims per step (padded with zeros).
float modeled_tensor_dot(const std::vector<float>& x, const std::vector<float>& q) {
  float acc = 0.0f;
  for (std::size_t d = 0; d < x.size(); d += 8) {
    double products[8] = {};
    for (std::size_t i = 0; i < 8 && d + i < x.size(); ++i) products[i] = double(to_tf32(x[d + i])) * to_tf32(q[d + i]);
    acc = modeled_mma(acc, products);
  }
  return acc;
}

float float_sum_of_squares(const std::vector<float>& v) {
  float s = 0.0f;
  for (float e : v) s = std::fma(e, e, s);
  return s;
}

/// The exact rank of the direct form: rounded differences, squared and added in order.
float exact_rank(const std::vector<float>& x, const std::vector<float>& q) {
  float r = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float d = x[i] - q[i];
    r = std::fma(d, d, r);
  }
  return r;
}

/// What the product writes: W = fl(N - 2P) - C N, rounded down.
float screened_value(const ScreenBounds& b, float n2, float dot) {
  const float v = std::fma(-2.0f, dot, n2);
  const double w = std::fma(-double(b.norm_scale), double(n2), double(v));
  float f = static_cast<float>(w);
  if (double(f) > w) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

/// The selection's limit for threshold t (screen_limit: evaluated in double, rounded up).
float limit_for(const ScreenBounds& b, float t, float qn) {
  const double l = b.bound_scale * double(t) - b.query_scale * double(qn) + b.slack;
  float f = static_cast<float>(l);
  if (double(f) < l) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f + 0.0f;
}

/// Pairs (x, q) of dimension dim whose W fails the screen for T = their own exact rank.
int misses(const ScreenBounds& b, const std::vector<std::vector<float>>& points,
           const std::vector<std::vector<float>>& queries) {
  int missed = 0;
  for (const auto& q : queries) {
    const float qn = float_sum_of_squares(q);
    for (const auto& x : points) {
      const float n2 = float_sum_of_squares(x);
      const float w = screened_value(b, n2, modeled_tensor_dot(x, q));
      missed += !(w <= limit_for(b, exact_rank(x, q), qn));
    }
  }
  return missed;
}

std::uint32_t padded(std::size_t dim) { return std::uint32_t((dim + 3) / 4 * 4); }

}  // namespace

TEST_CASE("the tensor product's margin keeps every pair within its own rank (modeled tensor cores)") {
  using streamknn::detail::gpu::tensor_screen_bounds;
  std::mt19937 g(5350);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f), log2_scale(-20.0f, 20.0f);
  for (const std::size_t dim : {1u, 3u, 8u, 17u, 64u, 300u, 784u, 1024u}) {
    CAPTURE(dim);
    const ScreenBounds b = tensor_screen_bounds(padded(dim));
    auto make = [&](auto value) {
      std::vector<std::vector<float>> vs(12, std::vector<float>(dim));
      for (auto& v : vs) {
        for (float& e : v) e = value();
      }
      return vs;
    };
    // Centred, non-negative (MNIST-like), far from the origin (norms dwarf the distances), wide
    // magnitudes with zeros, and near-copies of the points (ranks near zero).
    const auto centred = make([&] { return normal(g); });
    CHECK(misses(b, centred, make([&] { return normal(g); })) == 0);
    const auto pixels = make([&] { return unit(g); });
    CHECK(misses(b, pixels, make([&] { return unit(g); })) == 0);
    CHECK(misses(b, make([&] { return 10'000.0f + normal(g); }), make([&] { return 10'000.0f + normal(g); })) == 0);
    const auto wide = make([&] { return unit(g) < 0.2f ? 0.0f : normal(g) * std::exp2(log2_scale(g)); });
    CHECK(misses(b, wide, make([&] { return normal(g) * std::exp2(log2_scale(g)); })) == 0);
    auto near = centred;
    for (auto& v : near) {
      for (float& e : v) e += 1e-3f * normal(g);
    }
    CHECK(misses(b, centred, near) == 0);
    // Operands whose TF32 rounding errs most (half an ULP of TF32 above 1), all products alike.
    const std::vector<std::vector<float>> worst(2, std::vector<float>(dim, 1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -23)));
    CHECK(misses(b, worst, worst) == 0);
  }
}

TEST_CASE("the FP32 product's margin does not cover TF32 products (the check can fail)") {
  // As the GPU mutant in test_gpu_vs_cpu (the FP32 margin applied to the tensor product): far
  // points, where the TF32 rounding of 10,000 + noise errs by far more than the FP32 margin.
  using streamknn::detail::gpu::screen_bounds;
  std::mt19937 g(5351);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t dim = 64;
  std::vector<std::vector<float>> points(40, std::vector<float>(dim)), queries(8, std::vector<float>(dim));
  for (auto* set : {&points, &queries}) {
    for (auto& v : *set) {
      for (float& e : v) e = 10'000.0f + normal(g);
    }
  }
  CHECK(misses(screen_bounds(padded(dim)), points, queries) > 0);
  CHECK(misses(streamknn::detail::gpu::tensor_screen_bounds(padded(dim)), points, queries) == 0);
}

TEST_CASE("screen_rank_limit: no float32 rank of a pair within the bound lies above it, in any order") {
  using streamknn::detail::exact::screen_rank_limit;
  std::mt19937 g(6113);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::uint32_t dim : {1u, 2u, 3u, 16u, 128u, 300u, 784u}) {
    CAPTURE(dim);
    for (int trial = 0; trial < 200; ++trial) {
      // Far from the origin (cancelling differences) and near it; spread and close points.
      const float offset = trial % 2 ? 1000.0f : 0.0f, spread = trial % 4 < 2 ? 1.0f : 1e-3f;
      std::vector<float> q(dim), x(dim);
      double key = 0;  // each difference and square exact in double; the sum within 2^-40 of S
      for (std::uint32_t i = 0; i < dim; ++i) {
        q[i] = offset + u(g);
        x[i] = q[i] + spread * u(g);
        const double d = double(q[i]) - double(x[i]);
        key += d * d;
      }
      const float limit = screen_rank_limit(key * (1.0 + 0x1p-40), 0.0, dim, false);
      float forward = 0, backward = 0, unfused = 0;
      for (std::uint32_t i = 0; i < dim; ++i) {
        const float d = q[i] - x[i], e = q[dim - 1 - i] - x[dim - 1 - i];
        forward = std::fma(d, d, forward);
        backward = std::fma(e, e, backward);
        unfused += d * d;
      }
      CHECK(forward <= limit);
      CHECK(backward <= limit);
      CHECK(unfused <= limit);
    }
  }
  const float one = screen_rank_limit(1.0, 0.0, 4, false);
  CHECK(one > 1.0f);
  CHECK(one < 1.0001f);
  CHECK(screen_rank_limit(-1.0, 0.0, 4, false) == 0.0f);  // no pair lies within a negative bound
  const float infinity = std::numeric_limits<float>::infinity();
  CHECK(screen_rank_limit(1.0, 0.0, 4, true) == infinity);  // the inner product is not screened
  CHECK(screen_rank_limit(std::nan(""), 0.0, 4, false) == infinity);
  CHECK(screen_rank_limit(0x1p127, 0.0, 4, false) == infinity);  // an overflowed rank proves nothing
  CHECK(screen_rank_limit(1.0, 0.0, 1u << 24, false) == infinity);  // beyond the bound's dimensions
}
