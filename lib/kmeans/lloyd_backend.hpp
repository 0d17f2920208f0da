// The steps of one Lloyd run that a backend performs (CPU: lloyd_cpu.cpp; CUDA:
// lib/cuda/kmeans/), driven by kmeans.cpp, which owns the loop, the stopping rules, the
// empty-cluster relocation and the starts. Points stay in the caller's memory (CPU, and CUDA for
// points already on the device) or are copied to the device once per fit (CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/thread_pool.hpp"

namespace streamknn::detail::kmeans {

/// A point that may be among those farthest from their labelled centroids (far_points).
struct FarPoint {
  std::uint32_t point = 0, label = 0;
  double cost = 0;  ///< squared_distance (kmeans_exact.hpp) to its label's current centroid
};

struct LloydShape {
  /// n x d, row-major, valid for the backend's lifetime: host memory, or with on_device the CUDA
  /// backend's device memory (the host never reads it; gather() brings rows over).
  const float* points = nullptr;
  std::size_t n = 0, d = 0, k = 0;
  bool on_device = false;
  /// predict(): start(), assign() and fetch_labels() only (neither backend prepares the sums'
  /// units; the CUDA backend keeps no arrays for the sums, the inertia or the variance).
  bool labels_only = false;
};

/// Points per partial sum of the mean variance (variance_pass; kmeans_init.hpp's mean_variance).
inline constexpr std::size_t kVarianceChunk = 8192;

/// Points from which the CUDA backend's labels come back through the fit's host threads (which
/// widen them, and bring them early where runs allow: lib/cuda/kmeans/label_return.hpp), and the
/// clusters up to which they come back narrow (1 or 2 bytes a label; more come back as they are).
inline constexpr std::size_t kLabelsOnPool = std::size_t(1) << 18;
inline constexpr std::size_t kNarrowClusters = 65536;

/// What assign() may compute ahead: the Lloyd loop's iterations left, this one included, where the
/// caller runs kmeans.cpp's loop with tolerance `tol` (0 iterations: a labelling alone). The CUDA
/// backend then queues that many iterations (at most) without waiting between them, each stopping
/// the rest where the loop would stop (loop_stop, or an empty cluster); the CPU backend ignores it.
struct Lookahead {
  std::size_t iterations = 0;
  double tol = 0;
};

/// What a backend keeps from one fit for the next fit of the same KMeans object (the CUDA
/// backend's stream and device arrays: lib/cuda/kmeans/workspace.hpp); the CPU backend keeps none.
class LloydWorkspace {
 public:
  virtual ~LloydWorkspace() = default;
};

/// A KMeans object's idle workspace and host threads, at most one of each: a fit takes them (or
/// makes its own where another fit holds them) and puts its own back when it ends, replacing any
/// there. Starting a fit's threads took 50-80 us for three on an H200 host, 0.3 ms for sixteen.
class WorkspaceShelf {
 public:
  std::unique_ptr<LloydWorkspace> take() {
    const std::lock_guard lock(mutex_);
    return std::move(idle_);
  }
  void put(std::unique_ptr<LloydWorkspace> w) {
    {
      const std::lock_guard lock(mutex_);
      std::swap(idle_, w);
    }
    // the one replaced (w) is freed here, outside the lock
  }
  /// A pool of `workers` threads: the idle one where it has as many, else a new one.
  std::unique_ptr<ThreadPool> take_pool(std::size_t workers) {
    std::unique_ptr<ThreadPool> p;
    {
      const std::lock_guard lock(mutex_);
      if (idle_pool_ && idle_pool_->concurrency() == workers + 1) p = std::move(idle_pool_);
    }
    return p ? std::move(p) : std::make_unique<ThreadPool>(workers);
  }
  void put_pool(std::unique_ptr<ThreadPool> p) {
    {
      const std::lock_guard lock(mutex_);
      std::swap(idle_pool_, p);
    }
    // the one replaced (p) stops its threads here, outside the lock
  }
  /// Frees the idle workspace and stops the idle threads.
  void clear() {
    put(nullptr);
    put_pool(nullptr);
  }

 private:
  std::mutex mutex_;
  std::unique_ptr<LloydWorkspace> idle_;
  std::unique_ptr<ThreadPool> idle_pool_;
};

class LloydBackend {
 public:
  virtual ~LloydBackend() = default;

