#include "core/catalog.hpp"

#include <algorithm>
#include <cassert>
#include <exception>
#include <limits>
#include <system_error>
#include <thread>

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

// resolve_on_pool's entry for an op: its slot in the low 32 bits, bit 32 set for a target
// write (else a vector write); kUnknownOp where the id is not in the store.
constexpr std::uint64_t kTargetWrite = std::uint64_t(1) << 32;
constexpr std::uint64_t kUnknownOp = ~std::uint64_t(0);

/// Threads for publishes: StoreConfig::publish_threads, or one per hardware thread up to 8.
std::size_t publish_threads_for(const StoreConfig& config) {
  if (config.publish_threads > 0) return config.publish_threads;
  return std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
}

/// First index of part p when [0, n) is cut into `parts` contiguous near-equal parts.
std::size_t part_begin(std::size_t p, std::size_t parts, std::size_t n) noexcept { return n * p / parts; }

/// The part of the slot range [0, high_water) a slot belongs to, `parts` cutting it into
/// near-equal ranges. A multiply and shift, not a 64-bit division per op (which took the lookup
/// pass from 15 to 17 ms for 1,000,000 moves on two threads of the development VM).
class SlotParts {
 public:
  SlotParts(std::size_t parts, std::uint32_t high_water) noexcept
      : scale_((std::uint64_t(parts) << 32) / std::max<std::uint64_t>(high_water, 1)) {}
  std::size_t operator()(std::uint64_t slot) const noexcept { return static_cast<std::size_t>((slot * scale_) >> 32); }

 private:
  std::uint64_t scale_;
};

}  // namespace

Catalog::Catalog(const StoreConfig& config)
    : config_(config),
      stored_dim_(stored_dim(config.metric, config.dim)),
      value_count_(config.target.value_count()),
      attribute_words_(config.attribute_words),
      publish_threads_(publish_threads_for(config)) {}

void Catalog::restore(std::span<const PointId> slot_ids, IdIndex&& index, bool every_slot_live) {
  high_water_ = static_cast<std::uint32_t>(slot_ids.size());
  free_.reserve(slot_ids.size());
  ids_ = std::move(index);
  if (every_slot_live) return;
  for (std::size_t s = 0; s < slot_ids.size(); ++s) {
    if (slot_ids[s] == kInvalidId) free_.release(static_cast<std::uint32_t>(s), high_water_);
  }
}

Catalog::BatchShape Catalog::shape_of(std::span<const QueuedOp> ops) const noexcept {
  std::size_t inserts = 0, erases = 0, others = 0;
  for (const QueuedOp& op : ops) {
    inserts += op.kind == UpdateKind::Insert;
    erases += op.kind == UpdateKind::Erase;
    others += op.kind == UpdateKind::SetAttributes;
  }
  return {ops.size(), std::size_t(high_water_) + inserts, inserts == 0 && erases == 0 && others == 0, erases > 0};
}

void Catalog::reserve_for(const BatchShape& shape) {
  const std::size_t slots = shape.slots;
  if (slots > std::numeric_limits<std::uint32_t>::max()) {
    throw OutOfMemory(concat("ReferenceSet::publish: ", slots, " slots exceed the limit of 2^32 - 1 points"));
  }
  // A dense id index (ids 0..n-1) builds its table here, not half-way through the batch.
  if (shape.erases) ids_.materialize();
  ids_.reserve(ids_.size() + (slots - high_water_));
  free_.reserve(slots);
  for (auto* v : {&vector_marks_, &target_marks_, &id_marks_, &attribute_marks_}) {
    if (v->size() < slots) v->resize(std::max(slots, v->size() * 2));
  }
  if (on_pool(shape)) {
    if (!pool_) {
      try {
        // The pool is kept only with its scratch in place (a bad_alloc here leaves no pool).
        auto pool = std::make_unique<ThreadPool>(publish_threads_ - 1);
        tallies_.resize(pool->concurrency());
        chunk_part_counts_.resize(tallies_.size() * counts_row());
        pool_ = std::move(pool);
      } catch (const std::system_error&) {
        publish_threads_ = 1;  // no threads to be had: publishes resolve on the caller alone
      }
    }
    if (pool_) {
      op_writes_.reserve(shape.ops);
      by_part_.reserve(shape.ops);
    }
  }
}

void Catalog::resolve(std::span<const QueuedOp> ops, const BatchShape& shape, const UpdateQueue& queue,
                      ResolvedBatch& batch, PublishReport& report) {
  assert(shape.ops == ops.size());
  if (on_pool(shape) && pool_ && by_part_.capacity() >= ops.size()) {
    try {
      resolve_on_pool(ops, queue, batch, report);
      return;
    } catch (const std::exception&) {
      // Only handing work to the pool can throw (its job record), and the pool path changes
      // nothing of the catalogue: resolving in order starts afresh with a new batch stamp.
    }
  }
  resolve_in_order(ops, queue, batch, report);
}

