// libFuzzer harness: the CSV reader (streams/csv_reader.hpp) and the CSV source built on it
// (streams/csv_source.hpp), on arbitrary bytes.
//  * The tokenizer either returns records or throws DataError naming the input; every record
//    has a start line per cell, and lines never go back.
//  * Round trip: records that parsed, written back with csv_escape, parse to the same cells.
//  * open_csv (classification, regression, and points without targets as `streamknn cluster`
//    reads them) either throws a streamknn error with a message or yields chunks whose features
//    are finite, whose labels lie within the class names and whose sizes agree; without
//    targets, every column is a feature and no chunk carries labels or values. Any other exception (std::out_of_range, std::invalid_argument, ...)
//    escapes and is reported by libFuzzer as a crash.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "streams/csv_reader.hpp"
#include "streams/csv_source.hpp"
#include "streams/errors.hpp"

using namespace streamknn;
using namespace streamknn::streams;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_csv: %s\n", what.c_str());
  std::abort();
}

bool tokenize(const std::string& name, const std::string& text, std::vector<std::vector<std::string>>& out) {
  try {
    CsvReader reader(name, text);
    CsvRecord record;
    std::size_t last_line = 0;
    while (reader.next(record)) {
      if (record.cells.size() != record.cell_lines.size()) fail("a record has cells without start lines");
      if (record.cells.empty()) fail("a record without cells");
      if (record.line < last_line) fail("record lines went back");
      for (std::size_t line : record.cell_lines) {
        if (line < record.line) fail("a cell starts before its record");
      }
      last_line = record.line;
      out.push_back(record.cells);
    }
    return true;
  } catch (const DataError& e) {
    if (std::string(e.what()).rfind(name, 0) != 0) fail(std::string("a DataError that does not name the input: ") + e.what());
    return false;
  }
}

std::string temp_path() { return "/tmp/streamknn-fuzz-csv-" + std::to_string(::getpid()) + ".csv"; }

/// targets false: the points alone (CsvOptions::targets), every column a feature.
void read_source(const std::string& path, Task task, bool targets = true) {
  CsvOptions options;
  options.task = task;
  options.targets = targets;
  try {
    const auto source = open_csv(path, options);
    const SourceInfo& info = source->info();
    if (info.feature_names.size() != info.dim) fail("feature names and dim disagree");
    if (info.has_targets != targets) fail("has_targets is not what was asked for");
    Chunk chunk;
    for (std::size_t n; (n = source->read(7, chunk)) > 0;) {
      if (chunk.size != n || chunk.features.size() != n * info.dim) fail("a chunk's sizes disagree");
      for (float x : chunk.features) {
        if (!std::isfinite(x)) fail("a non-finite feature came through");
      }
      if (!targets) {
        if (!chunk.labels.empty() || !chunk.values.empty()) fail("a chunk of points alone carries targets");
      } else if (task == Task::Classify) {
        if (chunk.labels.size() != n) fail("a chunk without a label per point");
        for (std::int32_t l : chunk.labels) {
          if (l < 0 || std::size_t(l) >= info.class_names.size()) fail("a label outside the class names");
        }
      } else {
        if (chunk.values.size() != n) fail("a chunk without a value per point");
        for (float v : chunk.values) {
          if (!std::isfinite(v)) fail("a non-finite regression target came through");
        }
      }
    }
  } catch (const Error& e) {
    if (std::string(e.what()).empty()) fail("an error without a message");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::vector<std::string>> records;
  if (tokenize("fuzz.csv", text, records) && !records.empty()) {
    // Written with a byte-order mark, which the reader drops: a first cell that itself
    // starts with U+FEFF then survives the trip.
    std::string written = "\xEF\xBB\xBF";
    for (const auto& cells : records) {
      for (std::size_t c = 0; c < cells.size(); ++c) {
        if (c) written += ',';
        // A record of one empty cell would be an empty line, which the reader refuses.
        written += cells.size() == 1 && cells[0].empty() ? std::string("\"\"") : csv_escape(cells[c]);
      }
      written += '\n';
    }
    std::vector<std::vector<std::string>> again;
    if (!tokenize("written.csv", written, again)) fail("what csv_escape wrote does not parse");
    if (again != records) fail("csv_escape round trip changed the cells");
  }
  const std::string path = temp_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  read_source(path, Task::Classify);
  read_source(path, Task::Regress);
  read_source(path, Task::Classify, false);
  return 0;
}
