// The interface both backends implement. Code above it (Engine, models, streams, CLI) never
// knows which one runs. Requests arrive validated and in stored form (see metric_space.hpp);
// implementations may assume valid input (validate once at the boundary, then trust).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/checkpoint_image.hpp"
#include "core/resolved_batch.hpp"
#include "streamknn/aggregation.hpp"
#include "streamknn/classifier.hpp"
#include "streamknn/config.hpp"
#include "streamknn/error.hpp"
#include "streamknn/predicate.hpp"
#include "streamknn/q_update.hpp"
#include "streamknn/radius.hpp"
#include "streamknn/regressor.hpp"
#include "streamknn/search.hpp"
#include "streamknn/ticket.hpp"

namespace streamknn::detail {

/// What a query batch should produce besides (or instead of) the raw neighbours.
struct AggregateSpec {
  enum class Output : unsigned char { Neighbors, Labels, Probabilities, Values };
  Output output = Output::Neighbors;
  Weights weights = Weights::Uniform;
  RegressionAggregate regression = RegressionAggregate::Mean;
};

/// A radius bound on a query batch (ReferenceSet::radius_search, search_within), converted by the
/// engine into a bound on the exact key the backends rank by (core/radius_rule.hpp): a point is
/// within when its exact key is at most limit_hi + limit_lo (two doubles on ExactSum's grid).
struct RadiusSpec {
  bool active = false;
  bool all = false;             ///< every point within (variable-length results); else the k nearest within
  double radius = 0;             ///< as given (metres for haversine), beside its bound on the key:
  double limit_hi = 0, limit_lo = 0;
  std::size_t cap = kNoLimit;   ///< all: the most points kept per query
};

struct QueryRequest {
  /// num_queries x stored_dim, stored form. Read only during Backend::submit (both backends
  /// consume the rows before it returns): a view of the caller's rows where those are the stored
  /// form already, else of `converted`.
  std::span<const float> queries;
  std::vector<float> converted;   ///< the stored form, where it differs from the caller's rows
  std::size_t num_queries = 0;
  std::size_t k = 0;
  std::vector<IdRange> visible;   ///< empty, or one per query
  std::vector<Predicate> where;   ///< empty, one for every query, or one per query
  RadiusSpec radius;
  AggregateSpec aggregate;
  /// A bound on the float32 screen rank of every pair the caller needs (squared L2 of the stored
  /// forms; exact::screen_rank_limit of a radius): a backend may leave out pairs ranked above it,
  /// and a row then holds fewer than k answers (padded). +inf: none. Set by the engine's radius
  /// rounds (filtered_by_search) for a backend that does not test radius bounds itself.
  float rank_limit = std::numeric_limits<float>::infinity();

  /// Query q's predicate, or nullptr.
  const Predicate* predicate_of(std::size_t q) const noexcept {
    return where.empty() ? nullptr : where.data() + (where.size() == 1 ? 0 : q);
  }
  /// Whether each query admits only some points: an id range or a predicate.
  bool filtered() const noexcept { return !visible.empty() || !where.empty(); }
  /// Whether one predicate filters every query and no id range does.
  bool shared_predicate() const noexcept { return where.size() == 1 && visible.empty(); }

  // Move-only: a copy's `queries` would still view the original's `converted`.
  QueryRequest() = default;
  QueryRequest(QueryRequest&&) = default;
  QueryRequest& operator=(QueryRequest&&) = default;
  QueryRequest(const QueryRequest&) = delete;
  QueryRequest& operator=(const QueryRequest&) = delete;
};

/// Exactly one member is filled, chosen by QueryRequest::aggregate.output (radius: by
/// QueryRequest::radius.all).
struct QueryResult {
  RadiusNeighbors radius;
  Neighbors neighbors;
  ClassPredictions classes;
  RegressionPredictions regression;

