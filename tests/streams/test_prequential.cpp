// The prequential evaluator: causal batches give the predictions of batch 1, the window is
// exactly the last `window` points, the first point is not scored, and bad options or data are
// refused with the place they come from.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "scratch_dir.hpp"
#include "streams/csv_source.hpp"
#include "streams/drift_generators.hpp"
#include "streams/errors.hpp"
#include "streams/memory_source.hpp"
#include "streams/moving_objects.hpp"
#include "streams/prequential.hpp"
#include "support/test_support.hpp"

using namespace streamknn;
using namespace streamknn::streams;

namespace {

struct Predictions {
  std::vector<std::int32_t> labels;
  std::vector<float> values;
  PrequentialResult result;
};

Predictions run(Source& source, PrequentialOptions options) {
  options.backend = BackendKind::Cpu;
  Prequential evaluator(source, options);
  Predictions out;
  std::size_t expected_first = 0;
  out.result = evaluator.run([&](const BatchOutcome& o) {
    CHECK(o.first == expected_first);  // batches arrive in order, none skipped
    expected_first += o.size;
    out.labels.insert(out.labels.end(), o.predicted_labels.begin(), o.predicted_labels.end());
    out.values.insert(out.values.end(), o.predicted_values.begin(), o.predicted_values.end());
  });
  return out;
}

std::unique_ptr<Source> hyperplane(std::size_t points) {
  HyperplaneConfig c;
  c.points = points;
  c.dim = 4;
  c.drift = 0.01;
  c.seed = test::seed();
  return std::make_unique<HyperplaneSource>(c);
}

std::unique_ptr<Source> pings(std::size_t points) {
  DriverPingsConfig c;
  c.world.drivers = 100;
  c.world.seed = test::seed();
  c.points = points;
  return std::make_unique<DriverPingsSource>(c);
}

/// Float bits, so that NaN == NaN and nothing is "close enough".
std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

/// A small labelled stream held in memory, from random data.
std::unique_ptr<Source> random_stream(std::mt19937_64& g, std::size_t n, std::size_t dim, std::size_t classes,
                                      Task task) {
  SourceInfo info;
  info.name = "random";
  info.task = task;
  info.dim = dim;
  for (std::size_t c = 0; c < classes; ++c) info.class_names.push_back(std::to_string(c));
  auto features = test::uniform(g, n * dim);
  std::vector<std::int32_t> labels;
  std::vector<float> values;
  std::uniform_int_distribution<std::int32_t> label(0, std::int32_t(classes) - 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (task == Task::Classify) {
      labels.push_back(label(g));
    } else {
      values.push_back(test::uniform(g, 1, -5, 5)[0]);
    }
  }
  return std::make_unique<MemorySource>(info, features, labels, values, nullptr);
}

/// The k nearest of point i among ids [lo, i) in double precision, by (distance, id).
std::vector<std::pair<double, std::size_t>> naive_neighbours(const Chunk& all, std::size_t dim, std::size_t i,
                                                             std::size_t lo, std::size_t k) {
  std::vector<std::pair<double, std::size_t>> d;
  for (std::size_t j = lo; j < i; ++j) {
    double s = 0;
    for (std::size_t c = 0; c < dim; ++c) {
      const double diff = double(all.features[i * dim + c]) - double(all.features[j * dim + c]);
      s += diff * diff;
    }
    d.emplace_back(std::sqrt(s), j);
  }
  std::sort(d.begin(), d.end());
  d.resize(std::min(k, d.size()));
  return d;
}

}  // namespace

TEST_CASE("classification: batch 1, 7 and 64 give identical predictions, with and without a window") {
  for (std::size_t window : {0u, 5u, 150u}) {  // 5: a window shorter than a batch
    CAPTURE(window);
    PrequentialOptions o;
    o.k = 5;
    o.window = window;
    o.batch = 1;
    const Predictions one = run(*hyperplane(1500), o);
    CHECK(one.result.points == 1500);
    for (std::size_t batch : {7u, 64u}) {
      CAPTURE(batch);
      o.batch = batch;
      const Predictions other = run(*hyperplane(1500), o);
      CHECK(other.labels == one.labels);
      CHECK(other.result.classification.correct() == one.result.classification.correct());
    }
  }
}

TEST_CASE("regression with distance weights (haversine): batch 1, 7 and 64 give identical values") {
  for (std::size_t window : {0u, 150u}) {
    CAPTURE(window);
    PrequentialOptions o;
    o.k = 7;
    o.weights = Weights::Distance;
    o.metric = Metric::Haversine;
    o.window = window;
    o.batch = 1;
    const Predictions one = run(*pings(1200), o);
    for (std::size_t batch : {7u, 64u}) {
      CAPTURE(batch);
      o.batch = batch;
      CHECK(bits(run(*pings(1200), o).values) == bits(one.values));
    }
  }
}

