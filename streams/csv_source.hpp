// streams/csv_source.hpp — a labelled stream from a CSV file with a header.
//
// One column is the target (by name; the last one by default), every other column is a
// feature; or, with `targets` off (clustering), the points carry no target: no column is left
// out unless `target` names one, which is then skipped unread. Feature cells must be finite
// numbers. For classification the target column holds integers (the distinct values, in
// ascending order, become labels 0..C-1) or, if any cell is not an integer, class names
// (numbered in order of first appearance); for regression it holds finite numbers. Columns named as attributes hold attribute words instead of features. Any
// bad cell is a DataError naming the file, line, column and value.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "streams/source.hpp"

namespace streamknn::streams {

struct CsvOptions {
  std::string target;            ///< target column name; empty = the last column
  Task task = Task::Classify;
  std::size_t limit = 0;         ///< read at most this many data rows (0 = all)
  /// Columns holding the points' attribute words (word i from attributes[i]), not features: each
  /// cell a whole number in [0, 2^32) written in decimal or 0x hexadecimal.
  std::vector<std::string> attributes;
  /// false: the points carry no targets (SourceInfo::has_targets): `task` is ignored, and
  /// `target`, where given, names a column left out of the features and never read.
  bool targets = true;
};

std::unique_ptr<Source> open_csv(const std::string& path, const CsvOptions& options);

}  // namespace streamknn::streams
