// The query paths of the Engine: the submission of a host query batch (query(), its float and double
// overloads and query_rows(), which check k, the shape, the visibility ranges and the filters,
// bring the rows to their stored form and hand the request to the backend, or to
// filtered_by_search() for radius bounds the backend does not test), device-resident queries
// (query_device()), KNN-Q's lookup and write-back (lookup_and_update()) and the refusal of result
// sets larger than memory they share. Construction, validation of updates, push and publish stay
// in engine.cpp; predicates and radii in engine_filters.cpp and engine_radius.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <new>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/memory.hpp"
#include "core/metric_space.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail {

namespace {

std::size_t value_floats(const StoreConfig& config) {
  return config.target.value_count();
}

}  // namespace

void Engine::refuse_oversized_results(std::size_t num_queries, std::size_t k, AggregateSpec aggregate,
                                      const char* caller) const {
  // Answer bytes the host must hold (and, on CUDA, stage in pinned memory as well).
  const double targets = config_.target.count;
  double bytes = 0;
  switch (aggregate.output) {
    case AggregateSpec::Output::Neighbors: bytes = double(num_queries) * double(k) * (sizeof(float) + sizeof(PointId)); break;
    case AggregateSpec::Output::Labels: bytes = double(num_queries) * 4; break;
    case AggregateSpec::Output::Probabilities: bytes = double(num_queries) * (4 + 4 * targets); break;
    case AggregateSpec::Output::Values: bytes = double(num_queries) * 4 * targets; break;
  }
  refuse_beyond_memory(bytes, caller, ": the results of ", num_queries, " queries, k=", k,
                       " (submit the batch in parts)");
}

Ticket<QueryResult> Engine::query(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible,
                                  AggregateSpec aggregate, const char* caller) const {
  return query(queries, k, QueryFilters{visible}, aggregate, caller);
}

Ticket<QueryResult> Engine::query(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible,
                                  AggregateSpec aggregate, const char* caller) const {
  return query(queries, k, QueryFilters{visible}, aggregate, caller);
}

Ticket<QueryResult> Engine::query(std::span<const float> queries, std::size_t k, const QueryFilters& filters,
                                  AggregateSpec aggregate, const char* caller) const {
  if (config_.origin.empty()) return query_rows(queries, k, filters, aggregate, caller);
  return query_rows(shifted_rows(queries, "query", caller), k, filters, aggregate, caller);
}

Ticket<QueryResult> Engine::query(std::span<const double> queries, std::size_t k, const QueryFilters& filters,
                                  AggregateSpec aggregate, const char* caller) const {
  return query_rows(shifted_rows(queries, "query", caller), k, filters, aggregate, caller);
}

Ticket<QueryResult> Engine::query_rows(std::span<const float> queries, std::size_t k, const QueryFilters& filters,
                                       AggregateSpec aggregate, const char* caller) const {
  const std::span<const IdRange> visible = filters.visible;
  if (!(filters.radius_on && filters.radius_all)) check_k(k, caller);
  if (queries.size() % config_.dim != 0) {
    fail_argument(caller, ": queries has ", queries.size(), " floats, not a multiple of dim=", config_.dim);
  }
  const std::size_t num_queries = queries.size() / config_.dim;
  if (!visible.empty() && visible.size() != num_queries) {
    fail_argument(caller, ": visible has ", visible.size(), " ranges for ", num_queries, " queries (give one per query or none)");
  }
  if (!(filters.radius_on && filters.radius_all)) refuse_oversized_results(num_queries, k, aggregate, caller);
  QueryRequest request;
  request.num_queries = num_queries;
  request.k = k;
  request.aggregate = aggregate;
  take_filters(filters, num_queries, request, caller);
  try {
    // The rows as given where they are the stored form: the backend reads them before submit()
    // returns, so they need no copy (50 KB for 16 MNIST-like queries, on the caller's thread
    // before the device starts).
    if (stored_as_given(config_.metric) && first_beyond(queries, coordinate_bound_) == queries.size()) {
      request.queries = queries;
    } else {
      request.converted = stored_rows(queries, "query", caller);
      request.queries = request.converted;
    }
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(concat(caller, ": out of memory for a batch of ", num_queries, " queries of dim ", config_.dim,
                             "; submit it in smaller batches"));
  }
  for (std::size_t q = 0; q < visible.size(); ++q) {
    if (visible[q].begin > visible[q].end) {
      fail_argument(caller, ": visible[", q, "] = [", visible[q].begin, ", ", visible[q].end, ") has begin > end");
    }
  }
  if (num_queries == 0) {  // nothing to search: an empty, already resolved answer
    QueryResult empty;
    empty.radius.offsets.assign(1, 0);
    empty.radius.epoch = epoch();
    empty.neighbors.k = k;
    empty.neighbors.epoch = empty.classes.epoch = empty.regression.epoch = epoch();
    empty.classes.num_classes = config_.target.kind == TargetSpec::Kind::Classes ? config_.target.count : 0;
    empty.regression.num_outputs = value_floats(config_);
    return Ticket<QueryResult>::ready_with(std::move(empty));
  }
  // A batch whose results cannot be allocated is refused with OutOfMemory naming its shape,
  // like every other failure (std::bad_alloc is not a streamknn::Error).
  try {
    request.visible.assign(visible.begin(), visible.end());
    if (request.radius.active && !backend_->runs_radius()) {
      return Ticket<QueryResult>::ready_with(filtered_by_search(request, caller));
    }
    return backend_->submit(std::move(request));
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(concat(caller, ": out of memory for a batch of ", num_queries, " queries with k=", k, " (",
                             num_queries * k, " neighbours); submit it in smaller batches"));
  }
}

