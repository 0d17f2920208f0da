// The collective query: every rank's batch goes to every shard (one all-gather), each shard
// searches each rank's part and sends back its k best with their targets (one all-to-all), and
// each rank merges its own queries' lists in the single store's exact (distance, id) order, then
// aggregates them (distributed_merge.hpp). The stored vectors of neighbours whose reported
// distances tie across shards are fetched from their shards in one more exchange, entered by
// every rank and skipped when no rank needs any (one agreement); haversine and radius_search
// ship every neighbour's vector with the lists instead.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"
#include "core/metric_space.hpp"
#include "mpi/distributed_engine.hpp"
#include "mpi/distributed_merge.hpp"

namespace streamknn::detail {

namespace {

const char* caller_of(const CallHeader& h) {
  if (h.radius_mode == RadiusAll) return "DistributedReferenceSet::radius_search";
  if (h.radius_mode == RadiusWithin) return "DistributedReferenceSet::search_within";
  switch (static_cast<AggregateSpec::Output>(h.output)) {
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

/// A shard's answers to a batch of rows: the neighbours (k per row, or a radius search's lists)
/// and what is shipped with them.
struct Searched {
  Neighbors n;
  RadiusNeighbors radius;
  std::vector<std::int32_t> labels;
  std::vector<float> values, vectors;
};

/// Searches rows with k and the filters, and fills what the entries carry: labels / values where
/// some part asks for a prediction, vectors for the exact merge.
Searched search_rows(Engine& engine, std::span<const float> rows, std::size_t k, const QueryFilters& filters,
                     bool targets, const EntryShape& shape, const char* caller, std::vector<float> vectors = {}) {
  Searched out;
  out.vectors = std::move(vectors);  // a buffer kept from an earlier batch
  const bool all_within = filters.radius_on && filters.radius_all;
  QueryResult found = engine.query(rows, all_within ? 0 : k, filters, AggregateSpec{}, caller).get();
  const std::span<const PointId> ids = all_within ? std::span<const PointId>(found.radius.ids) : found.neighbors.ids;
  if (targets || shape.stored_dim > 0) {
    engine.points_of(ids, out.labels, out.values, shape.stored_dim > 0 ? &out.vectors : nullptr);
  }
  out.n = std::move(found.neighbors);
  out.radius = std::move(found.radius);
  return out;
}

/// A rank's part of the gathered batch: its rows' ranges and predicates, its radius.
QueryFilters part_filters(const CallHeader& h, const IdRange* visible, const Predicate* where) {
  QueryFilters f;
  if (h.visible) f.visible = {visible, h.num_queries};
  if (h.where) f.where = {where, h.where};
  f.radius_on = h.radius_mode != RadiusNone;
  f.radius_all = h.radius_mode == RadiusAll;
  f.radius = h.radius;
  f.cap = h.cap;
  return f;
}

/// n more bytes at the end of out: where they start.
std::byte* grow(mpi::Bytes& out, std::size_t n) {
  const std::size_t at = out.size();
  out.resize(at + n);
  return out.data() + at;
}

/// Appends the chunk for one source rank to out: rows [first, first + h.num_queries) of `found`
/// (whose rows hold found.n.k entries), the first h.k entries of each; or the failure alone.
void pack(const CallHeader& h, const Searched* found, std::size_t first, const mpi::Failure& failure,
          const EntryShape& shape, std::uint64_t epoch, mpi::Bytes& chunks) {
  ChunkHeader header;
  header.epoch = epoch;
  header.status = static_cast<std::int32_t>(failure.kind);
  header.message_bytes = static_cast<std::uint32_t>(failure.message.size());
  const std::size_t outputs = h.output == std::uint32_t(AggregateSpec::Output::Values) ? shape.outputs : 0;
  const std::size_t dims = shape.stored_dim, per = EntryShape{dims, outputs}.bytes();
  const std::size_t entries = failure.failed() ? 0 : h.num_queries * h.k;
  std::byte* out = grow(chunks, sizeof header + failure.message.size() + entries * per);
  std::memcpy(out, &header, sizeof header);
  std::memcpy(out + sizeof header, failure.message.data(), failure.message.size());
  if (failure.failed()) return;
  const std::size_t stride = found->n.k, all_outputs = shape.outputs;
  std::byte* p = out + sizeof header;
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
}

/// Appends a radius search's chunk to out: the header, then per query its count and capped flag
/// (two 64-bit words), then every query's entries in turn (the entry layout of pack(), no target
/// values).
void pack_radius(const Searched* found, const mpi::Failure& failure, const EntryShape& shape, std::uint64_t epoch,
                 mpi::Bytes& chunks) {
  ChunkHeader header;
  header.epoch = epoch;
  header.status = static_cast<std::int32_t>(failure.kind);
  header.message_bytes = static_cast<std::uint32_t>(failure.message.size());
  const std::size_t dims = shape.stored_dim, per = EntryShape{dims, 0}.bytes();
  const std::size_t nq = failure.failed() ? 0 : found->radius.num_queries;
  const std::size_t entries = failure.failed() ? 0 : found->radius.ids.size();
  std::byte* out = grow(chunks, sizeof header + failure.message.size() + nq * 16 + entries * per);
  std::memcpy(out, &header, sizeof header);
  std::memcpy(out + sizeof header, failure.message.data(), failure.message.size());
  if (failure.failed()) return;
  std::byte* p = out + sizeof header;
  for (std::size_t q = 0; q < nq; ++q, p += 16) {
    const std::uint64_t count = found->radius.count(q), capped = found->radius.cap_hit[q];
    std::memcpy(p, &count, 8);
    std::memcpy(p + 8, &capped, 8);
  }
  for (std::size_t i = 0; i < entries; ++i, p += per) {
    const std::int32_t label = kNoLabel;
    std::memcpy(p, &found->radius.distances[i], 4);
    std::memcpy(p + 4, &label, 4);
    std::memcpy(p + 8, &found->radius.ids[i], 8);
    if (dims) std::memcpy(p + 16, found->vectors.data() + i * dims, 4 * dims);
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
std::vector<const std::byte*> shard_lists(const mpi::Bytes& received, const std::vector<std::size_t>& offsets,
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

/// One rank's part searched alone, with its own filters: appends its chunk, or the failure's (the
/// error kept in *error too, where the part is this rank's).
void search_part(Engine& engine, const CallHeader& h, std::span<const float> rows, const QueryFilters& filters,
                 const EntryShape& shape, std::uint64_t epoch, std::exception_ptr* error, mpi::Bytes& chunks) {
  mpi::Failure failure;
  std::optional<Searched> part;
  try {
    part = search_rows(engine, rows, h.k, filters, h.output != std::uint32_t(AggregateSpec::Output::Neighbors), shape,
                       caller_of(h));
  } catch (...) {
    if (error) *error = std::current_exception();
    failure = mpi::failure_of(std::current_exception());
  }
  const Searched* found = part ? &*part : nullptr;
  if (h.radius_mode == RadiusAll) {
    pack_radius(found, failure, shape, epoch, chunks);
  } else {
    pack(h, found, 0, failure, shape, epoch, chunks);
  }
}

/// Every rank's rows as one batch: where each rank's rows start, their total, the largest k
/// asked, and whether any rank asked for targets.
struct CombinedBatch {
  std::vector<std::size_t> first;
  std::size_t total = 0, k_max = 1;
  bool targets = false;
};
CombinedBatch combine(const std::vector<CallHeader>& headers) {
  CombinedBatch b;
  b.first.assign(headers.size(), 0);
  for (std::size_t r = 0; r < headers.size(); ++r) {
    b.first[r] = b.total;
    b.total += headers[r].num_queries;
    if (headers[r].num_queries == 0) continue;
    b.k_max = std::max<std::size_t>(b.k_max, headers[r].k);
    b.targets |= headers[r].output != std::uint32_t(AggregateSpec::Output::Neighbors);
  }
  return b;
}

/// out = the `bytes` at from, as Ts (memcpy never sees an empty vector's null data()).
template <class T>
void read_array(const std::byte* from, std::size_t bytes, std::vector<T>& out) {
  out.resize(bytes / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), from, out.size() * sizeof(T));
}

/// A result with nothing merged yet: k, the epoch and the store's class and output counts.
QueryResult empty_result(const StoreConfig& config, std::size_t k, std::uint64_t epoch) {
  QueryResult result;
  result.neighbors.k = k;
  result.neighbors.epoch = result.classes.epoch = result.regression.epoch = epoch;
  result.classes.num_classes = config.target.kind == TargetSpec::Kind::Classes ? config.target.count : 0;
  result.regression.num_outputs = config.target.value_count();
  result.radius.offsets.assign(1, 0);
  result.radius.epoch = epoch;
  return result;
}

}  // namespace

QueryResult DistributedEngine::run_query(const QueryCall& call) {
  MPI_Comm comm = comm_->get();
  const char* caller = caller_of(call.header);
  const std::vector<CallHeader> headers = exchange_headers(call.header, caller);
  const std::size_t ranks = headers.size(), me = std::size_t(comm_->rank()), dim = config_.dim;
  const std::size_t outputs = config_.target.value_count();
  const std::size_t sdim = stored_dim(config_.metric, dim);
  // Which lists carry their vectors (a part's shape): haversine's and radius searches'.
  const bool haversine = config_.metric == Metric::Haversine, on_demand = exact_merge_ && !haversine;
  auto shape_of = [&](const CallHeader& h) {
    return EntryShape{exact_merge_ && (haversine || h.radius_mode == RadiusAll) ? sdim : 0, outputs};
  };
  bool fetch_round = false;  // the same on every rank: it reads every rank's header
  for (const CallHeader& h : headers) fetch_round |= on_demand && h.num_queries > 0 && h.radius_mode != RadiusAll;

  // 1. Every rank's queries (and ranges) to every shard.
  std::vector<std::size_t> q_offsets, v_offsets;
  const std::vector<std::byte> all_queries =
      mpi::allgatherv(comm, std::as_bytes(std::span<const float>(call.queries)), q_offsets, "queries");
  bool any_visible = false, any_where = false, filtered = false;
  for (const CallHeader& h : headers) {
    any_visible |= h.visible != 0;
    any_where |= h.where != 0;
    filtered |= h.where != 0 || h.radius_mode != RadiusNone;
  }
  std::vector<std::byte> all_visible, all_where;
  if (any_visible) {
    all_visible = mpi::allgatherv(comm, std::as_bytes(std::span<const IdRange>(call.visible)), v_offsets, "visible");
  }
  std::vector<std::size_t> w_offsets;
  if (any_where) {
    all_where = mpi::allgatherv(comm, std::as_bytes(std::span<const Predicate>(call.where)), w_offsets, "where");
  }

  // 2. This shard searches every rank's rows in one batch (k: the largest asked; each rank gets
  //    the first k of its rows' entries, which are its own k best). Where that batch is refused
  //    (a rank's bad row), or where some rank's call has predicates or a radius (each rank its
  //    own), each part is searched alone, so that only its rank gets the error.
  Engine& engine = EngineAccess::of(*shard_);
  buffers_.release_oversized();
  mpi::Bytes& send = buffers_.send;
  send.clear();
  std::vector<std::size_t> send_offsets(ranks + 1, 0);
  std::exception_ptr own_error;
  const CombinedBatch batch = combine(headers);
  std::optional<Searched> together;
  if (batch.total > 0 && !filtered) {
    try {
      std::vector<IdRange> visible;
      if (any_visible) visible = combined_ranges(headers, batch.first, batch.total, all_visible, v_offsets);
      together = search_rows(engine, {reinterpret_cast<const float*>(all_queries.data()), batch.total * dim},
                             batch.k_max, QueryFilters{visible}, batch.targets, shape_of(CallHeader{}), caller,
                             std::move(buffers_.vectors));
    } catch (...) {
      together.reset();  // searched part by part below
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    const CallHeader& h = headers[r];
    if (h.num_queries > 0 && together) {
      pack(h, &*together, batch.first[r], {}, shape_of(h), epoch(), send);
    } else if (h.num_queries > 0) {
      const auto* q = reinterpret_cast<const float*>(all_queries.data() + q_offsets[r]);
      const auto* visible = h.visible ? reinterpret_cast<const IdRange*>(all_visible.data() + v_offsets[r]) : nullptr;
      const auto* where = h.where ? reinterpret_cast<const Predicate*>(all_where.data() + w_offsets[r]) : nullptr;
      search_part(engine, h, {q, h.num_queries * dim}, part_filters(h, visible, where), shape_of(h), epoch(),
                  r == me ? &own_error : nullptr, send);
    }
    send_offsets[r + 1] = send.size();
  }
  if (together) buffers_.vectors = std::move(together->vectors);

  // 3. Each shard's lists for this rank's queries.
  std::vector<std::size_t> offsets;
  mpi::Bytes& received = buffers_.received;
  mpi::alltoallv_into(comm, {send.data(), send.size()}, send_offsets, received, offsets, "query results");
  QueryResult result = empty_result(config_, call.header.k, epoch());
  std::exception_ptr error = own_error;  // this rank's own shard: the single store's message
  std::optional<ListMerge> merge;
  if (call.header.num_queries > 0 && !error) {
    try {
      const auto lists = shard_lists(received, offsets, ranks, epoch(), caller);
      const EntryShape got = shape_of(call.header);
      if (call.header.radius_mode == RadiusAll) {
        merge_radius(config_, call, lists, EntryShape{got.stored_dim, 0}, epoch(), result.radius);
      } else {
        const bool values = call.aggregate.output == AggregateSpec::Output::Values;
        merge.emplace(config_, call, lists, EntryShape{got.stored_dim, values ? outputs : 0}, on_demand, result);
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  // 4. The vectors of neighbours tied across shards (every rank takes part).
  std::vector<std::vector<float>> fetched;
  if (fetch_round) fetched = fetch_vectors(merge ? merge->requests() : std::vector<std::vector<PointId>>(ranks));
  if (error) std::rethrow_exception(error);
  if (merge) merge->finish(fetched);
  return result;
}

std::vector<std::vector<float>> DistributedEngine::fetch_vectors(const std::vector<std::vector<PointId>>& requests) {
  MPI_Comm comm = comm_->get();
  const std::size_t ranks = requests.size(), sdim = stored_dim(config_.metric, config_.dim);
  std::uint64_t asked = 0, most = 0;
  for (const auto& ids : requests) asked += ids.size();
  mpi::check_mpi(MPI_Allreduce(&asked, &most, 1, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  std::vector<std::vector<float>> fetched(ranks);
  if (most == 0) return fetched;
  std::vector<std::vector<std::byte>> send(ranks);
  for (std::size_t s = 0; s < ranks; ++s) {
    const auto bytes = std::as_bytes(std::span<const PointId>(requests[s]));
    send[s].assign(bytes.begin(), bytes.end());
  }
  std::vector<std::size_t> offsets;
  const std::vector<std::byte> wanted = mpi::alltoallv(comm, send, offsets, "tied neighbours' ids");
  mpi::Failure failure;
  try {
    std::vector<PointId> ids;
    std::vector<std::int32_t> labels;
    std::vector<float> values, rows;
    for (std::size_t r = 0; r < ranks; ++r) {
      read_array(wanted.data() + offsets[r], offsets[r + 1] - offsets[r], ids);
      if (!EngineAccess::of(*shard_).points_of(ids, labels, values, &rows)) rows.assign(ids.size() * sdim, 0.0f);
      const auto bytes = std::as_bytes(std::span<const float>(rows));
      send[r].assign(bytes.begin(), bytes.end());
    }
  } catch (...) {
    failure = mpi::failure_of(std::current_exception());
    for (auto& part : send) part.clear();
  }
  mpi::agree(comm, failure, "DistributedReferenceSet: reading the stored vectors of tied neighbours");
  const std::vector<std::byte> rows = mpi::alltoallv(comm, send, offsets, "tied neighbours' vectors");
  for (std::size_t s = 0; s < ranks; ++s) read_array(rows.data() + offsets[s], offsets[s + 1] - offsets[s], fetched[s]);
  return fetched;
}

}  // namespace streamknn::detail
