// examples/online_classification.cpp — classify a drifting stream with a sliding window.
//
// Points arrive from a random-RBF stream whose class centroids keep moving (concept drift,
// streams/drift_generators.hpp). Each point is first predicted, then learned (test-then-train).
// Two models run side by side: one over a sliding window of the most recent points, one that
// keeps every point. As the concept moves, old points keep voting for classes that have moved
// away, so the window wins. Points are handled in causal batches: the whole batch is inserted
// and published first, then predicted in one call where each query sees only the ids that
// arrived before it (one IdRange per query), which gives exactly the answers of one-at-a-time
// prediction.
//
//   online_classification [--points 50000] [--window 500] [--batch 64] [--report-every 5000]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "streamknn/streamknn.hpp"
#include "streams/drift_generators.hpp"

namespace {

using namespace streamknn;

/// A k-NN classifier over the last `window` points of a stream (0: every point).
class StreamLearner {
 public:
  StreamLearner(const StoreConfig& config, std::size_t k, std::size_t window)
      : store_(config), model_(store_, k), window_(window) {}

  /// Predicts points [first, first + n) (row-major features), each from the points before it,
  /// then keeps them. Returns the predicted labels (kNoLabel for the very first point).
  std::vector<std::int32_t> test_then_train(PointId first, std::span<const float> features,
                                            std::span<const std::int32_t> labels) {
    const std::size_t n = labels.size(), dim = store_.config().dim;
    // Train first, all at once: the id of a point is its arrival number...
    for (std::size_t i = 0; i < n; ++i) store_.insert(first + i, features.subspan(i * dim, dim), labels[i]);
    // ...and points no query of this batch can see any more leave the store.
    if (window_ && first > window_) {
      for (; erased_below_ < first - window_; ++erased_below_) store_.erase(erased_below_);
    }
    store_.publish();
    // Then test, causally: query i sees ids [id - window, id), never itself or later points.
    visible_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const PointId id = first + i;
      visible_[i] = {window_ && id > window_ ? id - window_ : 0, id};
    }
    return model_.predict(features, visible_).labels;
  }

  std::string backend() const { return store_.backend_name(); }

 private:
  ReferenceSet store_;
  KnnClassifier model_;
  std::size_t window_;
  PointId erased_below_ = 0;
  std::vector<IdRange> visible_;
};

/// Correct predictions over the whole stream and since the last report.
struct Score {
  std::size_t correct = 0, scored = 0, recent_correct = 0, recent_scored = 0;
  void add(std::int32_t predicted, std::int32_t truth) {
    if (predicted == kNoLabel) return;  // the first point has nothing to learn from
    const bool hit = predicted == truth;
    correct += hit;
    recent_correct += hit;
    ++scored;
    ++recent_scored;
  }
  double recent() {
    const double a = recent_scored ? double(recent_correct) / double(recent_scored) : 0;
    recent_correct = recent_scored = 0;
    return a;
  }
  double total() const { return scored ? double(correct) / double(scored) : 0; }
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t points = 50000, window = 500, batch = 64, report_every = 5000, k = 5;
  CLI::App app{"Online classification of a drifting stream with a sliding window"};
  app.add_option("--points", points)->check(CLI::Range(1ul, 100000000ul));
  app.add_option("--window", window)->check(CLI::Range(1ul, 100000000ul));
  app.add_option("--batch", batch)->check(CLI::Range(1ul, 65536ul));
  app.add_option("--report-every", report_every)->check(CLI::Range(1ul, 100000000ul));
  app.add_option("--k", k)->check(CLI::Range(1ul, kMaxK));
  CLI11_PARSE(app, argc, argv);

  streams::RbfConfig stream_config;
  stream_config.points = points;
  stream_config.classes = 4;
  stream_config.speed = 0.001;
  streams::RbfDriftSource stream(stream_config);

  StoreConfig config;
  config.dim = stream.info().dim;
  config.target = TargetSpec::classes(static_cast<std::uint32_t>(stream.info().class_names.size()));
  // One batch pushes at most `batch` inserts and `batch` erases before its publish.
  config.queue_capacity = 2 * batch;
  StreamLearner windowed(config, k, window), everything(config, k, 0);
  Score windowed_score, everything_score;

  std::printf("%s\nk = %zu, batches of %zu, %s\n\n", stream.info().name.c_str(), k, batch, windowed.backend().c_str());
  std::printf("  points   window %-6zu keep all   (accuracy since the previous line)\n", window);
  streams::Chunk chunk;
  std::size_t seen = 0, next_report = report_every;
  // Batches stop at report lines, so each line covers exactly report_every points.
  while (stream.read(std::min(batch, next_report - seen), chunk) > 0) {
    const auto a = windowed.test_then_train(seen, chunk.features, chunk.labels);
    const auto b = everything.test_then_train(seen, chunk.features, chunk.labels);
    for (std::size_t i = 0; i < chunk.size; ++i) {
      windowed_score.add(a[i], chunk.labels[i]);
      everything_score.add(b[i], chunk.labels[i]);
    }
    seen += chunk.size;
    if (seen >= next_report || seen == points) {
      std::printf("%8zu   %12.3f %9.3f\n", seen, windowed_score.recent(), everything_score.recent());
      next_report += report_every;
    }
  }
  const std::string windowed_name = "sliding window of " + std::to_string(window) + " points:";
  std::printf("\n%s final accuracy %.4f\n", windowed_name.c_str(), windowed_score.total());
  std::printf("%-*s final accuracy %.4f\n", int(windowed_name.size()), "keeping every point:", everything_score.total());
  return 0;
}
