// The labels' way back to the host (CudaLloyd::fetch_labels). A million labels copied into
// pageable memory and widened to 4 bytes took 0.3-0.5 ms on an H200 host, a tenth of a small
// fit's time, all of it after the last iteration. Labels of few clusters come over in 1 or 2 bytes
// each and the pool's threads widen them. Where the fit iterates in queued runs, the labels come
// over early as well, once few change an iteration: before a run is launched they are narrowed on
// the device into a snapshot, and while the run iterates the host copies it a chunk at a time,
// widening each into the fit's result. At the end only the labels that changed since come back (a
// changes kernel lists them), usually a small part; where more changed than the list holds, all of
// them come back as before.
//
// The host's share must not outlast the run (the last run of a fit may be a few iterations), so it
// stops at the first chunk after the run ends. Two snapshots take turns: a snapshot stopped
// part-way leaves the result holding its first chunks and the last complete one's others (or
// nothing there, which the end then brings whole), and the changes kernel compares each label
// with the snapshot its chunk came from; no snapshot follows in that fit.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/thread_pool.hpp"
#include "cuda/cuda_raii.hpp"
#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

class LabelReturn {
 public:
  /// Labels from which they come over narrow; fewer come over as they are.
  static constexpr std::uint32_t kNarrowLabels = 1u << 16;

  /// The device arrays it uses (the fit's block: FitArrays::place, fit_arrays.hpp): room for n
  /// labels of width() bytes to narrow them into at the end (staging), two snapshots (as much
  /// each; null where early copies do not serve) and, for the changes since, a counter and `room`
  /// pairs of a place and a label.
  struct Arrays {
    void* staging = nullptr;
    std::array<void*, 2> snapshots{};
    std::uint32_t* count = nullptr;
    std::uint32_t* changes = nullptr;
    std::uint32_t room = 0;
  };

  /// `narrow`: the host's narrow copy and `side` the stream the early copies go on (kept by the
  /// workspace between fits; the stream made at the first early copy). The pool widens.
  LabelReturn(ThreadPool& pool, std::uint32_t n, std::uint32_t k, std::vector<unsigned char>& narrow,
              std::optional<gpu::Stream>& side);

  /// Bytes a label of k clusters takes on its way back: 1, 2 or 4.
  static int width_for(std::uint32_t k) noexcept { return k <= 256 ? 1 : k <= kNarrowClusters ? 2 : 4; }
  /// Whether labels of n points of k clusters come over early: many, and narrow.
  static bool early_for(std::uint32_t n, std::uint32_t k) noexcept { return n >= kLabelsOnPool && width_for(k) < 4; }
  /// The changes' room for n points of k clusters: their places and labels cost an eighth of the
  /// narrow copy's bytes at most (a copy of 24,000 pairs and their scattered writes took as long
  /// as the whole copy of a million labels), else the whole copy comes over.
  static std::uint32_t room_for(std::uint32_t n, std::uint32_t k) noexcept {
    return std::uint32_t(std::uint64_t(n) * width_for(k) / 64);
  }

  void place(const Arrays& arrays) noexcept { arrays_ = arrays; }

  /// Where the fit's labels go: `out` returns the host span, or an empty one while it cannot be
  /// written yet (the fit sizes it on a helper thread). Holds until take(); a fit's run calls it
  /// before its first run.
  void expect(std::function<std::span<std::uint32_t>()> out);

  /// Queues `launch` (a run of iterations on `s`) with the current labels coming over while it
  /// runs, where early copies serve, a fit expects them and `changed` (labels the last iteration
  /// changed) is few; else just launches it.
  void during(const std::uint32_t* labels, std::size_t changed, cudaStream_t s, const std::function<void()>& launch);

  /// out (n) = the labels, on the host; waits for `s`.
  void take(const std::uint32_t* labels, std::span<std::uint32_t> out, cudaStream_t s);

 private:
  /// A snapshot is taken once an iteration changes at most this share of the labels (1 / x):
  /// earlier ones would see most of their labels change again.
  static constexpr std::size_t kFewChanges = 1024;

  /// Copies and widens snapshot `which` into out a chunk at a time until the run (ran_) ends;
  /// returns the labels done.
  std::uint32_t bring(int which, std::span<std::uint32_t> out);
  bool take_changes(const std::uint32_t* labels, std::span<std::uint32_t> out, cudaStream_t s);
  /// Labels [lo, n) narrowed on `s`, copied and widened into out.
  void take_from(std::size_t lo, const std::uint32_t* labels, std::span<std::uint32_t> out, cudaStream_t s);
  /// narrow_'s labels [lo, hi) into out, on the pool's threads.
  void widen(std::size_t lo, std::size_t hi, std::span<std::uint32_t> out);

  ThreadPool& pool_;
  std::uint32_t n_;
  int width_;
  std::vector<unsigned char>& narrow_;
  std::optional<gpu::Stream>& side_;
  Arrays arrays_;
  std::optional<gpu::Event> snapped_;  // the snapshot is on the device (made at the first)
  std::optional<gpu::Event> ran_;      // the run it came over during has ended
  std::function<std::span<std::uint32_t>()> out_;
  // Where holding_ (a span of the result) is not empty, it holds the labels of snapshot newer_
  // below split_, and from there those of the other one (the last complete one) where older_.
  std::span<std::uint32_t> holding_;
  int newer_ = 0;
  std::uint32_t split_ = 0;
  bool older_ = false;
  bool stopped_ = false;  // a snapshot stopped part-way: none follows in this fit
};

}  // namespace streamknn::detail::kmeans
