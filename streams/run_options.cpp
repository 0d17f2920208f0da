#include "streams/run_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "streams/csv_source.hpp"
#include "streams/drift_generators.hpp"
#include "streams/errors.hpp"
#include "streams/moving_objects.hpp"
#include "streams/vecs_source.hpp"

namespace streamknn::streams {

namespace {

bool is_vecs(const std::string& path) {
  return path.ends_with(".fvecs") || path.ends_with(".ivecs") || path.ends_with(".bvecs");
}

Task task_of(const RunOptions& o, Task natural) {
  if (o.task.empty()) return natural;
  return o.task == "regress" ? Task::Regress : Task::Classify;
}

/// A whole number in [lo, hi] in decimal digits, checked on the text before CLI11 converts it:
/// its conversion to an unsigned option reads "-1" as 2^64 - 1 and wraps numbers past 2^64,
/// and its Range check calls "5.5" out of range. CLI11 prefixes the option's name.
CLI::Validator whole_number(std::uint64_t lo, std::uint64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::size_t start = !text.empty() && text[0] == '+' ? 1 : 0;
        const bool digits = text.size() > start && text.find_first_not_of("0123456789", start) == std::string::npos;
        if (!digits) {
          char* end = nullptr;
          const double value = std::strtod(text.c_str(), &end);
          const bool number = !text.empty() && end == text.c_str() + text.size();
          if (number && value < 0) return text + " is negative; give a whole number in " + range;
          return text + " is not a whole number; give one in " + range;
        }
        errno = 0;
        const unsigned long long value = std::strtoull(text.c_str() + start, nullptr, 10);
        if (errno == ERANGE || value < lo || value > hi) return text + " is outside " + range;
        return {};
      },
      "UINT in " + range);
}

/// A finite number >= 0 (--drift): the message repeats the value as it was given.
CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return text + " is not a number";
        if (!std::isfinite(value) || errno == ERANGE) return text + " is not a finite number";
        if (value < 0) return text + " is negative; give a number >= 0";
        return {};
      },
      "NUMBER >= 0");
}

/// WORD:BITS (--require, --forbid): a word index below kMaxAttributeWords and a 32-bit mask in
/// decimal or 0x hexadecimal. parse_word_bits() reads what this validator let through.
std::optional<std::pair<std::size_t, std::uint32_t>> parse_word_bits(const std::string& text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  const std::string word = text.substr(0, colon), bits = text.substr(colon + 1);
  if (word.find_first_not_of("0123456789") != std::string::npos || word.size() > 2) return std::nullopt;
  const bool hex = bits.size() > 2 && bits[0] == '0' && (bits[1] == 'x' || bits[1] == 'X');
  const std::string digits = hex ? bits.substr(2) : bits;
  if (digits.empty() || digits.size() > 16 ||
      digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const unsigned long long mask = std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10);
  const std::size_t w = std::stoul(word);
  if (mask > 0xffffffffull || w >= kMaxAttributeWords) return std::nullopt;
  return std::pair{w, static_cast<std::uint32_t>(mask)};
}

CLI::Validator word_bits() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (parse_word_bits(text)) return {};
        return text + " is not WORD:BITS (WORD in [0, " + std::to_string(kMaxAttributeWords - 1) +
               "], BITS a 32-bit mask in decimal or 0x hexadecimal)";
      },
      "WORD:BITS");
}

}  // namespace

