// The engine behind DistributedReferenceSet: the local shard, the outbox of routed updates, and
// the object's own thread, which runs the collective calls in the order this rank made them,
// each as a fixed sequence of collectives on the duplicate communicator (so that every rank
// takes part in every step, whatever failed locally). publish: distributed_publish.cpp; queries:
// distributed_query.cpp; save / load: distributed_checkpoint.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "core/engine.hpp"
#include "mpi/comm.hpp"
#include "mpi/outbox.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/config.hpp"
#include "streamknn/publish_report.hpp"
#include "streamknn/reference_set.hpp"
#include "streamknn/ticket.hpp"

namespace streamknn::detail {

/// What every rank sends first in a collective call: its kind, and the shape of its batch.
struct CallHeader {
  enum Kind : std::uint32_t { Publish = 1, Query = 2, Save = 3 };
  std::uint32_t kind = 0;
  std::uint32_t output = 0;       ///< AggregateSpec::Output (queries)
  std::uint64_t num_queries = 0;
  std::uint64_t k = 1;
  std::uint32_t visible = 0;      ///< 1 when the batch carries one IdRange per query
  std::uint32_t weights = 0;
  std::uint32_t regression = 0;
  std::uint32_t radius_mode = 0;  ///< RadiusMode
  std::uint64_t where = 0;        ///< predicates the batch carries: 0, 1 (for all) or num_queries
  double radius = 0;
  std::uint64_t cap = 0;          ///< RadiusAll: the most points per query
};

/// How a query batch is bounded by a radius: not, its k nearest within (search_within), or every
/// point within (radius_search).
enum RadiusMode : std::uint32_t { RadiusNone = 0, RadiusWithin = 1, RadiusAll = 2 };

/// A query batch of this rank, validated and copied.
struct QueryCall {
  CallHeader header;
  std::vector<float> queries;
  std::vector<IdRange> visible;
  std::vector<Predicate> where;
  AggregateSpec aggregate;
};

/// CUDA devices usable from this process (0 where there are none, or no CUDA in the build).
int visible_gpus() noexcept;
/// Throws InvalidArgument unless MPI is initialised and not finalised.
void check_mpi_initialised();

/// The manifest of a sharded checkpoint (distributed_checkpoint.cpp).
struct Manifest {
  int ranks = 0;
  std::uint64_t epoch = 0;                  ///< the global epoch saved
  std::vector<std::uint64_t> shard_epochs;  ///< each shard's own epoch in its file
};
Manifest read_manifest(const std::string& path);
/// "<path>.epoch-<E>.rank-<r>-of-<G>".
std::string shard_file(const std::string& path, std::uint64_t epoch, int rank, int ranks);

class DistributedEngine {
 public:
  /// Collective (constructor and load): config checked across ranks, the shard built, the
  /// backends compared.
  DistributedEngine(MPI_Comm comm, const StoreConfig& config);
  DistributedEngine(MPI_Comm comm, const std::string& path, const LoadOptions& options);
  ~DistributedEngine();

  std::size_t push(std::span<const Update> updates, bool wait, const char* caller);

  PublishReport publish();
  /// Validates at the call (InvalidArgument on this rank only, after queueing an empty part so
  /// that the other ranks' call goes on), then runs the call on the object's thread.
  /// filters: visible ranges, predicates and a radius, as for ReferenceSet (core/engine.hpp).
  Ticket<QueryResult> query(std::span<const float> queries, std::size_t k, const QueryFilters& filters,
                            AggregateSpec aggregate, const char* caller, const std::function<void()>& check = {});
  void save(const std::string& path);

  int rank() const noexcept { return comm_->rank(); }
  int ranks() const noexcept { return comm_->size(); }
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }
  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  std::size_t pending() const noexcept { return outbox_->queued() + carried_count_.load(std::memory_order_relaxed); }
  const ReferenceSet& shard() const noexcept { return *shard_; }

 private:
  /// The shard's configuration on this rank: the caller's, with the local device.
  StoreConfig local_config(const StoreConfig& config) const;
  /// Collective: refuses configurations that differ between ranks, naming the field and ranks.
  void check_configs(const StoreConfig& config) const;
  /// Collective: every shard built (or every rank throws), on one kind of backend.
  void check_shards(const mpi::Failure& built);
  void start();

  /// Runs fn on the object's thread, after the calls queued before it.
  template <class R>
  Ticket<R> enqueue(std::function<R()> fn);
  void run();
  /// Collective: every rank's header; throws on every rank when the ranks called different things.
  std::vector<CallHeader> exchange_headers(const CallHeader& mine, const char* caller) const;

  // distributed_publish.cpp
  PublishReport run_publish();
  PublishReport apply_owned(std::span<const Update> updates);
  PublishReport unite(const PublishReport& local);
  // distributed_query.cpp
  QueryResult run_query(const QueryCall& call);
  /// Collective: requests[s] (ids of shard s) to their shards, their stored vectors back, in
  /// order; returns at once where no rank asks for any.
  std::vector<std::vector<float>> fetch_vectors(const std::vector<std::vector<PointId>>& requests);
  // distributed_checkpoint.cpp
  void run_save(const std::string& path);

  std::unique_ptr<mpi::Comm> comm_;
  StoreConfig config_;
  int local_rank_ = 0;
  std::optional<ReferenceSet> shard_;
  bool exact_merge_ = false;  // the shards send their neighbours' vectors: merged in the exact order
  std::unique_ptr<mpi::Outbox> outbox_;

  // Touched by the object's thread only.
  std::vector<std::vector<std::byte>> carried_;  // owned updates received by publishes that did not apply
  std::atomic<std::size_t> carried_count_{0};
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::size_t> size_{0};
  /// run_query's buffers, kept between batches (mpi::Bytes says why) while they hold at most
  /// 64 MiB each; a batch that needs more has them allocated again, where fresh pages cost
  /// little beside its search.
  struct QueryBuffers {
    mpi::Bytes send, received;
    std::vector<float> vectors;  // the shard's neighbours' stored vectors
    void release_oversized() {
      constexpr std::size_t kKept = std::size_t(64) << 20;
      if (send.capacity() > kKept) mpi::Bytes().swap(send);
      if (received.capacity() > kKept) mpi::Bytes().swap(received);
      if (vectors.capacity() * sizeof(float) > kKept) std::vector<float>().swap(vectors);
    }
  } buffers_;

  std::mutex calls_mutex_;
  std::condition_variable calls_ready_;
  std::deque<std::function<void()>> calls_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace streamknn::detail
