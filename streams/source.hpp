// streams/source.hpp — a labelled stream of points, read a chunk at a time.
//
// Every source (a CSV or .fvecs file, a generator) hands out consecutive points with their
// target: a class label in [0, classes) or one float value. Points are numbered by arrival
// from 0; where() turns such a number (and a feature column) into a place a user can find in
// the input ("iris.csv, line 17, column 3 (\"petal_width\")"), so that errors found later, for
// example by the metric, still point at the data. A source is used from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "streamknn/metric.hpp"

namespace streamknn::streams {

enum class Task : unsigned char { Classify, Regress };

const char* to_string(Task task) noexcept;

struct SourceInfo {
  std::string name;                        ///< "iris.csv", "hyperplane(dim=10, seed=42)"
  Task task = Task::Classify;
  std::size_t dim = 0;
  std::vector<std::string> feature_names;  ///< dim names
  std::string target_name;
  std::vector<std::string> class_names;    ///< classification: the name of label i
  std::optional<std::size_t> length;       ///< number of points, when known before reading
  Metric metric = Metric::L2;              ///< the metric the data is meant for
  std::string notes;                       ///< e.g. how class names were mapped to labels
  /// The columns whose cells are the points' attribute words (CSV --attributes), one per word;
  /// empty: the points carry none.
  std::vector<std::string> attribute_names;
  /// false: the points carry no targets (a file read for clustering): chunks hold no labels or
  /// values, and `task`, `target_name` and `class_names` mean nothing.
  bool has_targets = true;
};

/// A run of consecutive points: rows of features and their targets.
struct Chunk {
  std::size_t size = 0;
  std::vector<float> features;       ///< size x dim, row-major
  std::vector<std::int32_t> labels;  ///< classification: size labels
  std::vector<float> values;         ///< regression: size values
  std::vector<std::uint32_t> attributes;  ///< size x attribute words (SourceInfo::attribute_names)

  void clear() {
    size = 0;
    features.clear();
    labels.clear();
    values.clear();
    attributes.clear();
  }
};

class Source {
 public:
  virtual ~Source() = default;
  virtual const SourceInfo& info() const noexcept = 0;
  /// Replaces `out` with the next at most `max` points; returns how many (0 at the end).
  virtual std::size_t read(std::size_t max, Chunk& out) = 0;
  /// Where point `index` (column `column`, if given) comes from, for error messages.
  virtual std::string where(std::size_t index, std::optional<std::size_t> column = std::nullopt) const;
  /// True when every point is in memory already (a file read whole): one read of all of them
  /// then moves them out rather than copying them, so a reader that wants them all asks for all.
  virtual bool in_memory() const noexcept { return false; }
};

}  // namespace streamknn::streams
