// The checkpoint format (docs/durability.md) and the byte streams it is written to and read
// from: encode/decode a StoreImage plus its StoreConfig, files written atomically (temporary
// file in the same folder, fsync, rename, fsync of the folder), and files or buffers read
// with every length checked against what is really there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/checkpoint_image.hpp"
#include "core/id_index.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/config.hpp"

namespace streamknn::detail {

/// Little-endian fields of the checkpoint and journal formats, written and read at a byte offset.
template <class T>
void put(unsigned char* at, T value) {
  std::memcpy(at, &value, sizeof value);
}
template <class T>
T get(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

/// Where encoded bytes go.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, std::size_t size) = 0;
};

/// Where encoded bytes come from: size() bytes, read at any offset.
class ByteSource {
 public:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const noexcept = 0;
  /// Reads size bytes at offset (offset + size <= size(), checked by the caller).
  virtual void read(std::uint64_t offset, void* out, std::size_t size) const = 0;
  /// The file's path (or "<buffer>"), for error messages.
  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
};

class MemorySink final : public ByteSink {
 public:
  void write(const void* data, std::size_t size) override {
    const auto* p = static_cast<const std::byte*>(data);
    bytes.insert(bytes.end(), p, p + size);
  }
  std::vector<std::byte> bytes;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::span<const std::byte> bytes, std::string name) : ByteSource(std::move(name)), bytes_(bytes) {}
  std::uint64_t size() const noexcept override { return bytes_.size(); }
  void read(std::uint64_t offset, void* out, std::size_t size) const override;

 private:
  std::span<const std::byte> bytes_;
};

/// A file opened for reading; throws CheckpointError (naming the path) if it cannot be.
class FileSource final : public ByteSource {
 public:
  FileSource(const std::string& path, const char* caller);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  std::uint64_t size() const noexcept override { return size_; }
  void read(std::uint64_t offset, void* out, std::size_t size) const override;

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
  const char* caller_;
};

/// Writes path through body: into a new temporary file beside it, then fsync, rename over
/// path, fsync of the folder. A crash at any point leaves path as it was or wholly new; the
/// temporary file is removed on every error (a crash may leave one, named path.tmp.XXXXXX).
void write_file_atomically(const std::string& path, const char* caller, const std::function<void(ByteSink&)>& body);

/// Throws CheckpointError("<caller>: <file>: <section> at byte <offset>: <what>").
[[noreturn]] void fail_checkpoint(const char* caller, const std::string& file, const std::string& section,
                                  std::uint64_t offset, const std::string& what);

/// The checkpoint of one epoch.
void encode_checkpoint(const StoreConfig& config, const StoreImage& image, ByteSink& out);
/// Reads and checks a checkpoint: header, then every section's tag, length and checksum, then
/// its contents (ids unique, targets in range, values finite, the top slot in use). Throws
/// CheckpointError naming the source, the section and the byte offset. index gets id -> slot.
void decode_checkpoint(const ByteSource& in, const char* caller, StoreConfig& config, StoreImage& image,
                       IdIndex& index);

/// Little-endian mark as the writer's CPU stores it; read back swapped on another endianness.
inline constexpr std::uint32_t kEndianMark = 0x01020304u;
inline constexpr std::uint32_t kSwappedEndianMark = 0x04030201u;

}  // namespace streamknn::detail
