// Radius bounds on a backend whose kernels do not test them (Backend::runs_radius; the CUDA
// backend): the k' nearest (among the points that pass the id range and the predicate, which
// every backend tests, and whose float32 rank is within the radius's screen limit,
// QueryRequest::rank_limit) are searched on the backend, k' grown until every query's row holds
// what it needs (the cap plus one, or k, or its end, or a point past the radius). "Within" is decided
// on the host, exactly, on the stored vectors of the answers (Backend::read_vectors) by the rule
// both backends share (core/radius_rule.hpp). The rows come out of the backend's exact search in
// (exact distance, id) order with the reported distances, so a prefix of a row is the answer: the
// answers equal the CPU backend's. A row that still holds only points within at k' = kMaxK has its
// id range split in two, at the median of the row's ids, until each part's search ends within the
// radius, and the parts are put in the exact order (all_within_by_parts). Predictions vote or average over the rows on
// the host (aggregated). The publish lock is held throughout: every round, the vectors and
// targets read are of one snapshot.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/aggregate.hpp"
#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/metric_space.hpp"
#include "core/radius_rule.hpp"

namespace streamknn::detail {

namespace {

struct Row {
  const float* p;
  float operator()(std::uint32_t i) const noexcept { return p[i]; }
};

bool within_exactly(const float* q, const float* p, std::uint32_t n, bool ip, double hi, double lo) {
  const Row row{p};
  const exact::Key key = exact::float64_key(q, row, n, ip);
  return exact::within_limit(key, hi, lo, exact::ExactMinusPair<Row>{q, &row, n, ip});
}

/// Whether an answer's reported distance d (the exact distance rounded once to float32; haversine:
/// within 2^-23 of it) settles "within radius r" by itself: 1 within, -1 beyond, 0 too close to
/// tell. The margin, 2^-20 of |d| + |r| plus the smallest normal float, exceeds the rounding of d
/// and that of the radius's conversion to the bound on the key (radius_limit). Radii below 2^-60,
/// which radius_limit may round to a bound of 0, are always left to the exact test.
int settled_within(float d, double r) {
  if (std::isinf(r)) return r > 0 ? 1 : -1;
  if (std::fabs(r) < 0x1p-60) return 0;
  const double margin = 0x1p-20 * (std::fabs(double(d)) + std::fabs(r)) + 0x1p-126;
  if (double(d) + margin < r) return 1;
  if (double(d) - margin > r) return -1;
  return 0;
}

/// The stored vectors of `slots`, read back from the backend.
std::vector<float> stored_rows(const Backend& backend, std::span<const std::uint32_t> slots, const char* caller) {
  std::vector<float> vectors;
  if (!backend.read_vectors(slots, vectors)) {
    throw BackendUnavailable(concat(caller, ": radius bounds need the stored vectors, which the ", backend.name(),
                                    " backend does not read back; use BackendKind::Cpu"));
  }
  return vectors;
}

/// "Within the radius" for each answer of a round (indexed as found.ids; 0 for padding): settled
/// from its reported distance where it can be (settled_within), else decided exactly on its stored
/// vector, read back from the backend with the others left unsettled.
std::vector<std::int8_t> within_verdicts(const Neighbors& found, const QueryRequest& request,
                                         const std::vector<std::size_t>& pending, const Catalog& catalog,
                                         const Backend& backend, Metric metric, std::size_t sdim, const char* caller) {
  std::vector<std::int8_t> verdict(found.ids.size(), 0);
  std::vector<std::size_t> open;
  std::vector<std::uint32_t> slots;
  for (std::size_t at = 0; at < found.ids.size(); ++at) {
    if (found.ids[at] == kInvalidId) continue;
    verdict[at] = std::int8_t(settled_within(found.distances[at], request.radius.radius));
    if (verdict[at] != 0) continue;
    open.push_back(at);
    slots.push_back(*catalog.slot_of(found.ids[at]));
  }
  if (open.empty()) return verdict;
  const std::vector<float> vectors = stored_rows(backend, slots, caller);
  const bool ip = metric == Metric::InnerProduct;
  const std::size_t k = found.k;
  for (std::size_t i = 0; i < open.size(); ++i) {
    const float* query = request.queries.data() + pending[open[i] / k] * sdim;
    const bool within = within_exactly(query, vectors.data() + i * sdim, std::uint32_t(sdim), ip,
                                       request.radius.limit_hi, request.radius.limit_lo);
    verdict[open[i]] = within ? 1 : -1;
  }
  return verdict;
}

/// First k' of an uncapped radius search: its screen keeps k' + kScreenSlack = 128 candidates, the
/// most the CUDA backend's query-resident scan and spatial index take (at 136 a batch goes to the
/// general scan). H200, 10,000,000 x 2, about 100 points within: Q = 1,024 9.2 ms from k' = 128,
/// 4.9 ms from 120; Q = 64 0.64 ms and 0.81 ms (more rows need a second round).
constexpr std::size_t kFirstRadiusK = 128 - exact::kScreenSlack;

/// First k' to search for a batch: the cap (plus one, to see whether more lie within) or
/// kFirstRadiusK for a radius search, k for the k nearest within a radius.
std::size_t first_k(const RadiusSpec& r, std::size_t k) {
  return std::min(!r.active || !r.all ? k : r.cap == kNoLimit ? kFirstRadiusK : r.cap + 1, kMaxK);
}

/// One round's search: the pending queries' rows, id ranges and predicates at k, its ranks bounded
/// by the radius's screen limit (rank_limit).
QueryRequest round_request(const QueryRequest& request, const std::vector<std::size_t>& pending, std::size_t k,
                           std::size_t sdim, float rank_limit) {
  QueryRequest round;
  round.num_queries = pending.size();
  round.k = k;
  round.rank_limit = rank_limit;
  round.converted.resize(pending.size() * sdim);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    std::copy_n(request.queries.data() + pending[i] * sdim, sdim, round.converted.data() + i * sdim);
    if (!request.visible.empty()) round.visible.push_back(request.visible[pending[i]]);
    if (!request.where.empty()) round.where.push_back(*request.predicate_of(pending[i]));
  }
  round.queries = round.converted;
  return round;
}

/// The answer of every query from its filtered row: a radius search's flat list (all), else k
/// per query, padded.
QueryResult assemble(bool all, std::size_t k, std::uint64_t epoch, const std::vector<std::vector<PointId>>& ids,
                     const std::vector<std::vector<float>>& dist, std::vector<std::uint8_t>&& capped) {
  const std::size_t nq = ids.size();
  QueryResult result;
  if (all) {  // radius_search
    RadiusNeighbors& r = result.radius;
    r.num_queries = nq;
    r.epoch = epoch;
    r.offsets.assign(nq + 1, 0);
    for (std::size_t q = 0; q < nq; ++q) r.offsets[q + 1] = r.offsets[q] + ids[q].size();
    for (std::size_t q = 0; q < nq; ++q) {
      r.ids.insert(r.ids.end(), ids[q].begin(), ids[q].end());
      r.distances.insert(r.distances.end(), dist[q].begin(), dist[q].end());
    }
    r.cap_hit = std::move(capped);
    return result;
  }
  Neighbors& nb = result.neighbors;
  nb.num_queries = nq;
  nb.k = k;
  nb.epoch = epoch;
  nb.ids.assign(nq * k, kInvalidId);
  nb.distances.assign(nq * k, std::numeric_limits<float>::infinity());
  for (std::size_t q = 0; q < nq; ++q) {
    std::copy(ids[q].begin(), ids[q].end(), nb.ids.begin() + std::ptrdiff_t(q * k));
    std::copy(dist[q].begin(), dist[q].end(), nb.distances.begin() + std::ptrdiff_t(q * k));
  }
  return result;
}

/// One answer within the radius: its id and reported distance.
struct Within {
  PointId id;
  float distance;
};

/// Puts a query's answers, gathered from several searches, in the (exact distance, id) order the
/// rows of one search come in: float64 keys from the stored vectors read back, the error-free sum
/// where they cannot tell (exact_rank.hpp).
void exact_order(std::vector<Within>& found, const float* query, const Catalog& catalog, const Backend& backend,
                 bool ip, std::size_t sdim, const char* caller) {
  std::vector<std::uint32_t> slots(found.size());
  for (std::size_t i = 0; i < found.size(); ++i) slots[i] = *catalog.slot_of(found[i].id);
  const std::vector<float> vectors = stored_rows(backend, slots, caller);
  const auto n = std::uint32_t(sdim);
  std::vector<exact::Key> keys(found.size());
  std::vector<std::size_t> order(found.size());
  for (std::size_t i = 0; i < found.size(); ++i) {
    keys[i] = exact::float64_key(query, Row{vectors.data() + i * sdim}, n, ip);
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return exact::exact_less(query, keys[a], found[a].id, Row{vectors.data() + a * sdim}, keys[b], found[b].id,
                             Row{vectors.data() + b * sdim}, n, ip);
  });
  std::vector<Within> sorted(found.size());
  for (std::size_t i = 0; i < order.size(); ++i) sorted[i] = found[order[i]];
  found.swap(sorted);
}

