// The engine behind ReferenceSet: validation at the boundary, the update queue, the catalogue
// (id -> slot) and the backend. One object per reference set; no global state.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/catalog.hpp"
#include "core/checkpoint_image.hpp"
#include "core/id_index.hpp"
#include "core/update_queue.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/config.hpp"
#include "streamknn/publish_report.hpp"
#include "streamknn/update.hpp"

namespace streamknn::detail {

class Journal;

/// The bound hi + lo on the exact key that "within radius" means for the metric
/// (streamknn/radius.hpp); hi and lo lie on ExactSum's grid (engine_filters.cpp).
void radius_limit(Metric metric, double radius, double& hi, double& lo);

/// What restricts a query batch besides k: visibility ranges, predicates and a radius
/// (ReferenceSet::search, search_within, radius_search). Checked by Engine::query.
struct QueryFilters {
  QueryFilters() = default;
  explicit QueryFilters(std::span<const IdRange> v, std::span<const Predicate> w = {}) : visible(v), where(w) {}

  std::span<const IdRange> visible;
  std::span<const Predicate> where;   ///< empty, one for every query, or one per query
  bool radius_on = false;
  bool radius_all = false;             ///< every point within (radius_search); else the k nearest within
  double radius = 0;                   ///< as given (metres for haversine)
  std::size_t cap = kNoLimit;          ///< radius_all: the most points per query (at least 1)
};

class Engine {
 public:
  explicit Engine(const StoreConfig& config);
  /// The store of a checkpoint (lib/core/checkpoint_store.cpp): the image's points in their
  /// slots, its free slots free, its epoch; index maps the image's ids to their slots.
  Engine(const StoreConfig& config, StoreImage&& image, IdIndex&& index);
  ~Engine();

  bool try_push(const Update& update);
  void push(const Update& update);
  std::size_t try_push(std::span<const Update> updates);
  void push(std::span<const Update> updates);
  PublishReport publish();

  /// Validates an update as push() does (InvalidArgument naming caller), queuing nothing: the
  /// sharded store (lib/mpi) checks updates on the rank that pushes them, before routing them.
  void check(const Update& update, const char* caller) const { validate(update, caller); }
  /// Makes room, ahead of publish(), for `inserts` more points and a batch of `ops` updates in
  /// the catalogue and the backend (the first phase of the sharded store's two-phase publish).
  /// Throws OutOfMemory, in which case nothing visible changed.
  void reserve(std::size_t inserts, std::size_t ops);
  /// What the published snapshot holds for ids, in order: labels (Classes) or rows of values
  /// (Outputs), and with `vectors` the stored form of each vector (ids.size() x stored dim; false
  /// where the backend does not offer it). An id not in it (kInvalidId: padding) gets kNoLabel /
  /// NaNs / zeros. Serialised with publish(). The sharded store (lib/mpi) ships them with a
  /// shard's neighbours to the rank that merges and aggregates them.
  bool points_of(std::span<const PointId> ids, std::vector<std::int32_t>& labels, std::vector<float>& values,
                 std::vector<float>* vectors);

  /// Validates and runs a query batch (engine_query.cpp, with query_device and lookup_and_update).
  /// caller names the public entry point in error messages.
  /// The store's origin (StoreConfig::origin) is subtracted from each row first, in double.
  Ticket<QueryResult> query(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible,
                            AggregateSpec aggregate, const char* caller) const;
  Ticket<QueryResult> query(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible,
                            AggregateSpec aggregate, const char* caller) const;
  /// The same with predicates and a radius (QueryFilters).
  Ticket<QueryResult> query(std::span<const float> queries, std::size_t k, const QueryFilters& filters,
                            AggregateSpec aggregate, const char* caller) const;
  Ticket<QueryResult> query(std::span<const double> queries, std::size_t k, const QueryFilters& filters,
                            AggregateSpec aggregate, const char* caller) const;

  /// A search with a radius bound on a backend that does not test it: its k-nearest search, k grown
  /// until each row holds what it needs, "within" decided exactly on the host, and a prediction's
  /// votes or averages taken there over the rows (engine_radius.cpp). Same answers as the CPU
  /// backend's; public for the tests that hold the two to it.
  QueryResult filtered_by_search(const QueryRequest& request, const char* caller) const;

  /// Device-pointer search or prediction (streamknn/device.hpp): checks the arguments the host
  /// can see, then the backend validates the rows on the device; get() throws for a bad row.
  Ticket<std::uint64_t> query_device(const DeviceQueryRequest& request, int device, const char* caller) const;

  /// KNN-Q lookup and write-back (ReferenceSet::lookup_and_update), serialised with publish().
  QUpdate lookup_and_update(std::span<const float> states, std::size_t k, std::span<const std::int32_t> actions,
                            std::span<const float> targets, float alpha);

  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }
  std::size_t pending() const noexcept;
  const StoreConfig& config() const noexcept { return config_; }
  const Backend& backend() const noexcept { return *backend_; }

