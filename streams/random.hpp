// streams/random.hpp — the generators' source of randomness.
//
// std::mt19937_64's output sequence is fixed by the C++ standard, but the std:: distributions
// are not (libstdc++ and libc++ give different numbers for one seed), so the conversions to
// uniform and normal deviates are written here: a seed gives the same stream everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace streamknn::streams {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}

  /// Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n) for 1 <= n <= 2^53 (exact scaling of a 53-bit draw).
  std::uint64_t below(std::uint64_t n) {
    const auto i = static_cast<std::uint64_t>(uniform() * static_cast<double>(n));
    return i < n ? i : n - 1;
  }
  bool chance(double p) { return uniform() < p; }
  /// Standard normal deviate (Box-Muller; the second value of each pair is kept for the next call).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace streamknn::streams
