#include "streams/run_options.hpp"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "streams/csv_source.hpp"
#include "streams/errors.hpp"
#include "streams/vecs_source.hpp"

namespace streamknn::streams {

namespace {

Task task_of(const RunOptions& o, Task natural) {
  if (o.task.empty()) return natural;
  return o.task == "regress" ? Task::Regress : Task::Classify;
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
  const char* input = "Input (a file, or a built-in stream)";
  CLI::Option* attributes = nullptr;
  add_input_options(run, o, "CSV: the label/target column (default: the last)", [&](CLI::Option* in) {
    run.add_option("--labels", o.labels, "vector files: one label/target per vector (.ivecs or .fvecs, dimension 1)")
        ->group(input)->needs(in);
    attributes = run.add_option("--attributes", o.attributes,
                                "CSV: columns holding each point's attribute words (word 0, 1, ...; whole numbers in "
                                "[0, 2^32), decimal or 0x hex), not features; at most 4")
                     ->group(input)->needs(in)->delimiter(',')->expected(1, int(kMaxAttributeWords));
  });
  constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();

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
  add_backend_option(run, o.backend, model);

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
  add_no_progress_flag(run, o.no_progress, output);
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
  std::unique_ptr<Source> source = open_generator(o);
  const Task natural = source->info().task;
  if (task_of(o, natural) != natural) {
    throw UsageError("--stream " + o.stream + " is a " + (natural == Task::Classify ? "classification" : "regression") +
                     " stream; --task " + o.task + " does not fit it");
  }
  return source;
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
  p.backend = parse_backend(o.backend);
  p.limit = o.limit;
  p.checkpoint = o.checkpoint;
  p.checkpoint_every = o.checkpoint_every;
  p.resume = o.resume;
  return p;
}

}  // namespace streamknn::streams
