// Small helpers the benchmark programs share: comma-separated option lists and the median.
#pragma once

#include <algorithm>
#include <cstddef>
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

}  // namespace bench
