// streams/main.cpp — `streamknn`, the command-line runner: the project's main job.
//
//   streamknn [run [OPTIONS]]      prequential (test-then-train) k-NN over a stream
//
// With no command it runs `streamknn run` on the built-in default stream (what `make run`
// runs). Exit codes: 0 success, 1 data error, 2 usage error (CLI11's own errors included).
#include <string>

#include <CLI/CLI.hpp>

#include "streamknn/version.hpp"
#include "streams/errors.hpp"
#include "streams/run_command.hpp"
#include "streams/run_options.hpp"

int main(int argc, char** argv) {
  using namespace streamknn::streams;
  CLI::App app{"streamknn: exact k-nearest-neighbour classification and regression over a reference set that "
               "changes while it is queried."};
  app.set_version_flag("--version", std::string("streamknn ") + streamknn::version_string());
  app.footer("With no command, streamknn runs `streamknn run` with its defaults. See docs/runner.md.");
  app.require_subcommand(0, 1);
  RunOptions options;
  CLI::App* run = app.add_subcommand(
      "run", "Test-then-train evaluation: predict each arriving labelled point from the current reference set (a "
             "sliding window), then insert it. Prints a summary table.");
  add_run_options(*run, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsageError;  // --help and --version exit 0
  }
  std::string command_line = "streamknn";
  if (argc == 1) command_line += " run";
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  return run_command(options, command_line);
}
