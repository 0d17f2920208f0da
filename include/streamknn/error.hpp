// streamknn/error.hpp — the exceptions the library throws.
//
// Every failure is an exception derived from streamknn::Error whose message names the call,
// the argument and the offending value ("ReferenceSet::search: k=0 must be at least 1").
// Nothing in the library aborts the process. Destructors never throw.
#pragma once

#include <stdexcept>
#include <string>

namespace streamknn {

/// Base of every exception the library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller-supplied value is out of range or malformed (wrong dimension, NaN, k < 1, ...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A bounded resource is exhausted in a way the caller asked to be told about. No C++ call
/// throws it (try_push returns false); the Python batch methods do, with on_full="raise".
class QueueFull : public Error {
 public:
  using Error::Error;
};

/// Host or device memory could not be allocated. The object keeps its last valid state.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// The requested backend cannot run here (no CUDA device, or built without CUDA).
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

/// A CUDA runtime call failed; the message names the call, its error and the shape involved.
class CudaError : public Error {
 public:
  using Error::Error;
};

}  // namespace streamknn
