// ReferenceSet::from_points: a store built from arrays in one step, the way a checkpoint is
// loaded (an image of slots 0..n-1 and its id index handed to the engine, both backend buffers
// written once), instead of n pushes through the update queue and a publish that copies the
// batch into the queue, the resolved batch, the back buffer and the copy kept for its replay.
#include <algorithm>
#include <bit>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/checkpoint_image.hpp"
#include "core/engine.hpp"
#include "core/id_index.hpp"
#include "core/metric_space.hpp"
#include "core/streaming_copy.hpp"
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

/// The insert push() would check for point i (T: float, or double for the vector64 form).
template <class T>
Update insert_of(const StoreConfig& config, PointId id, std::span<const T> vector, std::span<const std::int32_t> labels,
                 std::span<const float> values, std::size_t i) {
  switch (config.target.kind) {
    case TargetSpec::Kind::Classes: return Update::insert(id, vector, labels[i]);
    case TargetSpec::Kind::Outputs: return Update::insert(id, vector, values.subspan(i * config.target.count, config.target.count));
    case TargetSpec::Kind::None: break;
  }
  return Update::insert(id, vector);
}

/// Whether every |x| of xs is at most `bound` (and so finite), by the bits of the magnitudes
/// (sign cleared): on those bits the order of non-negative floats is the integers' order, and
/// +-Inf and NaN lie above every finite value, so one comparison per float tests finiteness and
/// the bound together. As int32 (the cleared sign keeps them non-negative) the comparisons are
/// OR-ed: that vectorises on the baseline x86-64 ISA with no loop-carried max, and reads the
/// floats at memory speed (a running max took twice as long).
bool all_within(std::span<const float> xs, float bound) {
  const std::int32_t limit = std::bit_cast<std::int32_t>(bound);
  std::int32_t any = 0;
  for (const float x : xs) any |= detail::beyond_bits(x, limit);
  return any == 0;
}

/// Whether every point passes push()'s checks by a test of the whole arrays, without early
/// exits: where the stored form is the vector itself (L2, inner product) those checks are
/// finiteness and the coordinate bound (metric_space.hpp: NaN, +-Inf and larger magnitudes all
/// fail |x| <= bound), given as vectors_within (all_within of the vectors), plus ids other than
/// kInvalidId, labels in range and finite values. False sends every point through the engine's own check,
/// which names the first bad one. `dense`: the ids are 0..n-1 (IdIndex::is_dense_prefix), none
/// of them kInvalidId.
bool all_pass(const StoreConfig& config, std::span<const PointId> ids, bool dense, bool vectors_within,
              std::span<const std::int32_t> labels, std::span<const float> values) {
  if (!detail::stored_as_given(config.metric)) return false;
  std::uint64_t low_id = std::numeric_limits<std::uint64_t>::max();  // of id + 1: kInvalidId wraps to 0
  if (!dense) {
    for (const PointId id : ids) low_id = std::min<std::uint64_t>(low_id, id + 1);
  }
  std::uint32_t top_label = 0;
  for (const std::int32_t label : labels) top_label = std::max(top_label, std::uint32_t(label));  // < 0 wraps high
  return vectors_within && all_within(values, std::numeric_limits<float>::max()) && (ids.empty() || low_id != 0) &&
         (labels.empty() || top_label < config.target.count);
}

