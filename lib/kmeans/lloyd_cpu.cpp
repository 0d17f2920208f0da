// The CPU backend of K-means: Hamerly's bounds (one upper bound per point on the distance to its
// centroid, one lower bound on the distance to every other centroid, moved by the centroids'
// movement each iteration), float32 screens with exact_rank.hpp's proven bound, exact re-ranks of
// close calls, and exact centroid sums (cluster_sums.hpp), updated by the points that change
// cluster. Points are labelled in fixed chunks on the library's thread pool; the sums are exact and
// the inertia is the fold tree's, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/check.hpp"
#include "core/thread_pool.hpp"
#include "kmeans/cluster_sums.hpp"
#include "kmeans/fold_tree.hpp"
#include "kmeans/kmeans_init.hpp"
#include "kmeans/kmeans_exact.hpp"
#include "kmeans/lloyd_backend.hpp"
#include "kmeans/lloyd_cpu_scan.hpp"

namespace streamknn::detail::kmeans {

namespace {

constexpr std::size_t kChunk = 1024;  // points per task

class CpuLloyd final : public LloydBackend {
 public:
  CpuLloyd(const LloydShape& s, ThreadPool& pool)
      : x_(s.points), n_(s.n), d_(s.d), k_(s.k), bound_(prune_bound(std::uint32_t(s.d))), pool_(pool),
        centroids_(s.k * s.d), labels_(s.n, 0), upper_(s.n), lower_(s.n), half_gap_(s.k), delta_(s.k, 0.0),
        counts_(s.k), sums_(s.k * s.d), digits_(s.k * s.d * kSumDigits), tops_(s.d), units_(s.d) {
    if (!s.labels_only) feature_tops();  // predict() sums nothing
  }

  void start(std::span<const float> c) override {
    std::copy(c.begin(), c.end(), centroids_.begin());
    bounded_ = false;
    moved_ = false;
    summed_ = false;
  }

  std::size_t changed() override { return changed_; }

  void assign(const Lookahead&) override {  // one iteration at a time: the host waits for no device
    if (bounded_) half_gaps();
    const std::size_t chunks = (n_ + kChunk - 1) / kChunk;
    moves_.resize(chunks);
    pool_.parallel_for(chunks, [&](std::size_t c) {
      std::vector<float> r(k_);
      const std::size_t lo = c * kChunk, hi = std::min(n_, lo + kChunk);
      moves_[c].clear();
      for (std::size_t i = lo; i < hi; ++i) {
        const std::uint32_t old = labels_[i];
        if (label_point(i, r.data())) moves_[c].push_back(Move{std::uint32_t(i), old});
      }
    });
    std::size_t total = 0;
    for (const auto& m : moves_) total += m.size();
    changed_ = bounded_ ? total : n_;
    bounded_ = true;
    moved_ = false;
  }

  void accumulate(std::span<std::uint64_t> counts) override {
    // The sums are exact (cluster_sums.hpp), so the last ones plus the moved points' changes are
    // the sums of the labels' clusters, bit for bit: only a start or many moves need a full pass.
    if (!summed_ || changed_ > n_ / 4) {
      sum_all();
    } else {
      apply_moves();
    }
    summed_ = true;
    for (std::size_t c = 0; c < k_; ++c) {
      for (std::size_t j = 0; j < d_; ++j) {
        sums_[c * d_ + j] = digits_value(digits_.data() + (c * d_ + j) * kSumDigits, units_[j]);
      }
    }
    std::copy(counts_.begin(), counts_.end(), counts.begin());
  }

  void advance(std::span<double> shift2) override {
    std::vector<float> next(k_ * d_);
    for (std::size_t c = 0; c < k_; ++c) {
      for (std::size_t i = 0; i < d_; ++i) next[c * d_ + i] = mean(sums_[c * d_ + i], counts_[c]);
    }
    move_to(next, shift2);
  }

