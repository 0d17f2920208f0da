// ReferenceSet::from_points: a store built from arrays in one step, the way a checkpoint is
// loaded (an image of slots 0..n-1 and its id index handed to the engine, both backend buffers
// written once), instead of n pushes through the update queue and a publish that copies the
// batch into the queue, the resolved batch, the back buffer and the copy kept for its replay.
#include <algorithm>
#include <bit>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/check.hpp"
#include "core/checkpoint_image.hpp"
#include "core/engine.hpp"
#include "core/id_index.hpp"
#include "core/metric_space.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn {

namespace {

/// An engine that only checks: config's checks run at its construction, and Engine::check()
/// applies push()'s rules to each point. One CPU thread, a small store: nothing heavy is made.
StoreConfig probe_config(StoreConfig config) {
  config.backend = BackendKind::Cpu;
  config.cpu_threads = 1;
  config.publish_threads = 1;
  config.capacity_hint = 1;
  config.queue_capacity = 1;
  return config;
}

Update insert_of(const StoreConfig& config, PointId id, std::span<const float> vector, std::span<const std::int32_t> labels,
                 std::span<const float> values, std::size_t i) {
  switch (config.target.kind) {
    case TargetSpec::Kind::Classes: return Update::insert(id, vector, labels[i]);
    case TargetSpec::Kind::Outputs: return Update::insert(id, vector, values.subspan(i * config.target.count, config.target.count));
    case TargetSpec::Kind::None: break;
  }
  return Update::insert(id, vector);
}

/// Whether every point passes push()'s checks by a test of the whole arrays, without early
/// exits (the compiler vectorises it): where the stored form is the vector itself (L2, inner
/// product) those checks are finiteness and the coordinate bound (metric_space.hpp: NaN, +-Inf
/// and larger magnitudes all fail |x| <= bound), plus ids other than kInvalidId, labels in
/// range and finite values. False sends every point through the engine's own check, which
/// names the first bad one.
bool all_pass(const StoreConfig& config, std::span<const PointId> ids, std::span<const float> vectors,
              std::span<const std::int32_t> labels, std::span<const float> values) {
  if (!detail::stored_as_given(config.metric)) return false;
  // On the magnitude's bits (sign cleared) the order of non-negative floats is the integers'
  // order, and +-Inf and NaN lie above every finite value: one integer max per array.
  const auto largest_magnitude = [](std::span<const float> xs) {
    std::uint32_t worst = 0;
    for (const float x : xs) worst = std::max(worst, std::bit_cast<std::uint32_t>(x) & 0x7fffffffu);
    return worst;
  };
  const float bound = detail::coordinate_bound(config.metric, config.dim);
  const float inf = std::numeric_limits<float>::infinity();
  std::uint64_t low_id = std::numeric_limits<std::uint64_t>::max();  // of id + 1: kInvalidId wraps to 0
  for (const PointId id : ids) low_id = std::min<std::uint64_t>(low_id, id + 1);
  std::uint32_t top_label = 0;
  for (const std::int32_t label : labels) top_label = std::max(top_label, std::uint32_t(label));  // < 0 wraps high
  return largest_magnitude(vectors) <= std::bit_cast<std::uint32_t>(bound) &&
         largest_magnitude(values) < std::bit_cast<std::uint32_t>(inf) && (ids.empty() || low_id != 0) &&
         (labels.empty() || top_label < config.target.count);
}

}  // namespace

ReferenceSet ReferenceSet::from_points(const StoreConfig& config, std::span<const PointId> ids,
                                       std::span<const float> vectors, std::span<const std::int32_t> labels,
                                       std::span<const float> values, std::span<const std::uint32_t> attributes) {
  const char* caller = "ReferenceSet::from_points";
  const detail::Engine probe(probe_config(config));  // throws for a bad config, before any data is read
  const std::size_t n = ids.size(), dim = config.dim;
  const bool classes = config.target.kind == TargetSpec::Kind::Classes;
  const std::size_t outputs = config.target.kind == TargetSpec::Kind::Outputs ? config.target.count : 0;
  if (vectors.size() != n * dim) {
    detail::fail_argument(caller, ": ", n, " ids need ", n * dim, " vector floats (dim=", dim, "), got ", vectors.size());
  }
  if (labels.size() != (classes ? n : 0)) {
    detail::fail_argument(caller, ": ", labels.size(), " labels for ", n, " ids (a ",
                          classes ? "classification store takes one each)" : "store without classes takes none)");
  }
  if (values.size() != n * outputs) {
    detail::fail_argument(caller, ": ", values.size(), " target values for ", n, " ids and ", outputs, " outputs");
  }
  const std::size_t words = config.attribute_words;
  if (!attributes.empty() && words == 0) {
    detail::fail_argument(caller, ": attributes has ", attributes.size(),
                          " words but the store's points carry none (StoreConfig::attribute_words = 0)");
  }
  if (!attributes.empty() && attributes.size() != n * words) {
    detail::fail_argument(caller, ": attributes has ", attributes.size(), " words; ", n, " ids need ", n * words,
                          " (attribute_words=", words, ") or none");
  }
  if (n > std::numeric_limits<std::uint32_t>::max() - 1) {
    detail::fail_argument(caller, ": ", n, " points exceed the limit of ", std::numeric_limits<std::uint32_t>::max() - 1);
  }
  const std::size_t sdim = detail::stored_dim(config.metric, dim);
  detail::StoreImage image;
  detail::IdIndex index;
  try {
    image.epoch = n > 0 ? 1 : 0;
    image.slot_count = static_cast<std::uint32_t>(n);
    image.ids.assign(ids.begin(), ids.end());
    // Stored as given (L2, inner product): one copy, checked below; else written row by row.
    const bool as_given = detail::stored_as_given(config.metric);
    if (as_given && !config.origin.empty()) {
      // Minus the origin in double, rounded once (StoreConfig::origin); checked row by row below.
      image.vectors.resize(n * sdim);
      for (std::size_t i = 0; i < n * dim; ++i) image.vectors[i] = float(double(vectors[i]) - config.origin[i % dim]);
    } else if (as_given) {
      image.vectors.assign(vectors.begin(), vectors.end());
    } else {
      image.vectors.resize(n * sdim);
    }
    image.labels.assign(labels.begin(), labels.end());
    image.values.assign(values.begin(), values.end());
    image.attribute_words = words;
    image.attributes.assign(attributes.begin(), attributes.end());  // empty: every word 0
    index.reserve(n);
    const bool checked = config.origin.empty() && all_pass(config, ids, vectors, labels, values);
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> row = vectors.subspan(i * dim, dim);
      if (!checked) {
        try {
          probe.check(insert_of(config, ids[i], row, labels, values, i), caller);
        } catch (const InvalidArgument& e) {
          throw InvalidArgument(detail::concat(e.what(), " (row ", i, "; no store was made)"));
        }
      }
      // Ids of many points land in random buckets: ask for the bucket 16 ids ahead.
      if (i + 16 < n) index.prefetch(ids[i + 16]);
      if (!index.insert(ids[i], static_cast<std::uint32_t>(i))) {
        detail::fail_argument(caller, ": ids[", i, "] = ", ids[i], " repeats an earlier id");
      }
      if (!as_given) detail::to_stored_form(config.metric, row, image.vectors.data() + i * sdim);
    }
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(detail::concat(caller, ": host memory exhausted for ", n, " points of dim ", dim));
  }
  return ReferenceSet(std::make_unique<detail::Engine>(config, std::move(image), std::move(index)));
}

}  // namespace streamknn
