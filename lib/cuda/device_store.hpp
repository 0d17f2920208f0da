// The double-buffered reference store on the device.
//
// Two buffers of vectors (tile layout, see device_types.hpp), ids, validity mask and targets.
// Searches read the front buffer on the query stream; publish() writes the back buffer on the
// update stream, after a fence on the back buffer's `last_read` event (recorded by every search
// that read it), then records `written` and swaps: the next searches wait on that event, not on
// a device-wide sync. Each resolved batch is uploaded once and scattered twice: into the back
// buffer now, and into the other buffer at the next publish, so the two never drift. Where the
// store keeps the reduced-precision copy (kernels/reduced.hpp), each scatter writes it too; where
// its points carry attribute words (StoreConfig::attribute_words), each buffer keeps them for the
// kernels' predicates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/resolved_batch.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_types.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail::gpu {

/// One reference buffer and its fences.
struct DeviceBuffer {
  DeviceArray<float> vectors;          // capacity x chunks float4s (float2s: StoreView::chunk_floats)
  DeviceArray<std::uint64_t> ids;
  DeviceArray<std::uint8_t> valid;
  DeviceArray<std::int32_t> labels;
  DeviceArray<float> values;
  DeviceArray<std::uint16_t> reduced;  // the reduced-precision copy (StoreView::reduced), or empty
  DeviceArray<float> reduced_meta;     // its bounds, reduced_meta_floats per slot
  DeviceArray<std::uint32_t> attributes;  // capacity x StoreConfig::attribute_words, or empty
  DeviceArray<StoreView> view;         // device copy of view(); what kernels read
  std::uint32_t capacity = 0;          // slots, a multiple of kTile
  std::uint32_t slot_count = 0;
  std::uint64_t epoch = 0;
  /// Writes applied since the buffer was made, for the spatial index's refit rule: slots given an
  /// id (inserts; erases write kInvalidId and are not counted) and vectors written (moves, inserts).
  std::uint64_t inserts = 0, vector_writes = 0;
  Event written;                       // after the last write on the update stream
  Event last_read;                     // after the last search that read this buffer

  StoreView host_view(std::uint32_t chunks, std::uint32_t chunk_floats, std::uint32_t outputs,
                      std::uint32_t reduced_pairs, std::uint32_t attribute_words) const;
};

/// Where each channel of a packed batch lies, and how many writes it holds.
struct BatchLayout {
  std::uint32_t vector_count = 0, target_count = 0, id_count = 0, attribute_count = 0;
  std::size_t vector_slots = 0, vectors = 0, target_slots = 0, labels = 0, values = 0, id_slots = 0, ids = 0;
  std::size_t attribute_slots = 0, attributes = 0;
  bool empty = true;
};

/// A resolved batch packed into one device allocation (uploaded with one copy).
struct DeviceBatch {
  DeviceArray<unsigned char> data;
  PinnedArray<unsigned char> staging;
  Event uploaded;                      // staging may be refilled once this has fired
  BatchLayout layout;
  std::uint32_t inserts = 0;           // ids it writes that are not kInvalidId
};

class DeviceStore {
 public:
  DeviceStore(const StoreConfig& config, std::size_t stored_dim, cudaStream_t update_stream);
  ~DeviceStore();

  /// Grows the back buffer to `slots` slots and the batch staging to `batch_ops` operations.
  /// Throws OutOfMemory with nothing visible changed.
  void reserve(std::size_t slots, std::size_t batch_ops);
  /// Writes the previous batch and this one into the back buffer and returns its index; the
  /// caller swaps it in (under its own lock) with set_front().
  int write_back(const ResolvedBatch& batch, std::uint64_t epoch);
  /// write_back() for a batch made on the device: `count` target writes (slot, whole row) that
  /// `fill` enqueues on the update stream into the batch's device memory (slots: count
  /// uint32, values: count x outputs floats; after reserve() for `count` operations). Slots may
  /// repeat when every write of a slot carries the same row. Kept for the replay like any batch.
  /// `accept`, called once `fill` has enqueued its work, may wait for it and refuse the rows:
  /// then nothing is written to either buffer and -1 is returned.
  int write_back_targets(std::uint32_t count, std::uint64_t epoch,
                         const std::function<void(std::uint32_t* slots, float* values)>& fill,
                         const std::function<bool()>& accept);
  void set_front(int index) noexcept { front_ = index; }
  int front() const noexcept { return front_; }
  DeviceBuffer& buffer(int index) noexcept { return buffers_[index]; }

  std::uint32_t chunks() const noexcept { return chunks_; }
  /// Whether the buffers keep the reduced-precision copy (StoreConfig::reduced_screen).
  bool has_reduced() const noexcept { return reduced_pairs_ > 0; }
  std::size_t device_bytes() const noexcept;

 private:
  void grow(DeviceBuffer& buffer, std::uint32_t capacity);
  void upload(const ResolvedBatch& batch, DeviceBatch& target);
  void scatter(const DeviceBatch& batch, DeviceBuffer& buffer);
  void upload_view(DeviceBuffer& buffer);
  void note_norms(const ResolvedBatch& batch);
  void release_retired();

  StoreConfig config_;
  double max_norm_ = 0;  // >= every stored vector's L2 norm (StoreView::max_norm)
  std::size_t stored_dim_;
  std::uint32_t chunks_;
  std::uint32_t chunk_floats_;  // StoreView::chunk_floats
  std::uint32_t outputs_;
  std::uint32_t reduced_pairs_;  // 16-byte chunks of the reduced-precision copy per vector; 0: no copy
  std::uint32_t attribute_words_;  // StoreConfig::attribute_words
  bool classes_;
  cudaStream_t update_;
  DeviceBuffer buffers_[2];
  int front_ = 0;
  DeviceBatch batches_[2];   // [previous] was written to the front buffer, not yet to the back
  int previous_ = 0;
  std::size_t batch_capacity_ = 0;  // operations a DeviceBatch can hold
  std::size_t previous_slots_ = 0;  // highest slot the previous batch writes, + 1

  struct Retired {             // arrays replaced by growth, freed once nothing can read them
    std::vector<DeviceArray<float>> floats;
    std::vector<DeviceArray<std::uint64_t>> ids;
    std::vector<DeviceArray<std::uint8_t>> valid;
    std::vector<DeviceArray<std::int32_t>> labels;
    std::vector<DeviceArray<std::uint16_t>> halves;
    std::vector<DeviceArray<std::uint32_t>> words;
    std::unique_ptr<Event> safe;
  };
  std::vector<Retired> retired_;
};

}  // namespace streamknn::detail::gpu
