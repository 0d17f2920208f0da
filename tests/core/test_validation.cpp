// Every validation error path: the exception type, and a message naming what was wrong.
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "support/test_support.hpp"

using namespace test;

namespace {
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("configuration errors name the field and value") {
  StoreConfig c = config_for(0);
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "dim must be at least 1"));
  c = config_for(3, Metric::Haversine);
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "dim must be 2, not 3"));
  c = config_for(3, Metric::L2, TargetSpec::classes(0));
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "classes(n) needs n >= 1"));
  c = config_for(3, Metric::L2, TargetSpec::outputs(0));
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "outputs(n) needs n >= 1"));
  c = config_for(3);
  c.queue_capacity = 0;
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "queue_capacity must be at least 1"));
  c = config_for(3);
  c.cpu_threads = 1025;
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "cpu_threads=1025 exceeds the limit of 1024"));
  c = config_for(3);
  c.publish_threads = 1025;
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "publish_threads=1025 exceeds the limit of 1024"));
  c = config_for(2);
  c.spatial_index = static_cast<SpatialIndex>(7);
  CHECK(contains(message_of<InvalidArgument>([&] { ReferenceSet s(c); }), "StoreConfig::spatial_index = 7 is not a SpatialIndex (Auto, Always, Off)"));
  CHECK_THROWS_AS(parse_metric("euclid"), InvalidArgument);
  CHECK(contains(message_of<InvalidArgument>([] { parse_metric("euclid"); }), "l2, ip, cosine or haversine"));
  CHECK(contains(message_of<InvalidArgument>([] { parse_weights("inverse"); }), "uniform or distance"));
  CHECK(contains(message_of<InvalidArgument>([] { parse_regression_aggregate("mode"); }), "mean, weighted_mean or median"));
}

TEST_CASE("bad updates are refused at push time with the id and the problem") {
  ReferenceSet store(config_for(3, Metric::L2, TargetSpec::classes(4)));
  const float good[3] = {1, 2, 3}, nan[3] = {1, kNaN, 3}, inf[3] = {kInf, 0, 0}, two[2] = {1, 2};
  CHECK(contains(message_of<InvalidArgument>([&] { store.insert(7, two, 0); }),
                 "insert id=7): vector has 2 floats but the store's dim is 3"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.insert(7, nan, 0); }), "vector[1] is NaN"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.move(7, inf); }), "vector[0] is +Inf"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.insert(7, good, 4); }), "label 4 is outside [0, 4)"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.insert(7, good, -1); }), "label -1 is outside [0, 4)"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.insert(7, good); }), "expects a class label"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.insert(kInvalidId, good, 1); }), "is reserved"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.try_push(Update::insert(7, good, std::span<const float>(good))); }),
                 "expects a class label"));
  CHECK(store.pending() == 0);  // nothing bad was queued
  // Ids at the 64-bit limits other than the reserved one are fine.
  store.insert(0, good, 1);
  store.insert(kInvalidId - 1, good, 2);
  CHECK(store.publish().inserted == 2);
}

TEST_CASE("target shape errors for regression stores and stores without targets") {
  ReferenceSet reg(config_for(2, Metric::L2, TargetSpec::outputs(3)));
  const float v[2] = {0, 0}, y2[2] = {1, 2}, ynan[3] = {1, kNaN, 2};
  CHECK(contains(message_of<InvalidArgument>([&] { reg.insert(1, v, y2); }), "expects 3 target values, got 2"));
  CHECK(contains(message_of<InvalidArgument>([&] { reg.insert(1, v, ynan); }), "target value[1] is NaN"));
  CHECK(contains(message_of<InvalidArgument>([&] { reg.set_target(1, 3); }), "expects 3 target values"));
  ReferenceSet plain(config_for(2));
  CHECK(contains(message_of<InvalidArgument>([&] { plain.insert(1, v, 3); }), "carry no target"));
  CHECK(contains(message_of<InvalidArgument>([&] { plain.set_target(1, 3); }), "carry no target"));
}

