// streamknn._streamknn: the extension module. Exceptions, array conversions, module attributes.
#include <algorithm>
#include <iterator>
#include <limits>

#include "common.hpp"
#include "errors.hpp"

namespace streamknn::python {

namespace {

const char* const kModule = "streamknn._streamknn";

py::object new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = message("streamknn.", name);
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  py::object object = py::reinterpret_steal<py::object>(type);
  m.add_object(name, object);
  return object;
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

}  // namespace

void bind_errors(py::module_& m) {
  py::handle runtime_error(PyExc_RuntimeError), value_error(PyExc_ValueError), memory_error(PyExc_MemoryError);
  py::object error = new_exception(m, "Error", py::make_tuple(runtime_error),
                                   "Base of every error streamknn raises (a RuntimeError).");
  new_exception(m, "InvalidArgument", py::make_tuple(error, value_error),
                "A caller-supplied value is out of range or malformed (also a ValueError).");
  new_exception(m, "QueueFull", py::make_tuple(error),
                "The update queue is full and the batch push was asked not to wait or publish "
                "(on_full='raise'). Attribute `queued`: rows of the batch that were queued.");
  new_exception(m, "OutOfMemory", py::make_tuple(error, memory_error),
                "Host or device memory could not be allocated; the store keeps its last valid state "
                "(also a MemoryError).");
  new_exception(m, "BackendUnavailable", py::make_tuple(error),
                "The requested backend cannot run here (no CUDA device, or built without CUDA).");
  new_exception(m, "CudaError", py::make_tuple(error), "A CUDA runtime call failed.");
  new_exception(m, "CheckpointError", py::make_tuple(error),
                "A checkpoint or journal could not be written, or read back (truncated, corrupted, another "
                "format version or byte order); the message names the file, the section and the byte offset.");

  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const BatchQueueFull& e) {
      py::object type = py::module_::import(kModule).attr("QueueFull");
      py::object instance = type(e.what());
      instance.attr("queued") = e.queued();
      PyErr_SetObject(type.ptr(), instance.ptr());
    } catch (...) {
      translate_library_errors(std::current_exception());
    }
  });
}

OnFull parse_on_full(const std::string& name, const char* call) {
  if (name == "publish") return OnFull::Publish;
  if (name == "wait") return OnFull::Wait;
  if (name == "raise") return OnFull::Raise;
  fail_argument(call, ": unknown on_full '", name, "' (choose publish, wait or raise)");
}

