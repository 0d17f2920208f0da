// Shared pieces of the pybind11 bindings (streamknn._streamknn): NumPy conversions, the
// ReferenceSet holder, and the error type for a full queue during a batch push.
//
// Conventions:
//  * Inputs cross without a copy when they are already float32 / uint64 and C-contiguous; any
//    other layout or dtype is converted once (one copy) before the call. Results are returned
//    as NumPy arrays that adopt the library's result buffers (no copy).
//  * Conversions run with the GIL held; the library calls (pushes, publish, searches) run with
//    it released, so other Python threads keep running.
//  * No global state: exception types are looked up from the module when an error is raised.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "streamknn/streamknn.hpp"

namespace streamknn::python {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

template <class... Parts>
std::string message(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail_argument(Parts&&... parts) {
  throw InvalidArgument(message(std::forward<Parts>(parts)...));
}

/// Thrown by a batch push with on_full="raise": the first `queued` rows were queued, the rest
/// were not. Becomes streamknn.QueueFull with a `queued` attribute.
class BatchQueueFull : public QueueFull {
 public:
  BatchQueueFull(const std::string& message, std::size_t queued) : QueueFull(message), queued_(queued) {}
  std::size_t queued() const noexcept { return queued_; }

 private:
  std::size_t queued_;
};

/// What a batch push does when the update queue is full.
enum class OnFull : unsigned char {
  Publish,  ///< publish() and carry on (the report is folded into the next publish() result)
  Wait,     ///< block until another thread publishes (ReferenceSet::push)
  Raise,    ///< stop and raise streamknn.QueueFull naming how many rows were queued
};
OnFull parse_on_full(const std::string& name, const char* call);

/// The Python-side ReferenceSet: the library object plus the reports of the publishes that
/// batch pushes made on their own (on_full="publish"), returned with the next publish().
class Store {
 public:
  explicit Store(const StoreConfig& config) : set_(config) {}
  /// A store made by ReferenceSet::load / load_bytes (python/src/checkpoint.cpp).
  explicit Store(ReferenceSet&& set) : set_(std::move(set)) {}

  ReferenceSet& set() noexcept { return set_; }
  const ReferenceSet& set() const noexcept { return set_; }

  /// publish(), merged with the reports carried since the last call. Call without the GIL.
  PublishReport publish();
  /// Remembers the report of a publish made inside a batch push. Call without the GIL.
  void carry(PublishReport report);
  /// What load / from_bytes found (empty for a store made by the constructor).
  std::optional<LoadReport> load_report;

 private:
  ReferenceSet set_;
  std::mutex carried_mutex_;
  PublishReport carried_;
  bool has_carried_ = false;
};

/// A 1-D (or 2-D with `columns` columns) array of non-negative integers viewed as uint64.
struct IdArray {
  py::array keep;  ///< owns the data below
  const PointId* data = nullptr;
  std::size_t rows = 0;
};
IdArray as_ids(py::handle object, int ndim, std::size_t columns, const char* call, const char* what);

/// A float32 C-contiguous array of shape (rows, cols), converted once if needed. A 1-D input is
/// accepted as (rows, 1) only when allow_column is set.
struct FloatRows {
  FloatArray keep;
  const float* data = nullptr;
  std::size_t rows = 0, cols = 0;
};
FloatRows as_float_rows(py::handle object, std::size_t cols, bool allow_column, const char* call, const char* what);
/// A float32 or float64 NumPy array of shape (rows, cols) that is not float32 C-contiguous, as
/// float32 rows made in one pass (any order or strides), for a callee that takes the vector over
/// (ReferenceSet.from_points); nullopt for anything else (as_float_rows then reads or converts it).
std::optional<std::vector<float>> owned_float_rows(py::handle object, std::size_t cols);

/// Class labels as int32 (1-D, integer dtype), range-checked later.
struct LabelArray {
  py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> keep;
  const std::int64_t* data = nullptr;
  std::size_t rows = 0;
};
LabelArray as_labels(py::handle object, const char* call);

/// Optional per-query visibility ranges: None, or an (n_queries, 2) array of [begin, end).
std::vector<IdRange> as_ranges(py::handle object, std::size_t num_queries, const char* call);

/// True when `object` is a DLPack array in CUDA device memory (CuPy, PyTorch, ...): such queries
/// are handled by streamknn._arrays.device_call instead of being converted to NumPy.
bool is_device_array(py::handle object);

/// Routes self.method(queries, args...) through streamknn._arrays.device_call.
template <class... Args>
py::object device_call(py::handle self, const char* method, py::handle queries, Args&&... args) {
  return py::module_::import("streamknn._arrays")
      .attr("device_call")(self, method, queries, std::forward<Args>(args)...);
}

/// A NumPy array that takes ownership of `values` (no copy).
template <class T>
py::array_t<T> adopt(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::move(shape), owned->data(), owner);
}

/// Counts a call that ran on device pointers (the test hook _device_search_count).
void count_device_call() noexcept;

void bind_errors(py::module_& m);
void bind_reference_set(py::module_& m);
void bind_models(py::module_& m);
void bind_checkpoint(py::module_& m);
void bind_kmeans(py::module_& m);

}  // namespace streamknn::python
