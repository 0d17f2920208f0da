// The CPU's full scans of K-means: float32 screens four centroids at a time (the point's values
// loaded once for the four, eight partial sums each, which the compiler keeps in vector
// registers), then the exact label from exact_rank.hpp's arithmetic.
#include "kmeans/lloyd_cpu_scan.hpp"

#include <cstring>
#include <limits>

#include "kmeans/kmeans_exact.hpp"

namespace streamknn::detail::kmeans {

namespace {

/// Eight floats in a vector register (GCC/Clang vector extensions: AVX where the ISA flags allow,
/// two SSE registers otherwise).
typedef float V8 __attribute__((vector_size(32)));

V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float total(V8 a) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }

/// Screens of x against four consecutive centroids (rows c, c + d, c + 2d, c + 3d).
void screen4(const float* x, const float* c, std::size_t d, float* r) {
  V8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  const float* c1 = c + d;
  const float* c2 = c + 2 * d;
  const float* c3 = c + 3 * d;
  std::size_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const V8 v = load8(x + i);
    const V8 t0 = v - load8(c + i), t1 = v - load8(c1 + i), t2 = v - load8(c2 + i), t3 = v - load8(c3 + i);
    a0 += t0 * t0;
    a1 += t1 * t1;
    a2 += t2 * t2;
    a3 += t3 * t3;
  }
  float tail[4] = {0, 0, 0, 0};
  for (; i < d; ++i) {
    const float v = x[i];
    const float t0 = v - c[i], t1 = v - c1[i], t2 = v - c2[i], t3 = v - c3[i];
    tail[0] += t0 * t0;
    tail[1] += t1 * t1;
    tail[2] += t2 * t2;
    tail[3] += t3 * t3;
  }
  r[0] = total(a0) + tail[0];
  r[1] = total(a1) + tail[1];
  r[2] = total(a2) + tail[2];
  r[3] = total(a3) + tail[3];
}

}  // namespace

void screen_all(const float* x, const float* centroids, std::size_t k, std::size_t d, float* r) {
  std::size_t j = 0;
  for (; j + 4 <= k; j += 4) screen4(x, centroids + j * d, d, r + j);
  for (; j < k; ++j) r[j] = screen(x, centroids + j * d, std::uint32_t(d));
}

Labelled scan_point(const float* x, const float* centroids, std::size_t k, std::size_t d, const PruneBound& b,
                    float* r) {
  screen_all(x, centroids, k, d, r);
  std::size_t j1 = 0;
  for (std::size_t j = 1; j < k; ++j) {
    if (r[j] < r[j1]) j1 = j;
  }
  float r2 = std::numeric_limits<float>::infinity();
  for (std::size_t j = 0; j < k; ++j) {
    if (j != j1 && r[j] < r2) r2 = r[j];
  }
  Labelled out;  // the GPU's scan kernel settles its points with the same function
  settle(x, centroids, std::uint32_t(k), std::uint32_t(d), b, r[j1], std::uint32_t(j1), r2, out.label, out.upper,
         out.lower);
  return out;
}

bool scan_supported() noexcept {
#if defined(__x86_64__) && defined(__AVX2__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

}  // namespace streamknn::detail::kmeans
