#include "cuda/device_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.hpp"
#include "cuda/kernels.hpp"

namespace streamknn::detail::gpu {

namespace {

std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

/// 16-byte chunks of the reduced-precision copy per vector, or 0 where the store keeps none: Auto
/// keeps it from kReducedAutoMinChunks chunks (narrower stores are cheap to read in float32),
/// Always from two.
std::uint32_t reduced_pairs_of(const StoreConfig& config, std::uint32_t chunks) {
  switch (config.reduced_screen) {
    case ReducedScreen::Off: return 0;
    case ReducedScreen::Always: return chunks >= 2 ? reduced_pairs_for(chunks, config.reduced_format) : 0;
    case ReducedScreen::Auto: break;
  }
  return chunks >= kReducedAutoMinChunks ? reduced_pairs_for(chunks, config.reduced_format) : 0;
}

}  // namespace

StoreView DeviceBuffer::host_view(std::uint32_t chunks, std::uint32_t chunk_floats, std::uint32_t outputs,
                                  std::uint32_t reduced_pairs, std::uint32_t attribute_words) const {
  StoreView v;
  if (attribute_words > 0) {
    v.attributes = attributes.get();
    v.attribute_words = attribute_words;
  }
  if (reduced_pairs > 0) {
    v.reduced = reduced.get();
    v.reduced_meta = reduced_meta.get();
    v.reduced_pairs = reduced_pairs;
  }
  v.vectors = vectors.get();
  v.ids = ids.get();
  v.valid = valid.get();
  v.labels = labels.get();
  v.values = values.get();
  v.slot_count = slot_count;
  v.capacity = capacity;
  v.chunks = chunks;
  v.chunk_floats = chunk_floats;
  v.outputs = outputs;
  return v;
}

DeviceStore::DeviceStore(const StoreConfig& config, std::size_t stored_dim, cudaStream_t update_stream)
    : config_(config),
      stored_dim_(stored_dim),
      chunks_(chunks_for(stored_dim)),
      chunk_floats_(chunk_floats_for(stored_dim)),
      outputs_(config.target.value_count()),
      reduced_pairs_(reduced_pairs_of(config, chunks_)),
      attribute_words_(static_cast<std::uint32_t>(config.attribute_words)),
      classes_(config.target.kind == TargetSpec::Kind::Classes),
      update_(update_stream) {
  for (auto& b : buffers_) {
    b.view = DeviceArray<StoreView>(1, "store view");
    upload_view(b);
  }
  check_cuda(cudaStreamSynchronize(update_), "cudaStreamSynchronize(update stream)");
}

DeviceStore::~DeviceStore() {
  cudaStreamSynchronize(update_);  // nothing may still write the arrays we are about to free
}

std::size_t DeviceStore::device_bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& b : buffers_) {
    total += b.vectors.bytes() + b.ids.bytes() + b.valid.bytes() + b.labels.bytes() + b.values.bytes() +
             b.reduced.bytes() + b.reduced_meta.bytes() + b.attributes.bytes();
  }
  for (const auto& b : batches_) total += b.data.bytes();
  return total;
}

/// Raises max_norm_ over a batch's vectors (a running maximum: an upper bound for either buffer).
void DeviceStore::note_norms(const ResolvedBatch& batch) {
  if (config_.metric != Metric::InnerProduct) return;
  double largest = 0;
  for (std::size_t at = 0; at + stored_dim_ <= batch.vectors.size(); at += stored_dim_) {
    double s = 0;
    for (std::size_t i = 0; i < stored_dim_; ++i) s += double(batch.vectors[at + i]) * double(batch.vectors[at + i]);
    largest = std::max(largest, s);
  }
  max_norm_ = std::max(max_norm_, std::sqrt(largest) * (1.0 + 0x1p-30));
}

void DeviceStore::upload_view(DeviceBuffer& buffer) {
  StoreView v = buffer.host_view(chunks_, chunk_floats_, outputs_, reduced_pairs_, attribute_words_);
  v.max_norm = max_norm_;
  // Pageable source: the runtime stages it before returning, so `v` may go out of scope.
  check_cuda(cudaMemcpyAsync(buffer.view.get(), &v, sizeof v, cudaMemcpyHostToDevice, update_),
             "cudaMemcpyAsync(store view)");
}

void DeviceStore::release_retired() {
  std::erase_if(retired_, [](const Retired& r) { return r.safe->done(); });
}

