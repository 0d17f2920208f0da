// The CUDA backend of K-means (lib/kmeans/lloyd_backend.hpp): the points copied to the device
// once, through pinned buffers, and checked as they are copied (staged_upload.hpp), or read in
// place where the caller's are on the device (checked by a kernel); per iteration the bounds and
// scan kernels label (the scan listing the points whose label changed), the sums kernel moves
// those points' exact digit sums between clusters (every point after a start: sum_kernels.cu),
// and one copy brings the counts, the changed-label count and the movements to the host. Once
// the bounds exist, a labelling queues a run of iterations without waiting between them: where
// the run kernel serves (run_kernel.cu: few clusters and cells, the points' state in shared
// memory), up to 64 iterations in one cooperative launch; else the one-step kernels of 2, 4, 8,
// then 16 iterations at most. Each iteration decides as the host's loop will (loop_stop, an empty
// cluster) and stops the rest, and the host takes the iterations' reports from one copy. An
// empty-cluster relocation gets the far points from a sort of the costs on the device. The labels
// come back narrow, and for many points mostly while later runs iterate (label_return.hpp). Same
// arithmetic as the CPU backend (lib/kmeans/kmeans_exact.hpp), so the same results.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/thread_pool.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/kmeans/fit_arrays.hpp"
#include "cuda/kmeans/kmeans_kernels.hpp"
#include "cuda/kmeans/label_return.hpp"
#include "cuda/kmeans/staged_upload.hpp"
#include "cuda/kmeans/workspace.hpp"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/fold_layout.hpp"
#include "kmeans/kmeans_exact.hpp"
#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

namespace {

namespace gk = streamknn::detail::gpu::kmeans;

/// InvalidArgument unless `points` is device (or managed) memory that `device` can read.
void require_device_memory(const float* points, int device, const char* caller) {
  cudaPointerAttributes at{};
  if (cudaPointerGetAttributes(&at, points) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the caller's pointer was not one CUDA knows
    fail_argument(caller, ": points is not CUDA memory");
  }
  if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) {
    fail_argument(caller, ": points is ", at.type == cudaMemoryTypeHost ? "pinned host" : "host",
                  " memory, not device memory of CUDA device ", device, " (use fit() for host memory)");
  }
  if (at.type == cudaMemoryTypeDevice && at.device != device) {
    fail_argument(caller, ": points is memory of CUDA device ", at.device, ", not of config.cuda_device=", device);
  }
}

using gpu::DeviceArray;
using gpu::check_cuda;

class CudaLloyd final : public LloydBackend {
  /// Iterations queued at most before the host looks: the kernels queued after a stop cost a few
  /// microseconds each, so runs begin at 2 iterations and double, and a fit that stops early
  /// wastes few.
  static constexpr std::size_t kMaxRun = 16;
  /// The same for the run kernel (run_kernel.cu), which stops where the loop stops at no cost: a
  /// run is as long as the reports' one copy back keeps cheap.
  static constexpr std::size_t kMaxKernelRun = 64;

