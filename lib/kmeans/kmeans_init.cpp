// The check of the points, K-means starts and the scale of tol (kmeans_init.hpp). k-means++ weighs
// the points by their float32 squared distances (the screen's arithmetic, eight partial sums): a
// start needs them to be the same on every run and thread count, not exact.
#include "kmeans/kmeans_init.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "core/check.hpp"
#include "core/thread_pool.hpp"
#include "kmeans/kmeans_exact.hpp"
#include "kmeans/lloyd_cpu_scan.hpp"

namespace streamknn::detail::kmeans {

namespace {

constexpr std::size_t kChunk = 8192;  // points per task (and per partial sum)
// Floats per task of first_beyond: 256 KiB, so a block just copied is tested from the core's cache,
// and a 4 MiB staging buffer (the CUDA backend's) is filled by 16 tasks.
constexpr std::size_t kBlock = std::size_t(1) << 16;

/// A uniform double in [0, 1) from 53 random bits (the same on every platform).
double uniform01(std::mt19937_64& g) { return double(g() >> 11) * 0x1p-53; }

/// The first index whose prefix sum of w reaches v (n - 1 when none does), from per-chunk sums.
std::size_t search_prefix(const std::vector<double>& w, const std::vector<double>& chunk_sums, double v) {
  double acc = 0;
  for (std::size_t c = 0; c < chunk_sums.size(); ++c) {
    const double next = acc + chunk_sums[c];
    if (next >= v || c + 1 == chunk_sums.size()) {
      const std::size_t lo = c * kChunk, hi = std::min(w.size(), lo + kChunk);
      for (std::size_t i = lo; i < hi; ++i) {
        acc += w[i];
        if (acc >= v) return i;
      }
      if (c + 1 == chunk_sums.size()) return w.size() - 1;
    }
    acc = next;
  }
  return w.size() - 1;
}

/// r[t] = the float32 screen of (x, row t of ys): the CPU scans' vector code where this CPU runs it.
void screens(const float* x, const float* ys, std::size_t rows, std::size_t d, float* r) {
  if (scan_supported()) {
    screen_all(x, ys, rows, d, r);
  } else {
    for (std::size_t t = 0; t < rows; ++t) r[t] = screen(x, ys + t * d, std::uint32_t(d));
  }
}

std::vector<float> plus_plus(const LloydShape& s, std::uint64_t seed, ThreadPool& pool) {
  const std::size_t n = s.n, d = s.d, k = s.k, chunks = (n + kChunk - 1) / kChunk;
  const std::size_t trials = 2 + std::size_t(std::log(double(k)));
  std::mt19937_64 g(seed);
  std::vector<float> centroids(k * d);
  std::size_t first = std::size_t(g() % n);
  std::copy_n(s.points + first * d, d, centroids.begin());
  std::vector<double> closest(n), sums(chunks);
  pool.parallel_for(chunks, [&](std::size_t c) {
    double acc = 0;
    for (std::size_t i = c * kChunk, hi = std::min(n, i + kChunk); i < hi; ++i) {
      float r;
      screens(s.points + i * d, s.points + first * d, 1, d, &r);
      closest[i] = double(r);
      acc += closest[i];
    }
    sums[c] = acc;
  });
  std::vector<double> trial_d(trials * n), trial_sums(trials * chunks);
  std::vector<float> ys(trials * d);  // the trials' points, contiguous
  for (std::size_t c = 1; c < k; ++c) {
    double pot = 0;
    for (const double v : sums) pot += v;
    std::vector<std::size_t> cand(trials);
    for (std::size_t t = 0; t < trials; ++t) cand[t] = search_prefix(closest, sums, uniform01(g) * pot);
    for (std::size_t t = 0; t < trials; ++t) std::copy_n(s.points + cand[t] * d, d, ys.begin() + std::ptrdiff_t(t * d));
    pool.parallel_for(chunks, [&](std::size_t ch) {
      std::vector<float> r(trials);
      std::vector<double> acc(trials, 0.0);
      for (std::size_t i = ch * kChunk, hi = std::min(n, i + kChunk); i < hi; ++i) {
        screens(s.points + i * d, ys.data(), trials, d, r.data());
        for (std::size_t t = 0; t < trials; ++t) {
          const double v = std::min(closest[i], double(r[t]));
          trial_d[t * n + i] = v;
          acc[t] += v;
        }
      }
      for (std::size_t t = 0; t < trials; ++t) trial_sums[t * chunks + ch] = acc[t];
    });
    std::size_t best = 0;
    double best_pot = 0;
    for (std::size_t t = 0; t < trials; ++t) {
      double p = 0;
      for (std::size_t ch = 0; ch < chunks; ++ch) p += trial_sums[t * chunks + ch];
      if (t == 0 || p < best_pot) {
        best = t;
        best_pot = p;
      }
    }
    std::copy_n(trial_d.begin() + std::ptrdiff_t(best * n), n, closest.begin());
    std::copy_n(trial_sums.begin() + std::ptrdiff_t(best * chunks), chunks, sums.begin());
    std::copy_n(s.points + cand[best] * d, d, centroids.begin() + std::ptrdiff_t(c * d));
  }
  return centroids;
}

std::vector<float> random_points(const LloydShape& s, std::uint64_t seed) {
  std::vector<float> centroids(s.k * s.d);
  const std::vector<std::uint32_t> rows = random_rows(s.n, s.k, seed);
  for (std::size_t c = 0; c < s.k; ++c) {
    std::copy_n(s.points + std::size_t(rows[c]) * s.d, s.d, centroids.begin() + std::ptrdiff_t(c * s.d));
  }
  return centroids;
}

}  // namespace

std::vector<std::uint32_t> random_rows(std::size_t n, std::size_t k, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  for (std::size_t c = 0; c < k; ++c) {
    const std::size_t j = c + std::size_t(g() % (n - c));
    std::swap(order[c], order[j]);
  }
  order.resize(k);
  return order;
}

std::size_t pool_workers(std::size_t threads) {
  if (threads == 0) threads = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  return threads - 1;
}

std::size_t first_beyond(const float* from, std::size_t count, float bound, ThreadPool& pool, float* to) {
  const std::size_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<std::size_t> first(blocks, count);  // per block: the block's first such index, or count
  pool.parallel_for(blocks, [&](std::size_t b) {
    const std::size_t lo = b * kBlock, len = std::min(kBlock, count - lo);
    const float* tested = from + lo;
    if (to) {
      std::memcpy(to + lo, from + lo, len * sizeof(float));
      tested = to + lo;  // what was copied is what is tested
    }
    const std::size_t at = detail::first_beyond(std::span<const float>(tested, len), bound);
    if (at != len) first[b] = lo + at;
  });
  for (const std::size_t at : first) {
    if (at != count) return at;  // blocks in index order: the lowest
  }
  return count;
}

std::vector<float> initial_centroids(const LloydShape& s, bool random, std::uint64_t seed, ThreadPool& pool) {
  if (random) return random_points(s, seed);
  return plus_plus(s, seed, pool);
}

void variance_pass(const LloydShape& s, ThreadPool& pool, const double* mean, std::span<double> out) {
  const std::size_t n = s.n, d = s.d, chunks = (n + kVarianceChunk - 1) / kVarianceChunk;
  pool.parallel_for(chunks, [&](std::size_t c) {
    double* acc = out.data() + c * d;
    std::fill_n(acc, d, 0.0);
    for (std::size_t i = c * kVarianceChunk, hi = std::min(n, i + kVarianceChunk); i < hi; ++i) {
      for (std::size_t j = 0; j < d; ++j) {
        const double v = double(s.points[i * d + j]) - (mean ? mean[j] : 0.0);
        acc[j] += mean ? v * v : v;  // a product, then a sum (built with -ffp-contract=off)
      }
    }
  });
}

double mean_variance(LloydBackend& be, std::size_t n, std::size_t d) {
  const std::size_t chunks = (n + kVarianceChunk - 1) / kVarianceChunk;
  std::vector<double> part(chunks * d);
  const auto pass = [&](const std::vector<double>* mean) {
    be.variance_pass(mean ? mean->data() : nullptr, part);
    std::vector<double> total(d, 0.0);
    for (std::size_t c = 0; c < chunks; ++c) {
      for (std::size_t j = 0; j < d; ++j) total[j] += part[c * d + j];
    }
    for (double& t : total) t /= double(n);
    return total;
  };
  const std::vector<double> mean = pass(nullptr);
  const std::vector<double> var = pass(&mean);
  double sum = 0;
  for (const double v : var) sum += v;
  return sum / double(d);
}

}  // namespace streamknn::detail::kmeans
