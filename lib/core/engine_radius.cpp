// Predicates and radius bounds on a backend whose kernels run the k-nearest search only (the CUDA
// backend until its kernels test them): the k' nearest are searched on the backend, k' grown until
// every query's row holds what it needs (k points that pass, or its end, or a point past the
// radius), the predicate is tested on the host against the engine's copy of the attribute words,
// and "within" is decided on the host, exactly, on the stored vectors of the answers
// (Backend::read_vectors) by the rule both backends share (core/radius_rule.hpp). A row whose
// predicate too few of the kMaxK nearest pass is answered from every point that passes it,
// gathered and ranked exactly on the host (gather_row). The rows come
// out of the backend's exact search in (exact distance, id) order with the reported distances, so
// a prefix of a row, filtered, is the filtered answer: the answers equal the CPU backend's. The
// publish lock is held throughout: every round, the vectors and the words read are of one snapshot.
#include <algorithm>
#include <limits>

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

/// First k' to search for a batch: the cap (plus one, to see whether more lie within) or 128 for
/// a radius search, k for the k nearest within a radius, and with predicates 4 k' (at least 64).
std::size_t first_k(const RadiusSpec& r, std::size_t k, bool predicates) {
  std::size_t first = !r.active || !r.all ? k : r.cap == kNoLimit ? 128 : std::min(r.cap + 1, kMaxK);
  if (predicates) first = std::max<std::size_t>(4 * first, 64);
  return std::min(first, kMaxK);
}

/// One round's search: the pending queries' rows (and id ranges) at k.
QueryRequest round_request(const QueryRequest& request, const std::vector<std::size_t>& pending, std::size_t k,
                           std::size_t sdim) {
  QueryRequest round;
  round.num_queries = pending.size();
  round.k = k;
  round.converted.resize(pending.size() * sdim);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    std::copy_n(request.queries.data() + pending[i] * sdim, sdim, round.converted.data() + i * sdim);
    if (!request.visible.empty()) round.visible.push_back(request.visible[pending[i]]);
  }
  round.queries = round.converted;
  return round;
}

/// What a row answered by gathering needs of the engine: its catalogue, attribute words and backend.
struct GatherSource {
  const Catalog& catalog;
  std::span<const std::uint32_t> attributes;
  std::size_t words;
  const Backend& backend;
  Metric metric;
  std::size_t sdim;
};

/// Row q of a k-nearest search (search_within's included) whose predicate too few of the kMaxK
/// nearest pass: every point the predicate and the id range admit (the catalogue's ids, the host's
/// attribute words), their stored vectors read back, those within the radius kept, ranked by the
/// exact order of core/exact_rank.hpp with the reported distances rounded once (the CPU backend's
/// arithmetic: the same bits), the first `want`. False where the backend does not read vectors.
bool gather_row(const GatherSource& src, const QueryRequest& request, std::size_t q, std::size_t want,
                std::vector<PointId>& ids, std::vector<float>& dist) {
  const Predicate* predicate = request.predicate_of(q);
  const IdRange range = request.visible.empty() ? IdRange{} : request.visible[q];
  std::vector<std::uint32_t> slots;
  std::vector<PointId> slot_ids;
  src.catalog.for_each_point([&](PointId id, std::uint32_t slot) {
    if (id < range.begin || id >= range.end) return;
    if (predicate && !predicate->passes({src.attributes.data() + slot * src.words, src.words})) return;
    slots.push_back(slot);
    slot_ids.push_back(id);
  });
  std::vector<float> vectors;
  if (!slots.empty() && !src.backend.read_vectors(slots, vectors)) return false;
  const auto n = static_cast<std::uint32_t>(src.sdim);
  const bool ip = src.metric == Metric::InnerProduct;
  const float* query = request.queries.data() + q * src.sdim;
  struct Entry {
    exact::Key key;
    PointId id;
    const float* p;
  };
  std::vector<Entry> entries;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const float* p = vectors.data() + i * src.sdim;
    if (request.radius.active && !within_exactly(query, p, n, ip, request.radius.limit_hi, request.radius.limit_lo)) {
      continue;
    }
    entries.push_back({exact::float64_key(query, Row{p}, n, ip), slot_ids[i], p});
  }
  const auto less = [&](const Entry& a, const Entry& b) {
    return exact::exact_less(query, a.key, a.id, Row{a.p}, b.key, b.id, Row{b.p}, n, ip);
  };
  const std::size_t kept = std::min(want, entries.size());
  std::partial_sort(entries.begin(), entries.begin() + std::ptrdiff_t(kept), entries.end(), less);
  ids.clear();
  dist.clear();
  for (std::size_t j = 0; j < kept; ++j) {
    const Row row{entries[j].p};
    float d = exact::report(static_cast<int>(src.metric), entries[j].key, exact::ExactMinus<Row>{query, &row, n, ip});
    if (src.metric == Metric::Haversine && j > 0) d = std::max(d, dist.back());  // non-decreasing, as both backends
    ids.push_back(entries[j].id);
    dist.push_back(d);
  }
  return true;
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

}  // namespace