IdArray as_ids(py::handle object, int ndim, std::size_t columns, const char* call, const char* what) {
  py::array a = py::array::ensure(object);
  if (!a) throw py::type_error(message(call, ": ", what, " must be an array of integers"));
  if (a.ndim() != ndim || (ndim == 2 && static_cast<std::size_t>(a.shape(1)) != columns)) {
    std::string shape;
    for (py::ssize_t d = 0; d < a.ndim(); ++d) shape += message(d ? ", " : "", a.shape(d));
    if (ndim == 1) fail_argument(call, ": ", what, " must be 1-D, got shape (", shape, ")");
    fail_argument(call, ": ", what, " must have shape (n, ", columns, "), got (", shape, ")");
  }
  IdArray out;
  out.rows = ndim == 0 ? 1 : static_cast<std::size_t>(a.shape(0));
  const char kind = a.dtype().kind();
  if (a.size() == 0) {  // an empty list converts to float64: nothing to check
    out.keep = py::array_t<std::uint64_t>(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
  } else if (kind == 'u') {
    out.keep = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  } else if (kind == 'i') {
    auto signed_ids = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const std::int64_t* p = signed_ids.data();
    const auto n = static_cast<std::size_t>(signed_ids.size());
    const auto bad = std::find_if(p, p + n, [](std::int64_t v) { return v < 0; });
    if (bad != p + n) {
      const std::size_t at = static_cast<std::size_t>(bad - p);
      if (ndim == 2) fail_argument(call, ": ", what, "[", at / columns, ", ", at % columns, "] = ", *bad, " is negative");
      fail_argument(call, ": ", what, "[", at, "] = ", *bad, " is negative (ids are unsigned 64-bit)");
    }
    out.keep = signed_ids;  // non-negative int64 has the bits of the same uint64
  } else {
    throw py::type_error(message(call, ": ", what, " must hold integers, got dtype ", dtype_name(a)));
  }
  out.data = static_cast<const PointId*>(out.keep.data());
  return out;
}

bool is_device_array(py::handle object) {
  if (py::isinstance<py::array>(object) || !py::hasattr(object, "__dlpack_device__")) return false;
  return py::module_::import("streamknn._arrays").attr("on_device")(object).cast<bool>();
}

FloatRows as_float_rows(py::handle object, std::size_t cols, bool allow_column, const char* call, const char* what) {
  py::object source = py::reinterpret_borrow<py::object>(object);
  if (!py::isinstance<py::array>(object) && py::hasattr(object, "__dlpack__")) {
    // A host DLPack array (a CPU tensor, ...): viewed in place where its layout allows; one that
    // cannot be exported (e.g. a tensor that requires grad) goes through __array__ below.
    try {
      source = py::module_::import("numpy").attr("from_dlpack")(object);
    } catch (const py::error_already_set&) {
    }
  }
  py::array a = py::array::ensure(source);
  if (!a) throw py::type_error(message(call, ": ", what, " must be an array of numbers"));
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b' && a.size() != 0) {
    throw py::type_error(message(call, ": ", what, " must hold real numbers, got dtype ", dtype_name(a)));
  }
  std::size_t rows = 0, have_cols = 0;
  if (a.ndim() == 2) {
    rows = static_cast<std::size_t>(a.shape(0));
    have_cols = static_cast<std::size_t>(a.shape(1));
  } else if (a.ndim() == 1 && allow_column) {
    rows = static_cast<std::size_t>(a.shape(0));
    have_cols = 1;
  } else {
    fail_argument(call, ": ", what, " must be 2-D (n, ", cols, "), got a ", a.ndim(), "-D array");
  }
  if (have_cols != cols) {
    fail_argument(call, ": ", what, " has ", have_cols, " columns but the store expects ", cols);
  }
  FloatRows out;
  out.keep = FloatArray::ensure(a);
  if (!out.keep) throw py::error_already_set();
  out.data = out.keep.data();
  out.rows = rows;
  out.cols = cols;
  return out;
}

namespace {
/// A forward iterator over elements of type T at a byte stride, read as floats: a row of a NumPy
/// array of any layout, appended to a vector by insert() without a zero fill first.
template <class T>
struct StridedFloats {
  using iterator_category = std::forward_iterator_tag;
  using value_type = float;
  using difference_type = std::ptrdiff_t;
  using pointer = const float*;
  using reference = float;
  const char* at = nullptr;
  py::ssize_t step = 0;
  float operator*() const { return static_cast<float>(*reinterpret_cast<const T*>(at)); }
  StridedFloats& operator++() {
    at += step;
    return *this;
  }
  StridedFloats operator++(int) {
    StridedFloats before = *this;
    at += step;
    return before;
  }
  bool operator==(const StridedFloats& other) const { return at == other.at; }
};

/// rows x cols of T at byte strides (row_step, col_step) appended to out as float32 rows.
template <class T>
void append_rows(const char* base, py::ssize_t row_step, py::ssize_t col_step, std::size_t rows, std::size_t cols,
                 std::vector<float>& out) {
  if (col_step == py::ssize_t(sizeof(T)) && row_step == py::ssize_t(cols * sizeof(T))) {  // C order: one loop
    const T* first = reinterpret_cast<const T*>(base);
    out.insert(out.end(), first, first + rows * cols);
    return;
  }
  for (std::size_t i = 0; i < rows; ++i) {
    const char* row = base + py::ssize_t(i) * row_step;
    if (col_step == py::ssize_t(sizeof(T))) {  // contiguous: a plain loop the compiler vectorises
      const T* first = reinterpret_cast<const T*>(row);
      out.insert(out.end(), first, first + cols);
    } else {
      out.insert(out.end(), StridedFloats<T>{row, col_step}, StridedFloats<T>{row + py::ssize_t(cols) * col_step, col_step});
    }
  }
}
}  // namespace

