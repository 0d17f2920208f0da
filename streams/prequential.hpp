// streams/prequential.hpp — test-then-train evaluation of a k-NN model over a stream.
//
// Each arriving point is first predicted from the points that arrived before it (within the
// sliding window of the last `window` points; 0 keeps every point), then inserted. Points are
// processed `batch` at a time, causally: a point's arrival number is its id, the batch's
// inserts (and the erases of ids no query of the batch can see) are published first, and
// query i of the stream is restricted to ids [max(0, i - window), i) (IdRange). Each (query,
// point) distance is computed the same way whatever the batch, so every batch size gives the
// predictions of batch 1, only faster.
//
// A point with no visible neighbour (only the stream's first point) gets no prediction
// (kNoLabel / NaN in the outcome) and is not scored; PrequentialResult counts it in `points`
// but not in `scored`. Construction throws UsageError for options that cannot work together
// (k out of range, haversine on other than 2 features, distance weights with inner product);
// run() throws DataError naming the source's place for points the metric refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "streamknn/streamknn.hpp"
#include "streams/metrics.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

struct PrequentialOptions {
  std::size_t k = 5;
  Weights weights = Weights::Uniform;
  Metric metric = Metric::L2;
  std::size_t window = 1000;  ///< most recent points a prediction may use; 0 = all of them
  std::size_t batch = 64;     ///< points predicted together
  /// Predict from the k nearest within this distance only (metres for haversine; KnnClassifier::
  /// within): a point with none gets no prediction and is not scored. +infinity: no bound.
  double radius = std::numeric_limits<double>::infinity();
  /// Predict from the points that pass this predicate only (KnnClassifier::where) on their
  /// attribute words (SourceInfo::attribute_names); none: every point.
  std::optional<Predicate> where;
  BackendKind backend = BackendKind::Auto;
  std::size_t limit = 0;      ///< stop after this many points of this run (0 = the whole stream)
  /// Save the store to this checkpoint (docs/durability.md) at the start, every
  /// checkpoint_every points (0: never in between) and at the end; empty: never.
  std::string checkpoint;
  std::size_t checkpoint_every = 0;
  /// Start from this checkpoint (one `checkpoint` wrote for the same stream, metric and task):
  /// the stream's points up to the newest stored one are read and skipped, the rest evaluated.
  std::string resume;
};

/// One batch's predictions, handed to the observer as soon as they are made.
struct BatchOutcome {
  std::size_t first = 0;  ///< arrival number of the batch's first point
  std::size_t size = 0;
  std::span<const std::int32_t> truth_labels, predicted_labels;  ///< classification (kNoLabel: none)
  std::span<const float> truth_values, predicted_values;         ///< regression (NaN: none)
  double predict_seconds = 0;                                    ///< the predict call alone
};

struct LatencySummary {
  double p50 = 0, p99 = 0, mean = 0, max = 0;  ///< seconds per predict call (one batch)
};

struct PrequentialResult {
  std::size_t resumed_at = 0;  ///< points skipped because the resumed checkpoint held them
  std::size_t points = 0;   ///< points that arrived (in this run)
  std::size_t scored = 0;   ///< points that had a prediction and entered the scores
  std::size_t batches = 0;
  ClassificationMetrics classification;
  RegressionMetrics regression;
  LatencySummary latency;
  double seconds = 0;       ///< wall time of the whole loop (read, update, publish, predict, observe)
  double points_per_second() const noexcept { return seconds > 0 ? double(points) / seconds : 0; }
};

class Prequential {
 public:
  using Observer = std::function<void(const BatchOutcome&)>;

  /// Creates the reference set for the source's task and the options; the source must outlive
  /// this object.
  Prequential(Source& source, const PrequentialOptions& options);

  /// Runs the stream to its end (or the limit). Call once.
  PrequentialResult run(const Observer& observer = {});

  BackendKind backend() const noexcept { return store_.backend(); }
  std::string backend_name() const { return store_.backend_name(); }
  const PrequentialOptions& options() const noexcept { return options_; }

 private:
  void check_chunk(const Chunk& chunk, std::size_t first) const;
  void push(const Update& update);

  /// Reads and drops the points a resumed checkpoint holds already.
  void skip_resumed(Chunk& chunk);

  Source& source_;
  PrequentialOptions options_;
  ReferenceSet store_;
  std::size_t resumed_at_ = 0;   ///< arrival number of the first point this run evaluates
  PointId erased_below_ = 0;     ///< ids below it are erased (out of the window)
  std::optional<KnnClassifier> classifier_;
  std::optional<KnnRegressor> regressor_;
};

}  // namespace streamknn::streams
