// The rank's side of a collective query: the shards' lists for its queries merged into the single
// store's order, (exact distance, id), then aggregated with the single store's rules.
//
// Every metric but haversine reports the exact distance rounded once by a monotone map
// (lib/core/exact_rank.hpp, report()), so two different reported distances order their points as
// the exact distances do, and one shard's list is already in the exact order. Only points whose
// reported distances tie across shards need their stored vectors: the shards do not ship them
// with every neighbour; the merge names them (ListMerge::requests) and the query fetches them
// from their shards in one more exchange, which most batches skip. Haversine (a faithful report
// only) ships every neighbour's vector; a backend that cannot read its vectors back leaves ties
// in (reported distance, id) order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/exact_rank.hpp"
#include "mpi/distributed_engine.hpp"

namespace streamknn::detail {

/// One shipped entry: the reported distance, the label (classification), the id, then (where the
/// vectors travel with the lists) the stored form of the vector, then `outputs` floats
/// (regression).
struct EntryShape {
  std::size_t stored_dim = 0;  // 0: no vectors shipped
  std::size_t outputs = 0;
  std::size_t bytes() const noexcept { return 16 + 4 * (stored_dim + outputs); }
};

/// A shard's neighbour as the merge reads it.
struct Entry {
  float distance = 0;
  std::int32_t label = 0;
  PointId id = 0;
  std::uint32_t shard = 0, position = 0;  // its shard, and its place in that shard's list
  const std::byte* values = nullptr;
  const std::byte* vector = nullptr;  // its stored vector (shipped or fetched), or null
  mutable exact::Key key;             // computed when first needed
  mutable bool keyed = false;
};

/// Per query: every shard's points within the radius, in the single store's order, the first
/// `cap` of them; capped where a shard was capped or more than cap were found. The lists carry
/// their vectors where shape.stored_dim > 0.
void merge_radius(const StoreConfig& config, const QueryCall& call, const std::vector<const std::byte*>& lists,
                  const EntryShape& shape, std::uint64_t epoch, RadiusNeighbors& out);

/// The k nearest of each query from the shards' lists (k entries per query, padding last), into
/// the output the call asked for, in two steps: the constructor writes the queries that the
/// reported distances (or the shipped vectors) order, and names the vectors the others need;
/// finish() orders those with the fetched vectors and writes them.
class ListMerge {
 public:
  /// vectors_on_demand: the lists carry no vectors, and the shards can read theirs back.
  ListMerge(const StoreConfig& config, const QueryCall& call, std::vector<const std::byte*> lists,
            const EntryShape& shape, bool vectors_on_demand, QueryResult& result);
  /// requests()[s]: the ids whose stored vectors shard s must send (reported ties across shards).
  const std::vector<std::vector<PointId>>& requests() const noexcept { return requests_; }
  /// fetched[s]: the stored vectors of requests()[s], in order (stored_dim floats each).
  void finish(const std::vector<std::vector<float>>& fetched);

 private:
  struct Pending {  // a query whose order needs fetched vectors
    std::size_t query = 0;
    std::vector<Entry> entries;  // as order_by_report left them
    std::vector<std::size_t> fetch_index;  // per entry: its row in fetched[shard], or kNotFetched
    static constexpr std::size_t kNotFetched = std::numeric_limits<std::size_t>::max();
  };
  void gather(std::size_t q, std::vector<Entry>& entries) const;
  /// A query's entries up to the k-th and those tied with it, in (reported distance, shard,
  /// position) order; false (the query left pending, its requests named) where reported
  /// distances tie across shards among them.
  bool order_by_report(std::size_t q, std::vector<Entry>& entries);
  void emit(std::size_t q, const std::vector<Entry>& entries);

  const StoreConfig& config_;
  const QueryCall& call_;
  std::vector<const std::byte*> lists_;
  EntryShape shape_;
  std::size_t sdim_ = 0;
  std::vector<std::vector<PointId>> requests_;
  std::vector<Pending> pending_;
  std::vector<std::size_t> heads_;  // order_by_report's place in each shard's list
  QueryResult& result_;
  // emit's scratch
  std::vector<float> dist_, column_;
  std::vector<std::int32_t> labels_;
  std::vector<double> scratch_, class_weight_;
};

}  // namespace streamknn::detail
