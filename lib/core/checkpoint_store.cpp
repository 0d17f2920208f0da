// ReferenceSet::save / load / open_journal and the engine's side of them: one published epoch
// copied out under the publish lock, written without it; a store rebuilt from a checkpoint
// (and the journal past it) on either backend.
#include <new>

#include "core/check.hpp"
#include "core/checkpoint.hpp"
#include "core/checkpoint_journal.hpp"
#include "core/engine.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn {

namespace detail {

StoreImage Engine::snapshot(std::uint64_t* journal_mark, std::uint64_t* journal_opened) {
  std::lock_guard lock(publish_mutex_);
  StoreImage image;
  try {
    backend_->read_snapshot(image);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(concat("ReferenceSet::save: host memory exhausted copying ", size(), " points of dim ",
                             config_.dim, " out of the store"));
  }
  image.epoch = epoch();
  image.attribute_words = config_.attribute_words;
  if (config_.attribute_words > 0) {  // the engine's copy (engine_filters.cpp), free slots zero
    const std::size_t words = config_.attribute_words;
    image.attributes.assign(std::size_t(image.slot_count) * words, 0u);
    for (std::size_t s = 0; s < image.slot_count; ++s) {
      if (image.ids[s] == kInvalidId || (s + 1) * words > attributes_.size()) continue;
      std::copy_n(attributes_.data() + s * words, words, image.attributes.data() + s * words);
    }
  }
  if (journal_mark) *journal_mark = journal_ ? journal_->end() : 0;
  if (journal_opened) *journal_opened = journal_opened_;
  return image;
}

void Engine::save(const std::string& path) {
  // The copy is taken under the publish lock (one epoch, and publishes wait only for the copy),
  // the file written without it.
  std::uint64_t mark = 0, opened = 0;
  const StoreImage image = snapshot(&mark, &opened);
  write_file_atomically(path, "ReferenceSet::save", [&](ByteSink& out) { encode_checkpoint(config_, image, out); });
  std::lock_guard lock(publish_mutex_);
  if (journal_ && journal_opened_ == opened) journal_->restart(image.epoch, mark);
}

std::vector<std::byte> Engine::save_bytes() {
  const StoreImage image = snapshot(nullptr, nullptr);
  MemorySink sink;
  encode_checkpoint(config_, image, sink);
  return std::move(sink.bytes);
}

void Engine::open_journal(const std::string& path, const JournalOptions& options) {
  std::lock_guard lock(publish_mutex_);
  journal_.reset();
  journal_ = std::make_unique<Journal>(path, config_, epoch(), options);
  ++journal_opened_;
}

void Engine::close_journal() noexcept {
  std::lock_guard lock(publish_mutex_);
  journal_.reset();
}

void Engine::journal_batch(std::uint64_t epoch, const ResolvedBatch& batch) {
  try {
    journal_->append(epoch, batch);
  } catch (const CheckpointError& e) {
    const std::string path = journal_->path();
    journal_.reset();
    throw CheckpointError(concat(e.what(), "; epoch ", epoch, " is published but not journaled, and the journal is "
                                 "closed (save a checkpoint, then open a journal again)"),
                          path, e.section(), e.offset());
  }
}

}  // namespace detail

namespace {

StoreConfig with_options(StoreConfig config, const LoadOptions& o) {
  if (o.backend) config.backend = *o.backend;
  if (o.cuda_device) config.cuda_device = *o.cuda_device;
  if (o.cpu_threads) config.cpu_threads = *o.cpu_threads;
  if (o.publish_threads) config.publish_threads = *o.publish_threads;
  if (o.queue_capacity) config.queue_capacity = *o.queue_capacity;
  if (o.capacity_hint) config.capacity_hint = *o.capacity_hint;
  if (o.spatial_index) config.spatial_index = *o.spatial_index;
  if (o.reduced_screen) config.reduced_screen = *o.reduced_screen;
  if (o.reduced_format) config.reduced_format = *o.reduced_format;
  if (o.debug) config.debug = *o.debug;
  return config;
}

std::unique_ptr<detail::Engine> load_engine(const detail::ByteSource& in, const char* caller,
                                            const LoadOptions& options, LoadReport* report) {
  StoreConfig config;
  detail::StoreImage image;
  detail::IdIndex index;
  LoadReport r;
  try {
    detail::decode_checkpoint(in, caller, config, image, index);
    r.checkpoint_epoch = image.epoch;
    if (!options.journal.empty()) detail::replay_journal(options.journal, caller, config, image, index, r);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(detail::concat(caller, ": ", in.name(), ": host memory exhausted reading it"));
  }
  r.epoch = image.epoch;
  auto engine = std::make_unique<detail::Engine>(with_options(config, options), std::move(image), std::move(index));
  if (report) *report = r;
  return engine;
}

}  // namespace

ReferenceSet::ReferenceSet(std::unique_ptr<detail::Engine> engine) : engine_(std::move(engine)) {}

void ReferenceSet::save(const std::string& path) const { engine_->save(path); }

std::vector<std::byte> ReferenceSet::save_bytes() const { return engine_->save_bytes(); }

ReferenceSet ReferenceSet::load(const std::string& path, const LoadOptions& options, LoadReport* report) {
  const char* caller = "ReferenceSet::load";
  const detail::FileSource in(path, caller);
  return ReferenceSet(load_engine(in, caller, options, report));
}

ReferenceSet ReferenceSet::load_bytes(std::span<const std::byte> bytes, const LoadOptions& options,
                                      LoadReport* report) {
  const char* caller = "ReferenceSet::load_bytes";
  const detail::MemorySource in(bytes, "<bytes>");
  return ReferenceSet(load_engine(in, caller, options, report));
}

void ReferenceSet::open_journal(const std::string& path, const JournalOptions& options) {
  engine_->open_journal(path, options);
}

void ReferenceSet::close_journal() noexcept { engine_->close_journal(); }

}  // namespace streamknn
