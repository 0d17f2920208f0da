#include "core/engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

#include "core/check.hpp"
#include "core/checkpoint_journal.hpp"
#include "core/metric_space.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail {

namespace {

std::unique_ptr<Backend> make_backend(const StoreConfig& config) {
  switch (config.backend) {
    case BackendKind::Cpu: return make_cpu_backend(config);
    case BackendKind::Cuda: return make_cuda_backend(config);
    case BackendKind::Auto:
      return cuda_device_usable(config.cuda_device) ? make_cuda_backend(config) : make_cpu_backend(config);
  }
  fail_enum("ReferenceSet(StoreConfig)", "StoreConfig::backend", config.backend, "BackendKind", "Auto, Cpu, Cuda");
}

/// The enum fields of a StoreConfig: a value that names no enumerator (a cast, a stale binary
/// layout) would otherwise be read as one of them, or as none (a metric of 7 ranked every
/// point at 0), so each is refused by name, value and the valid choices.
void check_enums(const StoreConfig& config, const char* where) {
  switch (config.metric) {
    case Metric::L2: case Metric::InnerProduct: case Metric::Cosine: case Metric::Haversine: break;
    default: fail_enum(where, "StoreConfig::metric", config.metric, "Metric", "L2, InnerProduct, Cosine, Haversine");
  }
  switch (config.target.kind) {
    case TargetSpec::Kind::None: case TargetSpec::Kind::Classes: case TargetSpec::Kind::Outputs: break;
    default: fail_enum(where, "StoreConfig::target.kind", config.target.kind, "TargetSpec::Kind", "None, Classes, Outputs");
  }
  switch (config.backend) {
    case BackendKind::Auto: case BackendKind::Cpu: case BackendKind::Cuda: break;
    default: fail_enum(where, "StoreConfig::backend", config.backend, "BackendKind", "Auto, Cpu, Cuda");
  }
  switch (config.spatial_index) {
    case SpatialIndex::Auto: case SpatialIndex::Always: case SpatialIndex::Off: break;
    default: fail_enum(where, "StoreConfig::spatial_index", config.spatial_index, "SpatialIndex", "Auto, Always, Off");
  }
  switch (config.reduced_screen) {
    case ReducedScreen::Auto: case ReducedScreen::Always: case ReducedScreen::Off: break;
    default: fail_enum(where, "StoreConfig::reduced_screen", config.reduced_screen, "ReducedScreen", "Auto, Always, Off");
  }
  switch (config.reduced_format) {
    case ReducedFormat::Float16: case ReducedFormat::Int8: break;
    default: fail_enum(where, "StoreConfig::reduced_format", config.reduced_format, "ReducedFormat", "Float16, Int8");
  }
}

const StoreConfig& validated(const StoreConfig& config) {
  const char* where = "ReferenceSet(StoreConfig)";
  check_enums(config, where);
  if (config.dim == 0) fail_argument(where, ": dim must be at least 1");
  if (config.dim > (1u << 20)) fail_argument(where, ": dim=", config.dim, " exceeds the limit of 1048576");
  if (config.metric == Metric::Haversine && config.dim != 2) {
    fail_argument(where, ": the haversine metric takes (latitude, longitude) pairs, so dim must be 2, not ",
                  config.dim);
  }
  switch (config.target.kind) {
    case TargetSpec::Kind::None: break;
    case TargetSpec::Kind::Classes:
      if (config.target.count < 1) fail_argument(where, ": target classes(n) needs n >= 1, got ", config.target.count);
      if (config.target.count > (1u << 16)) {
        fail_argument(where, ": target classes(", config.target.count, ") exceeds the limit of 65536 classes");
      }
      break;
    case TargetSpec::Kind::Outputs:
      if (config.target.count < 1) fail_argument(where, ": target outputs(n) needs n >= 1, got ", config.target.count);
      if (config.target.count > 4096) {
        fail_argument(where, ": target outputs(", config.target.count, ") exceeds the limit of 4096 outputs");
      }
      break;
  }
  if (config.capacity_hint > std::numeric_limits<std::uint32_t>::max()) {
    fail_argument(where, ": capacity_hint=", config.capacity_hint, " exceeds the limit of ",
                  std::numeric_limits<std::uint32_t>::max(), " points");
  }
  if (config.cpu_threads > kMaxCpuThreads) {
    fail_argument(where, ": cpu_threads=", config.cpu_threads, " exceeds the limit of ", kMaxCpuThreads);
  }
  if (config.publish_threads > kMaxCpuThreads) {
    fail_argument(where, ": publish_threads=", config.publish_threads, " exceeds the limit of ", kMaxCpuThreads);
  }
  if (config.attribute_words > kMaxAttributeWords) {
    fail_argument(where, ": attribute_words=", config.attribute_words, " exceeds the limit of ", kMaxAttributeWords);
  }
  if (config.queue_capacity < 1) fail_argument(where, ": queue_capacity must be at least 1");
  if (config.queue_capacity > (1u << 24)) {
    fail_argument(where, ": queue_capacity=", config.queue_capacity, " exceeds the limit of 16777216");
  }
  if (!config.origin.empty()) {
    if (config.metric != Metric::L2) {
      fail_argument(where, ": origin is for the l2 metric (a shift changes ", to_string(config.metric),
                    " distances); leave it empty");
    }
    if (config.origin.size() != config.dim) {
      fail_argument(where, ": origin has ", config.origin.size(), " values but dim=", config.dim, " (or leave it empty)");
    }
    for (std::size_t i = 0; i < config.origin.size(); ++i) {
      if (!std::isfinite(config.origin[i])) fail_argument(where, ": origin[", i, "] = ", config.origin[i], " is not finite");
    }
  }
  return config;
}

std::size_t value_floats(const StoreConfig& config) {
  return config.target.value_count();
}

}  // namespace