 public:
  /// Leaves check.first at the first float beyond check.bound, with the upload stopped there
  /// (host points); `ready` is the stream device points were written on. Every array of the fit
  /// but the relocation's lives in one device allocation, and the host's copies of the reports
  /// in one vector: a fit's fixed cost is a few calls, not one per array.
  CudaLloyd(const LloydShape& s, int device, ThreadPool& pool, RowCheck& check, std::uintptr_t ready,
            std::unique_ptr<LloydWorkspace> reuse)
      : pool_(pool), scope_(device), n_(std::uint32_t(s.n)), d_(std::uint32_t(s.d)), k_(std::uint32_t(s.k)),
        levels_(fold_levels_for(s.n)), labels_only_(s.labels_only), bound_(prune_bound(d_)),
        plan_(s.labels_only ? gk::RunPlan{} : gk::plan_run(n_, k_, d_)),
        max_run_(plan_.blocks != 0 ? kMaxKernelRun : kMaxRun),
        ws_(CudaWorkspace::take(std::move(reuse), device, a_.place(nullptr, sizes()), s.on_device ? 0 : s.n * s.d)),
        labels_back_(pool, n_, k_, ws_->labels, ws_->side),
        host_(FitArrays::host_doubles(s.k, max_run_)) {
    a_.place(ws_->block.get(), sizes());
    labels_back_.place(LabelReturn::Arrays{.staging = a_.list.get(),
                                           .snapshots = {a_.snapshot_a.size() != 0 ? a_.snapshot_a.get() : nullptr,
                                                         a_.snapshot_b.size() != 0 ? a_.snapshot_b.get() : nullptr},
                                           .count = a_.change_count.get(),
                                           .changes = a_.moved_points.get(),
                                           .room = LabelReturn::room_for(n_, k_)});
    // n_ is a member: the (pageable) source outlives the copy; the constructor's last wait covers it.
    check_cuda(cudaMemcpyAsync(a_.one.get(), &n_, sizeof n_, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync",
               "kmeans n");
    if (!labels_only_) gk::launch_iota(a_.iota.get(), n_, stream());
    // A run's one copy brings every report slot and the whole loop control, also those a run that
    // stopped early or the run kernel (which leaves tol) did not write: zeroed, so none is stale.
    check_cuda(cudaMemsetAsync(a_.loop.get(), 0, sizeof(gk::Loop), stream()), "cudaMemsetAsync", "kmeans loop control");
    if (a_.slots.size() != 0) {
      check_cuda(cudaMemsetAsync(a_.slots.get(), 0, a_.slots.bytes(), stream()), "cudaMemsetAsync", "kmeans reports");
    }
    if (s.on_device) {
      xp_ = s.points;
      check_in_place(check, ready);
    } else {
      upload(s.points, device, pool, check);
      xp_ = ws_->points.get();
    }
    // The exact sums' units: computed with the check for device points, after the copy else.
    if (!labels_only_ && !s.on_device && check.first == s.n * s.d) {
      gk::launch_feature_tops(xp_, n_, d_, a_.tops.get(), stream());
    }
    if (!labels_only_) sum_blocks_ = gk::move_sums_blocks(n_, k_, d_);
  }

  void start(std::span<const float> c) override {
    upload_centroids(c);
    bounded_ = false;
    moved_ = false;
    advanced_ = false;
    summed_ = false;
    queued_ = 0;
    slot_ = 0;
    run_length_ = plan_.blocks != 0 ? max_run_ : 2;
    runs_ = 0;
  }

  void expect_labels(std::function<std::span<std::uint32_t>()> out) override { labels_back_.expect(std::move(out)); }

  std::size_t changed() override {
    if (!changed_ready_) copy_out(host_counts() + k_, changed_count(), sizeof(std::uint32_t));
    return first_ ? n_ : host_counts()[k_];
  }

  void assign(const Lookahead& ahead) override {
    if (queued_ > 0) {  // this iteration ran in the last run of queued ones: its report is next
      if (ahead.iterations == 0) throw std::logic_error("KMeans: the queued iterations went on past the loop's stop");
      ++slot_;
      --queued_;
      moved_ = false;
      return;
    }
    from_run_ = ahead.iterations > 0 && bounded_ && moved_ && summed_ && !labels_only_;
    if (from_run_) {
      run_iterations(std::min(ahead.iterations, run_length_), ahead.tol);
      run_length_ = std::min(2 * run_length_, max_run_);
      return;
    }
    slot_ = 0;
    queue_labelling(bounded_, moved_, nullptr);
    changed_ready_ = false;  // comes to the host with accumulate()'s counts
    first_ = !bounded_;
    bounded_ = true;
    moved_ = false;
  }

  void accumulate(std::span<std::uint64_t> counts) override {
    if (!from_run_) {
      queue_sums(summed_, nullptr);
      queue_update(gk::LoopEnd{}, a_.shift2.get());
      // One copy: the shifts, the counts and the changed count lie in that order (FitArrays::place).
      check_cuda(cudaMemcpyAsync(host_shift2(), a_.shift2.get(), FitArrays::report_bytes(k_), cudaMemcpyDeviceToHost,
                                 stream()),
                 "cudaMemcpyAsync", "kmeans counts and shifts");
      summed_ = true;
      sync();
    }
    advanced_ = true;
    for (std::uint32_t c = 0; c < k_; ++c) {
      counts[c] = host_counts()[c];
      if (counts[c] == 0) advanced_ = false;
    }
    if (!advanced_) copy_on_device(a_.centroids.get(), a_.before.get(), a_.centroids.bytes());
  }

  void advance(std::span<double> shift2) override {
    if (!advanced_) {  // the wager was not taken: the means now, then wait for their movements
      gk::launch_means(update_args(a_.shift2.get()), nullptr, stream());
      finish_move(shift2);
      return;
    }
    advanced_ = false;
    take_shifts(shift2);
  }

  void move_to(std::span<const float> c, std::span<double> shift2) override {
    copy_on_device(a_.before.get(), a_.centroids.get(), a_.centroids.bytes());
    upload_centroids(c);
    finish_move(shift2);
  }

  void fetch_sums(std::span<double> out) override { copy_out(out.data(), a_.sums.get(), a_.sums.bytes()); }
  void fetch_labels(std::span<std::uint32_t> out) override { labels_back_.take(a_.labels.get(), out, stream()); }
  void fetch_centroids(std::span<float> out) override {
    copy_out(out.data(), a_.centroids.get(), a_.centroids.bytes());
  }

  std::vector<FarPoint> far_points(std::size_t m) override {
    // The costs sorted on the device; the screen's prefix of them, their points and labels come
    // back (usually a handful: two small copies instead of n labels and a host pass over n x d).
    const cudaStream_t s = stream();
    if (far_order_.size() == 0) {
      far_temp_ = DeviceArray<unsigned char>(gk::cost_sort_bytes(n_), "kmeans cost sort scratch");
      far_sorted_ = DeviceArray<double>(n_, "kmeans sorted costs");
      far_labels_ = DeviceArray<std::uint32_t>(n_, "kmeans far labels");
      far_order_ = DeviceArray<std::uint32_t>(n_, "kmeans far points");
      far_count_ = DeviceArray<std::uint32_t>(1, "kmeans far point count");
    }
    gk::launch_point_costs(xp_, a_.centroids.get(), a_.labels.get(), n_, d_, a_.costs.get(), s);
    gk::sort_costs(far_temp_.get(), far_temp_.size(), a_.costs.get(), far_sorted_.get(), a_.iota.get(),
                   far_order_.get(), n_, s);
    gk::launch_far_points(far_sorted_.get(), far_order_.get(), a_.labels.get(), n_, std::uint32_t(m), d_,
                          far_count_.get(), far_labels_.get(), s);
    std::uint32_t count = 0;
    copy_out(&count, far_count_.get(), sizeof count);
    std::vector<std::uint32_t> points(count), labels(count);
    std::vector<double> costs(count);
    check_cuda(cudaMemcpyAsync(points.data(), far_order_.get(), count * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans far points");
    check_cuda(cudaMemcpyAsync(labels.data(), far_labels_.get(), count * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans far labels");
    copy_out(costs.data(), far_sorted_.get(), count * sizeof(double));
    std::vector<FarPoint> out(count);
    for (std::uint32_t i = 0; i < count; ++i) out[i] = FarPoint{points[i], labels[i], costs[i]};
    return out;
  }

  void gather(std::span<const std::uint32_t> points, std::span<float> out) override {
    if (points.empty()) return;
    const cudaStream_t s = stream();
    DeviceArray<std::uint32_t> rows(points.size(), "kmeans gathered rows");
    DeviceArray<float> values(out.size(), "kmeans gathered values");
    check_cuda(cudaMemcpyAsync(rows.get(), points.data(), points.size_bytes(), cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync", "kmeans gathered rows");
    gk::launch_gather(xp_, rows.get(), std::uint32_t(points.size()), d_, values.get(), s);
    copy_out(out.data(), values.get(), out.size_bytes());  // waits: `points` may go once this returns
  }

  void variance_pass(const double* mean, std::span<double> out) override {
    const cudaStream_t s = stream();
    if (mean) {
      check_cuda(cudaMemcpyAsync(a_.means.get(), mean, a_.means.bytes(), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync",
                 "kmeans feature means");
    }
    gk::launch_variance_pass(xp_, n_, d_, mean ? a_.means.get() : nullptr, a_.variance.get(), s);
    copy_out(out.data(), a_.variance.get(), out.size_bytes());  // waits: `mean` may go once this returns
  }

  std::unique_ptr<LloydWorkspace> release_workspace() override {
    sync();
    return std::move(ws_);
  }

  double inertia() override {
    const cudaStream_t s = stream();
    gk::launch_point_costs(xp_, a_.centroids.get(), a_.labels.get(), n_, d_, a_.costs.get(), s);
    fold(a_.costs.get(), nullptr, a_.one.get(), 1, 1, a_.root.get());  // a_.one holds n (the constructor's copy)
    double out = 0;
    copy_out(&out, a_.root.get(), sizeof out);
    return out;
  }

 private:
  /// Copies the points to the workspace's copy (staged_upload.hpp), check.first at the first float
  /// beyond check.bound (then the copy holds no usable points), else n x d.
  void upload(const float* points, int device, ThreadPool& pool, RowCheck& check) {
    check.first =
        staged_upload(ws_->points.get(), points, std::size_t(n_) * d_, check.bound, device, stream(), pool, ws_->staging);
  }

  /// Device points, read in place: after the caller's stream's work, one pass finds the first
  /// float beyond check.bound (check.first; n x d when none is).
  void check_in_place(RowCheck& check, std::uintptr_t ready) {
    const cudaStream_t s = stream();
    gpu::Event written;
    written.record(reinterpret_cast<cudaStream_t>(ready));
    check_cuda(cudaStreamWaitEvent(s, written.get()), "cudaStreamWaitEvent(caller's stream)");
    const std::size_t count = std::size_t(n_) * d_;
    // None beyond: the all-ones bits (the largest index) stay.
    check_cuda(cudaMemsetAsync(a_.first_bad.get(), 0xff, sizeof(unsigned long long), s), "cudaMemsetAsync",
               "kmeans first bad float");
    gk::launch_first_beyond(xp_, n_, d_, check.bound, a_.first_bad.get(), labels_only_ ? nullptr : a_.tops.get(), s);
    unsigned long long at = count;
    copy_out(&at, a_.first_bad.get(), sizeof at);
    check.first = std::size_t(std::min<unsigned long long>(at, count));
  }

  /// A run of `count` iterations queued at once, from bounds that exist and centroids that moved:
  /// each labels, sums, and moves the centroids, writes its report (slot i) and stops the rest
  /// where the host's loop stops: the run kernel where it serves (plan_), else the one-step
  /// kernels of each iteration, whose last one decides (kmeans_kernels.hpp's LoopEnd). One copy
  /// brings the reports; the host then takes them an iteration at a time (slot_, queued_).
  void run_iterations(std::size_t count, double tol) {
    const cudaStream_t s = stream();
    if (plan_.blocks != 0) {
      // From the second run on, the labels may come over while it runs (the first starts from
      // labels of the first iteration, most of which the run changes).
      const auto launch = [&] { gk::launch_run(run_args(count, tol), plan_, s); };
      if (runs_++ > 0) {
        labels_back_.during(a_.labels.get(), changed(), s, launch);
      } else {
        launch();
      }
    } else {
      queue_run(count, tol);
    }
    check_cuda(cudaMemcpyAsync(host_.data(), a_.slots.get(), count * slot_doubles() * sizeof(double),
                               cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans iteration reports");
    check_cuda(cudaMemcpyAsync(host_loop(), a_.loop.get(), sizeof(gk::Loop), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans loop control");
    sync();
    slot_ = 0;
    queued_ = host_loop()->ran - 1;  // ran >= 1: the first iteration always runs
    first_ = false;
    moved_ = false;
  }

  /// The one-step kernels of `count` iterations, each skipping its work once the loop stopped.
  void queue_run(std::size_t count, double tol) {
    const cudaStream_t s = stream();
    *host_loop() = gk::Loop{0, 0, tol};
    check_cuda(cudaMemcpyAsync(a_.loop.get(), host_loop(), sizeof(gk::Loop), cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync", "kmeans loop control");
    check_cuda(cudaMemsetAsync(changed_count(), 0, 2 * sizeof(std::uint32_t), s), "cudaMemsetAsync", "kmeans counters");
    for (std::size_t i = 0; i < count; ++i) {
      queue_labelling(true, true, a_.loop.get());
      queue_sums(true, a_.loop.get());
      double* report = a_.slots.get() + i * slot_doubles();
      queue_update(gk::LoopEnd{.loop = a_.loop.get(),
                               .counts = a_.counts.get(),
                               .counters = changed_count(),
                               .report_counts = reinterpret_cast<std::uint32_t*>(report + k_)},
                   report);
    }
  }

  /// The run kernel's arguments: the fit's arrays, at most `count` iterations, the loop's tol.
  gk::RunArgs run_args(std::size_t count, double tol) const {
    return gk::RunArgs{.x = xp_,
                       .labels = a_.labels.get(),
                       .upper = a_.upper.get(),
                       .lower = a_.lower.get(),
                       .tops = a_.tops.get(),
                       .digits = a_.digits.get(),
                       .counts = a_.counts.get(),
                       .centroids = a_.centroids.get(),
                       .before = a_.before.get(),
                       .sums = a_.sums.get(),
                       .delta = a_.delta.get(),
                       .moves = a_.moves.get(),
                       .moved_sums = a_.moved_sums.get(),
                       .reports = a_.slots.get(),
                       .report_doubles = slot_doubles(),
                       .loop = a_.loop.get(),
                       .tol = tol,
                       .bound = bound_,
                       .count = std::uint32_t(count),
                       .n = n_,
                       .d = d_,
                       .k = k_};
  }

  /// The labelling: Hamerly's test and a scan of the points that fail it (bounded), else a scan
  /// of every point. In a queued run (loop), its counters are zeroed by the run and each iteration.
  void queue_labelling(bool bounded, bool moved, const gk::Loop* loop) {
    const gk::LabelArgs a{.x = xp_,
                          .centroids = a_.centroids.get(),
                          .labels = a_.labels.get(),
                          .upper = a_.upper.get(),
                          .lower = a_.lower.get(),
                          .half_gap = a_.half_gap.get(),
                          .delta = a_.delta.get(),
                          .moves = a_.moves.get(),
                          .list = a_.list.get(),
                          .list_count = list_count(),
                          .changed = changed_count(),
                          .moved = labels_only_ ? nullptr : a_.moved_points.get(),  // predict() keeps no moves
                          .moved_from = a_.moved_from.get(),
                          .loop = loop,
                          .bound = bound_,
                          .n = n_,
                          .d = d_,
                          .k = k_};
    const cudaStream_t s = stream();
    if (!loop) {
      check_cuda(cudaMemsetAsync(changed_count(), 0, 2 * sizeof(std::uint32_t), s), "cudaMemsetAsync", "kmeans counters");
    }
    if (bounded) {
      gk::launch_half_gaps(a_.centroids.get(), k_, d_, a_.half_gap.get(), loop, s);
      gk::launch_bounds(a, moved, s);
      gk::launch_scan(a, false, s);
    } else {
      gk::launch_scan(a, true, s);
    }
  }

  /// The sums of the labels (moved: from the last ones and the moved points; else every point).
  /// The callers then queue the update of the centroids on the wager that no cluster is empty (the
  /// usual case): the means and their movements come back with the counts, so an iteration waits
  /// once. An empty cluster loses the wager: accumulate() puts the centroids back, and the
  /// relocation and move_to() start from them as usual.
  void queue_sums(bool moved, const gk::Loop* loop) {
    const cudaStream_t s = stream();
    const gk::SumArgs a{.x = xp_,
                        .labels = a_.labels.get(),
                        .moved = moved ? a_.moved_points.get() : nullptr,
                        .moved_from = a_.moved_from.get(),
                        .moved_count = changed_count(),
                        .tops = a_.tops.get(),
                        .digits = a_.digits.get(),
                        .counts = a_.counts.get(),
                        .loop = loop,
                        .n = n_,
                        .d = d_,
                        .k = k_};
    gk::launch_move_sums(a, sum_blocks_, s);
  }

  /// The means and their movements (into shift2, k), then `end` (a queued iteration's).
  void queue_update(const gk::LoopEnd& end, double* shift2) {
    const gk::UpdateArgs u = update_args(shift2);
    gk::launch_means(u, end.loop, stream());
    gk::launch_shifts(u, end, stream());
  }

  /// The update's arrays, the movements going to shift2 (k).
  gk::UpdateArgs update_args(double* shift2) const {
    return gk::UpdateArgs{.digits = a_.digits.get(),
                          .tops = a_.tops.get(),
                          .counts = a_.counts.get(),
                          .sums = a_.sums.get(),
                          .centroids = a_.centroids.get(),
                          .before = a_.before.get(),
                          .shift2 = shift2,
                          .delta = a_.delta.get(),
                          .moves = a_.moves.get(),
                          .k = k_,
                          .d = d_};
  }

  /// The fold tree over `k` sequences (counts on the device) of rows of `values` into roots (k x d);
  /// a_.moff, a_.offs and the levels are sized for the inertia's one sequence of n values.
  void fold(const double* values, const std::uint32_t* members, const std::uint32_t* counts, std::uint32_t k,
            std::uint32_t d, double* roots) {
    const cudaStream_t s = stream();
    gk::launch_tree_tables(counts, k, levels_, a_.moff.get(), a_.offs.get(), s);
    std::size_t nodes = n_ / kFold + k + 1;
    gk::launch_fold_leaves(values, members, a_.moff.get(), a_.offs.get(), k, d, nodes, a_.level_a.get(), s);
    double* below = a_.level_a.get();
    for (std::uint32_t level = 1; level < levels_; ++level) {
      nodes = nodes / kFold + k + 1;
      double* out = level % 2 ? a_.level_b.get() : a_.level_a.get();
      gk::launch_fold_level(below, a_.offs.get() + (level - 1) * (k + 1), a_.offs.get() + level * (k + 1), k, d,
                            nodes, out, s);
      below = out;
    }
    gk::launch_fold_roots(below, a_.offs.get() + (levels_ - 1) * (k + 1), k, d, roots, s);
  }

  void finish_move(std::span<double> shift2) {
    const cudaStream_t s = stream();
    gk::launch_shifts(update_args(a_.shift2.get()), gk::LoopEnd{}, s);
    check_cuda(cudaMemcpyAsync(host_shift2(), a_.shift2.get(), a_.shift2.bytes(), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans shifts");
    sync();
    take_shifts(shift2);
  }

  /// shift2 from the shifts that reached the host (the bounds' movements stay on the device).
  void take_shifts(std::span<double> shift2) {
    std::copy_n(host_shift2(), k_, shift2.begin());
    moved_ = true;
  }

  /// After the counts in the report (FitArrays::place): the labels the last scan changed, then the
  /// bounds kernel's list's length.
  std::uint32_t* changed_count() const { return a_.counts.ptr + k_; }
  std::uint32_t* list_count() const { return a_.counts.ptr + k_ + 1; }
  /// The current iteration's report on the host (slot_ of host_): the shifts (k), then the counts
  /// and the changed count.
  double* host_shift2() { return host_.data() + slot_ * slot_doubles(); }
  std::uint32_t* host_counts() { return reinterpret_cast<std::uint32_t*>(host_shift2() + k_); }
  /// The queued run's control, after the max_run_ reports of host_.
  gk::Loop* host_loop() { return reinterpret_cast<gk::Loop*>(host_.data() + max_run_ * slot_doubles()); }

  std::size_t slot_doubles() const { return FitArrays::slot_doubles(k_); }

  /// What sizes the fit's arrays (FitArrays::place).
  FitSizes sizes() const { return FitSizes{n_, d_, k_, levels_, labels_only_, plan_.blocks != 0, max_run_}; }

  void upload_centroids(std::span<const float> c) {
    check_cuda(cudaMemcpyAsync(a_.centroids.get(), c.data(), c.size_bytes(), cudaMemcpyHostToDevice, stream()),
               "cudaMemcpyAsync", "kmeans centroids");
    // No wait here: the centroids (a vector of kmeans.cpp's loop, or predict's caller's) outlive
    // the next wait, which every path reaches before they change.
  }

  void copy_on_device(void* to, const void* from, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync",
               "kmeans device copy");
  }

  void copy_out(void* to, const void* from, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync", "kmeans copy");
    sync();
  }

  cudaStream_t stream() const noexcept { return ws_->stream.get(); }

  void sync() {
    check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", "kmeans");
    changed_ready_ = true;
  }

  ThreadPool& pool_;  // the fit's host threads (KMeansConfig::cpu_threads)
  gpu::DeviceScope scope_;
  std::uint32_t n_, d_, k_, levels_;
  bool labels_only_;  // LloydShape::labels_only
  PruneBound bound_;  // the screen's bound at d_ (kmeans_exact.hpp), for every labelling kernel
  gk::RunPlan plan_;  // the run kernel's launch (blocks 0: runs of the one-step kernels)
  std::size_t max_run_;  // a run's iterations at most
  unsigned sum_blocks_ = 1;  // the sums kernel's grid (move_sums_blocks)
  FitArrays a_;  // the fit's device arrays, in ws_'s block
  // The stream, the block of a_'s arrays and the host points' copy, from an earlier fit where the
  // KMeans object kept one (workspace.hpp).
  std::unique_ptr<CudaWorkspace> ws_;
  LabelReturn labels_back_;  // the labels' way to the host
  const float* xp_ = nullptr;  // the points the kernels read: ws_'s copy, or the caller's on the device
  DeviceArray<unsigned char> far_temp_;  // the relocation's sort (far_points), at its first use
  DeviceArray<double> far_sorted_;
  DeviceArray<std::uint32_t> far_order_, far_labels_, far_count_;
  // The host's copies: max_run_ reports (host_shift2()), then the run's gk::Loop. Pageable: every
  // copy into it is waited for at once anyway, and pinning memory and releasing it are slow driver
  // calls, a large part of a small fit's time.
  std::vector<double> host_;
  bool bounded_ = false, moved_ = false;
  bool advanced_ = false;       // accumulate() moved the centroids to the means (its wager won)
  bool summed_ = false;         // a_.digits and a_.counts are those of the labels before the last assign()
  bool first_ = true;           // the last assign() scanned every point (changed() is n)
  bool changed_ready_ = true;   // the changed count has reached host_counts()[k_]
  bool from_run_ = false;       // the current iteration ran in a queued run (its report is slot_)
  std::size_t slot_ = 0;        // the current iteration's report in host_
  std::size_t queued_ = 0;      // iterations of the last run that the host has not taken yet
  std::size_t run_length_ = 2;  // the next run's iterations at most: doubles up to max_run_
  std::size_t runs_ = 0;        // queued runs since start()
};

}  // namespace

std::unique_ptr<LloydBackend> make_cuda_lloyd(const LloydShape& shape, int device, ThreadPool& pool, RowCheck& check,
                                              std::uintptr_t ready, const char* caller,
                                              std::unique_ptr<LloydWorkspace> reuse) {
  if (!cuda_device_usable(device)) {
    throw BackendUnavailable(concat("KMeans: CUDA device ", device, " is not usable (none present, or not supported)"));
  }
  if (shape.on_device) require_device_memory(shape.points, device, caller);
  return std::make_unique<CudaLloyd>(shape, device, pool, check, ready, std::move(reuse));
}

bool cuda_lloyd_available(int device) noexcept { return cuda_device_usable(device); }

}  // namespace streamknn::detail::kmeans
