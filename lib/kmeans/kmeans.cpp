// KMeans: validation at the boundary, the starts (k-means++, random, given), the Lloyd loop with
// scikit-learn's stopping rules and empty-cluster relocation, over either backend's steps
// (lloyd_backend.hpp). Everything here runs on the host and is shared by both backends, so
// the results do not depend on which one labelled and summed.
#include "streamknn/kmeans.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <numeric>
#include <random>
#include <system_error>

#include "core/check.hpp"
#include "core/engine_access.hpp"
#include "core/metric_space.hpp"
#include "core/thread_pool.hpp"
#include "kmeans/kmeans_exact.hpp"
#include "kmeans/kmeans_init.hpp"
#include "kmeans/lloyd_backend.hpp"
#include "kmeans/lloyd_cpu_scan.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn {

namespace km = detail::kmeans;
using detail::concat;
using detail::fail_argument;
using detail::ThreadPool;

namespace {

const char* init_name(KMeansInit i) {
  switch (i) {
    case KMeansInit::KMeansPlusPlus: return "KMeansPlusPlus";
    case KMeansInit::Random: return "Random";
    case KMeansInit::Given: return "Given";
  }
  return "?";
}

/// Refuses `value`, float `at` of n x dim rows: NaN/Inf or beyond the L2 bound.
[[noreturn]] void fail_row(float value, std::size_t at, std::size_t dim, const char* caller, const char* what) {
  const float bound = detail::coordinate_bound(Metric::L2, dim);
  if (!std::isfinite(value)) {
    fail_argument(caller, ": ", what, " row ", at / dim, " holds ", value, " at column ", at % dim);
  }
  fail_argument(caller, ": ", what, " row ", at / dim, " holds ", value, " at column ", at % dim,
                ", beyond the largest magnitude ", bound, " a float32 squared distance of dim ", dim, " allows");
}

/// Checks rows (n x dim) for NaN/Inf and for coordinates beyond the L2 bound; `what` names them.
void check_rows(std::span<const float> rows, std::size_t dim, const char* caller, const char* what) {
  const std::size_t at = detail::first_beyond(rows, detail::coordinate_bound(Metric::L2, dim));
  if (at != rows.size()) fail_row(rows[at], at, dim, caller, what);
}

/// The backend a configuration runs on (BackendUnavailable for Cuda where none is usable).
BackendKind resolve(const KMeansConfig& c) {
  if (c.backend == BackendKind::Cpu) return BackendKind::Cpu;
  const bool gpu = km::cuda_lloyd_available(c.cuda_device);
  if (c.backend == BackendKind::Cuda || gpu) return BackendKind::Cuda;
  return BackendKind::Cpu;
}

/// The backend over the points of `s`, whose floats are checked as check_rows does ("points" of
/// `caller`): by the CUDA backend's copy to the device (one pass over the points instead of two),
/// on the device for points already there (`ready`: the stream that wrote them), else by a scan on
/// the pool. A bad point is refused (InvalidArgument) before an unusable backend is
/// (BackendUnavailable).
std::unique_ptr<km::LloydBackend> checked_backend(const KMeansConfig& c, BackendKind kind, const km::LloydShape& s,
                                                  ThreadPool& pool, const char* caller, km::WorkspaceShelf& shelf,
                                                  std::uintptr_t ready = 0) {
  const std::span<const float> rows(s.points, s.n * s.d);
  const float bound = detail::coordinate_bound(Metric::L2, s.d);
  const auto scan = [&] {
    if (s.on_device) return;  // nothing to scan on the host
    const std::size_t at = km::first_beyond(rows.data(), rows.size(), bound, pool);
    if (at != rows.size()) fail_row(rows[at], at, s.d, caller, "points");
  };
  if (kind == BackendKind::Cuda) {
    km::RowCheck check{bound, 0};
    std::unique_ptr<km::LloydBackend> be;
    try {
      be = km::make_cuda_lloyd(s, c.cuda_device, pool, check, ready, caller, shelf.take());
    } catch (const BackendUnavailable&) {  // thrown before any point is copied
      scan();
      throw;
    }
    if (check.first != rows.size()) {
      if (!s.on_device) fail_row(rows[check.first], check.first, s.d, caller, "points");
      const std::uint32_t row = std::uint32_t(check.first / s.d);
      std::vector<float> bad(s.d);
      be->gather(std::span<const std::uint32_t>(&row, 1), bad);
      fail_row(bad[check.first % s.d], check.first, s.d, caller, "points");
    }
    return be;
  }
  scan();
  if (!km::scan_supported()) {
    throw BackendUnavailable("KMeans: the CPU scans were built for AVX2 + FMA and this CPU lacks them; rebuild "
                             "with -DSTREAMKNN_CPU_ISA=portable");
  }
  return km::make_cpu_lloyd(s, pool);
}

/// scikit-learn's empty-cluster relocation, on the sums of the labels' clusters: the emptied
/// clusters, in index order, take the points farthest from their (current) centroids, farthest
/// first (exact squared distance, ties to the smaller index); each such point's sum moves from its
/// cluster to the empty one. Labels are left as they are: the next labelling settles them. The
/// backend screens the points (far_points: a superset of the farthest, usually a handful), so
/// only those and the k x d sums and centroids reach the host.
void relocate(km::LloydBackend& be, const km::LloydShape& s, std::vector<float>& before, std::vector<double>& sums,
              std::vector<std::uint64_t>& counts) {
  std::vector<std::size_t> empty;
  for (std::size_t c = 0; c < s.k; ++c) {
    if (counts[c] == 0) empty.push_back(c);
  }
  const auto take = std::min(empty.size(), s.n);
  std::vector<km::FarPoint> far = be.far_points(take);
  be.fetch_sums(sums);
  be.fetch_centroids(before);
  const std::uint32_t d = std::uint32_t(s.d);
  // The candidates' rows (usually a handful), from wherever the backend reads the points.
  std::vector<std::uint32_t> which(far.size());
  for (std::size_t i = 0; i < far.size(); ++i) which[i] = far[i].point;
  std::vector<float> rows(far.size() * d);
  be.gather(which, rows);
  std::vector<std::size_t> order(far.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const double margin = km::far_margin(d);
  // a farther than b: float64 with its error margin, else exactly (S_a - S_b, each against its
  // own centroid), ties to the smaller index. A float64 cost is 0 only for a point on its
  // centroid (two different floats differ by 2^-149 or more, whose square float64 holds), so two
  // such points tie without the exact sum.
  const auto farther = [&](std::size_t ia, std::size_t ib) {
    const km::FarPoint &a = far[ia], &b = far[ib];
    const double ea = a.cost * margin, eb = b.cost * margin;
    if (a.cost - ea > b.cost + eb) return true;
    if (b.cost - eb > a.cost + ea) return false;
    if (a.cost == 0 && b.cost == 0) return a.point < b.point;
    detail::exact::ExactSum acc;
    const float *xa = rows.data() + ia * d, *xb = rows.data() + ib * d;
    const float *ca = before.data() + std::size_t(a.label) * d, *cb = before.data() + std::size_t(b.label) * d;
    for (std::uint32_t j = 0; j < d; ++j) {
      detail::exact::add_square_term(acc, xa[j], ca[j], false);
      detail::exact::add_square_term(acc, xb[j], cb[j], true);
    }
    const int sign = acc.sign();
    return sign > 0 || (sign == 0 && a.point < b.point);
  };
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(take), order.end(), farther);
  for (std::size_t e = 0; e < take; ++e) {
    const std::size_t to = empty[e], from = far[order[e]].label;
    const float* x = rows.data() + order[e] * d;
    for (std::size_t j = 0; j < d; ++j) {
      const double v = double(x[j]);
      sums[from * d + j] -= v;
      sums[to * d + j] = v;
    }
    counts[to] = 1;
    counts[from] -= 1;
  }
}

/// Host threads a fit of points on the device takes for its labels (km::kLabelsOnPool points or
/// more, of at most km::kNarrowClusters clusters: lloyd_backend.hpp).
constexpr std::size_t kLabelWorkers = 3;

/// Points from which a run's result arrays are sized on a helper thread (size_result).
constexpr std::size_t kResultOnHelper = std::size_t(1) << 16;

/// Sizes r's labels (n) and centroids (k x d): for many points on a helper thread, while the run
/// iterates (the host mostly waits for the device then). A large fresh allocation's pages fault in
/// as they are first written, which costs milliseconds for a million labels on some hosts.
std::future<void> size_result(KMeansResult& r, std::size_t n, std::size_t k, std::size_t d) {
  const auto size = [&r, n, k, d] {
    r.labels.resize(n);
    r.centroids.resize(k * d);
  };
  if (n >= kResultOnHelper) {
    try {
      return std::async(std::launch::async, size);
    } catch (const std::system_error&) {  // no thread to be had: size them here
    }
  }
  size();
  return {};
}

/// One Lloyd run from `start` (k x d): scikit-learn's loop (labels, then the means; stop on an
/// unchanged labelling or a total squared movement <= tol; relabel after a stop by tol or max_iter).
/// `report` (KMeansConfig::on_iteration), where set, hears of each iteration of start `run`.
KMeansResult lloyd(km::LloydBackend& be, const km::LloydShape& s, std::span<const float> start, std::size_t max_iter,
                   double tol, const std::function<void(const KMeansIteration&)>& report, std::size_t run) {
  const std::size_t k = s.k, d = s.d;
  KMeansResult r;
  r.clusters = k;
  r.dim = d;
  std::future<void> sized = size_result(r, s.n, k, d);
  be.expect_labels([&r, &sized]() -> std::span<std::uint32_t> {
    if (sized.valid()) {
      if (sized.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return {};
      sized.get();
    }
    return r.labels;
  });
  std::vector<std::uint64_t> counts(k);
  std::vector<double> shift2(k), sums;
  std::vector<float> before, next;
  be.start(start);
  bool strict = false;
  std::size_t it = 0;
  for (; it < max_iter; ++it) {
    be.assign(km::Lookahead{max_iter - it, tol});
    be.accumulate(counts);
    const std::size_t changed = be.changed();
    if (std::find(counts.begin(), counts.end(), std::uint64_t(0)) == counts.end()) {
      be.advance(shift2);
    } else {
      sums.resize(k * d);
      before.resize(k * d);
      next.resize(k * d);
      relocate(be, s, before, sums, counts);
      for (std::size_t c = 0; c < k; ++c) {  // a cluster left with no point keeps its (unscaled) sum, as scikit-learn
        for (std::size_t j = 0; j < d; ++j) {
          next[c * d + j] = counts[c] ? km::mean(sums[c * d + j], counts[c]) : float(sums[c * d + j]);
        }
      }
      be.move_to(next, shift2);
    }
    const km::LoopStop stop = km::loop_stop(it, changed, shift2.data(), std::uint32_t(k), tol);
    if (report) {
      const double shift = std::accumulate(shift2.begin(), shift2.end(), 0.0);
      report(KMeansIteration{run, it + 1, changed, shift, stop != km::LoopStop::Continue || it + 1 == max_iter});
    }
    if (stop == km::LoopStop::Unchanged) {
      strict = true;
      break;
    }
    if (stop == km::LoopStop::WithinTol) break;
  }
  r.iterations = std::min(it + 1, max_iter);
  r.converged = strict || it < max_iter;
  if (!strict) be.assign({});
  r.inertia = be.inertia();
  if (sized.valid()) sized.get();
  be.fetch_centroids(r.centroids);
  be.fetch_labels(r.labels);
  return r;
}

}  // namespace

KMeans::KMeans(KMeansConfig config)
    : config_(std::move(config)), workspace_(std::make_shared<detail::kmeans::WorkspaceShelf>()) {
  const auto& c = config_;
  if (c.clusters < 1) fail_argument("KMeans: clusters=", c.clusters, " must be at least 1");
  if (c.clusters > std::numeric_limits<std::uint32_t>::max()) fail_argument("KMeans: clusters=", c.clusters, " is too large");
  if (c.max_iter < 1) fail_argument("KMeans: max_iter=", c.max_iter, " must be at least 1");
  if (!std::isfinite(c.tol) || c.tol < 0) fail_argument("KMeans: tol=", c.tol, " must be finite and non-negative");
  if (c.n_init < 1) fail_argument("KMeans: n_init=", c.n_init, " must be at least 1");
  if (c.init != KMeansInit::KMeansPlusPlus && c.init != KMeansInit::Random && c.init != KMeansInit::Given) {
    fail_argument("KMeans: init=", int(c.init), " is not a KMeansInit (choose KMeansPlusPlus, Random or Given)");
  }
  if (c.backend != BackendKind::Auto && c.backend != BackendKind::Cpu && c.backend != BackendKind::Cuda) {
    fail_argument("KMeans: backend=", int(c.backend), " is not a BackendKind (choose Auto, Cpu or Cuda)");
  }
  if (c.cpu_threads > kMaxCpuThreads) fail_argument("KMeans: cpu_threads=", c.cpu_threads, " exceeds ", kMaxCpuThreads);
  if (c.init == KMeansInit::Given) {
    if (c.n_init != 1) fail_argument("KMeans: n_init=", c.n_init, " must be 1 with init=Given (one start is given)");
    if (c.initial_centroids.empty() || c.initial_centroids.size() % c.clusters != 0) {
      fail_argument("KMeans: initial_centroids holds ", c.initial_centroids.size(), " values, not clusters=", c.clusters,
                    " rows of one dimension");
    }
    const std::size_t dim = c.initial_centroids.size() / c.clusters;
    check_rows(c.initial_centroids, dim, "KMeans", "initial_centroids");
  } else if (!c.initial_centroids.empty()) {
    fail_argument("KMeans: initial_centroids given (", c.initial_centroids.size(), " values) but init=",
                  init_name(c.init), " (use init=Given)");
  }
}

namespace {

/// Checks the points' shape against the configuration (their values: checked_backend).
void check_shape(const KMeansConfig& c, std::span<const float> points, std::size_t dim, const char* caller) {
  if (dim == 0) fail_argument(caller, ": dim=0 must be at least 1");
  if (points.size() % dim != 0) {
    fail_argument(caller, ": points holds ", points.size(), " values, not a multiple of dim=", dim);
  }
  const std::size_t n = points.size() / dim;
  if (n > std::numeric_limits<std::uint32_t>::max()) fail_argument(caller, ": ", n, " points exceed 2^32 - 1");
  if (c.clusters > n) fail_argument(caller, ": clusters=", c.clusters, " exceeds the ", n, " points");
  if (c.init == KMeansInit::Given && c.initial_centroids.size() != c.clusters * dim) {
    fail_argument(caller, ": initial_centroids have dim=", c.initial_centroids.size() / c.clusters,
                  " but the points have dim=", dim);
  }
}

/// Start `run` of a fit: the given centroids, or k-means++ / random points drawn from the seed.
/// Points on the device: a random start gathers its k rows; k-means++, which weighs every point,
/// brings them all to the host once (`host_copy`, kept for the other starts).
std::vector<float> start_for(const KMeansConfig& c, std::size_t run, const km::LloydShape& s, km::LloydBackend& be,
                             ThreadPool& pool, std::vector<float>& host_copy) {
  if (c.init == KMeansInit::Given) return c.initial_centroids;
  const bool random = c.init == KMeansInit::Random;
  if (!s.on_device) return km::initial_centroids(s, random, c.seed + run, pool);
  if (random) {
    std::vector<float> out(s.k * s.d);
    be.gather(km::random_rows(s.n, s.k, c.seed + run), out);
    return out;
  }
  if (host_copy.empty()) {
    std::vector<std::uint32_t> all(s.n);
    for (std::size_t i = 0; i < s.n; ++i) all[i] = std::uint32_t(i);
    host_copy.resize(s.n * s.d);
    be.gather(all, host_copy);
  }
  km::LloydShape on_host = s;
  on_host.points = host_copy.data();
  on_host.on_device = false;
  return km::initial_centroids(on_host, false, c.seed + run, pool);
}

/// The fit of points that passed check_shape; their rows are checked by checked_backend.
KMeansResult fit_checked(const KMeansConfig& c, const km::LloydShape& s, BackendKind kind, const char* caller,
                         km::WorkspaceShelf& shelf, std::uintptr_t ready = 0) {
  // Points on the device leave the host's threads idle but for a k-means++ start and, for many
  // points, the labels' way back (lib/cuda/kmeans/label_return.hpp: 4 bytes a label written on
  // one core ran at its store rate, a tenth of a millisecond per million labels and more). The
  // object's last pool is taken where it has as many threads (WorkspaceShelf).
  const bool host_work = !s.on_device || c.init == KMeansInit::KMeansPlusPlus;
  const std::size_t workers = km::pool_workers(c.cpu_threads);
  const bool widens = s.n >= km::kLabelsOnPool && s.k <= km::kNarrowClusters;
  std::unique_ptr<ThreadPool> threads = shelf.take_pool(host_work ? workers : widens ? std::min(workers, kLabelWorkers) : 0);
  ThreadPool& pool = *threads;
  auto be = checked_backend(c, kind, s, pool, caller, shelf, ready);
  // tol x variance is 0 whatever the (finite) variance when tol is 0: no pass over the points.
  const double tol = c.tol == 0 ? 0.0 : c.tol * km::mean_variance(*be, s.n, s.d);
  KMeansResult best;
  bool have = false;
  std::vector<float> host_copy;
  for (std::size_t run = 0; run < c.n_init; ++run) {
    const std::vector<float> start = start_for(c, run, s, *be, pool, host_copy);
    KMeansResult r = lloyd(*be, s, start, c.max_iter, tol, c.on_iteration, run);
    if (!have || r.inertia < best.inertia) {
      best = std::move(r);
      have = true;
    }
  }
  best.backend = kind;
  shelf.put(be->release_workspace());
  be.reset();  // before its pool goes back: another fit may take that at once
  shelf.put_pool(std::move(threads));
  return best;
}

KMeansResult fit_host(const KMeansConfig& c, std::span<const float> points, std::size_t dim, const char* caller,
                      km::WorkspaceShelf& shelf) {
  return fit_checked(c, km::LloydShape{points.data(), points.size() / dim, dim, c.clusters}, resolve(c), caller, shelf);
}

}  // namespace

KMeansResult KMeans::fit(std::span<const float> points, std::size_t dim) const {
  check_shape(config_, points, dim, "KMeans::fit");
  return fit_host(config_, points, dim, "KMeans::fit", *workspace_);
}

KMeansResult KMeans::fit_device(const float* points, std::size_t n, std::size_t dim, std::uintptr_t cuda_stream) const {
  const char* caller = "KMeans::fit_device";
  if (points == nullptr) fail_argument(caller, ": points is null");
  if (dim == 0) fail_argument(caller, ": dim=0 must be at least 1");
  if (n > std::numeric_limits<std::size_t>::max() / dim) fail_argument(caller, ": n=", n, " x dim=", dim, " overflows");
  if (config_.backend == BackendKind::Cpu) {
    fail_argument(caller, ": config.backend is Cpu, but points in device memory are clustered by the CUDA backend "
                  "(choose Auto or Cuda)");
  }
  check_shape(config_, std::span<const float>(points, n * dim), dim, caller);  // the span is never read
  return fit_checked(config_, km::LloydShape{points, n, dim, config_.clusters, true}, BackendKind::Cuda, caller,
                     *workspace_, cuda_stream);
}

KMeansResult KMeans::fit(const ReferenceSet& set) const {
  const StoreConfig& sc = set.config();
  if (sc.metric != Metric::L2) {
    fail_argument("KMeans::fit: the reference set's metric is ", int(sc.metric), ", not L2 (K-means clusters L2 stores)");
  }
  // The snapshot read is serialised with publish() by the engine's lock, as save() const is.
  auto& engine = const_cast<detail::Engine&>(detail::EngineAccess::of(set));
  const std::size_t dim = sc.dim;
  const char* caller = "KMeans::fit(ReferenceSet)";
  detail::DeviceRows rows;
  const bool same_device = sc.backend != BackendKind::Cpu && sc.cuda_device == config_.cuda_device;
  if (same_device && resolve(config_) == BackendKind::Cuda && engine.published_device_rows(rows)) {
    // A CUDA store on this fit's device: its live points gathered into rows there, clustered there.
    const std::size_t n = rows.ids.size();
    check_shape(config_, std::span<const float>(rows.rows, n * dim), dim, caller);  // the span is never read
    KMeansResult r = fit_checked(config_, km::LloydShape{rows.rows, n, dim, config_.clusters, true},
                                 BackendKind::Cuda, caller, *workspace_);
    r.ids = std::move(rows.ids);
    r.epoch = rows.epoch;
    return r;
  }
  detail::StoreImage image = engine.published_image();
  std::vector<PointId> ids;
  std::size_t live = 0;
  for (std::size_t slot = 0; slot < image.slot_count; ++slot) {
    if (image.ids[slot] == kInvalidId) continue;
    if (live != slot) std::copy_n(image.vectors.data() + slot * dim, dim, image.vectors.data() + live * dim);
    ids.push_back(image.ids[slot]);
    ++live;
  }
  image.vectors.resize(live * dim);
  check_shape(config_, image.vectors, dim, caller);
  KMeansResult r = fit_host(config_, image.vectors, dim, caller, *workspace_);
  r.ids = std::move(ids);
  r.epoch = image.epoch;
  return r;
}

std::vector<std::uint32_t> KMeans::predict(std::span<const float> centroids, std::span<const float> points,
                                           std::size_t dim) const {
  if (dim == 0) fail_argument("KMeans::predict: dim=0 must be at least 1");
  if (centroids.empty() || centroids.size() % dim != 0) {
    fail_argument("KMeans::predict: centroids hold ", centroids.size(), " values, not rows of dim=", dim);
  }
  if (points.size() % dim != 0) {
    fail_argument("KMeans::predict: points holds ", points.size(), " values, not a multiple of dim=", dim);
  }
  check_rows(centroids, dim, "KMeans::predict", "centroids");
  std::vector<std::uint32_t> labels(points.size() / dim);
  if (labels.empty()) return labels;
  std::unique_ptr<ThreadPool> pool = workspace_->take_pool(km::pool_workers(config_.cpu_threads));
  km::LloydShape s{points.data(), labels.size(), dim, centroids.size() / dim};
  s.labels_only = true;
  auto be = checked_backend(config_, resolve(config_), s, *pool, "KMeans::predict", *workspace_);
  be->start(centroids);
  be->assign({});
  be->fetch_labels(labels);
  workspace_->put(be->release_workspace());
  be.reset();  // before its pool goes back: another fit may take that at once
  workspace_->put_pool(std::move(pool));
  return labels;
}

KMeans KMeans::with_config(KMeansConfig config) const {
  KMeans other(std::move(config));
  other.workspace_ = workspace_;
  return other;
}

void KMeans::release_workspace() const { workspace_->clear(); }

}  // namespace streamknn