Engine::Engine(const StoreConfig& config)
    : config_(validated(config)),
      stored_dim_(stored_dim(config.metric, config.dim)),
      coordinate_bound_(coordinate_bound(config.metric, config.dim)),
      backend_(make_backend(config_)),
      queue_(config_.queue_capacity, stored_dim_, value_floats(config_), config_.metric, config_.origin,
             config_.attribute_words),
      catalog_(config_) {
  backend_->reserve(config_.capacity_hint, 0);
}

Engine::Engine(const StoreConfig& config, StoreImage&& image, IdIndex&& index) : Engine(config) {
  const bool every_live = image.every_slot_live();  // one pass over the ids, for the catalogue and the batch
  catalog_.restore(image.ids, std::move(index), every_live);
  image.attribute_words = config_.attribute_words;
  attributes_ = image.attributes;
  attributes_.resize(std::size_t(image.slot_count) * config_.attribute_words, 0u);
  if (image.epoch == 0 && image.slot_count == 0) return;
  const std::size_t live = catalog_.size();
  const std::uint64_t epoch = image.epoch;
  ResolvedBatch everything = image.take_batch(stored_dim_, config_.target.kind == TargetSpec::Kind::Classes,
                                              value_floats(config_), every_live);
  backend_->restore(std::move(everything), epoch);
  epoch_.store(epoch, std::memory_order_release);
  size_.store(live, std::memory_order_release);
}

Engine::~Engine() = default;

void Engine::check_k(std::size_t k, const char* caller) {
  if (k < 1) fail_argument(caller, ": k=", k, " must be at least 1");
  if (k > kMaxK) fail_argument(caller, ": k=", k, " exceeds the maximum of ", kMaxK);
}

void Engine::validate_point(const StoreConfig& config_, std::span<const float> vector, const char* what,
                            const char* caller) {
  if (vector.size() != config_.dim) {
    fail_argument(caller, ": ", what, " has ", vector.size(), " floats but the store's dim is ", config_.dim);
  }
  if (const std::size_t bad = first_non_finite(vector); bad != vector.size()) {
    fail_argument(caller, ": ", what, "[", bad, "] is ", describe_non_finite(vector[bad]));
  }
  const float bound = coordinate_bound(config_.metric, config_.dim);
  if (const std::size_t bad = first_beyond(vector, bound); bad != vector.size()) {
    fail_argument(caller, ": ", what, "[", bad, "] = ", vector[bad], " exceeds the bound ", bound,
                  " = sqrt(FLT_MAX / (8 x dim)) on coordinate magnitudes for the ", to_string(config_.metric),
                  " metric at dim=", config_.dim, " (larger ones could overflow its float32 distances)");
  }
  if (config_.metric == Metric::Cosine) {
    bool all_zero = true;
    for (float v : vector) all_zero &= v == 0.0f;
    if (all_zero) fail_argument(caller, ": ", what, " is the zero vector, which has no direction for the cosine metric");
  }
  if (config_.metric == Metric::Haversine && std::fabs(vector[0]) > 90.0f) {
    fail_argument(caller, ": ", what, " latitude ", vector[0], " is outside [-90, 90] degrees");
  }
  if (config_.metric == Metric::Haversine && std::fabs(vector[1]) > 180.0f) {
    fail_argument(caller, ": ", what, " longitude ", vector[1], " is outside [-180, 180] degrees");
  }
}

