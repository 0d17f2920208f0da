// streams/cluster_report.hpp — what `streamknn cluster` leaves behind: the summary table on
// stdout, the JSON report, the centroids and the assignments.
//
// Centroids: .csv (a header of the feature names, CSV-escaped, then one row per cluster) or
// .fvecs (one vector per cluster); floats with 9 significant digits, which give the float32 back
// exactly, so --init can read a centroids file back. Assignments: the header "index,cluster",
// then one row per point in input order (index from 0). Write errors are DataErrors naming the
// path.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "streamknn/kmeans.hpp"
#include "streams/cluster_options.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

/// Everything the summary and the report describe.
struct ClusterRecord {
  const SourceInfo* info = nullptr;
  const ClusterOptions* options = nullptr;
  const KMeansResult* result = nullptr;
  std::size_t points = 0;
  std::vector<KMeansIteration> last_iterations;  ///< the last iteration of each start, by start
  std::size_t all_iterations = 0;                ///< over every start
  std::string backend;                           ///< "cpu" or "cuda"
  std::string device;                            ///< the backend's own description
  std::string command_line;
  double backend_seconds = 0;  ///< making the backend ready (a CUDA context) and describing it
  double read_seconds = 0;     ///< opening and reading the input (and an --init file)
  double cluster_seconds = 0;  ///< the fit
  double peak_memory_mib = 0;
  double total_seconds() const noexcept { return backend_seconds + read_seconds + cluster_seconds; }
};

std::string cluster_summary(const ClusterRecord& record);
std::string cluster_json(const ClusterRecord& record);

/// Writes the centroids (clusters x feature_names.size()) as .csv or .fvecs, by the extension.
void write_centroids(const std::string& path, const std::vector<float>& centroids,
                     const std::vector<std::string>& feature_names);
void write_assignments(const std::string& path, const std::vector<std::uint32_t>& labels);

}  // namespace streamknn::streams
