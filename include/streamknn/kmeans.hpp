// streamknn/kmeans.hpp — exact K-means (Lloyd's algorithm) on the CPU or the CUDA backend.
//
// Every labelling is exact: each point gets its nearest centroid by (the exact squared L2
// distance of the float32 values, centroid index), ties to the smaller index, as the search
// ranks neighbours. Hamerly's bounds (kept per point across iterations) skip most distances of
// the late iterations; they only save work and never change a label. Centroid sums are float64
// in a fixed order (docs/kmeans.md), so results do not depend on the thread count, and both
// backends return identical centroids, labels, inertia and iteration counts for the same start.
//
// Threading: a KMeans object's configuration is fixed at construction; fit() and predict() may be
// called from any number of threads at once.
//
// Memory: a KMeans object keeps the device memory of its last CUDA fit (its arrays, its streams
// and the device copy of host points; on the host, the pinned buffers that copy goes through and
// the labels' narrow copy back) and the host threads of its last fit or predict (asleep between
// them) for its next one, which then skips the allocations and the threads' start (about 0.3 ms a
// fit on an H200, more for host points); a fit running while another holds them makes its own.
// Copies of the object and those made by with_config() share them; release_workspace() or the
// last sharer's destruction frees them.
//
// Errors: bad arguments throw InvalidArgument naming the argument and its value; BackendKind::Cuda
// without a usable device throws BackendUnavailable; OutOfMemory and CudaError as the rest of the
// library.
//
//   streamknn::KMeansConfig c;
//   c.clusters = 16;
//   const auto r = streamknn::KMeans(c).fit(points, dim);  // r.centroids, r.labels, r.inertia
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "streamknn/config.hpp"
#include "streamknn/update.hpp"

namespace streamknn {

class ReferenceSet;
namespace detail::kmeans {
class WorkspaceShelf;
}  // namespace detail::kmeans

/// How the starting centroids are chosen.
enum class KMeansInit : unsigned char {
  KMeansPlusPlus,  ///< greedy k-means++ (2 + floor(ln k) trials per centroid, as scikit-learn), seeded
  Random,          ///< `clusters` distinct points drawn uniformly, seeded
  Given,           ///< KMeansConfig::initial_centroids (then n_init must be 1)
};

/// One Lloyd iteration, as a fit reports it to KMeansConfig::on_iteration.
struct KMeansIteration {
  std::size_t start = 0;      ///< which of the n_init starts, from 0
  std::size_t iteration = 0;  ///< from 1 within the start
  std::size_t changed = 0;    ///< labels this iteration's labelling changed (every point in the first)
  double shift = 0;           ///< sum over centroids of their squared movement in this iteration's update
  bool last = false;          ///< the start stops after it (converged, within tol, or max_iter)
};

struct KMeansConfig {
  std::size_t clusters = 8;        ///< k, from 1 to the number of points
  std::size_t max_iter = 300;      ///< Lloyd iterations at most (at least 1)
  /// Stop when the sum over centroids of their squared movement is at most tol times the mean
  /// per-feature variance of the data (scikit-learn's rule); a labelling unchanged from the
  /// previous iteration stops it too. 0 stops only on an unchanged labelling or max_iter.
  double tol = 1e-4;
  std::size_t n_init = 1;          ///< independent starts; the lowest inertia wins (ties: the first)
  KMeansInit init = KMeansInit::KMeansPlusPlus;
  std::vector<float> initial_centroids;  ///< clusters x dim, row-major (KMeansInit::Given)
  std::uint64_t seed = 0;          ///< start i of n_init draws from seed + i
  BackendKind backend = BackendKind::Auto;  ///< Auto: CUDA where a device is usable, else CPU
  int cuda_device = 0;
  /// Threads of a fit's host work (the check of the points, the starts, tol's scale, the CPU
  /// backend, the CUDA backend's checked copy of the points and its labels' way back: a fit of
  /// many points from device memory takes at most 4 of them), the calling thread included (at most
  /// kMaxCpuThreads); 0 = one per hardware thread. Results do not depend on it.
  std::size_t cpu_threads = 0;
  /// Progress of long fits: called on the thread that called fit after every Lloyd iteration of
  /// every start (on the CUDA backend the iterations of a queued run reach the host together,
  /// after the run). It only observes: results do not depend on it. An exception it throws ends
  /// the fit and propagates to fit's caller. Empty: nothing is called.
  std::function<void(const KMeansIteration&)> on_iteration;
};

struct KMeansResult {
  std::size_t clusters = 0;
  std::size_t dim = 0;
  std::vector<float> centroids;       ///< clusters x dim: each the float64 mean of its points, rounded once
  std::vector<std::uint32_t> labels;  ///< one per point: its exact nearest centroid (docs/kmeans.md, The loop: one exception after a relocation)
  double inertia = 0;                 ///< sum of squared distances to the labelled centroids (float64)
  std::size_t iterations = 0;         ///< Lloyd iterations of the winning start
  bool converged = false;             ///< stopped by tol or an unchanged labelling, not max_iter
  BackendKind backend = BackendKind::Cpu;  ///< Cpu or Cuda, never Auto
  /// fit(ReferenceSet): the point of each label (same order) and the snapshot's epoch.
  std::vector<PointId> ids;
  std::uint64_t epoch = 0;
};

class KMeans {
 public:
  /// Validates the configuration (clusters >= 1, max_iter >= 1, tol finite and >= 0, n_init >= 1,
  /// initial centroids finite and a multiple of clusters long for Given, n_init == 1 for Given,
  /// cpu_threads <= kMaxCpuThreads, valid enum values); throws InvalidArgument naming the field.
  explicit KMeans(KMeansConfig config);

