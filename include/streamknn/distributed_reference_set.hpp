// streamknn/distributed_reference_set.hpp — one reference set sharded over an MPI communicator.
//
// Every rank owns one shard, a ReferenceSet on its local device (CUDA device = the rank's index
// on its host modulo the visible GPUs) or on the CPU, per StoreConfig::backend. The owner of an
// id is shard_of(id, ranks) = splitmix64(id) % ranks, so a move never changes shard. Installed
// and usable only where streamknn was built with MPI (STREAMKNN_MPI; target streamknn::mpi);
// nothing else in the library includes this header. docs/distributed.md has the whole contract.
//
// Threading and MPI: MPI must be initialised with MPI_THREAD_MULTIPLE (mpi4py does so). The
// constructor, load(), the destructor and the collective calls below (publish, search,
// search_within, radius_search, classify, regress, their submit_ forms, save) are collective:
// every rank makes them, in the same order,
// on one thread at a time (a rank with nothing to ask passes an empty batch). They run in that
// order on the object's own thread, over its own duplicate of the communicator, so a ticket may
// be waited on later and the caller's MPI traffic never mixes with the store's. push()/try_push()
// are local (no MPI) and may be called from any number of threads at once, on any rank.
//
// Visibility: every update whose push returned on any rank before that rank entered publish() is
// visible, after the publish, to every query of every rank; updates from one thread apply in the
// order they were pushed. The global epoch counts the publishes that changed some shard.
// Answers equal those of one ReferenceSet fed the same updates (same ids, distances, order).
//
// Errors: bad updates and k throw InvalidArgument at the call, on the calling rank only; bad
// query rows throw it from get() (or search()) on the rank that passed them. A configuration
// that differs between ranks is refused on every rank. An OutOfMemory in the first phase of a
// publish changes no shard; a failure after the shards agreed to apply aborts the communicator.
//
//   streamknn::DistributedReferenceSet drivers(MPI_COMM_WORLD, config);   // on every rank
//   drivers.move(id, position);                                            // any rank, any id
//   drivers.publish();                                                     // on every rank
//   auto nearest = drivers.search(my_passengers, 8);                       // on every rank
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "streamknn/aggregation.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/classifier.hpp"
#include "streamknn/config.hpp"
#include "streamknn/predicate.hpp"
#include "streamknn/publish_report.hpp"
#include "streamknn/radius.hpp"
#include "streamknn/reference_set.hpp"
#include "streamknn/regressor.hpp"
#include "streamknn/search.hpp"
#include "streamknn/ticket.hpp"
#include "streamknn/update.hpp"

namespace streamknn {

/// The rank that owns id on a communicator of `ranks` ranks: splitmix64(id) % ranks. Fixed by
/// the format: checkpoints of a sharded store depend on it.
int shard_of(PointId id, int ranks) noexcept;

namespace detail {
class DistributedEngine;
}

class DistributedReferenceSet {
 public:
  /// Collective. Checks that every rank passed the same configuration (origin included;
  /// cpu_threads, publish_threads and cuda_device may differ; cuda_device is replaced by the local rank
  /// modulo the visible GPUs) and that MPI gives MPI_THREAD_MULTIPLE; otherwise every rank
  /// throws InvalidArgument naming the field and the ranks. A shard that cannot be built on some
  /// rank makes every rank throw (the failing rank's error type, its message naming the rank).
  DistributedReferenceSet(MPI_Comm comm, const StoreConfig& config);
  /// Collective: finishes the calls already made, then frees the duplicate communicator.
  ~DistributedReferenceSet();
  DistributedReferenceSet(DistributedReferenceSet&&) noexcept;
  DistributedReferenceSet& operator=(DistributedReferenceSet&&) noexcept;
  DistributedReferenceSet(const DistributedReferenceSet&) = delete;
  DistributedReferenceSet& operator=(const DistributedReferenceSet&) = delete;

  // ---- producers (local; any thread) ---------------------------------------------------------
  /// Validates and queues an update for its owner; false (nothing queued) when this rank already
  /// holds queue_capacity updates waiting for publish().
  bool try_push(const Update& update);
  /// Waits for a publish() to free space when full (a thread that also publishes must not push
  /// more than queue_capacity updates between its publishes).
  void push(const Update& update);
  /// A batch, all validated before any is queued (InvalidArgument names the index).
  std::size_t try_push(std::span<const Update> updates);
  void push(std::span<const Update> updates);

  void insert(PointId id, std::span<const float> vector) { push(Update::insert(id, vector)); }
  void insert(PointId id, std::span<const float> vector, std::int32_t label) {
    push(Update::insert(id, vector, label));
  }
  void insert(PointId id, std::span<const float> vector, std::span<const float> values) {
    push(Update::insert(id, vector, values));
  }
  void move(PointId id, std::span<const float> vector) { push(Update::move(id, vector)); }
  /// Vectors as doubles (StoreConfig::origin is subtracted in double on the owner).
  void insert(PointId id, std::span<const double> vector) { push(Update::insert(id, vector)); }
  void insert(PointId id, std::span<const double> vector, std::int32_t label) {
    push(Update::insert(id, vector, label));
  }
  void move(PointId id, std::span<const double> vector) { push(Update::move(id, vector)); }
  void erase(PointId id) { push(Update::erase(id)); }
  void set_target(PointId id, std::int32_t label) { push(Update::set_target(id, label)); }
  void set_target(PointId id, std::span<const float> values) { push(Update::set_target(id, values)); }
  /// Attribute words (StoreConfig::attribute_words): routed to the owner like a move; an insert
  /// gives them with push(Update::insert(id, v).with_attributes(words)).
  void set_attributes(PointId id, std::span<const std::uint32_t> words) { push(Update::set_attributes(id, words)); }

