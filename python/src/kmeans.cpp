// streamknn._streamknn.kmeans_fit / kmeans_fit_device / kmeans_fit_set / kmeans_predict: thin bindings of
// streamknn::KMeans (streamknn/kmeans.hpp); the scikit-learn estimator is python/streamknn/_kmeans.py.
#include <functional>
#include <memory>

#include "common.hpp"
#include "streamknn/kmeans.hpp"

namespace streamknn::python {

namespace {

/// KMeansConfig::on_iteration calling a Python callable with (start, iteration, changed, shift,
/// last), the GIL taken for the call (fits run with it released); None: no reports. An exception
/// the callable raises ends the fit and reaches its caller.
std::function<void(const KMeansIteration&)> iteration_hook(py::object on_iteration) {
  if (on_iteration.is_none()) return {};
  if (!PyCallable_Check(on_iteration.ptr())) fail_argument("kmeans: on_iteration must be callable or None");
  auto callable = std::make_shared<py::object>(std::move(on_iteration));
  return [callable](const KMeansIteration& it) {
    py::gil_scoped_acquire gil;
    (*callable)(it.start, it.iteration, it.changed, it.shift, it.last);
  };
}

KMeansConfig make_kmeans(std::size_t clusters, std::size_t max_iter, double tol, std::size_t n_init,
                         const std::string& init, py::handle init_centroids, std::uint64_t seed,
                         const std::string& backend, std::size_t cpu_threads, int cuda_device,
                         py::object on_iteration = py::none()) {
  KMeansConfig c;
  c.on_iteration = iteration_hook(std::move(on_iteration));
  c.clusters = clusters;
  c.max_iter = max_iter;
  c.tol = tol;
  c.n_init = n_init;
  c.seed = seed;
  c.cpu_threads = cpu_threads;
  c.cuda_device = cuda_device;
  if (init == "k-means++") {
    c.init = KMeansInit::KMeansPlusPlus;
  } else if (init == "random") {
    c.init = KMeansInit::Random;
  } else if (init == "given") {
    c.init = KMeansInit::Given;
  } else {
    fail_argument("kmeans: unknown init '", init, "' (choose k-means++, random or given)");
  }
  if (!init_centroids.is_none()) {
    py::array a = py::array::ensure(init_centroids);
    if (!a || a.ndim() != 2) fail_argument("kmeans: init_centroids must be a 2-D array (clusters, dim)");
    const FloatRows rows = as_float_rows(a, static_cast<std::size_t>(a.shape(1)), false, "kmeans", "init_centroids");
    c.initial_centroids.assign(rows.data, rows.data + rows.rows * rows.cols);
  }
  c.backend = parse_backend(backend);
  return c;
}

py::tuple result_tuple(KMeansResult&& r) {
  const auto k = static_cast<py::ssize_t>(r.clusters), d = static_cast<py::ssize_t>(r.dim);
  const auto n = static_cast<py::ssize_t>(r.labels.size());
  std::vector<std::int32_t> labels(r.labels.begin(), r.labels.end());
  py::object ids = py::none();
  if (!r.ids.empty()) ids = adopt(std::move(r.ids), {n});
  return py::make_tuple(adopt(std::move(r.centroids), {k, d}), adopt(std::move(labels), {n}), r.inertia,
                        r.iterations, r.converged, std::string(to_string(r.backend)), ids, r.epoch);
}

}  // namespace

void bind_kmeans(py::module_& m) {
  m.def(
      "kmeans_fit",
      [](py::handle points, std::size_t n_clusters, std::size_t max_iter, double tol, std::size_t n_init,
         const std::string& init, py::handle init_centroids, std::uint64_t seed, const std::string& backend,
         std::size_t cpu_threads, int cuda_device, py::object on_iteration) {
        py::array a = py::array::ensure(points);
        if (!a || a.ndim() != 2) fail_argument("kmeans_fit: points must be a 2-D array (n, dim)");
        const FloatRows rows = as_float_rows(a, static_cast<std::size_t>(a.shape(1)), false, "kmeans_fit", "points");
        const KMeans km(make_kmeans(n_clusters, max_iter, tol, n_init, init, init_centroids, seed, backend,
                                    cpu_threads, cuda_device, std::move(on_iteration)));
        KMeansResult r;
        {
          py::gil_scoped_release release;
          r = km.fit(std::span<const float>(rows.data, rows.rows * rows.cols), rows.cols);
        }
        return result_tuple(std::move(r));
      },
      py::arg("points"), py::arg("n_clusters"), py::arg("max_iter") = 300, py::arg("tol") = 1e-4,
      py::arg("n_init") = 1, py::arg("init") = "k-means++", py::arg("init_centroids") = py::none(),
      py::arg("seed") = 0, py::arg("backend") = "auto", py::arg("cpu_threads") = 0, py::arg("cuda_device") = 0,
      py::arg("on_iteration") = py::none(),
      "Exact K-means (streamknn::KMeans::fit): returns (centroids float32 (k, d), labels int32 (n), inertia, "
      "n_iter, converged, backend, None, 0). on_iteration, if given, is called after every Lloyd iteration "
      "with (start, iteration, labels changed, squared centroid shift, last).");
  m.def(
      "kmeans_fit_device",
      [](std::uintptr_t points, std::size_t n, std::size_t dim, std::uintptr_t stream, std::size_t n_clusters,
         std::size_t max_iter, double tol, std::size_t n_init, const std::string& init, py::handle init_centroids,
         std::uint64_t seed, const std::string& backend, std::size_t cpu_threads, int cuda_device,
         py::object on_iteration) {
        const KMeans km(make_kmeans(n_clusters, max_iter, tol, n_init, init, init_centroids, seed, backend,
                                    cpu_threads, cuda_device, std::move(on_iteration)));
        KMeansResult r;
        {
          py::gil_scoped_release release;
          r = km.fit_device(reinterpret_cast<const float*>(points), n, dim, stream);
        }
        return result_tuple(std::move(r));
      },
      py::arg("points"), py::arg("n"), py::arg("dim"), py::arg("stream"), py::arg("n_clusters"),
      py::arg("max_iter") = 300, py::arg("tol") = 1e-4, py::arg("n_init") = 1, py::arg("init") = "k-means++",
      py::arg("init_centroids") = py::none(), py::arg("seed") = 0, py::arg("backend") = "auto",
      py::arg("cpu_threads") = 0, py::arg("cuda_device") = 0, py::arg("on_iteration") = py::none(),
      "K-means of n x dim contiguous float32 rows at a CUDA device pointer (streamknn::KMeans::fit_device), "
      "after the work queued on `stream` (a cudaStream_t): returns what kmeans_fit returns.");
  m.def(
      "kmeans_fit_set",
      [](const Store& store, std::size_t n_clusters, std::size_t max_iter, double tol, std::size_t n_init,
         const std::string& init, py::handle init_centroids, std::uint64_t seed, const std::string& backend,
         std::size_t cpu_threads, int cuda_device, py::object on_iteration) {
        const KMeans km(make_kmeans(n_clusters, max_iter, tol, n_init, init, init_centroids, seed, backend,
                                    cpu_threads, cuda_device, std::move(on_iteration)));
        KMeansResult r;
        {
          py::gil_scoped_release release;
          r = km.fit(store.set());
        }
        return result_tuple(std::move(r));
      },
      py::arg("store"), py::arg("n_clusters"), py::arg("max_iter") = 300, py::arg("tol") = 1e-4,
      py::arg("n_init") = 1, py::arg("init") = "k-means++", py::arg("init_centroids") = py::none(),
      py::arg("seed") = 0, py::arg("backend") = "auto", py::arg("cpu_threads") = 0, py::arg("cuda_device") = 0,
      py::arg("on_iteration") = py::none(),
      "K-means over a ReferenceSet's published snapshot: as kmeans_fit, plus the ids of the labelled points "
      "and the snapshot's epoch.");
  m.def(
      "kmeans_predict",
      [](py::handle centroids, py::handle points, const std::string& backend, std::size_t cpu_threads,
         int cuda_device) {
        py::array c = py::array::ensure(centroids);
        if (!c || c.ndim() != 2) fail_argument("kmeans_predict: centroids must be a 2-D array (k, dim)");
        const std::size_t d = static_cast<std::size_t>(c.shape(1));
        const FloatRows cr = as_float_rows(c, d, false, "kmeans_predict", "centroids");
        const FloatRows pr = as_float_rows(points, d, false, "kmeans_predict", "points");
        const KMeans km(make_kmeans(cr.rows, 1, 0, 1, "k-means++", py::none(), 0, backend, cpu_threads, cuda_device));
        std::vector<std::uint32_t> labels;
        {
          py::gil_scoped_release release;
          labels = km.predict(std::span<const float>(cr.data, cr.rows * d), std::span<const float>(pr.data, pr.rows * d), d);
        }
        std::vector<std::int32_t> out(labels.begin(), labels.end());
        const auto n = static_cast<py::ssize_t>(out.size());
        return adopt(std::move(out), {n});
      },
      py::arg("centroids"), py::arg("points"), py::arg("backend") = "auto", py::arg("cpu_threads") = 0,
      py::arg("cuda_device") = 0, "The exact nearest centroid of each point, by (distance, index): int32 (n).");
}

}  // namespace streamknn::python
