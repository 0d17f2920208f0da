// The collective publish: route every rank's queued updates to their owners, reserve on every
// shard, agree, apply, and unite the reports into one global epoch.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "core/engine_access.hpp"
#include "mpi/distributed_engine.hpp"

namespace streamknn::detail {

namespace {

constexpr const char* kCaller = "DistributedReferenceSet::publish";

/// The counts of a report, as one fixed-size record for the exchange.
struct ReportCounts {
  std::uint64_t drained = 0, applied = 0, inserted = 0, moved = 0, erased = 0, retargeted = 0, size = 0, rejected = 0;
  std::uint64_t attributed = 0;
};

struct WireRejection {
  PointId id = kInvalidId;
  std::uint8_t kind = 0, reason = 0;
  std::uint8_t reserved[6] = {};
};

void add(PublishReport& into, const PublishReport& part) {
  into.drained += part.drained;
  into.applied += part.applied;
  into.inserted += part.inserted;
  into.moved += part.moved;
  into.erased += part.erased;
  into.retargeted += part.retargeted;
  into.attributed += part.attributed;
  into.rejected.insert(into.rejected.end(), part.rejected.begin(), part.rejected.end());
}

/// After the shards agreed to apply, a failure would leave some shards changed and others not:
/// MPI's contract for a rank that fails mid-operation is to abort the job (restart from the
/// last checkpoint, docs/distributed.md).
[[noreturn]] void abort_job(MPI_Comm comm, int rank, const std::string& why) {
  std::fprintf(stderr, "%s: rank %d failed after every shard agreed to apply (%s); aborting the communicator\n", kCaller,
               rank, why.c_str());
  std::fflush(stderr);
  MPI_Abort(comm, 3);
  std::abort();
}

}  // namespace

PublishReport DistributedEngine::run_publish() {
  CallHeader mine;
  mine.kind = CallHeader::Publish;
  exchange_headers(mine, kCaller);

  // 1. Route: what this rank queued goes to the owners; each rank receives its own ids' updates,
  //    source rank by source rank, each source's in its push order.
  std::vector<std::size_t> offsets;
  std::vector<std::byte> received = mpi::alltoallv(comm_->get(), outbox_->take(), offsets, "publish");

  // 2. Reserve on every shard, then agree: a failure anywhere (OutOfMemory) changes no shard. Every
  //    local step up to the agreement is inside it, so a rank that fails there still agrees.
  std::vector<std::vector<std::byte>> owned = std::move(carried_);  // a failed publish's updates go first
  carried_.clear();
  std::vector<Update> updates;
  mpi::Failure reserved;
  try {
    owned.push_back(std::move(received));
    for (const auto& block : owned) {
      const std::vector<Update> part = mpi::decode(block, config_);
      updates.insert(updates.end(), part.begin(), part.end());
    }
    std::size_t inserts = 0;
    for (const Update& u : updates) inserts += u.kind == UpdateKind::Insert;
    EngineAccess::of(*shard_).reserve(inserts, updates.size());
  } catch (...) {
    reserved = mpi::failure_of(std::current_exception());
  }
  try {
    mpi::agree(comm_->get(), reserved,
               concat(kCaller, ": nothing was applied on any shard and the updates stay pending; the reserve failed on"));
  } catch (...) {
    if (!received.empty()) owned.push_back(std::move(received));  // where the push_back above failed
    carried_ = std::move(owned);
    carried_count_.store(updates.size(), std::memory_order_relaxed);
    throw;
  }
  carried_count_.store(0, std::memory_order_relaxed);

  // 3. Apply.
  PublishReport local;
  try {
    local = apply_owned(updates);
  } catch (const std::exception& e) {
    abort_job(comm_->get(), comm_->rank(), e.what());
  }
  return unite(local);
}

/// Feeds the owned updates to the shard in order, in parts of at most its queue's capacity (each
/// part a local publish: no query runs in between, so only the last one's state is ever seen).
PublishReport DistributedEngine::apply_owned(std::span<const Update> updates) {
  PublishReport local;
  std::size_t at = 0;
  while (at < updates.size()) {
    const std::size_t part = std::min(updates.size() - at, config_.queue_capacity);
    const std::size_t queued = shard_->try_push(updates.subspan(at, part));
    if (queued == 0) throw Error("the shard's update queue refused a part of the batch");
    at += queued;
    add(local, shard_->publish());
  }
  local.epoch = shard_->epoch();
  local.size = shard_->size();
  return local;
}

PublishReport DistributedEngine::unite(const PublishReport& local) {
  MPI_Comm comm = comm_->get();
  const ReportCounts mine{local.drained, local.applied, local.inserted, local.moved, local.erased, local.retargeted,
                          local.size,    local.rejected.size(), local.attributed};
  const std::vector<ReportCounts> counts = mpi::allgather(comm, mine);
  std::vector<WireRejection> wire(local.rejected.size());
  for (std::size_t i = 0; i < wire.size(); ++i) {
    wire[i].id = local.rejected[i].id;
    wire[i].kind = static_cast<std::uint8_t>(local.rejected[i].kind);
    wire[i].reason = static_cast<std::uint8_t>(local.rejected[i].reason);
  }
  std::vector<std::size_t> offsets;
  const std::vector<std::byte> all =
      mpi::allgatherv(comm, std::as_bytes(std::span<const WireRejection>(wire)), offsets, "publish report");

  PublishReport report;
  for (const ReportCounts& c : counts) {
    report.drained += c.drained;
    report.applied += c.applied;
    report.inserted += c.inserted;
    report.moved += c.moved;
    report.erased += c.erased;
    report.retargeted += c.retargeted;
    report.attributed += c.attributed;
    report.size += c.size;
  }
  const std::size_t n = all.size() / sizeof(WireRejection);
  report.rejected.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    WireRejection w;
    std::memcpy(&w, all.data() + i * sizeof w, sizeof w);
    report.rejected[i] = {w.id, static_cast<UpdateKind>(w.kind), static_cast<RejectReason>(w.reason)};
  }
  const std::uint64_t next = epoch() + (report.applied > 0 ? 1 : 0);
  epoch_.store(next, std::memory_order_release);
  size_.store(report.size, std::memory_order_release);
  report.epoch = next;
  return report;
}

}  // namespace streamknn::detail
