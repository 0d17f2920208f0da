// Bindings of streamknn::ReferenceSet: batch updates (arrays of ids, vectors and targets),
// publish() with its report, and search(). The update arrays are converted, checked and pushed
// by batches.cpp; attributes, predicates and radius search are bound by filters.cpp.
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "batches.hpp"
#include "common.hpp"
#include "filters.hpp"
#include "store_config.hpp"
#include "streamknn/device.hpp"

namespace streamknn::python {

namespace {

// ---- Store: the reports of the publishes that batch pushes made ---------------------------------

void merge_into(PublishReport& into, PublishReport&& later) {
  if (later.epoch >= into.epoch) {
    into.epoch = later.epoch;
    into.size = later.size;
  }
  into.drained += later.drained;
  into.applied += later.applied;
  into.inserted += later.inserted;
  into.moved += later.moved;
  into.erased += later.erased;
  into.retargeted += later.retargeted;
  into.attributed += later.attributed;
  into.rejected.insert(into.rejected.end(), later.rejected.begin(), later.rejected.end());
}

}  // namespace

PublishReport Store::publish() {
  PublishReport report = set_.publish();
  std::lock_guard lock(carried_mutex_);
  if (!has_carried_) return report;
  PublishReport merged = std::move(carried_);
  carried_ = PublishReport{};
  has_carried_ = false;
  merge_into(merged, std::move(report));
  return merged;
}

void Store::carry(PublishReport report) {
  std::lock_guard lock(carried_mutex_);
  if (has_carried_) {
    merge_into(carried_, std::move(report));
  } else {
    carried_ = std::move(report);
    has_carried_ = true;
  }
}

namespace {
/// Calls that ran on device pointers since import (a test hook: proves the zero-copy path ran).
std::atomic<std::uint64_t> device_searches{0};
}  // namespace

void count_device_call() noexcept { device_searches.fetch_add(1, std::memory_order_relaxed); }

namespace {

// ---- configuration ------------------------------------------------------------------------------

py::object target_count(const StoreConfig& config, TargetSpec::Kind kind) {
  if (config.target.kind != kind) return py::none();
  return py::int_(config.target.count);
}

StoreConfig make_config(std::size_t dim, const std::string& metric, std::optional<std::uint32_t> n_classes,
                        std::optional<std::uint32_t> n_outputs, const std::string& backend, std::size_t capacity_hint,
                        std::size_t queue_capacity, int cuda_device, std::size_t cpu_threads,
                        std::size_t publish_threads, const std::string& spatial_index, std::size_t attribute_words) {
  StoreConfig config = store_config("ReferenceSet", dim, metric, n_classes, n_outputs, backend, capacity_hint,
                                    queue_capacity, cpu_threads, publish_threads, attribute_words);
  config.cuda_device = cuda_device;
  config.spatial_index = parse_spatial_index("ReferenceSet", spatial_index);
  return config;
}

// ---- construction: ReferenceSet(...) and ReferenceSet.from_points -------------------------------

const char* const kReferenceSetDoc = R"doc(
A mutable reference set: push batches of updates, publish() them as a new snapshot, search it.

ReferenceSet(dim, metric='l2', *, n_classes=None, n_outputs=None, backend='auto',
             capacity_hint=1024, queue_capacity=65536, cuda_device=0, cpu_threads=0,
             publish_threads=0, spatial_index='auto', attribute_words=0, reduced_screen='auto',
             reduced_format='float16')

metric: 'l2' (Euclidean), 'ip' (inner product, reported as -<q, p>), 'cosine' (1 - cos) or
'haversine' ((latitude, longitude) in degrees, distances in metres; dim must be 2).
n_classes: points carry a class label 0..n_classes-1; n_outputs: points carry that many
floats (regression, multi-output, Q-values); neither: points carry nothing.
backend: 'auto' (CUDA where a device is usable, else CPU), 'cpu' or 'cuda'.
cpu_threads: threads a CPU-backend search may use (0: one per hardware thread).
publish_threads: threads publish() may use for a large batch of moves and target changes
(0: one per hardware thread, up to 8).
spatial_index: CUDA backend, stores of one or two dimensions: 'auto' (a tree of boxes over the
points, kept on the device and refit or rebuilt after a publish once enough queries have come),
'always' or 'off'. The answers are the same; only the time differs.
reduced_screen: CUDA backend: 'auto' (a float16 copy of stores of 64+ dimensions screens small
batches over large stores, read at half the bytes; the answers stay exact), 'always' or 'off'
(saves the copy's memory: per buffer 2 bytes per dimension and 8 per point). docs/cuda.md, E7.
reduced_format: the copy's form: 'float16' or 'int8' (a byte per dimension and 16 per point:
half the bytes again, faster one-query searches over wide stores, k up to 128; points whose
coordinates span a range far wider than their neighbours' distances take the slow exact
fallback). docs/cuda.md, E8.
attribute_words: 32-bit attribute words per point (0 to 4), given at insert (attributes=), changed
by set_attributes, tested by the searches' `where` predicates (docs/filters.md).

Ids are caller-chosen unsigned 64-bit integers (invalid_id = 2**64-1 is reserved). Updates are
queued by insert / move / erase / set_target and become visible together at publish(); unknown
ids and duplicate inserts are named in the report, never ignored. Every method may be called from
any thread; searches and publishes release the GIL.
)doc";

/// ReferenceSet(dim, ...): an empty store.
std::unique_ptr<Store> new_store(std::size_t dim, const std::string& metric, std::optional<std::uint32_t> n_classes,
                                 std::optional<std::uint32_t> n_outputs, const std::string& backend,
                                 std::size_t capacity_hint, std::size_t queue_capacity, int cuda_device,
                                 std::size_t cpu_threads, std::size_t publish_threads, const std::string& spatial_index,
                                 std::size_t attribute_words, const std::string& reduced_screen,
                                 const std::string& reduced_format) {
  StoreConfig config = make_config(dim, metric, n_classes, n_outputs, backend, capacity_hint,
                                   queue_capacity, cuda_device, cpu_threads, publish_threads,
                                   spatial_index, attribute_words);
  config.reduced_screen = parse_reduced_screen("ReferenceSet", reduced_screen);
  config.reduced_format = parse_reduced_format("ReferenceSet", reduced_format);
  py::gil_scoped_release nogil;
  return std::make_unique<Store>(config);
}

/// from_points' store, built in one step from the checked arrays (the GIL released while it builds).
std::unique_ptr<Store> build_from_points(const StoreConfig& config, Points& p, const std::optional<AttrRows>& words) {
  const std::span<const float> values =
      p.values ? std::span<const float>(p.values->data, p.values->rows * p.values->cols) : std::span<const float>();
  const std::span<const std::uint32_t> attribute_words_of =
      words ? std::span<const std::uint32_t>(words->data, words->rows * words->cols)
            : std::span<const std::uint32_t>();
  const auto* rows64 = p.doubles ? static_cast<const double*>(p.doubles->data()) : nullptr;
  py::gil_scoped_release nogil;
  if (rows64 != nullptr) {  // rounded once as they are copied into the store, not converted here first
    return std::make_unique<Store>(ReferenceSet::from_points(
        config, {p.ids.data, p.ids.rows}, std::span<const double>(rows64, p.vectors.rows * config.dim), p.labels,
        values, attribute_words_of));
  }
  if (p.owned) {  // the converted vectors are taken over, not copied again
    return std::make_unique<Store>(ReferenceSet::from_points(config, {p.ids.data, p.ids.rows},
                                                             std::move(*p.owned), p.labels, values,
                                                             attribute_words_of));
  }
  return std::make_unique<Store>(ReferenceSet::from_points(
      config, {p.ids.data, p.ids.rows}, {p.vectors.data, p.vectors.rows * p.vectors.cols}, p.labels, values,
      attribute_words_of));
}

/// ReferenceSet.from_points: the arrays converted and checked, then the store built.
std::unique_ptr<Store> store_from_points(py::handle ids, py::handle vectors, py::handle targets,
                                         const std::string& metric, std::optional<std::uint32_t> n_classes,
                                         std::optional<std::uint32_t> n_outputs, const std::string& backend,
                                         std::size_t capacity_hint, std::size_t queue_capacity, int cuda_device,
                                         std::size_t cpu_threads, std::size_t publish_threads,
                                         const std::string& spatial_index, py::handle attributes,
                                         std::optional<std::size_t> attribute_words,
                                         const std::string& reduced_screen, const std::string& reduced_format) {
  const char* call = "ReferenceSet.from_points";
  const py::array shape_of = py::array::ensure(vectors);
  if (!shape_of || shape_of.ndim() != 2) fail_argument(call, ": vectors must be a 2-D array (n, dim)");
  StoreConfig config = make_config(std::size_t(shape_of.shape(1)), metric, n_classes, n_outputs, backend,
                                   capacity_hint, queue_capacity, cuda_device, cpu_threads, publish_threads,
                                   spatial_index, attribute_words.value_or(words_of(attributes, call)));
  config.reduced_screen = parse_reduced_screen("ReferenceSet", reduced_screen);
  config.reduced_format = parse_reduced_format("ReferenceSet", reduced_format);
  Points p = as_points(config, ids, vectors, targets, call);
  std::optional<AttrRows> words;
  if (!attributes.is_none()) {
    words = as_attributes(attributes, config.attribute_words, call);
    if (words->rows != p.ids.rows) {
      fail_argument(call, ": ", p.ids.rows, " ids but ", words->rows, " attribute rows");
    }
  }
  return build_from_points(config, p, words);
}

void bind_constructors(py::class_<Store>& cls) {
  cls.def(py::init(&new_store),
          py::arg("dim"), py::arg("metric") = "l2", py::kw_only(), py::arg("n_classes") = py::none(),
          py::arg("n_outputs") = py::none(), py::arg("backend") = "auto", py::arg("capacity_hint") = 1024,
          py::arg("queue_capacity") = 1 << 16, py::arg("cuda_device") = 0, py::arg("cpu_threads") = 0,
          py::arg("publish_threads") = 0, py::arg("spatial_index") = "auto", py::arg("attribute_words") = 0,
          py::arg("reduced_screen") = "auto", py::arg("reduced_format") = "float16");
  cls.def_static(
      "from_points", &store_from_points,
      py::arg("ids"), py::arg("vectors"), py::arg("targets") = py::none(), py::kw_only(), py::arg("metric") = "l2",
      py::arg("n_classes") = py::none(), py::arg("n_outputs") = py::none(), py::arg("backend") = "auto",
      py::arg("capacity_hint") = 1024, py::arg("queue_capacity") = 1 << 16, py::arg("cuda_device") = 0,
      py::arg("cpu_threads") = 0, py::arg("publish_threads") = 0, py::arg("spatial_index") = "auto",
      py::arg("attributes") = py::none(), py::arg("attribute_words") = py::none(),
      py::arg("reduced_screen") = "auto", py::arg("reduced_format") = "float16",
      R"doc(A store holding ids (n,), vectors (n, dim) and targets (as for insert) at epoch 1, built in
one step (ReferenceSet::from_points: no update queue, no publish): the fast way to load a data set.
The other arguments are the constructor's (dim is vectors.shape[1]). attributes: None (every word
0) or uint32 (n, attribute_words) (also (n,) for one word); attribute_words: None takes it from
attributes (0 without them); given, attributes must match it. Answers, snapshot and
checkpoint are those of a store that inserted the rows in order and published once. Every row
is checked as insert checks it, and repeated ids are refused: InvalidArgument names the row.
float32 C-contiguous vectors are read in place; anything else is converted once.)doc");
}

