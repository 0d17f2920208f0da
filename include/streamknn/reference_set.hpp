// streamknn/reference_set.hpp — the mutable reference set: push updates, publish, search.
//
// Threading: push()/try_push() may be called from any number of threads at once and never
// block inside the library (push() waits only for queue space). publish() may be called from
// any thread; concurrent calls are serialised. search()/submit() may be called from any number
// of threads, concurrently with pushes and publishes.
//
// Visibility: every update whose push returned before publish() began is visible to every
// search submitted after publish() returned; searches already in flight finish on the snapshot
// they started on; updates from one thread apply in the order they were pushed.
//
// Errors: malformed updates and queries throw InvalidArgument at the call; id errors (unknown
// id, duplicate insert) are reported by publish() and never stop the other updates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "streamknn/checkpoint.hpp"
#include "streamknn/config.hpp"
#include "streamknn/predicate.hpp"
#include "streamknn/publish_report.hpp"
#include "streamknn/q_update.hpp"
#include "streamknn/radius.hpp"
#include "streamknn/search.hpp"
#include "streamknn/ticket.hpp"
#include "streamknn/update.hpp"

namespace streamknn {

namespace detail {
class Engine;
struct EngineAccess;  // the library's own access to the engine (lib/core/engine_access.hpp)
}

class ReferenceSet {
 public:
  /// Validates the configuration and creates the backend (BackendKind::Auto picks CUDA where
  /// a device is usable). Throws InvalidArgument, BackendUnavailable, OutOfMemory (the queue
  /// or the initial capacity cannot be allocated) or CudaError.
  explicit ReferenceSet(const StoreConfig& config);
  ~ReferenceSet();
  ReferenceSet(ReferenceSet&&) noexcept;
  ReferenceSet& operator=(ReferenceSet&&) noexcept;
  ReferenceSet(const ReferenceSet&) = delete;
  ReferenceSet& operator=(const ReferenceSet&) = delete;

  // ---- producers -------------------------------------------------------------------------
  /// Queues an update; false (and nothing queued) when the queue is full.
  bool try_push(const Update& update);
  /// Queues an update, waiting for a publish() to free space when the queue is full. A thread
  /// that both pushes and publishes must not push more than queue_capacity updates between
  /// publishes (it would wait for itself): use try_push and publish() when it returns false.
  void push(const Update& update);
  /// A batch of updates, queued in order with one claim of queue space per run of free cells
  /// instead of one per update (other threads' updates may land between runs). Every update is
  /// validated before any is queued: an invalid one throws InvalidArgument naming its index,
  /// and nothing of the batch is queued. try_push queues the longest prefix that fits (in one
  /// or more runs) and returns its length; push waits for publish() as push() does.
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
  void erase(PointId id) { push(Update::erase(id)); }
  void set_target(PointId id, std::int32_t label) { push(Update::set_target(id, label)); }
  void set_target(PointId id, std::span<const float> values) { push(Update::set_target(id, values)); }
  void set_attributes(PointId id, std::span<const std::uint32_t> words) { push(Update::set_attributes(id, words)); }

  // ---- publisher ---------------------------------------------------------------------------
  /// Applies every update pushed before this call began and makes them visible as a new epoch.
  /// A publish that applies nothing (the queue was empty, or every drained op was rejected for
  /// its id) keeps the epoch: the report's epoch is the current one and searches see the same
  /// snapshot, so the epoch counts changes, not calls.
  /// On OutOfMemory nothing is applied, the published state is unchanged and the drained
  /// updates stay pending for the next publish().
  PublishReport publish();

  // ---- queries -------------------------------------------------------------------------------
  /// Exact k nearest neighbours of queries (row-major, Q x dim) on the current snapshot.
  /// visible, if not empty, holds one IdRange per query restricting what that query sees.
  /// where, if not empty, holds one Predicate for every query or one per query
  /// (streamknn/predicate.hpp): the answers are the k nearest among the points that pass it.
  Neighbors search(std::span<const float> queries, std::size_t k,
                   std::span<const IdRange> visible = {}, std::span<const Predicate> where = {}) const;
  /// Asynchronous search: returns at once; the inputs are copied before it returns.
  Ticket<Neighbors> submit(std::span<const float> queries, std::size_t k,
                           std::span<const IdRange> visible = {}, std::span<const Predicate> where = {}) const;
  /// The same from double queries: minus StoreConfig::origin in double, then rounded once to
  /// float32 (without an origin, simply rounded).
  Neighbors search(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible = {},
                   std::span<const Predicate> where = {}) const;
  Ticket<Neighbors> submit(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible = {},
                           std::span<const Predicate> where = {}) const;
  /// The k nearest neighbours no farther than radius (streamknn/radius.hpp states "within"): a
  /// search() whose rows end with padding where fewer than k points lie within the radius.
  Neighbors search_within(std::span<const float> queries, std::size_t k, double radius,
                          std::span<const IdRange> visible = {}, std::span<const Predicate> where = {}) const;
  Neighbors search_within(std::span<const double> queries, std::size_t k, double radius,
                          std::span<const IdRange> visible = {}, std::span<const Predicate> where = {}) const;
  /// Every point within radius of each query (streamknn/radius.hpp), nearest first; with
  /// max_results (at least 1), each query's nearest max_results of them and a flag where more
  /// lay within. radius: >= 0, +infinity for every point (haversine: metres; inner product: any sign, a bound
  /// on -<q, p>).
  /// visible and where as for search().
  RadiusNeighbors radius_search(std::span<const float> queries, double radius, std::size_t max_results = kNoLimit,
                                std::span<const IdRange> visible = {}, std::span<const Predicate> where = {}) const;
  RadiusNeighbors radius_search(std::span<const double> queries, double radius, std::size_t max_results = kNoLimit,
                                std::span<const IdRange> visible = {}, std::span<const Predicate> where = {}) const;
  Ticket<RadiusNeighbors> submit_radius(std::span<const float> queries, double radius,
                                        std::size_t max_results = kNoLimit, std::span<const IdRange> visible = {},
                                        std::span<const Predicate> where = {}) const;

