// Radius bounds on a backend whose kernels do not test them (Backend::runs_radius; the CUDA
// backend): the k' nearest (among the points that pass the id range and the predicate, which
// every backend tests) are searched on the backend, k' grown until every query's row holds what
// it needs (the cap plus one, or k, or its end, or a point past the radius). "Within" is decided
// on the host, exactly, on the stored vectors of the answers (Backend::read_vectors) by the rule
// both backends share (core/radius_rule.hpp). The rows come out of the backend's exact search in
// (exact distance, id) order with the reported distances, so a prefix of a row is the answer: the
// answers equal the CPU backend's. The publish lock is held throughout: every round, the vectors
// read are of one snapshot.
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
/// a radius search, k for the k nearest within a radius.
std::size_t first_k(const RadiusSpec& r, std::size_t k) {
  return std::min(!r.active || !r.all ? k : r.cap == kNoLimit ? 128 : r.cap + 1, kMaxK);
}

/// One round's search: the pending queries' rows, id ranges and predicates at k.
QueryRequest round_request(const QueryRequest& request, const std::vector<std::size_t>& pending, std::size_t k,
                           std::size_t sdim) {
  QueryRequest round;
  round.num_queries = pending.size();
  round.k = k;
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

}  // namespace

QueryResult Engine::filtered_by_search(const QueryRequest& request, const char* caller) const {
  const std::size_t nq = request.num_queries, sdim = stored_dim_;
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
  std::size_t k = first_k(request.radius, request.k);
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
    std::size_t at = 0;  // the next answer's place in slots / vectors
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t q = pending[i];
      const float* query = request.queries.data() + q * sdim;
      ids[q].clear();
      dist[q].clear();
      bool done = false;  // the row holds what it needs, reached a point beyond the radius, or ended
      for (std::size_t j = 0; j < k; ++j) {
        const PointId id = found.ids[i * k + j];
        if (id == kInvalidId) {
          done = true;
          break;
        }
        const float* stored = radius ? vectors.data() + at * sdim : nullptr;  // every answer's, in order
        ++at;
        if (done) continue;  // the rest of the row is not needed; its entries are only stepped over
        if (radius && !within_exactly(query, stored, n, ip, hi, lo)) {
          done = true;  // the rest of the row is farther still (exact order)
          continue;
        }
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
      // Only a radius search's row can end unfinished: all its k' points lie within.
      if (k == kMaxK) {
        throw BackendUnavailable(concat(caller, ": query ", q, " has more than the ", kMaxK, " points within the radius "
                                        "that the ", backend_->name(), " backend returns per search until its kernels "
                                        "test radius bounds; give max_results, or use BackendKind::Cpu"));
      }
      again.push_back(q);
    }
    pending.swap(again);
    k = std::min(4 * k, kMaxK);
  }
  return assemble(all, request.k, epoch, ids, dist, std::move(capped));
}

}  // namespace streamknn::detail
