// Argument checks used at the API boundary: each throws InvalidArgument with a message that
// names the call, the argument and the bad value.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "streamknn/error.hpp"

namespace streamknn::detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail_argument(Parts&&... parts) {
  throw InvalidArgument(concat(std::forward<Parts>(parts)...));
}

/// Index of the first NaN/Inf in values, or values.size() if all are finite.
inline std::size_t first_non_finite(std::span<const float> values) noexcept {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return values.size();
}

inline const char* describe_non_finite(float value) noexcept {
  return std::isnan(value) ? "NaN" : (value > 0 ? "+Inf" : "-Inf");
}

}  // namespace streamknn::detail