  /// Makes `centroids` (k x d) current and forgets the bounds: the next assign() scans every point.
  virtual void start(std::span<const float> centroids) = 0;
  /// Labels every point with its exact nearest current centroid (by (distance, index)). With
  /// `ahead`, the caller follows with accumulate() and advance() (or the relocation and move_to()),
  /// and the backend may have computed them, and later iterations', already: they come out the same.
  virtual void assign(const Lookahead& ahead) = 0;
  /// How many labels the last assign() changed (every point after start()). The CUDA backend
  /// brings it to the host with the counts of accumulate(): ask after that, to save a wait.
  virtual std::size_t changed() = 0;
  /// Counts (k) of the current labels; the backend keeps the per-cluster exact sums
  /// (cluster_sums.hpp), updated by the points the last assign() moved (every point after start()).
  virtual void accumulate(std::span<std::uint64_t> counts) = 0;
  /// The new centroids: mean(sum, count) per cluster (every count non-zero). Fills shift2 (k) with
  /// each centroid's squared_shift; the bounds follow the movement. Called right after
  /// accumulate(), nothing between them (the CUDA backend computes the means there already, so
  /// that an iteration waits for the device once).
  virtual void advance(std::span<double> shift2) = 0;
  /// The new centroids given by the caller (after an empty-cluster relocation), as advance().
  virtual void move_to(std::span<const float> centroids, std::span<double> shift2) = 0;
  /// Copies of the state: the sums of the last accumulate() (k x d), labels (n), centroids (k x d).
  virtual void fetch_sums(std::span<double> out) = 0;
  virtual void fetch_labels(std::span<std::uint32_t> out) = 0;
  /// Where the next fetch_labels() will write (`out`, called on the caller's thread, returns the
  /// span, or an empty one while it cannot be written yet): a backend may write the labels there
  /// before the loop ends and then only those that changed (the CUDA backend: label_return.hpp).
  /// The CPU backend ignores it.
  virtual void expect_labels(std::function<std::span<std::uint32_t>()> out) { (void)out; }
  virtual void fetch_centroids(std::span<float> out) = 0;
  /// For the empty-cluster relocation, with the labels and centroids of the last assign(): every
  /// point whose far_high (kmeans_exact.hpp) is at least far_low of the m-th largest cost (1 <= m
  /// <= n), with its label and cost, in any order: a superset of the m farthest points, which the
  /// caller ranks. Few cross to the host unless many costs tie with the m-th.
  virtual std::vector<FarPoint> far_points(std::size_t m) = 0;
  /// Sum over the points, in the fold tree's order over point indices, of the float64 squared
  /// distance to the labelled centroid.
  virtual double inertia() = 0;
  /// What the next fit may reuse, once this backend's work is done (it is not used after).
  virtual std::unique_ptr<LloydWorkspace> release_workspace() { return nullptr; }
  /// out (points.size() x d): the rows of the given points.
  virtual void gather(std::span<const std::uint32_t> points, std::span<float> out) = 0;
  /// One pass of the mean variance: out[c * d + j] (c < ceil(n / kVarianceChunk)) is the float64
  /// sum over chunk c's points, left to right, of x_ij (mean null) or of (x_ij - mean[j])^2, each
  /// step rounded (no fused multiply-add): the same bits on both backends.
  virtual void variance_pass(const double* mean, std::span<double> out) = 0;
};

/// The check of the points that the CUDA backend makes as it copies them to the device: every
/// float within `bound` in magnitude, NaN refused (core/check.hpp's first_beyond).
struct RowCheck {
  float bound = 0;
  std::size_t first = 0;  ///< out: the index of the first float beyond, or n x d when none is
};

/// The backend labels on the pool's threads; the pool outlives it.
std::unique_ptr<LloydBackend> make_cpu_lloyd(const LloydShape& shape, ThreadPool& pool);
/// Throws BackendUnavailable without CUDA (lib/kmeans/no_cuda.cpp) or a usable device, before
/// anything else (no point copied). Host points go to the device through pinned buffers that the
/// pool fills, testing every float against check.bound as it is copied; the copy stops at the
/// first float beyond, and a backend whose check.first is not n x d holds no points: the caller
/// refuses the input and drops it. Points on the device (shape.on_device) are read in place,
/// after `ready` (a cudaStream_t, 0 the legacy default stream) has done what was queued on it;
/// a kernel tests them, and InvalidArgument (naming `caller`) refuses a pointer that is not
/// memory of `device`.
/// `reuse`: a workspace from an earlier fit (release_workspace()), or none.
std::unique_ptr<LloydBackend> make_cuda_lloyd(const LloydShape& shape, int device, ThreadPool& pool, RowCheck& check,
                                              std::uintptr_t ready = 0, const char* caller = "KMeans",
                                              std::unique_ptr<LloydWorkspace> reuse = nullptr);
/// True when make_cuda_lloyd can succeed for this device.
bool cuda_lloyd_available(int device) noexcept;

}  // namespace streamknn::detail::kmeans