bool Engine::point_is_valid(std::span<const float> vector) const noexcept {
  if (vector.size() != config_.dim || first_beyond(vector, coordinate_bound_) != vector.size()) return false;
  if (config_.metric == Metric::Cosine && std::all_of(vector.begin(), vector.end(), [](float v) { return v == 0.0f; })) {
    return false;
  }
  return !(config_.metric == Metric::Haversine && (std::fabs(vector[0]) > 90.0f || std::fabs(vector[1]) > 180.0f));
}

void Engine::stored_row(std::span<const float> rows, std::size_t q, const char* label, const char* caller,
                        float* out) const {
  const auto row = rows.subspan(q * config_.dim, config_.dim);
  if (!point_is_valid(row)) validate_point(row, concat(label, " ", q).c_str(), caller);  // throws
  to_stored_form(config_.metric, row, out);
}

std::vector<float> Engine::stored_rows(std::span<const float> rows, const char* label, const char* caller) const {
  // L2 and inner product store a row as given, and a row within the bound is valid: the whole batch is
  // then one check and one copy. Row by row into a zero-filled buffer it took 49 us for 64
  // queries of 784 dims on the GPU host, before the search could start (8% of the search).
  if (stored_as_given(config_.metric) && first_beyond(rows, coordinate_bound_) == rows.size()) {
    return std::vector<float>(rows.begin(), rows.end());
  }
  const std::size_t n = rows.size() / config_.dim;
  std::vector<float> out(n * stored_dim_);
  for (std::size_t q = 0; q < n; ++q) stored_row(rows, q, label, caller, out.data() + q * stored_dim_);
  return out;
}

// The checks of validate() without building any message: push() runs it for every update, and
// formatting the context (caller, kind, id) cost more than the rest of a push. At least as
// strict as validate(): when it says no, validate() runs and throws the named error.
bool Engine::update_is_valid(const Update& u) const noexcept {
  if (u.id == kInvalidId || static_cast<unsigned>(u.kind) > static_cast<unsigned>(UpdateKind::SetAttributes)) {
    return false;
  }
  if (!attributes_valid(u)) return false;
  const bool needs_vector = u.kind == UpdateKind::Insert || u.kind == UpdateKind::Move;
  const bool shifted = !u.vector64.empty() || !config_.origin.empty();
  if (needs_vector ? !(shifted ? shifted_is_valid(u) : point_is_valid(u.vector)) : !(u.vector.empty() && u.vector64.empty())) {
    return false;
  }
  const bool needs_target = u.kind == UpdateKind::SetTarget ||
                            (u.kind == UpdateKind::Insert && config_.target.kind != TargetSpec::Kind::None);
  if (!needs_target) return !u.has_target;
  switch (config_.target.kind) {
    case TargetSpec::Kind::None: return false;
    case TargetSpec::Kind::Classes:
      return u.has_target && u.values.empty() && u.label >= 0 && std::uint32_t(u.label) < config_.target.count;
    case TargetSpec::Kind::Outputs:
      return u.has_target && u.values.size() == config_.target.count && first_non_finite(u.values) == u.values.size();
  }
  return false;
}

