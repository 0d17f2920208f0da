// Bindings of checkpoints and the journal (streamknn/checkpoint.hpp, docs/durability.md):
// ReferenceSet.save / to_bytes / load / from_bytes / open_journal / close_journal / load_report.
// File and buffer I/O runs with the GIL released.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "common.hpp"
#include "store_config.hpp"

namespace streamknn::python {

namespace {

/// The CUDA backend's options a load may set (not recorded in checkpoints; None: the defaults).
struct DeviceOptions {
  std::optional<std::string> spatial_index, reduced_screen, reduced_format;
};

LoadOptions options_of(const char* caller, const std::optional<std::string>& backend, std::optional<int> cuda_device,
                       std::optional<std::size_t> cpu_threads, std::optional<std::size_t> publish_threads,
                       std::optional<std::size_t> queue_capacity, const std::optional<std::string>& journal,
                       const DeviceOptions& device) {
  LoadOptions o;
  if (backend) o.backend = parse_backend(*backend);
  o.cuda_device = cuda_device;
  o.cpu_threads = cpu_threads;
  o.publish_threads = publish_threads;
  o.queue_capacity = queue_capacity;
  if (journal) o.journal = *journal;
  if (device.spatial_index) o.spatial_index = parse_spatial_index(caller, *device.spatial_index);
  if (device.reduced_screen) o.reduced_screen = parse_reduced_screen(caller, *device.reduced_screen);
  if (device.reduced_format) o.reduced_format = parse_reduced_format(caller, *device.reduced_format);
  return o;
}

py::dict report_dict(const LoadReport& r) {
  py::dict d;
  d["checkpoint_epoch"] = r.checkpoint_epoch;
  d["epoch"] = r.epoch;
  d["replayed"] = r.replayed;
  d["skipped"] = r.skipped;
  d["torn"] = r.torn;
  return d;
}

std::unique_ptr<Store> loaded(ReferenceSet&& set, const LoadReport& report) {
  auto store = std::make_unique<Store>(std::move(set));
  store->load_report = report;
  return store;
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Store>>(m.attr("ReferenceSet"));
  cls.def(
         "save",
         [](const Store& s, const std::string& path) {
           py::gil_scoped_release nogil;
           s.set().save(path);
         },
         py::arg("path"),
         "Writes the published snapshot (one epoch) to path atomically: a temporary file beside it,\n"
         "fsync, rename, fsync of the folder (docs/durability.md). Restarts an open journal after it.")
      .def(
          "to_bytes",
          [](const Store& s) {
            std::vector<std::byte> bytes;
            {
              py::gil_scoped_release nogil;
              bytes = s.set().save_bytes();
            }
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          "The checkpoint of the published snapshot as bytes (what pickles hold).")
      .def_static(
          "load",
          [](const std::string& path, std::optional<std::string> backend, std::optional<int> cuda_device,
             std::optional<std::size_t> cpu_threads, std::optional<std::size_t> publish_threads,
             std::optional<std::size_t> queue_capacity, std::optional<std::string> journal,
             std::optional<std::string> spatial_index, std::optional<std::string> reduced_screen,
             std::optional<std::string> reduced_format) {
            const LoadOptions o = options_of("ReferenceSet.load", backend, cuda_device, cpu_threads, publish_threads,
                                             queue_capacity, journal, {spatial_index, reduced_screen, reduced_format});
            LoadReport report;
            py::gil_scoped_release nogil;
            ReferenceSet set = ReferenceSet::load(path, o, &report);
            return loaded(std::move(set), report);
          },
          py::arg("path"), py::kw_only(), py::arg("backend") = py::none(), py::arg("cuda_device") = py::none(),
          py::arg("cpu_threads") = py::none(), py::arg("publish_threads") = py::none(),
          py::arg("queue_capacity") = py::none(), py::arg("journal") = py::none(),
          py::arg("spatial_index") = py::none(), py::arg("reduced_screen") = py::none(),
          py::arg("reduced_format") = py::none(),
          "A store saved by save(), rebuilt at its epoch with identical answers. Keyword arguments left\n"
          "None keep the saved setting; journal: replay that journal past the checkpoint's epoch\n"
          "(see load_report). spatial_index, reduced_screen, reduced_format: as for ReferenceSet(...)\n"
          "(checkpoints do not record them; None: 'auto', 'auto', 'float16'). Raises\n"
          "streamknn.CheckpointError naming the file, section and offset.")
      .def_static(
          "from_bytes",
          [](py::bytes data, std::optional<std::string> backend, std::optional<int> cuda_device,
             std::optional<std::size_t> cpu_threads, std::optional<std::string> spatial_index,
             std::optional<std::string> reduced_screen, std::optional<std::string> reduced_format) {
            const LoadOptions o = options_of("ReferenceSet.from_bytes", backend, cuda_device, cpu_threads, std::nullopt,
                                             std::nullopt, std::nullopt, {spatial_index, reduced_screen, reduced_format});
            const std::string_view view = data;
            LoadReport report;
            py::gil_scoped_release nogil;
            ReferenceSet set = ReferenceSet::load_bytes(std::as_bytes(std::span(view.data(), view.size())), o, &report);
            return loaded(std::move(set), report);
          },
          py::arg("data"), py::kw_only(), py::arg("backend") = py::none(), py::arg("cuda_device") = py::none(),
          py::arg("cpu_threads") = py::none(), py::arg("spatial_index") = py::none(),
          py::arg("reduced_screen") = py::none(), py::arg("reduced_format") = py::none(),
          "A store from to_bytes() output (see load).")
      .def(
          "open_journal",
          [](Store& s, const std::string& path, bool sync_each_publish) {
            py::gil_scoped_release nogil;
            s.set().open_journal(path, {.sync_each_publish = sync_each_publish});
          },
          py::arg("path"), py::kw_only(), py::arg("sync_each_publish") = true,
          "From now on every publish that changes the store appends what it wrote to the journal at\n"
          "path (fdatasync each time unless sync_each_publish=False). Continues a journal that ends at\n"
          "this store's epoch; starts a missing one.")
      .def("close_journal", [](Store& s) { s.set().close_journal(); })
      .def_property_readonly(
          "load_report",
          [](const Store& s) -> py::object {
            if (!s.load_report) return py::none();
            return report_dict(*s.load_report);
          },
          "For a store made by load / from_bytes: {checkpoint_epoch, epoch, replayed, skipped, torn}.");
}

}  // namespace streamknn::python
