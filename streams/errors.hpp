// streams/errors.hpp — the two ways a run can be refused, and the exit codes they map to.
//
// DataError: the input itself is bad (a malformed CSV cell, a truncated .fvecs record, a
// latitude outside [-90, 90]); its message names the file and the place (line and column, or
// vector and component) and the offending value. The runner exits with 1.
// UsageError: the command line asks for something impossible (an option that does not fit the
// source, haversine on 5 features). The runner exits with 2, as CLI11's own parse errors do.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "streamknn/error.hpp"

namespace streamknn::streams {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDataError = 1;
inline constexpr int kExitUsageError = 2;

class DataError : public Error {
 public:
  using Error::Error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

/// Runs a subcommand (`streamknn NAME`) and turns what it throws into its exit code and a message
/// on stderr: UsageError 2 ("streamknn NAME: MESSAGE", then a pointer to --help); anything else
/// (DataError, an output that cannot be written, a backend unavailable here, memory) 1
/// ("streamknn NAME: error: MESSAGE").
template <class Body>
int exit_code_of(const char* name, Body&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "streamknn %s: %s\nRun with --help for more information.\n", name, e.what());
    return kExitUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streamknn %s: error: %s\n", name, e.what());
    return kExitDataError;
  }
}

}  // namespace streamknn::streams