void DeviceStore::grow(DeviceBuffer& b, std::uint32_t capacity) {
  const std::string shape = concat(capacity, " points of dim ", config_.dim);
  // Allocate everything first: if any allocation fails, the RAII arrays free the others and
  // the buffer is untouched (strong guarantee).
  DeviceArray<float> vectors(std::size_t(capacity) * chunks_ * chunk_floats_, "store vectors");
  DeviceArray<std::uint64_t> ids(capacity, "store ids");
  DeviceArray<std::uint8_t> valid(capacity, "store validity mask");
  DeviceArray<std::int32_t> labels(classes_ ? capacity : 0, "store labels");
  DeviceArray<float> values(std::size_t(capacity) * outputs_, "store target values");
  const std::uint32_t meta_floats = reduced_meta_floats(config_.reduced_format);
  DeviceArray<std::uint16_t> reduced(std::size_t(capacity) * reduced_pairs_ * 8, "store reduced-precision copy");
  DeviceArray<float> reduced_meta(reduced_pairs_ ? std::size_t(capacity) * meta_floats : 0,
                                  "store reduced-precision copy bounds");
  DeviceArray<std::uint32_t> attributes(std::size_t(capacity) * attribute_words_, "store attribute words");

  const std::uint32_t old = b.capacity;
  auto copy_then_clear = [&](auto& to, const auto& from, std::size_t per_slot, const char* what) {
    using T = std::remove_pointer_t<decltype(to.get())>;
    const std::size_t kept = std::size_t(old) * per_slot * sizeof(T);
    if (kept) {
      check_cuda(cudaMemcpyAsync(to.get(), from.get(), kept, cudaMemcpyDeviceToDevice, update_), "cudaMemcpyAsync", what);
    }
    const std::size_t rest = to.bytes() - kept;
    if (rest) {
      check_cuda(cudaMemsetAsync(reinterpret_cast<unsigned char*>(to.get()) + kept, 0, rest, update_), "cudaMemsetAsync", what);
    }
  };
  copy_then_clear(vectors, b.vectors, std::size_t(chunks_) * chunk_floats_, "store vectors");
  copy_then_clear(ids, b.ids, 1, "store ids");
  copy_then_clear(valid, b.valid, 1, "store validity mask");
  if (classes_) copy_then_clear(labels, b.labels, 1, "store labels");
  if (outputs_) copy_then_clear(values, b.values, outputs_, "store target values");
  if (reduced_pairs_) {
    copy_then_clear(reduced, b.reduced, std::size_t(reduced_pairs_) * 8, "store reduced-precision copy");
    copy_then_clear(reduced_meta, b.reduced_meta, meta_floats, "store reduced-precision copy bounds");
  }
  if (attribute_words_) copy_then_clear(attributes, b.attributes, attribute_words_, "store attribute words");

  Retired r;
  r.floats.push_back(std::move(b.vectors));
  r.floats.push_back(std::move(b.values));
  r.ids.push_back(std::move(b.ids));
  r.valid.push_back(std::move(b.valid));
  r.labels.push_back(std::move(b.labels));
  r.halves.push_back(std::move(b.reduced));
  r.floats.push_back(std::move(b.reduced_meta));
  r.words.push_back(std::move(b.attributes));
  r.safe = std::make_unique<Event>();
  r.safe->record(update_);  // after the copies; the update stream already waited for readers
  retired_.push_back(std::move(r));

  b.vectors = std::move(vectors);
  b.ids = std::move(ids);
  b.valid = std::move(valid);
  b.labels = std::move(labels);
  b.values = std::move(values);
  b.reduced = std::move(reduced);
  b.reduced_meta = std::move(reduced_meta);
  b.attributes = std::move(attributes);
  b.capacity = capacity;
  upload_view(b);
}

