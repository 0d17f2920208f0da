// streams/csv_reader.hpp — an RFC 4180 tokenizer that remembers where every cell came from.
//
// Fields are separated by commas and records by LF or CRLF. A field that starts with a double
// quote is quoted: it may hold commas, newlines and doubled quotes (""), and must be followed
// by a comma or the end of the record. Everything else is reported, never skipped: a quote
// inside an unquoted field, text after a closing quote, a quote never closed, an empty line.
// A UTF-8 byte-order mark at the start is dropped. Line and column numbers are 1-based; the
// column is the field's position in the record.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace streamknn::streams {

struct CsvRecord {
  std::size_t line = 0;                 ///< line on which the record starts
  std::vector<std::string> cells;
  std::vector<std::size_t> cell_lines;  ///< line on which each cell starts
};

class CsvReader {
 public:
  /// Reads the whole file; throws DataError naming the path if it cannot be read.
  explicit CsvReader(std::string path);
  /// Tokenizes text already in memory; `name` is used in messages.
  CsvReader(std::string name, std::string text);

  /// The next record, or false at the end of the input. Throws DataError on malformed input.
  bool next(CsvRecord& record);
  const std::string& name() const noexcept { return name_; }

 private:
  [[noreturn]] void fail(std::size_t line, std::size_t column, const std::string& what) const;

  std::string name_;
  std::string text_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
};

/// Quotes a value for a CSV cell when it needs it (comma, quote, newline, leading/trailing space).
std::string csv_escape(const std::string& value);

}  // namespace streamknn::streams
