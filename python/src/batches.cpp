// The arrays of a ReferenceSet's writes (batches.hpp): update batches converted, checked row by
// row before any is queued and pushed under an on_full policy; from_points' point arrays converted
// and checked.
#include "batches.hpp"

#include <algorithm>
#include <cmath>

namespace streamknn::python {

// ---- update batches -----------------------------------------------------------------------------

Batch make_batch(const Store& store, UpdateKind kind, py::handle ids, py::handle vectors, py::handle targets,
                 const char* call) {
  const StoreConfig& config = store.set().config();
  Batch b;
  b.kind = kind;
  b.ids = as_ids(ids, 1, 1, call, "ids");
  const std::size_t n = b.ids.rows;
  if (kind == UpdateKind::Insert || kind == UpdateKind::Move) {
    b.vectors = as_float_rows(vectors, config.dim, false, call, "vectors");
    if (b.vectors->rows != n) fail_argument(call, ": ", n, " ids but ", b.vectors->rows, " vectors");
  }
  const bool wants_target = kind == UpdateKind::SetTarget ||
                            (kind == UpdateKind::Insert && config.target.kind != TargetSpec::Kind::None);
  if (!wants_target) {
    if (!targets.is_none()) {
      fail_argument(call, config.target.kind == TargetSpec::Kind::None ? ": the store's points carry no target"
                                                                        : ": only insert and set_target take targets");
    }
    return b;
  }
  if (targets.is_none()) {
    fail_argument(call, ": targets are required (the store holds ",
                  config.target.kind == TargetSpec::Kind::Classes ? "class labels" : "float outputs", ")");
  }
  switch (config.target.kind) {
    case TargetSpec::Kind::None: fail_argument(call, ": the store's points carry no target");
    case TargetSpec::Kind::Classes:
      b.labels = as_labels(targets, call);
      if (b.labels->rows != n) fail_argument(call, ": ", n, " ids but ", b.labels->rows, " labels");
      break;
    case TargetSpec::Kind::Outputs:
      b.values = as_float_rows(targets, config.target.count, config.target.count == 1, call, "targets");
      if (b.values->rows != n) fail_argument(call, ": ", n, " ids but ", b.values->rows, " target rows");
      break;
  }
  return b;
}

namespace {

const char* non_finite(float v) { return std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf"); }

/// The vectors of check_batch, row by row: finite, within the metric's bound on coordinate
/// magnitudes, not zero for cosine, latitude and longitude in range for haversine.
void check_vectors(const FloatRows& vectors, std::size_t n, const StoreConfig& config, const char* call) {
  const std::size_t d = vectors.cols;
  const float bound = max_coordinate(config.metric, config.dim);
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = vectors.data + i * d;
    // Fast pass without early exits (the compiler vectorises it): NaN, +-Inf and magnitudes
    // beyond the bound all fail `|x| <= bound`. Only a row that fails it, or a cosine row that
    // may be zero, or a haversine row, takes the element-by-element pass below for its message.
    bool outside = false;
    bool nonzero = false;
    for (std::size_t j = 0; j < d; ++j) {
      outside |= !(std::fabs(row[j]) <= bound);
      nonzero |= row[j] != 0.0f;
    }
    if (!outside && (nonzero || config.metric != Metric::Cosine) && config.metric != Metric::Haversine) continue;
    bool all_zero = true;
    for (std::size_t j = 0; j < d; ++j) {
      if (!std::isfinite(row[j])) fail_argument(call, ": vectors[", i, ", ", j, "] is ", non_finite(row[j]));
      if (std::fabs(row[j]) > bound) {
        fail_argument(call, ": vectors[", i, ", ", j, "] = ", row[j], " exceeds the bound ", bound,
                      " = sqrt(FLT_MAX / (8 x dim)) on coordinate magnitudes for the ", to_string(config.metric),
                      " metric at dim=", config.dim, " (larger ones could overflow its float32 distances)");
      }
      all_zero &= row[j] == 0.0f;
    }
    if (config.metric == Metric::Cosine && all_zero) {
      fail_argument(call, ": vectors[", i, "] is the zero vector, which has no direction for the cosine metric");
    }
    if (config.metric == Metric::Haversine && std::fabs(row[0]) > 90.0f) {
      fail_argument(call, ": vectors[", i, "] latitude ", row[0], " is outside [-90, 90] degrees");
    }
    if (config.metric == Metric::Haversine && std::fabs(row[1]) > 180.0f) {
      fail_argument(call, ": vectors[", i, "] longitude ", row[1], " is outside [-180, 180] degrees");
    }
  }
}

/// Checks every row before any is queued, so a malformed batch queues nothing.
// TODO(core): replace with ReferenceSet::validate(const Update&) once the library offers it
// (see docs/python.md, "C++ API the bindings need"); these mirror Engine::validate's rules.
void check_batch(const Batch& b, const StoreConfig& config, const char* call) {
  const std::size_t n = b.ids.rows;
  for (std::size_t i = 0; i < n; ++i) {
    if (b.ids.data[i] == kInvalidId) fail_argument(call, ": ids[", i, "] = ", kInvalidId, " is reserved (invalid_id)");
  }
  if (b.vectors) check_vectors(*b.vectors, n, config, call);
  if (b.labels) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t label = b.labels->data[i];
      if (label < 0 || label >= static_cast<std::int64_t>(config.target.count)) {
        fail_argument(call, ": labels[", i, "] = ", label, " is outside [0, ", config.target.count, ")");
      }
    }
  }
  if (b.values) {
    const std::size_t t = b.values->cols;
    for (std::size_t i = 0; i < n * t; ++i) {
      if (!std::isfinite(b.values->data[i])) {
        fail_argument(call, ": targets[", i / t, ", ", i % t, "] is ", non_finite(b.values->data[i]));
      }
    }
  }
}

}  // namespace

