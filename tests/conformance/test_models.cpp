// KnnClassifier / KnnRegressor on the backend against the aggregation rules applied to the
// reference neighbours; plus hand-computed cases of the rules themselves.
#include <map>

#include "support/test_support.hpp"

using namespace test;

namespace {

/// Random labelled store with duplicate points (so zero distances and ties occur).
struct Labelled {
  Model model;
  std::vector<float> queries;
};

Labelled build(ReferenceSet& store, std::mt19937_64& g, std::size_t points, std::size_t dim, std::uint32_t classes,
               std::uint32_t outputs) {
  Labelled out;
  out.model.dim = dim;
  const auto data = uniform(g, points * dim);
  std::uniform_int_distribution<std::int32_t> label(0, std::int32_t(classes) - 1);
  for (PointId id = 0; id < points; ++id) {
    std::vector<float> v(data.begin() + (id % (points / 2 + 1)) * dim, data.begin() + (id % (points / 2 + 1) + 1) * dim);
    out.model.vectors[id] = v;
    if (classes) {
      const auto l = label(g);
      store.insert(id, v, l);
      out.model.labels[id] = l;
    } else {
      auto y = uniform(g, outputs, -10, 10);
      store.insert(id, v, y);
      out.model.values[id] = y;
    }
  }
  store.publish();
  out.queries = uniform(g, 40 * dim);
  // A few queries that coincide with stored points (zero distance).
  std::copy(data.begin(), data.begin() + 3 * dim, out.queries.begin());
  return out;
}

double weight_of(double distance, bool any_zero, Weights w) {
  if (w == Weights::Uniform) return 1;
  if (any_zero) return distance == 0 ? 1 : 0;
  return 1 / distance;
}

}  // namespace

