// streams/output_paths.hpp — the runner's outputs, checked before any input is read.
//
// A run that reads a large stream must not fail at its end because an output cannot be
// written, so every path it names (--report, --predictions, --plot and the predictions file
// --plot draws from, --checkpoint) is checked first, and errors name the path as the user gave it.
#pragma once

#include "streams/run_options.hpp"

namespace streamknn::streams {

/// The extensions --plot accepts (matplotlib picks the format from it without extra packages).
inline constexpr const char* kPlotFormats[] = {".png", ".pdf", ".svg"};

/// The predictions file --plot draws from when --predictions is not given: beside the plot.
std::string plot_scratch_path(const std::string& plot);

/// Throws UsageError for a --plot extension outside kPlotFormats or two outputs naming the same
/// file, and DataError ("--report PATH: cannot open for writing (...)") for a path that is a
/// directory, whose folder does not exist, or that cannot be opened for writing. A file this
/// check creates to find out is removed again; an existing one is opened for appending only.
void check_outputs(const RunOptions& options);

/// Throws DataError when --input or --labels names a directory (which would read as empty).
void check_inputs(const RunOptions& options);

}  // namespace streamknn::streams