  void move_to(std::span<const float> next, std::span<double> shift2) override {
    double max1 = 0, max2 = 0;
    std::size_t arg = 0;
    for (std::size_t c = 0; c < k_; ++c) {
      shift2[c] = squared_shift(next.data() + c * d_, centroids_.data() + c * d_, std::uint32_t(d_));
      delta_[c] = movement_bound(shift2[c], std::uint32_t(d_));
      if (delta_[c] > max1) {
        max2 = max1;
        max1 = delta_[c];
        arg = c;
      } else if (delta_[c] > max2) {
        max2 = delta_[c];
      }
    }
    max1_ = max1;
    max2_ = max2;
    argmax_ = arg;
    std::copy(next.begin(), next.end(), centroids_.begin());
    moved_ = true;
  }

  void fetch_sums(std::span<double> out) override { std::copy(sums_.begin(), sums_.end(), out.begin()); }
  void fetch_labels(std::span<std::uint32_t> out) override { std::copy(labels_.begin(), labels_.end(), out.begin()); }
  void fetch_centroids(std::span<float> out) override { std::copy(centroids_.begin(), centroids_.end(), out.begin()); }

  std::vector<FarPoint> far_points(std::size_t m) override {
    // Per chunk: the costs and the chunk's `per` largest; the m-th largest over those is the m-th
    // largest cost. Then each chunk keeps its points at or above the screen, in index order.
    const std::size_t chunks = (n_ + kChunk - 1) / kChunk, per = std::min(m, kChunk);
    const std::uint32_t d = std::uint32_t(d_);
    std::vector<double> cost(n_), tops(chunks * per, -1.0);  // costs are >= 0: -1 is never the m-th
    pool_.parallel_for(chunks, [&](std::size_t c) {
      const std::size_t lo = c * kChunk, hi = std::min(n_, lo + kChunk);
      for (std::size_t i = lo; i < hi; ++i) cost[i] = squared_distance(x_ + i * d_, centroids_.data() + labels_[i] * d_, d);
      double* top = tops.data() + c * per;
      if (hi - lo <= per) {
        std::copy(cost.begin() + std::ptrdiff_t(lo), cost.begin() + std::ptrdiff_t(hi), top);
        return;
      }
      std::vector<double> v(cost.begin() + std::ptrdiff_t(lo), cost.begin() + std::ptrdiff_t(hi));
      std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(per - 1), v.end(), std::greater<>());
      std::copy_n(v.begin(), per, top);
    });
    std::nth_element(tops.begin(), tops.begin() + std::ptrdiff_t(m - 1), tops.end(), std::greater<>());
    const double floor = far_low(tops[m - 1], d);
    std::vector<std::vector<FarPoint>> kept(chunks);
    pool_.parallel_for(chunks, [&](std::size_t c) {
      for (std::size_t i = c * kChunk, hi = std::min(n_, i + kChunk); i < hi; ++i) {
        if (far_high(cost[i], d) >= floor) kept[c].push_back(FarPoint{std::uint32_t(i), labels_[i], cost[i]});
      }
    });
    std::vector<FarPoint> out;
    for (const auto& k : kept) out.insert(out.end(), k.begin(), k.end());
    return out;
  }

  double inertia() override {
    std::vector<double> v(n_);
    const std::size_t chunks = (n_ + kChunk - 1) / kChunk;
    pool_.parallel_for(chunks, [&](std::size_t c) {
      for (std::size_t i = c * kChunk, hi = std::min(n_, i + kChunk); i < hi; ++i) {
        v[i] = squared_distance(x_ + i * d_, centroids_.data() + labels_[i] * d_, std::uint32_t(d_));
      }
    });
    const std::size_t units = (n_ + kUnit - 1) / kUnit;
    std::vector<double> nodes(units);
    pool_.parallel_for(units, [&](std::size_t u) {
      double scratch[2];
      fold_unit([&](std::size_t t) { return v.data() + t; }, u * kUnit, std::min(n_, (u + 1) * kUnit), 1,
                nodes.data() + u, scratch);
    });
    return *fold_levels(nodes, units, 1);
  }