// ---- updates: insert, move, erase, set_target, publish ------------------------------------------

const char* const kOnFullDoc =
    "on_full: what to do when the update queue (queue_capacity) fills during the batch:\n"
    "  'publish' (default) publish() and continue; that publish's report is folded into the next\n"
    "            publish() result, so nothing is lost (searches may see part of the batch early);\n"
    "  'wait'    block (GIL released) until another thread publishes;\n"
    "  'raise'   stop and raise streamknn.QueueFull; its `queued` attribute says how many rows\n"
    "            were queued (the rest were not).\n"
    "Every row is checked before any is queued: a malformed batch raises InvalidArgument (a\n"
    "ValueError) and queues nothing. Returns the number of rows queued.";

void bind_updates(py::class_<Store>& cls) {
  cls.def(
      "insert",
      [](Store& s, py::handle ids, py::handle vectors, py::handle targets, const std::string& on_full,
         py::handle attributes) {
        const char* call = "ReferenceSet.insert";
        Batch b = make_batch(s, UpdateKind::Insert, ids, vectors, targets, call);
        if (!attributes.is_none()) {
          b.attributes = as_attributes(attributes, s.set().config().attribute_words, call);
          if (b.attributes->rows != b.ids.rows) {
            fail_argument(call, ": ", b.ids.rows, " ids but ", b.attributes->rows, " attribute rows");
          }
        }
        return push_batch(s, b, on_full, call);
      },
      py::arg("ids"), py::arg("vectors"), py::arg("targets") = py::none(), py::kw_only(),
      py::arg("on_full") = "publish", py::arg("attributes") = py::none(),
      (std::string("Queues inserts: ids (n,), vectors (n, dim), targets: labels (n,) for a "
                   "classification store, values (n, n_outputs) (or (n,) when n_outputs == 1) for a "
                   "regression store, None otherwise; attributes: None (zeros) or (n, attribute_words) "
                   "uint32.\n") +
       kOnFullDoc)
          .c_str());
  cls.def(
      "move",
      [](Store& s, py::handle ids, py::handle vectors, const std::string& on_full) {
        return push_batch(s, make_batch(s, UpdateKind::Move, ids, vectors, py::none(), "ReferenceSet.move"),
                          on_full, "ReferenceSet.move");
      },
      py::arg("ids"), py::arg("vectors"), py::kw_only(), py::arg("on_full") = "publish",
      (std::string("Queues moves (new vectors, targets kept): ids (n,), vectors (n, dim).\n") + kOnFullDoc).c_str());
  cls.def(
      "erase",
      [](Store& s, py::handle ids, const std::string& on_full) {
        return push_batch(s, make_batch(s, UpdateKind::Erase, ids, py::none(), py::none(), "ReferenceSet.erase"),
                          on_full, "ReferenceSet.erase");
      },
      py::arg("ids"), py::kw_only(), py::arg("on_full") = "publish",
      (std::string("Queues erases: ids (n,).\n") + kOnFullDoc).c_str());
  cls.def(
      "set_target",
      [](Store& s, py::handle ids, py::handle targets, const std::string& on_full) {
        return push_batch(
            s, make_batch(s, UpdateKind::SetTarget, ids, py::none(), targets, "ReferenceSet.set_target"), on_full,
            "ReferenceSet.set_target");
      },
      py::arg("ids"), py::arg("targets"), py::kw_only(), py::arg("on_full") = "publish",
      (std::string("Queues new targets: ids (n,), targets as for insert.\n") + kOnFullDoc).c_str());
  cls.def(
      "publish",
      [](Store& s) {
        py::gil_scoped_release nogil;
        return s.publish();
      },
      "Applies every update queued before this call and makes them visible as a new epoch; returns a "
      "PublishReport. On OutOfMemory nothing is applied and the updates stay pending.");
}

