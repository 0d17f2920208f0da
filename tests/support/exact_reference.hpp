// An exact reference search written independently of the library: every stored float32 value is
// an integer times 2^-149, so a pair's squared L2 distance or dot product is an integer times
// 2^-298, computed here with plain big integers; the answers are the k smallest by (exact value,
// id), and the reported distances are rounded once to float32 by bisection on exact squares.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <span>
#include <unordered_map>
#include <vector>

#include "streamknn/streamknn.hpp"

namespace test::exact_ref {

using namespace streamknn;

/// A signed big integer: magnitude in 32-bit limbs, least significant first.
struct Big {
  bool neg = false;
  std::vector<std::uint32_t> mag;

  static Big of(std::int64_t v) {
    Big b;
    b.neg = v < 0;
    std::uint64_t m = v < 0 ? std::uint64_t(-(v + 1)) + 1 : std::uint64_t(v);
    while (m) {
      b.mag.push_back(std::uint32_t(m));
      m >>= 32;
    }
    return b;
  }
  void trim() {
    while (!mag.empty() && mag.back() == 0) mag.pop_back();
    if (mag.empty()) neg = false;
  }
  bool zero() const { return mag.empty(); }
};

inline int cmp_mag(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (std::size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}
inline std::vector<std::uint32_t> add_mag(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  std::vector<std::uint32_t> r(std::max(a.size(), b.size()) + 1, 0);
  std::uint64_t carry = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::uint64_t s = carry + (i < a.size() ? a[i] : 0) + (i < b.size() ? b[i] : 0);
    r[i] = std::uint32_t(s);
    carry = s >> 32;
  }
  return r;
}
/// a - b for |a| >= |b|.
inline std::vector<std::uint32_t> sub_mag(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  std::vector<std::uint32_t> r(a.size(), 0);
  std::int64_t borrow = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::int64_t s = std::int64_t(a[i]) - borrow - (i < b.size() ? std::int64_t(b[i]) : 0);
    borrow = s < 0;
    if (s < 0) s += std::int64_t(1) << 32;
    r[i] = std::uint32_t(s);
  }
  return r;
}
inline Big operator+(const Big& a, const Big& b) {
  Big r;
  if (a.neg == b.neg) {
    r.mag = add_mag(a.mag, b.mag);
    r.neg = a.neg;
  } else if (cmp_mag(a.mag, b.mag) >= 0) {
    r.mag = sub_mag(a.mag, b.mag);
    r.neg = a.neg;
  } else {
    r.mag = sub_mag(b.mag, a.mag);
    r.neg = b.neg;
  }
  r.trim();
  return r;
}
inline Big operator-(const Big& a) {
  Big r = a;
  if (!r.zero()) r.neg = !r.neg;
  return r;
}
inline Big operator-(const Big& a, const Big& b) { return a + (-b); }
inline Big operator*(const Big& a, const Big& b) {
  Big r;
  r.mag.assign(a.mag.size() + b.mag.size() + 1, 0);
  for (std::size_t i = 0; i < a.mag.size(); ++i) {
    std::uint64_t carry = 0;
    for (std::size_t j = 0; j < b.mag.size(); ++j) {
      const std::uint64_t t = std::uint64_t(a.mag[i]) * b.mag[j] + r.mag[i + j] + carry;
      r.mag[i + j] = std::uint32_t(t);
      carry = t >> 32;
    }
    for (std::size_t at = i + b.mag.size(); carry; ++at) {
      const std::uint64_t t = std::uint64_t(r.mag[at]) + carry;
      r.mag[at] = std::uint32_t(t);
      carry = t >> 32;
    }
  }
  r.neg = a.neg != b.neg;
  r.trim();
  return r;
}
inline Big shifted(const Big& a, int bits) {  // a * 2^bits, bits >= 0
  Big r;
  r.neg = a.neg;
  r.mag.assign(std::size_t(bits / 32), 0);
  const int sh = bits % 32;
  std::uint32_t carry = 0;
  for (std::uint32_t limb : a.mag) {
    r.mag.push_back(sh ? (limb << sh) | carry : limb);
    carry = sh ? limb >> (32 - sh) : 0;
  }
  r.mag.push_back(carry);
  r.trim();
  return r;
}
inline int compare(const Big& a, const Big& b) {
  const Big d = a - b;
  return d.zero() ? 0 : d.neg ? -1 : 1;
}

/// x * 2^149 as an integer (x a finite float32).
inline Big scaled(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int e = int((bits >> 23) & 0xff);
  std::int64_t m = bits & 0x7fffff;
  if (e) m |= 0x800000;
  Big b = shifted(Big::of(m), e ? e - 1 : 0);  // value = m * 2^(e - 150) = (m * 2^(e - 1)) * 2^-149
  if (bits >> 31) b = -b;
  return b;
}

/// The stored form of a user vector, as the library documents it: the vector itself (L2, inner
/// product), v / |v| in float64 rounded to float32 (cosine), the unit vector of (lat, lon) in float64
/// rounded to float32 (haversine).
inline std::vector<float> stored(Metric metric, std::span<const float> v) {
  std::vector<float> out;
  if (metric == Metric::Haversine) {
    const double lat = v[0] * (std::numbers::pi / 180.0), lon = v[1] * (std::numbers::pi / 180.0);
    return {float(std::cos(lat) * std::cos(lon)), float(std::cos(lat) * std::sin(lon)), float(std::sin(lat))};
  }
  if (metric == Metric::Cosine) {
    double n2 = 0;
    for (float x : v) n2 += double(x) * double(x);
    const double inv = 1.0 / std::sqrt(n2);
    for (float x : v) out.push_back(float(x * inv));
    return out;
  }
  return {v.begin(), v.end()};
}

