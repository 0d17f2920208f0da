// The journal of published batches (docs/durability.md): a 48-byte header naming the epoch it
// starts after, then one record per publish that changed the store: the resolved batch (what
// the publish really wrote, slot by slot) with its epoch and a CRC-32C. Appended by the
// publisher under the engine's publish lock; replayed by load() past a checkpoint's epoch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint_image.hpp"
#include "core/id_index.hpp"
#include "core/resolved_batch.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail {

class Journal {
 public:
  /// Opens the journal at path for a store of this configuration at `epoch`: creates it when
  /// absent (or empty); continues it when its last record is that epoch (dropping a torn last
  /// record first). Throws CheckpointError when it belongs to another store or epoch.
  Journal(const std::string& path, const StoreConfig& config, std::uint64_t epoch, const JournalOptions& options);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  /// Appends the batch published as epoch (and fdatasyncs with sync_each_publish). On failure
  /// the file is cut back to its last whole record and CheckpointError is thrown.
  void append(std::uint64_t epoch, const ResolvedBatch& batch);
  /// Bytes in the file: where the next record starts.
  std::uint64_t end() const noexcept { return end_; }
  /// After a checkpoint of `epoch` is on disk: replaces the file (atomically) by a journal that
  /// starts after that epoch and keeps the records from byte `from` on (published since).
  void restart(std::uint64_t epoch, std::uint64_t from);
  const std::string& path() const noexcept { return path_; }

 private:
  void open_for_append();

  std::string path_;
  StoreConfig config_;
  JournalOptions options_;
  int fd_ = -1;
  std::uint64_t end_ = 0;
  std::vector<unsigned char> scratch_;
  std::uint32_t version_ = kJournalFormatVersion;  ///< the file's format version (1: an older journal continued)
};

/// Replays the journal at path onto a checkpoint's image and id index: records past
/// image.epoch are applied in order; a torn last record is dropped and counted in report.
/// Throws CheckpointError (naming the journal, the record and the byte offset) for a journal
/// of another store, one that starts after the image's epoch, or a corrupted record.
void replay_journal(const std::string& path, const char* caller, const StoreConfig& config, StoreImage& image,
                    IdIndex& index, LoadReport& report);

}  // namespace streamknn::detail