void DeviceStore::reserve(std::size_t slots, std::size_t batch_ops) {
  release_retired();
  DeviceBuffer& back = buffers_[1 - front_];
  // Searches that started before the last swap may still read the back buffer.
  check_cuda(cudaStreamWaitEvent(update_, back.last_read.get()), "cudaStreamWaitEvent(back buffer readers)");
  // The back buffer also receives the previous batch, whose slots can lie above the current
  // high-water mark (inserted and erased within that batch).
  slots = std::max(slots, previous_slots_);
  if (slots > back.capacity) {
    const std::size_t grown = std::max<std::size_t>(slots, std::size_t(back.capacity) + back.capacity / 2);
    const std::size_t capacity = align_up(std::min<std::size_t>(grown, 0xffffffe0u), kTile);
    try {
      grow(back, static_cast<std::uint32_t>(capacity));
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(concat("ReferenceSet: the device cannot hold ", slots, " points of dim ", config_.dim,
                               " (growing to ", capacity, " slots; ", e.what(), ")"));
    }
  }
  if (batch_ops > batch_capacity_) {
    const std::size_t ops = std::max(batch_ops, batch_capacity_ * 2);
    const std::size_t value_bytes = classes_ ? 4 : 4 * outputs_;
    const std::size_t attribute_bytes = attribute_words_ ? 4 + 4 * std::size_t(attribute_words_) : 0;
    const std::size_t bytes = ops * (4 + 4 * stored_dim_ + 4 + value_bytes + 4 + 8 + attribute_bytes) + 9 * 16;
    // Both batch slots at once, so a failure leaves the old ones in place. The clearing and the
    // copy run on the update stream, in order before the uploads and scatters that use these
    // buffers: that stream is non-blocking, so it does not wait for work on the legacy default
    // stream, where cudaMemset and a device-to-device cudaMemcpy return before they finish (an
    // upload could overtake the clearing, and a replay the copy).
    DeviceBatch fresh[2];
    for (auto& f : fresh) {
      f.data = DeviceArray<unsigned char>(bytes, "update batch");
      f.staging = PinnedArray<unsigned char>(bytes, "update batch staging");
      // Defined bytes throughout: the copy below moves the whole buffer, gaps included.
      check_cuda(cudaMemsetAsync(f.data.get(), 0, bytes, update_), "cudaMemsetAsync(update batch)");
    }
    // The previous batch still has to be replayed: keep its device copy (in stream order after
    // its own scatters). Freeing the old buffers below waits for the device.
    DeviceBatch& prev = batches_[previous_];
    if (!prev.layout.empty) {
      check_cuda(cudaMemcpyAsync(fresh[0].data.get(), prev.data.get(), prev.data.bytes(), cudaMemcpyDeviceToDevice,
                                 update_),
                 "cudaMemcpyAsync(previous update batch)");
      fresh[0].layout = prev.layout;
    }
    batches_[0] = std::move(fresh[0]);
    batches_[1] = std::move(fresh[1]);
    previous_ = 0;
    batch_capacity_ = ops;
  }
}

void DeviceStore::upload(const ResolvedBatch& batch, DeviceBatch& target) {
  target.uploaded.wait();  // the staging area's previous copy has finished
  BatchLayout& t = target.layout;
  std::size_t off = 0;
  auto place = [&](std::size_t bytes) {
    const std::size_t at = off;
    off = align_up(off + bytes, 16);
    return at;
  };
  t.vector_count = static_cast<std::uint32_t>(batch.vector_slots.size());
  t.target_count = static_cast<std::uint32_t>(batch.target_slots.size());
  t.id_count = static_cast<std::uint32_t>(batch.id_slots.size());
  t.attribute_count = static_cast<std::uint32_t>(batch.attribute_slots.size());
  target.inserts = static_cast<std::uint32_t>(
      std::count_if(batch.ids.begin(), batch.ids.end(), [](PointId id) { return id != kInvalidId; }));
  t.vector_slots = place(batch.vector_slots.size() * 4);
  t.vectors = place(batch.vectors.size() * 4);
  t.target_slots = place(batch.target_slots.size() * 4);
  t.labels = place(batch.labels.size() * 4);
  t.values = place(batch.values.size() * 4);
  t.id_slots = place(batch.id_slots.size() * 4);
  t.ids = place(batch.ids.size() * 8);
  t.attribute_slots = place(batch.attribute_slots.size() * 4);
  t.attributes = place(batch.attributes.size() * 4);
  unsigned char* h = target.staging.get();
  auto put = [&](std::size_t at, const auto& v) {
    if (!v.empty()) std::memcpy(h + at, v.data(), v.size() * sizeof(v[0]));
  };
  put(t.vector_slots, batch.vector_slots);
  put(t.vectors, batch.vectors);
  put(t.target_slots, batch.target_slots);
  put(t.labels, batch.labels);
  put(t.values, batch.values);
  put(t.id_slots, batch.id_slots);
  put(t.ids, batch.ids);
  put(t.attribute_slots, batch.attribute_slots);
  put(t.attributes, batch.attributes);
  check_cuda(cudaMemcpyAsync(target.data.get(), h, off, cudaMemcpyHostToDevice, update_),
             "cudaMemcpyAsync(update batch)", concat(off, " bytes"));
  target.uploaded.record(update_);
  t.empty = false;
}