void Catalog::resolve_on_pool(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch,
                              PublishReport& report) {
  op_writes_.resize(ops.size());  // both within the capacity reserve_for made
  by_part_.resize(ops.size());
  look_up_slots(ops);
  sort_writes_by_part(ops.size());
  batch.clear();
  const std::uint64_t stamp = ++batch_stamp_;
  mark_last_writes(stamp);
  write_part_entries(ops, queue, batch);
  // The report changes last: until here, a throw from the pool leaves it as it was.
  report_pool_batch(ops, batch, report);
}

// 1. Each op's slot, over contiguous chunks of the batch (chunk c on task c), counted per
//    part of the slot range. Moves and target changes only read the id index (inserts and
//    erases change it, and the free slots, in queue order: they keep resolve_in_order).
void Catalog::look_up_slots(std::span<const QueuedOp> ops) {
  const std::size_t n = ops.size();
  const std::size_t parts = tallies_.size();
  const bool targets = config_.target.kind != TargetSpec::Kind::None;
  const SlotParts part_of(parts, high_water_);
  const std::size_t row = counts_row();
  pool_->parallel_for(parts, [&](std::size_t c) {
    // Locals, not the tally, in the loop: its stores would alias the loads of the id index
    // (all 64-bit), and the compiler would reload those every op.
    std::size_t moved = 0, retargeted = 0, unknown = 0;
    std::size_t* per_part = chunk_part_counts_.data() + c * row;
    std::fill(per_part, per_part + parts, std::size_t(0));
    std::uint64_t* writes = op_writes_.data();
    const IdIndex& ids = ids_;
    const std::size_t end = part_begin(c + 1, parts, n);
    for (std::size_t i = part_begin(c, parts, n); i < end; ++i) {
      if (i + kPrefetchAhead < end) ids.prefetch(ops[i + kPrefetchAhead].id);
      const QueuedOp& op = ops[i];
      assert(op.kind == UpdateKind::Move || op.kind == UpdateKind::SetTarget);
      const auto slot = ids.find(op.id);
      if (!slot) {
        writes[i] = kUnknownOp;
        ++unknown;
        continue;
      }
      const bool move = op.kind == UpdateKind::Move;
      writes[i] = move ? *slot : *slot | kTargetWrite;
      ++(move ? moved : retargeted);
      if (move || targets) ++per_part[part_of(*slot)];  // a store without targets writes none
    }
    tallies_[c] = Tally{moved, retargeted, unknown};
  });
}

// 2. by_part_ lists the writing ops part by part of the slot range, each part's in queue
//    order (chunk by chunk): a counting sort, chunk c on task c.
void Catalog::sort_writes_by_part(std::size_t n) {
  const std::size_t parts = tallies_.size();
  const bool targets = config_.target.kind != TargetSpec::Kind::None;
  const SlotParts part_of(parts, high_water_);
  const std::size_t row = counts_row();
  std::size_t at = 0;
  for (std::size_t p = 0; p < parts; ++p) {
    tallies_[p].first_op = at;
    for (std::size_t c = 0; c < parts; ++c) {
      const std::size_t count = chunk_part_counts_[c * row + p];
      chunk_part_counts_[c * row + p] = at;  // now chunk c's first position in part p
      at += count;
    }
    tallies_[p].end_op = at;
  }
  pool_->parallel_for(parts, [&](std::size_t c) {
    std::size_t* next = chunk_part_counts_.data() + c * row;
    const std::size_t end = part_begin(c + 1, parts, n);
    for (std::size_t i = part_begin(c, parts, n); i < end; ++i) {
      const std::uint64_t w = op_writes_[i];
      if (w == kUnknownOp || ((w & kTargetWrite) && !targets)) continue;
      by_part_[next[part_of(w & 0xffffffffu)]++] = static_cast<std::uint32_t>(i);
    }
  });
}

template <class Visit>
void Catalog::for_each_write(std::size_t p, Visit&& visit) const {
  for (std::size_t k = tallies_[p].first_op; k < tallies_[p].end_op; ++k) {
    const std::uint32_t i = by_part_[k];
    const std::uint64_t w = op_writes_[i];
    visit(i, static_cast<std::uint32_t>(w & 0xffffffffu), (w & kTargetWrite) != 0);
  }
}

