// The collective query: every rank's batch goes to every shard (one all-gather), each shard
// searches each rank's part and sends back its k best with their targets and (where the backend
// can read them back) their stored vectors (one all-to-all), and each rank merges its own
// queries' lists in the single store's exact (distance, id) order (lib/core/exact_rank.hpp),
// then aggregates them with the rules of lib/core/aggregate.cpp.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "core/aggregate.hpp"
#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"
#include "core/exact_rank.hpp"
#include "core/metric_space.hpp"
#include "mpi/distributed_engine.hpp"

namespace streamknn::detail {

namespace {

const char* caller_of(std::uint32_t output) {
  switch (static_cast<AggregateSpec::Output>(output)) {
    case AggregateSpec::Output::Neighbors: return "DistributedReferenceSet::search";
    case AggregateSpec::Output::Labels:
    case AggregateSpec::Output::Probabilities: return "DistributedReferenceSet::classify";
    case AggregateSpec::Output::Values: return "DistributedReferenceSet::regress";
  }
  return "DistributedReferenceSet::search";
}

/// What a shard sends to the rank whose queries it searched: a status (and its message), the
/// global epoch, then num_queries x k entries.
struct ChunkHeader {
  std::int32_t status = 0;
  std::uint32_t message_bytes = 0;
  std::uint64_t epoch = 0;
};

/// One entry: the reported distance, the label (classification), the id, then (exact merge) the
/// stored form of the vector, then `outputs` floats (regression).
struct EntryShape {
  std::size_t stored_dim = 0;  // 0: no vectors (the backend cannot read them back)
  std::size_t outputs = 0;
  std::size_t bytes() const noexcept { return 16 + 4 * (stored_dim + outputs); }
};

struct Entry {
  float distance = std::numeric_limits<float>::infinity();
  std::int32_t label = kNoLabel;
  PointId id = kInvalidId;
  const std::byte* values = nullptr;
  std::size_t coords = 0;  // offset of its vector in the query's scratch
  exact::Key key;
};

/// A shard's answers to a batch of rows: the neighbours (k per row) and what is shipped with them.
struct Searched {
  Neighbors n;
  std::vector<std::int32_t> labels;
  std::vector<float> values, vectors;
};

/// Searches rows with k and fills what the entries carry: labels / values where some part asks for
/// a prediction, vectors for the exact merge.
Searched search_rows(Engine& engine, std::span<const float> rows, std::size_t k, std::span<const IdRange> visible,
                     bool targets, const EntryShape& shape, const char* caller) {
  Searched out;
  out.n = engine.query(rows, k, visible, AggregateSpec{}, caller).get().neighbors;
  if (targets || shape.stored_dim > 0) {
    engine.points_of(out.n.ids, out.labels, out.values, shape.stored_dim > 0 ? &out.vectors : nullptr);
  }
  return out;
}

/// The chunk for one source rank: rows [first, first + h.num_queries) of `found` (whose rows hold
/// found.n.k entries), the first h.k entries of each; or the failure alone.
std::vector<std::byte> pack(const CallHeader& h, const Searched* found, std::size_t first, const mpi::Failure& failure,
                            const EntryShape& shape, std::uint64_t epoch) {
  ChunkHeader header;
  header.epoch = epoch;
  header.status = static_cast<std::int32_t>(failure.kind);
  header.message_bytes = static_cast<std::uint32_t>(failure.message.size());
  const std::size_t outputs = h.output == std::uint32_t(AggregateSpec::Output::Values) ? shape.outputs : 0;
  const std::size_t dims = shape.stored_dim, per = EntryShape{dims, outputs}.bytes();
  const std::size_t entries = failure.failed() ? 0 : h.num_queries * h.k;
  std::vector<std::byte> out(sizeof header + failure.message.size() + entries * per);
  std::memcpy(out.data(), &header, sizeof header);
  std::memcpy(out.data() + sizeof header, failure.message.data(), failure.message.size());
  if (failure.failed()) return out;
  const std::size_t stride = found->n.k, all_outputs = shape.outputs;
  std::byte* p = out.data() + sizeof header;
  for (std::size_t q = 0; q < h.num_queries; ++q) {
    for (std::size_t j = 0; j < h.k; ++j, p += per) {
      const std::size_t i = (first + q) * stride + j;
      const std::int32_t label = found->labels.empty() ? kNoLabel : found->labels[i];
      std::memcpy(p, &found->n.distances[i], 4);
      std::memcpy(p + 4, &label, 4);
      std::memcpy(p + 8, &found->n.ids[i], 8);
      if (dims) std::memcpy(p + 16, found->vectors.data() + i * dims, 4 * dims);
      if (outputs) std::memcpy(p + 16 + 4 * dims, found->values.data() + i * all_outputs, 4 * outputs);
    }
  }
  return out;
}

/// Per query: the k first of the shards' entries in the single store's order ((exact distance,
/// id) from the stored vectors where the shards sent them, else (reported distance, id)), then
/// the output the call asked for.
void merge_lists(const StoreConfig& config, const QueryCall& call, const std::vector<const std::byte*>& lists,
                 const EntryShape& shape, QueryResult& result) {
  const std::size_t nq = call.header.num_queries, k = call.header.k, ranks = lists.size(), per = shape.bytes();
  const std::size_t sdim = stored_dim(config.metric, config.dim), outputs = shape.outputs;
  const std::size_t classes = config.target.kind == TargetSpec::Kind::Classes ? config.target.count : 0;
  const bool inner_product = config.metric == Metric::InnerProduct, exact_order = shape.stored_dim > 0;
  const auto output = call.aggregate.output;
  if (output == AggregateSpec::Output::Neighbors) {
    result.neighbors.num_queries = nq;
    result.neighbors.distances.assign(nq * k, std::numeric_limits<float>::infinity());
    result.neighbors.ids.assign(nq * k, kInvalidId);
  } else if (output == AggregateSpec::Output::Values) {
    result.regression.num_queries = nq;
    result.regression.values.resize(nq * outputs);
  } else {
    result.classes.num_queries = nq;
    result.classes.labels.resize(nq);
    if (output == AggregateSpec::Output::Probabilities) result.classes.probabilities.resize(nq * classes);
  }
  std::vector<Entry> entries;
  std::vector<float> coords, query(sdim), dist, column;
  std::vector<std::int32_t> labels;
  std::vector<double> scratch(k), class_weight(classes);
  for (std::size_t q = 0; q < nq; ++q) {
    entries.clear();
    coords.clear();
    const float* row = call.queries.data() + q * config.dim;
    if (config.origin.empty()) {
      to_stored_form(config.metric, {row, config.dim}, query.data());
    } else {  // as the store shifts it (L2 only): minus the origin in double, rounded once
      for (std::size_t d = 0; d < config.dim; ++d) query[d] = static_cast<float>(double(row[d]) - config.origin[d]);
    }
    for (std::size_t s = 0; s < ranks; ++s) {
      for (std::size_t j = 0; j < k; ++j) {
        const std::byte* p = lists[s] + (q * k + j) * per;
        Entry e;
        std::memcpy(&e.distance, p, 4);
        std::memcpy(&e.label, p + 4, 4);
        std::memcpy(&e.id, p + 8, 8);
        if (e.id == kInvalidId) break;  // padding: the rest of this list is padding too
        e.values = p + 16 + 4 * shape.stored_dim;
        e.coords = coords.size();
        coords.resize(coords.size() + shape.stored_dim);
        std::memcpy(coords.data() + e.coords, p + 16, 4 * shape.stored_dim);
        entries.push_back(e);
      }
    }
    auto at = [&](const Entry& e) {
      const float* v = coords.data() + e.coords;
      return [v](std::uint32_t i) { return v[i]; };
    };
    if (exact_order) {
      for (Entry& e : entries) e.key = exact::float64_key(query.data(), at(e), std::uint32_t(sdim), inner_product);
    }
    const std::size_t found = std::min(k, entries.size());
    std::partial_sort(entries.begin(), entries.begin() + std::ptrdiff_t(found), entries.end(),
                      [&](const Entry& a, const Entry& b) {
                        if (!exact_order) return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
                        return exact::exact_less(query.data(), a.key, a.id, at(a), b.key, b.id, at(b), std::uint32_t(sdim),
                                                 inner_product);
                      });
    dist.clear();
    for (std::size_t j = 0; j < found; ++j) dist.push_back(entries[j].distance);
    if (output == AggregateSpec::Output::Neighbors) {
      for (std::size_t j = 0; j < found; ++j) {
        result.neighbors.distances[q * k + j] = dist[j];
        result.neighbors.ids[q * k + j] = entries[j].id;
      }
    } else if (output == AggregateSpec::Output::Values) {
      column.resize(found);
      for (std::size_t o = 0; o < outputs; ++o) {
        for (std::size_t j = 0; j < found; ++j) std::memcpy(&column[j], entries[j].values + 4 * o, 4);
        result.regression.values[q * outputs + o] = regress(dist, column, call.aggregate.regression, scratch);
      }
    } else {
      labels.clear();
      for (std::size_t j = 0; j < found; ++j) labels.push_back(entries[j].label);
      float* proba = output == AggregateSpec::Output::Probabilities ? result.classes.probabilities.data() + q * classes
                                                                     : nullptr;
      result.classes.labels[q] = vote(dist, labels, call.aggregate.weights, class_weight, scratch, proba);
    }
  }
}

/// Every rank's id ranges in one array of `total` rows (rank r's from row first[r]; ranks that
/// sent none see everything).
std::vector<IdRange> combined_ranges(const std::vector<CallHeader>& headers, const std::vector<std::size_t>& first,
                                     std::size_t total, const std::vector<std::byte>& all_visible,
                                     const std::vector<std::size_t>& v_offsets) {
  std::vector<IdRange> visible(total, IdRange{});
  for (std::size_t r = 0; r < headers.size(); ++r) {
    if (headers[r].visible) {
      std::memcpy(visible.data() + first[r], all_visible.data() + v_offsets[r], headers[r].num_queries * sizeof(IdRange));
    }
  }
  return visible;
}

/// Where each shard's lists start in `received`, after its chunk header and message: a shard's
/// failure is thrown as that shard's error, and an answer from another epoch is refused.
std::vector<const std::byte*> shard_lists(const std::vector<std::byte>& received, const std::vector<std::size_t>& offsets,
                                          std::size_t ranks, std::uint64_t epoch, const char* caller) {
  std::vector<const std::byte*> lists(ranks);
  for (std::size_t s = 0; s < ranks; ++s) {
    ChunkHeader h;
    std::memcpy(&h, received.data() + offsets[s], sizeof h);
    const char* text = reinterpret_cast<const char*>(received.data() + offsets[s] + sizeof h);
    if (h.status != 0) {
      mpi::throw_failure(static_cast<mpi::ErrorKind>(h.status),
                         concat(caller, ": shard ", s, ": ", std::string(text, h.message_bytes)));
    }
    if (h.epoch != epoch) throw Error(concat(caller, ": shard ", s, " answered at epoch ", h.epoch, ", not ", epoch));
    lists[s] = received.data() + offsets[s] + sizeof h + h.message_bytes;
  }
  return lists;
}

}  // namespace

QueryResult DistributedEngine::run_query(const QueryCall& call) {
  MPI_Comm comm = comm_->get();
  const char* caller = caller_of(call.header.output);
  const std::vector<CallHeader> headers = exchange_headers(call.header, caller);
  const std::size_t ranks = headers.size(), me = std::size_t(comm_->rank()), dim = config_.dim;
  const std::size_t outputs = config_.target.kind == TargetSpec::Kind::Outputs ? config_.target.count : 0;
  const std::size_t sdim = stored_dim(config_.metric, dim);
  const EntryShape shape{exact_merge_ ? sdim : 0, outputs};

  // 1. Every rank's queries (and ranges) to every shard.
  std::vector<std::size_t> q_offsets, v_offsets;
  const std::vector<std::byte> all_queries =
      mpi::allgatherv(comm, std::as_bytes(std::span<const float>(call.queries)), q_offsets, "queries");
  bool any_visible = false;
  for (const CallHeader& h : headers) any_visible |= h.visible != 0;
  std::vector<std::byte> all_visible;
  if (any_visible) {
    all_visible = mpi::allgatherv(comm, std::as_bytes(std::span<const IdRange>(call.visible)), v_offsets, "visible");
  }

  // 2. This shard searches every rank's rows in one batch (k: the largest asked; each rank gets
  //    the first k of its rows' entries, which are its own k best). Where that batch is refused
  //    (a rank's bad row), each part is searched alone, so that only its rank gets the error.
  Engine& engine = EngineAccess::of(*shard_);
  std::vector<std::vector<std::byte>> send(ranks);
  std::exception_ptr own_error;
  std::size_t total = 0, k_max = 1;
  bool targets = false;
  std::vector<std::size_t> first(ranks, 0);
  for (std::size_t r = 0; r < ranks; ++r) {
    first[r] = total;
    total += headers[r].num_queries;
    if (headers[r].num_queries == 0) continue;
    k_max = std::max<std::size_t>(k_max, headers[r].k);
    targets |= headers[r].output != std::uint32_t(AggregateSpec::Output::Neighbors);
  }
  std::optional<Searched> together;
  if (total > 0) {
    try {
      std::vector<IdRange> visible;
      if (any_visible) visible = combined_ranges(headers, first, total, all_visible, v_offsets);
      together = search_rows(engine, {reinterpret_cast<const float*>(all_queries.data()), total * dim}, k_max, visible,
                             targets, shape, caller);
    } catch (...) {
      together.reset();  // searched part by part below
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    const CallHeader& h = headers[r];
    if (h.num_queries == 0) continue;
    if (together) {
      send[r] = pack(h, &*together, first[r], {}, shape, epoch());
      continue;
    }
    const auto* q = reinterpret_cast<const float*>(all_queries.data() + q_offsets[r]);
    std::span<const IdRange> visible;
    if (h.visible) visible = {reinterpret_cast<const IdRange*>(all_visible.data() + v_offsets[r]), h.num_queries};
    mpi::Failure failure;
    std::optional<Searched> part;
    try {
      part = search_rows(engine, {q, h.num_queries * dim}, h.k, visible,
                         h.output != std::uint32_t(AggregateSpec::Output::Neighbors), shape, caller_of(h.output));
    } catch (...) {
      if (r == me) own_error = std::current_exception();
      failure = mpi::failure_of(std::current_exception());
    }
    send[r] = pack(h, part ? &*part : nullptr, 0, failure, shape, epoch());
  }

  // 3. Each shard's lists for this rank's queries.
  std::vector<std::size_t> offsets;
  const std::vector<std::byte> received = mpi::alltoallv(comm, send, offsets, "query results");
  const std::size_t nq = call.header.num_queries, k = call.header.k;
  QueryResult result;
  result.neighbors.k = k;
  result.neighbors.epoch = result.classes.epoch = result.regression.epoch = epoch();
  const auto output = call.aggregate.output;
  const std::size_t classes = config_.target.kind == TargetSpec::Kind::Classes ? config_.target.count : 0;
  result.classes.num_classes = classes;
  result.regression.num_outputs = outputs;
  if (nq == 0) return result;
  if (own_error) std::rethrow_exception(own_error);  // this rank's own shard: the single store's message

  const EntryShape got{shape.stored_dim, output == AggregateSpec::Output::Values ? outputs : 0};
  merge_lists(config_, call, shard_lists(received, offsets, ranks, epoch(), caller), got, result);
  return result;
}

}  // namespace streamknn::detail
