#include "streams/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace streamknn::streams {

bool stderr_is_terminal() noexcept { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(bool enabled, std::optional<std::size_t> total)
    : enabled_(enabled), total_(total), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

bool ProgressBar::due(std::chrono::steady_clock::time_point now) {
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return false;
  last_draw_ = now;
  drawn_ = true;
  return true;
}

void ProgressBar::show(const std::string& text) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!due(now)) return;
  std::fprintf(stderr, "\r%s  %.1fs\033[K", text.c_str(), std::chrono::duration<double>(now - start_).count());
  std::fflush(stderr);
}

void ProgressBar::update(std::size_t done, const std::string& score) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!due(now)) return;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? double(done) / elapsed : 0;
  constexpr int kWidth = 30;
  if (total_ && *total_ > 0) {
    const double fraction = std::min(1.0, double(done) / double(*total_));
    const int filled = static_cast<int>(fraction * kWidth);
    const double eta = rate > 0 ? double(*total_ - std::min(done, *total_)) / rate : 0;
    std::fprintf(stderr, "\r[%.*s%*s] %3.0f%% %zu/%zu  %.0f pts/s  eta %.0fs  %s\033[K", filled,
                 "##############################", kWidth - filled, "", fraction * 100, done, *total_, rate, eta,
                 score.c_str());
  } else {
    std::fprintf(stderr, "\r%zu points  %.0f pts/s  %s\033[K", done, rate, score.c_str());
  }
  std::fflush(stderr);
}

void ProgressBar::finish() noexcept {
  if (!enabled_ || !drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace streamknn::streams