/// The argument checks of from_points (sizes and limits), before any data is read.
void check_shapes(const StoreConfig& config, std::size_t n, std::size_t vector_floats, std::size_t label_count,
                  std::size_t value_count, std::size_t attribute_count, const char* caller) {
  const std::size_t dim = config.dim;
  const bool classes = config.target.kind == TargetSpec::Kind::Classes;
  const std::size_t outputs = config.target.value_count();
  if (vector_floats != n * dim) {
    detail::fail_argument(caller, ": ", n, " ids need ", n * dim, " vector floats (dim=", dim, "), got ", vector_floats);
  }
  if (label_count != (classes ? n : 0)) {
    detail::fail_argument(caller, ": ", label_count, " labels for ", n, " ids (a ",
                          classes ? "classification store takes one each)" : "store without classes takes none)");
  }
  if (value_count != n * outputs) {
    detail::fail_argument(caller, ": ", value_count, " target values for ", n, " ids and ", outputs, " outputs");
  }
  const std::size_t words = config.attribute_words;
  if (attribute_count != 0 && words == 0) {
    detail::fail_argument(caller, ": attributes has ", attribute_count,
                          " words but the store's points carry none (StoreConfig::attribute_words = 0)");
  }
  if (attribute_count != 0 && attribute_count != n * words) {
    detail::fail_argument(caller, ": attributes has ", attribute_count, " words; ", n, " ids need ", n * words,
                          " (attribute_words=", words, ") or none");
  }
  if (n > std::numeric_limits<std::uint32_t>::max() - 1) {
    detail::fail_argument(caller, ": ", n, " points exceed the limit of ", std::numeric_limits<std::uint32_t>::max() - 1);
  }
}

/// The image's vectors in stored form: `owned` itself where the stored form is the vector as
/// given (else the given rows are copied, minus the origin, or left for a row-by-row write),
/// and whether all the given vectors are within the coordinate bound where that decides their
/// checks (false where the rows are checked one by one).
template <class T>
bool stored_vectors(const StoreConfig& config, std::span<const T> vectors, std::vector<float>* owned,
                    std::vector<float>& out) {
  const std::size_t n = vectors.size() / std::max<std::size_t>(1, config.dim);
  const std::size_t sdim = detail::stored_dim(config.metric, config.dim), dim = config.dim;
  if (!detail::stored_as_given(config.metric)) {
    out.resize(n * sdim);  // written row by row once each row is checked
    return false;
  }
  if (!config.origin.empty()) {
    // Minus the origin in double, rounded once (StoreConfig::origin); checked row by row.
    out.resize(n * sdim);
    for (std::size_t i = 0; i < n * dim; ++i) out[i] = float(double(vectors[i]) - config.origin[i % dim]);
    return false;
  }
  if (owned != nullptr) {
    out = std::move(*owned);
    return all_within(out, detail::coordinate_bound(config.metric, config.dim));
  }
  out.assign(vectors.begin(), vectors.end());  // one copy, each double rounded once (a resize would zero it first)
  return all_within(out, detail::coordinate_bound(config.metric, config.dim));
}

/// Whether the load's vectors are copied into StoreImage::rows, which the CPU backend keeps as
/// its buffer (one copy of the caller's rows where vectors and then the backend's buffer took
/// two; vectors the caller hands over are copied too, tested in the same pass):
/// vectors stored as given, unpadded rows on the CPU backend (for another backend rows are
/// copied to `vectors` again, so they are used only where the CPU backend is the one made).
bool into_rows(const StoreConfig& config) {
  const bool cpu = config.backend == BackendKind::Cpu ||
                   (config.backend == BackendKind::Auto && !detail::cuda_device_usable(config.cuda_device));
  return cpu && detail::stored_as_given(config.metric) && config.origin.empty() &&
         detail::cpu_rows_unpadded(detail::stored_dim(config.metric, config.dim));
}

