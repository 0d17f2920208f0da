// The CUDA backend of K-means (lib/kmeans/lloyd_backend.hpp): the points copied to the device
// once, through pinned buffers, and checked as they are copied (staged_upload.hpp); per
// iteration the bounds and scan kernels label, a stable sort of the labels orders each cluster's
// points by index, the fold tree's levels sum them, and one copy brings the counts, the
// changed-label count and the movements to the host. An empty-cluster relocation gets the far
// points from a sort of the costs on the device. Same arithmetic as the CPU backend
// (lib/kmeans/kmeans_exact.hpp), so the same results.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/thread_pool.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/kmeans/kmeans_kernels.hpp"
#include "cuda/kmeans/staged_upload.hpp"
#include "kmeans/fold_layout.hpp"
#include "kmeans/kmeans_exact.hpp"
#include "kmeans/lloyd_backend.hpp"

namespace streamknn::detail::kmeans {

namespace {

namespace gk = streamknn::detail::gpu::kmeans;
using gpu::DeviceArray;
using gpu::PinnedArray;
using gpu::check_cuda;

class CudaLloyd final : public LloydBackend {
 public:
  /// Leaves check.first at the first float beyond check.bound, with the upload stopped there.
  CudaLloyd(const LloydShape& s, int device, ThreadPool& pool, RowCheck& check)
      : scope_(device), n_(std::uint32_t(s.n)), d_(std::uint32_t(s.d)), k_(std::uint32_t(s.k)),
        levels_(fold_levels_for(s.n)),
        x_(s.n * s.d, "kmeans points"), labels_(s.n, "kmeans labels"), upper_(s.n, "kmeans upper bounds"),
        lower_(s.n, "kmeans lower bounds"), list_(s.n, "kmeans scan list"), stats_(2, "kmeans counters"),
        centroids_(s.k * s.d, "kmeans centroids"), before_(s.k * s.d, "kmeans centroids"),
        half_gap_(s.k, "kmeans half gaps"), delta_(s.k, "kmeans movements"), shift2_(s.k, "kmeans shifts"),
        counts_(s.k, "kmeans counts"), moff_(s.k + 1, "kmeans member offsets"),
        offs_(std::size_t(levels_) * (s.k + 1), "kmeans tree offsets"), sums_(s.k * s.d, "kmeans sums"),
        one_(1, "kmeans point count"), host_counts_(s.k + 1, "kmeans counts"), host_shift2_(s.k, "kmeans shifts"),
        host_counts64_(s.k) {
    // n_ is a member: the (pageable) source outlives the copy; the upload's last wait covers it.
    check_cuda(cudaMemcpyAsync(one_.get(), &n_, sizeof n_, cudaMemcpyHostToDevice, stream_.get()), "cudaMemcpyAsync",
               "kmeans n");
    upload(s.points, device, pool, check);
    int bits = 1;
    while (bits < 32 && (std::uint64_t(1) << bits) < k_) ++bits;
    bits_ = bits;
  }

  void start(std::span<const float> c) override {
    upload_centroids(c);
    bounded_ = false;
    moved_ = false;
  }

  std::size_t changed() override {
    if (!changed_ready_) sync();
    changed_ready_ = true;
    return first_ ? n_ : host_counts_.get()[k_];
  }

