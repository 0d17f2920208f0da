#include "streams/prequential.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <numeric>

#include "streams/errors.hpp"

namespace streamknn::streams {

namespace {

using Clock = std::chrono::steady_clock;

std::string shown(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return buf;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const PrequentialOptions& checked(const Source& source, const PrequentialOptions& options) {
  const SourceInfo& info = source.info();
  if (options.k < 1 || options.k > kMaxK) {
    throw UsageError("--k " + std::to_string(options.k) + " is outside [1, " + std::to_string(kMaxK) + "]");
  }
  if (options.batch < 1) throw UsageError("--batch 0: a batch holds at least one point");
  if (options.metric == Metric::Haversine && info.dim != 2) {
    throw UsageError("--metric haversine takes (latitude, longitude) pairs, but " + info.name + " has " +
                     std::to_string(info.dim) + " features");
  }
  if (info.task == Task::Classify && info.class_names.empty()) {
    throw UsageError(info.name + ": a classification stream needs at least one class");
  }
  return options;
}

StoreConfig store_config(const SourceInfo& info, const PrequentialOptions& options) {
  StoreConfig config;
  config.dim = info.dim;
  config.metric = options.metric;
  config.target = info.task == Task::Classify ? TargetSpec::classes(static_cast<std::uint32_t>(info.class_names.size()))
                                              : TargetSpec::outputs(1);
  // The store never holds more than the window plus one batch.
  config.capacity_hint = options.window ? options.window + options.batch : info.length.value_or(1024);
  // One batch pushes at most `batch` inserts and `batch` erases before its publish.
  config.queue_capacity = 2 * options.batch;
  config.backend = options.backend;
  config.attribute_words = info.attribute_names.size();
  return config;
}

ReferenceSet make_store(const Source& source, const PrequentialOptions& options) {
  const StoreConfig config = store_config(source.info(), options);
  try {
    if (options.resume.empty()) return ReferenceSet(config);
    LoadOptions load;
    load.backend = config.backend;
    load.capacity_hint = config.capacity_hint;
    load.queue_capacity = config.queue_capacity;
    ReferenceSet store = ReferenceSet::load(options.resume, load);
    const StoreConfig& saved = store.config();
    if (saved.attribute_words != config.attribute_words) {
      throw UsageError("--resume " + options.resume + ": the checkpoint's points carry " +
                       std::to_string(saved.attribute_words) + " attribute words; this run gives " +
                       std::to_string(config.attribute_words) + " (--attributes)");
    }
    if (saved.dim != config.dim || saved.metric != config.metric || !(saved.target == config.target)) {
      throw UsageError("--resume " + options.resume + ": the checkpoint holds a store of " + std::to_string(saved.dim) +
                       " features, metric " + std::string(to_string(saved.metric)) + ", " +
                       std::to_string(saved.target.count) + (saved.target.kind == TargetSpec::Kind::Classes ? " classes" : " outputs") +
                       "; this run needs " + std::to_string(config.dim) + ", " + std::string(to_string(config.metric)) +
                       ", " + std::to_string(config.target.count) +
                       (config.target.kind == TargetSpec::Kind::Classes ? " classes" : " outputs"));
    }
    return store;
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }
}

/// Whether the store holds an id in [lo, hi): one search of one neighbour restricted to them.
bool holds_id_in(const ReferenceSet& store, PointId lo, PointId hi) {
  std::vector<float> query(store.config().dim, 0.0f);
  query[0] = 1.0f;  // valid for every metric (cosine refuses the zero vector)
  const IdRange range{lo, hi};
  return store.search(query, 1, std::span(&range, 1)).ids[0] != kInvalidId;
}

/// The smallest x in [lo, hi) with holds(x) false, for a holds() true below some point and
/// false from it on (binary search: about 40 one-query searches for the ids of a stream).
template <class Holds>
PointId first_false(PointId lo, PointId hi, Holds&& holds) {
  while (lo < hi) {
    const PointId mid = lo + (hi - lo) / 2;
    if (holds(mid)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace

Prequential::Prequential(Source& source, const PrequentialOptions& options)
    : source_(source), options_(checked(source, options)), store_(make_store(source, options_)) {
  try {
    if (source.info().task == Task::Classify) {
      classifier_.emplace(KnnClassifier(store_, options_.k, options_.weights).within(options_.radius));
      if (options_.where) classifier_.emplace(classifier_->where(*options_.where));
    } else {
      regressor_.emplace(KnnRegressor(store_, options_.k,
                                      options_.weights == Weights::Uniform ? RegressionAggregate::Mean
                                                                           : RegressionAggregate::WeightedMean)
                             .within(options_.radius));
      if (options_.where) regressor_.emplace(regressor_->where(*options_.where));
    }
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }
  if (!options_.resume.empty() && store_.size() > 0) {
    // A run stores the points of the window by arrival number: ids [oldest, next) with none
    // missing. The checkpoint's ids say where to go on, whatever --batch the saving run had.
    constexpr PointId kTop = PointId(1) << 62;
    const PointId next = first_false(0, kTop, [&](PointId x) { return holds_id_in(store_, x, kTop); });
    const PointId oldest = first_false(0, next, [&](PointId x) { return !holds_id_in(store_, 0, x + 1); });
    if (next - oldest != store_.size()) {
      throw UsageError("--resume " + options_.resume + ": the checkpoint's ids are not the window of a run (" +
                       std::to_string(store_.size()) + " points with ids from " + std::to_string(oldest) + " to " +
                       std::to_string(next - 1) + ")");
    }
    resumed_at_ = static_cast<std::size_t>(next);
    erased_below_ = oldest;
  }
  if (!options_.checkpoint.empty()) store_.save(options_.checkpoint);  // refuses a bad path before the run
}

void Prequential::skip_resumed(Chunk& chunk) {
  for (std::size_t skipped = 0; skipped < resumed_at_;) {
    const std::size_t got = source_.read(std::min(options_.batch, resumed_at_ - skipped), chunk);
    if (got == 0) {
      throw UsageError("--resume " + options_.resume + ": the checkpoint holds the stream up to point " +
                       std::to_string(resumed_at_) + " but " + source_.info().name + " ends after " +
                       std::to_string(skipped) + " points");
    }
    skipped += got;
  }
}

void Prequential::check_chunk(const Chunk& chunk, std::size_t first) const {
  // The store would refuse these too, but only the source knows where in the file they are.
  const std::size_t dim = source_.info().dim;
  const float bound = max_coordinate(options_.metric, dim);
  for (std::size_t i = 0; i < chunk.size; ++i) {
    const float* row = chunk.features.data() + i * dim;
    bool all_zero = true;
    for (std::size_t c = 0; c < dim; ++c) {
      if (!std::isfinite(row[c])) {
        throw DataError(source_.where(first + i, c) + ": " + shown(row[c]) + " is not a finite number");
      }
      if (std::fabs(row[c]) > bound) {
        throw DataError(source_.where(first + i, c) + ": " + shown(row[c]) + " exceeds " + shown(bound) +
                        " in magnitude, the bound sqrt(FLT_MAX / (8 x dim)) of the " +
                        std::string(to_string(options_.metric)) + " metric at " + std::to_string(dim) +
                        " features (larger values could overflow its float32 distances)");
      }
      all_zero &= row[c] == 0.0f;
    }
    if (options_.metric == Metric::Haversine && std::fabs(row[0]) > 90.0f) {
      throw DataError(source_.where(first + i, 0) + ": latitude " + shown(row[0]) +
                      " is outside [-90, 90] degrees (haversine takes latitude, longitude)");
    }
    if (options_.metric == Metric::Haversine && std::fabs(row[1]) > 180.0f) {
      throw DataError(source_.where(first + i, 1) + ": longitude " + shown(row[1]) +
                      " is outside [-180, 180] degrees (haversine takes latitude, longitude)");
    }
    if (options_.metric == Metric::Cosine && all_zero) {
      throw DataError(source_.where(first + i) + ": the zero vector has no direction for the cosine metric");
    }
    if (!chunk.values.empty() && !std::isfinite(chunk.values[i])) {
      throw DataError(source_.where(first + i) + ": target " + shown(chunk.values[i]) + " is not finite");
    }
  }
}

void Prequential::push(const Update& update) {
  // The queue is sized for a whole batch; publishing early when it is full anyway keeps a
  // single pushing-and-publishing thread from ever waiting for itself.
  if (store_.try_push(update)) return;
  store_.publish();
  if (!store_.try_push(update)) throw Error("Prequential: the update queue stays full after a publish");
}

PrequentialResult Prequential::run(const Observer& observer) {
  const SourceInfo& info = source_.info();
  const bool classify = info.task == Task::Classify;
  const std::size_t dim = info.dim;
  const std::size_t window = options_.window;
  PrequentialResult result;
  result.classification = ClassificationMetrics(info.class_names.size());

  Chunk chunk;
  std::vector<IdRange> visible;
  std::vector<std::int32_t> predicted_labels;
  std::vector<float> predicted_values;
  std::vector<double> latencies;
  PointId erased_below = erased_below_;  // ids [0, erased_below) have been erased
  const auto start = Clock::now();
  skip_resumed(chunk);
  result.resumed_at = resumed_at_;
  while (true) {
    std::size_t want = options_.batch;
    if (options_.limit) want = std::min(want, options_.limit - result.points);
    if (want == 0 || source_.read(want, chunk) == 0) break;
    const std::size_t b0 = resumed_at_ + result.points;  // the batch's first arrival number
    const std::size_t n = chunk.size;
    check_chunk(chunk, b0);

    // Query b0 sees [b0 - window, b0): anything older can go before this batch's publish.
    if (window && b0 > window) {
      for (; erased_below < b0 - window; ++erased_below) push(Update::erase(erased_below));
    }
    const std::size_t words = info.attribute_names.size();
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> row(chunk.features.data() + i * dim, dim);
      const Update insert = classify ? Update::insert(b0 + i, row, chunk.labels[i])
                                     : Update::insert(b0 + i, row, std::span<const float>(&chunk.values[i], 1));
      push(words ? insert.with_attributes({chunk.attributes.data() + i * words, words}) : insert);
    }
    const PublishReport report = store_.publish();
    if (!report.rejected.empty()) {
      throw Error("Prequential: publish rejected " + std::to_string(report.rejected.size()) + " updates, first id " +
                  std::to_string(report.rejected.front().id) + " (" + to_string(report.rejected.front().reason) + ")");
    }

    visible.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const PointId id = b0 + i;
      visible[i] = {window && id > window ? id - window : 0, id};
    }
    const auto t0 = Clock::now();
    const std::span<const float> queries(chunk.features.data(), n * dim);
    if (classify) {
      predicted_labels = classifier_->predict(queries, visible).labels;
    } else {
      predicted_values = regressor_->predict(queries, visible).values;
    }
    const double predict_seconds = seconds_since(t0);
    latencies.push_back(predict_seconds);

    for (std::size_t i = 0; i < n; ++i) {
      if (classify && predicted_labels[i] != kNoLabel) {
        result.classification.add(chunk.labels[i], predicted_labels[i]);
        ++result.scored;
      } else if (!classify && !std::isnan(predicted_values[i])) {
        result.regression.add(chunk.values[i], predicted_values[i]);
        ++result.scored;
      }
    }
    result.points += n;
    ++result.batches;
    if (options_.checkpoint_every && (b0 + n) / options_.checkpoint_every > b0 / options_.checkpoint_every) {
      store_.save(options_.checkpoint);
    }
    if (observer) {
      BatchOutcome outcome;
      outcome.first = b0;
      outcome.size = n;
      if (classify) {
        outcome.truth_labels = chunk.labels;
        outcome.predicted_labels = predicted_labels;
      } else {
        outcome.truth_values = chunk.values;
        outcome.predicted_values = predicted_values;
      }
      outcome.predict_seconds = predict_seconds;
      observer(outcome);
    }
  }
  if (!options_.checkpoint.empty()) store_.save(options_.checkpoint);
  result.seconds = seconds_since(start);
  if (!latencies.empty()) {
    result.latency.mean = std::accumulate(latencies.begin(), latencies.end(), 0.0) / double(latencies.size());
    result.latency.p50 = percentile(latencies, 50);
    result.latency.p99 = percentile(latencies, 99);
    result.latency.max = latencies.back();  // percentile() sorted them
  }
  return result;
}

}  // namespace streamknn::streams