std::optional<std::vector<float>> owned_float_rows(py::handle object, std::size_t cols) {
  if (!py::isinstance<py::array>(object)) return std::nullopt;
  const py::array a = py::reinterpret_borrow<py::array>(object);
  if (a.ndim() != 2 || std::size_t(a.shape(1)) != cols) return std::nullopt;
  const bool f32 = a.dtype().is(py::dtype::of<float>()), f64 = a.dtype().is(py::dtype::of<double>());
  if (!(f32 || f64) || (f32 && (a.flags() & py::array::c_style))) return std::nullopt;
  if (!a.dtype().attr("isnative").cast<bool>()) return std::nullopt;  // byte-swapped: numpy converts
  const std::size_t rows = std::size_t(a.shape(0));
  std::vector<float> out;
  out.reserve(rows * cols);  // appended row by row: written once, never zero-filled first
  const char* base = static_cast<const char*>(a.data());
  if (f64) {
    append_rows<double>(base, a.strides(0), a.strides(1), rows, cols, out);
  } else {
    append_rows<float>(base, a.strides(0), a.strides(1), rows, cols, out);
  }
  return out;
}

LabelArray as_labels(py::handle object, const char* call) {
  py::array a = py::array::ensure(object);
  if (!a) throw py::type_error(message(call, ": labels must be an array of integers"));
  if (a.ndim() != 1) fail_argument(call, ": labels must be 1-D, got a ", a.ndim(), "-D array");
  const char kind = a.dtype().kind();
  if (a.size() != 0 && kind != 'i' && kind != 'u' && kind != 'b') {
    throw py::type_error(message(call, ": labels must be integers 0..n_classes-1, got dtype ", dtype_name(a)));
  }
  LabelArray out;
  out.keep = decltype(out.keep)::ensure(a);
  if (!out.keep) throw py::error_already_set();
  out.data = out.keep.data();
  out.rows = static_cast<std::size_t>(a.shape(0));
  return out;
}

std::vector<IdRange> as_ranges(py::handle object, std::size_t num_queries, const char* call) {
  std::vector<IdRange> ranges;
  if (object.is_none()) return ranges;
  const IdArray a = as_ids(object, 2, 2, call, "visible");
  if (a.rows != num_queries) {
    fail_argument(call, ": visible has ", a.rows, " ranges for ", num_queries, " queries (give one per query or None)");
  }
  ranges.resize(a.rows);
  for (std::size_t q = 0; q < a.rows; ++q) ranges[q] = IdRange{a.data[2 * q], a.data[2 * q + 1]};
  return ranges;
}

}  // namespace streamknn::python

PYBIND11_MODULE(_streamknn, m) {
  namespace sp = streamknn::python;
  m.doc() =
      "streamknn._streamknn: thin bindings of the streamknn C++ library (exact k-NN over a reference "
      "set that changes while it is queried). Import the package `streamknn`, not this module.";
  sp::bind_errors(m);
  sp::bind_reference_set(m);
  sp::bind_models(m);
  sp::bind_checkpoint(m);
  sp::bind_kmeans(m);
  m.def("cuda_available", &streamknn::cuda_available,
        "True when this build has the CUDA backend and a CUDA device is usable.");
  m.attr("__version__") = streamknn::version_string();
  m.attr("built_with_cuda") = streamknn::kBuiltWithCuda;
  m.attr("max_k") = streamknn::kMaxK;
  m.attr("max_cpu_threads") = streamknn::kMaxCpuThreads;
  m.attr("invalid_id") = pybind11::int_(streamknn::kInvalidId);
  m.attr("earth_radius_metres") = streamknn::kEarthRadiusMetres;
}
