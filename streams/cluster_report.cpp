#include "streams/cluster_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "streams/csv_reader.hpp"
#include "streams/errors.hpp"
#include "streams/output_paths.hpp"
#include "streams/report.hpp"

namespace streamknn::streams {

namespace {

std::string general(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::vector<std::size_t> cluster_sizes(const KMeansResult& r) {
  std::vector<std::size_t> sizes(r.clusters, 0);
  for (const std::uint32_t label : r.labels) ++sizes[label];
  return sizes;
}

struct SizeSummary {
  std::size_t smallest = 0, largest = 0;
  double median = 0;
};

SizeSummary summarize(std::vector<std::size_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  const std::size_t k = sizes.size();
  return {sizes.front(), sizes.back(), (double(sizes[(k - 1) / 2]) + double(sizes[k / 2])) / 2};
}

/// What stopped the winning start: "unchanged labels", "tol", "max_iter", or, where starts of
/// the same length stopped for different reasons and the winner is not known, "tol or unchanged
/// labels".
std::string stopped_by(const ClusterRecord& record) {
  const KMeansResult& r = *record.result;
  if (!r.converged) return "max_iter";
  std::set<std::string> reasons;
  for (const KMeansIteration& it : record.last_iterations) {
    if (it.iteration == r.iterations) reasons.insert(it.changed == 0 ? "unchanged labels" : "tol");
  }
  return reasons.size() == 1 ? *reasons.begin() : "tol or unchanged labels";
}

std::string converged_text(const ClusterRecord& record) {
  const ClusterOptions& o = *record.options;
  const std::string why = stopped_by(record);
  if (why == "max_iter") return "no: stopped at --max-iter " + std::to_string(o.max_iter);
  if (why == "unchanged labels") return "yes: the labelling did not change";
  if (why == "tol") {
    return "yes: the centroids moved at most --tol " + general(o.tol, 6) + " x the mean feature variance";
  }
  return "yes: by --tol or an unchanged labelling";
}

std::string init_text(const ClusterOptions& o) {
  if (init_from_file(o)) return "given: " + o.init;
  return o.init + ", --kmeans-seed " + std::to_string(o.kmeans_seed) + ", " + std::to_string(o.n_init) +
         (o.n_init == 1 ? " start" : " starts (the lowest inertia wins)");
}

std::string source_text(const SourceInfo& info) {
  if (info.has_targets) return info.name + " (its targets unused)";  // a built-in stream
  return info.name + (info.notes.empty() ? "" : " (" + info.notes + ")");
}

std::string iterations_text(const ClusterRecord& record) {
  std::string text = std::to_string(record.result->iterations);
  if (record.options->n_init > 1) {
    text += " (the winning start; " + std::to_string(record.all_iterations) + " over the " +
            std::to_string(record.options->n_init) + " starts)";
  }
  return text;
}

/// "12.3 ms" below a second, "4.56 s" from there: small fits are timed too.
std::string seconds_text(double seconds) {
  return seconds < 1 ? fixed(seconds * 1e3, 1) + " ms" : fixed(seconds, 2) + " s";
}

struct Closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, Closer>;

File open_for_writing(const std::string& path, const char* mode) {
  File file(std::fopen(path.c_str(), mode));
  if (!file) throw DataError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  return file;
}

void close_written(File file, const std::string& path) {
  std::FILE* f = file.release();
  const bool failed = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || failed) throw DataError(path + ": write error (disk full?)");
}

}  // namespace

std::string cluster_summary(const ClusterRecord& record) {
  const KMeansResult& r = *record.result;
  const ClusterOptions& o = *record.options;
  const SizeSummary sizes = summarize(cluster_sizes(r));
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("source", source_text(*record.info));
  rows.emplace_back("points", grouped(double(record.points)) + " x " + std::to_string(r.dim) +
                                  (r.dim == 1 ? " feature" : " features"));
  rows.emplace_back("clusters", grouped(double(r.clusters)));
  rows.emplace_back("init", init_text(o));
  rows.emplace_back("backend", record.device);
  rows.emplace_back("iterations", iterations_text(record));
  rows.emplace_back("converged", converged_text(record));
  rows.emplace_back("inertia", general(r.inertia, 9) + " (sum of squared distances; " +
                                   general(r.inertia / double(record.points), 6) + " per point)");
  const std::string median = grouped(std::floor(sizes.median)) + (sizes.median != std::floor(sizes.median) ? ".5" : "");
  rows.emplace_back("cluster sizes", grouped(double(sizes.smallest)) + " / " + median + " / " +
                                         grouped(double(sizes.largest)) + " points (smallest / median / largest)");
  rows.emplace_back("wall time", seconds_text(record.total_seconds()) + " (backend start " +
                                     seconds_text(record.backend_seconds) + ", reading " +
                                     seconds_text(record.read_seconds) + ", clustering " +
                                     seconds_text(record.cluster_seconds) + ")");
  rows.emplace_back("peak memory", fixed(record.peak_memory_mib, 0) + " MiB");
  return summary_table_text("streamknn cluster: exact K-means (Lloyd's algorithm) summary", rows);
}

std::string cluster_json(const ClusterRecord& record) {
  const KMeansResult& r = *record.result;
  const ClusterOptions& o = *record.options;
  const SourceInfo& info = *record.info;
  const std::vector<std::size_t> sizes = cluster_sizes(r);
  const SizeSummary summary = summarize(sizes);
  const auto list = [](const auto& items, const auto& show) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + show(items[i]);
    return out + "]";
  };
  const auto path_or_null = [](const std::string& path) { return path.empty() ? "null" : json_string(path); };
  std::string j = "{\n";
  auto field = [&j](const std::string& name, const std::string& value, bool last = false) {
    j += "  " + json_string(name) + ": " + value + (last ? "\n" : ",\n");
  };
  field("command", json_string(record.command_line));
  field("source", json_string(info.name));
  field("notes", json_string(info.notes));
  field("points", std::to_string(record.points));
  field("features", std::to_string(r.dim));
  field("feature_names", list(info.feature_names, [](const std::string& s) { return json_string(s); }));
  field("config", "{\"clusters\": " + std::to_string(o.clusters) + ", \"max_iter\": " + std::to_string(o.max_iter) +
                      ", \"tol\": " + json_number(o.tol) + ", \"n_init\": " + std::to_string(o.n_init) +
                      ", \"init\": " + json_string(init_from_file(o) ? "given" : o.init) +
                      ", \"init_file\": " + path_or_null(init_from_file(o) ? o.init : "") +
                      ", \"kmeans_seed\": " + std::to_string(o.kmeans_seed) + ", \"metric\": \"l2\", \"limit\": " +
                      std::to_string(o.limit) + "}");
  field("backend", json_string(record.backend));
  field("device", json_string(record.device));
  field("iterations", std::to_string(r.iterations));
  field("iterations_all_starts", std::to_string(record.all_iterations));
  field("converged", r.converged ? "true" : "false");
  field("stopped_by", json_string(stopped_by(record)));
  field("inertia", general(r.inertia, 17));
  field("cluster_sizes", list(sizes, [](std::size_t n) { return std::to_string(n); }));
  field("cluster_size_summary", "{\"smallest\": " + std::to_string(summary.smallest) + ", \"median\": " +
                                    json_number(summary.median) + ", \"largest\": " + std::to_string(summary.largest) +
                                    "}");
  field("seconds", "{\"backend_start\": " + json_number(record.backend_seconds) + ", \"reading\": " +
                       json_number(record.read_seconds) + ", \"clustering\": " + json_number(record.cluster_seconds) +
                       ", \"total\": " + json_number(record.total_seconds()) + "}");
  field("outputs", "{\"centroids\": " + path_or_null(o.centroids) + ", \"assignments\": " +
                       path_or_null(o.assignments) + "}");
  field("peak_memory_mib", json_number(record.peak_memory_mib), true);
  return j + "}\n";
}

