#include "streams/cluster_options.hpp"

#include <limits>

#include "streams/csv_source.hpp"
#include "streams/errors.hpp"
#include "streams/output_paths.hpp"
#include "streams/vecs_source.hpp"

namespace streamknn::streams {

namespace {

constexpr const char* kMethods[] = {"k-means++", "random"};

bool is_method(const std::string& init) { return init == kMethods[0] || init == kMethods[1]; }

/// --init: a method, or a file whose extension says its format.
CLI::Validator init_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (is_method(text)) return {};
        const std::string extension = lower_extension(text);
        if (extension == ".csv" || extension == ".fvecs") return {};
        return text + " is neither k-means++, random nor a .csv or .fvecs file of starting centroids";
      },
      "k-means++|random|FILE");
}

/// --metric: K-means minimises squared L2 distances, so l2 is the one metric it has.
CLI::Validator l2_only() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text == "l2") return {};
        const bool known = text == "ip" || text == "cosine" || text == "haversine";
        if (known) {
          return text + " does not fit K-means, which minimises squared L2 (Euclidean) distances; only l2 is supported";
        }
        return text + " is not a metric; only l2 is supported (K-means minimises squared L2 distances)";
      },
      "l2");
}

void add_kmeans_options(CLI::App& app, ClusterOptions& o) {
  const char* kmeans = "K-means";
  constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();
  // Labels are 32-bit: more clusters than 2^31 could not be told apart (nor would fit in memory).
  app.add_option("--clusters", o.clusters, "k, the number of clusters (1 to the number of points)")
      ->group(kmeans)->required()->check(whole_number(1, 1ul << 31))->default_str("");
  app.add_option("--max-iter", o.max_iter, "Lloyd iterations at most, per start")
      ->group(kmeans)->check(whole_number(1, kAny));
  app.add_option("--tol", o.tol,
                 "stop when the centroids' total squared movement is at most tol x the mean feature variance "
                 "(scikit-learn's rule; 0: only an unchanged labelling or --max-iter stops)")
      ->group(kmeans)->check(non_negative_number());
  app.add_option("--n-init", o.n_init, "independent starts; the lowest inertia wins")
      ->group(kmeans)->check(whole_number(1, 1ul << 20));
  app.add_option("--init", o.init,
                 "k-means++ or random (both seeded by --kmeans-seed), or a .csv (with a header, as --centroids "
                 "writes it) or .fvecs file of --clusters starting centroids")
      ->group(kmeans)->check(init_value());
  app.add_option("--kmeans-seed", o.kmeans_seed,
                 "seed of the starts (start i draws from seed + i); --seed is the built-in stream's")
      ->group(kmeans)->check(whole_number(0, kAny));
  app.add_option("--metric", o.metric, "l2 only: K-means minimises squared L2 distances")
      ->group(kmeans)->check(l2_only());
  add_backend_option(app, o.backend, kmeans);
}

}  // namespace

void add_cluster_options(CLI::App& cluster, ClusterOptions& o) {
  add_input_options(cluster, o, "CSV: a column to leave out (a label, an id); by default every column is a feature");
  add_kmeans_options(cluster, o);
  const char* output = "Output";
  cluster.add_option("--centroids", o.centroids,
                     "write the centroids: .csv (a header of the feature names, a row per cluster) or .fvecs")
      ->group(output);
  cluster.add_option("--assignments", o.assignments, "write index,cluster per point (in input order) to this .csv")
      ->group(output);
  cluster.add_option("--report", o.report,
                     "write the settings, iterations, convergence, inertia, cluster sizes, device and times as JSON")
      ->group(output);
  add_no_progress_flag(cluster, o.no_progress, output);
}

bool init_from_file(const ClusterOptions& o) { return !is_method(o.init); }

void check_cluster_paths(const ClusterOptions& o) {
  if (init_from_file(o) && o.n_init > 1) {
    throw UsageError("--n-init " + std::to_string(o.n_init) + ": --init " + o.init +
                     " gives the one start there is; leave --n-init at 1");
  }
  if (init_from_file(o) && o.given.contains("--kmeans-seed")) {
    throw UsageError("--kmeans-seed seeds k-means++ and random starts; --init " + o.init + " draws nothing");
  }
  const std::string centroids = lower_extension(o.centroids);
  if (!o.centroids.empty() && centroids != ".csv" && centroids != ".fvecs") {
    throw UsageError("--centroids " + o.centroids + ": the format is chosen by the extension; give a file ending in "
                     ".csv or .fvecs");
  }
  if (!o.assignments.empty() && lower_extension(o.assignments) != ".csv") {
    throw UsageError("--assignments " + o.assignments + ": it is written as CSV (index,cluster); give a file ending "
                     "in .csv");
  }
  std::vector<NamedPath> outputs;
  for (const NamedPath& output : {NamedPath{"--centroids", o.centroids}, NamedPath{"--assignments", o.assignments},
                                  NamedPath{"--report", o.report}}) {
    if (!output.path.empty()) outputs.push_back(output);
  }
  check_output_paths(outputs);
  check_input_paths({{"--input", o.input}, {"--init", init_from_file(o) ? o.init : std::string()}});
}

std::unique_ptr<Source> open_cluster_source(const ClusterOptions& o) {
  if (o.input.empty()) return open_generator(o);
  if (is_vecs(o.input)) {
    if (!o.target.empty()) throw UsageError("--target names a CSV column; a vector file holds features only");
    return open_vecs_points(o.input, o.limit);
  }
  CsvOptions csv;
  csv.target = o.target;
  csv.limit = o.limit;
  csv.targets = false;
  return open_csv(o.input, csv);
}

GivenCentroids read_given_centroids(const std::string& path) {
  GivenCentroids out;
  std::unique_ptr<Source> source;
  if (lower_extension(path) == ".fvecs") {
    source = open_vecs_points(path);
  } else {
    CsvOptions csv;
    csv.targets = false;
    source = open_csv(path, csv);
  }
  Chunk chunk;
  source->read(std::numeric_limits<std::size_t>::max(), chunk);  // every row, moved out
  out.values = std::move(chunk.features);
  out.rows = chunk.size;
  out.dim = source->info().dim;
  return out;
}

KMeansConfig kmeans_config(const ClusterOptions& o) {
  KMeansConfig c;
  c.clusters = o.clusters;
  c.max_iter = o.max_iter;
  c.tol = o.tol;
  c.n_init = o.n_init;
  c.init = o.init == "random"      ? KMeansInit::Random
           : init_from_file(o)     ? KMeansInit::Given
                                   : KMeansInit::KMeansPlusPlus;
  c.seed = o.kmeans_seed;
  c.backend = parse_backend(o.backend);
  return c;
}

}  // namespace streamknn::streams