/// The votes or averages of rows of the k nearest within a radius, on the host: each row's answers
/// (its prefix before the padding) with their targets read back from the backend, through the
/// rules the CPU backend applies (core/aggregate.hpp) on the same reported distances, so the
/// predictions equal the CPU backend's. Called under the publish lock: the targets are the rows'.
QueryResult aggregated(const Neighbors& rows, const AggregateSpec& spec, const StoreConfig& config,
                       const Catalog& catalog, const Backend& backend) {
  const std::size_t nq = rows.num_queries, k = rows.k, count = config.target.count;
  const bool classify = spec.output != AggregateSpec::Output::Values;
  const bool proba = spec.output == AggregateSpec::Output::Probabilities;
  std::vector<std::uint32_t> slots;
  std::vector<std::size_t> first(nq + 1, 0);  // row q's answers are slots [first[q], first[q + 1])
  for (std::size_t q = 0; q < nq; ++q) {
    for (std::size_t j = 0; j < k && rows.ids[q * k + j] != kInvalidId; ++j) {
      slots.push_back(*catalog.slot_of(rows.ids[q * k + j]));
    }
    first[q + 1] = slots.size();
  }
  ResolvedBatch targets;
  backend.read_targets(slots, targets);
  QueryResult result;
  result.classes.epoch = result.regression.epoch = rows.epoch;
  result.size_predictions(spec.output, nq, count);
  std::vector<double> scratch(k), class_weight(classify ? count : 0);
  std::vector<float> values;
  for (std::size_t q = 0; q < nq; ++q) {
    const std::size_t n = first[q + 1] - first[q];
    const std::span<const float> dist(rows.distances.data() + q * k, n);
    if (classify) {
      const std::span<const std::int32_t> labels(targets.labels.data() + first[q], n);
      result.classes.labels[q] = vote(dist, labels, spec.weights, class_weight, scratch,
                                      proba ? result.classes.probabilities.data() + q * count : nullptr);
      continue;
    }
    values.resize(n);
    for (std::size_t o = 0; o < count; ++o) {
      for (std::size_t j = 0; j < n; ++j) values[j] = targets.values[(first[q] + j) * count + o];
      result.regression.values[q * count + o] = regress(dist, values, spec.regression, scratch);
    }
  }
  return result;
}

