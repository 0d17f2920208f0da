// streams/run_command.hpp — `streamknn run`: open the stream, evaluate, report.
//
// Returns the process exit code: 0 success, 1 data error (bad input, an output that cannot be
// written, a backend that cannot run here), 2 usage error. Messages go to stderr, the summary
// table to stdout.
#pragma once

#include <string>

#include "streams/run_options.hpp"

namespace streamknn::streams {

int run_command(const RunOptions& options, const std::string& command_line);

}  // namespace streamknn::streams