TEST_CASE("a point sees exactly the `window` points before it (naive reference)") {
  auto g = test::rng(11);
  const std::size_t n = 300, dim = 3, k = 4, window = 25;
  auto source = random_stream(g, n, dim, 3, Task::Classify);
  Chunk all;  // the same points again, for the reference
  auto g2 = test::rng(11);
  random_stream(g2, n, dim, 3, Task::Classify)->read(n, all);
  PrequentialOptions o;
  o.k = k;
  o.window = window;
  o.batch = 16;
  const Predictions got = run(*source, o);
  REQUIRE(got.labels.size() == n);
  CHECK(got.labels[0] == kNoLabel);
  for (std::size_t i = 1; i < n; ++i) {
    const auto near = naive_neighbours(all, dim, i, i > window ? i - window : 0, k);
    std::vector<int> votes(3, 0);
    for (const auto& [d, j] : near) ++votes[all.labels[j]];
    const auto want = static_cast<std::int32_t>(std::max_element(votes.begin(), votes.end()) - votes.begin());
    CHECK_MESSAGE(got.labels[i] == want, "point ", i);
  }
}

TEST_CASE("--radius: the k nearest within the radius vote; a point with none is not scored") {
  auto g = test::rng(12);
  const std::size_t n = 300, dim = 3, k = 4, window = 40;
  const double radius = 0.8;
  auto source = random_stream(g, n, dim, 3, Task::Classify);
  Chunk all;
  auto g2 = test::rng(12);
  random_stream(g2, n, dim, 3, Task::Classify)->read(n, all);
  PrequentialOptions o;
  o.k = k;
  o.window = window;
  o.batch = 16;
  o.radius = radius;
  const Predictions got = run(*source, o);
  REQUIRE(got.labels.size() == n);
  std::size_t none = 0;
  for (std::size_t i = 1; i < n; ++i) {
    auto near = naive_neighbours(all, dim, i, i > window ? i - window : 0, k);
    // Rows within 1e-6 of the radius could fall either way in float32: none in this data.
    while (!near.empty() && near.back().first > radius) near.pop_back();
    if (near.empty()) {
      ++none;
      CHECK_MESSAGE(got.labels[i] == kNoLabel, "point ", i);
      continue;
    }
    std::vector<int> votes(3, 0);
    for (const auto& [d, j] : near) ++votes[all.labels[j]];
    const auto want = static_cast<std::int32_t>(std::max_element(votes.begin(), votes.end()) - votes.begin());
    CHECK_MESSAGE(got.labels[i] == want, "point ", i);
  }
  CHECK(got.result.scored == n - 1 - none);
}

TEST_CASE("regression, distance weights, window: the weighted mean of the naive neighbours") {
  auto g = test::rng(12);
  const std::size_t n = 200, dim = 2, k = 3, window = 10;
  Chunk all;
  random_stream(g, n, dim, 0, Task::Regress)->read(n, all);
  auto g2 = test::rng(12);
  auto source = random_stream(g2, n, dim, 0, Task::Regress);
  PrequentialOptions o;
  o.k = k;
  o.weights = Weights::Distance;
  o.window = window;
  o.batch = 9;
  const Predictions got = run(*source, o);
  CHECK(std::isnan(got.values[0]));
  for (std::size_t i = 1; i < n; ++i) {
    double num = 0, den = 0;
    for (const auto& [d, j] : naive_neighbours(all, dim, i, i > window ? i - window : 0, k)) {
      num += all.values[j] / d;
      den += 1 / d;
    }
    CHECK_MESSAGE(got.values[i] == doctest::Approx(num / den).epsilon(1e-4), "point ", i);
  }
}

TEST_CASE("the first point has no prediction and is not scored, the scores cover the rest") {
  PrequentialOptions o;
  o.window = 100;
  const Predictions p = run(*hyperplane(700), o);
  CHECK(p.labels[0] == kNoLabel);
  CHECK(std::count(p.labels.begin(), p.labels.end(), kNoLabel) == 1);
  CHECK(p.result.points == 700);
  CHECK(p.result.scored == 699);
  CHECK(p.result.classification.count() == 699);
  CHECK(p.result.batches == (700 + 63) / 64);
  CHECK(p.result.latency.p50 > 0);
  CHECK(p.result.latency.p99 >= p.result.latency.p50);
  CHECK(p.result.latency.max >= p.result.latency.p99);
  CHECK(p.result.points_per_second() > 0);
}

