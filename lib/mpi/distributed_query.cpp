// The collective query: every rank's batch goes to every shard (one allgather), each shard
// searches each rank's part and sends back its k best by (rank, id) with their targets (one
// all-to-all), and each rank merges its own queries' lists exactly, then aggregates them with the
// rules of lib/core/aggregate.cpp.
#include <cstring>
#include <limits>

#include "core/aggregate.hpp"
#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"
#include "core/metric_space.hpp"
#include "mpi/distributed_engine.hpp"

namespace streamknn::detail {

namespace {

constexpr const char* kCaller = "DistributedReferenceSet::search";

const char* caller_of(std::uint32_t output) {
  switch (static_cast<AggregateSpec::Output>(output)) {
    case AggregateSpec::Output::Neighbors: return "DistributedReferenceSet::search";
    case AggregateSpec::Output::Labels:
    case AggregateSpec::Output::Probabilities: return "DistributedReferenceSet::classify";
    case AggregateSpec::Output::Values: return "DistributedReferenceSet::regress";
  }
  return kCaller;
}

/// What a shard sends to the rank whose queries it searched: a status (and its message), the
/// global epoch, then num_queries x k entries (key, label, id, values).
struct ChunkHeader {
  std::int32_t status = 0;
  std::uint32_t message_bytes = 0;
  std::uint64_t epoch = 0;
};

/// One neighbour of one shard as sent: the merge key (ranking value or reported distance), the
/// label (classification), the id, then `outputs` floats (regression).
std::size_t entry_bytes(std::size_t outputs) { return 16 + 4 * outputs; }

struct Entry {
  float key = std::numeric_limits<float>::infinity();
  std::int32_t label = kNoLabel;
  PointId id = kInvalidId;
  const std::byte* values = nullptr;
};

Entry read_entry(const std::byte* p) {
  Entry e;
  std::memcpy(&e.key, p, 4);
  std::memcpy(&e.label, p + 4, 4);
  std::memcpy(&e.id, p + 8, 8);
  e.values = p + 16;
  return e;
}

bool before(const Entry& a, const Entry& b) noexcept { return a.key < b.key || (a.key == b.key && a.id < b.id); }

}  // namespace

/// One source rank's part, searched on this shard and packed for it.
static std::vector<std::byte> pack_part(Engine& engine, const CallHeader& h, std::span<const float> queries,
                                        std::span<const IdRange> visible, bool ranked, std::uint64_t epoch,
                                        std::size_t outputs, std::exception_ptr& own_error) {
  ChunkHeader header;
  header.epoch = epoch;
  std::vector<std::byte> out;
  mpi::Failure failure;
  Neighbors n;
  std::vector<std::int32_t> labels;
  std::vector<float> values;
  const auto output = static_cast<AggregateSpec::Output>(h.output);
  try {
    AggregateSpec spec;
    spec.ranks = ranked;
    n = engine.query(queries, h.k, visible, spec, caller_of(h.output)).get().neighbors;
    if (output != AggregateSpec::Output::Neighbors) engine.targets_of(n.ids, labels, values);
  } catch (...) {
    own_error = std::current_exception();
    failure = mpi::failure_of(own_error);
  }
  const std::size_t per = entry_bytes(output == AggregateSpec::Output::Values ? outputs : 0);
  header.status = static_cast<std::int32_t>(failure.kind);
  header.message_bytes = static_cast<std::uint32_t>(failure.message.size());
  out.resize(sizeof header + failure.message.size() + (failure.failed() ? 0 : n.ids.size() * per));
  std::memcpy(out.data(), &header, sizeof header);
  std::memcpy(out.data() + sizeof header, failure.message.data(), failure.message.size());
  if (failure.failed()) return out;
  std::byte* p = out.data() + sizeof header;
  for (std::size_t i = 0; i < n.ids.size(); ++i, p += per) {
    const std::int32_t label = labels.empty() ? kNoLabel : labels[i];
    std::memcpy(p, &n.distances[i], 4);
    std::memcpy(p + 4, &label, 4);
    std::memcpy(p + 8, &n.ids[i], 8);
    if (per > 16) std::memcpy(p + 16, values.data() + i * outputs, 4 * outputs);
  }
  return out;
}

QueryResult DistributedEngine::run_query(const QueryCall& call) {
  MPI_Comm comm = comm_->get();
  const std::vector<CallHeader> headers = exchange_headers(call.header, caller_of(call.header.output));
  const std::size_t ranks = headers.size(), me = std::size_t(comm_->rank()), dim = config_.dim;
  const std::size_t outputs = config_.target.kind == TargetSpec::Kind::Outputs ? config_.target.count : 0;

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

  // 2. This shard searches each rank's part.
  Engine& engine = EngineAccess::of(*shard_);
  std::vector<std::vector<std::byte>> send(ranks);
  std::exception_ptr own_error;
  for (std::size_t r = 0; r < ranks; ++r) {
    if (headers[r].num_queries == 0) continue;
    const auto* q = reinterpret_cast<const float*>(all_queries.data() + q_offsets[r]);
    std::span<const IdRange> visible;
    if (headers[r].visible) {
      visible = {reinterpret_cast<const IdRange*>(all_visible.data() + v_offsets[r]), headers[r].num_queries};
    }
    std::exception_ptr error;
    send[r] = pack_part(engine, headers[r], {q, headers[r].num_queries * dim}, visible, ranked_, epoch(), outputs, error);
    if (r == me) own_error = error;
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

  const std::size_t per = entry_bytes(output == AggregateSpec::Output::Values ? outputs : 0);
  std::vector<const std::byte*> lists(ranks);
  for (std::size_t s = 0; s < ranks; ++s) {
    ChunkHeader h;
    std::memcpy(&h, received.data() + offsets[s], sizeof h);
    const char* text = reinterpret_cast<const char*>(received.data() + offsets[s] + sizeof h);
    if (h.status != 0) {
      mpi::throw_failure(static_cast<mpi::ErrorKind>(h.status),
                         concat(caller_of(call.header.output), ": shard ", s, ": ", std::string(text, h.message_bytes)));
    }
    if (h.epoch != epoch()) {
      throw Error(concat(caller_of(call.header.output), ": shard ", s, " answered at epoch ", h.epoch, ", not ", epoch()));
    }
    lists[s] = received.data() + offsets[s] + sizeof h + h.message_bytes;
  }

  // 4. The exact merge: per query, the k smallest (key, id) over the shards' sorted lists.
  const bool neighbors = output == AggregateSpec::Output::Neighbors;
  if (neighbors) {
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
  std::vector<std::size_t> head(ranks);
  std::vector<Entry> merged;
  std::vector<float> dist, column;
  std::vector<std::int32_t> labels;
  std::vector<double> scratch(k), class_weight(classes);
  for (std::size_t q = 0; q < nq; ++q) {
    std::fill(head.begin(), head.end(), 0);
    merged.clear();
    while (merged.size() < k) {
      std::size_t best = ranks;
      Entry best_entry;
      for (std::size_t s = 0; s < ranks; ++s) {
        if (head[s] == k) continue;
        const Entry e = read_entry(lists[s] + (q * k + head[s]) * per);
        if (e.id == kInvalidId) continue;  // padding: the rest of this list is padding too
        if (best == ranks || before(e, best_entry)) {
          best = s;
          best_entry = e;
        }
      }
      if (best == ranks) break;
      ++head[best];
      merged.push_back(best_entry);
    }
    dist.clear();
    for (const Entry& e : merged) {
      dist.push_back(ranked_ ? static_cast<float>(reported_distance(config_.metric, e.key)) : e.key);
    }
    if (neighbors) {
      for (std::size_t j = 0; j < merged.size(); ++j) {
        result.neighbors.distances[q * k + j] = dist[j];
        result.neighbors.ids[q * k + j] = merged[j].id;
      }
    } else if (output == AggregateSpec::Output::Values) {
      column.resize(merged.size());
      for (std::size_t o = 0; o < outputs; ++o) {
        for (std::size_t j = 0; j < merged.size(); ++j) std::memcpy(&column[j], merged[j].values + 4 * o, 4);
        result.regression.values[q * outputs + o] = regress(dist, column, call.aggregate.regression, scratch);
      }
    } else {
      labels.clear();
      for (const Entry& e : merged) labels.push_back(e.label);
      float* proba = output == AggregateSpec::Output::Probabilities ? result.classes.probabilities.data() + q * classes
                                                                     : nullptr;
      result.classes.labels[q] = vote(dist, labels, call.aggregate.weights, class_weight, scratch, proba);
    }
  }
  return result;
}

}  // namespace streamknn::detail
