// The CPU backend's exact answers: the float32 screen (cpu_search.cpp) keeps screen_width(k)
// candidates per query; they are re-ranked by the shared exact arithmetic (core/exact_rank.hpp),
// the same functions the CUDA re-rank kernel calls, so both backends give the same answers.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/exact_rank.hpp"
#include "core/memory.hpp"
#include "core/radius_rule.hpp"
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

/// Squared-L2 ranks of one query against slots [s0, s1) in float32 (any order of operations: the
/// screen's bound covers them), into rank[0 .. s1 - s0).
void float_ranks(const HostStore& store, const float* q, std::size_t dim, std::size_t s0, std::size_t s1,
                 float* __restrict rank) {
  const std::size_t n = s1 - s0;
  if (store.by_column()) {
    for (std::size_t j = 0; j < n; ++j) rank[j] = 0.0f;
    for (std::size_t d = 0; d < dim; ++d) {
      const float* __restrict col = store.column(d) + s0;
      const float qd = q[d];
      for (std::size_t j = 0; j < n; ++j) {
        const float diff = qd - col[j];
        rank[j] = std::fma(diff, diff, rank[j]);
      }
    }
    return;
  }
  for (std::size_t j = 0; j < n; ++j) {
    const float* row = store.row(s0 + j);
    float acc = 0.0f;
    for (std::size_t d = 0; d < dim; ++d) acc = std::fma(q[d] - row[d], q[d] - row[d], acc);
    rank[j] = acc;
  }
}

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
  /// The k best of e in order, the rest dropped (a selection, then a sort of k).
  void keep_best(std::vector<Entry>& e, std::size_t k) const {
    const auto by_rank = [&](const Entry& a, const Entry& b) { return less(a, b); };
    if (e.size() > k) {
      std::nth_element(e.begin(), e.begin() + std::ptrdiff_t(k - 1), e.end(), by_rank);
      e.resize(k);
    }
    std::sort(e.begin(), e.end(), by_rank);
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
  /// Every stored point query 0 of `one` sees whose key may lie at or below `bound` (the
  /// fallback's gather). Points whose float32 rank already puts their exact key above `bound`
  /// are passed over without a float64 key: a query with its k-th place tied over hundreds of
  /// points (duplicates) takes one float32 pass over the store instead of a float64 key per point.
  std::vector<Entry> gather(double bound, const CpuSearchInput& one) const {
    // A rank above this proves the key above `bound` (E3 of docs/cuda.md, any evaluation order).
    const float beyond = exact::screen_rank_limit(bound, 0.0, n_, ip_);
    const bool screened = beyond < std::numeric_limits<float>::infinity();  // else no rank proves anything
    const std::size_t slots = store_.slot_count();
    constexpr std::size_t kBlock = 512;
    float ranks[kBlock];
    std::vector<Entry> out;
    for (std::size_t base = 0; base < slots; base += kBlock) {
      const std::size_t count = std::min(kBlock, slots - base);
      if (screened) {
        float_ranks(store_, q_, n_, base, base + count, ranks);
        unsigned within = 0;  // whether any rank of the block may pass (a vector reduction)
        for (std::size_t j = 0; j < count; ++j) within |= unsigned(ranks[j] <= beyond);
        if (!within) continue;
      }
      for (std::size_t j = 0; j < count; ++j) {
        if (screened && ranks[j] > beyond) continue;
        const std::size_t s = base + j;
        const PointId id = store_.id(s);
        if (id == kInvalidId || !one.admits(0, s, id)) continue;
        const Entry e = entry(static_cast<std::uint32_t>(s), id);
        if (e.key.key - e.key.err <= bound) out.push_back(e);
      }
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
  /// Whether the pair's exact key is at most hi + lo (core/radius_rule.hpp).
  bool within(const Entry& e, double hi, double lo) const {
    const StoredPoint p{&store_, e.slot};
    return exact::within_limit(e.key, hi, lo, exact::ExactMinusPair<StoredPoint>{q_, &p, n_, ip_});
  }
  /// Starts the loads of the candidates' vectors (random rows: one at a time they wait on memory).
  void prefetch(const Candidate* c, std::size_t n) const {
    for (std::size_t j = 0; j < n; ++j) {
      if (c[j].id == kInvalidId) break;
      if (store_.by_column()) {
        for (std::uint32_t i = 0; i < n_; ++i) __builtin_prefetch(store_.column(i) + c[j].slot);
      } else {
        const char* row = reinterpret_cast<const char*>(store_.row(c[j].slot));
        for (std::size_t b = 0; b < n_ * sizeof(float); b += 64) __builtin_prefetch(row + b);
      }
    }
  }
  /// The answers of a sorted list: k entries (padded), distances rounded once, haversine made
  /// non-decreasing (each value stays one of the two float32 values around its exact distance).
  void write(const std::vector<Entry>& list, Candidate* found, float* distances) const {
    const std::size_t n = std::min(in_.k, list.size());
    float previous = 0;
    for (std::size_t j = 0; j < n; ++j) {
      found[j] = Candidate{rank(list[j]), list[j].slot, list[j].id};
      float d = reported(list[j]);
      if (in_.metric == exact::kHaversine) d = std::max(d, previous);
      distances[j] = previous = d;
    }
  }

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

/// Why a query's screened list did not give its answers.
enum Failure : unsigned char { kCertified = 0, kWiden = 1, kTied = 2 };

/// One round: the screen at `width` for the queries `which` (all where empty), each re-ranked;
/// the answers of those it certifies written, the others returned. Queries whose last candidate
/// may tie with the k-th go to `tied`: a wider screen would hold more of the same tie, so they
/// take the gather at once. Every query it fails gets the gather's bound in `bounds` (the upper
/// bound of its k-th exact key: the true k-th is no larger).
std::vector<std::size_t> screen_round(const ExactInput& in, ThreadPool& pool, const std::vector<std::size_t>& which,
                                      std::size_t width, std::vector<Candidate>& found, std::vector<float>& distances,
                                      std::vector<std::size_t>& tied, std::vector<double>& bounds) {
  const std::size_t k = in.k, slots = in.screen.store->slot_count(), stride = in.screen.store->stride();
  CpuSearchInput screen = in.screen;
  screen.k = width;
  AlignedVector<float> rows;
  std::vector<IdRange> ranges;
  std::vector<Predicate> predicates;
  if (!which.empty()) {  // a retry: the failed queries' rows (ranges, predicates) only
    rows.assign(which.size() * stride, 0.0f);
    for (std::size_t i = 0; i < which.size(); ++i) {
      std::copy_n(in.screen.queries + which[i] * stride, stride, rows.data() + i * stride);
      if (in.screen.visible) ranges.push_back(in.screen.visible[which[i]]);
      if (in.screen.where && in.screen.where_per_query) predicates.push_back(in.screen.where[which[i]]);
    }
    screen.queries = rows.data();
    screen.num_queries = which.size();
    screen.visible = in.screen.visible ? ranges.data() : nullptr;
    if (in.screen.where_per_query) screen.where = in.screen.where ? predicates.data() : nullptr;
  }
  std::vector<Candidate> screened;
  exact_search(screen, pool, screened);
  const exact::ScreenBound bound = exact::screen_bound(static_cast<std::uint32_t>(in.stored_dim));
  std::vector<unsigned char> failed(screen.num_queries, 0);
  pool.parallel_for(screen.num_queries, [&](std::size_t i) {
    const std::size_t q = which.empty() ? i : which[i];
    const QueryRanker ranker(in, q);
    std::vector<Entry> list;
    ranker.prefetch(screened.data() + i * width, width);
    for (std::size_t j = 0; j < width; ++j) {
      const Candidate& c = screened[i * width + j];
      if (c.id != kInvalidId) list.push_back(ranker.entry(c.slot, c.id));
    }
    ranker.sort(list);
    // A list shorter than the screen's width, or a width covering every slot, holds every
    // visible point: nothing outside it can enter.
    const bool exhaustive = list.size() < width || width >= slots;
    if (!exhaustive) {
      const bool ip = ranker.inner_product();
      const double far_mag = ip ? ranker.magnitude(list.back().slot) : 0.0;
      const double outside_mag = ip ? ranker.query_norm() * in.max_norm : 0.0;
      if (width <= k || !exact::screen_certified(list[k - 1].key, list.back().key, far_mag, outside_mag, bound, ip)) {
        const exact::Key& far = list.back().key;
        if (width > k) bounds[q] = upper(list[k - 1].key);
        failed[i] = width > k && far.key - far.err <= bounds[q] ? kTied : kWiden;
        return;
      }
    }
    ranker.write(list, found.data() + q * k, distances.data() + q * k);
  });
  std::vector<std::size_t> again;
  for (std::size_t i = 0; i < failed.size(); ++i) {
    if (failed[i] == kWiden) again.push_back(which.empty() ? i : which[i]);
    if (failed[i] == kTied) tied.push_back(which.empty() ? i : which[i]);
  }
  return again;
}

/// One pass over the store for a batch: every stored point query q sees whose float32 rank is at
/// most `limit` (+inf: no rank is computed) and whose entry keep(ranker, entry) accepts, per
/// query in no order. Tasks take chunks of slots and pass over each in tiles that stay in cache
/// while every query meets them; a tile, or a block of 8, where no rank lies within the limit is
/// passed over whole (16 queries of about 100 points each over 1,000,000 x 2, two cores: 1.3 ms,
/// against 3.4 ms with blocks of 8 alone and unfused sums).
template <class Keep>
std::vector<std::vector<Entry>> gather_within(const ExactInput& in, ThreadPool& pool, float limit, const Keep& keep) {
  const HostStore& store = *in.screen.store;
  const std::size_t nq = in.screen.num_queries, slots = store.slot_count(), stride = store.stride();
  const bool screened = limit < std::numeric_limits<float>::infinity();
  constexpr std::size_t kTile = 512;
  const std::size_t chunks = std::clamp<std::size_t>(slots / (4 * kTile), 1, 4 * pool.concurrency());
  const std::size_t chunk_len = (slots + chunks - 1) / chunks;
  std::vector<std::vector<Entry>> found(nq * chunks);
  pool.parallel_for(chunks, [&](std::size_t c) {
    const std::size_t begin = std::min(slots, c * chunk_len), end = std::min(slots, begin + chunk_len);
    std::vector<float> rank(kTile);
    for (std::size_t t0 = begin; t0 < end; t0 += kTile) {
      const std::size_t t1 = std::min(end, t0 + kTile);
      for (std::size_t q = 0; q < nq; ++q) {
        if (screened) {
          float_ranks(store, in.screen.queries + q * stride, in.stored_dim, t0, t1, rank.data());
          unsigned any = 0;  // a vector reduction
          for (std::size_t j = 0; j < t1 - t0; ++j) any |= unsigned(rank[j] <= limit);
          if (!any) continue;
        }
        const QueryRanker ranker(in, q);
        std::vector<Entry>& list = found[q * chunks + c];
        for (std::size_t s = t0; s < t1; ++s) {
          if (screened && (s - t0) % 8 == 0 && s + 8 <= t1) {
            bool any = false;
            for (std::size_t j = 0; j < 8; ++j) any |= rank[s - t0 + j] <= limit;
            if (!any) {
              s += 7;
              continue;
            }
          }
          if (screened && !(rank[s - t0] <= limit)) continue;
          const PointId id = store.id(s);
          if (id == kInvalidId || !in.screen.admits(q, s, id)) continue;
          const Entry e = ranker.entry(static_cast<std::uint32_t>(s), id);
          if (keep(ranker, e)) list.push_back(e);
        }
      }
    }
  });
  std::vector<std::vector<Entry>> out(nq);
  pool.parallel_for(nq, [&](std::size_t q) {
    std::vector<Entry>& list = found[q * chunks];
    for (std::size_t c = 1; c < chunks; ++c) {
      list.insert(list.end(), found[q * chunks + c].begin(), found[q * chunks + c].end());
      std::vector<Entry>().swap(found[q * chunks + c]);
    }
    out[q] = std::move(list);
  });
  return out;
}

}  // namespace

void exact_neighbours(const ExactInput& in, ThreadPool& pool, std::vector<Candidate>& found,
                      std::vector<float>& distances) {
  const std::size_t nq = in.screen.num_queries, k = in.k, slots = in.screen.store->slot_count();
  found.assign(nq * k, Candidate{});
  distances.assign(nq * k, std::numeric_limits<float>::infinity());
  if (nq == 0) return;
  // Queries whose certificate fails (ties at the k-th place
  // beyond the width) are screened again 8 times wider, and past kMaxRetryWidth (or with k at the
  // width's limit) answered from every stored point.
  constexpr std::size_t kMaxRetryWidth = 1 << 16;
  const std::size_t cap = std::max(k, std::min<std::size_t>(slots, std::size_t(1) << 30));
  std::size_t width = exact::screen_width(static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(cap));
  std::vector<std::size_t> tied;
  std::vector<double> bounds(nq, std::numeric_limits<double>::quiet_NaN());  // NaN: none known yet
  std::vector<std::size_t> pending = screen_round(in, pool, {}, width, found, distances, tied, bounds);
  while (!pending.empty() && width < std::min(cap, kMaxRetryWidth) && width > k) {
    width = std::min({width * 8, cap, kMaxRetryWidth});
    pending = screen_round(in, pool, pending, width, found, distances, tied, bounds);
  }
  pending.insert(pending.end(), tied.begin(), tied.end());
  pool.parallel_for(pending.size(), [&](std::size_t i) {
    const std::size_t q = pending[i];
    const QueryRanker ranker(in, q);
    // The true k-th key is at most the k-th screened one's, so every answer is among the points
    // whose key may lie below that bound: gather them from the whole store.
    CpuSearchInput one = in.screen;
    one.queries = in.screen.queries + q * in.screen.store->stride();
    one.num_queries = 1;
    one.visible = in.screen.visible ? in.screen.visible + q : nullptr;
    if (in.screen.where && in.screen.where_per_query) one.where = in.screen.where + q;
    one.k = k;
    std::vector<Entry> list;
    if (!std::isnan(bounds[q])) {  // the last screen's k-th already bounds the answers
      list = ranker.gather(bounds[q], one);
    } else {  // a screen no wider than k: screen at k for the bound
      std::vector<Candidate> first;
      ThreadPool single(0);
      exact_search(one, single, first);
      for (const Candidate& c : first) {
        if (c.id != kInvalidId) list.push_back(ranker.entry(c.slot, c.id));
      }
      ranker.sort(list);
      if (list.size() >= k) list = ranker.gather(upper(list[k - 1].key), one);
    }
    ranker.keep_best(list, k);
    ranker.write(list, found.data() + q * k, distances.data() + q * k);
  });
}

void limit_to_radius(const ExactInput& in, double hi, double lo, ThreadPool& pool, std::vector<Candidate>& found,
                     std::vector<float>& distances) {
  const std::size_t k = in.k;
  pool.parallel_for(in.screen.num_queries, [&](std::size_t q) {
    const QueryRanker ranker(in, q);
    // The row is in exact key order and "within" is a bound on that key: the first answer past
    // the radius ends the row.
    for (std::size_t j = 0; j < k; ++j) {
      Candidate& c = found[q * k + j];
      if (c.id == kInvalidId) break;
      if (ranker.within(ranker.entry(c.slot, c.id), hi, lo)) continue;
      for (std::size_t i = j; i < k; ++i) {
        found[q * k + i] = Candidate{};
        distances[q * k + i] = std::numeric_limits<float>::infinity();
      }
      break;
    }
  });
}

void radius_neighbours(const ExactInput& in, double hi, double lo, std::size_t cap, ThreadPool& pool,
                       RadiusNeighbors& out) {
  const std::size_t nq = in.screen.num_queries;
  // Squared distances (every metric but the inner product) first pass a float32 screen: a pair
  // whose float32 rank exceeds the bound on the rank of any pair within is out; the others get
  // their float64 key and the exact decision (radius_rule.hpp).
  const float limit = exact::screen_rank_limit(hi, lo, static_cast<std::uint32_t>(in.stored_dim),
                                               in.metric == exact::kInnerProduct);
  std::vector<std::vector<Entry>> found =
      gather_within(in, pool, limit, [&](const QueryRanker& ranker, const Entry& e) { return ranker.within(e, hi, lo); });
  std::vector<std::size_t> counts(nq, 0);
  out.num_queries = nq;
  out.cap_hit.assign(nq, 0);
  pool.parallel_for(nq, [&](std::size_t q) {
    std::vector<Entry>& list = found[q];
    QueryRanker(in, q).sort(list);
    if (list.size() > cap) {
      list.resize(cap);
      out.cap_hit[q] = 1;
    }
    counts[q] = list.size();
  });
  out.offsets.assign(nq + 1, 0);
  for (std::size_t q = 0; q < nq; ++q) out.offsets[q + 1] = out.offsets[q] + counts[q];
  out.ids.resize(out.offsets[nq]);
  out.distances.resize(out.offsets[nq]);
  pool.parallel_for(nq, [&](std::size_t q) {
    const QueryRanker ranker(in, q);
    const std::vector<Entry>& list = found[q];
    float previous = 0;
    for (std::size_t j = 0; j < list.size(); ++j) {
      float d = ranker.reported(list[j]);
      if (in.metric == exact::kHaversine) d = std::max(d, previous);  // as write() does
      previous = d;
      out.ids[out.offsets[q] + j] = list[j].id;
      out.distances[out.offsets[q] + j] = d;
    }
  });
}

}  // namespace streamknn::detail
