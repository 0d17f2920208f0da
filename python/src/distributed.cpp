// streamknn._streamknn_mpi: bindings of streamknn::DistributedReferenceSet (built where streamknn
// was built with MPI). The Python class streamknn.DistributedReferenceSet (_distributed.py) wraps
// it and takes an mpi4py communicator; this module takes the communicator's Fortran handle
// (comm.py2f()), so it needs no mpi4py headers. Every call that talks to other ranks releases the
// GIL. Errors become the exception types of streamknn._streamknn. Attributes, `where` predicates
// and radius answers take and return the single store's arrays (filter_arrays.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "errors.hpp"
#include "filters.hpp"
#include "store_config.hpp"
#include "streamknn/distributed_reference_set.hpp"

namespace py = pybind11;
using namespace streamknn;
namespace sp = streamknn::python;

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Ids = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>;
using Labels = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

/// Rows of `cols` floats (a 1-D array is one row per element when cols == 1).
Floats rows_of(py::handle object, std::size_t cols, const char* what) {
  Floats a = Floats::ensure(object);
  if (!a) throw InvalidArgument(std::string("DistributedReferenceSet: ") + what + " must be a float array");
  const bool ok = (a.ndim() == 2 && std::size_t(a.shape(1)) == cols) || (a.ndim() == 1 && cols == 1);
  if (!ok) {
    throw InvalidArgument(std::string("DistributedReferenceSet: ") + what + " must have shape (n, " +
                          std::to_string(cols) + ")");
  }
  return a;
}

std::vector<IdRange> ranges_of(py::handle visible, std::size_t n) {
  std::vector<IdRange> out;
  if (visible.is_none()) return out;
  Ids a = Ids::ensure(visible);
  if (!a || a.ndim() != 2 || a.shape(1) != 2 || std::size_t(a.shape(0)) != n) {
    throw InvalidArgument("DistributedReferenceSet: visible must be None or an (n_queries, 2) array of [begin, end)");
  }
  for (std::size_t q = 0; q < n; ++q) out.push_back({a.at(q, 0), a.at(q, 1)});
  return out;
}

/// One rank's batch of a collective query, parsed with the GIL held. A batch the binding refuses
/// (shapes, ranges, where) still takes part in the call, as an empty batch, so that the other
/// ranks' call goes on (a rank that stayed away would hang them); raise_refusal() then raises the
/// error on this rank only, as the library does for a bad k or a bad row.
struct QueryBatch {
  Floats queries;
  std::size_t rows = 0;
  std::vector<IdRange> ranges;
  std::vector<Predicate> where;
  std::exception_ptr refused;

  std::span<const float> data() const { return {queries.data(), std::size_t(queries.size())}; }
  void raise_refusal() const {
    if (refused) std::rethrow_exception(refused);
  }
};

QueryBatch query_batch(const DistributedReferenceSet& s, py::handle queries, py::handle visible, py::handle where,
                       const char* call) {
  const StoreConfig& c = s.config();
  QueryBatch b;
  try {
    b.queries = rows_of(queries, c.dim, "queries");
    b.rows = b.queries.ndim() == 2 ? std::size_t(b.queries.shape(0)) : std::size_t(b.queries.size());
    b.ranges = ranges_of(visible, b.rows);
    b.where = sp::as_predicates(where, b.rows, c.attribute_words, call);
  } catch (const std::exception&) {
    b = QueryBatch{Floats(std::vector<py::ssize_t>{0, py::ssize_t(c.dim)}), 0, {}, {}, std::current_exception()};
  }
  return b;
}

