// streamknn/predicate.hpp — a query's test on the points' attribute words.
//
// A store made with StoreConfig::attribute_words = W (1 to 4) gives every point W 32-bit words.
// A query may carry a Predicate; the search then answers among the points that pass it (and its
// IdRange, if any): the exact k nearest of those, padded when fewer pass. The test runs inside
// the search, point by point; no bitmap of the store is built per query. A point passes when,
// for every word w < W,
//     (attr[w] & required[w]) == required[w]  and  (attr[w] & forbidden[w]) == 0,
// and, where range_word >= 0, range_min <= attr[range_word] <= range_max (unsigned). Bits set in a
// word at or beyond W, a range_word at or beyond W, range_min > range_max, or any predicate on a
// store without attributes are refused with InvalidArgument naming the predicate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "streamknn/config.hpp"

namespace streamknn {

struct Predicate {
  std::array<std::uint32_t, kMaxAttributeWords> required{};   ///< bits that must be set, per word
  std::array<std::uint32_t, kMaxAttributeWords> forbidden{};  ///< bits that must be clear, per word
  std::int32_t range_word = -1;                               ///< the word the range bounds; -1: none
  std::uint32_t range_min = 0;                                ///< inclusive, unsigned
  std::uint32_t range_max = std::numeric_limits<std::uint32_t>::max();  ///< inclusive, unsigned

  /// Builders: Predicate{}.require(0, kAvailable).forbid(0, kOnBreak).within(1, t0, t1).
  Predicate require(std::size_t word, std::uint32_t bits) const noexcept {
    Predicate p = *this;
    if (word < kMaxAttributeWords) p.required[word] |= bits;
    return p;
  }
  Predicate forbid(std::size_t word, std::uint32_t bits) const noexcept {
    Predicate p = *this;
    if (word < kMaxAttributeWords) p.forbidden[word] |= bits;
    return p;
  }
  Predicate within(std::size_t word, std::uint32_t min, std::uint32_t max) const noexcept {
    Predicate p = *this;
    p.range_word = static_cast<std::int32_t>(word < kMaxAttributeWords ? word : kMaxAttributeWords);
    p.range_min = min;
    p.range_max = max;
    return p;
  }

  /// Whether a point with these attribute words (StoreConfig::attribute_words of them) passes.
  constexpr bool passes(std::span<const std::uint32_t> attributes) const noexcept {
    for (std::size_t w = 0; w < attributes.size() && w < kMaxAttributeWords; ++w) {
      if ((attributes[w] & required[w]) != required[w] || (attributes[w] & forbidden[w]) != 0) return false;
    }
    if (range_word >= 0) {
      const auto w = static_cast<std::size_t>(range_word);
      if (w >= attributes.size()) return false;
      return attributes[w] >= range_min && attributes[w] <= range_max;
    }
    return true;
  }
};

}  // namespace streamknn