  // ---- KNN-Q -------------------------------------------------------------------------------
  /// KNN-Q lookup and write-back for a batch, in one call, on a store of outputs(n_actions).
  /// For query i (states row-major, n x dim) with neighbours N_i on the current snapshot:
  /// q_i = per-action mean of their target rows, delta_i = targets[i] - q_i[actions[i]], then
  /// Q[j, actions[i]] += alpha * delta_i for every j in N_i (increments of a batch add up, in
  /// query order). The write-back is published as a new epoch, serialised with publish(); updates
  /// still queued stay queued. Returns that epoch, the estimates before the update and the ids.
  /// Runs on the device for the CUDA backend. Throws InvalidArgument for bad input: alpha not
  /// finite or not positive, an action outside [0, n_actions), a target or state that push()
  /// would refuse, or a write-back that would make a target non-finite (alpha x delta beyond
  /// float32; checked before anything is written, so the store and its epoch stay as they were).
  QUpdate lookup_and_update(std::span<const float> states, std::size_t k, std::span<const std::int32_t> actions,
                            std::span<const float> targets, float alpha);

  // ---- durability (streamknn/checkpoint.hpp, docs/durability.md) ----------------------------
  /// Writes the published snapshot (one epoch: configuration, ids, vectors, targets) to path:
  /// a temporary file in the same folder, fsync, rename over path, fsync of the folder, so a
  /// crash leaves the previous file whole. Updates still queued are not saved. Publishes wait
  /// only while the snapshot is copied (not while it is written). With a journal open, the
  /// journal then restarts after this epoch, keeping the records published since the copy.
  /// Throws CheckpointError (I/O, naming the path) or OutOfMemory.
  void save(const std::string& path) const;
  /// The same checkpoint as bytes in memory (what the Python pickles hold).
  std::vector<std::byte> save_bytes() const;
  /// Rebuilds a saved store on the backend the options (else the checkpoint) name, at the saved
  /// epoch, with identical answers; replays options.journal past that epoch. Throws
  /// CheckpointError for a missing, truncated, corrupted, other-version or other-endian file.
  static ReferenceSet load(const std::string& path, const LoadOptions& options = {}, LoadReport* report = nullptr);
  static ReferenceSet load_bytes(std::span<const std::byte> bytes, const LoadOptions& options = {},
                                 LoadReport* report = nullptr);
  /// A store holding the given points at epoch 1 (epoch 0 when there are none), built in one step
  /// as load() builds one, without the update queue: the fast way to load a data set. ids (n),
  /// vectors (n x dim), labels (n; classification stores) or values (n x outputs; regression
  /// stores), each point checked as push() checks it, plus repeated ids. The store then answers,
  /// saves and takes updates exactly as one that pushed the points in this order and published
  /// once. attributes: empty (every word 0) or n x config.attribute_words words, as insert's.
  /// Throws InvalidArgument (naming the row or argument; no store is made) or OutOfMemory.
  static ReferenceSet from_points(const StoreConfig& config, std::span<const PointId> ids,
                                  std::span<const float> vectors, std::span<const std::int32_t> labels = {},
                                  std::span<const float> values = {}, std::span<const std::uint32_t> attributes = {});
  /// The same with the vectors handed over: an L2 or inner-product store without an origin makes
  /// no host copy of them beyond the backend's own buffer (the other metrics read and leave them).
  static ReferenceSet from_points(const StoreConfig& config, std::span<const PointId> ids,
                                  std::vector<float>&& vectors, std::span<const std::int32_t> labels = {},
                                  std::span<const float> values = {}, std::span<const std::uint32_t> attributes = {});
  /// The same from double vectors (numpy's default): each rounded once to float32 as it is copied
  /// into the backend's buffer (minus StoreConfig::origin in double first, where one is set, which
  /// keeps their precision), as pushing Update::insert(id, doubles) would store it.
  static ReferenceSet from_points(const StoreConfig& config, std::span<const PointId> ids,
                                  std::span<const double> vectors, std::span<const std::int32_t> labels = {},
                                  std::span<const float> values = {}, std::span<const std::uint32_t> attributes = {});
  /// From now on each publish (and lookup_and_update) that changes the store appends what it
  /// wrote to the journal at path before returning. An existing journal is continued when it
  /// ends at this store's epoch (else CheckpointError); a missing one starts at this epoch.
  void open_journal(const std::string& path, const JournalOptions& options = {});
  void close_journal() noexcept;

  // ---- state -----------------------------------------------------------------------------------
  std::size_t size() const noexcept;          ///< points in the published snapshot
  std::uint64_t epoch() const noexcept;       ///< epoch of the published snapshot (0 = empty)
  std::size_t pending() const noexcept;       ///< updates queued and not yet published
  const StoreConfig& config() const noexcept;
  BackendKind backend() const noexcept;       ///< Cpu or Cuda, never Auto
  std::string backend_name() const;           ///< e.g. "cpu (2 threads, x86-64-v3)" ("1 thread"),
                                              ///< "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"

 private:
  friend struct detail::EngineAccess;
  explicit ReferenceSet(std::unique_ptr<detail::Engine> engine);
  std::unique_ptr<detail::Engine> engine_;
};

/// True when this build has the CUDA backend and a CUDA device is usable.
bool cuda_available() noexcept;

}  // namespace streamknn
