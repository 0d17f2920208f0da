// streams/progress.hpp — a one-line progress bar on stderr for long runs.
//
// Redrawn in place (carriage return) at most ten times a second, so it costs nothing next to
// the run; enabled only when stderr is a terminal, so logs and pipes never see it. The line is
// erased when the bar is finished or destroyed, leaving stdout's summary clean.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace streamknn::streams {

bool stderr_is_terminal() noexcept;

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::optional<std::size_t> total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// `done` points so far; `score` a short running score ("accuracy 0.912").
  void update(std::size_t done, const std::string& score);
  /// A line of its own instead of the points ("start 1/3, iteration 37, 1,234 labels changed"),
  /// followed by the time since the bar was made; redrawn as update() is.
  void show(const std::string& text);
  void finish() noexcept;

 private:
  bool enabled_;
  std::optional<std::size_t> total_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;

  /// True when a redraw is due now (none drawn yet, or 100 ms since the last).
  bool due(std::chrono::steady_clock::time_point now);
};

}  // namespace streamknn::streams
