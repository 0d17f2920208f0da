// Bindings of streamknn::KnnClassifier and KnnRegressor: light views over a ReferenceSet whose
// aggregation runs where the search runs (on the device for the CUDA backend).
#include "common.hpp"
#include "filters.hpp"
#include "streamknn/device.hpp"

namespace streamknn::python {

namespace {

struct Classifier {
  Classifier(const Store& store, std::size_t k, const std::string& weights)
      : store(&store), model(store.set(), k, parse_weights(weights)) {}
  Classifier(const Store* store, KnnClassifier model) : store(store), model(std::move(model)) {}
  const Store* store;
  KnnClassifier model;
};

struct Regressor {
  Regressor(const Store& store, std::size_t k, const std::string& aggregate)
      : store(&store), model(store.set(), k, parse_regression_aggregate(aggregate)) {}
  Regressor(const Store* store, KnnRegressor model) : store(store), model(std::move(model)) {}
  const Store* store;
  KnnRegressor model;
};

py::ssize_t ssize(std::size_t n) { return static_cast<py::ssize_t>(n); }

/// The one predicate of a model's where(): a dict as ReferenceSet.search's where, not per query.
Predicate one_predicate(const Store& store, py::handle where, const char* call) {
  if (where.is_none()) fail_argument(call, ": where must be a dict of arrays (required, forbidden, range_word, ...)");
  const std::vector<Predicate> p = as_predicates(where, 1, store.set().config().attribute_words, call);
  return p.empty() ? Predicate{} : p.front();
}

constexpr const char* kWhereDoc =
    "A model using only the points that pass where, a dict as ReferenceSet.search's where giving one "
    "predicate for every query (required, forbidden: uint32 (attribute_words,); range_word, range_min, "
    "range_max: scalars): a query with none gets no prediction.";

}  // namespace

void bind_models(py::module_& m) {
  py::class_<Classifier>(m, "KnnClassifier", R"doc(
k-nearest-neighbour classification over a ReferenceSet built with n_classes.

KnnClassifier(store, k, weights='uniform')   weights: 'uniform' or 'distance' (1/distance; a
neighbour at distance 0 takes all the weight). A class tie goes to the smaller label. The store
is kept alive by the classifier and may keep changing; every answer carries its epoch.
)doc")
      .def(py::init<const Store&, std::size_t, const std::string&>(), py::arg("store"), py::arg("k"),
           py::arg("weights") = "uniform", py::keep_alive<1, 2>())
      .def(
          "predict",
          [](const Classifier& c, py::handle queries, py::handle visible) -> py::object {
            if (is_device_array(queries)) return device_call(py::cast(&c), "predict", queries, visible);
            const char* call = "KnnClassifier.predict";
            const FloatRows q = as_float_rows(queries, c.store->set().config().dim, false, call, "queries");
            const std::vector<IdRange> ranges = as_ranges(visible, q.rows, call);
            ClassPredictions p;
            {
              py::gil_scoped_release nogil;
              p = c.model.predict({q.data, q.rows * q.cols}, ranges);
            }
            return py::make_tuple(adopt(std::move(p.labels), {ssize(q.rows)}), p.epoch);
          },
          py::arg("queries"), py::arg("visible") = py::none(),
          "Returns (labels, epoch): int32 labels (n_queries,), -1 where a query has no visible neighbour. "
          "visible: as for ReferenceSet.search.")
      .def(
          "predict_proba",
          [](const Classifier& c, py::handle queries, py::handle visible) -> py::object {
            if (is_device_array(queries)) return device_call(py::cast(&c), "predict_proba", queries, visible);
            const char* call = "KnnClassifier.predict_proba";
            const FloatRows q = as_float_rows(queries, c.store->set().config().dim, false, call, "queries");
            const std::vector<IdRange> ranges = as_ranges(visible, q.rows, call);
            ClassPredictions p;
            {
              py::gil_scoped_release nogil;
              p = c.model.predict_proba({q.data, q.rows * q.cols}, ranges);
            }
            const std::size_t classes = c.store->set().config().target.count;
            return py::make_tuple(adopt(std::move(p.labels), {ssize(q.rows)}),
                                  adopt(std::move(p.probabilities), {ssize(q.rows), ssize(classes)}), p.epoch);
          },
          py::arg("queries"), py::arg("visible") = py::none(),
          "Returns (labels, probabilities, epoch): probabilities float32 (n_queries, n_classes), all 0 "
          "where a query has no visible neighbour.")
      .def(
          "_predict_device",
          [](const Classifier& c, std::uintptr_t queries, std::size_t num_queries, std::size_t row_stride, int device,
             std::uintptr_t labels, std::uintptr_t probabilities, std::uintptr_t stream, std::uintptr_t visible) {
            std::uint64_t epoch = 0;
            {
              py::gil_scoped_release nogil;
              const DeviceQueries in{reinterpret_cast<const float*>(queries), num_queries, row_stride, device,
                                     reinterpret_cast<const IdRange*>(visible)};
              const DeviceClassPredictions out{reinterpret_cast<std::int32_t*>(labels),
                                               reinterpret_cast<float*>(probabilities)};
              epoch = predict_device(c.model, in, out, stream).get();
            }
            count_device_call();
            return epoch;
          },
          py::arg("queries"), py::arg("num_queries"), py::arg("row_stride"), py::arg("device"), py::arg("labels"),
          py::arg("probabilities"), py::arg("stream"), py::arg("visible") = 0,
          "predict_device on raw CUDA pointers (probabilities 0: labels only); see ReferenceSet._search_device.")
      .def(
          "within", [](const Classifier& c, double radius) { return Classifier(c.store, c.model.within(radius)); },
          py::arg("radius"), py::keep_alive<0, 1>(),
          "A classifier voting among the k nearest within radius only (ReferenceSet.radius_search's "
          "'within'): a query with none gets -1, all-zero probabilities. Raises InvalidArgument for a NaN "
          "or negative radius (any finite radius for the inner product).")
      .def(
          "where",
          [](const Classifier& c, py::handle where) {
            return Classifier(c.store, c.model.where(one_predicate(*c.store, where, "KnnClassifier.where")));
          },
          py::arg("where"), py::keep_alive<0, 1>(), kWhereDoc)
      .def_property_readonly("radius", [](const Classifier& c) { return c.model.radius(); },
                             "The radius given to within(), or inf.")
      .def_property_readonly("store", [](const Classifier& c) { return c.store; }, py::return_value_policy::reference)
      .def_property_readonly("n_classes", [](const Classifier& c) { return c.store->set().config().target.count; })
      .def_property_readonly("backend", [](const Classifier& c) { return c.store->set().backend() == BackendKind::Cuda ? "cuda" : "cpu"; },
                             "The store's backend: 'cpu' or 'cuda'.")
      .def_property_readonly("k", [](const Classifier& c) { return c.model.k(); })
      .def_property_readonly("weights", [](const Classifier& c) { return std::string(to_string(c.model.weights())); });

  py::class_<Regressor>(m, "KnnRegressor", R"doc(
k-nearest-neighbour regression over a ReferenceSet built with n_outputs.

KnnRegressor(store, k, aggregate='mean')   aggregate: 'mean', 'weighted_mean' (1/distance, a
neighbour at distance 0 takes all the weight) or 'median' (numpy's), each output separately.
)doc")
      .def(py::init<const Store&, std::size_t, const std::string&>(), py::arg("store"), py::arg("k"),
           py::arg("aggregate") = "mean", py::keep_alive<1, 2>())
      .def(
          "predict",
          [](const Regressor& r, py::handle queries, py::handle visible) -> py::object {
            if (is_device_array(queries)) return device_call(py::cast(&r), "predict", queries, visible);
            const char* call = "KnnRegressor.predict";
            const FloatRows q = as_float_rows(queries, r.store->set().config().dim, false, call, "queries");
            const std::vector<IdRange> ranges = as_ranges(visible, q.rows, call);
            RegressionPredictions p;
            {
              py::gil_scoped_release nogil;
              p = r.model.predict({q.data, q.rows * q.cols}, ranges);
            }
            const std::size_t outputs = r.store->set().config().target.count;
            return py::make_tuple(adopt(std::move(p.values), {ssize(q.rows), ssize(outputs)}), p.epoch);
          },
          py::arg("queries"), py::arg("visible") = py::none(),
          "Returns (values, epoch): float32 (n_queries, n_outputs), NaN rows where a query has no visible "
          "neighbour. visible: as for ReferenceSet.search.")
      .def(
          "_predict_device",
          [](const Regressor& r, std::uintptr_t queries, std::size_t num_queries, std::size_t row_stride, int device,
             std::uintptr_t values, std::uintptr_t stream, std::uintptr_t visible) {
            std::uint64_t epoch = 0;
            {
              py::gil_scoped_release nogil;
              const DeviceQueries in{reinterpret_cast<const float*>(queries), num_queries, row_stride, device,
                                     reinterpret_cast<const IdRange*>(visible)};
              epoch = predict_device(r.model, in, reinterpret_cast<float*>(values), stream).get();
            }
            count_device_call();
            return epoch;
          },
          py::arg("queries"), py::arg("num_queries"), py::arg("row_stride"), py::arg("device"), py::arg("values"),
          py::arg("stream"), py::arg("visible") = 0,
          "predict_device on raw CUDA pointers; see ReferenceSet._search_device.")
      .def(
          "within", [](const Regressor& r, double radius) { return Regressor(r.store, r.model.within(radius)); },
          py::arg("radius"), py::keep_alive<0, 1>(),
          "A regressor aggregating the k nearest within radius only (as KnnClassifier.within): a query "
          "with none gets a NaN row.")
      .def(
          "where",
          [](const Regressor& r, py::handle where) {
            return Regressor(r.store, r.model.where(one_predicate(*r.store, where, "KnnRegressor.where")));
          },
          py::arg("where"), py::keep_alive<0, 1>(), kWhereDoc)
      .def_property_readonly("radius", [](const Regressor& r) { return r.model.radius(); },
                             "The radius given to within(), or inf.")
      .def_property_readonly("store", [](const Regressor& r) { return r.store; }, py::return_value_policy::reference)
      .def_property_readonly("n_outputs", [](const Regressor& r) { return r.store->set().config().target.count; })
      .def_property_readonly("backend", [](const Regressor& r) { return r.store->set().backend() == BackendKind::Cuda ? "cuda" : "cpu"; },
                             "The store's backend: 'cpu' or 'cuda'.")
      .def_property_readonly("k", [](const Regressor& r) { return r.model.k(); })
      .def_property_readonly("aggregate",
                             [](const Regressor& r) { return std::string(to_string(r.model.aggregate())); });
}

}  // namespace streamknn::python
