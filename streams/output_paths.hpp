// streams/output_paths.hpp — the runner's outputs, checked before any input is read.
//
// A run that reads a large stream must not fail at its end because an output cannot be
// written, so every path it names (--report, --predictions, --plot and the predictions file
// --plot draws from, --checkpoint; cluster's --centroids, --assignments, --report) is checked
// first, and errors name the path as the user gave it.
#pragma once

#include <string>
#include <vector>

#include "streams/run_options.hpp"

namespace streamknn::streams {

/// The extensions --plot accepts (matplotlib picks the format from it without extra packages).
inline constexpr const char* kPlotFormats[] = {".png", ".pdf", ".svg"};

/// The predictions file --plot draws from when --predictions is not given: beside the plot.
std::string plot_scratch_path(const std::string& plot);

/// A file a command names on its command line: the option and the path as the user gave it.
struct NamedPath {
  std::string option;  ///< "--report"
  std::string path;
};

/// The outputs' checks, for any command: UsageError for two outputs naming the same file,
/// DataError ("--report PATH: cannot open for writing (...)") for a path that is a directory,
/// whose folder does not exist, or that cannot be opened for writing. A file this check creates
/// to find out is removed again; an existing one is opened for appending only.
void check_output_paths(const std::vector<NamedPath>& outputs);

/// DataError ("--input PATH: is a directory, not a file") for a named input that is a directory
/// (which would read as empty); empty paths are skipped.
void check_input_paths(const std::vector<NamedPath>& inputs);

/// The path's extension in lower case, with its dot (".csv"), or "".
std::string lower_extension(const std::string& path);

/// Throws UsageError for a --plot extension outside kPlotFormats or two outputs naming the same
/// file, and DataError ("--report PATH: cannot open for writing (...)") for a path that is a
/// directory, whose folder does not exist, or that cannot be opened for writing. A file this
/// check creates to find out is removed again; an existing one is opened for appending only.
void check_outputs(const RunOptions& options);

/// Throws DataError when --input or --labels names a directory (which would read as empty).
void check_inputs(const RunOptions& options);

}  // namespace streamknn::streams
