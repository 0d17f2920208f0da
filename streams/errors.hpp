// streams/errors.hpp — the two ways a run can be refused, and the exit codes they map to.
//
// DataError: the input itself is bad (a malformed CSV cell, a truncated .fvecs record, a
// latitude outside [-90, 90]); its message names the file and the place (line and column, or
// vector and component) and the offending value. The runner exits with 1.
// UsageError: the command line asks for something impossible (an option that does not fit the
// source, haversine on 5 features). The runner exits with 2, as CLI11's own parse errors do.
#pragma once

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

}  // namespace streamknn::streams
