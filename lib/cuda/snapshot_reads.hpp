// The CUDA backend's reads of its published snapshot (cuda_backend.cpp): the checkpoint's image,
// stored rows by slot, the live rows gathered on the device, and target rows. Each queues its
// copies on the query stream after the front buffer's writes, under the backend's lock (so no
// publish swaps the buffer meanwhile), marks the buffer read (its next write waits), and waits
// for the copies outside the lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "core/backend.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_store.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail::gpu {

class SnapshotReads {
 public:
  /// The backend's store, its lock and its query stream (all outliving this).
  SnapshotReads(const StoreConfig& config, int device, std::size_t stored_dim, DeviceStore& store, std::mutex& lock,
                Stream& query_stream);

  /// Backend::read_snapshot: every slot's vector, id and target.
  void image(StoreImage& image) const;
  /// Backend::read_vectors: the stored vectors of `slots`, row after row.
  void vectors(std::span<const std::uint32_t> slots, std::vector<float>& out) const;
  /// Backend::device_rows: the live slots' vectors gathered into rows on the device.
  void rows(DeviceRows& out) const;
  /// Backend::read_targets: the target rows of `slots`.
  void targets(std::span<const std::uint32_t> slots, ResolvedBatch& batch) const;

 private:
  /// Under the lock, after the front buffer's writes: queue(buffer, stream); then the wait.
  template <class Queue>
  void read_front(Queue&& queue) const;
  /// Queues the gather of `count` slots' vectors (slots in device memory) into plain rows.
  void queue_gather(const DeviceBuffer& buffer, const std::uint32_t* slots, std::size_t count, float* rows,
                    cudaStream_t stream) const;
  std::size_t outputs() const noexcept;

  StoreConfig config_;
  int device_;
  std::size_t stored_dim_;
  DeviceStore& store_;
  std::mutex& lock_;
  Stream& query_stream_;
  struct Gather {  // vectors()' arrays, kept and grown (the sharded store reads rows every batch)
    std::mutex mutex;  // held until the copy out of them is done
    DeviceArray<std::uint32_t> slots;
    DeviceArray<float> rows;
  };
  mutable Gather gather_;
};

}  // namespace streamknn::detail::gpu