/// StoreImage::rows = vectors, with room for the CPU backend's spare slots (slot count rounded
/// up to 8), and whether every |x| is within the coordinate bound (all_within's test), in one
/// pass: each float is tested as it is copied (a copy and then a test of the copy read the
/// 12.8 MB of a 100,000 x 32 load twice), with streaming stores for large loads
/// (streaming_copy.hpp). Doubles are rounded once to float32 in the same pass, and the float is
/// what is tested (a double beyond float32's range becomes infinite and fails). `split`: the
/// upper half is copied on a second thread meanwhile (for loads whose index needs no thread).
template <class T>
bool copy_rows(const StoreConfig& config, std::span<const T> vectors, detail::StoreVector& rows, bool split) {
  const std::size_t n = vectors.size() / config.dim;
  rows.reserve((n + 7) / 8 * 8 * config.dim);
  rows.resize(vectors.size());  // uninitialised (StoreAllocator): every float is written next
  const std::int32_t limit = std::bit_cast<std::int32_t>(detail::coordinate_bound(config.metric, config.dim));
  const bool streaming = detail::streaming_pays(vectors.size());
  // The halves meet on a 64-byte boundary of the buffer (StoreAllocator's alignment).
  std::size_t half = split ? vectors.size() / 2 / 16 * 16 : 0;
  bool upper = true;
  std::thread other;
  if (half != 0) {
    try {
      other = std::thread([&] {
        upper = detail::copy_within(vectors.data() + half, rows.data() + half, vectors.size() - half, limit, streaming);
      });
    } catch (const std::system_error&) {
      half = 0;  // no thread to be had: this one copies everything
    }
  }
  const bool lower = detail::copy_within(vectors.data(), rows.data(), half != 0 ? half : vectors.size(), limit, streaming);
  if (other.joinable()) other.join();  // copy_within does not throw: the thread is always joined here
  return lower && upper;
}

/// Whether a load of `floats` vector floats takes a second thread (to build its id index, or
/// where the ids need none, to copy half its rows): large loads, where
/// StoreConfig::publish_threads allows more than one thread and there is a second hardware
/// thread (starting a thread costs tens of microseconds).
bool two_threads(const StoreConfig& config, std::size_t floats) {
  return floats >= (std::size_t(1) << 18) && config.publish_threads != 1 && std::thread::hardware_concurrency() > 1;
}

/// ids[i] -> slot i inserted into an index on a thread of its own, without throwing.
class IndexBuild {
 public:
  explicit IndexBuild(std::span<const PointId> ids) : thread_([this, ids] { run(ids); }) {}
  /// Waits; true with the index moved to `out` when every id was inserted (false: an id
  /// repeats; rethrows a failed allocation).
  bool finish(detail::IdIndex& out) {
    thread_.join();
    if (failed_) std::rethrow_exception(failed_);
    if (!complete_) return false;
    out = std::move(index_);
    return true;
  }

 private:
  void run(std::span<const PointId> ids) noexcept {
    try {
      index_.reserve(ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i + 16 < ids.size()) index_.prefetch(ids[i + 16]);  // random buckets: ask 16 ids ahead
        if (!index_.insert(ids[i], static_cast<std::uint32_t>(i))) return;
      }
      complete_ = true;
    } catch (...) {
      failed_ = std::current_exception();
    }
  }
  detail::IdIndex index_;
  bool complete_ = false;
  std::exception_ptr failed_;
  std::jthread thread_;  // last: started once the members it writes exist, joined before they go
};

/// A row as floats: itself, or a double row rounded once into `rounded` (dim floats).
std::span<const float> float_row(std::span<const float> row, std::vector<float>&) { return row; }
std::span<const float> float_row(std::span<const double> row, std::vector<float>& rounded) {
  std::copy(row.begin(), row.end(), rounded.begin());
  return rounded;
}