TEST_CASE("the limit stops the stream early") {
  PrequentialOptions o;
  o.limit = 130;
  o.batch = 64;
  const Predictions p = run(*hyperplane(1000), o);
  CHECK(p.result.points == 130);
  CHECK(p.labels.size() == 130);
}

TEST_CASE("options that cannot work together are usage errors") {
  auto source = hyperplane(10);
  PrequentialOptions o;
  o.metric = Metric::Haversine;
  CHECK_THROWS_WITH_AS(Prequential(*source, o), doctest::Contains("has 4 features"), UsageError);
  o = {};
  o.k = 0;
  CHECK_THROWS_AS(Prequential(*source, o), UsageError);
  o = {};
  o.batch = 0;
  CHECK_THROWS_AS(Prequential(*source, o), UsageError);
  o = {};
  o.metric = Metric::InnerProduct;
  o.weights = Weights::Distance;
  CHECK_THROWS_AS(Prequential(*source, o), UsageError);
}

TEST_CASE("data the metric refuses is a DataError naming the file, line and column") {
  test::ScratchDir dir;
  const std::string path = dir.write("geo.csv", "lat,lon,kind\n48.85,2.35,a\n95,2.35,b\n");
  auto source = open_csv(path, {});
  PrequentialOptions o;
  o.metric = Metric::Haversine;
  o.backend = BackendKind::Cpu;
  Prequential evaluator(*source, o);
  CHECK_THROWS_WITH_AS(evaluator.run(),
                       (path + ", line 3, column 1 (\"lat\"): latitude 95 is outside [-90, 90] degrees "
                               "(haversine takes latitude, longitude)")
                           .c_str(),
                       DataError);

  auto zeros = open_csv(dir.write("zero.csv", "x,y,c\n1,2,a\n0,0,b\n"), {});
  o.metric = Metric::Cosine;
  Prequential cosine(*zeros, o);
  CHECK_THROWS_WITH_AS(cosine.run(), doctest::Contains("zero.csv, line 3: the zero vector"), DataError);
}

TEST_CASE("a predicate (--require / --forbid): the k nearest earlier points that pass it vote") {
  auto g = test::rng(21);
  const std::size_t n = 300, dim = 3, k = 4, window = 60, classes = 3;
  SourceInfo info;
  info.name = "random";
  info.dim = dim;
  info.attribute_names = {"flags", "region"};
  for (std::size_t c = 0; c < classes; ++c) info.class_names.push_back(std::to_string(c));
  const auto features = test::uniform(g, n * dim);
  std::vector<std::int32_t> labels;
  std::vector<std::uint32_t> words;
  std::uniform_int_distribution<std::uint32_t> word(0, 15);
  for (std::size_t i = 0; i < n; ++i) {
    labels.push_back(std::int32_t(word(g) % classes));
    words.push_back(word(g));
    words.push_back(word(g));
  }
  words[0] = 0;  // point 0 fails the predicate: point 1 has no neighbour that passes
  const Predicate where = Predicate{}.require(0, 0b101).forbid(1, 0b10);
  for (const std::size_t batch : {1, 16}) {
    MemorySource source(info, features, labels, {}, nullptr, words);
    PrequentialOptions o;
    o.k = k;
    o.window = window;
    o.batch = batch;
    o.where = where;
    const Predictions got = run(source, o);
    REQUIRE(got.labels.size() == n);
    std::size_t none = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<std::pair<double, std::size_t>> near;
      for (std::size_t j = i > window ? i - window : 0; j < i; ++j) {
        if (!where.passes({words.data() + 2 * j, 2})) continue;
        double s = 0;
        for (std::size_t c = 0; c < dim; ++c) s += std::pow(double(features[i * dim + c]) - features[j * dim + c], 2);
        near.emplace_back(std::sqrt(s), j);
      }
      std::sort(near.begin(), near.end());
      near.resize(std::min(k, near.size()));
      if (near.empty()) {
        ++none;
        CHECK_MESSAGE(got.labels[i] == kNoLabel, "point ", i);
        continue;
      }
      std::vector<int> votes(classes, 0);
      for (const auto& [d, j] : near) ++votes[labels[j]];
      const auto want = static_cast<std::int32_t>(std::max_element(votes.begin(), votes.end()) - votes.begin());
      CHECK_MESSAGE(got.labels[i] == want, "point ", i, ", batch ", batch);
    }
    CHECK(got.labels[1] == kNoLabel);  // the filter leaves point 1 without a neighbour
    CHECK(got.result.scored == n - none);
  }
}
