// The prequential scores against values computed by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "streams/metrics.hpp"

using namespace streamknn::streams;

TEST_CASE("accuracy and Cohen's kappa, by hand") {
  // truth 0 0 1 1 2 2, predicted 0 1 1 1 2 0: 4 of 6 right. Truth margins (2, 2, 2), predicted
  // margins (2, 3, 1): p_e = (2*2 + 2*3 + 2*1) / 36 = 1/3; kappa = (2/3 - 1/3) / (1 - 1/3) = 1/2.
  ClassificationMetrics m(3);
  const int truth[] = {0, 0, 1, 1, 2, 2}, predicted[] = {0, 1, 1, 1, 2, 0};
  for (int i = 0; i < 6; ++i) m.add(truth[i], predicted[i]);
  CHECK(m.count() == 6);
  CHECK(m.correct() == 4);
  CHECK(m.accuracy() == doctest::Approx(2.0 / 3));
  CHECK(m.kappa() == doctest::Approx(0.5));
}

TEST_CASE("kappa: perfect agreement on two classes is 1, chance-level prediction is 0, p_e = 1 gives 0") {
  ClassificationMetrics perfect(2);
  for (int i = 0; i < 4; ++i) perfect.add(i % 2, i % 2);
  CHECK(perfect.kappa() == doctest::Approx(1));
  // Always predicting class 0 on a balanced stream: p_o = 1/2, p_e = 1/2 * 1 = 1/2, kappa = 0.
  ClassificationMetrics constant(2);
  for (int i = 0; i < 4; ++i) constant.add(i % 2, 0);
  CHECK(constant.accuracy() == doctest::Approx(0.5));
  CHECK(constant.kappa() == doctest::Approx(0));
  // One class everywhere: p_e = 1, kappa defined as 0 (River's rule), accuracy 1.
  ClassificationMetrics single(3);
  for (int i = 0; i < 5; ++i) single.add(1, 1);
  CHECK(single.accuracy() == 1);
  CHECK(single.kappa() == 0);
}

TEST_CASE("kappa below zero when predictions disagree more than chance") {
  // truth 0 1 0 1, predicted 1 0 1 0: p_o = 0, p_e = 1/2, kappa = -1.
  ClassificationMetrics m(2);
  for (int i = 0; i < 4; ++i) m.add(i % 2, 1 - i % 2);
  CHECK(m.kappa() == doctest::Approx(-1));
}

TEST_CASE("nothing scored: every score is NaN") {
  CHECK(std::isnan(ClassificationMetrics(2).accuracy()));
  CHECK(std::isnan(ClassificationMetrics(2).kappa()));
  CHECK(std::isnan(RegressionMetrics().mae()));
  CHECK(std::isnan(RegressionMetrics().rmse()));
  CHECK(std::isnan(RegressionMetrics().r2()));
}

TEST_CASE("labels outside the classes are refused") {
  ClassificationMetrics m(2);
  CHECK_THROWS_AS(m.add(2, 0), std::out_of_range);
  CHECK_THROWS_AS(m.add(0, -1), std::out_of_range);
}

TEST_CASE("MAE, RMSE and R², by hand") {
  // truth 1 2 3 4, predicted 1.5 2 2 5: errors 0.5 0 -1 1.
  // MAE = 2.5/4 = 0.625; MSE = (0.25 + 0 + 1 + 1)/4 = 0.5625, RMSE = 0.75;
  // mean 2.5, SS_tot = 2.25 + 0.25 + 0.25 + 2.25 = 5, SS_res = 2.25, R² = 1 - 2.25/5 = 0.55.
  RegressionMetrics m;
  const double truth[] = {1, 2, 3, 4}, predicted[] = {1.5, 2, 2, 5};
  for (int i = 0; i < 4; ++i) m.add(truth[i], predicted[i]);
  CHECK(m.count() == 4);
  CHECK(m.mae() == doctest::Approx(0.625));
  CHECK(m.rmse() == doctest::Approx(0.75));
  CHECK(m.r2() == doctest::Approx(0.55));
}

TEST_CASE("R² with a constant truth: 1 when perfect, else 0 (scikit-learn's force_finite)") {
  RegressionMetrics perfect, off;
  for (int i = 0; i < 3; ++i) {
    perfect.add(7, 7);
    off.add(7, 8);
  }
  CHECK(perfect.r2() == 1);
  CHECK(off.r2() == 0);
}

TEST_CASE("R² keeps its precision on a large mean (Welford)") {
  // truth 1e8 + {1, 2, 3, 4}, predicted 1e8 + {1.5, 2, 2, 5}: the same R² as above.
  RegressionMetrics m;
  const double truth[] = {1, 2, 3, 4}, predicted[] = {1.5, 2, 2, 5};
  for (int i = 0; i < 4; ++i) m.add(1e8 + truth[i], 1e8 + predicted[i]);
  CHECK(m.r2() == doctest::Approx(0.55).epsilon(1e-9));
}

TEST_CASE("percentile interpolates linearly between order statistics (numpy's default)") {
  std::vector<double> v = {4, 1, 3, 2};
  CHECK(percentile(v, 50) == doctest::Approx(2.5));
  CHECK(percentile(v, 99) == doctest::Approx(3.97));  // rank 0.99 * 3 = 2.97
  CHECK(percentile(v, 0) == 1);
  CHECK(percentile(v, 100) == 4);
  std::vector<double> one = {5};
  CHECK(percentile(one, 99) == 5);
  std::vector<double> none;
  CHECK(std::isnan(percentile(none, 50)));
}
