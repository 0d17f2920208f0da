#include "mpi/distributed_engine.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"

namespace streamknn::detail {

namespace {

/// The StoreConfig fields every rank must agree on (the rest are per-host resources).
constexpr std::array<const char*, 11> kAgreedFields = {"dim",           "metric",         "target.kind", "target.count",
                                                       "capacity_hint", "queue_capacity", "backend",     "spatial_index",
                                                       "debug",         "origin (a hash of its values)",
                                                       "attribute_words"};

/// FNV-1a of the origin's bytes (0 for none): equal origins give equal hashes.
std::uint64_t origin_hash(const std::vector<double>& origin) noexcept {
  if (origin.empty()) return 0;
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(origin.data());
  for (std::size_t i = 0; i < origin.size() * sizeof(double); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h;
}

std::array<std::uint64_t, kAgreedFields.size() + 1> fingerprint(const StoreConfig& c) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return {c.dim, std::uint64_t(c.metric), std::uint64_t(c.target.kind), c.target.count, c.capacity_hint,
          c.queue_capacity, std::uint64_t(c.backend), std::uint64_t(c.spatial_index), std::uint64_t(c.debug),
          origin_hash(c.origin), c.attribute_words, std::uint64_t(provided == MPI_THREAD_MULTIPLE)};
}

/// "8 on ranks 0, 2; 16 on rank 1".
std::string values_by_rank(const std::vector<std::uint64_t>& values) {
  std::vector<std::pair<std::uint64_t, std::vector<std::size_t>>> groups;
  for (std::size_t r = 0; r < values.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == groups.end()) {
      groups.push_back({values[r], {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string out;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out += concat(g ? "; " : "", groups[g].first, " on ", mpi::rank_list(groups[g].second));
  }
  return out;
}

const char* call_name(std::uint32_t kind) {
  switch (kind) {
    case CallHeader::Publish: return "publish";
    case CallHeader::Query: return "a query (search, classify or regress)";
    case CallHeader::Save: return "save";
  }
  return "an unknown call";
}

void fail_mpi_setup(const char* what) {
  throw InvalidArgument(concat("DistributedReferenceSet: ", what));
}

}  // namespace

int visible_gpus() noexcept {
  int count = 0;
  while (count < 1024 && cuda_device_usable(count)) ++count;
  return count;
}

void check_mpi_initialised() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    fail_mpi_setup("MPI is not initialised (call MPI_Init_thread with MPI_THREAD_MULTIPLE first; in Python, import "
                   "mpi4py.MPI)");
  }
}

DistributedEngine::DistributedEngine(MPI_Comm comm, const StoreConfig& config) {
  check_mpi_initialised();
  comm_ = std::make_unique<mpi::Comm>(comm);
  local_rank_ = mpi::local_rank(comm_->get());
  check_configs(config);
  mpi::Failure built;
  try {
    shard_.emplace(local_config(config));
  } catch (...) {
    built = mpi::failure_of(std::current_exception());
  }
  check_shards(built);
  start();
}

DistributedEngine::~DistributedEngine() {
  {
    std::lock_guard lock(calls_mutex_);
    stopping_ = true;
  }
  calls_ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StoreConfig DistributedEngine::local_config(const StoreConfig& config) const {
  StoreConfig local = config;
  if (config.backend != BackendKind::Cpu) {
    if (const int gpus = visible_gpus(); gpus > 0) local.cuda_device = local_rank_ % gpus;
  }
  return local;
}

void DistributedEngine::check_configs(const StoreConfig& config) const {
  const auto all = mpi::allgather(comm_->get(), fingerprint(config));
  std::string problems;
  for (std::size_t f = 0; f <= kAgreedFields.size(); ++f) {
    std::vector<std::uint64_t> values(all.size());
    for (std::size_t r = 0; r < all.size(); ++r) values[r] = all[r][f];
    if (std::all_of(values.begin(), values.end(), [&](std::uint64_t v) { return v == values[0]; })) continue;
    if (!problems.empty()) problems += "; and ";
    if (f == kAgreedFields.size()) {
      problems += concat("MPI gives MPI_THREAD_MULTIPLE (1) or not (0): ", values_by_rank(values),
                         " (initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...))");
    } else {
      problems += concat("StoreConfig::", kAgreedFields[f], " differs across ranks: ", values_by_rank(values));
    }
  }
  if (all[std::size_t(comm_->rank())][kAgreedFields.size()] == 0 && problems.empty()) {
    problems = "MPI was initialised without MPI_THREAD_MULTIPLE on every rank (initialise it with "
               "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...); mpi4py does by default)";
  }
  if (!problems.empty()) fail_mpi_setup(concat(problems, " (every rank must pass the same configuration)").c_str());
}

void DistributedEngine::check_shards(const mpi::Failure& built) {
  mpi::agree(comm_->get(), built, concat("DistributedReferenceSet: the shard could not be built on"));
  config_ = shard_->config();
  const auto kinds = mpi::allgather<std::uint64_t>(comm_->get(), std::uint64_t(shard_->backend()));
  if (!std::all_of(kinds.begin(), kinds.end(), [&](std::uint64_t k) { return k == kinds[0]; })) {
    fail_mpi_setup(concat("the shards run on different backends (1 = Cpu, 2 = Cuda): ", values_by_rank(kinds),
                          " (set StoreConfig::backend to Cpu or Cuda)")
                       .c_str());
  }
  // Where the backend can read vectors back, the shards send their neighbours' stored vectors and
  // the merge follows the single store's exact (distance, id) order, also where two distances
  // round to one float32 value. The backends agree (checked above), so every rank sees the same.
  std::vector<std::int32_t> labels;
  std::vector<float> values, vectors;
  exact_merge_ = EngineAccess::of(*shard_).points_of({}, labels, values, &vectors);
  outbox_ = std::make_unique<mpi::Outbox>(config_, comm_->size());
}

void DistributedEngine::start() {
  thread_ = std::thread([this] { run(); });
}

void DistributedEngine::run() {
  for (;;) {
    std::function<void()> call;
    {
      std::unique_lock lock(calls_mutex_);
      calls_ready_.wait(lock, [&] { return stopping_ || !calls_.empty(); });
      if (calls_.empty()) return;  // stopping, and every queued call has run
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    call();
  }
}

template <class R>
Ticket<R> DistributedEngine::enqueue(std::function<R()> fn) {
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::optional<R> value;
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  {
    std::lock_guard lock(calls_mutex_);
    calls_.push_back([state, fn = std::move(fn)] {
      std::optional<R> value;
      std::exception_ptr error;
      try {
        value.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(state->mutex);
        state->value = std::move(value);
        state->error = error;
        state->done = true;
      }
      state->done_cv.notify_all();
    });
  }
  calls_ready_.notify_one();
  return Ticket<R>(
      [state] {
        std::lock_guard lock(state->mutex);
        return state->done;
      },
      [state]() -> R {
        std::unique_lock lock(state->mutex);
        state->done_cv.wait(lock, [&] { return state->done; });
        if (state->error) std::rethrow_exception(state->error);
        return std::move(*state->value);
      });
}

std::vector<CallHeader> DistributedEngine::exchange_headers(const CallHeader& mine, const char* caller) const {
  std::vector<CallHeader> all = mpi::allgather(comm_->get(), mine);
  std::vector<std::uint64_t> kinds(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) kinds[r] = all[r].kind;
  if (std::all_of(kinds.begin(), kinds.end(), [&](std::uint64_t k) { return k == kinds[0]; })) return all;
  std::string which;
  for (std::size_t r = 0; r < kinds.size(); ++r) which += concat(r ? ", " : "", call_name(std::uint32_t(kinds[r])), " on rank ", r);
  throw Error(concat(caller, ": the ranks made different collective calls (", which,
                     "): make publish, queries and save in the same order on every rank"));
}

std::size_t DistributedEngine::push(std::span<const Update> updates, bool wait, const char* caller) {
  Engine& engine = EngineAccess::of(*shard_);
  if (updates.size() == 1) {
    engine.check(updates[0], caller);
  } else {
    for (std::size_t i = 0; i < updates.size(); ++i) {
      engine.check(updates[i], concat(caller, ": updates[", i, "]").c_str());
    }
  }
  return outbox_->put(updates, wait);
}

PublishReport DistributedEngine::publish() {
  return enqueue<PublishReport>([this] { return run_publish(); }).get();
}

void DistributedEngine::save(const std::string& path) {
  enqueue<int>([this, path] {
    run_save(path);
    return 0;
  }).get();
}

Ticket<QueryResult> DistributedEngine::query(std::span<const float> queries, std::size_t k, const QueryFilters& filters,
                                             AggregateSpec aggregate, const char* caller,
                                             const std::function<void()>& check) {
  auto call = std::make_shared<QueryCall>();
  call->header.kind = CallHeader::Query;
  call->header.output = static_cast<std::uint32_t>(aggregate.output);
  call->header.weights = static_cast<std::uint32_t>(aggregate.weights);
  call->header.regression = static_cast<std::uint32_t>(aggregate.regression);
  call->aggregate = aggregate;
  const bool all_within = filters.radius_on && filters.radius_all;
  std::exception_ptr refused;
  try {
    if (check) check();
    if (!all_within) Engine::check_k(k, caller);
    if (queries.size() % config_.dim != 0) {
      fail_argument(caller, ": queries has ", queries.size(), " floats, not a multiple of dim=", config_.dim);
    }
    const std::size_t n = queries.size() / config_.dim;
    const std::span<const IdRange> visible = filters.visible;
    if (!visible.empty() && visible.size() != n) {
      fail_argument(caller, ": visible has ", visible.size(), " ranges for ", n, " queries (give one per query or none)");
    }
    for (std::size_t q = 0; q < visible.size(); ++q) {
      if (visible[q].begin > visible[q].end) {
        fail_argument(caller, ": visible[", q, "] = [", visible[q].begin, ", ", visible[q].end, ") has begin > end");
      }
    }
    EngineAccess::of(*shard_).check_filters(filters, n, aggregate, caller);
    call->header.num_queries = n;
    call->header.k = all_within ? 1 : k;
    call->header.visible = visible.empty() ? 0 : 1;
    call->header.where = filters.where.size();
    call->header.radius_mode = !filters.radius_on ? RadiusNone : all_within ? RadiusAll : RadiusWithin;
    call->header.radius = filters.radius;
    call->header.cap = filters.cap;
    call->queries.assign(queries.begin(), queries.end());
    call->visible.assign(visible.begin(), visible.end());
    call->where.assign(filters.where.begin(), filters.where.end());
  } catch (...) {
    // This rank still takes part (with no queries), so the other ranks' call goes on.
    refused = std::current_exception();
    call->header = CallHeader{};
    call->header.kind = CallHeader::Query;
    call->header.output = static_cast<std::uint32_t>(aggregate.output);
    call->queries.clear();
    call->visible.clear();
    call->where.clear();
  }
  Ticket<QueryResult> ticket = enqueue<QueryResult>([this, call] { return run_query(*call); });
  if (refused) {
    std::lock_guard lock(calls_mutex_);
    // Keep the empty part's ticket alive on the queue, not on this thread: dropping it here would
    // wait for the other ranks.
    calls_.push_back([held = std::make_shared<Ticket<QueryResult>>(std::move(ticket))]() mutable { held.reset(); });
    calls_ready_.notify_one();
    std::rethrow_exception(refused);
  }
  return ticket;
}

}  // namespace streamknn::detail