Ticket<std::uint64_t> Engine::query_device(const DeviceQueryRequest& request, int device, const char* caller) const {
  check_k(request.k, caller);
  if (!config_.origin.empty()) {
    fail_argument(caller, ": device-resident queries are not shifted by StoreConfig::origin; subtract it on the device "
                          "and search a store without one, or call search()");
  }
  if (backend_->kind() != BackendKind::Cuda) {
    throw BackendUnavailable(concat(caller, ": the store runs on the ", backend_->name(),
                                    " backend; device-resident queries need the CUDA backend (copy them to the host "
                                    "and call search())"));
  }
  if (device != config_.cuda_device) {
    fail_argument(caller, ": the queries are on CUDA device ", device, " but the store is on device ",
                  config_.cuda_device);
  }
  if (request.row_stride < config_.dim) {
    fail_argument(caller, ": row_stride=", request.row_stride, " is smaller than the store's dim=", config_.dim);
  }
  if (request.num_queries > std::numeric_limits<std::uint32_t>::max()) {
    fail_argument(caller, ": ", request.num_queries, " queries exceed the limit of ",
                  std::numeric_limits<std::uint32_t>::max(), " per call");
  }
  if (request.num_queries == 0) return Ticket<std::uint64_t>::ready_with(epoch());
  if (request.queries == nullptr) fail_argument(caller, ": the query pointer is null");
  switch (request.aggregate.output) {
    case AggregateSpec::Output::Neighbors:
      if (request.distances == nullptr || request.ids == nullptr) fail_argument(caller, ": a result pointer is null");
      break;
    case AggregateSpec::Output::Labels:
      if (request.labels == nullptr) fail_argument(caller, ": the labels pointer is null");
      break;
    case AggregateSpec::Output::Probabilities:
      if (request.labels == nullptr || request.probabilities == nullptr) fail_argument(caller, ": a result pointer is null");
      break;
    case AggregateSpec::Output::Values:
      if (request.values == nullptr) fail_argument(caller, ": the values pointer is null");
      break;
  }
  auto ticket = std::make_shared<Ticket<DeviceSearchStatus>>(backend_->submit_device(request));
  const StoreConfig config = config_;  // the ticket may outlive the store
  const std::string where = caller;
  return Ticket<std::uint64_t>([ticket] { return ticket->ready(); },
                               [ticket, config, where] {
                                 DeviceSearchStatus status = ticket->get();
                                 if (status.bad_query != DeviceSearchStatus::kNone) {
                                   const std::string what = concat("query ", status.bad_query);
                                   validate_point(config, status.bad_row, what.c_str(), where.c_str());
                                   fail_argument(where, ": ", what, " is invalid");  // not reached
                                 }
                                 if (status.bad_range != DeviceSearchStatus::kNone) {
                                   fail_argument(where, ": visible[", status.bad_range, "] = [", status.range.begin,
                                                 ", ", status.range.end, ") has begin > end");
                                 }
                                 return status.epoch;
                               });
}

