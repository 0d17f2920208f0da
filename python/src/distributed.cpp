// streamknn._streamknn_mpi: bindings of streamknn::DistributedReferenceSet (built where streamknn
// was built with MPI). The Python class streamknn.DistributedReferenceSet (_distributed.py) wraps
// it and takes an mpi4py communicator; this module takes the communicator's Fortran handle
// (comm.py2f()), so it needs no mpi4py headers. Every call that talks to other ranks releases the
// GIL. Errors become the exception types of streamknn._streamknn.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamknn/distributed_reference_set.hpp"

namespace py = pybind11;
using namespace streamknn;

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Ids = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>;
using Labels = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

template <class T>
py::array_t<T> to_array(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), free_when_done);
}

BackendKind parse_backend(const std::string& name) {
  if (name == "auto") return BackendKind::Auto;
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "cuda") return BackendKind::Cuda;
  throw InvalidArgument("DistributedReferenceSet: unknown backend '" + name + "' (choose auto, cpu or cuda)");
}

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

/// One batch of updates of one kind, as views of the arrays (kept alive by the caller).
std::vector<Update> batch_of(const DistributedReferenceSet& s, const std::string& kind, const Ids& ids,
                             const std::optional<Floats>& vectors, py::handle targets, std::optional<Floats>& values,
                             std::optional<Labels>& labels) {
  const StoreConfig& c = s.config();
  const std::size_t n = std::size_t(ids.size());
  const bool wants_target = kind == "set_target" || (kind == "insert" && c.target.kind != TargetSpec::Kind::None);
  if (wants_target && targets.is_none()) throw InvalidArgument("DistributedReferenceSet." + kind + ": targets are required");
  if (wants_target && c.target.kind == TargetSpec::Kind::Classes) labels = Labels::ensure(targets);
  if (wants_target && c.target.kind == TargetSpec::Kind::Outputs) values = rows_of(targets, c.target.count, "targets");
  if ((vectors && std::size_t(vectors->shape(0)) != n) || (labels && std::size_t(labels->size()) != n) ||
      (values && std::size_t(values->shape(0)) != n)) {
    throw InvalidArgument("DistributedReferenceSet." + kind + ": ids, vectors and targets must have as many rows");
  }
  std::vector<Update> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const PointId id = ids.data()[i];
    const std::span<const float> v = vectors ? std::span<const float>(vectors->data() + i * c.dim, c.dim)
                                             : std::span<const float>();
    const std::size_t t = c.target.count;
    if (kind == "insert") {
      out.push_back(labels ? Update::insert(id, v, std::int32_t(labels->data()[i]))
                    : values ? Update::insert(id, v, {values->data() + i * t, t}) : Update::insert(id, v));
    } else if (kind == "move") {
      out.push_back(Update::move(id, v));
    } else if (kind == "erase") {
      out.push_back(Update::erase(id));
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
  d["size"] = r.size;
  py::list rejected;
  for (const Rejection& j : r.rejected) rejected.append(py::make_tuple(j.id, to_string(j.kind), to_string(j.reason)));
  d["rejected"] = rejected;
  return d;
}

void raise(const char* type_name, const char* text) {
  py::object type = py::module_::import("streamknn._streamknn").attr(type_name);
  PyErr_SetString(type.ptr(), text);
}

}  // namespace

