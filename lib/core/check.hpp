// Argument checks used at the API boundary: each throws InvalidArgument with a message that
// names the call, the argument and the bad value.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
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
  // The usual answer (all finite) from one pass without a branch per value, which the compiler
  // vectorises (an exponent of all ones is NaN or Inf); the early-exit loop only finds the index.
  // Query batches are checked on the caller's thread before the search starts.
  std::uint32_t special = 0;
  for (const float v : values) special |= std::uint32_t((std::bit_cast<std::uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
  if (special == 0) return values.size();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return values.size();
}

inline const char* describe_non_finite(float value) noexcept {
  return std::isnan(value) ? "NaN" : (value > 0 ? "+Inf" : "-Inf");
}

}  // namespace streamknn::detail