// ---- queries ------------------------------------------------------------------------------------

/// search (NumPy queries; device arrays go through streamknn._arrays.device_call) and
/// _search_device (raw CUDA pointers).
void bind_search(py::class_<Store>& cls) {
  cls.def(
      "search",
      [](const Store& s, py::handle queries, std::size_t k, py::handle visible, py::handle where) -> py::object {
        if (is_device_array(queries) && where.is_none()) {
          return device_call(py::cast(&s), "search", queries, k, visible);
        }
        const char* call = "ReferenceSet.search";
        const FloatRows q = as_float_rows(queries, s.set().config().dim, false, call, "queries");
        const std::vector<IdRange> ranges = as_ranges(visible, q.rows, call);
        const std::vector<Predicate> predicates =
            as_predicates(where, q.rows, s.set().config().attribute_words, call);
        Neighbors n;
        {
          py::gil_scoped_release nogil;
          n = s.set().search({q.data, q.rows * q.cols}, k, ranges, predicates);
        }
        const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(q.rows), static_cast<py::ssize_t>(k)};
        return py::make_tuple(adopt(std::move(n.distances), shape), adopt(std::move(n.ids), shape), n.epoch);
      },
      py::arg("queries"), py::arg("k"), py::arg("visible") = py::none(), py::arg("where") = py::none(),
      R"doc(Exact k nearest neighbours of queries (n_queries, dim) on the current snapshot.

Returns (distances, ids, epoch): distances float32 (n_queries, k) and ids uint64 (n_queries, k) in
ascending (distance, id) order, ties to the smaller id; rows with fewer than k visible points end
with padding (id = invalid_id, distance = inf). visible: None, or (n_queries, 2) uint64 [begin, end)
id ranges, one per query, restricting what each query sees. where: None, or a dict of arrays
(required, forbidden: uint32 (attribute_words,) or (n_queries, attribute_words); range_word,
range_min, range_max: scalars or (n_queries,)) testing each point's attribute words inside the
search: the answers are the k nearest among the points that pass. float32 C-contiguous queries are used
in place; anything else is converted once. The GIL is released during the search.)doc");
  cls.def(
      "_search_device",
      [](const Store& s, std::uintptr_t queries, std::size_t num_queries, std::size_t row_stride, int device,
         std::size_t k, std::uintptr_t distances, std::uintptr_t ids, std::uintptr_t stream,
         std::uintptr_t visible) {
        std::uint64_t epoch = 0;
        {
          py::gil_scoped_release nogil;
          const DeviceQueries in{reinterpret_cast<const float*>(queries), num_queries, row_stride, device,
                                 reinterpret_cast<const IdRange*>(visible)};
          const DeviceNeighbors out{reinterpret_cast<float*>(distances), reinterpret_cast<PointId*>(ids)};
          epoch = search_device(s.set(), in, k, out, stream).get();
        }
        count_device_call();
        return epoch;
      },
      py::arg("queries"), py::arg("num_queries"), py::arg("row_stride"), py::arg("device"), py::arg("k"),
      py::arg("distances"), py::arg("ids"), py::arg("stream"), py::arg("visible") = 0,
      R"doc(search_device (streamknn/device.hpp) on raw CUDA pointers: float32 queries (row r at
queries + 4 * r * row_stride bytes), float32 distances and uint64 ids (num_queries x k), visible (0 or
num_queries [begin, end) uint64 pairs), all in device memory, ordered on the CUDA stream `stream`.
Returns the epoch. Used by streamknn._device for CuPy / PyTorch arrays; the GIL is released.)doc");
}