void Engine::validate(const Update& u, const char* caller) const {
  if (update_is_valid(u)) return;
  if (static_cast<unsigned>(u.kind) > static_cast<unsigned>(UpdateKind::SetAttributes)) {
    // Refused here: the publish would otherwise drain it and apply nothing, silently.
    fail_enum(concat(caller, "(id=", u.id, ")"), "Update::kind", u.kind, "UpdateKind",
              "Insert, Move, Erase, SetTarget, SetAttributes");
  }
  const char* kind = to_string(u.kind);
  if (u.id == kInvalidId) {
    fail_argument(caller, "(", kind, "): id ", u.id, " is reserved (kInvalidId marks padding)");
  }
  const std::string where = concat(caller, "(", kind, " id=", u.id, ")");
  validate_attributes(u, where);
  const bool needs_vector = u.kind == UpdateKind::Insert || u.kind == UpdateKind::Move;
  if (needs_vector && !u.vector.empty() && !u.vector64.empty()) {
    fail_argument(where, ": give the vector as floats or as doubles (vector64), not both");
  }
  if (needs_vector && (!u.vector64.empty() || !config_.origin.empty())) {
    const std::size_t given = u.vector64.empty() ? u.vector.size() : u.vector64.size();
    if (given != config_.dim) fail_argument(where, ": vector has ", given, " values but the store's dim is ", config_.dim);
    const std::vector<float> v = u.vector64.empty() ? shifted_rows(u.vector, "vector", where.c_str())
                                                    : shifted_rows(u.vector64, "vector", where.c_str());
    validate_point(v, config_.origin.empty() ? "vector" : "vector (minus the origin)", where.c_str());
  } else if (needs_vector) {
    validate_point(u.vector, "vector", where.c_str());
  } else if (!u.vector.empty() || !u.vector64.empty()) {
    fail_argument(where, ": a ", kind, " carries no vector");
  }
  const bool needs_target = u.kind == UpdateKind::SetTarget ||
                            (u.kind == UpdateKind::Insert && config_.target.kind != TargetSpec::Kind::None);
  if (!needs_target) {
    if (u.has_target) {
      fail_argument(where, config_.target.kind == TargetSpec::Kind::None ? ": the store's points carry no target"
                                                                          : ": only insert and set_target carry a target");
    }
    return;
  }
  switch (config_.target.kind) {
    case TargetSpec::Kind::None: fail_argument(where, ": the store's points carry no target");
    case TargetSpec::Kind::Classes:
      if (!u.has_target || !u.values.empty()) fail_argument(where, ": the store expects a class label");
      if (u.label < 0 || std::uint32_t(u.label) >= config_.target.count) {
        fail_argument(where, ": label ", u.label, " is outside [0, ", config_.target.count, ")");
      }
      break;
    case TargetSpec::Kind::Outputs:
      if (!u.has_target || u.values.size() != config_.target.count) {
        fail_argument(where, ": the store expects ", config_.target.count, " target values, got ",
                      u.has_target ? u.values.size() : 0);
      }
      if (const std::size_t bad = first_non_finite(u.values); bad != u.values.size()) {
        fail_argument(where, ": target value[", bad, "] is ", describe_non_finite(u.values[bad]));
      }
      break;
  }
}

bool Engine::try_push(const Update& update) {
  validate(update, "ReferenceSet::try_push");
  return queue_.try_push(update);
}

void Engine::push(const Update& update) {
  validate(update, "ReferenceSet::push");
  queue_.push(update);
}

void Engine::validate_batch(std::span<const Update> updates, const char* caller) const {
  for (std::size_t i = 0; i < updates.size(); ++i) {
    if (update_is_valid(updates[i])) continue;
    const std::string where = concat(caller, ": updates[", i, "]");
    validate(updates[i], where.c_str());
  }
}

std::size_t Engine::try_push(std::span<const Update> updates) {
  validate_batch(updates, "ReferenceSet::try_push");
  std::size_t queued = 0;
  while (queued < updates.size()) {
    const std::size_t run = queue_.try_push(updates.subspan(queued));
    if (run == 0) break;  // full
    queued += run;
  }
  return queued;
}

void Engine::push(std::span<const Update> updates) {
  validate_batch(updates, "ReferenceSet::push");
  queue_.push(updates);
}

std::size_t Engine::pending() const noexcept { return queue_.queued() + carried_.load(std::memory_order_relaxed); }

PublishReport Engine::publish() {
  std::lock_guard lock(publish_mutex_);
  // Everything pushed before this call is among the first `capacity` records in the queue,
  // so draining at most that many both includes it and cannot livelock behind fast producers.
  queue_.drain(queue_.capacity(), drained_);
  PublishReport report;
  report.epoch = epoch();
  report.size = size();
  if (drained_.empty()) return report;

  // Everything this publish may allocate is reserved first; past this block nothing can
  // fail, so an OutOfMemory leaves the published state as it was and the updates pending.
  const Catalog::BatchShape shape = catalog_.shape_of(drained_);  // one pass over the batch
  const std::size_t slots = shape.slots;
  try {
    catalog_.reserve_for(shape);
    batch_.reserve(drained_.size(), stored_dim_, value_floats(config_), config_.attribute_words);
    report.rejected.reserve(drained_.size());
    backend_->reserve(slots, drained_.size());
  } catch (const std::bad_alloc&) {
    carried_.store(drained_.size(), std::memory_order_relaxed);
    throw OutOfMemory(concat("ReferenceSet::publish: host memory exhausted while growing to ", slots, " slots; ",
                             drained_.size(), " updates stay pending"));
  } catch (const Error&) {
    carried_.store(drained_.size(), std::memory_order_relaxed);
    throw;
  }

  catalog_.resolve(drained_, shape, queue_, batch_, report);
  queue_.release(drained_);
  drained_.clear();
  carried_.store(0, std::memory_order_relaxed);

  const bool changed = report.applied > 0;
  const std::uint64_t next = changed ? epoch() + 1 : epoch();
  if (changed) {
    backend_->apply(batch_, next);
    note_attributes(batch_);
  }
  epoch_.store(next, std::memory_order_release);
  size_.store(catalog_.size(), std::memory_order_release);
  report.epoch = next;
  if (changed && journal_) journal_batch(next, batch_);
  return report;
}

