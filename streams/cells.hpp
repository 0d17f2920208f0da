// streams/cells.hpp — turning text cells into numbers and class labels.
//
// A cell is a number when, after surrounding blanks and one leading '+', std::from_chars reads
// all of it as a finite double that fits a float. A cell is missing when it is empty or one of
// the usual placeholders (NA, N/A, NaN, nan, NULL, null, None, ?). Missing and non-numeric
// feature cells are errors, never skipped or imputed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace streamknn::streams {

bool is_missing(std::string_view cell) noexcept;

struct ParsedNumber {
  bool ok = false;
  double value = 0;
  std::string problem;  ///< when !ok: "missing value (\"NA\")", "\"abc\" is not a number", ...
};

/// Parses a feature or regression-target cell (finite, within float range).
ParsedNumber parse_number(std::string_view cell);

/// The labels of a class column and the name of each label.
struct ClassMapping {
  std::vector<std::int32_t> labels;  ///< one per row
  std::vector<std::string> names;    ///< names[label]
  std::string notes;                 ///< how names became labels, for the report
};

/// Largest number of classes a store accepts (the library's limit).
inline constexpr std::size_t kMaxClasses = 65536;

/// Integer classes: the distinct values in ascending order become labels 0..C-1, so that a
/// tie between classes (which goes to the smaller label) goes to the smaller value, as in
/// scikit-learn. `what` names the column or file in the error raised past kMaxClasses.
ClassMapping classes_from_integers(std::span<const std::int64_t> values, const std::string& what);
/// Named classes: numbered in order of first appearance.
ClassMapping classes_from_names(std::span<const std::string> names, const std::string& what);

/// The cell as an integer class value, if it is one (an integral number within int32).
bool parse_integer_class(std::string_view cell, std::int64_t& value);

/// A cell quoted for an error message, shortened past 40 characters.
std::string quote_cell(std::string_view cell);

}  // namespace streamknn::streams
