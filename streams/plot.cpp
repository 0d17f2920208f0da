#include "streams/plot.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "streams/errors.hpp"

extern char** environ;

namespace streamknn::streams {

namespace {

std::string find_script() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("STREAMKNN_PLOT_SCRIPT")) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = exe.parent_path() / "plot_stream.py";
    if (fs::exists(beside, ec)) return beside.string();
  }
#ifdef STREAMKNN_PLOT_SCRIPT_SOURCE
  if (fs::exists(STREAMKNN_PLOT_SCRIPT_SOURCE, ec)) return STREAMKNN_PLOT_SCRIPT_SOURCE;
#endif
  throw DataError("--plot: plot_stream.py was found neither next to the executable nor in the source tree; "
                  "set STREAMKNN_PLOT_SCRIPT to its path");
}

}  // namespace

void draw_plot(const std::string& predictions_csv, const std::string& png, Task task, const std::string& title) {
  const char* python_env = std::getenv("STREAMKNN_PYTHON");
  const std::string python = python_env ? python_env : "/usr/bin/python3";
  std::vector<std::string> args = {python, find_script(), predictions_csv, png, "--task", to_string(task), "--title", title};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int err = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ); err != 0) {
    throw DataError("--plot: cannot start " + python + " (" + std::strerror(err) +
                    "); plotting needs Debian's python3 with python3-matplotlib");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw DataError(std::string("--plot: waiting for the plot script failed: ") + std::strerror(errno));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw DataError("--plot: " + args[1] + " failed (exit status " +
                    std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "); its message is above");
  }
}

}  // namespace streamknn::streams
