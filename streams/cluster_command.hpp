// streams/cluster_command.hpp — `streamknn cluster`: read the points, K-means them, report.
//
// Returns the process exit code: 0 success, 1 data error (bad input, more clusters than points
// read, an output that cannot be written, a backend that cannot run here), 2 usage error.
// Messages go to stderr, the summary table to stdout.
#pragma once

#include <string>

#include "streams/cluster_options.hpp"

namespace streamknn::streams {

int cluster_command(const ClusterOptions& options, const std::string& command_line);

}  // namespace streamknn::streams
