// streams/run_options.hpp — the options of `streamknn run`, and what they turn into.
//
// add_run_options() declares them on a CLI11 subcommand (with their checks, so a bad value is
// a usage error before anything runs); open_source() builds the stream they name and
// prequential_options() the evaluation. Combinations CLI11 cannot see (a task the source does
// not have, haversine on 10 features) throw UsageError.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "streams/prequential.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

struct RunOptions {
  // Input: a file, or a built-in generator.
  std::string input, target, labels;
  std::vector<std::string> attributes;  ///< --attributes: CSV columns of attribute words
  std::string stream = "hyperplane";
  std::size_t points = 200000;
  std::uint64_t seed = 42;
  std::size_t dim = 10;
  std::size_t classes = 4;
  std::size_t drivers = 1000;
  double drift = 0;
  std::set<std::string> given;  ///< the stream-specific options given on the command line
  std::size_t limit = 0;
  // Model and evaluation.
  std::string task, metric;  ///< empty: the source's own
  std::size_t k = 5;
  std::string weights = "uniform";
  std::size_t window = 1000;
  std::size_t batch = 64;
  double radius = std::numeric_limits<double>::infinity();  ///< --radius: none given
  std::vector<std::string> require, forbid;  ///< --require / --forbid WORD:BITS, as given
  std::string backend = "auto";
  // Checkpoints (docs/durability.md).
  std::string checkpoint, resume;
  std::size_t checkpoint_every = 0;
  // Output.
  std::string predictions, report, plot;
  bool no_progress = false;
};

void add_run_options(CLI::App& run, RunOptions& options);
std::unique_ptr<Source> open_source(const RunOptions& options);
PrequentialOptions prequential_options(const RunOptions& options, const SourceInfo& info);

}  // namespace streamknn::streams