QueryResult Engine::filtered_by_search(const QueryRequest& request, const char* caller) const {
  const std::size_t nq = request.num_queries, sdim = stored_dim_, words = config_.attribute_words;
  const auto n = static_cast<std::uint32_t>(sdim);
  const bool ip = config_.metric == Metric::InnerProduct, radius = request.radius.active;
  const bool all = radius && request.radius.all;
  // What a row must hold: every point within (all), the cap plus one, or k.
  const std::size_t want = all ? (request.radius.cap == kNoLimit ? kNoLimit : request.radius.cap + 1) : request.k;
  const double hi = request.radius.limit_hi, lo = request.radius.limit_lo;
  std::vector<std::vector<PointId>> ids(nq);
  std::vector<std::vector<float>> dist(nq);
  std::vector<std::uint8_t> capped(nq, 0);
  std::vector<std::size_t> pending(nq);
  for (std::size_t q = 0; q < nq; ++q) pending[q] = q;
  std::size_t k = first_k(request.radius, request.k, !request.where.empty());
  std::lock_guard lock(publish_mutex_);
  const std::uint64_t epoch = this->epoch();
  while (!pending.empty()) {
    const Neighbors found = backend_->submit(round_request(request, pending, k, sdim)).get().neighbors;
    std::vector<std::uint32_t> slots;
    for (const PointId id : found.ids) {
      if (id != kInvalidId) slots.push_back(*catalog_.slot_of(id));
    }
    std::vector<float> vectors;
    if (radius && !backend_->read_vectors(slots, vectors)) {
      throw BackendUnavailable(concat(caller, ": radius bounds need the stored vectors, which the ",
                                      backend_->name(), " backend does not read back; use BackendKind::Cpu"));
    }
    std::vector<std::size_t> again;
    std::size_t next = 4 * k;  // the next k': 4 k', or as many as the rows' pass rates ask for
    std::size_t at = 0;  // the next answer's place in slots / vectors
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t q = pending[i];
      const float* query = request.queries.data() + q * sdim;
      ids[q].clear();
      dist[q].clear();
      const Predicate* predicate = request.predicate_of(q);
      bool done = false;  // the row holds what it needs, reached a point beyond the radius, or ended
      for (std::size_t j = 0; j < k; ++j) {
        const PointId id = found.ids[i * k + j];
        if (id == kInvalidId) {
          done = true;
          break;
        }
        const std::size_t slot = slots[at];
        const float* stored = radius ? vectors.data() + at * sdim : nullptr;  // every answer's, in order
        ++at;
        if (done) continue;  // the rest of the row is not needed; its entries are only stepped over
        if (radius && !within_exactly(query, stored, n, ip, hi, lo)) {
          done = true;  // the rest of the row is farther still (exact order)
          continue;
        }
        if (predicate && !predicate->passes({attributes_.data() + slot * words, words})) continue;
        ids[q].push_back(id);
        dist[q].push_back(found.distances[i * k + j]);
        done = ids[q].size() == want;
      }
      if (all && request.radius.cap != kNoLimit && ids[q].size() > request.radius.cap) {  // more than the cap
        ids[q].resize(request.radius.cap);
        dist[q].resize(request.radius.cap);
        capped[q] = 1;
      }
      if (done) continue;
      if (k == kMaxK && !all) {  // too few of the kMaxK nearest pass: gather what passes
        const GatherSource source{catalog_, attributes_, words, *backend_, config_.metric, sdim};
        if (gather_row(source, request, q, want, ids[q], dist[q])) continue;
      }
      if (k == kMaxK) {
        throw BackendUnavailable(concat(caller, ": query ", q, " needs more than the ", kMaxK, " nearest points (",
                                        all ? "more lie within the radius" : "too few of them pass its predicate",
                                        ") that the ", backend_->name(), " backend returns per search until its kernels "
                                        "test ", all ? "radius bounds" : "predicates",
                                        all ? "; give max_results, or use BackendKind::Cpu" : "; use BackendKind::Cpu"));
      }
      again.push_back(q);
      if (!ids[q].empty() && want != kNoLimit) {  // want / (the row's pass rate), with a margin
        next = std::max(next, (3 * k * want) / (2 * ids[q].size()) + 1);
      }
    }
    pending.swap(again);
    k = std::min(next, kMaxK);
  }
  return assemble(all, request.k, epoch, ids, dist, std::move(capped));
}

}  // namespace streamknn::detail