TEST_CASE("metric-specific input errors") {
  ReferenceSet cosine(config_for(3, Metric::Cosine));
  const float zero[3] = {0, 0, 0};
  CHECK(contains(message_of<InvalidArgument>([&] { cosine.insert(1, zero); }), "zero vector"));
  CHECK(contains(message_of<InvalidArgument>([&] { cosine.search(zero, 1); }), "query 0 is the zero vector"));
  ReferenceSet geo(config_for(2, Metric::Haversine));
  const float bad_lat[2] = {91, 0};
  CHECK(contains(message_of<InvalidArgument>([&] { geo.insert(1, bad_lat); }), "latitude 91 is outside [-90, 90]"));
}

TEST_CASE("bad queries name the query and the problem") {
  ReferenceSet store(config_for(2, Metric::L2, TargetSpec::classes(2)));
  const float q[4] = {0, 0, 1, kNaN}, three[3] = {0, 0, 0};
  CHECK(contains(message_of<InvalidArgument>([&] { store.search(q, 0); }), "k=0 must be at least 1"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.search(q, kMaxK + 1); }), "exceeds the maximum of 4096"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.search(three, 1); }), "3 floats, not a multiple of dim=2"));
  CHECK(contains(message_of<InvalidArgument>([&] { store.search(q, 1); }), "query 1[1] is NaN"));
  // A large batch is checked in one pass, then row by row to name the first bad value; the
  // largest accepted magnitude (max_coordinate, streamknn/metric.hpp) and the smallest subnormal
  // values are accepted.
  ReferenceSet wide(config_for(784));
  std::vector<float> batch(64 * 784, 0.5f);
  batch[5] = max_coordinate(Metric::L2, 784);
  batch[6] = -std::numeric_limits<float>::denorm_min();
  CHECK(wide.search(batch, 1).num_queries == 64);
  batch[37 * 784 + 500] = std::numeric_limits<float>::infinity();
  CHECK(contains(message_of<InvalidArgument>([&] { wide.search(batch, 1); }), "query 37[500] is +Inf"));
  batch[3 * 784 + 1] = -std::numeric_limits<float>::infinity();
  CHECK(contains(message_of<InvalidArgument>([&] { wide.search(batch, 1); }), "query 3[1] is -Inf"));
  batch[2 * 784 + 783] = std::bit_cast<float>(0xffc00123u);  // a negative NaN with a payload
  CHECK(contains(message_of<InvalidArgument>([&] { wide.search(batch, 1); }), "query 2[783] is NaN"));
  const IdRange backwards[1] = {{5, 3}};
  CHECK(contains(message_of<InvalidArgument>([&] { store.search(std::span(q, 2), 1, backwards); }), "begin > end"));
  const IdRange two_ranges[2] = {{0, 1}, {0, 1}};
  CHECK(contains(message_of<InvalidArgument>([&] { store.search(std::span(q, 2), 1, two_ranges); }), "2 ranges for 1 queries"));
  CHECK(contains(message_of<InvalidArgument>([&] { KnnClassifier(store, 0); }), "k=0"));
  ReferenceSet plain(config_for(2));
  CHECK(contains(message_of<InvalidArgument>([&] { KnnClassifier(plain, 3); }), "carry no class labels"));
  CHECK(contains(message_of<InvalidArgument>([&] { KnnRegressor(plain, 3); }), "carry no float outputs"));
  ReferenceSet ip(config_for(2, Metric::InnerProduct, TargetSpec::classes(2)));
  CHECK(contains(message_of<InvalidArgument>([&] { KnnClassifier(ip, 3, Weights::Distance); }), "can be negative"));
}

TEST_CASE("a publish with some bad ops applies the good ones") {
  ReferenceSet store(config_for(1));
  const float v[1] = {1};
  store.insert(1, v);
  store.erase(2);
  store.insert(3, v);
  store.move(4, v);
  const auto r = store.publish();
  CHECK(r.applied == 2);
  CHECK(r.rejected.size() == 2);
  CHECK(store.size() == 2);
}

TEST_CASE("the CUDA backend asked for where it cannot run says why") {
  if (cuda_available()) return;  // covered by the GPU suites
  StoreConfig c = config_for(2);
  c.backend = BackendKind::Cuda;
  const std::string msg = message_of<BackendUnavailable>([&] { ReferenceSet s(c); });
  CHECK((contains(msg, "no CUDA support") || contains(msg, "no CUDA device") || contains(msg, "CUDA")));
  c.backend = BackendKind::Auto;
  ReferenceSet fallback(c);
  CHECK(fallback.backend() == BackendKind::Cpu);
}
