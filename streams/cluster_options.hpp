// streams/cluster_options.hpp — the options of `streamknn cluster`, and what they turn into.
//
// add_cluster_options() declares them on a CLI11 subcommand (the input options are run's, from
// shared_options.hpp; every number is checked on its text, so a bad value is a usage error before
// anything runs). open_cluster_source() opens the points: a CSV whose every column is a feature
// (but the one --target leaves out, unread), a vector file, or a built-in stream (its targets
// unused). kmeans_config() makes the library's configuration; check_cluster_paths() refuses bad
// outputs before the input is read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "streamknn/kmeans.hpp"
#include "streams/shared_options.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

struct ClusterOptions : InputOptions {
  // K-means.
  std::size_t clusters = 0;  ///< --clusters: required
  std::size_t max_iter = 300;
  double tol = 1e-4;
  std::size_t n_init = 1;
  std::string init = "k-means++";  ///< k-means++, random, or a .csv / .fvecs file of starting centroids
  std::uint64_t kmeans_seed = 0;
  std::string metric = "l2";
  std::string backend = "auto";
  // Output.
  std::string centroids, assignments, report;
  bool no_progress = false;
};

void add_cluster_options(CLI::App& cluster, ClusterOptions& options);

/// True when --init names a file of starting centroids rather than a method.
bool init_from_file(const ClusterOptions& options);

/// UsageError for a --centroids extension other than .csv / .fvecs, an --assignments one other
/// than .csv, two outputs on one file, --init FILE with --n-init above 1 or with --kmeans-seed;
/// DataError for an output that cannot be written or an input that is a directory.
void check_cluster_paths(const ClusterOptions& options);

std::unique_ptr<Source> open_cluster_source(const ClusterOptions& options);

/// The starting centroids of --init FILE: a CSV with a header (every column a feature, as
/// --centroids writes it) or .fvecs vectors, `rows` x `dim` row-major. DataError for a bad file.
struct GivenCentroids {
  std::vector<float> values;
  std::size_t rows = 0, dim = 0;
};
GivenCentroids read_given_centroids(const std::string& path);

/// The library's configuration: everything but the given centroids and the progress callback.
KMeansConfig kmeans_config(const ClusterOptions& options);

}  // namespace streamknn::streams
