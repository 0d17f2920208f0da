// Small helpers the benchmark programs share: comma-separated option lists, the median, and the
// splitmix64 generator their data come from.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

/// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

/// "1,8,12" -> {1, 8, 12}.
inline std::vector<std::size_t> numbers(const std::string& s) {
  std::vector<std::size_t> out;
  for (const auto& p : split(s)) out.push_back(std::stoul(p));
  return out;
}

/// The median (the mean of the middle two for an even count); v must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// splitmix64's output for state z (bench/peers_kmeans.py computes the same bits).
inline std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// [0, 1) from a hash's top 24 bits, exact in float32.
inline float unit_float(std::uint64_t h) { return float(h >> 40) * 0x1p-24f; }

}  // namespace bench