  /// Sized for the predictions of num_queries queries: labels (and, for Probabilities, each
  /// query's probabilities of `count` classes), or `count` values per query for Values.
  void size_predictions(AggregateSpec::Output output, std::size_t num_queries, std::size_t count) {
    if (output == AggregateSpec::Output::Values) {
      regression.num_queries = num_queries;
      regression.num_outputs = count;
      regression.values.resize(num_queries * count);
      return;
    }
    classes.num_queries = num_queries;
    classes.num_classes = count;
    classes.labels.resize(num_queries);
    if (output == AggregateSpec::Output::Probabilities) classes.probabilities.resize(num_queries * count);
  }
};

/// A search whose queries and results live in device memory (streamknn/device.hpp). The queries
/// arrive unvalidated and in the caller's form: the backend validates and converts them.
struct DeviceQueryRequest {
  const float* queries = nullptr;
  std::size_t num_queries = 0;
  std::size_t row_stride = 0;      ///< floats
  std::size_t k = 0;
  const IdRange* visible = nullptr;
  AggregateSpec aggregate;         ///< Neighbors: distances + ids; Labels: labels; Probabilities:
                                   ///< labels + probabilities; Values: values
  float* distances = nullptr;      ///< num_queries x k
  PointId* ids = nullptr;          ///< num_queries x k
  std::int32_t* labels = nullptr;  ///< num_queries
  float* probabilities = nullptr;  ///< num_queries x classes
  float* values = nullptr;         ///< num_queries x outputs
  std::uintptr_t stream = 0;
};

/// What a device search reports back to the host: its epoch and the first invalid input.
struct DeviceSearchStatus {
  static constexpr std::size_t kNone = ~std::size_t(0);
  std::uint64_t epoch = 0;
  std::size_t bad_query = kNone;   ///< first query row that failed validation
  std::vector<float> bad_row;      ///< that row, copied back for the error message
  std::size_t bad_range = kNone;   ///< first visible range with begin > end
  IdRange range{};
};

/// KNN-Q lookup and write-back (ReferenceSet::lookup_and_update), validated, states in stored form.
struct QUpdateRequest {
  std::vector<float> states;       ///< num_queries x stored_dim
  std::size_t num_queries = 0;
  std::size_t k = 0;
  std::span<const std::int32_t> actions;
  std::span<const float> targets;
  float alpha = 0;
};

/// A KNN-Q write-back that would store a non-finite target (alpha times the targets'
/// differences past float32's range): the backend then writes nothing and reports the first
/// such target, in the order the neighbour lists name the slots (query by query, nearest
/// first), then by action. Both backends compute the same floats, so they report the same one.
struct NonFiniteWrite {
  bool found = false;
  PointId id = kInvalidId;
  std::uint32_t action = 0;
  float value = 0;
};

/// Backend::device_rows: ids.size() rows of stored_dim floats in the store's device memory (kept
/// alive by `owner`), the id of each row.
struct DeviceRows {
  std::shared_ptr<void> owner;
  const float* rows = nullptr;
  std::vector<PointId> ids;
  std::uint64_t epoch = 0;  ///< the snapshot's (set by the engine)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const noexcept = 0;
  virtual std::string name() const = 0;
  /// Whether submit() tests radius bounds (QueryRequest::radius) itself. Where it does not, the
  /// engine answers them through the backend's k-nearest search (Engine::filtered_by_search), and
  /// refuses them on aggregated predictions. Every backend tests id ranges and predicates
  /// (QueryRequest::visible, where) in its search.
  virtual bool runs_radius() const noexcept { return false; }
  /// Ensures the next apply() can write a batch of up to `batch_ops` operations into a buffer
  /// of `slots` slots. May throw OutOfMemory, in which case nothing visible changed.
  virtual void reserve(std::size_t slots, std::size_t batch_ops) = 0;
  /// Applies a batch (after reserve() for its slot_count) and publishes it as `epoch`.
  /// Searches submitted after this returns see it; searches in flight keep their snapshot.
  virtual void apply(const ResolvedBatch& batch, std::uint64_t epoch) = 0;
  /// Runs a search on the current snapshot; the result carries that snapshot's epoch.
  virtual Ticket<QueryResult> submit(QueryRequest request) const = 0;
  /// Device-pointer search on the current snapshot (CUDA only).
  virtual Ticket<DeviceSearchStatus> submit_device(const DeviceQueryRequest&) const {
    throw BackendUnavailable(concat_backend_name(name(), ": search_device needs the CUDA backend (queries and results "
                                                         "in device memory); use search() on host arrays"));
  }
  /// Writes a checkpoint's whole store (every slot of batch, into a backend that holds nothing
  /// yet) and publishes it as `epoch`; may throw OutOfMemory. The backend may take the batch's
  /// arrays (the CPU backend keeps ResolvedBatch::rows as its buffer). By default
  /// rows_to_vectors(), reserve() and apply().
  virtual void restore(ResolvedBatch&& batch, std::uint64_t epoch) {
    batch.rows_to_vectors();
    reserve(batch.slot_count, batch.id_slots.size());
    apply(batch, epoch);
  }
  /// Copies the current snapshot, slot by slot, into image (its epoch, slot count, ids, vectors
  /// in stored form and targets; free slots' rows zero). The caller serialises it with apply().
  virtual void read_snapshot(StoreImage& image) const = 0;
  /// Sets batch.target_slots to `slots` (slots in use) and fills batch.labels / batch.values with
  /// their targets in the current snapshot (the journal's record of a lookup_and_update).
  virtual void read_targets(std::span<const std::uint32_t> slots, ResolvedBatch& batch) const = 0;
  /// The stored form of the slots' vectors in the current snapshot, slots.size() x stored_dim
  /// floats: the sharded store (lib/mpi) ships them with a shard's neighbours so that the merge
  /// ranks them exactly (lib/core/exact_rank.hpp). False where the backend does not offer it.
  virtual bool read_vectors(std::span<const std::uint32_t> /*slots*/, std::vector<float>& /*out*/) const {
    return false;
  }
  /// The current snapshot's live slots (in slot order) as plain rows of their stored vectors in
  /// device memory (KMeans::fit over a CUDA store clusters them there); the caller serialises it
  /// with apply(). False where the backend keeps no device copy.
  virtual bool device_rows(DeviceRows& /*out*/) const { return false; }
  /// Lookup on the current snapshot, then the write-back published as `epoch` (after reserve()
  /// for the current slot count and num_queries x k target writes). Fills out.q_before and out.ids.
  /// Where a new target would not be finite, publishes nothing (the snapshot and its epoch stay)
  /// and returns that target (NonFiniteWrite).
  virtual NonFiniteWrite lookup_and_update(const QUpdateRequest& request, std::uint64_t epoch, QUpdate& out) = 0;

 private:
  static std::string concat_backend_name(const std::string& name, const char* rest) { return "ReferenceSet: " + name + rest; }
};

std::unique_ptr<Backend> make_cpu_backend(const StoreConfig& config);
/// Throws BackendUnavailable when the library was built without CUDA or no device is usable.
std::unique_ptr<Backend> make_cuda_backend(const StoreConfig& config);
/// True when make_cuda_backend can succeed for this device ordinal.
bool cuda_device_usable(int device) noexcept;

}  // namespace streamknn::detail
