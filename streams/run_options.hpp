// streams/run_options.hpp — the options of `streamknn run`, and what they turn into.
//
// add_run_options() declares them on a CLI11 subcommand (with their checks, so a bad value is
// a usage error before anything runs); open_source() builds the stream they name and
// prequential_options() the evaluation. Combinations CLI11 cannot see (a task the source does
// not have, haversine on 10 features) throw UsageError.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "streams/prequential.hpp"
#include "streams/shared_options.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

struct RunOptions : InputOptions {
  // Input files besides InputOptions: the labels of vector files, CSV attribute columns.
  std::string labels;
  std::vector<std::string> attributes;  ///< --attributes: CSV columns of attribute words
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