QUpdate Engine::lookup_and_update(std::span<const float> states, std::size_t k, std::span<const std::int32_t> actions,
                                  std::span<const float> targets, float alpha) {
  const char* caller = "ReferenceSet::lookup_and_update";
  if (config_.target.kind != TargetSpec::Kind::Outputs) {
    fail_argument(caller, ": the store must hold one target value per action (TargetSpec::outputs(n_actions))");
  }
  check_k(k, caller);
  if (states.size() % config_.dim != 0) {
    fail_argument(caller, ": states has ", states.size(), " floats, not a multiple of dim=", config_.dim);
  }
  const std::size_t n = states.size() / config_.dim, outputs = config_.target.count;
  if (actions.size() != n) fail_argument(caller, ": ", actions.size(), " actions for ", n, " states (give one per state)");
  if (targets.size() != n) fail_argument(caller, ": ", targets.size(), " targets for ", n, " states (give one per state)");
  if (!std::isfinite(alpha)) fail_argument(caller, ": alpha is ", describe_non_finite(alpha));
  if (!(alpha > 0.0f)) fail_argument(caller, ": alpha = ", alpha, " must be positive (a step size)");
  refuse_oversized_results(n, k, {}, caller);
  QUpdateRequest request;
  request.num_queries = n;
  request.k = k;
  request.actions = actions;
  request.targets = targets;
  request.alpha = alpha;
  request.states = config_.origin.empty() ? stored_rows(states, "state", caller)
                                           : stored_rows(shifted_rows(states, "state", caller), "state", caller);
  for (std::size_t q = 0; q < n; ++q) {
    if (actions[q] < 0 || std::uint32_t(actions[q]) >= outputs) {
      fail_argument(caller, ": actions[", q, "] = ", actions[q], " is outside [0, ", outputs, ")");
    }
    if (!std::isfinite(targets[q])) fail_argument(caller, ": targets[", q, "] is ", describe_non_finite(targets[q]));
  }

  std::lock_guard lock(publish_mutex_);
  QUpdate out;
  out.num_queries = n;
  out.k = k;
  out.num_actions = outputs;
  out.epoch = epoch();
  if (n == 0) return out;
  if (size() == 0) {  // nothing stored: no neighbour, nothing written, no new epoch
    out.q_before.assign(n * outputs, std::numeric_limits<float>::quiet_NaN());
    out.ids.assign(n * k, kInvalidId);
    return out;
  }
  try {
    out.q_before.resize(n * outputs);
    out.ids.resize(n * k);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(concat(caller, ": out of memory for the results of ", n, " states, k=", k));
  }
  // Room for the write-back first (the current slots, n x k target writes at most): an
  // OutOfMemory here changes nothing.
  backend_->reserve(catalog_.slot_count(), n * k);
  const std::uint64_t next = epoch() + 1;
  // The backends compute the new targets, check them and only then publish them (on CUDA the
  // device flags a non-finite row before the write-back is scattered): a bound on
  // alpha x targets taken on the host before the search would have to assume the worst
  // neighbours and refuse batches whose results are finite.
  if (const NonFiniteWrite bad = backend_->lookup_and_update(request, next, out); bad.found) {
    fail_argument(caller, ": the write-back would set action ", bad.action, " of id ", bad.id, " to ",
                  describe_non_finite(bad.value), " (alpha x (target - estimate) beyond float32); nothing was written, ",
                  "the epoch stays ", epoch());
  }
  out.epoch = next;
  epoch_.store(next, std::memory_order_release);
  if (journal_) {  // the rows the write-back changed, as they now stand
    std::vector<std::uint32_t> slots;
    for (const PointId id : out.ids) {
      if (const auto slot = id == kInvalidId ? std::nullopt : catalog_.slot_of(id)) slots.push_back(*slot);
    }
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
    ResolvedBatch written;
    written.slot_count = catalog_.slot_count();
    backend_->read_targets(slots, written);
    journal_batch(next, written);
  }
  return out;
}

}  // namespace streamknn::detail
