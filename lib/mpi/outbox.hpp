// The updates pushed on one rank and not yet published, already sorted by owner: one byte
// buffer per destination rank, appended under one lock (so each thread's updates keep their
// order, and all updates of an id go to one owner in that order), bounded by queue_capacity.
// The record format (encode / decode) is what publish() sends between ranks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "streamknn/config.hpp"
#include "streamknn/update.hpp"

namespace streamknn::detail::mpi {

/// Record layout: id (8 bytes), kind (1), flags (1: has a target, 2: vector in doubles), 2 zero
/// bytes, label (4), then the vector of an insert or move (dim floats, or dim doubles as the
/// update gave them: the owner subtracts its StoreConfig::origin in double), then the target's
/// floats for an insert or set-target of an Outputs store, then the attribute words of a
/// set-attributes or of an insert that gives them (flag 4); zeros up to a multiple of 8 bytes.
/// Native byte order (every rank of a job runs the same build).
std::size_t record_bytes(const Update& update, const StoreConfig& config) noexcept;
void encode(const Update& update, const StoreConfig& config, std::vector<std::byte>& out);
/// Views of the records in bytes (which must outlive them), in order.
std::vector<Update> decode(std::span<const std::byte> bytes, const StoreConfig& config);

class Outbox {
 public:
  Outbox(const StoreConfig& config, int ranks);

  /// Queues validated updates for their owners: all of them (waiting for take() while full) or,
  /// with wait = false, the longest prefix that fits. Returns how many were queued.
  std::size_t put(std::span<const Update> updates, bool wait);
  /// Everything queued, per destination rank; the outbox is empty afterwards and waiting
  /// producers resume.
  std::vector<std::vector<std::byte>> take();
  std::size_t queued() const noexcept;

 private:
  StoreConfig config_;
  int ranks_;
  mutable std::mutex mutex_;
  std::condition_variable space_;
  std::vector<std::vector<std::byte>> per_rank_;
  std::size_t count_ = 0;
};

}  // namespace streamknn::detail::mpi