  // ---- collective calls ------------------------------------------------------------------------
  /// Routes every rank's queued updates to their owners and applies them as one global epoch.
  /// Two phases: each shard reserves room for its batch, the ranks agree, then every shard
  /// applies. On OutOfMemory in the first phase no shard changes, every rank throws it and the
  /// updates stay pending for the next publish. The report is the union over the shards:
  /// counts summed, rejections shard by shard (rank order), queue order within a shard; epoch is
  /// the global epoch, size the points on all shards.
  PublishReport publish();

  /// This rank's queries (row-major, Q x dim; Q may be 0) against every shard: each shard
  /// returns its k best (with their vectors, where its backend can read them back), and one
  /// merge in the exact (distance, id) order gives the single-store answer.
  /// Different ranks may pass different k. The result carries the global epoch.
  /// where: predicates as for ReferenceSet::search (none, one for all queries or one per query);
  /// each shard applies them in its own search, so each sends its k best that pass.
  Neighbors search(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible = {},
                   std::span<const Predicate> where = {});
  Ticket<Neighbors> submit(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible = {},
                           std::span<const Predicate> where = {});
  /// The k nearest no farther than radius (streamknn/radius.hpp), as ReferenceSet::search_within.
  Neighbors search_within(std::span<const float> queries, std::size_t k, double radius,
                          std::span<const IdRange> visible = {}, std::span<const Predicate> where = {});
  /// Every point within radius, as ReferenceSet::radius_search: each shard answers its own radius
  /// search (with the cap), and the merge orders each query's union by (exact distance, id) and
  /// keeps the nearest max_results; capped where a shard was capped or the union exceeds the cap.
  RadiusNeighbors radius_search(std::span<const float> queries, double radius, std::size_t max_results = kNoLimit,
                                std::span<const IdRange> visible = {}, std::span<const Predicate> where = {});
  Ticket<RadiusNeighbors> submit_radius(std::span<const float> queries, double radius,
                                        std::size_t max_results = kNoLimit, std::span<const IdRange> visible = {},
                                        std::span<const Predicate> where = {});

  /// Classification after the merge (store of TargetSpec::classes), the rules of
  /// streamknn/aggregation.hpp; probabilities filled when asked for.
  ClassPredictions classify(std::span<const float> queries, std::size_t k, Weights weights = Weights::Uniform,
                            bool probabilities = false, std::span<const IdRange> visible = {});
  Ticket<ClassPredictions> submit_classify(std::span<const float> queries, std::size_t k,
                                           Weights weights = Weights::Uniform, bool probabilities = false,
                                           std::span<const IdRange> visible = {});
  /// Regression after the merge (store of TargetSpec::outputs).
  RegressionPredictions regress(std::span<const float> queries, std::size_t k,
                                RegressionAggregate aggregate = RegressionAggregate::Mean,
                                std::span<const IdRange> visible = {});
  Ticket<RegressionPredictions> submit_regress(std::span<const float> queries, std::size_t k,
                                               RegressionAggregate aggregate = RegressionAggregate::Mean,
                                               std::span<const IdRange> visible = {});

  // ---- durability (docs/distributed.md) --------------------------------------------------------
  /// Collective. Each rank writes its shard to "<path>.epoch-<E>.rank-<r>-of-<G>" (E the global
  /// epoch), then rank 0 replaces the manifest at path (atomically), which names E, the ranks
  /// and each shard's epoch; the previous save's shard files are then removed. A crash leaves
  /// the previous manifest and its files whole. Updates still queued are not saved. path must
  /// be on a file system every rank sees (or the same path on each host for rank 0's manifest).
  void save(const std::string& path);
  /// Collective. Rebuilds a saved sharded store on a communicator of the same size (no
  /// re-sharding: the owner of an id depends on the number of ranks); options apply to every
  /// shard (cuda_device is replaced as in the constructor). Throws CheckpointError on every
  /// rank for a missing or foreign manifest, another number of ranks or a shard file that is
  /// not the one the manifest names.
  static DistributedReferenceSet load(MPI_Comm comm, const std::string& path, const LoadOptions& options = {});

  // ---- state (local; any thread) ---------------------------------------------------------------
  int rank() const noexcept;
  int ranks() const noexcept;
  int owner_of(PointId id) const noexcept { return shard_of(id, ranks()); }
  std::uint64_t epoch() const noexcept;       ///< global epoch of the last publish (0 = empty)
  std::size_t size() const noexcept;          ///< points on all shards after the last publish
  /// Updates pushed on this rank and not yet routed, plus those this rank's shard received from a
  /// publish that did not apply (OutOfMemory), which the next publish applies first.
  std::size_t pending() const noexcept;
  const StoreConfig& config() const noexcept; ///< this rank's shard configuration
  const ReferenceSet& shard() const noexcept; ///< this rank's shard (its own, local epoch)

 private:
  explicit DistributedReferenceSet(std::unique_ptr<detail::DistributedEngine> engine);
  std::unique_ptr<detail::DistributedEngine> engine_;
};

}  // namespace streamknn