  void gather(std::span<const std::uint32_t> points, std::span<float> out) override {
    for (std::size_t r = 0; r < points.size(); ++r) {
      std::copy_n(x_ + std::size_t(points[r]) * d_, d_, out.begin() + std::ptrdiff_t(r * d_));
    }
  }

  void variance_pass(const double* mean, std::span<double> out) override {
    kmeans::variance_pass(LloydShape{x_, n_, d_, k_}, pool_, mean, out);
  }

 private:
  /// half_gap_[c]: half a lower bound on the distance from centroid c to its nearest other one.
  /// They cost k^2 d per iteration against the labelling's n k d at most: where k^2 > 4 n they are
  /// left at 0 (Hamerly's test then uses the lower bounds alone; labels are the same either way).
  void half_gaps() {
    if (k_ * k_ > 4 * n_) {
      std::fill(half_gap_.begin(), half_gap_.end(), 0.0);
      return;
    }
    pool_.parallel_for(k_, [&](std::size_t c) {
      double best = std::numeric_limits<double>::infinity();
      std::vector<float> r(k_);
      screen_all(centroids_.data() + c * d_, centroids_.data(), k_, d_, r.data());
      for (std::size_t o = 0; o < k_; ++o) {
        if (o != c) best = std::min(best, lower_dist(r[o], bound_));
      }
      half_gap_[c] = round_down(0.5 * best);
    });
  }

  /// f(lo, span) on the pool for consecutive groups of clusters [lo, lo + span), one task each:
  /// the sums' tasks write only their clusters.
  template <class F>
  void each_cluster_group(F&& f) {
    const std::size_t groups = std::min(k_, pool_.concurrency());
    pool_.parallel_for(groups, [&](std::size_t g) {
      const std::uint32_t lo = std::uint32_t(g * k_ / groups), span = std::uint32_t((g + 1) * k_ / groups) - lo;
      f(lo, span);
    });
  }

  /// The digits and counts of every cluster from all the points. Each task streams every label and
  /// adds the points of its clusters: every point is read once, in order (no gather).
  void sum_all() {
    each_cluster_group([&](std::uint32_t lo, std::uint32_t span) {
      // locals keep the loop free of reloads
      const std::uint32_t* labels = labels_.data();
      const std::uint32_t* tops = tops_.data();
      const float* x = x_;
      const std::size_t n = n_, d = d_;
      std::int64_t* digits = digits_.data() + std::size_t(lo) * d * kSumDigits;
      std::fill_n(digits, std::size_t(span) * d * kSumDigits, 0);
      std::vector<std::uint64_t> count(span, 0);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t c = labels[i] - lo;  // wraps below lo
        if (c >= span) continue;
        ++count[c];
        add_row(digits + std::size_t(c) * d * kSumDigits, x + i * d, tops, d, 1);
      }
      std::copy(count.begin(), count.end(), counts_.begin() + lo);
    });
  }

  /// The moved points' changes to the digits and counts. Each task takes its clusters' changes
  /// (every task reads every move): no two tasks write the same cluster.
  void apply_moves() {
    each_cluster_group([&](std::uint32_t lo, std::uint32_t span) {
      for (const auto& chunk : moves_) {
        for (const Move& m : chunk) {
          const std::uint32_t now = labels_[m.point];
          const bool out = m.from - lo < span, in = now - lo < span;  // unsigned: wraps below lo
          if (!out && !in) continue;
          const float* x = x_ + std::size_t(m.point) * d_;
          if (out) {
            add_row(digits_.data() + std::size_t(m.from) * d_ * kSumDigits, x, tops_.data(), d_, -1);
            --counts_[m.from];
          }
          if (in) {
            add_row(digits_.data() + std::size_t(now) * d_ * kSumDigits, x, tops_.data(), d_, 1);
            ++counts_[now];
          }
        }
      }
    });
  }