std::size_t push_batch(Store& store, const Batch& b, const std::string& on_full_name, const char* call) {
  constexpr std::size_t kPushSpan = 1024;
  const OnFull on_full = parse_on_full(on_full_name, call);
  py::gil_scoped_release nogil;
  check_batch(b, store.set().config(), call);
  ReferenceSet& set = store.set();
  std::vector<Update> span_rows;
  span_rows.reserve(std::min<std::size_t>(kPushSpan, b.ids.rows));
  std::size_t i = 0;  // rows queued so far
  try {
    while (i < b.ids.rows) {
      span_rows.clear();
      for (std::size_t r = i; r < b.ids.rows && span_rows.size() < kPushSpan; ++r) span_rows.push_back(b.row(r));
      std::span<const Update> rest(span_rows);
      switch (on_full) {
        case OnFull::Wait:
          set.push(rest);
          i += rest.size();
          break;
        case OnFull::Publish:
          while (!rest.empty()) {
            const std::size_t queued = set.try_push(rest);
            i += queued;
            rest = rest.subspan(queued);
            if (!rest.empty()) store.carry(set.publish());
          }
          break;
        case OnFull::Raise: {
          const std::size_t queued = set.try_push(rest);
          i += queued;
          if (queued < rest.size()) {
            throw BatchQueueFull(message(call, ": the update queue is full (queue_capacity=", set.config().queue_capacity,
                                        ") after queuing ", i, " of ", b.ids.rows,
                                        " rows; publish() and push the rest (rows ", i, "..)"),
                                 i);
          }
          break;
        }
      }
    }
  } catch (const InvalidArgument& e) {  // the library's own checks: a span queues nothing if one fails
    throw InvalidArgument(message(e.what(), " (updates[] counts from row ", i, "; ", i, " rows were queued before it)"));
  } catch (const OutOfMemory& e) {
    if (i == 0) throw;
    throw OutOfMemory(message(e.what(), " (rows 0..", i - 1, " were queued)"));
  }
  return b.ids.rows;
}

// ---- from_points' point arrays ------------------------------------------------------------------

std::size_t words_of(py::handle attributes, const char* call) {
  if (attributes.is_none()) return 0;
  const py::array a = py::array::ensure(attributes);
  if (!a || a.ndim() < 1 || a.ndim() > 2) fail_argument(call, ": attributes must be a 1-D or 2-D uint32 array");
  return a.ndim() == 1 ? 1 : std::size_t(a.shape(1));
}

namespace {

/// `object` itself where it is a C-ordered native float64 array of `cols` columns, else nullopt.
std::optional<py::array> c_ordered_doubles(py::handle object, std::size_t cols) {
  if (!py::isinstance<py::array>(object)) return std::nullopt;
  py::array a = py::reinterpret_borrow<py::array>(object);
  if (a.ndim() != 2 || std::size_t(a.shape(1)) != cols || !a.dtype().is(py::dtype::of<double>())) return std::nullopt;
  if (!(a.flags() & py::array::c_style) || !a.dtype().attr("isnative").cast<bool>()) return std::nullopt;
  return a;
}

}  // namespace

Points as_points(const StoreConfig& config, py::handle ids, py::handle vectors, py::handle targets, const char* call) {
  Points p{as_ids(ids, 1, 1, call, "ids"), {}, {}, {}, {}, c_ordered_doubles(vectors, config.dim)};
  if (p.doubles) {
    p.vectors.rows = std::size_t(p.doubles->shape(0));
    p.vectors.cols = config.dim;
  } else if (p.owned = owned_float_rows(vectors, config.dim); p.owned) {  // not C-ordered: converted once, into the vector the store takes over
    p.vectors.data = p.owned->data();
    p.vectors.rows = p.owned->size() / std::max<std::size_t>(1, config.dim);
    p.vectors.cols = config.dim;
  } else {
    p.vectors = as_float_rows(vectors, config.dim, false, call, "vectors");
  }
  const std::size_t n = p.ids.rows;
  if (p.vectors.rows != n) fail_argument(call, ": ", n, " ids but ", p.vectors.rows, " vectors");
  switch (config.target.kind) {
    case TargetSpec::Kind::None:
      if (!targets.is_none()) fail_argument(call, ": the store's points carry no target");
      break;
    case TargetSpec::Kind::Classes: {
      if (targets.is_none()) fail_argument(call, ": targets are required (the store holds class labels)");
      const LabelArray labels = as_labels(targets, call);
      if (labels.rows != n) fail_argument(call, ": ", n, " ids but ", labels.rows, " labels");
      p.labels.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t label = labels.data[i];
        if (label < 0 || label >= static_cast<std::int64_t>(config.target.count)) {
          fail_argument(call, ": labels[", i, "] = ", label, " is outside [0, ", config.target.count, ")");
        }
        p.labels[i] = static_cast<std::int32_t>(label);
      }
      break;
    }
    case TargetSpec::Kind::Outputs:
      if (targets.is_none()) fail_argument(call, ": targets are required (the store holds float outputs)");
      p.values = as_float_rows(targets, config.target.count, config.target.count == 1, call, "targets");
      if (p.values->rows != n) fail_argument(call, ": ", n, " ids but ", p.values->rows, " target rows");
      break;
  }
  return p;
}

}  // namespace streamknn::python
