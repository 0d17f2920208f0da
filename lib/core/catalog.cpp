#include "core/catalog.hpp"

#include <algorithm>
#include <limits>

#include "core/check.hpp"
#include "core/metric_space.hpp"

namespace streamknn::detail {

namespace {

/// Index of slot's entry in a channel for this batch, appending a new entry if needed.
template <class Mark>
std::size_t channel_entry(std::uint32_t slot, std::uint64_t stamp, std::vector<Mark>& marks,
                          std::vector<std::uint32_t>& slots) {
  Mark& mark = marks[slot];
  if (mark.stamp == stamp) return mark.pos;
  mark.stamp = stamp;
  mark.pos = static_cast<std::uint32_t>(slots.size());
  slots.push_back(slot);
  return mark.pos;
}

// A publish of random moves misses the cache twice per operation: on the id's bucket, then on
// the slot's batch mark. It prefetches the bucket kPrefetchAhead operations ahead and, half
// way, peeks at the (by then cached) bucket to prefetch the slot's mark. A peek may be stale
// (an operation in between may erase or insert that id): it is only a hint, never used.
constexpr std::size_t kPrefetchAhead = 16;

}  // namespace

Catalog::Catalog(const StoreConfig& config)
    : config_(config),
      stored_dim_(stored_dim(config.metric, config.dim)),
      value_count_(config.target.kind == TargetSpec::Kind::Outputs ? config.target.count : 0) {}

std::size_t Catalog::slots_needed(std::span<const QueuedOp> ops) const noexcept {
  std::size_t inserts = 0;
  for (const QueuedOp& op : ops) inserts += op.kind == UpdateKind::Insert;
  return std::size_t(high_water_) + inserts;
}

void Catalog::reserve_for(std::size_t slots) {
  if (slots > std::numeric_limits<std::uint32_t>::max()) {
    throw OutOfMemory(concat("ReferenceSet::publish: ", slots, " slots exceed the limit of 2^32 - 1 points"));
  }
  ids_.reserve(ids_.size() + (slots - high_water_));
  free_.reserve(slots);
  for (auto* v : {&vector_marks_, &target_marks_, &id_marks_}) {
    if (v->size() < slots) v->resize(std::max(slots, v->size() * 2));
  }
}

void Catalog::resolve(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch,
                      PublishReport& report) {
  batch.clear();
  ++batch_stamp_;
  const bool classes = config_.target.kind == TargetSpec::Kind::Classes;

  auto write_vector = [&](std::uint32_t slot, const QueuedOp& op) {
    const std::size_t e = channel_entry(slot, batch_stamp_, vector_marks_, batch.vector_slots);
    if (e * stored_dim_ == batch.vectors.size()) batch.vectors.resize(batch.vectors.size() + stored_dim_);
    const auto stored = queue.vector_of(op);  // already in stored form (UpdateQueue::try_push)
    std::copy(stored.begin(), stored.end(), batch.vectors.data() + e * stored_dim_);
  };
  auto write_target = [&](std::uint32_t slot, const QueuedOp& op) {
    if (config_.target.kind == TargetSpec::Kind::None) return;
    const std::size_t e = channel_entry(slot, batch_stamp_, target_marks_, batch.target_slots);
    if (classes) {
      if (e == batch.labels.size()) batch.labels.push_back(0);
      batch.labels[e] = op.label;
    } else {
      if (e * value_count_ == batch.values.size()) batch.values.resize(batch.values.size() + value_count_);
      const auto v = queue.values_of(op);
      std::copy(v.begin(), v.end(), batch.values.begin() + static_cast<std::ptrdiff_t>(e * value_count_));
    }
  };
  auto write_id = [&](std::uint32_t slot, PointId id) {
    const std::size_t e = channel_entry(slot, batch_stamp_, id_marks_, batch.id_slots);
    if (e == batch.ids.size()) batch.ids.push_back(kInvalidId);
    batch.ids[e] = id;
  };
  auto reject = [&](const QueuedOp& op, RejectReason reason) {
    report.rejected.push_back({op.id, op.kind, reason});
  };

  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i + kPrefetchAhead < ops.size()) ids_.prefetch(ops[i + kPrefetchAhead].id);
    if (i + kPrefetchAhead / 2 < ops.size()) {
      const QueuedOp& later = ops[i + kPrefetchAhead / 2];
      if (later.kind != UpdateKind::Insert) {
        if (const auto slot = ids_.find(later.id)) {
          const auto& marks = later.kind == UpdateKind::Move ? vector_marks_
                              : later.kind == UpdateKind::SetTarget ? target_marks_ : id_marks_;
          __builtin_prefetch(&marks[*slot]);
        }
      }
    }
    const QueuedOp& op = ops[i];
    switch (op.kind) {
      case UpdateKind::Insert: {
        if (ids_.find(op.id)) {
          reject(op, RejectReason::DuplicateId);
          continue;
        }
        const std::uint32_t slot = free_.allocate(high_water_);
        ids_.insert(op.id, slot);
        write_vector(slot, op);
        write_target(slot, op);
        write_id(slot, op.id);
        ++report.inserted;
        break;
      }
      case UpdateKind::Move: {
        const auto slot = ids_.find(op.id);
        if (!slot) {
          reject(op, RejectReason::UnknownId);
          continue;
        }
        write_vector(*slot, op);
        ++report.moved;
        break;
      }
      case UpdateKind::Erase: {
        const auto slot = ids_.erase(op.id);
        if (!slot) {
          reject(op, RejectReason::UnknownId);
          continue;
        }
        write_id(*slot, kInvalidId);
        free_.release(*slot, high_water_);
        ++report.erased;
        break;
      }
      case UpdateKind::SetTarget: {
        const auto slot = ids_.find(op.id);
        if (!slot) {
          reject(op, RejectReason::UnknownId);
          continue;
        }
        write_target(*slot, op);
        ++report.retargeted;
        break;
      }
    }
  }
  batch.slot_count = high_water_;
  report.drained += ops.size();
  report.applied = report.inserted + report.moved + report.erased + report.retargeted;
  report.size = ids_.size();
}

}  // namespace streamknn::detail