/// _lookup_and_update: KNN-Q's lookup and update in one call (streamknn.KnnQ).
void bind_lookup_and_update(py::class_<Store>& cls) {
  cls.def(
      "_lookup_and_update",
      [](Store& s, py::handle states, std::size_t k, py::handle actions, py::handle targets, float alpha) {
        const char* call = "ReferenceSet._lookup_and_update";
        const StoreConfig& config = s.set().config();
        const FloatRows rows = as_float_rows(states, config.dim, false, call, "states");
        const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> a =
            py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(actions);
        const FloatArray t = FloatArray::ensure(targets);
        if (!a || a.ndim() != 1 || std::size_t(a.shape(0)) != rows.rows) {
          fail_argument(call, ": actions must be 1-D integers, one per state (", rows.rows, ")");
        }
        if (!t || t.ndim() != 1 || std::size_t(t.shape(0)) != rows.rows) {
          fail_argument(call, ": targets must be 1-D floats, one per state (", rows.rows, ")");
        }
        std::vector<std::int32_t> acts(rows.rows);
        for (std::size_t i = 0; i < rows.rows; ++i) {
          const std::int64_t v = a.data()[i];
          if (v < 0 || v > std::int64_t(INT32_MAX)) fail_argument(call, ": actions[", i, "] = ", v, " is out of range");
          acts[i] = static_cast<std::int32_t>(v);
        }
        QUpdate u;
        {
          py::gil_scoped_release nogil;
          u = s.set().lookup_and_update({rows.data, rows.rows * rows.cols}, k, acts, {t.data(), rows.rows}, alpha);
        }
        const auto n = static_cast<py::ssize_t>(u.num_queries);
        return py::make_tuple(adopt(std::move(u.q_before), {n, static_cast<py::ssize_t>(u.num_actions)}),
                              adopt(std::move(u.ids), {n, static_cast<py::ssize_t>(k)}), u.epoch);
      },
      py::arg("states"), py::arg("k"), py::arg("actions"), py::arg("targets"), py::arg("alpha"),
      R"doc(ReferenceSet::lookup_and_update (KNN-Q in one call) on a store with n_outputs = n_actions:
returns (q_before float32 (n, n_actions), ids uint64 (n, k), epoch). See streamknn.KnnQ.)doc");
}

