#include "streams/csv_reader.hpp"

#include <fstream>
#include <iterator>
#include <sstream>

#include "streams/errors.hpp"

namespace streamknn::streams {

CsvReader::CsvReader(std::string path) : name_(std::move(path)) {
  std::ifstream in(name_, std::ios::binary);
  if (!in) throw DataError(name_ + ": cannot open the file for reading");
  std::ostringstream all;
  all << in.rdbuf();
  if (in.bad()) throw DataError(name_ + ": read error");
  text_ = std::move(all).str();
  if (text_.starts_with("\xEF\xBB\xBF")) pos_ = 3;
}

CsvReader::CsvReader(std::string name, std::string text) : name_(std::move(name)), text_(std::move(text)) {
  if (text_.starts_with("\xEF\xBB\xBF")) pos_ = 3;
}

void CsvReader::fail(std::size_t line, std::size_t column, const std::string& what) const {
  throw DataError(name_ + ", line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
}

bool CsvReader::next(CsvRecord& record) {
  record.cells.clear();
  record.cell_lines.clear();
  if (pos_ >= text_.size()) return false;
  record.line = line_;
  const std::size_t n = text_.size();
  auto at_record_end = [&](std::size_t p) {
    return p >= n || text_[p] == '\n' || (text_[p] == '\r' && p + 1 < n && text_[p + 1] == '\n');
  };
  if (at_record_end(pos_)) fail(line_, 1, "empty line (every record needs the header's fields)");

  std::string cell;
  while (true) {
    const std::size_t column = record.cells.size() + 1;
    const std::size_t cell_line = line_;
    cell.clear();
    if (pos_ < n && text_[pos_] == '"') {
      ++pos_;
      while (true) {
        if (pos_ >= n) fail(cell_line, column, "quoted field is never closed (missing '\"')");
        const char c = text_[pos_++];
        if (c == '"') {
          if (pos_ < n && text_[pos_] == '"') {
            cell += '"';
            ++pos_;
            continue;
          }
          break;
        }
        if (c == '\n') ++line_;
        cell += c;
      }
      if (pos_ < n && text_[pos_] != ',' && !at_record_end(pos_)) {
        fail(line_, column, std::string("unexpected '") + text_[pos_] + "' after the closing quote (expected ',' or end of line)");
      }
    } else {
      while (pos_ < n && text_[pos_] != ',' && !at_record_end(pos_)) {
        if (text_[pos_] == '"') fail(line_, column, "'\"' inside an unquoted field (quote the whole field and double the quote)");
        cell += text_[pos_++];
      }
    }
    record.cells.push_back(cell);
    record.cell_lines.push_back(cell_line);
    if (pos_ < n && text_[pos_] == ',') {
      ++pos_;
      continue;
    }
    // End of the record: consume its terminator.
    if (pos_ < n) {
      pos_ += text_[pos_] == '\r' ? 2 : 1;
      ++line_;
    }
    return true;
  }
}

std::string csv_escape(const std::string& value) {
  const bool plain = value.find_first_of(",\"\r\n") == std::string::npos &&
                     (value.empty() || (value.front() != ' ' && value.back() != ' '));
  if (plain) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace streamknn::streams