void add_run_options(CLI::App& run, RunOptions& o) {
  run.option_defaults()->always_capture_default();
  const char* input = "Input (a file, or a built-in stream)";
  auto* in = run.add_option("--input", o.input, "CSV file with a header, or .fvecs/.bvecs/.ivecs vectors")
                 ->group(input);
  run.add_option("--target", o.target, "CSV: the label/target column (default: the last)")->group(input)->needs(in);
  run.add_option("--labels", o.labels, "vector files: one label/target per vector (.ivecs or .fvecs, dimension 1)")
      ->group(input)->needs(in);
  run.add_option("--stream", o.stream,
                 "built-in stream: hyperplane (drifting, 2 classes), rbf (moving centroids), drivers (GPS pings -> "
                 "speed, haversine)")
      ->group(input)->check(CLI::IsMember({"hyperplane", "rbf", "drivers"}))->excludes(in);
  auto generator = [&](CLI::Option* option) { option->group(input)->excludes(in); };
  // Every numeric option is checked on its text (whole_number, non_negative_number): a bad
  // value is a usage error (exit 2) naming the option and the value as given.
  constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();
  generator(run.add_option("--points", o.points, "built-in stream: number of points")->check(whole_number(1, 1ul << 31)));
  generator(run.add_option("--seed", o.seed, "built-in stream: seed (the same seed gives the same stream)")
                ->check(whole_number(0, kAny)));
  generator(run.add_option("--dim", o.dim, "hyperplane/rbf: number of features")->check(whole_number(1, 4096)));
  generator(run.add_option("--classes", o.classes, "rbf: number of classes")->check(whole_number(2, 65536)));
  generator(run.add_option("--drivers", o.drivers, "drivers: number of drivers")->check(whole_number(1, 10000000)));
  generator(run.add_option("--drift", o.drift, "hyperplane: weight change per point (default 0.01); rbf: centroid "
                                               "speed per point (default 0.001)")
                ->check(non_negative_number())
                ->default_str(""));
  auto* attributes = run.add_option("--attributes", o.attributes,
                                    "CSV: columns holding each point's attribute words (word 0, 1, ...; whole numbers in "
                                    "[0, 2^32), decimal or 0x hex), not features; at most 4")
                        ->group(input)->needs(in)->delimiter(',')->expected(1, int(kMaxAttributeWords));
  run.add_option("--limit", o.limit, "stop after this many points (0 = the whole input)")
      ->group(input)->check(whole_number(0, kAny));

  const char* model = "Model and evaluation";
  run.add_option("--task", o.task, "classify or regress (default: the stream's; classify for files)")
      ->group(model)->check(CLI::IsMember({"classify", "regress"}));
  run.add_option("--k", o.k, "neighbours per prediction")->group(model)->check(whole_number(1, kMaxK));
  run.add_option("--weights", o.weights, "uniform, or distance (1/distance, scikit-learn's rule)")
      ->group(model)->check(CLI::IsMember({"uniform", "distance"}));
  run.add_option("--metric", o.metric, "l2, ip, cosine or haversine (default: the stream's; l2 for files)")
      ->group(model)->check(CLI::IsMember({"l2", "ip", "cosine", "haversine"}));
  // A window is held in one store, whose capacity stays below 2^32 points with a batch on top.
  run.add_option("--window", o.window, "predict from the last N points only (0 = every point so far)")
      ->group(model)->check(whole_number(0, 1ul << 31));
  run.add_option("--batch", o.batch, "points predicted together, causally (same predictions as 1, faster)")
      ->group(model)->check(whole_number(1, 1ul << 20));
  run.add_option("--radius", o.radius,
                 "predict from the k nearest within this distance only (metres for haversine); a point with "
                 "none gets no prediction and is not scored (CPU backend)")
      ->group(model)->check(CLI::NonNegativeNumber);
  run.add_option("--require", o.require,
                 "predict from points whose attribute word WORD has every bit of BITS set (repeatable; needs "
                 "--attributes)")
      ->group(model)->needs(attributes)->check(word_bits())->take_all();
  run.add_option("--forbid", o.forbid,
                 "predict from points whose attribute word WORD has no bit of BITS set (repeatable; needs "
                 "--attributes)")
      ->group(model)->needs(attributes)->check(word_bits())->take_all();
  run.add_option("--backend", o.backend, "auto (CUDA where a GPU is usable), cpu or cuda")
      ->group(model)->check(CLI::IsMember({"auto", "cpu", "cuda"}));

  const char* durable = "Checkpoints";
  auto* checkpoint = run.add_option("--checkpoint", o.checkpoint,
                                    "save the reference set to this file at the start, every --checkpoint-every "
                                    "points and at the end (atomically; docs/durability.md)")
                         ->group(durable);
  run.add_option("--checkpoint-every", o.checkpoint_every, "points between two checkpoints")
      ->group(durable)->needs(checkpoint)->check(whole_number(1, kAny));
  run.add_option("--resume", o.resume,
                 "start from this checkpoint: skip the stream's points it holds, evaluate the rest (same stream, "
                 "metric and task)")
      ->group(durable)->check(CLI::ExistingFile);

  const char* output = "Output";
  run.add_option("--predictions", o.predictions, "write index,prediction,truth per point to this CSV")->group(output);
  run.add_option("--report", o.report, "write the final metrics, throughput, latency and device as JSON")->group(output);
  run.add_option("--plot", o.plot, "draw the score over the stream to this .png, .pdf or .svg file (needs python3-matplotlib)")->group(output);
  run.add_flag("--no-progress", o.no_progress, "never draw the progress bar (it is drawn only on a terminal anyway)")
      ->group(output);
  run.callback([&run, &o] {
    for (const char* name : {"--dim", "--classes", "--drivers", "--drift"}) {
      if (run.count(name) > 0) o.given.insert(name);
    }
  });
}