/// from_points with the vectors given (`vectors`, float or double) and, where the caller hands
/// them over, owned (`owned`, holding the same floats; taken instead of copied).
template <class T>
std::unique_ptr<detail::Engine> build(const StoreConfig& config, std::span<const PointId> ids,
                                      std::span<const T> vectors, std::vector<float>* owned,
                                      std::span<const std::int32_t> labels, std::span<const float> values,
                                      std::span<const std::uint32_t> attributes) {
  const char* caller = "ReferenceSet::from_points";
  const detail::Engine probe(probe_config(config));  // throws for a bad config, before any data is read
  const std::size_t n = ids.size(), dim = config.dim;
  check_shapes(config, n, vectors.size(), labels.size(), values.size(), attributes.size(), caller);
  const std::size_t sdim = detail::stored_dim(config.metric, dim);
  detail::StoreImage image;
  detail::IdIndex index;
  try {
    // Where the arrays as a whole can pass the checks, the index is built on a second thread
    // meanwhile (it waits on memory latency, the copy on bandwidth); the loop below then only
    // runs where a row or id fails, to name the first one.
    const bool as_given = detail::stored_as_given(config.metric);
    // Ids 0..n-1 (the scikit-learn estimators') need no table: slot = id (IdIndex::dense_prefix).
    const bool dense = detail::IdIndex::is_dense_prefix(ids);
    std::optional<IndexBuild> side;
    const bool second_thread = two_threads(config, vectors.size());  // asks the system for its thread count once
    if (!dense && as_given && config.origin.empty() && second_thread) side.emplace(ids);
    image.epoch = n > 0 ? 1 : 0;
    image.slot_count = static_cast<std::uint32_t>(n);
    image.ids.assign(ids.begin(), ids.end());
    // Where no thread builds the index, a second one copies half the rows.
    const bool within = into_rows(config) ? copy_rows(config, vectors, image.rows, !side && second_thread)
                                          : stored_vectors(config, vectors, owned, image.vectors);
    image.labels.assign(labels.begin(), labels.end());
    image.values.assign(values.begin(), values.end());
    image.attribute_words = config.attribute_words;
    image.attributes.assign(attributes.begin(), attributes.end());  // empty: every word 0
    const bool checked = config.origin.empty() && all_pass(config, ids, dense, within, labels, values);
    if (dense) index = detail::IdIndex::dense_prefix(n);
    const bool indexed = dense || (side && side->finish(index));
    if (indexed && checked) return std::make_unique<detail::Engine>(config, std::move(image), std::move(index));
    if (!dense) {  // the loop below builds the table (a dense index needs none)
      index = detail::IdIndex();
      index.reserve(n);
    }
    std::vector<float> rounded(std::is_same_v<T, float> ? 0 : dim);  // a double row as push() stores it
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const T> row = vectors.subspan(i * dim, dim);
      if (!checked) {
        try {
          probe.check(insert_of(config, ids[i], row, labels, values, i), caller);
        } catch (const InvalidArgument& e) {
          throw InvalidArgument(detail::concat(e.what(), " (row ", i, "; no store was made)"));
        }
      }
      if (!dense) {
        // Ids of many points land in random buckets: ask for the bucket 16 ids ahead.
        if (i + 16 < n) index.prefetch(ids[i + 16]);
        if (!index.insert(ids[i], static_cast<std::uint32_t>(i))) {
          detail::fail_argument(caller, ": ids[", i, "] = ", ids[i], " repeats an earlier id");
        }
      }
      if (!as_given) detail::to_stored_form(config.metric, float_row(row, rounded), image.vectors.data() + i * sdim);
    }
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(detail::concat(caller, ": host memory exhausted for ", n, " points of dim ", dim));
  }
  return std::make_unique<detail::Engine>(config, std::move(image), std::move(index));
}

}  // namespace

ReferenceSet ReferenceSet::from_points(const StoreConfig& config, std::span<const PointId> ids,
                                       std::span<const float> vectors, std::span<const std::int32_t> labels,
                                       std::span<const float> values, std::span<const std::uint32_t> attributes) {
  return ReferenceSet(build(config, ids, vectors, nullptr, labels, values, attributes));
}

ReferenceSet ReferenceSet::from_points(const StoreConfig& config, std::span<const PointId> ids,
                                       std::vector<float>&& vectors, std::span<const std::int32_t> labels,
                                       std::span<const float> values, std::span<const std::uint32_t> attributes) {
  // Taken over only where the stored form is the vector as given (L2, inner product, no
  // origin); the span keeps pointing at the same floats, then held by the image.
  return ReferenceSet(build(config, ids, std::span<const float>(vectors), &vectors, labels, values, attributes));
}

ReferenceSet ReferenceSet::from_points(const StoreConfig& config, std::span<const PointId> ids,
                                       std::span<const double> vectors, std::span<const std::int32_t> labels,
                                       std::span<const float> values, std::span<const std::uint32_t> attributes) {
  return ReferenceSet(build(config, ids, vectors, nullptr, labels, values, attributes));
}

}  // namespace streamknn
