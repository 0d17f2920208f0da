// SnapshotReads (snapshot_reads.hpp).
#include "cuda/snapshot_reads.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>

#include "cuda/cuda_check.hpp"
#include "cuda/device_types.hpp"
#include "cuda/kernels/gather.hpp"

namespace streamknn::detail::gpu {

SnapshotReads::SnapshotReads(const StoreConfig& config, int device, std::size_t stored_dim, DeviceStore& store,
                             std::mutex& lock, Stream& query_stream)
    : config_(config), device_(device), stored_dim_(stored_dim), store_(store), lock_(lock),
      query_stream_(query_stream) {}

template <class Queue>
void SnapshotReads::read_front(Queue&& queue) const {
  const Event copied;
  {
    std::lock_guard lock(lock_);
    DeviceBuffer& buffer = store_.buffer(store_.front());
    const cudaStream_t qs = query_stream_.get();
    check_cuda(cudaStreamWaitEvent(qs, buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
    queue(buffer, qs);
    copied.record(qs);
    buffer.last_read.record(qs);
  }
  copied.wait();
}

void SnapshotReads::queue_gather(const DeviceBuffer& buffer, const std::uint32_t* slots, std::size_t count,
                                 float* rows, cudaStream_t stream) const {
  const std::uint32_t chunks = chunks_for(stored_dim_);
  launch_gather_rows(GatherParams{buffer.vectors.get(), chunks, chunk_floats_for(stored_dim_),
                                  static_cast<std::uint32_t>(stored_dim_), slots, static_cast<std::uint32_t>(count),
                                  rows},
                     stream);
}

std::size_t SnapshotReads::outputs() const noexcept {
  return config_.target.value_count();
}

void SnapshotReads::image(StoreImage& image) const {
  DeviceScope scope(device_);
  const std::size_t outputs_n = outputs();
  const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
  const std::uint32_t width = chunk_floats_for(stored_dim_);
  const std::size_t chunks = chunks_for(stored_dim_);
  std::vector<float> stored;  // the device layout (device_types.hpp)
  read_front([&](DeviceBuffer& buffer, cudaStream_t qs) {
    const std::size_t n = buffer.slot_count;
    image.epoch = buffer.epoch;
    image.slot_count = buffer.slot_count;
    const std::size_t floats = width == 2 ? n * 2 : (n + kTile - 1) / kTile * kTile * chunks * 4;
    stored.resize(floats);
    image.ids.resize(n);
    image.labels.assign(classes ? n : 0, 0);
    image.values.assign(n * outputs_n, 0.0f);
    auto copy = [&](void* to, const void* from, std::size_t bytes, const char* what) {
      if (bytes) check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, qs), "cudaMemcpyAsync", what);
    };
    copy(stored.data(), buffer.vectors.get(), floats * 4, "checkpoint: store vectors");
    copy(image.ids.data(), buffer.ids.get(), n * 8, "checkpoint: store ids");
    if (classes) copy(image.labels.data(), buffer.labels.get(), n * 4, "checkpoint: store labels");
    copy(image.values.data(), buffer.values.get(), n * outputs_n * 4, "checkpoint: store values");
  });
  const std::size_t n = image.slot_count;
  image.vectors.assign(n * stored_dim_, 0.0f);
  for (std::size_t s = 0; s < n; ++s) {
    if (image.ids[s] == kNoId) {
      if (classes) image.labels[s] = 0;
      std::fill_n(image.values.data() + s * outputs_n, outputs_n, 0.0f);
      continue;
    }
    float* out = image.vectors.data() + s * stored_dim_;
    for (std::size_t d = 0; d < stored_dim_; ++d) {
      const std::size_t c = d / 4;
      out[d] = width == 2 ? stored[s * 2 + d] : stored[(((s / kTile) * chunks + c) * kTile + s % kTile) * 4 + d % 4];
    }
  }
}

void SnapshotReads::vectors(std::span<const std::uint32_t> slots, std::vector<float>& out) const {
  DeviceScope scope(device_);
  out.resize(slots.size() * stored_dim_);  // every row is copied over below
  if (slots.empty()) return;
  std::lock_guard gathering(gather_.mutex);
  grow(gather_.slots, slots.size(), "stored rows read back: slots");
  grow(gather_.rows, out.size(), "stored rows read back: rows");
  read_front([&](DeviceBuffer& buffer, cudaStream_t qs) {
    check_cuda(cudaMemcpyAsync(gather_.slots.get(), slots.data(), slots.size() * 4, cudaMemcpyHostToDevice, qs),
               "cudaMemcpyAsync(stored rows read back: slots)");
    queue_gather(buffer, gather_.slots.get(), slots.size(), gather_.rows.get(), qs);
    check_cuda(cudaMemcpyAsync(out.data(), gather_.rows.get(), out.size() * 4, cudaMemcpyDeviceToHost, qs),
               "cudaMemcpyAsync(stored rows read back: rows)");
  });
}

void SnapshotReads::rows(DeviceRows& out) const {
  DeviceScope scope(device_);
  std::vector<std::uint32_t> live;
  DeviceArray<std::uint32_t> slots;  // freed after the wait, not while the gather reads it
  auto rows = std::make_shared<DeviceArray<float>>();
  read_front([&](DeviceBuffer& buffer, cudaStream_t qs) {
    std::vector<PointId> ids(buffer.slot_count);
    check_cuda(cudaMemcpyAsync(ids.data(), buffer.ids.get(), ids.size() * 8, cudaMemcpyDeviceToHost, qs),
               "cudaMemcpyAsync(snapshot rows: ids)");
    check_cuda(cudaStreamSynchronize(qs), "cudaStreamSynchronize(snapshot rows: ids)");
    for (std::uint32_t slot = 0; slot < ids.size(); ++slot) {
      if (ids[slot] == kInvalidId) continue;
      live.push_back(slot);
      out.ids.push_back(ids[slot]);
    }
    slots = DeviceArray<std::uint32_t>(live.size(), "snapshot rows: slots");
    *rows = DeviceArray<float>(live.size() * stored_dim_, "snapshot rows");
    if (!live.empty()) {
      check_cuda(cudaMemcpyAsync(slots.get(), live.data(), live.size() * 4, cudaMemcpyHostToDevice, qs),
                 "cudaMemcpyAsync(snapshot rows: slots)");
      queue_gather(buffer, slots.get(), live.size(), rows->get(), qs);
    }
  });
  // The wait covered `live` (pageable memory its copy reads); the rows are ready for any stream.
  out.rows = rows->get();
  out.owner = std::move(rows);
}

void SnapshotReads::targets(std::span<const std::uint32_t> slots, ResolvedBatch& batch) const {
  StoreImage image;  // targets only: the rows of every slot, then those asked for
  DeviceScope scope(device_);
  const std::size_t outputs_n = outputs();
  const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
  read_front([&](DeviceBuffer& buffer, cudaStream_t qs) {
    const std::size_t n = buffer.slot_count;
    image.labels.resize(classes ? n : 0);
    image.values.resize(n * outputs_n);
    if (classes && n) {
      check_cuda(cudaMemcpyAsync(image.labels.data(), buffer.labels.get(), n * 4, cudaMemcpyDeviceToHost, qs),
                 "cudaMemcpyAsync", "journal: store labels");
    }
    if (outputs_n && n) {
      check_cuda(cudaMemcpyAsync(image.values.data(), buffer.values.get(), n * outputs_n * 4, cudaMemcpyDeviceToHost, qs),
                 "cudaMemcpyAsync", "journal: store values");
    }
  });
  batch.target_slots.assign(slots.begin(), slots.end());
  batch.labels.clear();
  batch.values.clear();
  for (const std::uint32_t s : slots) {
    if (classes) batch.labels.push_back(image.labels[s]);
    batch.values.insert(batch.values.end(), image.values.begin() + std::ptrdiff_t(s * outputs_n),
                        image.values.begin() + std::ptrdiff_t((s + 1) * outputs_n));
  }
}

}  // namespace streamknn::detail::gpu