  // ---- durability (checkpoint_store.cpp) ----
  /// Writes the published snapshot to path (atomically); then restarts an open journal after it.
  void save(const std::string& path);
  /// A copy of the published snapshot, serialised with publish() (KMeans::fit over a set).
  StoreImage published_image() { return snapshot(nullptr, nullptr); }
  /// The published snapshot's live points as rows on the device (Backend::device_rows),
  /// serialised with publish(); false where the backend keeps no device copy.
  bool published_device_rows(DeviceRows& out) {
    std::lock_guard lock(publish_mutex_);
    if (!backend_->device_rows(out)) return false;
    out.epoch = epoch();
    return true;
  }
  /// The checkpoint's bytes, in memory.
  std::vector<std::byte> save_bytes();
  void open_journal(const std::string& path, const JournalOptions& options);
  void close_journal() noexcept;

  /// Checks k against [1, kMaxK], naming the caller.
  static void check_k(std::size_t k, const char* caller);
  /// Checks the predicates and radius of a batch of num_queries as query() does (InvalidArgument
  /// naming caller), searching nothing: the sharded store (lib/mpi) checks them at the call.
  void check_filters(const QueryFilters& filters, std::size_t num_queries, AggregateSpec aggregate,
                     const char* caller) const {
    QueryRequest request;
    request.aggregate = aggregate;
    take_filters(filters, num_queries, request, caller);
  }

 private:
  void validate(const Update& update, const char* caller) const;
  void refuse_oversized_results(std::size_t num_queries, std::size_t k, AggregateSpec aggregate, const char* caller) const;
  void validate_point(std::span<const float> vector, const char* what, const char* caller) const {
    validate_point(config_, vector, what, caller);
  }
  static void validate_point(const StoreConfig& config, std::span<const float> vector, const char* what,
                             const char* caller);
  bool point_is_valid(std::span<const float> vector) const noexcept;
  bool update_is_valid(const Update& update) const noexcept;
  /// Validates every update of a batch before any is queued; names the first invalid one's index.
  void validate_batch(std::span<const Update> updates, const char* caller) const;
  /// Row q of rows (dim floats each), validated (named "<label> q" in errors), in stored form.
  void stored_row(std::span<const float> rows, std::size_t q, const char* label, const char* caller,
                  float* out) const;
  /// Every row of rows, validated and in stored form (one copy where the stored form is the
  /// input and every value is finite, else row by row, which names the first bad row).
  std::vector<float> stored_rows(std::span<const float> rows, const char* label, const char* caller) const;
  /// Rows (a multiple of dim values) minus the origin, in double, rounded once to float32 (the
  /// values as given, rounded, where there is no origin).
  template <class T>
  std::vector<float> shifted_rows(std::span<const T> rows, const char* label, const char* caller) const;
  /// The query batch once shifted (the body of query()).
  Ticket<QueryResult> query_rows(std::span<const float> queries, std::size_t k, const QueryFilters& filters,
                                 AggregateSpec aggregate, const char* caller) const;
  /// Checks the predicates and the radius of a batch of num_queries (engine_filters.cpp) and
  /// puts them into request; InvalidArgument names the argument, BackendUnavailable the feature.
  void take_filters(const QueryFilters& filters, std::size_t num_queries, QueryRequest& request,
                    const char* caller) const;
  /// An update's attribute words are as the store expects (engine_filters.cpp).
  bool attributes_valid(const Update& update) const noexcept;
  void validate_attributes(const Update& update, const std::string& where) const;
  /// Writes a published batch's attribute channel into attributes_ (publish lock held).
  void note_attributes(const ResolvedBatch& batch);
  /// An Insert / Move vector given as doubles or against an origin: valid once shifted.
  bool shifted_is_valid(const Update& update) const noexcept;

  /// The published snapshot, serialised with publish(); journal_mark gets the open journal's
  /// end, journal_opened which journal that is (journal_opened_).
  StoreImage snapshot(std::uint64_t* journal_mark, std::uint64_t* journal_opened);
  /// Appends a published batch to the open journal (publish lock held); a failure closes the
  /// journal and throws CheckpointError (the publish itself stands).
  void journal_batch(std::uint64_t epoch, const ResolvedBatch& batch);

  StoreConfig config_;
  std::size_t stored_dim_;
  float coordinate_bound_;          // largest |coordinate| a vector or query may have (metric_space.hpp)
  std::unique_ptr<Backend> backend_;
  UpdateQueue queue_;

  mutable std::mutex publish_mutex_;  // one publisher at a time; guards the members below
  Catalog catalog_;
  std::vector<QueuedOp> drained_;   // drained and not yet applied (kept across an OutOfMemory)
  ResolvedBatch batch_;
  std::unique_ptr<Journal> journal_;  // null unless open_journal(); guarded by publish_mutex_
  std::uint64_t journal_opened_ = 0;  // open_journal() calls so far (save() restarts the one it copied for)

  // Each slot's attribute words as last published (slot_count x attribute_words): the copy a
  // checkpoint saves, whichever backend searches them. Guarded by publish_mutex_.
  std::vector<std::uint32_t> attributes_;

  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::size_t> size_{0};
  std::atomic<std::size_t> carried_{0};
};

}  // namespace streamknn::detail
