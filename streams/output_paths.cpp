#include "streams/output_paths.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "streams/errors.hpp"

namespace streamknn::streams {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

/// `what` names the output in messages ("--report out/r.json").
void check_writable(const std::string& what, const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) throw DataError(what + ": cannot open for writing (it is a directory; give a file name)");
  const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::exists(folder, ec)) {
    throw DataError(what + ": cannot open for writing (the folder " + folder.string() + " does not exist)");
  }
  if (!fs::is_directory(folder, ec)) {
    throw DataError(what + ": cannot open for writing (" + folder.string() + " is not a folder)");
  }
  const bool existed = fs::exists(p, ec);
  std::FILE* f = std::fopen(path.c_str(), "a");  // appending: an existing file keeps its contents
  if (f == nullptr) throw DataError(what + ": cannot open for writing (" + std::strerror(errno) + ")");
  std::fclose(f);
  if (!existed) fs::remove(p, ec);
}

}  // namespace

std::string lower_extension(const std::string& path) { return lower(fs::path(path).extension().string()); }

void check_output_paths(const std::vector<NamedPath>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      std::error_code ec;
      const bool same = outputs[i].path == outputs[j].path || fs::equivalent(outputs[i].path, outputs[j].path, ec);
      if (same) throw UsageError(outputs[j].option + " and " + outputs[i].option + " both name " + outputs[i].path);
    }
  }
  for (const auto& [option, path] : outputs) check_writable(option + " " + path, path);
}

void check_input_paths(const std::vector<NamedPath>& inputs) {
  for (const auto& [option, path] : inputs) {
    std::error_code ec;
    if (!path.empty() && fs::is_directory(path, ec)) {
      throw DataError(option + " " + path + ": is a directory, not a file");
    }
  }
}

std::string plot_scratch_path(const std::string& plot) { return plot + ".predictions.csv"; }

void check_outputs(const RunOptions& o) {
  if (!o.plot.empty()) {
    const std::string extension = lower_extension(o.plot);
    if (std::find(std::begin(kPlotFormats), std::end(kPlotFormats), extension) == std::end(kPlotFormats)) {
      std::string formats;
      for (const char* f : kPlotFormats) formats += std::string(formats.empty() ? "" : ", ") + f;
      throw UsageError("--plot " + o.plot + ": the format is chosen by the extension; give a file ending in " +
                       formats);
    }
  }
  std::vector<NamedPath> outputs;
  if (!o.report.empty()) outputs.push_back({"--report", o.report});
  if (!o.predictions.empty()) outputs.push_back({"--predictions", o.predictions});
  if (!o.plot.empty()) outputs.push_back({"--plot", o.plot});
  if (!o.checkpoint.empty()) outputs.push_back({"--checkpoint", o.checkpoint});
  check_output_paths(outputs);
  if (!o.plot.empty() && o.predictions.empty()) {
    check_writable("--plot " + o.plot + " (its predictions file " + plot_scratch_path(o.plot) + ")",
                   plot_scratch_path(o.plot));
  }
}

void check_inputs(const RunOptions& o) { check_input_paths({{"--input", o.input}, {"--labels", o.labels}}); }

}  // namespace streamknn::streams
