#include "streams/shared_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "streams/drift_generators.hpp"
#include "streams/errors.hpp"
#include "streams/moving_objects.hpp"

namespace streamknn::streams {

bool is_vecs(const std::string& path) {
  return path.ends_with(".fvecs") || path.ends_with(".ivecs") || path.ends_with(".bvecs");
}

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

void add_input_options(CLI::App& app, InputOptions& o, const std::string& target_help,
                       const std::function<void(CLI::Option* input)>& file_options) {
  app.option_defaults()->always_capture_default();
  const char* input = "Input (a file, or a built-in stream)";
  auto* in = app.add_option("--input", o.input, "CSV file with a header, or .fvecs/.bvecs/.ivecs vectors")
                 ->group(input);
  app.add_option("--target", o.target, target_help)->group(input)->needs(in);
  if (file_options) file_options(in);
  app.add_option("--stream", o.stream,
                 "built-in stream: hyperplane (drifting, 2 classes), rbf (moving centroids), drivers (GPS pings -> "
                 "speed, haversine)")
      ->group(input)->check(CLI::IsMember({"hyperplane", "rbf", "drivers"}))->excludes(in);
  auto generator = [&](CLI::Option* option) { option->group(input)->excludes(in); };
  constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();
  generator(app.add_option("--points", o.points, "built-in stream: number of points")->check(whole_number(1, 1ul << 31)));
  generator(app.add_option("--seed", o.seed, "built-in stream: seed (the same seed gives the same stream)")
                ->check(whole_number(0, kAny)));
  generator(app.add_option("--dim", o.dim, "hyperplane/rbf: number of features")->check(whole_number(1, 4096)));
  generator(app.add_option("--classes", o.classes, "rbf: number of classes")->check(whole_number(2, 65536)));
  generator(app.add_option("--drivers", o.drivers, "drivers: number of drivers")->check(whole_number(1, 10000000)));
  generator(app.add_option("--drift", o.drift, "hyperplane: weight change per point (default 0.01); rbf: centroid "
                                               "speed per point (default 0.001)")
                ->check(non_negative_number())
                ->default_str(""));
  app.add_option("--limit", o.limit, "stop after this many points (0 = the whole input)")
      ->group(input)->check(whole_number(0, kAny));
  app.callback([&app, &o] {
    for (const CLI::Option* option : app.get_options()) {
      if (option->count() > 0) o.given.insert(option->get_name());
    }
  });
}

void add_backend_option(CLI::App& app, std::string& backend, const char* group) {
  app.add_option("--backend", backend, "auto (CUDA where a GPU is usable), cpu or cuda")
      ->group(group)->check(CLI::IsMember({"auto", "cpu", "cuda"}));
}

void add_no_progress_flag(CLI::App& app, bool& no_progress, const char* group) {
  app.add_flag("--no-progress", no_progress, "never draw the progress bar (it is drawn only on a terminal anyway)")
      ->group(group);
}

std::unique_ptr<Source> open_generator(const InputOptions& o) {
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
    DriverPingsConfig config;
    config.world.drivers = o.drivers;
    config.world.seed = o.seed;
    config.points = o.points;
    return std::make_unique<DriverPingsSource>(config);
  }
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

}  // namespace streamknn::streams