/// Every point within the radius of the queries `overflow`, whose searches over their whole id
/// range held kMaxK points, all within (`rows_ids[q]`: those points' ids, for each q of
/// overflow): each query's range is split in two until the search of each part ends within the
/// radius, a level's parts searched as one batch; its parts' answers are then put in the exact
/// order. Indexed like `overflow`.
std::vector<std::vector<Within>> all_within_by_parts(const QueryRequest& request,
                                                     const std::vector<std::size_t>& overflow,
                                                     const std::vector<std::vector<PointId>>& rows_ids,
                                                     float rank_limit, const Catalog& catalog, const Backend& backend,
                                                     Metric metric, std::size_t sdim, const char* caller) {
  struct Part {
    std::size_t at;  // index into overflow
    IdRange range;
  };
  // A part whose search held kMaxK points within is split at the median of their ids: each side
  // holds about half of them, whatever the ids' spread over the range (halving the range itself
  // took one search per bit of it where the ids are clustered).
  std::vector<Part> open;
  const auto split = [&open](std::size_t at, IdRange r, std::vector<PointId> ids) {
    std::nth_element(ids.begin(), ids.begin() + std::ptrdiff_t(ids.size() / 2), ids.end());
    const PointId mid = ids[ids.size() / 2];  // above the smallest: both sides hold some of them
    open.push_back({at, {r.begin, mid}});
    open.push_back({at, {mid, r.end}});
  };
  for (std::size_t i = 0; i < overflow.size(); ++i) {
    split(i, request.visible.empty() ? IdRange{} : request.visible[overflow[i]], rows_ids[overflow[i]]);
  }
  std::vector<std::vector<Within>> found(overflow.size());
  while (!open.empty()) {
    std::vector<std::size_t> rows(open.size());
    for (std::size_t i = 0; i < open.size(); ++i) rows[i] = overflow[open[i].at];
    QueryRequest round = round_request(request, rows, kMaxK, sdim, rank_limit);
    round.visible.resize(open.size());
    for (std::size_t i = 0; i < open.size(); ++i) round.visible[i] = open[i].range;
    const Neighbors got = backend.submit(std::move(round)).get().neighbors;
    const std::vector<std::int8_t> within = within_verdicts(got, request, rows, catalog, backend, metric, sdim, caller);
    std::vector<Part> searched;
    searched.swap(open);
    for (std::size_t i = 0; i < searched.size(); ++i) {
      const std::size_t first = i * kMaxK;
      std::size_t j = 0;
      while (j < kMaxK && got.ids[first + j] != kInvalidId && within[first + j] > 0) ++j;
      if (j == kMaxK) {
        split(searched[i].at, searched[i].range, {got.ids.begin() + std::ptrdiff_t(first),
                                                  got.ids.begin() + std::ptrdiff_t(first + kMaxK)});
        continue;
      }
      for (std::size_t e = 0; e < j; ++e) {  // the part's search ended within the radius: all of it is here
        found[searched[i].at].push_back({got.ids[first + e], got.distances[first + e]});
      }
    }
  }
  const bool ip = metric == Metric::InnerProduct;
  for (std::size_t i = 0; i < overflow.size(); ++i) {
    exact_order(found[i], request.queries.data() + overflow[i] * sdim, catalog, backend, ip, sdim, caller);
  }
  return found;
}

}  // namespace

