// streams/main.cpp — `streamknn`, the command-line runner: the project's main job.
//
//   streamknn [run [OPTIONS]]      prequential (test-then-train) k-NN over a stream
//   streamknn cluster [OPTIONS]    exact K-means of a file's or a built-in stream's points
//
// With no command it runs `streamknn run` on the built-in default stream (what `make run`
// runs). Exit codes: 0 success, 1 data error, 2 usage error (CLI11's own errors included).
#include <string>

#include <CLI/CLI.hpp>

#include "streamknn/version.hpp"
#include "streams/cluster_command.hpp"
#include "streams/cluster_options.hpp"
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
  ClusterOptions cluster_options;
  CLI::App* cluster = app.add_subcommand(
      "cluster", "Exact K-means (Lloyd's algorithm) of a file's or a built-in stream's points, on the GPU where one "
                 "is usable. Prints a summary table; writes centroids, assignments and a JSON report on request.");
  add_cluster_options(*cluster, cluster_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsageError;  // --help and --version exit 0
  }
  std::string command_line = "streamknn";
  if (argc == 1) command_line += " run";
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  if (cluster->parsed()) return cluster_command(cluster_options, command_line);
  return run_command(options, command_line);
}
