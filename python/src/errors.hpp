// The library's exceptions as Python's: streamknn.InvalidArgument, QueueFull, OutOfMemory,
// BackendUnavailable, CudaError, CheckpointError and Error, the types module.cpp creates in
// streamknn._streamknn (looked up when an error is raised: no global state). Both extension
// modules translate with it, so the sharded store's errors are the single store's.
#pragma once

#include <pybind11/pybind11.h>

#include <exception>

#include "streamknn/checkpoint.hpp"
#include "streamknn/error.hpp"

namespace streamknn::python {

/// Sets the Python error `type_name` (an attribute of streamknn._streamknn) with `text`.
inline void raise_as(const char* type_name, const char* text) {
  pybind11::object type = pybind11::module_::import("streamknn._streamknn").attr(type_name);
  PyErr_SetString(type.ptr(), text);
}

/// An exception translator's body for the library's errors (most derived first); any other
/// exception is rethrown, for the next translator.
inline void translate_library_errors(std::exception_ptr pointer) {
  try {
    if (pointer) std::rethrow_exception(pointer);
  } catch (const InvalidArgument& e) {
    raise_as("InvalidArgument", e.what());
  } catch (const QueueFull& e) {
    raise_as("QueueFull", e.what());
  } catch (const OutOfMemory& e) {
    raise_as("OutOfMemory", e.what());
  } catch (const BackendUnavailable& e) {
    raise_as("BackendUnavailable", e.what());
  } catch (const CudaError& e) {
    raise_as("CudaError", e.what());
  } catch (const CheckpointError& e) {
    raise_as("CheckpointError", e.what());
  } catch (const Error& e) {
    raise_as("Error", e.what());
  }
}

}  // namespace streamknn::python
