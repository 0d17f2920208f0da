#include "streams/run_command.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "streams/errors.hpp"
#include "streams/output_paths.hpp"
#include "streams/plot.hpp"
#include "streams/progress.hpp"
#include "streams/report.hpp"

namespace streamknn::streams {

namespace {

/// Removes a scratch file when the run ends, however it ends.
class ScratchFile {
 public:
  explicit ScratchFile(std::string path) : path_(std::move(path)) {}
  ~ScratchFile() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove(path_, ignored);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

 private:
  std::string path_;
};

/// The running score the progress bar shows.
class RunningScore {
 public:
  explicit RunningScore(Task task) : task_(task) {}
  void add(const BatchOutcome& o) {
    for (std::size_t i = 0; i < o.size; ++i) {
      if (task_ == Task::Classify && o.predicted_labels[i] != kNoLabel) {
        ++count_;
        sum_ += o.predicted_labels[i] == o.truth_labels[i];
      } else if (task_ == Task::Regress && !std::isnan(o.predicted_values[i])) {
        ++count_;
        sum_ += std::fabs(double(o.predicted_values[i]) - double(o.truth_values[i]));
      }
    }
  }
  std::string text() const {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s %.4f", task_ == Task::Classify ? "accuracy" : "MAE",
                  count_ ? sum_ / double(count_) : 0.0);
    return buf;
  }

 private:
  Task task_;
  std::size_t count_ = 0;
  double sum_ = 0;
};

int run(const RunOptions& options, const std::string& command_line) {
  // Every output first, so a run never fails at its end for a path it could have refused now.
  check_outputs(options);
  check_inputs(options);
  const std::unique_ptr<Source> source = open_source(options);
  const SourceInfo& info = source->info();
  Prequential evaluator(*source, prequential_options(options, info));

  // --plot draws from a predictions file: the one asked for, or a scratch one beside the PNG.
  std::string predictions_path = options.predictions;
  std::optional<ScratchFile> scratch;
  if (predictions_path.empty() && !options.plot.empty()) {
    predictions_path = plot_scratch_path(options.plot);
    scratch.emplace(predictions_path);
  }
  std::optional<PredictionsWriter> writer;
  if (!predictions_path.empty()) writer.emplace(predictions_path, info);

  std::optional<std::size_t> total = info.length;
  if (options.limit && total) total = std::min(*total, options.limit);
  ProgressBar bar(!options.no_progress && stderr_is_terminal(), total);
  RunningScore score(info.task);
  const PrequentialResult result = evaluator.run([&](const BatchOutcome& outcome) {
    if (writer) writer->write(outcome);
    score.add(outcome);
    bar.update(outcome.first + outcome.size, score.text());
  });
  bar.finish();
  if (writer) writer->close();

  RunRecord record;
  record.info = &info;
  record.options = &evaluator.options();
  record.result = &result;
  record.backend = to_string(evaluator.backend());
  record.device = evaluator.backend_name();
  record.command_line = command_line;
  record.peak_memory_mib = peak_memory_mib();
  std::fputs(summary_table(record).c_str(), stdout);
  std::fflush(stdout);
  if (!options.report.empty()) write_text_file(options.report, json_report(record));
  if (!options.plot.empty()) draw_plot(predictions_path, options.plot, info.task, command_line);
  return kExitOk;
}

}  // namespace

int run_command(const RunOptions& options, const std::string& command_line) {
  return exit_code_of("run", [&] { return run(options, command_line); });
}

}  // namespace streamknn::streams
