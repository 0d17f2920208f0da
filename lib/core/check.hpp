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

/// Index of the first value that is NaN or larger than bound in magnitude (+-Inf included when
/// bound is finite), or values.size(). bound must be finite and non-negative; with
/// bound = FLT_MAX it finds what first_non_finite finds, at the same cost: one branch-free pass
/// comparing the magnitudes' bit patterns (ordered as the magnitudes are; NaN's lie above Inf's).
inline std::size_t first_beyond(std::span<const float> values, float bound) noexcept {
  const std::uint32_t limit = std::bit_cast<std::uint32_t>(bound);
  std::uint32_t beyond = 0;
  for (const float v : values) beyond |= std::uint32_t((std::bit_cast<std::uint32_t>(v) & 0x7fffffffu) > limit);
  if (beyond == 0) return values.size();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if ((std::bit_cast<std::uint32_t>(values[i]) & 0x7fffffffu) > limit) return i;
  }
  return values.size();
}

/// Refuses a value of a public enum that names none of its enumerators, e.g.
/// "ReferenceSet(StoreConfig): StoreConfig::metric = 7 is not a Metric (L2, InnerProduct, Cosine,
/// Haversine)". The value is printed as a number (the enums are unsigned char).
template <class Enum>
[[noreturn]] void fail_enum(std::string_view caller, std::string_view field, Enum value, std::string_view type,
                            std::string_view valid) {
  const bool vowel = !type.empty() && std::string_view("AEIOU").find(type.front()) != std::string_view::npos;
  fail_argument(caller, ": ", field, " = ", static_cast<long long>(value), vowel ? " is not an " : " is not a ", type,
                " (", valid, ")");
}

inline const char* describe_non_finite(float value) noexcept {
  return std::isnan(value) ? "NaN" : (value > 0 ? "+Inf" : "-Inf");
}

}  // namespace streamknn::detail
