// The CPU backend's exact answers: the float32 screen (cpu_search.cpp) keeps screen_width(k)
// candidates per query; they are re-ranked by the shared exact arithmetic (core/exact_rank.hpp),
// the same functions the CUDA re-rank kernel calls, so both backends give the same answers.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/exact_rank.hpp"
#include "cpu/cpu_search.hpp"

namespace streamknn::detail {

namespace {

/// Coordinate i of one stored slot, in either layout of the HostStore.
struct StoredPoint {
  const HostStore* store;
  std::size_t slot;
  float operator()(std::uint32_t i) const noexcept {
    return store->by_column() ? store->column(i)[slot] : store->row(slot)[i];
  }
};

struct Entry {
  exact::Key key;
  std::uint32_t slot;
  PointId id;
};

class QueryRanker {
 public:
  QueryRanker(const ExactInput& in, std::size_t q)
      : in_(in), store_(*in.screen.store), q_(in.screen.queries + q * store_.stride()),
        n_(static_cast<std::uint32_t>(in.stored_dim)), ip_(in.metric == exact::kInnerProduct) {}

  Entry entry(std::uint32_t slot, PointId id) const {
    const StoredPoint p{&store_, slot};
    return Entry{exact::float64_key(q_, p, n_, ip_), slot, id};
  }
  bool less(const Entry& a, const Entry& b) const {
    const StoredPoint pa{&store_, a.slot}, pb{&store_, b.slot};
    return exact::exact_less(q_, a.key, a.id, pa, b.key, b.id, pb, n_, ip_);
  }
  void sort(std::vector<Entry>& e) const {
    std::sort(e.begin(), e.end(), [&](const Entry& a, const Entry& b) { return less(a, b); });
  }
  /// sum |q_i p_i| of one slot (the inner product's magnitude), and |q| (double).
  double magnitude(std::uint32_t slot) const {
    double m = 0;
    for (std::uint32_t i = 0; i < n_; ++i) m = std::fma(std::fabs(double(q_[i])), std::fabs(double(StoredPoint{&store_, slot}(i))), m);
    return m;
  }
  double query_norm() const {
    double s = 0;
    for (std::uint32_t i = 0; i < n_; ++i) s = std::fma(double(q_[i]), double(q_[i]), s);
    return std::sqrt(s) * (1.0 + 0x1p-40);
  }
  /// Every visible stored point whose key may lie at or below `bound` (the fallback's gather).
  std::vector<Entry> gather(double bound, const IdRange* visible) const {
    std::vector<Entry> out;
    for (std::size_t s = 0; s < store_.slot_count(); ++s) {
      const PointId id = store_.id(s);
      if (id == kInvalidId || (visible && (id < visible->begin || id >= visible->end))) continue;
      const Entry e = entry(static_cast<std::uint32_t>(s), id);
      if (e.key.key - e.key.err <= bound) out.push_back(e);
    }
    return out;
  }
  float reported(const Entry& e) const {
    const StoredPoint p{&store_, e.slot};
    return exact::report(in_.metric, e.key, exact::ExactMinus<StoredPoint>{q_, &p, n_, ip_});
  }
  float rank(const Entry& e) const {
    const StoredPoint p{&store_, e.slot};
    return exact::round_once(e.key, false, 1.0, exact::ExactMinus<StoredPoint>{q_, &p, n_, ip_});
  }
  bool inner_product() const noexcept { return ip_; }

 private:
  const ExactInput& in_;
  const HostStore& store_;
  const float* q_;
  std::uint32_t n_;
  bool ip_;
};

/// An upper bound of the exact key behind k, rounded outwards.
double upper(const exact::Key& k) {
  const double hi = k.key + k.err;
  return hi + std::fabs(hi) * 0x1p-50;
}

}  // namespace

void exact_neighbours(const ExactInput& in, ThreadPool& pool, std::vector<Candidate>& found,
                      std::vector<float>& distances) {
  const std::size_t nq = in.screen.num_queries, k = in.k, slots = in.screen.store->slot_count();
  const std::size_t width = exact::screen_width(static_cast<std::uint32_t>(k),
                                                static_cast<std::uint32_t>(std::max(k, std::min<std::size_t>(slots, 1u << 30))));
  CpuSearchInput screen = in.screen;
  screen.k = width;
  std::vector<Candidate> screened;
  exact_search(screen, pool, screened);
  found.assign(nq * k, Candidate{});
  distances.assign(nq * k, std::numeric_limits<float>::infinity());
  const exact::ScreenBound bound = exact::screen_bound(static_cast<std::uint32_t>(in.stored_dim));
  pool.parallel_for(nq, [&](std::size_t q) {
    const QueryRanker ranker(in, q);
    std::vector<Entry> list;
    for (std::size_t j = 0; j < width; ++j) {
      const Candidate& c = screened[q * width + j];
      if (c.id != kInvalidId) list.push_back(ranker.entry(c.slot, c.id));
    }
    ranker.sort(list);
    // A list shorter than the screen's width, or a width that covers every slot, holds every
    // visible point: nothing outside it can enter.
    const bool exhaustive = list.size() < width || width >= slots;
    const IdRange* visible = in.screen.visible ? in.screen.visible + q : nullptr;
    if (!exhaustive && width > k) {
      const exact::Key kth = list[k - 1].key, far = list.back().key;
      const bool ip = ranker.inner_product();
      const double far_mag = ip ? ranker.magnitude(list.back().slot) : 0.0;
      const double outside_mag = ip ? ranker.query_norm() * in.max_norm : 0.0;
      if (!exact::screen_certified(kth, far, far_mag, outside_mag, bound, ip)) {
        // Every point whose exact key may be at or below the k-th candidate's (a superset of the
        // answers: the list's k-th bounds the true k-th from above).
        list = ranker.gather(upper(kth), visible);
        ranker.sort(list);
      }
    } else if (!exhaustive) {
      // width == k (k at the screen's limit): no room for a certificate; answer from every point.
      list = ranker.gather(upper(list[k - 1].key), visible);
      ranker.sort(list);
    }
    const std::size_t n = std::min(k, list.size());
    float previous = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const Entry& e = list[j];
      found[q * k + j] = Candidate{ranker.rank(e), e.slot, e.id};
      float d = ranker.reported(e);
      if (in.metric == exact::kHaversine) d = std::max(d, previous);  // faithful and non-decreasing
      distances[q * k + j] = previous = d;
    }
  });
}

}  // namespace streamknn::detail
