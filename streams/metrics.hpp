// streams/metrics.hpp — the prequential scores, accumulated one prediction at a time.
//
// Classification: accuracy and Cohen's kappa, (p_o - p_e) / (1 - p_e) with p_e the agreement
// expected from the truth and prediction marginals; when p_e is 1 (every truth and prediction
// the same single class) kappa is defined as 0, as River does. Regression: MAE, RMSE and R²
// = 1 - SS_res / SS_tot, where SS_tot == 0 gives 1 if the predictions are perfect and 0
// otherwise (scikit-learn's force_finite rule). With nothing scored every score is NaN.
// Sums are kept in double; the truth's spread uses Welford's update so R² stays accurate on long
// streams with a large mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace streamknn::streams {

class ClassificationMetrics {
 public:
  explicit ClassificationMetrics(std::size_t classes = 0) : truth_(classes), predicted_(classes) {}
  void add(std::int32_t truth, std::int32_t predicted);
  std::size_t count() const noexcept { return count_; }
  std::size_t correct() const noexcept { return correct_; }
  double accuracy() const noexcept;
  double kappa() const noexcept;

 private:
  std::vector<std::uint64_t> truth_, predicted_;  // per-class totals: the confusion matrix's margins
  std::size_t count_ = 0, correct_ = 0;
};

class RegressionMetrics {
 public:
  void add(double truth, double predicted);
  std::size_t count() const noexcept { return count_; }
  double mae() const noexcept;
  double rmse() const noexcept;
  double r2() const noexcept;

 private:
  std::size_t count_ = 0;
  double abs_error_ = 0, squared_error_ = 0;
  double mean_ = 0, spread_ = 0;  // Welford: mean and sum of squared deviations of the truth
};

/// The p-th percentile (0..100) of values, interpolating linearly between order statistics
/// (numpy's default). NaN for no values. Reorders `values`.
double percentile(std::vector<double>& values, double p);

}  // namespace streamknn::streams