void write_centroids(const std::string& path, const std::vector<float>& centroids,
                     const std::vector<std::string>& feature_names) {
  const std::size_t dim = feature_names.size();
  if (lower_extension(path) == ".fvecs") {
    File file = open_for_writing(path, "wb");
    const auto d = static_cast<std::int32_t>(dim);
    for (std::size_t c = 0; c * dim < centroids.size(); ++c) {
      std::fwrite(&d, sizeof d, 1, file.get());
      std::fwrite(centroids.data() + c * dim, sizeof(float), dim, file.get());
    }
    close_written(std::move(file), path);
    return;
  }
  File file = open_for_writing(path, "w");
  for (std::size_t f = 0; f < dim; ++f) {
    std::fprintf(file.get(), "%s%s", f ? "," : "", csv_escape(feature_names[f]).c_str());
  }
  std::fputc('\n', file.get());
  for (std::size_t i = 0; i < centroids.size(); ++i) {
    std::fprintf(file.get(), "%.9g%c", double(centroids[i]), (i + 1) % dim == 0 ? '\n' : ',');
  }
  close_written(std::move(file), path);
}

void write_assignments(const std::string& path, const std::vector<std::uint32_t>& labels) {
  File file = open_for_writing(path, "w");
  std::fputs("index,cluster\n", file.get());
  for (std::size_t i = 0; i < labels.size(); ++i) std::fprintf(file.get(), "%zu,%u\n", i, labels[i]);
  close_written(std::move(file), path);
}

}  // namespace streamknn::streams
