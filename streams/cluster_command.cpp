#include "streams/cluster_command.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "streamknn/reference_set.hpp"
#include "streams/cluster_report.hpp"
#include "streams/errors.hpp"
#include "streams/progress.hpp"
#include "streams/report.hpp"

namespace streamknn::streams {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// Points a built-in stream produces per read: the progress bar moves, and the chunk stays small.
constexpr std::size_t kReadChunk = std::size_t(1) << 16;

std::string shown(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return buf;
}

/// The library would refuse these too, but only the source knows where in the input they are.
void check_coordinates(const Source& source, const Chunk& chunk, std::size_t first) {
  const std::size_t dim = source.info().dim;
  const float bound = max_coordinate(Metric::L2, dim);
  for (std::size_t i = 0; i < chunk.size * dim; ++i) {
    const float x = chunk.features[i];
    if (!std::isfinite(x)) {
      throw DataError(source.where(first + i / dim, i % dim) + ": " + shown(x) + " is not a finite number");
    }
    if (std::fabs(x) > bound) {
      throw DataError(source.where(first + i / dim, i % dim) + ": " + shown(x) + " exceeds " + shown(bound) +
                      " in magnitude, the bound sqrt(FLT_MAX / (8 x dim)) of the l2 metric at " + std::to_string(dim) +
                      " features (larger values could overflow its float32 distances)");
    }
  }
}

/// Every point of the source (at most `limit`; 0 = all), row-major. A file's points, in memory
/// already, are taken whole (moved, not copied); a built-in stream's a chunk at a time.
std::vector<float> read_points(Source& source, std::size_t limit, bool progress) {
  const SourceInfo& info = source.info();
  std::optional<std::size_t> total = info.length;
  if (limit && total) total = std::min(*total, limit);
  ProgressBar bar(progress, total);
  std::vector<float> points;
  if (total && !source.in_memory()) {
    try {
      points.reserve(*total * info.dim);
    } catch (const std::exception&) {  // bad_alloc, or length_error past max_size()
      throw OutOfMemory(info.name + ": " + grouped(double(*total)) + " points x " + std::to_string(info.dim) +
                        " features (" + grouped(double(*total * info.dim * sizeof(float) >> 20)) +
                        " MiB) cannot be allocated here; give fewer --points or a --limit");
    }
  }
  Chunk chunk;
  std::size_t n = 0;
  while (limit == 0 || n < limit) {
    const std::size_t want = limit ? limit - n : std::numeric_limits<std::size_t>::max();
    const std::size_t got = source.read(source.in_memory() ? want : std::min(want, kReadChunk), chunk);
    if (got == 0) break;
    check_coordinates(source, chunk, n);
    if (n == 0 && source.in_memory()) {
      points = std::move(chunk.features);
    } else {
      points.insert(points.end(), chunk.features.begin(), chunk.features.end());
    }
    n += got;
    bar.update(n, "reading");
  }
  return points;
}

/// The backend `backend` resolves to here and its description ("cpu (2 threads, x86-64-v3)"), as
/// a store describes itself (the public API's one description of a device). K-means resolves Auto
/// by the same rule; BackendUnavailable for Cuda where no device is usable, before any reading.
struct Device {
  BackendKind kind = BackendKind::Cpu;
  std::string name;
};

Device describe(BackendKind backend) {
  StoreConfig config;
  config.dim = 1;
  config.backend = backend;
  config.capacity_hint = 1;
  config.queue_capacity = 16;
  const ReferenceSet store(config);
  return {store.backend(), store.backend_name()};
}

/// The fit, its progress on a bar of its own, and what the record keeps of its iterations.
KMeansResult fit(const ClusterOptions& o, std::vector<float> given, const std::vector<float>& points,
                 std::size_t dim, ClusterRecord& record) {
  KMeansConfig config = kmeans_config(o);
  config.initial_centroids = std::move(given);
  ProgressBar bar(!o.no_progress && stderr_is_terminal(), std::nullopt);
  record.last_iterations.assign(o.n_init, KMeansIteration{});
  config.on_iteration = [&](const KMeansIteration& it) {
    ++record.all_iterations;
    if (it.last) record.last_iterations[it.start] = it;
    bar.show("start " + std::to_string(it.start + 1) + "/" + std::to_string(o.n_init) + ", iteration " +
             std::to_string(it.iteration) + ", " + grouped(double(it.changed)) + " labels changed");
  };
  const auto start = Clock::now();
  KMeansResult result = KMeans(std::move(config)).fit(points, dim);
  record.cluster_seconds = seconds_since(start);
  return result;
}

/// The points, their source (for names and places) and the --init file's centroids, checked
/// against each other: as many starting centroids as --clusters, of the points' dimension, and
/// at least as many points as clusters.
struct Input {
  std::unique_ptr<Source> source;
  std::vector<float> points;
  std::size_t n = 0;
  GivenCentroids given;
};

Input read_input(const ClusterOptions& o) {
  Input in;
  if (init_from_file(o)) {
    in.given = read_given_centroids(o.init);
    if (in.given.rows != o.clusters) {
      throw DataError(o.init + ": " + std::to_string(in.given.rows) + " starting centroids, but --clusters " +
                      std::to_string(o.clusters));
    }
  }
  in.source = open_cluster_source(o);
  const SourceInfo& info = in.source->info();
  if (init_from_file(o) && in.given.dim != info.dim) {
    throw DataError(o.init + ": starting centroids of " + std::to_string(in.given.dim) +
                    " features, but the points of " + info.name + " have " + std::to_string(info.dim));
  }
  in.points = read_points(*in.source, o.limit, !o.no_progress && stderr_is_terminal());
  in.n = in.points.size() / info.dim;
  if (o.clusters > in.n) {
    throw DataError("--clusters " + std::to_string(o.clusters) + " is more than the " + std::to_string(in.n) +
                    " points read from " + info.name + " (each cluster needs a point of its own)");
  }
  return in;
}

int cluster(const ClusterOptions& o, const std::string& command_line) {
  // Every output first, so a long read never ends on a path that could have been refused now.
  check_cluster_paths(o);
  ClusterRecord record;
  auto start = Clock::now();
  Device device = describe(parse_backend(o.backend));  // --backend cuda without a GPU fails here, before reading
  record.backend_seconds = seconds_since(start);
  start = Clock::now();
  Input in = read_input(o);
  record.read_seconds = seconds_since(start);
  const SourceInfo& info = in.source->info();
  const KMeansResult result = fit(o, std::move(in.given.values), in.points, info.dim, record);
  if (result.backend != device.kind) device = describe(result.backend);
  record.info = &info;
  record.options = &o;
  record.result = &result;
  record.points = in.n;
  record.backend = to_string(result.backend);
  record.device = device.name;
  record.command_line = command_line;
  record.peak_memory_mib = peak_memory_mib();
  std::fputs(cluster_summary(record).c_str(), stdout);
  std::fflush(stdout);
  if (!o.centroids.empty()) write_centroids(o.centroids, result.centroids, info.feature_names);
  if (!o.assignments.empty()) write_assignments(o.assignments, result.labels);
  if (!o.report.empty()) write_text_file(o.report, cluster_json(record));
  return kExitOk;
}

}  // namespace

int cluster_command(const ClusterOptions& options, const std::string& command_line) {
  return exit_code_of("cluster", [&] { return cluster(options, command_line); });
}

}  // namespace streamknn::streams