std::unique_ptr<Source> open_source(const RunOptions& o) {
  if (!o.input.empty()) {
    const Task task = task_of(o, Task::Classify);
    if (is_vecs(o.input)) {
      if (o.labels.empty()) {
        throw UsageError("--input " + o.input + " holds vectors only; give their labels or targets with --labels FILE");
      }
      if (!o.target.empty()) throw UsageError("--target names a CSV column; vector files take --labels");
      if (!o.attributes.empty()) throw UsageError("--attributes names CSV columns; vector files carry no attribute words");
      return open_vecs(o.input, o.labels, task, o.limit);
    }
    if (!o.labels.empty()) throw UsageError("--labels is for .fvecs/.bvecs/.ivecs input; a CSV names its --target column");
    if (o.attributes.size() > kMaxAttributeWords) {
      throw UsageError("--attributes names " + std::to_string(o.attributes.size()) + " columns; a point carries at most " +
                       std::to_string(kMaxAttributeWords) + " attribute words");
    }
    return open_csv(o.input, {o.target, task, o.limit, o.attributes});
  }
  const auto expect = [&](Task natural) {
    if (task_of(o, natural) != natural) {
      throw UsageError("--stream " + o.stream + " is a " + (natural == Task::Classify ? "classification" : "regression") +
                       " stream; --task " + o.task + " does not fit it");
    }
  };
  // An option the chosen stream has no use for is refused rather than ignored.
  const auto only_for = [&](const char* option, std::initializer_list<const char*> streams) {
    if (!o.given.contains(option)) return;
    for (const char* s : streams) {
      if (o.stream == s) return;
    }
    throw UsageError(std::string(option) + " does not apply to --stream " + o.stream);
  };
  only_for("--dim", {"hyperplane", "rbf"});
  only_for("--classes", {"rbf"});
  only_for("--drivers", {"drivers"});
  only_for("--drift", {"hyperplane", "rbf"});
  if (o.stream == "drivers") {
    expect(Task::Regress);
    DriverPingsConfig config;
    config.world.drivers = o.drivers;
    config.world.seed = o.seed;
    config.points = o.points;
    return std::make_unique<DriverPingsSource>(config);
  }
  expect(Task::Classify);
  if (o.stream == "rbf") {
    RbfConfig config;
    config.dim = o.dim;
    config.classes = o.classes;
    config.points = o.points;
    config.seed = o.seed;
    if (o.given.contains("--drift")) config.speed = o.drift;
    return std::make_unique<RbfDriftSource>(config);
  }
  HyperplaneConfig config;
  config.dim = o.dim;
  config.points = o.points;
  config.seed = o.seed;
  if (o.given.contains("--drift")) config.drift = o.drift;
  return std::make_unique<HyperplaneSource>(config);
}

PrequentialOptions prequential_options(const RunOptions& o, const SourceInfo& info) {
  PrequentialOptions p;
  p.k = o.k;
  p.weights = parse_weights(o.weights);
  p.metric = o.metric.empty() ? info.metric : parse_metric(o.metric);
  p.window = o.window;
  p.batch = o.batch;
  p.radius = o.radius;
  if (!o.require.empty() || !o.forbid.empty()) {
    Predicate where;
    const std::size_t words = info.attribute_names.size();
    for (const auto* list : {&o.require, &o.forbid}) {
      for (const std::string& text : *list) {
        const auto [word, bits] = *parse_word_bits(text);
        const char* flag = list == &o.require ? "--require" : "--forbid";
        if (word >= words) {
          throw UsageError(std::string(flag) + " " + text + ": word " + std::to_string(word) + " is not among the " +
                           std::to_string(words) + " --attributes columns (words 0 to " + std::to_string(words - 1) + ")");
        }
        where = list == &o.require ? where.require(word, bits) : where.forbid(word, bits);
      }
    }
    p.where = where;
  }
  p.backend = o.backend == "cpu" ? BackendKind::Cpu : o.backend == "cuda" ? BackendKind::Cuda : BackendKind::Auto;
  p.limit = o.limit;
  p.checkpoint = o.checkpoint;
  p.checkpoint_every = o.checkpoint_every;
  p.resume = o.resume;
  return p;
}

}  // namespace streamknn::streams