  void assign() override {
    gk::LabelArgs a = args();
    const cudaStream_t s = stream_.get();
    check_cuda(cudaMemsetAsync(stats_.get(), 0, 2 * sizeof(std::uint32_t), s), "cudaMemsetAsync", "kmeans counters");
    if (bounded_) {
      gk::launch_half_gaps(centroids_.get(), k_, d_, half_gap_.get(), s);
      gk::launch_bounds(a, moved_, max1_, max2_, argmax_, s);
      gk::launch_scan(a, false, s);
    } else {
      gk::launch_scan(a, true, s);
    }
    // Comes to the host with accumulate()'s counts (the stream is in order): no wait here.
    check_cuda(cudaMemcpyAsync(host_counts_.get() + k_, stats_.get() + 1, sizeof(std::uint32_t), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans changed labels");
    changed_ready_ = false;
    first_ = !bounded_;
    bounded_ = true;
    moved_ = false;
  }

  void accumulate(std::span<std::uint64_t> counts) override {
    const cudaStream_t s = stream_.get();
    allocate_sums();
    gk::launch_histogram(labels_.get(), n_, k_, counts_.get(), s);
    gk::sort_members(sort_temp_.get(), sort_temp_.size(), labels_.get(), keys_.get(), iota_.get(), members_.get(), n_,
                     bits_, s);
    fold(x_.get(), members_.get(), counts_.get(), k_, d_, sums_.get());
    check_cuda(cudaMemcpyAsync(host_counts_.get(), counts_.get(), k_ * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans counts");
    sync();
    for (std::uint32_t c = 0; c < k_; ++c) counts[c] = host_counts64_[c] = host_counts_.get()[c];
  }

  void advance(std::span<double> shift2) override {
    const cudaStream_t s = stream_.get();
    check_cuda(cudaMemcpyAsync(before_.get(), centroids_.get(), centroids_.bytes(), cudaMemcpyDeviceToDevice, s),
               "cudaMemcpyAsync", "kmeans centroids");
    gk::launch_means(sums_.get(), counts_.get(), k_, d_, centroids_.get(), s);
    finish_move(shift2);
  }

  void move_to(std::span<const float> c, std::span<double> shift2) override {
    const cudaStream_t s = stream_.get();
    check_cuda(cudaMemcpyAsync(before_.get(), centroids_.get(), centroids_.bytes(), cudaMemcpyDeviceToDevice, s),
               "cudaMemcpyAsync", "kmeans centroids");
    upload_centroids(c);
    finish_move(shift2);
  }

  void fetch_sums(std::span<double> out) override { copy_out(out.data(), sums_.get(), sums_.bytes()); }
  void fetch_labels(std::span<std::uint32_t> out) override { copy_out(out.data(), labels_.get(), labels_.bytes()); }
  void fetch_centroids(std::span<float> out) override { copy_out(out.data(), centroids_.get(), centroids_.bytes()); }

  std::vector<FarPoint> far_points(std::size_t m) override {
    // The costs sorted on the device; the screen's prefix of them, their points and labels come
    // back (usually a handful: two small copies instead of n labels and a host pass over n x d).
    const cudaStream_t s = stream_.get();
    allocate_costs();
    if (far_order_.size() == 0) {
      far_temp_ = DeviceArray<unsigned char>(gk::cost_sort_bytes(n_), "kmeans cost sort scratch");
      far_sorted_ = DeviceArray<double>(n_, "kmeans sorted costs");
      far_labels_ = DeviceArray<std::uint32_t>(n_, "kmeans far labels");
      far_order_ = DeviceArray<std::uint32_t>(n_, "kmeans far points");
      far_count_ = DeviceArray<std::uint32_t>(1, "kmeans far point count");
    }
    gk::launch_point_costs(x_.get(), centroids_.get(), labels_.get(), n_, d_, costs_.get(), s);
    gk::sort_costs(far_temp_.get(), far_temp_.size(), costs_.get(), far_sorted_.get(), iota_.get(), far_order_.get(), n_,
                   s);
    gk::launch_far_points(far_sorted_.get(), far_order_.get(), labels_.get(), n_, std::uint32_t(m), d_,
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

  double inertia() override {
    const cudaStream_t s = stream_.get();
    allocate_costs();
    gk::launch_point_costs(x_.get(), centroids_.get(), labels_.get(), n_, d_, costs_.get(), s);
    fold(costs_.get(), nullptr, one_.get(), 1, 1, root_.get());  // one_ holds n (the constructor's copy)
    double out = 0;
    copy_out(&out, root_.get(), sizeof out);
    return out;
  }

 private:
  /// Copies the points to x_ (staged_upload.hpp), check.first at the first float beyond
  /// check.bound (then x_ holds no usable points), else n x d.
  void upload(const float* points, int device, ThreadPool& pool, RowCheck& check) {
    check.first = staged_upload(x_.get(), points, x_.size(), check.bound, device, stream_.get(), pool);
  }

  gk::LabelArgs args() {
    gk::LabelArgs a;
    a.x = x_.get();
    a.centroids = centroids_.get();
    a.labels = labels_.get();
    a.upper = upper_.get();
    a.lower = lower_.get();
    a.half_gap = half_gap_.get();
    a.delta = delta_.get();
    a.list = list_.get();
    a.list_count = stats_.get();
    a.changed = stats_.get() + 1;
    a.n = n_;
    a.d = d_;
    a.k = k_;
    return a;
  }

  /// The fold tree over `k` sequences (counts on the device) of rows of `values` into roots (k x d).
  template <class T>
  void fold(const T* values, const std::uint32_t* members, const std::uint32_t* counts, std::uint32_t k,
            std::uint32_t d, double* roots) {
    const cudaStream_t s = stream_.get();
    gk::launch_tree_tables(counts, k, levels_, moff_.get(), offs_.get(), s);
    std::size_t nodes = n_ / kFold + k + 1;
    gk::launch_fold_leaves(values, members, moff_.get(), offs_.get(), k, d, nodes, level_a_.get(), s);
    double* below = level_a_.get();
    for (std::uint32_t level = 1; level < levels_; ++level) {
      nodes = nodes / kFold + k + 1;
      double* out = level % 2 ? level_b_.get() : level_a_.get();
      gk::launch_fold_level(below, offs_.get() + (level - 1) * (k + 1), offs_.get() + level * (k + 1), k, d, nodes, out, s);
      below = out;
    }
    gk::launch_fold_roots(below, offs_.get() + (levels_ - 1) * (k + 1), k, d, roots, s);
  }

  void finish_move(std::span<double> shift2) {
    const cudaStream_t s = stream_.get();
    gk::launch_shifts(centroids_.get(), before_.get(), k_, d_, shift2_.get(), delta_.get(), s);
    check_cuda(cudaMemcpyAsync(host_shift2_.get(), shift2_.get(), shift2_.bytes(), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync", "kmeans shifts");
    sync();
    double max1 = 0, max2 = 0;
    std::uint32_t arg = 0;
    for (std::uint32_t c = 0; c < k_; ++c) {
      shift2[c] = host_shift2_.get()[c];
      const double delta = movement_bound(shift2[c], d_);  // the kernel's value: same function, same bits
      if (delta > max1) {
        max2 = max1;
        max1 = delta;
        arg = c;
      } else if (delta > max2) {
        max2 = delta;
      }
    }
    max1_ = max1;
    max2_ = max2;
    argmax_ = arg;
    moved_ = true;
  }

  /// The sort's and the fold tree's buffers, at the first accumulate() or inertia() (predict()
  /// needs none of them).
  void allocate_sums() {
    if (members_.size() != 0) return;
    const std::size_t n = n_, k = k_, d = d_;
    keys_ = DeviceArray<std::uint32_t>(n, "kmeans sort keys");
    iota_ = DeviceArray<std::uint32_t>(n, "kmeans point indices");
    sort_temp_ = DeviceArray<unsigned char>(gk::sort_bytes(n_), "kmeans sort scratch");
    level_a_ = DeviceArray<double>((n / kFold + k + 1) * d, "kmeans fold tree");
    level_b_ = DeviceArray<double>((n / (kFold * kFold) + k + 1) * d, "kmeans fold tree");
    gk::launch_iota(iota_.get(), n_, stream_.get());
    members_ = DeviceArray<std::uint32_t>(n, "kmeans members");  // last: marks the buffers made
  }

  /// The per-point costs and the inertia's root, at the first inertia() or far_points().
  void allocate_costs() {
    allocate_sums();  // the fold tree's levels and iota_
    if (costs_.size() != 0) return;
    costs_ = DeviceArray<double>(n_, "kmeans point costs");
    root_ = DeviceArray<double>(1, "kmeans inertia");
  }

  void upload_centroids(std::span<const float> c) {
    check_cuda(cudaMemcpyAsync(centroids_.get(), c.data(), c.size_bytes(), cudaMemcpyHostToDevice, stream_.get()),
               "cudaMemcpyAsync", "kmeans centroids");
    sync();  // c is pageable host memory the caller may reuse
  }

  void copy_out(void* to, const void* from, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync", "kmeans copy");
    sync();
  }

  void sync() {
    check_cuda(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize", "kmeans");
    changed_ready_ = true;
  }

  gpu::DeviceScope scope_;
  gpu::Stream stream_;
  std::uint32_t n_, d_, k_, levels_;
  int bits_ = 1;
  DeviceArray<float> x_;
  DeviceArray<std::uint32_t> labels_;
  DeviceArray<float> upper_, lower_;
  DeviceArray<std::uint32_t> list_, stats_;
  DeviceArray<float> centroids_, before_, half_gap_;
  DeviceArray<double> delta_, shift2_;
  DeviceArray<std::uint32_t> counts_, moff_, offs_, keys_, iota_, members_;
  DeviceArray<unsigned char> sort_temp_;
  DeviceArray<double> level_a_, level_b_, sums_, costs_, root_, far_sorted_;
  DeviceArray<unsigned char> far_temp_;                 // the relocation's sort (far_points)
  DeviceArray<std::uint32_t> far_order_, far_labels_, far_count_;
  DeviceArray<std::uint32_t> one_;  // n: the inertia's one sequence
  PinnedArray<std::uint32_t> host_counts_;
  PinnedArray<double> host_shift2_;
  std::vector<std::uint64_t> host_counts64_;
  double max1_ = 0, max2_ = 0;
  std::uint32_t argmax_ = 0;
  bool bounded_ = false, moved_ = false;
  bool first_ = true;           // the last assign() scanned every point (changed() is n)
  bool changed_ready_ = true;   // the changed count has reached host_counts_[k_]
};

}  // namespace

std::unique_ptr<LloydBackend> make_cuda_lloyd(const LloydShape& shape, int device, ThreadPool& pool, RowCheck& check) {
  if (!cuda_device_usable(device)) {
    throw BackendUnavailable(concat("KMeans: CUDA device ", device, " is not usable (none present, or not supported)"));
  }
  return std::make_unique<CudaLloyd>(shape, device, pool, check);
}

bool cuda_lloyd_available(int device) noexcept { return cuda_device_usable(device); }

}  // namespace streamknn::detail::kmeans