void DeviceStore::scatter(const DeviceBatch& batch, DeviceBuffer& b) {
  const BatchLayout& t = batch.layout;
  if (t.empty) return;
  b.inserts += batch.inserts;
  b.vector_writes += t.vector_count;
  const unsigned char* d = batch.data.get();
  ScatterParams p;
  p.vectors = b.vectors.get();
  p.ids = b.ids.get();
  p.valid = b.valid.get();
  p.labels = b.labels.get();
  p.values = b.values.get();
  p.chunks = chunks_;
  p.chunk_floats = chunk_floats_;
  p.dim = static_cast<std::uint32_t>(stored_dim_);
  p.outputs = outputs_;
  p.vector_slots = reinterpret_cast<const std::uint32_t*>(d + t.vector_slots);
  p.vectors_in = reinterpret_cast<const float*>(d + t.vectors);
  p.vector_count = t.vector_count;
  p.target_slots = reinterpret_cast<const std::uint32_t*>(d + t.target_slots);
  p.labels_in = reinterpret_cast<const std::int32_t*>(d + t.labels);
  p.values_in = reinterpret_cast<const float*>(d + t.values);
  p.target_count = t.target_count;
  p.id_slots = reinterpret_cast<const std::uint32_t*>(d + t.id_slots);
  p.ids_in = reinterpret_cast<const std::uint64_t*>(d + t.ids);
  p.id_count = t.id_count;
  p.attributes = b.attributes.get();
  p.attribute_words = attribute_words_;
  p.attribute_slots = reinterpret_cast<const std::uint32_t*>(d + t.attribute_slots);
  p.attributes_in = reinterpret_cast<const std::uint32_t*>(d + t.attributes);
  p.attribute_count = attribute_words_ ? t.attribute_count : 0;
  launch_scatter(p, update_);
  if (reduced_pairs_ && t.vector_count) {
    ReduceParams r;
    r.reduced = b.reduced.get();
    r.meta = b.reduced_meta.get();
    r.pairs = reduced_pairs_;
    r.format = config_.reduced_format;
    r.dim = p.dim;
    r.vector_slots = p.vector_slots;
    r.vectors_in = p.vectors_in;
    r.vector_count = t.vector_count;
    launch_reduce(r, update_);
  }
}

int DeviceStore::write_back(const ResolvedBatch& batch, std::uint64_t epoch) {
  const int back_index = 1 - front_;
  DeviceBuffer& back = buffers_[back_index];
  check_cuda(cudaStreamWaitEvent(update_, back.last_read.get()), "cudaStreamWaitEvent(back buffer readers)");
  scatter(batches_[previous_], back);  // what the front buffer got last time
  DeviceBatch& next = batches_[1 - previous_];
  upload(batch, next);
  scatter(next, back);
  previous_ = 1 - previous_;
  previous_slots_ = 0;
  for (const auto* written : {&batch.vector_slots, &batch.target_slots, &batch.id_slots, &batch.attribute_slots}) {
    for (const std::uint32_t slot : *written) previous_slots_ = std::max<std::size_t>(previous_slots_, std::size_t(slot) + 1);
  }
  back.slot_count = batch.slot_count;
  back.epoch = epoch;
  note_norms(batch);
  upload_view(back);
  back.written.record(update_);
  return back_index;
}

int DeviceStore::write_back_targets(std::uint32_t count, std::uint64_t epoch,
                                    const std::function<void(std::uint32_t*, float*)>& fill,
                                    const std::function<bool()>& accept) {
  if (count > batch_capacity_) {
    throw Error(concat("DeviceStore::write_back_targets: ", count, " writes exceed the reserved ", batch_capacity_));
  }
  const int back_index = 1 - front_;
  DeviceBuffer& back = buffers_[back_index];
  const std::uint32_t slot_count = buffers_[front_].slot_count;  // no slot changes
  // The other batch slot held the batch before that, already scattered into both buffers
  // earlier on this stream: the kernels below overwrite it in stream order. Neither buffer
  // changes until `accept` has taken the rows (a refused batch leaves this slot unreferenced).
  DeviceBatch& next = batches_[1 - previous_];
  BatchLayout& t = next.layout;
  t = BatchLayout{};
  next.inserts = 0;
  t.target_count = count;
  t.target_slots = 0;
  t.values = align_up(std::size_t(count) * 4, 16);
  t.labels = t.values;  // no labels in a store of target values
  t.vector_slots = t.vectors = t.id_slots = t.ids = t.attribute_slots = t.attributes =
      t.values + std::size_t(count) * outputs_ * 4;
  t.empty = false;
  if (t.vector_slots > next.data.bytes()) {
    throw Error(concat("DeviceStore::write_back_targets: ", count, " rows of ", outputs_, " values exceed the batch's ",
                       next.data.bytes(), " bytes"));
  }
  fill(reinterpret_cast<std::uint32_t*>(next.data.get() + t.target_slots), reinterpret_cast<float*>(next.data.get() + t.values));
  if (!accept()) return -1;
  check_cuda(cudaStreamWaitEvent(update_, back.last_read.get()), "cudaStreamWaitEvent(back buffer readers)");
  scatter(batches_[previous_], back);  // what the front buffer got last time
  scatter(next, back);
  previous_ = 1 - previous_;
  previous_slots_ = slot_count;
  back.slot_count = slot_count;
  back.epoch = epoch;
  upload_view(back);
  back.written.record(update_);
  return back_index;
}

}  // namespace streamknn::detail::gpu
