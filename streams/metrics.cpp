#include "streams/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace streamknn::streams {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

void ClassificationMetrics::add(std::int32_t truth, std::int32_t predicted) {
  if (truth < 0 || predicted < 0 || std::size_t(truth) >= truth_.size() || std::size_t(predicted) >= truth_.size()) {
    throw std::out_of_range("ClassificationMetrics::add: label pair (" + std::to_string(truth) + ", " +
                            std::to_string(predicted) + ") outside [0, " + std::to_string(truth_.size()) + ")");
  }
  ++truth_[truth];
  ++predicted_[predicted];
  ++count_;
  correct_ += truth == predicted;
}

double ClassificationMetrics::accuracy() const noexcept {
  return count_ ? double(correct_) / double(count_) : kNaN;
}

double ClassificationMetrics::kappa() const noexcept {
  if (!count_) return kNaN;
  const double n = double(count_);
  double expected = 0;
  for (std::size_t c = 0; c < truth_.size(); ++c) expected += (double(truth_[c]) / n) * (double(predicted_[c]) / n);
  if (expected >= 1) return 0;
  return (accuracy() - expected) / (1 - expected);
}

void RegressionMetrics::add(double truth, double predicted) {
  const double e = predicted - truth;
  ++count_;
  abs_error_ += std::fabs(e);
  squared_error_ += e * e;
  const double delta = truth - mean_;
  mean_ += delta / double(count_);
  spread_ += delta * (truth - mean_);
}

double RegressionMetrics::mae() const noexcept { return count_ ? abs_error_ / double(count_) : kNaN; }
double RegressionMetrics::rmse() const noexcept { return count_ ? std::sqrt(squared_error_ / double(count_)) : kNaN; }

double RegressionMetrics::r2() const noexcept {
  if (!count_) return kNaN;
  if (spread_ == 0) return squared_error_ == 0 ? 1.0 : 0.0;
  return 1 - squared_error_ / spread_;
}

double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100 * double(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - double(lo)) * (values[hi] - values[lo]);
}

}  // namespace streamknn::streams