// ---- properties ---------------------------------------------------------------------------------

/// The store's configuration and state as read-only properties, __len__ and __repr__.
void bind_properties(py::class_<Store>& cls) {
  cls.def_property_readonly("dim", [](const Store& s) { return s.set().config().dim; });
  cls.def_property_readonly("metric", [](const Store& s) { return std::string(to_string(s.set().config().metric)); });
  cls.def_property_readonly(
      "n_classes", [](const Store& s) { return target_count(s.set().config(), TargetSpec::Kind::Classes); },
      "Number of classes, or None when the points carry no label.");
  cls.def_property_readonly(
      "n_outputs", [](const Store& s) { return target_count(s.set().config(), TargetSpec::Kind::Outputs); },
      "Number of float outputs, or None when the points carry no values.");
  cls.def_property_readonly("backend", [](const Store& s) { return std::string(to_string(s.set().backend())); },
                            "'cpu' or 'cuda' (never 'auto').");
  cls.def_property_readonly("backend_name", [](const Store& s) { return s.set().backend_name(); });
  cls.def_property_readonly("queue_capacity", [](const Store& s) { return s.set().config().queue_capacity; });
  cls.def_property_readonly("cpu_threads", [](const Store& s) { return s.set().config().cpu_threads; });
  cls.def_property_readonly("publish_threads", [](const Store& s) { return s.set().config().publish_threads; });
  cls.def_property_readonly("size", [](const Store& s) { return s.set().size(); }, "Points in the published snapshot.");
  cls.def_property_readonly("epoch", [](const Store& s) { return s.set().epoch(); },
                            "Epoch of the published snapshot (0 = empty).");
  cls.def_property_readonly("pending", [](const Store& s) { return s.set().pending(); },
                            "Updates queued and not yet published.");
  cls.def("__len__", [](const Store& s) { return s.set().size(); });
  cls.def("__repr__", [](const Store& s) {
    const StoreConfig& c = s.set().config();
    std::string target = "";
    if (c.target.kind == TargetSpec::Kind::Classes) target = message(", n_classes=", c.target.count);
    if (c.target.kind == TargetSpec::Kind::Outputs) target = message(", n_outputs=", c.target.count);
    return message("ReferenceSet(dim=", c.dim, ", metric='", to_string(c.metric), "'", target, ", backend='",
                  to_string(s.set().backend()), "', size=", s.set().size(), ", epoch=", s.set().epoch(), ")");
  });
}

