// streams/report.hpp — what a run leaves behind: the predictions file, the summary table on
// stdout and the JSON report.
//
// Predictions CSV: header "index,prediction,truth", one row per point in arrival order; class
// names as the source named them (quoted where CSV needs it), regression values with 9
// significant digits (enough to give the float back exactly); an empty prediction marks a point
// that had no visible neighbour. JSON numbers that are not finite (a score with nothing scored)
// are written as null.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "streams/prequential.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

/// Everything the summary and the report describe.
struct RunRecord {
  const SourceInfo* info = nullptr;
  const PrequentialOptions* options = nullptr;
  const PrequentialResult* result = nullptr;
  std::string backend;        ///< "cpu" or "cuda"
  std::string device;         ///< the backend's own description
  std::string command_line;
  double peak_memory_mib = 0; ///< peak resident memory of the process
};

std::string summary_table(const RunRecord& run);
std::string json_report(const RunRecord& run);

class PredictionsWriter {
 public:
  /// Opens (truncates) the file and writes the header; throws DataError if it cannot.
  PredictionsWriter(const std::string& path, const SourceInfo& info);
  void write(const BatchOutcome& outcome);
  /// Flushes and closes; throws DataError on a write error (a full disk is not a success).
  void close();

 private:
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::string path_;
  const SourceInfo* info_;
  std::vector<std::string> class_cells_;  // class names, already CSV-escaped
  std::unique_ptr<std::FILE, Closer> file_;
};

/// The summary tables' look (run's and cluster's): the title line, then `  name  value` rows
/// with the values aligned.
std::string summary_table_text(const std::string& title, const std::vector<std::pair<std::string, std::string>>& rows);

/// Text helpers of the tables and reports: `digits` decimals ("n/a" if not finite); 1234567 ->
/// "1,234,567"; a JSON number with 9 significant digits (null if not finite); a JSON string.
std::string fixed(double v, int digits);
std::string grouped(double v);
std::string json_number(double v);
std::string json_string(const std::string& s);

/// Writes text to a file, throwing DataError naming the path on failure.
void write_text_file(const std::string& path, const std::string& text);

/// Peak resident memory of this process in MiB (0 where unknown).
double peak_memory_mib();

}  // namespace streamknn::streams