QueryResult Engine::filtered_by_search(const QueryRequest& request, const char* caller) const {
  const std::size_t nq = request.num_queries, sdim = stored_dim_;
  const bool radius = request.radius.active, all = radius && request.radius.all;
  // What a row must hold: every point within (all), the cap plus one, or k.
  const std::size_t want = all ? (request.radius.cap == kNoLimit ? kNoLimit : request.radius.cap + 1) : request.k;
  std::vector<std::vector<PointId>> ids(nq);
  std::vector<std::vector<float>> dist(nq);
  std::vector<std::uint8_t> capped(nq, 0);
  std::vector<std::size_t> pending(nq), overflow;
  for (std::size_t q = 0; q < nq; ++q) pending[q] = q;
  std::size_t k = first_k(request.radius, request.k);
  // The kernels admit no pair ranked above the radius's screen limit: a row then ends (padded)
  // once the points within are in it, and the scans keep no candidate beyond it.
  const float rank_limit =
      radius ? exact::screen_rank_limit(request.radius.limit_hi, request.radius.limit_lo, std::uint32_t(sdim),
                                        config_.metric == Metric::InnerProduct)
             : std::numeric_limits<float>::infinity();
  std::lock_guard lock(publish_mutex_);
  const std::uint64_t epoch = this->epoch();
  while (!pending.empty()) {
    const Neighbors found = backend_->submit(round_request(request, pending, k, sdim, rank_limit)).get().neighbors;
    const std::vector<std::int8_t> within =
        radius ? within_verdicts(found, request, pending, catalog_, *backend_, config_.metric, sdim, caller)
               : std::vector<std::int8_t>(found.ids.size(), 1);
    std::vector<std::size_t> again;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t q = pending[i];
      ids[q].clear();
      dist[q].clear();
      bool done = false;  // the row holds what it needs, reached a point beyond the radius, or ended
      for (std::size_t j = 0; j < k; ++j) {
        const PointId id = found.ids[i * k + j];
        if (id == kInvalidId) {
          done = true;
          break;
        }
        if (within[i * k + j] < 0) {
          done = true;  // the rest of the row is farther still (exact order)
          break;
        }
        ids[q].push_back(id);
        dist[q].push_back(found.distances[i * k + j]);
        if ((done = ids[q].size() == want)) break;
      }
      if (all && request.radius.cap != kNoLimit && ids[q].size() > request.radius.cap) {  // more than the cap
        ids[q].resize(request.radius.cap);
        dist[q].resize(request.radius.cap);
        capped[q] = 1;
      }
      if (done) continue;
      // Only a radius search's row can end unfinished: all its k' points lie within.
      (k == kMaxK ? overflow : again).push_back(q);
    }
    pending.swap(again);
    k = std::min(4 * k, kMaxK);
  }
  // Rows with more points within than one search returns: searched again by parts of their ids.
  const auto parts =
      all_within_by_parts(request, overflow, ids, rank_limit, catalog_, *backend_, config_.metric, sdim, caller);
  for (std::size_t i = 0; i < overflow.size(); ++i) {
    const std::size_t q = overflow[i];
    const std::size_t keep = std::min(parts[i].size(), request.radius.cap);
    capped[q] = parts[i].size() > keep;
    ids[q].resize(keep);
    dist[q].resize(keep);
    for (std::size_t e = 0; e < keep; ++e) {
      ids[q][e] = parts[i][e].id;
      dist[q][e] = parts[i][e].distance;
    }
  }
  QueryResult rows = assemble(all, request.k, epoch, ids, dist, std::move(capped));
  if (request.aggregate.output == AggregateSpec::Output::Neighbors) return rows;
  return aggregated(rows.neighbors, request.aggregate, config_, catalog_, *backend_);
}

}  // namespace streamknn::detail
