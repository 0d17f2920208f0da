#include "streams/csv_source.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "streams/cells.hpp"
#include "streams/csv_reader.hpp"
#include "streams/errors.hpp"
#include "streams/memory_source.hpp"

namespace streamknn::streams {

namespace {

std::string place(const std::string& file, std::size_t line, std::size_t column, const std::string& name) {
  return file + ", line " + std::to_string(line) + ", column " + std::to_string(column) + " (\"" + name + "\")";
}

std::string column_list(const std::vector<std::string>& header) {
  std::string out;
  for (std::size_t i = 0; i < header.size(); ++i) out += (i ? ", " : "") + quote_cell(header[i]);
  return out;
}

/// An attribute word: decimal digits or 0x and hexadecimal digits, at most 2^32 - 1.
std::optional<std::uint32_t> parse_word(const std::string& cell) {
  const bool hex = cell.size() > 2 && cell[0] == '0' && (cell[1] == 'x' || cell[1] == 'X');
  const std::string digits = hex ? cell.substr(2) : cell;
  if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos) {
    return std::nullopt;
  }
  if (digits.size() > 16) return std::nullopt;
  const unsigned long long value = std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10);
  if (value > 0xffffffffull) return std::nullopt;
  return static_cast<std::uint32_t>(value);
}

/// The CSV columns of the attribute words, by name; none may be the target or named twice.
std::vector<std::size_t> attribute_columns(const std::string& path, std::size_t header_line,
                                           const std::vector<std::string>& header,
                                           const std::unordered_map<std::string, std::size_t>& column_of,
                                           const std::vector<std::string>& names, std::size_t target) {
  std::vector<std::size_t> columns;
  for (const std::string& name : names) {
    const auto it = column_of.find(name);
    if (it == column_of.end()) {
      throw DataError(path + ", line " + std::to_string(header_line) + ": no column named " + quote_cell(name) +
                      " for --attributes; the columns are " + column_list(header));
    }
    if (it->second == target) throw UsageError("--attributes " + quote_cell(name) + " is the target column");
    if (std::find(columns.begin(), columns.end(), it->second) != columns.end()) {
      throw UsageError("--attributes names " + quote_cell(name) + " twice");
    }
    columns.push_back(it->second);
  }
  return columns;
}

}  // namespace