  /// tops_ and units_: each feature's largest exponent field over the points, in fixed chunks (a
  /// maximum: the same whatever the thread count).
  void feature_tops() {
    const std::size_t chunks = (n_ + kChunk - 1) / kChunk;
    std::vector<std::uint32_t> part(chunks * d_, 1u);
    pool_.parallel_for(chunks, [&](std::size_t c) {
      std::uint32_t* top = part.data() + c * d_;
      for (std::size_t i = c * kChunk, hi = std::min(n_, i + kChunk); i < hi; ++i) {
        for (std::size_t j = 0; j < d_; ++j) top[j] = std::max(top[j], exponent_field(x_[i * d_ + j]));
      }
    });
    std::fill(tops_.begin(), tops_.end(), 1u);
    for (std::size_t c = 0; c < chunks; ++c) {
      for (std::size_t j = 0; j < d_; ++j) tops_[j] = std::max(tops_[j], part[c * d_ + j]);
    }
    for (std::size_t j = 0; j < d_; ++j) units_[j] = sum_unit(tops_[j]);
  }

  /// Labels point i (Hamerly's test first, where bounds exist); true when its label changed.
  bool label_point(std::size_t i, float* r) {
    const float* x = x_ + i * d_;
    const std::uint32_t old = labels_[i];
    if (bounded_) {
      const std::uint32_t a = old;
      double u = moved_ ? round_up(upper_[i] + delta_[a]) : upper_[i];
      double l = moved_ ? round_down(lower_[i] - (a == argmax_ ? max2_ : max1_)) : lower_[i];
      if (!(l > 0)) l = 0;
      const double keep_below = std::max(half_gap_[a], l);
      if (u < keep_below) {
        upper_[i] = u;
        lower_[i] = l;
        return false;
      }
      u = upper_dist(screen(x, centroids_.data() + a * d_, std::uint32_t(d_)), bound_);
      if (u < keep_below) {
        upper_[i] = u;
        lower_[i] = l;
        return false;
      }
    }
    const Labelled got = scan_point(x, centroids_.data(), k_, d_, bound_, r);
    labels_[i] = got.label;
    upper_[i] = got.upper;
    lower_[i] = got.lower;
    return got.label != old;
  }

  const float* x_;
  std::size_t n_, d_, k_;
  PruneBound bound_;
  ThreadPool& pool_;  // the fit's (kmeans.cpp), which outlives the backend
  std::vector<float> centroids_;
  std::vector<std::uint32_t> labels_;
  std::vector<double> upper_, lower_;  // Hamerly's bounds (distances, not squared)
  std::vector<double> half_gap_, delta_;
  double max1_ = 0, max2_ = 0;  // the two largest movements of the last move, argmax_ the first's
  std::size_t argmax_ = 0;
  bool bounded_ = false;  // bounds exist (an assign since start())
  bool moved_ = false;    // the centroids moved since the bounds were set
  std::size_t changed_ = 0;
  std::vector<std::uint64_t> counts_;
  std::vector<double> sums_;
  std::vector<std::int64_t> digits_;  // per cluster and feature, kSumDigits (cluster_sums.hpp)
  bool summed_ = false;               // digits_ and counts_ are those of labels_ before the last assign()
  struct Move {
    std::uint32_t point, from;  // a point the last assign() relabelled, and its label before
  };
  std::vector<std::vector<Move>> moves_;  // per chunk
  std::vector<std::uint32_t> tops_;   // per feature: the largest exponent field of its values
  std::vector<double> units_;         // per feature: sum_unit(top)
};

}  // namespace

std::unique_ptr<LloydBackend> make_cpu_lloyd(const LloydShape& shape, ThreadPool& pool) {
  return std::make_unique<CpuLloyd>(shape, pool);
}

}  // namespace streamknn::detail::kmeans