/// One batch of updates of one kind, as views of the arrays (kept alive by the caller).
std::vector<Update> batch_of(const DistributedReferenceSet& s, const std::string& kind, const Ids& ids,
                             const std::optional<Floats>& vectors, py::handle targets, std::optional<Floats>& values,
                             std::optional<Labels>& labels, const std::optional<sp::AttrRows>& words) {
  const StoreConfig& c = s.config();
  const std::size_t n = std::size_t(ids.size());
  const bool wants_target = kind == "set_target" || (kind == "insert" && c.target.kind != TargetSpec::Kind::None);
  if (wants_target && targets.is_none()) throw InvalidArgument("DistributedReferenceSet." + kind + ": targets are required");
  if (wants_target && c.target.kind == TargetSpec::Kind::Classes) labels = Labels::ensure(targets);
  if (wants_target && c.target.kind == TargetSpec::Kind::Outputs) values = rows_of(targets, c.target.count, "targets");
  if ((vectors && std::size_t(vectors->shape(0)) != n) || (labels && std::size_t(labels->size()) != n) ||
      (values && std::size_t(values->shape(0)) != n) || (words && words->rows != n)) {
    throw InvalidArgument("DistributedReferenceSet." + kind +
                          ": ids, vectors, targets and attributes must have as many rows");
  }
  std::vector<Update> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const PointId id = ids.data()[i];
    const std::span<const float> v = vectors ? std::span<const float>(vectors->data() + i * c.dim, c.dim)
                                             : std::span<const float>();
    const std::span<const std::uint32_t> w = words ? std::span<const std::uint32_t>(words->data + i * words->cols,
                                                                                    words->cols)
                                                   : std::span<const std::uint32_t>();
    const std::size_t t = c.target.count;
    if (kind == "insert") {
      const Update u = labels   ? Update::insert(id, v, std::int32_t(labels->data()[i]))
                       : values ? Update::insert(id, v, {values->data() + i * t, t})
                                : Update::insert(id, v);
      out.push_back(words ? u.with_attributes(w) : u);
    } else if (kind == "move") {
      out.push_back(Update::move(id, v));
    } else if (kind == "erase") {
      out.push_back(Update::erase(id));
    } else if (kind == "set_attributes") {
      out.push_back(Update::set_attributes(id, w));
    } else {
      out.push_back(labels ? Update::set_target(id, std::int32_t(labels->data()[i]))
                           : Update::set_target(id, {values->data() + i * t, t}));
    }
  }
  return out;
}

py::dict report_dict(const PublishReport& r) {
  py::dict d;
  d["epoch"] = r.epoch;
  d["drained"] = r.drained;
  d["applied"] = r.applied;
  d["inserted"] = r.inserted;
  d["moved"] = r.moved;
  d["erased"] = r.erased;
  d["retargeted"] = r.retargeted;
  d["attributed"] = r.attributed;
  d["size"] = r.size;
  py::list rejected;
  for (const Rejection& j : r.rejected) rejected.append(py::make_tuple(j.id, to_string(j.kind), to_string(j.reason)));
  d["rejected"] = rejected;
  return d;
}

}  // namespace