std::unique_ptr<Source> open_csv(const std::string& path, const CsvOptions& options) {
  CsvReader reader(path);
  CsvRecord record;
  if (!reader.next(record)) throw DataError(path + ", line 1: the file is empty (a header line is expected)");
  const std::vector<std::string> header = record.cells;
  const std::size_t header_line = record.line;
  std::unordered_map<std::string, std::size_t> column_of;
  for (std::size_t c = 0; c < header.size(); ++c) {
    if (header[c].empty()) {
      throw DataError(path + ", line " + std::to_string(header_line) + ", column " + std::to_string(c + 1) +
                      ": the header names no column here (empty name)");
    }
    if (auto [it, fresh] = column_of.try_emplace(header[c], c); !fresh) {
      throw DataError(place(path, header_line, c + 1, header[c]) + ": the header repeats the name of column " +
                      std::to_string(it->second + 1));
    }
  }
  if (header.size() < 2 && options.targets) {
    throw DataError(path + ", line " + std::to_string(header_line) + ": the header has " +
                    std::to_string(header.size()) + " column; at least one feature and the target are needed");
  }
  constexpr std::size_t kNone = std::size_t(-1);  // no target column
  std::size_t target = options.targets ? header.size() - 1 : kNone;
  if (!options.target.empty()) {
    const auto it = column_of.find(options.target);
    if (it == column_of.end()) {
      throw DataError(path + ", line " + std::to_string(header_line) + ": no column named " +
                      quote_cell(options.target) + " for --target; the columns are " + column_list(header));
    }
    target = it->second;
  }

  SourceInfo info;
  info.name = path;
  info.task = options.task;
  info.has_targets = options.targets;
  if (target != kNone) info.target_name = header[target];
  const std::vector<std::size_t> word_columns =
      attribute_columns(path, header_line, header, column_of, options.attributes, target);
  info.attribute_names = options.attributes;
  std::vector<std::size_t> feature_columns;  // feature i is CSV column feature_columns[i] (0-based)
  for (std::size_t c = 0; c < header.size(); ++c) {
    if (c == target || std::find(word_columns.begin(), word_columns.end(), c) != word_columns.end()) continue;
    feature_columns.push_back(c);
    info.feature_names.push_back(header[c]);
  }
  info.dim = feature_columns.size();
  if (info.dim == 0) {
    throw UsageError(path + ": no feature column is left once the target and --attributes columns are taken");
  }
  if (!options.targets) {
    info.notes = target == kNone ? "every column a feature" : "column \"" + header[target] + "\" left out";
  }

  std::vector<float> features;
  std::vector<std::uint32_t> words;
  std::vector<float> values;
  std::vector<std::string> class_cells;
  std::vector<std::size_t> lines;  // line of each data row, for where()
  while ((options.limit == 0 || lines.size() < options.limit) && reader.next(record)) {
    if (record.cells.size() != header.size()) {
      const std::size_t column = std::min(record.cells.size(), header.size()) + 1;
      throw DataError(path + ", line " + std::to_string(record.line) + ", column " + std::to_string(column) + ": " +
                      std::to_string(record.cells.size()) + " fields, but the header (line " +
                      std::to_string(header_line) + ") has " + std::to_string(header.size()));
    }
    for (std::size_t c : feature_columns) {
      const ParsedNumber n = parse_number(record.cells[c]);
      if (!n.ok) throw DataError(place(path, record.cell_lines[c], c + 1, header[c]) + ": " + n.problem);
      features.push_back(static_cast<float>(n.value));
    }
    for (std::size_t c : word_columns) {
      const std::optional<std::uint32_t> word = parse_word(record.cells[c]);
      if (!word) {
        throw DataError(place(path, record.cell_lines[c], c + 1, header[c]) + ": " + quote_cell(record.cells[c]) +
                        " is not an attribute word (a whole number in [0, 4294967295], decimal or 0x hexadecimal)");
      }
      words.push_back(*word);
    }
    lines.push_back(record.line);
    if (!options.targets) continue;
    const std::string& cell = record.cells[target];
    const std::string where_target = place(path, record.cell_lines[target], target + 1, header[target]);
    if (options.task == Task::Regress) {
      const ParsedNumber n = parse_number(cell);
      if (!n.ok) throw DataError(where_target + ": " + n.problem + " (regression targets are numbers)");
      values.push_back(static_cast<float>(n.value));
    } else {
      if (is_missing(cell)) {
        throw DataError(where_target + ": missing class (" + (cell.empty() ? "empty cell" : quote_cell(cell)) + ")");
      }
      class_cells.push_back(cell);
    }
  }
  if (lines.empty()) {
    throw DataError(path + ", line " + std::to_string(header_line + 1) + ": no data rows after the header (line " +
                    std::to_string(header_line) + ")");
  }

  std::vector<std::int32_t> labels;
  if (!options.targets) {
    // the notes are set above
  } else if (options.task == Task::Classify) {
    const std::string what = path + ", column " + std::to_string(target + 1) + " (\"" + header[target] + "\")";
    std::vector<std::int64_t> integers(class_cells.size());
    bool all_integers = true;
    for (std::size_t i = 0; i < class_cells.size() && all_integers; ++i) {
      all_integers = parse_integer_class(class_cells[i], integers[i]);
    }
    ClassMapping mapping = all_integers ? classes_from_integers(integers, what) : classes_from_names(class_cells, what);
    labels = std::move(mapping.labels);
    info.class_names = std::move(mapping.names);
    info.notes = "target \"" + header[target] + "\": " + mapping.notes;
  } else {
    info.notes = "target \"" + header[target] + "\": regression";
  }

  auto locator = [path, lines = std::move(lines), feature_columns, header](std::size_t index,
                                                                           std::optional<std::size_t> column) {
    const std::size_t line = index < lines.size() ? lines[index] : 0;
    if (!column) return path + ", line " + std::to_string(line);
    const std::size_t c = feature_columns.at(*column);
    return place(path, line, c + 1, header[c]);
  };
  return std::make_unique<MemorySource>(std::move(info), std::move(features), std::move(labels), std::move(values),
                                        std::move(locator), std::move(words));
}

}  // namespace streamknn::streams