TEST_CASE("classifier labels and probabilities follow the vote rules on the true neighbours") {
  for (Weights weights : {Weights::Uniform, Weights::Distance}) {
    for (std::size_t k : {1, 4, 15}) {
      CAPTURE(k);
      CAPTURE(to_string(weights));
      auto g = rng(800 + k);
      const std::size_t dim = 6;
      const std::uint32_t classes = 5;
      ReferenceSet store(config_for(dim, Metric::L2, TargetSpec::classes(classes)));
      const Labelled data = build(store, g, 600, dim, classes, 0);
      KnnClassifier clf(store, k, weights);
      const auto got = clf.predict_proba(data.queries);
      const auto labels_only = clf.predict(data.queries);
      CHECK(labels_only.probabilities.empty());
      CHECK(labels_only.labels == got.labels);
      const Neighbors nn = store.search(data.queries, k);
      for (std::size_t q = 0; q < got.num_queries; ++q) {
        std::vector<double> w(classes, 0);
        bool any_zero = false;
        for (float d : nn.distances_of(q)) any_zero |= d == 0;
        double total = 0;
        for (std::size_t j = 0; j < k; ++j) {
          const double wj = weight_of(nn.distances_of(q)[j], any_zero, weights);
          w[data.model.labels.at(nn.ids_of(q)[j])] += wj;
          total += wj;
        }
        const auto best = std::max_element(w.begin(), w.end()) - w.begin();  // first max = smaller label
        CHECK(got.labels[q] == best);
        for (std::uint32_t c = 0; c < classes; ++c) CHECK(got.probabilities_of(q)[c] == doctest::Approx(w[c] / total).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("regressor mean, weighted mean and median per output on the true neighbours") {
  for (auto agg : {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
    for (std::size_t k : {1, 2, 7, 16}) {
      CAPTURE(k);
      CAPTURE(to_string(agg));
      auto g = rng(900 + k);
      const std::size_t dim = 4, outputs = 3;
      ReferenceSet store(config_for(dim, Metric::L2, TargetSpec::outputs(outputs)));
      const Labelled data = build(store, g, 500, dim, 0, outputs);
      KnnRegressor reg(store, k, agg);
      const auto got = reg.predict(data.queries);
      const Neighbors nn = store.search(data.queries, k);
      for (std::size_t q = 0; q < got.num_queries; ++q) {
        bool any_zero = false;
        for (float d : nn.distances_of(q)) any_zero |= d == 0;
        for (std::size_t o = 0; o < outputs; ++o) {
          std::vector<double> ys;
          double sum = 0, norm = 0;
          for (std::size_t j = 0; j < k; ++j) {
            const double y = data.model.values.at(nn.ids_of(q)[j])[o];
            const double w = weight_of(nn.distances_of(q)[j], any_zero,
                                       agg == RegressionAggregate::WeightedMean ? Weights::Distance : Weights::Uniform);
            ys.push_back(y);
            sum += w * y;
            norm += w;
          }
          double want = sum / norm;
          if (agg == RegressionAggregate::Median) {
            std::sort(ys.begin(), ys.end());
            want = ys.size() % 2 ? ys[ys.size() / 2] : 0.5 * (ys[ys.size() / 2 - 1] + ys[ys.size() / 2]);
          }
          CHECK(got.values_of(q)[o] == doctest::Approx(want).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("hand-computed votes: ties go to the smaller label, zero distance takes all the weight") {
  ReferenceSet store(config_for(1, Metric::L2, TargetSpec::classes(3)));
  const float at0[1] = {0}, at1[1] = {1}, at2[1] = {2}, at4[1] = {4};
  store.insert(1, at1, 2);  // distance 1 from q = 0
  store.insert(2, at2, 1);  // distance 2
  store.insert(3, at4, 1);  // distance 4
  store.publish();
  const float q[1] = {0};
  // Uniform, k=2: one vote each for labels 2 and 1 -> tie -> smaller label 1.
  CHECK(KnnClassifier(store, 2).predict(q).labels[0] == 1);
  // Distance, k=2: weights 1 (label 2) and 0.5 (label 1) -> label 2, p = [0, 1/3, 2/3].
  auto p = KnnClassifier(store, 2, Weights::Distance).predict_proba(q);
  CHECK(p.labels[0] == 2);
  CHECK(p.probabilities[0] == 0.0f);
  CHECK(p.probabilities[1] == doctest::Approx(1.0 / 3));
  CHECK(p.probabilities[2] == doctest::Approx(2.0 / 3));
  // Distance, k=3: label 1 gets 0.5 + 0.25 = 0.75 < 1 -> label 2.
  CHECK(KnnClassifier(store, 3, Weights::Distance).predict(q).labels[0] == 2);
  // A point at distance 0 takes all the weight.
  store.insert(4, at0, 0);
  store.publish();
  p = KnnClassifier(store, 3, Weights::Distance).predict_proba(q);
  CHECK(p.labels[0] == 0);
  CHECK(p.probabilities[0] == 1.0f);
  CHECK(p.probabilities[1] == 0.0f);
}

TEST_CASE("hand-computed regression: mean, weighted mean, median with an even count") {
  ReferenceSet store(config_for(1, Metric::L2, TargetSpec::outputs(1)));
  const float x1[1] = {1}, x2[1] = {2}, x3[1] = {3}, x5[1] = {5};
  const float y1[1] = {10}, y2[1] = {20}, y3[1] = {40}, y5[1] = {1000};
  store.insert(1, x1, y1);
  store.insert(2, x2, y2);
  store.insert(3, x3, y3);
  store.insert(5, x5, y5);
  store.publish();
  const float q[1] = {0};
  CHECK(KnnRegressor(store, 3).predict(q).values[0] == doctest::Approx(70.0 / 3));
  // weights 1, 1/2, 1/3: (10 + 10 + 40/3) / (11/6)
  CHECK(KnnRegressor(store, 3, RegressionAggregate::WeightedMean).predict(q).values[0] ==
        doctest::Approx((10 + 10 + 40.0 / 3) / (11.0 / 6)));
  CHECK(KnnRegressor(store, 4, RegressionAggregate::Median).predict(q).values[0] == doctest::Approx(30));
  CHECK(KnnRegressor(store, 3, RegressionAggregate::Median).predict(q).values[0] == doctest::Approx(20));
}

TEST_CASE("no neighbour at all: kNoLabel, zero probabilities, NaN values") {
  ReferenceSet labels(config_for(2, Metric::L2, TargetSpec::classes(2)));
  const float q[2] = {0, 0};
  auto p = KnnClassifier(labels, 3).predict_proba(q);
  CHECK(p.labels[0] == kNoLabel);
  CHECK(p.probabilities[0] == 0.0f);
  CHECK(p.probabilities[1] == 0.0f);
  ReferenceSet values(config_for(2, Metric::L2, TargetSpec::outputs(2)));
  auto r = KnnRegressor(values, 3).predict(q);
  CHECK(std::isnan(r.values[0]));
  CHECK(std::isnan(r.values[1]));
  // Filtered to nothing by a visibility range behaves the same.
  const float v[2] = {1, 1};
  labels.insert(10, v, 1);
  labels.publish();
  const IdRange none[1] = {{0, 10}};
  CHECK(KnnClassifier(labels, 3).predict(q, none).labels[0] == kNoLabel);
}