// 3. Each part finds, per channel, the last op of the batch that writes each of its slots,
//    and numbers those slots. A slot's marks belong to one part, so to one thread, and a
//    part's marks (a slice of the array) stay in that thread's cache.
void Catalog::mark_last_writes(std::uint64_t stamp) {
  pool_->parallel_for(tallies_.size(), [&](std::size_t p) {
    Tally& t = tallies_[p];
    t.vectors = t.targets = 0;
    for_each_write(p, [&](std::uint32_t i, std::uint32_t slot, bool target) {
      ChannelMark& mark = (target ? target_marks_ : vector_marks_)[slot];
      if (mark.stamp != stamp) {
        mark.stamp = stamp;
        mark.pos = static_cast<std::uint32_t>(target ? t.targets++ : t.vectors++);
      }
      mark.src = i;
    });
  });
}

// 4. The parts' entries follow each other in the channels; each part writes its own.
void Catalog::write_part_entries(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch) {
  place_part_entries(batch);
  const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
  pool_->parallel_for(tallies_.size(), [&](std::size_t p) {
    const Tally& t = tallies_[p];
    for_each_write(p, [&](std::uint32_t i, std::uint32_t slot, bool target) {
      const ChannelMark& mark = (target ? target_marks_ : vector_marks_)[slot];
      if (mark.src != i) return;  // a later op of the batch writes this slot
      const QueuedOp& op = ops[i];
      if (!target) {
        const std::size_t e = t.vector_base + mark.pos;
        batch.vector_slots[e] = slot;
        const auto stored = queue.vector_of(op);
        std::copy(stored.begin(), stored.end(), batch.vectors.data() + e * stored_dim_);
      } else {
        const std::size_t e = t.target_base + mark.pos;
        batch.target_slots[e] = slot;
        if (classes) {
          batch.labels[e] = op.label;
        } else {
          const auto v = queue.values_of(op);
          std::copy(v.begin(), v.end(), batch.values.data() + e * value_count_);
        }
      }
    });
  });
}

void Catalog::place_part_entries(ResolvedBatch& batch) {
  std::size_t vectors = 0, target_entries = 0;
  for (Tally& t : tallies_) {
    t.vector_base = vectors;
    t.target_base = target_entries;
    vectors += t.vectors;
    target_entries += t.targets;
  }
  batch.vector_slots.resize(vectors);  // all within the capacity ResolvedBatch::reserve made
  batch.vectors.resize(vectors * stored_dim_);
  batch.target_slots.resize(target_entries);
  if (config_.target.kind == TargetSpec::Kind::Classes) {
    batch.labels.resize(target_entries);
  } else {
    batch.values.resize(target_entries * value_count_);
  }
}

void Catalog::report_pool_batch(std::span<const QueuedOp> ops, ResolvedBatch& batch, PublishReport& report) {
  std::size_t unknown = 0;
  for (const Tally& t : tallies_) {
    report.moved += t.moved;
    report.retargeted += t.retargeted;
    unknown += t.unknown;
  }
  if (unknown > 0) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (op_writes_[i] == kUnknownOp) report.rejected.push_back({ops[i].id, ops[i].kind, RejectReason::UnknownId});
    }
  }
  finish(ops.size(), batch, report);
}

void Catalog::finish(std::size_t drained, ResolvedBatch& batch, PublishReport& report) const noexcept {
  batch.slot_count = high_water_;
  report.drained += drained;
  report.applied = report.inserted + report.moved + report.erased + report.retargeted + report.attributed;
  report.size = ids_.size();
}

void Catalog::resolve_in_order(std::span<const QueuedOp> ops, const UpdateQueue& queue, ResolvedBatch& batch,
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
  auto write_attributes = [&](std::uint32_t slot, const QueuedOp& op) {
    if (attribute_words_ == 0) return;
    const std::size_t e = channel_entry(slot, batch_stamp_, attribute_marks_, batch.attribute_slots);
    if (e * attribute_words_ == batch.attributes.size()) batch.attributes.resize(batch.attributes.size() + attribute_words_);
    queue.copy_attributes(op, batch.attributes.data() + e * attribute_words_);
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
          const auto& marks = later.kind == UpdateKind::Move            ? vector_marks_
                              : later.kind == UpdateKind::SetTarget     ? target_marks_
                              : later.kind == UpdateKind::SetAttributes ? attribute_marks_
                                                                        : id_marks_;
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
        write_attributes(slot, op);
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
      case UpdateKind::SetAttributes: {
        const auto slot = ids_.find(op.id);
        if (!slot) {
          reject(op, RejectReason::UnknownId);
          continue;
        }
        write_attributes(*slot, op);
        ++report.attributed;
        break;
      }
    }
  }
  finish(ops.size(), batch, report);
}

}  // namespace streamknn::detail
