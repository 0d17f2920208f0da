#include "streams/report.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "streams/csv_reader.hpp"
#include "streams/errors.hpp"

namespace streamknn::streams {

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

/// 1234567 -> "1,234,567": throughput is read at a glance.
std::string grouped(double v) {
  if (!std::isfinite(v)) return "n/a";
  const std::string digits = std::to_string(static_cast<long long>(std::llround(v)));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::string summary_table_text(const std::string& title, const std::vector<std::pair<std::string, std::string>>& rows) {
  std::size_t width = 0;
  for (const auto& [name, value] : rows) width = std::max(width, name.size());
  std::string out = title + "\n";
  for (const auto& [name, value] : rows) {
    out += "  " + name + std::string(width - name.size() + 2, ' ') + value + "\n";
  }
  return out;
}

namespace {

std::string microseconds(double seconds) {
  return fixed(seconds * 1e6, seconds * 1e6 < 100 ? 1 : 0) + " us";
}

std::string window_text(std::size_t window) {
  return window ? std::to_string(window) + " points" : "unbounded (every point kept)";
}

}  // namespace

std::string summary_table(const RunRecord& run) {
  const SourceInfo& info = *run.info;
  const PrequentialOptions& o = *run.options;
  const PrequentialResult& r = *run.result;
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("stream", info.name);
  if (!info.notes.empty()) rows.emplace_back("data", info.notes);
  rows.emplace_back("model", std::string(to_string(info.task)) + ", k=" + std::to_string(o.k) + ", " +
                                 std::string(to_string(o.weights)) + " weights, " + std::string(to_string(o.metric)) +
                                 " metric");
  rows.emplace_back("window", window_text(o.window));
  rows.emplace_back("batch", std::to_string(o.batch) + " points per predict call");
  rows.emplace_back("backend", run.device);
  if (r.resumed_at) {
    rows.emplace_back("resumed", "from " + o.resume + ": its " + grouped(double(r.resumed_at)) +
                                     " points skipped, the scores cover the rest");
  }
  rows.emplace_back("points", grouped(double(r.points)) + " (" + grouped(double(r.scored)) + " scored; " +
                                  grouped(double(r.points - r.scored)) + " without a visible neighbour)");
  if (info.task == Task::Classify) {
    rows.emplace_back("accuracy", fixed(r.classification.accuracy(), 4));
    rows.emplace_back("Cohen's kappa", fixed(r.classification.kappa(), 4));
  } else {
    rows.emplace_back("MAE", fixed(r.regression.mae(), 4));
    rows.emplace_back("RMSE", fixed(r.regression.rmse(), 4));
    rows.emplace_back("R^2", fixed(r.regression.r2(), 4));
  }
  rows.emplace_back("throughput", grouped(r.points_per_second()) + " points/s");
  rows.emplace_back("predict latency p50", microseconds(r.latency.p50) + " per batch");
  rows.emplace_back("predict latency p99", microseconds(r.latency.p99) + " per batch");
  rows.emplace_back("wall time", fixed(r.seconds, 2) + " s");
  rows.emplace_back("peak memory", fixed(run.peak_memory_mib, 0) + " MiB");

  return summary_table_text("streamknn run: prequential (test-then-train) summary", rows);
}

std::string json_report(const RunRecord& run) {
  const SourceInfo& info = *run.info;
  const PrequentialOptions& o = *run.options;
  const PrequentialResult& r = *run.result;
  std::string j = "{\n";
  auto field = [&j](const std::string& name, const std::string& value, bool last = false) {
    j += "  " + json_string(name) + ": " + value + (last ? "\n" : ",\n");
  };
  field("command", json_string(run.command_line));
  field("stream", json_string(info.name));
  field("notes", json_string(info.notes));
  field("task", json_string(to_string(info.task)));
  field("features", std::to_string(info.dim));
  if (info.task == Task::Classify) {
    std::string classes = "[";
    for (std::size_t i = 0; i < info.class_names.size(); ++i) classes += (i ? ", " : "") + json_string(info.class_names[i]);
    field("classes", classes + "]");
  }
  field("config", "{\"k\": " + std::to_string(o.k) + ", \"weights\": " + json_string(std::string(to_string(o.weights))) +
                      ", \"metric\": " + json_string(std::string(to_string(o.metric))) +
                      ", \"window\": " + std::to_string(o.window) + ", \"batch\": " + std::to_string(o.batch) +
                      ", \"limit\": " + std::to_string(o.limit) + "}");
  field("backend", json_string(run.backend));
  field("device", json_string(run.device));
  field("resumed_at", std::to_string(r.resumed_at));
  field("points", std::to_string(r.points));
  field("scored", std::to_string(r.scored));
  std::string metrics;
  if (info.task == Task::Classify) {
    metrics = "{\"accuracy\": " + json_number(r.classification.accuracy()) +
              ", \"kappa\": " + json_number(r.classification.kappa()) + "}";
  } else {
    metrics = "{\"mae\": " + json_number(r.regression.mae()) + ", \"rmse\": " + json_number(r.regression.rmse()) +
              ", \"r2\": " + json_number(r.regression.r2()) + "}";
  }
  field("metrics", metrics);
  field("seconds", json_number(r.seconds));
  field("points_per_second", json_number(r.points_per_second()));
  field("batches", std::to_string(r.batches));
  field("predict_latency_us", "{\"p50\": " + json_number(r.latency.p50 * 1e6) + ", \"p99\": " +
                                  json_number(r.latency.p99 * 1e6) + ", \"mean\": " + json_number(r.latency.mean * 1e6) +
                                  ", \"max\": " + json_number(r.latency.max * 1e6) + ", \"per\": \"batch\"}");
  field("peak_memory_mib", json_number(run.peak_memory_mib), true);
  return j + "}\n";
}

PredictionsWriter::PredictionsWriter(const std::string& path, const SourceInfo& info)
    : path_(path), info_(&info), file_(std::fopen(path.c_str(), "w")) {
  if (!file_) throw DataError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  for (const std::string& name : info.class_names) class_cells_.push_back(csv_escape(name));
  std::fputs("index,prediction,truth\n", file_.get());
}

void PredictionsWriter::write(const BatchOutcome& o) {
  std::FILE* f = file_.get();
  for (std::size_t i = 0; i < o.size; ++i) {
    if (info_->task == Task::Classify) {
      const std::int32_t p = o.predicted_labels[i];
      std::fprintf(f, "%zu,%s,%s\n", o.first + i, p == kNoLabel ? "" : class_cells_[static_cast<std::size_t>(p)].c_str(),
                   class_cells_[static_cast<std::size_t>(o.truth_labels[i])].c_str());
    } else if (std::isnan(o.predicted_values[i])) {
      std::fprintf(f, "%zu,,%.9g\n", o.first + i, double(o.truth_values[i]));
    } else {
      std::fprintf(f, "%zu,%.9g,%.9g\n", o.first + i, double(o.predicted_values[i]), double(o.truth_values[i]));
    }
  }
}

void PredictionsWriter::close() {
  if (!file_) return;
  std::FILE* f = file_.release();
  const bool failed = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || failed) throw DataError(path_ + ": write error (disk full?)");
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw DataError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  out << text;
  out.close();
  if (!out) throw DataError(path + ": write error (disk full?)");
}

double peak_memory_mib() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace streamknn::streams
