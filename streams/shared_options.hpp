// streams/shared_options.hpp — the options `streamknn run` and `streamknn cluster` share.
//
// The input (a file, or a built-in stream and its settings), --backend and --no-progress are
// declared here once, for both subcommands; so are the checks on numbers' text that make a bad
// value a usage error (exit 2) naming the option and the value as given.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include <CLI/CLI.hpp>

#include "streamknn/config.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

/// Where the points come from: --input FILE, or a built-in generator.
struct InputOptions {
  std::string input, target;
  std::string stream = "hyperplane";
  std::size_t points = 200000;
  std::uint64_t seed = 42;
  std::size_t dim = 10;
  std::size_t classes = 4;
  std::size_t drivers = 1000;
  double drift = 0;
  std::set<std::string> given;  ///< every option given on the command line, by name ("--dim")
  std::size_t limit = 0;
};

/// A whole number in [lo, hi] in decimal digits, checked on its text before CLI11 converts it
/// (its conversion reads "-1" as 2^64 - 1 and wraps past 2^64; its Range calls "5.5" out of range).
CLI::Validator whole_number(std::uint64_t lo, std::uint64_t hi);
/// A finite number >= 0; the message repeats the value as it was given.
CLI::Validator non_negative_number();

/// Declares the input options in the group `group` of `app`: --input, --target (described by
/// `target_help`), then whatever `file_options` adds for files (it gets the --input option, for
/// needs()), then --stream, --points, --seed, --dim, --classes, --drivers, --drift and --limit.
/// Sets the app's callback, which fills InputOptions::given.
void add_input_options(CLI::App& app, InputOptions& options, const std::string& target_help,
                       const std::function<void(CLI::Option* input)>& file_options = {});

/// --backend auto|cpu|cuda in `group` (its value as a BackendKind: streamknn::parse_backend).
void add_backend_option(CLI::App& app, std::string& backend, const char* group);

/// --no-progress in `group`.
void add_no_progress_flag(CLI::App& app, bool& no_progress, const char* group);

/// The built-in stream the options name. An option the stream has no use for (--classes with the
/// hyperplane) is a UsageError rather than ignored.
std::unique_ptr<Source> open_generator(const InputOptions& options);

/// True for a .fvecs, .ivecs or .bvecs path.
bool is_vecs(const std::string& path);

}  // namespace streamknn::streams
