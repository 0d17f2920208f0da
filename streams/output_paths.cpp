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

std::string plot_scratch_path(const std::string& plot) { return plot + ".predictions.csv"; }

void check_outputs(const RunOptions& o) {
  if (!o.plot.empty()) {
    const std::string extension = lower(fs::path(o.plot).extension().string());
    if (std::find(std::begin(kPlotFormats), std::end(kPlotFormats), extension) == std::end(kPlotFormats)) {
      std::string formats;
      for (const char* f : kPlotFormats) formats += std::string(formats.empty() ? "" : ", ") + f;
      throw UsageError("--plot " + o.plot + ": the format is chosen by the extension; give a file ending in " +
                       formats);
    }
  }
  std::vector<std::pair<std::string, std::string>> outputs;  // (option, path)
  if (!o.report.empty()) outputs.emplace_back("--report", o.report);
  if (!o.predictions.empty()) outputs.emplace_back("--predictions", o.predictions);
  if (!o.plot.empty()) outputs.emplace_back("--plot", o.plot);
  if (!o.checkpoint.empty()) outputs.emplace_back("--checkpoint", o.checkpoint);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      std::error_code ec;
      const bool same = outputs[i].second == outputs[j].second || fs::equivalent(outputs[i].second, outputs[j].second, ec);
      if (same) {
        throw UsageError(outputs[j].first + " and " + outputs[i].first + " both name " + outputs[i].second);
      }
    }
  }
  for (const auto& [option, path] : outputs) check_writable(option + " " + path, path);
  if (!o.plot.empty() && o.predictions.empty()) {
    check_writable("--plot " + o.plot + " (its predictions file " + plot_scratch_path(o.plot) + ")",
                   plot_scratch_path(o.plot));
  }
}

void check_inputs(const RunOptions& o) {
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--input", o.input},
                                     std::pair<const char*, const std::string&>{"--labels", o.labels}}) {
    std::error_code ec;
    if (!path.empty() && fs::is_directory(path, ec)) {
      throw DataError(std::string(option) + " " + path + ": is a directory, not a file");
    }
  }
}

}  // namespace streamknn::streams