/// The exact key times 2^298: squared L2 of the stored forms, or -<q, p>.
inline Big key(Metric metric, const std::vector<float>& q, const std::vector<float>& p) {
  Big acc;
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (metric == Metric::InnerProduct) {
      acc = acc - scaled(q[i]) * scaled(p[i]);
    } else {
      const Big d = scaled(q[i]) - scaled(p[i]);
      acc = acc + d * d;
    }
  }
  return acc;
}

inline double approx(const Big& b) {
  double v = 0;
  for (std::size_t i = b.mag.size(); i-- > 0;) v = v * 4294967296.0 + b.mag[i];
  return std::ldexp(b.neg ? -v : v, -298);
}

/// Midpoint of two adjacent non-negative floats, times 2^150 (an integer).
inline Big mid150(float a, float b) { return scaled(a) + scaled(b); }

/// The float32 nearest sqrt(K * 2^-298) (ties to even), K >= 0.
inline float rounded_sqrt(const Big& K) {
  if (K.zero()) return 0.0f;
  float f = float(std::sqrt(approx(K)));
  const Big k4 = shifted(K, 2);  // sqrt(K 2^-298) vs M 2^-150  <=>  4 K vs M^2
  for (;;) {
    const float up = std::nextafter(f, INFINITY), down = std::nextafter(f, 0.0f);
    const Big hi = mid150(f, up), lo = mid150(down, f);
    const int c_hi = compare(k4, hi * hi), c_lo = f == 0.0f ? 1 : compare(k4, lo * lo);
    const bool even = (std::bit_cast<std::uint32_t>(f) & 1u) == 0;
    if (c_hi > 0 || (c_hi == 0 && !even)) { f = up; continue; }
    if (c_lo < 0 || (c_lo == 0 && !even)) { f = down; continue; }
    return f;
  }
}

/// The float32 nearest K * 2^-(298 + extra) (ties to even).
inline float rounded(const Big& K, int extra = 0) {
  if (K.zero()) return 0.0f;
  const bool neg = K.neg;
  Big a = K;
  a.neg = false;
  float f = float(std::fabs(approx(K)) * std::ldexp(1.0, -extra));
  for (;;) {
    const float up = std::nextafter(f, INFINITY), down = std::nextafter(f, 0.0f);
    // a 2^-(298+extra) vs M 2^-150  <=>  a vs M 2^(148+extra)
    const Big hi = shifted(mid150(f, up), 148 + extra), lo = shifted(mid150(down, f), 148 + extra);
    const int c_hi = compare(a, hi), c_lo = f == 0.0f ? 1 : compare(a, lo);
    const bool even = (std::bit_cast<std::uint32_t>(f) & 1u) == 0;
    if (c_hi > 0 || (c_hi == 0 && !even)) { f = up; continue; }
    if (c_lo < 0 || (c_lo == 0 && !even)) { f = down; continue; }
    return neg ? -f : f;
  }
}

struct Answer {
  PointId id;
  Big key;
  float distance;  ///< the reported distance (haversine: the float64 value rounded; faithful)
  double metres = 0;  ///< haversine: the exact value in float64
};

/// The exact k nearest of one query among `points` (id -> user vector) visible in [begin, end).
inline std::vector<Answer> knn(Metric metric, const std::unordered_map<PointId, std::vector<float>>& points,
                               std::span<const float> query, std::size_t k, IdRange visible = {}) {
  const std::vector<float> q = stored(metric, query);
  std::vector<Answer> all;
  for (const auto& [id, v] : points) {
    if (id < visible.begin || id >= visible.end) continue;
    all.push_back({id, key(metric, q, stored(metric, v)), 0.0f});
  }
  std::sort(all.begin(), all.end(), [](const Answer& a, const Answer& b) {
    const int c = compare(a.key, b.key);
    return c < 0 || (c == 0 && a.id < b.id);
  });
  if (all.size() > k) all.resize(k);
  for (Answer& a : all) {
    switch (metric) {
      case Metric::L2: a.distance = rounded_sqrt(a.key); break;
      case Metric::InnerProduct: a.distance = rounded(a.key); break;
      case Metric::Cosine: a.distance = rounded(a.key, 1); break;
      case Metric::Haversine:
        a.metres = 2 * kEarthRadiusMetres * std::asin(std::min(1.0, std::sqrt(approx(a.key)) / 2));
        a.distance = float(a.metres);
        break;
    }
  }
  return all;
}

/// True when d is one of the two float32 values around x (within float64 noise).
inline bool faithful(float d, double x) {
  const double lo = x * (1 - 1e-12) - 1e-300, hi = x * (1 + 1e-12) + 1e-300;
  const float below = float(lo) <= lo ? float(lo) : std::nextafter(float(lo), 0.0f);
  const float above = float(hi) >= hi ? float(hi) : std::nextafter(float(hi), INFINITY);
  return d >= below && d <= above;
}

}  // namespace test::exact_ref
