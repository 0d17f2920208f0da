// streamknn/checkpoint.hpp — durable state: what ReferenceSet::save / load / open_journal take
// and report, the format versions, and the error a bad file raises.
//
// A checkpoint holds one published epoch (configuration, ids, vectors in stored form, targets)
// in the format docs/durability.md describes byte by byte; a journal holds the batches
// published after it. Threading: save() may run while producers push, queries run and another
// thread publishes (it copies one epoch, serialised with publish()). Errors: a file that is
// truncated, corrupted, of another format version or endianness throws CheckpointError naming
// the file, the section and the byte offset; an I/O failure throws CheckpointError naming the
// file and the system's reason. Loading never trusts a length or count before checking it.
//
//   store.save("state.skc");                                   // one consistent epoch
//   auto again = streamknn::ReferenceSet::load("state.skc", {.backend = BackendKind::Cpu});
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "streamknn/config.hpp"
#include "streamknn/error.hpp"

namespace streamknn {

/// Format version written into every checkpoint; load() reads it and version 1 (the same layout
/// without attribute words) and refuses any other.
inline constexpr std::uint32_t kCheckpointFormatVersion = 2;
/// Format version written into every new journal; replay reads it and version 1 (records without
/// an attribute channel; an existing version-1 journal is continued in version 1) and refuses any other.
inline constexpr std::uint32_t kJournalFormatVersion = 2;

/// A checkpoint or journal could not be written or read back. section() is "header", "CONF",
/// "IDS", "VECS", "TARG", "ATTR", "record <n>" (journal) or "" for an I/O failure of the whole
/// file; offset() is the byte offset in the file where the problem lies.
class CheckpointError : public Error {
 public:
  CheckpointError(const std::string& message, std::string path, std::string section, std::uint64_t offset)
      : Error(message), path_(std::move(path)), section_(std::move(section)), offset_(offset) {}
  const std::string& path() const noexcept { return path_; }
  const std::string& section() const noexcept { return section_; }
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::string path_;
  std::string section_;
  std::uint64_t offset_;
};

/// How load() rebuilds a store. The dimension, metric and target come from the checkpoint and
/// cannot change; each field set here replaces the saved value of that StoreConfig field.
struct LoadOptions {
  std::optional<BackendKind> backend;
  std::optional<int> cuda_device;
  std::optional<std::size_t> cpu_threads;
  std::optional<std::size_t> publish_threads;
  std::optional<std::size_t> queue_capacity;
  std::optional<std::size_t> capacity_hint;
  std::optional<SpatialIndex> spatial_index;
  std::optional<ReducedScreen> reduced_screen;  ///< not recorded in checkpoints: Auto unless given
  std::optional<ReducedFormat> reduced_format;  ///< not recorded in checkpoints: Float16 unless given
  std::optional<bool> debug;
  /// A journal (ReferenceSet::open_journal) to replay past the checkpoint's epoch; empty: none.
  std::string journal;
};

/// What load() found.
struct LoadReport {
  std::uint64_t checkpoint_epoch = 0;  ///< the epoch the checkpoint holds
  std::uint64_t epoch = 0;             ///< the loaded store's epoch, journal records included
  std::size_t replayed = 0;            ///< journal records applied (epochs past the checkpoint)
  std::size_t skipped = 0;             ///< journal records at or before the checkpoint's epoch
  std::size_t torn = 0;                ///< torn records dropped at the journal's end (0 or 1)
};

/// How an open journal writes. After publish() returns, its record has been handed to the
/// operating system (it survives the process being killed); with sync_each_publish it has also
/// reached the disk (fdatasync: it survives a power cut) before publish() returns.
struct JournalOptions {
  bool sync_each_publish = true;
};

}  // namespace streamknn