  /// Clusters n = points.size() / dim row-major float32 points. InvalidArgument for dim 0, a
  /// length that is not a multiple of dim, clusters > n, a NaN/Inf coordinate (naming the row),
  /// coordinates so large that a squared distance overflows float32 (streamknn/metric.hpp's bound),
  /// or given centroids of another dimension.
  KMeansResult fit(std::span<const float> points, std::size_t dim) const;

  /// Clusters n x dim row-major float32 points in CUDA device memory of config().cuda_device,
  /// read in place: results equal fit() of the same points in host memory. The CUDA backend
  /// runs it (backend Auto or Cuda; BackendUnavailable where no device is usable). The fit waits
  /// for the work queued on `cuda_stream` (a cudaStream_t; 0 = the legacy default stream) before
  /// it reads the points, which must stay valid and unchanged until it returns. The points are
  /// checked on the device (InvalidArgument as fit(), naming the first bad row); a pointer that is
  /// not device memory of that device, or backend Cpu, is InvalidArgument. Starts: Given and Random
  /// read only their rows from the device; KMeansPlusPlus weighs every point on the host, so it
  /// copies them there once. Nothing else crosses but the per-iteration counts and movements
  /// (k values each) and the results.
  KMeansResult fit_device(const float* points, std::size_t n, std::size_t dim, std::uintptr_t cuda_stream = 0) const;

  /// Clusters the points of the set's published snapshot (one epoch: publishes wait while the
  /// points are read). A CUDA store's points, where this fit runs on the CUDA backend of the same
  /// device, are gathered into rows on the device and clustered there; other stores' are copied
  /// out. L2 stores only; the vectors as stored, that is minus StoreConfig::origin where one is
  /// set (so are the centroids). result.ids names each labelled point, result.epoch the snapshot.
  KMeansResult fit(const ReferenceSet& set) const;

  /// The exact nearest of `centroids` (clusters x dim) for each point, on this configuration's
  /// backend; InvalidArgument as fit().
  std::vector<std::uint32_t> predict(std::span<const float> centroids, std::span<const float> points,
                                     std::size_t dim) const;

  /// A KMeans of `config` (validated as the constructor does) that shares this object's kept
  /// device memory (the class comment's Memory): a search over k, or fits from other starts,
  /// reuse it as the fits of one object do.
  KMeans with_config(KMeansConfig config) const;

  /// Frees the device memory kept from the last CUDA fit and stops the threads kept (the class
  /// comment's Memory); fits running at the time keep theirs until they end.
  void release_workspace() const;

  const KMeansConfig& config() const noexcept { return config_; }

 private:
  KMeansConfig config_;
  std::shared_ptr<detail::kmeans::WorkspaceShelf> workspace_;
};

}  // namespace streamknn