PYBIND11_MODULE(_streamknn_mpi, m) {
  m.doc() = "streamknn._streamknn_mpi: the sharded store over MPI. Use streamknn.DistributedReferenceSet.";
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      raise("InvalidArgument", e.what());
    } catch (const OutOfMemory& e) {
      raise("OutOfMemory", e.what());
    } catch (const BackendUnavailable& e) {
      raise("BackendUnavailable", e.what());
    } catch (const CudaError& e) {
      raise("CudaError", e.what());
    } catch (const CheckpointError& e) {
      raise("CheckpointError", e.what());
    } catch (const Error& e) {
      raise("Error", e.what());
    }
  });
  m.def("shard_of", &shard_of, py::arg("id"), py::arg("ranks"), "The owner rank of id: splitmix64(id) % ranks.");

  py::class_<DistributedReferenceSet>(m, "Store")
      .def(py::init([](std::int64_t fortran_comm, std::size_t dim, const std::string& metric,
                       std::optional<std::uint32_t> n_classes, std::optional<std::uint32_t> n_outputs,
                       const std::string& backend, std::size_t capacity_hint, std::size_t queue_capacity,
                       std::size_t cpu_threads, std::size_t publish_threads) {
             StoreConfig c;
             c.dim = dim;
             c.metric = parse_metric(metric);
             if (n_classes && n_outputs) throw InvalidArgument("DistributedReferenceSet: give n_classes or n_outputs, not both");
             if (n_classes) c.target = TargetSpec::classes(*n_classes);
             if (n_outputs) c.target = TargetSpec::outputs(*n_outputs);
             c.backend = parse_backend(backend);
             c.capacity_hint = capacity_hint;
             c.queue_capacity = queue_capacity;
             c.cpu_threads = cpu_threads;
             c.publish_threads = publish_threads;
             const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
             py::gil_scoped_release nogil;
             return std::make_unique<DistributedReferenceSet>(comm, c);
           }),
           py::arg("comm"), py::arg("dim"), py::arg("metric"), py::arg("n_classes"), py::arg("n_outputs"),
           py::arg("backend"), py::arg("capacity_hint"), py::arg("queue_capacity"), py::arg("cpu_threads"),
           py::arg("publish_threads"))
      .def_static("load", [](std::int64_t fortran_comm, const std::string& path, const std::string& backend) {
        LoadOptions options;
        if (backend != "saved") options.backend = parse_backend(backend);
        const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
        py::gil_scoped_release nogil;
        return std::make_unique<DistributedReferenceSet>(DistributedReferenceSet::load(comm, path, options));
      })
      .def("push", [](DistributedReferenceSet& s, const std::string& kind, py::handle ids_object, py::handle vectors_object,
                      py::handle targets) {
        const Ids ids = Ids::ensure(ids_object);
        if (!ids || ids.ndim() != 1) throw InvalidArgument("DistributedReferenceSet." + kind + ": ids must be a 1-D array");
        std::optional<Floats> vectors, values;
        std::optional<Labels> labels;
        if (kind == "insert" || kind == "move") vectors = rows_of(vectors_object, s.config().dim, "vectors");
        const std::vector<Update> batch = batch_of(s, kind, ids, vectors, targets, values, labels);
        py::gil_scoped_release nogil;
        s.push(batch);
      })
      .def("publish", [](DistributedReferenceSet& s) {
        PublishReport r;
        {
          py::gil_scoped_release nogil;
          r = s.publish();
        }
        return report_dict(r);
      })
      .def("search", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, py::handle visible) {
        const Floats q = rows_of(queries, s.config().dim, "queries");
        const std::size_t n = q.ndim() == 2 ? std::size_t(q.shape(0)) : std::size_t(q.size());
        const std::vector<IdRange> ranges = ranges_of(visible, n);
        Neighbors r;
        {
          py::gil_scoped_release nogil;
          r = s.search({q.data(), std::size_t(q.size())}, k, ranges);
        }
        const std::vector<py::ssize_t> shape{py::ssize_t(n), py::ssize_t(k)};
        return py::make_tuple(to_array(std::move(r.distances), shape), to_array(std::move(r.ids), shape), r.epoch);
      })
      .def("classify", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, const std::string& weights,
                          bool probabilities, py::handle visible) {
        const Floats q = rows_of(queries, s.config().dim, "queries");
        const std::size_t n = q.ndim() == 2 ? std::size_t(q.shape(0)) : std::size_t(q.size());
        const std::vector<IdRange> ranges = ranges_of(visible, n);
        const Weights w = parse_weights(weights);
        ClassPredictions p;
        {
          py::gil_scoped_release nogil;
          p = s.classify({q.data(), std::size_t(q.size())}, k, w, probabilities, ranges);
        }
        py::object proba = py::none();
        if (probabilities) proba = to_array(std::move(p.probabilities), {py::ssize_t(n), py::ssize_t(p.num_classes)});
        return py::make_tuple(to_array(std::move(p.labels), {py::ssize_t(n)}), proba, p.epoch);
      })
      .def("regress", [](DistributedReferenceSet& s, py::handle queries, std::size_t k, const std::string& aggregate,
                         py::handle visible) {
        const Floats q = rows_of(queries, s.config().dim, "queries");
        const std::size_t n = q.ndim() == 2 ? std::size_t(q.shape(0)) : std::size_t(q.size());
        const std::vector<IdRange> ranges = ranges_of(visible, n);
        const RegressionAggregate a = parse_regression_aggregate(aggregate);
        RegressionPredictions p;
        {
          py::gil_scoped_release nogil;
          p = s.regress({q.data(), std::size_t(q.size())}, k, a, ranges);
        }
        return py::make_tuple(to_array(std::move(p.values), {py::ssize_t(n), py::ssize_t(p.num_outputs)}), p.epoch);
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
      .def_property_readonly("shard_size", [](const DistributedReferenceSet& s) { return s.shard().size(); })
      .def_property_readonly("backend_name", [](const DistributedReferenceSet& s) { return s.shard().backend_name(); });
}