PYBIND11_MODULE(_streamknn_mpi, m) {
  m.doc() = "streamknn._streamknn_mpi: the sharded store over MPI. Use streamknn.DistributedReferenceSet.";
  py::register_local_exception_translator(sp::translate_library_errors);
  m.def("shard_of", &shard_of, py::arg("id"), py::arg("ranks"), "The owner rank of id: splitmix64(id) % ranks.");

  py::class_<DistributedReferenceSet>(m, "Store")
      .def(py::init([](std::int64_t fortran_comm, std::size_t dim, const std::string& metric,
                       std::optional<std::uint32_t> n_classes, std::optional<std::uint32_t> n_outputs,
                       const std::string& backend, std::size_t capacity_hint, std::size_t queue_capacity,
                       std::size_t cpu_threads, std::size_t publish_threads, std::size_t attribute_words) {
             const StoreConfig c =
                 sp::store_config("DistributedReferenceSet", dim, metric, n_classes, n_outputs, backend, capacity_hint,
                                  queue_capacity, cpu_threads, publish_threads, attribute_words);
             const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
             py::gil_scoped_release nogil;
             return std::make_unique<DistributedReferenceSet>(comm, c);
           }),
           py::arg("comm"), py::arg("dim"), py::arg("metric"), py::arg("n_classes"), py::arg("n_outputs"),
           py::arg("backend"), py::arg("capacity_hint"), py::arg("queue_capacity"), py::arg("cpu_threads"),
           py::arg("publish_threads"), py::arg("attribute_words"))
      .def_static("load", [](std::int64_t fortran_comm, const std::string& path, const std::string& backend) {
        LoadOptions options;
        if (backend != "saved") options.backend = parse_backend(backend);
        const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
        py::gil_scoped_release nogil;
        return std::make_unique<DistributedReferenceSet>(DistributedReferenceSet::load(comm, path, options));
      })
      .def("push", [](DistributedReferenceSet& s, const std::string& kind, py::handle ids_object, py::handle vectors_object,
                      py::handle targets, py::handle attributes) {
        const std::string call = "DistributedReferenceSet." + kind;
        const Ids ids = Ids::ensure(ids_object);
        if (!ids || ids.ndim() != 1) throw InvalidArgument(call + ": ids must be a 1-D array");
        std::optional<Floats> vectors, values;
        std::optional<Labels> labels;
        std::optional<sp::AttrRows> words;
        if (kind == "insert" || kind == "move") vectors = rows_of(vectors_object, s.config().dim, "vectors");
        if (!attributes.is_none() || kind == "set_attributes") {
          words = sp::as_attributes(attributes, s.config().attribute_words, call.c_str());
        }
        const std::vector<Update> batch = batch_of(s, kind, ids, vectors, targets, values, labels, words);
        py::gil_scoped_release nogil;
        s.push(batch);
        return batch.size();
      })
      .def("publish", [](DistributedReferenceSet& s) {
        PublishReport r;
        {
          py::gil_scoped_release nogil;
          r = s.publish();
        }
        return report_dict(r);
      })
      .def("search", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, py::handle visible,
                        py::handle where) {
        const QueryBatch b = query_batch(s, queries, visible, where, "DistributedReferenceSet.search");
        Neighbors r;
        {
          py::gil_scoped_release nogil;
          r = s.search(b.data(), k, b.ranges, b.where);
        }
        b.raise_refusal();
        return sp::neighbors_tuple(std::move(r), b.rows, k);
      })
      .def("search_within", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, double radius,
                               py::handle visible, py::handle where) {
        const QueryBatch b = query_batch(s, queries, visible, where, "DistributedReferenceSet.search_within");
        Neighbors r;
        {
          py::gil_scoped_release nogil;
          r = s.search_within(b.data(), k, radius, b.ranges, b.where);
        }
        b.raise_refusal();
        return sp::neighbors_tuple(std::move(r), b.rows, k);
      })
      .def("radius_search", [](DistributedReferenceSet& s, py::handle queries, double radius,
                               std::optional<std::size_t> max_results, py::handle visible, py::handle where) {
        const QueryBatch b = query_batch(s, queries, visible, where, "DistributedReferenceSet.radius_search");
        RadiusNeighbors r;
        {
          py::gil_scoped_release nogil;
          r = s.radius_search(b.data(), radius, max_results.value_or(kNoLimit), b.ranges, b.where);
        }
        b.raise_refusal();
        return sp::radius_tuple(std::move(r));
      })
      .def("classify", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, const std::string& weights,
                          bool probabilities, py::handle visible) {
        const QueryBatch b = query_batch(s, queries, visible, py::none(), "DistributedReferenceSet.classify");
        const Weights w = parse_weights(weights);
        ClassPredictions p;
        {
          py::gil_scoped_release nogil;
          p = s.classify(b.data(), k, w, probabilities, b.ranges);
        }
        b.raise_refusal();
        const auto n = py::ssize_t(b.rows);
        py::object proba = py::none();
        if (probabilities) proba = sp::adopt(std::move(p.probabilities), {n, py::ssize_t(p.num_classes)});
        return py::make_tuple(sp::adopt(std::move(p.labels), {n}), proba, p.epoch);
      })
      .def("regress", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, const std::string& aggregate,
                         py::handle visible) {
        const QueryBatch b = query_batch(s, queries, visible, py::none(), "DistributedReferenceSet.regress");
        const RegressionAggregate a = parse_regression_aggregate(aggregate);
        RegressionPredictions p;
        {
          py::gil_scoped_release nogil;
          p = s.regress(b.data(), k, a, b.ranges);
        }
        b.raise_refusal();
        return py::make_tuple(sp::adopt(std::move(p.values), {py::ssize_t(b.rows), py::ssize_t(p.num_outputs)}), p.epoch);
      })
      .def("save", [](DistributedReferenceSet& s, const std::string& path) {
        py::gil_scoped_release nogil;
        s.save(path);
      })
      .def_property_readonly("rank", &DistributedReferenceSet::rank)
      .def_property_readonly("ranks", &DistributedReferenceSet::ranks)
      .def_property_readonly("epoch", &DistributedReferenceSet::epoch)
      .def_property_readonly("size", &DistributedReferenceSet::size)
      .def_property_readonly("pending", &DistributedReferenceSet::pending)
      .def_property_readonly("dim", [](const DistributedReferenceSet& s) { return s.config().dim; })
      .def_property_readonly("attribute_words", [](const DistributedReferenceSet& s) { return s.config().attribute_words; })
      .def_property_readonly("shard_size", [](const DistributedReferenceSet& s) { return s.shard().size(); })
      .def_property_readonly("backend_name", [](const DistributedReferenceSet& s) { return s.shard().backend_name(); });
}
