// The rank's merge of the shards' lists into the single store's order, and its aggregation
// (distributed_merge.hpp says which entries need their vectors, and why).
#include "mpi/distributed_merge.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/aggregate.hpp"
#include "core/check.hpp"
#include "core/metric_space.hpp"

namespace streamknn::detail {

namespace {

/// A query row in the stored form the shards rank by (minus the origin in double, rounded once,
/// where there is one: L2 only).
void stored_query(const StoreConfig& config, const float* row, float* query) {
  if (config.origin.empty()) {
    to_stored_form(config.metric, {row, config.dim}, query);
  } else {
    for (std::size_t d = 0; d < config.dim; ++d) query[d] = static_cast<float>(double(row[d]) - config.origin[d]);
  }
}

/// The entry shipped at p, the position-th of shard's list (its vector read in place).
Entry read_entry(const std::byte* p, const EntryShape& shape, std::size_t shard, std::size_t position) {
  Entry e;
  std::memcpy(&e.distance, p, 4);
  std::memcpy(&e.label, p + 4, 4);
  std::memcpy(&e.id, p + 8, 8);
  e.shard = static_cast<std::uint32_t>(shard);
  e.position = static_cast<std::uint32_t>(position);
  e.vector = shape.stored_dim > 0 ? p + 16 : nullptr;
  e.values = p + 16 + 4 * shape.stored_dim;
  return e;
}

/// Coordinate i of a vector in a byte buffer (4-byte aligned or not).
struct ShippedPoint {
  const std::byte* at;
  float operator()(std::uint32_t i) const {
    float x;
    std::memcpy(&x, at + 4 * std::size_t(i), 4);
    return x;
  }
};

/// The single store's order of two entries with vectors: (exact distance, id), decided by float64
/// keys (computed once per entry) where their intervals are apart, else by the exact sum.
struct ExactOrder {
  const float* query;
  std::uint32_t n;
  bool inner_product;
  const exact::Key& keyed(const Entry& e) const {
    if (!e.keyed) {
      e.key = exact::float64_key(query, ShippedPoint{e.vector}, n, inner_product);
      e.keyed = true;
    }
    return e.key;
  }
  bool operator()(const Entry& a, const Entry& b) const {
    return exact::exact_less(query, keyed(a), a.id, ShippedPoint{a.vector}, keyed(b), b.id, ShippedPoint{b.vector}, n,
                             inner_product);
  }
};

/// Puts the `found` first of entries in the single store's order: (exact distance, id) from the
/// shipped vectors (keys only for reported ties where the report is monotone), else (reported
/// distance, id).
void order_entries(std::vector<Entry>& entries, std::size_t found, const float* query, std::size_t sdim, Metric metric,
                   bool with_vectors) {
  const bool monotone = metric != Metric::Haversine;
  const ExactOrder exact{query, std::uint32_t(sdim), metric == Metric::InnerProduct};
  std::partial_sort(entries.begin(), entries.begin() + std::ptrdiff_t(found), entries.end(),
                    [&](const Entry& a, const Entry& b) {
                      if (!with_vectors || (monotone && a.distance != b.distance)) {
                        return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
                      }
                      return exact(a, b);
                    });
}

}  // namespace

void merge_radius(const StoreConfig& config, const QueryCall& call, const std::vector<const std::byte*>& lists,
                  const EntryShape& shape, std::uint64_t epoch, RadiusNeighbors& out) {
  const std::size_t nq = call.header.num_queries, ranks = lists.size(), per = shape.bytes();
  const std::size_t sdim = stored_dim(config.metric, config.dim), cap = call.header.cap;
  std::vector<const std::byte*> next(ranks);
  for (std::size_t s = 0; s < ranks; ++s) next[s] = lists[s] + nq * 16;
  out = RadiusNeighbors{};
  out.num_queries = nq;
  out.epoch = epoch;
  out.offsets.assign(1, 0);
  out.cap_hit.assign(nq, 0);
  std::vector<Entry> entries;
  std::vector<float> query(sdim);
  for (std::size_t q = 0; q < nq; ++q) {
    entries.clear();
    stored_query(config, call.queries.data() + q * config.dim, query.data());
    for (std::size_t s = 0; s < ranks; ++s) {
      std::uint64_t count = 0, capped = 0;
      std::memcpy(&count, lists[s] + q * 16, 8);
      std::memcpy(&capped, lists[s] + q * 16 + 8, 8);
      out.cap_hit[q] |= capped != 0 ? 1 : 0;
      for (std::uint64_t j = 0; j < count; ++j, next[s] += per) entries.push_back(read_entry(next[s], shape, s, j));
    }
    const std::size_t found = std::min(cap, entries.size());
    if (entries.size() > cap) out.cap_hit[q] = 1;
    order_entries(entries, found, query.data(), sdim, config.metric, shape.stored_dim > 0);
    for (std::size_t j = 0; j < found; ++j) {
      out.ids.push_back(entries[j].id);
      out.distances.push_back(entries[j].distance);
    }
    out.offsets.push_back(out.ids.size());
  }
}

ListMerge::ListMerge(const StoreConfig& config, const QueryCall& call, std::vector<const std::byte*> lists,
                     const EntryShape& shape, bool vectors_on_demand, QueryResult& result)
    : config_(config),
      call_(call),
      lists_(std::move(lists)),
      shape_(shape),
      sdim_(stored_dim(config.metric, config.dim)),
      requests_(lists_.size()),
      result_(result) {
  const std::size_t nq = call.header.num_queries, k = call.header.k;
  const std::size_t classes = config.target.kind == TargetSpec::Kind::Classes ? config.target.count : 0;
  const auto output = call.aggregate.output;
  if (output == AggregateSpec::Output::Neighbors) {
    result.neighbors.num_queries = nq;
    result.neighbors.distances.assign(nq * k, std::numeric_limits<float>::infinity());
    result.neighbors.ids.assign(nq * k, kInvalidId);
  } else if (output == AggregateSpec::Output::Values) {
    result.regression.num_queries = nq;
    result.regression.values.resize(nq * shape.outputs);
  } else {
    result.classes.num_queries = nq;
    result.classes.labels.resize(nq);
    if (output == AggregateSpec::Output::Probabilities) result.classes.probabilities.resize(nq * classes);
  }
  scratch_.resize(k);
  class_weight_.resize(classes);
  std::vector<Entry> entries;
  std::vector<float> query(sdim_);
  for (std::size_t q = 0; q < nq; ++q) {
    if (vectors_on_demand) {
      if (!order_by_report(q, entries)) continue;  // pending: finish() writes it
    } else {
      gather(q, entries);
      stored_query(config, call.queries.data() + q * config.dim, query.data());
      order_entries(entries, std::min(k, entries.size()), query.data(), sdim_, config.metric, shape.stored_dim > 0);
    }
    emit(q, entries);
  }
}

void ListMerge::gather(std::size_t q, std::vector<Entry>& entries) const {
  const std::size_t k = call_.header.k, per = shape_.bytes();
  entries.clear();
  for (std::size_t s = 0; s < lists_.size(); ++s) {
    for (std::size_t j = 0; j < k; ++j) {
      const std::byte* p = lists_[s] + (q * k + j) * per;
      PointId id = kInvalidId;
      std::memcpy(&id, p + 8, 8);
      if (id == kInvalidId) break;  // padding: the rest of this list is padding too
      entries.push_back(read_entry(p, shape_, s, j));
    }
  }
}

bool ListMerge::order_by_report(std::size_t q, std::vector<Entry>& entries) {
  // A shard's list is in the exact order, so its reported distances never decrease: merging the
  // lists by (reported distance, shard) gives the (distance, shard, position) order. The merge
  // stops after the k-th entry and the entries that tie with it.
  const std::size_t k = call_.header.k, per = shape_.bytes(), shards = lists_.size();
  heads_.assign(shards, 0);
  entries.clear();
  for (;;) {
    std::size_t next = shards;
    float nearest = 0;
    for (std::size_t s = 0; s < shards; ++s) {
      if (heads_[s] == k) continue;
      const std::byte* p = lists_[s] + (q * k + heads_[s]) * per;
      PointId id = kInvalidId;
      float d = 0;
      std::memcpy(&id, p + 8, 8);
      std::memcpy(&d, p, 4);
      if (id != kInvalidId && (next == shards || d < nearest)) {  // padding ends a list
        next = s;
        nearest = d;
      }
    }
    if (next == shards || (entries.size() >= k && nearest != entries.back().distance)) break;
    entries.push_back(read_entry(lists_[next] + (q * k + heads_[next]) * per, shape_, next, heads_[next]));
    ++heads_[next];
  }
  const std::size_t found = std::min(k, entries.size());
  if (found == 0) return true;
  // Up to the k-th reported distance, a distance that several shards gave needs the exact order.
  const std::size_t end = entries.size();
  std::vector<std::size_t> fetch_index;
  for (std::size_t a = 0; a < end;) {
    std::size_t b = a + 1;
    bool across = false;
    for (; b < end && entries[b].distance == entries[a].distance; ++b) across |= entries[b].shard != entries[a].shard;
    if (across) {
      if (fetch_index.empty()) fetch_index.assign(end, Pending::kNotFetched);
      for (std::size_t i = a; i < b; ++i) {
        std::vector<PointId>& asked = requests_[entries[i].shard];
        fetch_index[i] = asked.size();
        asked.push_back(entries[i].id);
      }
    }
    a = b;
  }
  if (fetch_index.empty()) return true;
  pending_.push_back({q, entries, std::move(fetch_index)});
  return false;
}

void ListMerge::finish(const std::vector<std::vector<float>>& fetched) {
  std::vector<float> query(sdim_);
  for (Pending& p : pending_) {
    for (std::size_t i = 0; i < p.entries.size(); ++i) {
      if (p.fetch_index[i] == Pending::kNotFetched) continue;
      const std::vector<float>& rows = fetched.at(p.entries[i].shard);
      if ((p.fetch_index[i] + 1) * sdim_ > rows.size()) {
        throw Error(concat("DistributedReferenceSet: shard ", p.entries[i].shard, " sent ", rows.size() / sdim_,
                           " of the stored vectors asked for"));
      }
      p.entries[i].vector = reinterpret_cast<const std::byte*>(rows.data() + p.fetch_index[i] * sdim_);
    }
    stored_query(config_, call_.queries.data() + p.query * config_.dim, query.data());
    const ExactOrder exact{query.data(), std::uint32_t(sdim_), config_.metric == Metric::InnerProduct};
    // Equal reported distances: one shard's list is in the exact order; across shards both
    // entries' vectors were fetched.
    std::sort(p.entries.begin(), p.entries.end(), [&](const Entry& a, const Entry& b) {
      if (a.distance != b.distance) return a.distance < b.distance;
      if (a.shard == b.shard) return a.position < b.position;
      return exact(a, b);
    });
    emit(p.query, p.entries);
  }
  pending_.clear();
}

void ListMerge::emit(std::size_t q, const std::vector<Entry>& entries) {
  const std::size_t k = call_.header.k, found = std::min(k, entries.size()), outputs = shape_.outputs;
  const std::size_t classes = class_weight_.size();
  const auto output = call_.aggregate.output;
  dist_.clear();
  for (std::size_t j = 0; j < found; ++j) dist_.push_back(entries[j].distance);
  if (output == AggregateSpec::Output::Neighbors) {
    for (std::size_t j = 0; j < found; ++j) {
      result_.neighbors.distances[q * k + j] = dist_[j];
      result_.neighbors.ids[q * k + j] = entries[j].id;
    }
  } else if (output == AggregateSpec::Output::Values) {
    column_.resize(found);
    for (std::size_t o = 0; o < outputs; ++o) {
      for (std::size_t j = 0; j < found; ++j) std::memcpy(&column_[j], entries[j].values + 4 * o, 4);
      result_.regression.values[q * outputs + o] = regress(dist_, column_, call_.aggregate.regression, scratch_);
    }
  } else {
    labels_.clear();
    for (std::size_t j = 0; j < found; ++j) labels_.push_back(entries[j].label);
    float* proba = output == AggregateSpec::Output::Probabilities ? result_.classes.probabilities.data() + q * classes
                                                                   : nullptr;
    result_.classes.labels[q] = vote(dist_, labels_, call_.aggregate.weights, class_weight_, scratch_, proba);
  }
}

}  // namespace streamknn::detail