// ---- publish reports ----------------------------------------------------------------------------

/// Rejection and PublishReport, what publish() returns.
void bind_publish_reports(py::module_& m) {
  py::class_<Rejection>(m, "Rejection", "An update that publish() did not apply, and why.")
      .def_property_readonly("id", [](const Rejection& r) { return r.id; }, "The id the update named.")
      .def_property_readonly("kind", [](const Rejection& r) { return std::string(to_string(r.kind)); },
                             "'insert', 'move', 'erase', 'set_target' or 'set_attributes'.")
      .def_property_readonly("reason", [](const Rejection& r) { return std::string(to_string(r.reason)); },
                             "'unknown id' or 'duplicate id'.")
      .def("__repr__", [](const Rejection& r) {
        return message("Rejection(id=", r.id, ", kind='", to_string(r.kind), "', reason='", to_string(r.reason), "')");
      });

  py::class_<PublishReport>(m, "PublishReport",
                            "What one publish() did (merged with the publishes that batch pushes made on "
                            "their own since the previous publish() call).")
      .def_readonly("epoch", &PublishReport::epoch, "Epoch visible once publish() returned.")
      .def_readonly("drained", &PublishReport::drained, "Updates taken from the queue.")
      .def_readonly("applied", &PublishReport::applied, "Updates applied (drained - rejected).")
      .def_readonly("inserted", &PublishReport::inserted)
      .def_readonly("moved", &PublishReport::moved)
      .def_readonly("erased", &PublishReport::erased)
      .def_readonly("retargeted", &PublishReport::retargeted)
      .def_readonly("attributed", &PublishReport::attributed, "set_attributes applied.")
      .def_readonly("size", &PublishReport::size, "Points in the store after this publish.")
      .def_readonly("rejected", &PublishReport::rejected, "Every update not applied, in queue order (list of Rejection).")
      .def_property_readonly(
          "rejected_ids",
          [](const PublishReport& r) {
            std::vector<PointId> ids;
            for (const Rejection& x : r.rejected) ids.push_back(x.id);
            return adopt(std::move(ids), {static_cast<py::ssize_t>(r.rejected.size())});
          },
          "The ids of the rejected updates as a uint64 array.")
      .def("__repr__", [](const PublishReport& r) {
        return message("PublishReport(epoch=", r.epoch, ", drained=", r.drained, ", applied=", r.applied,
                      ", inserted=", r.inserted, ", moved=", r.moved, ", erased=", r.erased,
                      ", retargeted=", r.retargeted, ", rejected=", r.rejected.size(), ", size=", r.size, ")");
      });
}

}  // namespace

void bind_reference_set(py::module_& m) {
  m.def("_device_search_count", [] { return device_searches.load(); },
        "Number of searches and predictions that ran on device pointers (_search_device, "
        "_predict_device) since import: a test hook proving the zero-copy path ran.");
  bind_publish_reports(m);
  py::class_<Store> cls(m, "ReferenceSet", kReferenceSetDoc);
  bind_constructors(cls);
  bind_updates(cls);
  bind_search(cls);
  bind_lookup_and_update(cls);
  bind_properties(cls);
  bind_filters(m);
}

}  // namespace streamknn::python