void Engine::reserve(std::size_t inserts, std::size_t ops) {
  std::lock_guard lock(publish_mutex_);
  const Catalog::BatchShape shape{ops, std::size_t(catalog_.slot_count()) + inserts, false};
  try {
    catalog_.reserve_for(shape);
    batch_.reserve(ops, stored_dim_, value_floats(config_), config_.attribute_words);
    backend_->reserve(shape.slots, ops);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(concat("ReferenceSet::reserve: host memory exhausted while growing to ", shape.slots, " slots"));
  }
}

bool Engine::points_of(std::span<const PointId> ids, std::vector<std::int32_t>& labels, std::vector<float>& values,
                       std::vector<float>* vectors) {
  const std::size_t outputs = value_floats(config_);
  const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
  labels.assign(classes ? ids.size() : 0, kNoLabel);
  values.assign(ids.size() * outputs, std::numeric_limits<float>::quiet_NaN());
  std::vector<std::uint32_t> slots;
  std::vector<std::size_t> found;
  slots.reserve(ids.size());
  found.reserve(ids.size());
  std::lock_guard lock(publish_mutex_);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == kInvalidId) continue;  // padding (the id index's empty marker)
    if (const auto slot = catalog_.slot_of(ids[i])) {
      slots.push_back(*slot);
      found.push_back(i);
    }
  }
  if (classes || outputs > 0) {
    ResolvedBatch read;
    backend_->read_targets(slots, read);
    for (std::size_t j = 0; j < found.size(); ++j) {
      if (classes) labels[found[j]] = read.labels[j];
      std::copy_n(read.values.data() + j * outputs, outputs, values.data() + found[j] * outputs);
    }
  }
  if (!vectors) return true;
  if (found.size() == ids.size()) return backend_->read_vectors(slots, *vectors);  // no gaps: read in place
  vectors->assign(ids.size() * stored_dim_, 0.0f);
  std::vector<float> rows;
  if (!backend_->read_vectors(slots, rows)) return false;
  for (std::size_t j = 0; j < found.size(); ++j) {
    std::copy_n(rows.data() + j * stored_dim_, stored_dim_, vectors->data() + found[j] * stored_dim_);
  }
  return true;
}

template <class T>
std::vector<float> Engine::shifted_rows(std::span<const T> rows, const char* label, const char* caller) const {
  if (rows.size() % config_.dim != 0) {
    fail_argument(caller, ": the ", label, " rows hold ", rows.size(), " values, not a multiple of dim=", config_.dim);
  }
  std::vector<float> out(rows.size());
  const std::vector<double>& o = config_.origin;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out[i] = o.empty() ? static_cast<float>(rows[i]) : static_cast<float>(double(rows[i]) - o[i % config_.dim]);
  }
  return out;
}

// query() and lookup_and_update() (engine_query.cpp) shift rows of floats and of doubles.
template std::vector<float> Engine::shifted_rows(std::span<const float>, const char*, const char*) const;
template std::vector<float> Engine::shifted_rows(std::span<const double>, const char*, const char*) const;

bool Engine::shifted_is_valid(const Update& u) const noexcept {
  const bool wide = !u.vector64.empty();
  if (wide && !u.vector.empty()) return false;
  const std::size_t n = wide ? u.vector64.size() : u.vector.size();
  if (n != config_.dim) return false;
  const std::vector<double>& o = config_.origin;
  bool all_zero = true;
  float first = 0, second = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = wide ? u.vector64[i] : double(u.vector[i]);
    const float f = static_cast<float>(o.empty() ? x : x - o[i]);
    if (!(std::fabs(f) <= coordinate_bound_)) return false;  // also NaN and +-inf
    all_zero &= f == 0.0f;
    if (i == 0) first = f;
    if (i == 1) second = f;
  }
  if (config_.metric == Metric::Cosine && all_zero) return false;
  return !(config_.metric == Metric::Haversine && (std::fabs(first) > 90.0f || std::fabs(second) > 180.0f));
}

}  // namespace streamknn::detail
