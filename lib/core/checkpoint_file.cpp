// Files for checkpoints and journals: atomic replacement (temporary file, fsync, rename, fsync
// of the folder) and reads that never go past what the file holds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/check.hpp"
#include "core/checkpoint.hpp"

namespace streamknn::detail {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail_io(const char* caller, const std::string& path, const std::string& what, int err) {
  throw CheckpointError(concat(caller, ": ", path, ": ", what, ": ", errno_text(err)), path, "", 0);
}

/// The folder holding path ("." for a bare name).
std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// Buffered writes to a file descriptor; errors name the path.
class FileSink final : public ByteSink {
 public:
  FileSink(int fd, const std::string& path, const char* caller) : fd_(fd), path_(path), caller_(caller) {
    buffer_.reserve(kBuffer);
  }
  void write(const void* data, std::size_t size) override {
    const auto* p = static_cast<const char*>(data);
    if (buffer_.size() + size > kBuffer) flush();
    if (size >= kBuffer) {
      write_all(p, size);
      return;
    }
    buffer_.insert(buffer_.end(), p, p + size);
  }
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

 private:
  static constexpr std::size_t kBuffer = std::size_t(1) << 20;
  void write_all(const char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t(1) << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_io(caller_, path_, "cannot write", errno);
      }
      p += w;
      n -= std::size_t(w);
    }
  }
  int fd_;
  const std::string& path_;
  const char* caller_;
  std::vector<char> buffer_;
};

}  // namespace

void fail_checkpoint(const char* caller, const std::string& file, const std::string& section, std::uint64_t offset,
                     const std::string& what) {
  std::string name = section;
  while (!name.empty() && name.back() == ' ') name.pop_back();  // the "IDS " tag
  const bool tag = name.size() <= 4 && !name.empty() &&
                   std::all_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  throw CheckpointError(concat(caller, ": ", file, ": ", name, tag ? " section" : "", " at byte ", offset, ": ", what),
                        file, name, offset);
}

void MemorySource::read(std::uint64_t offset, void* out, std::size_t size) const {
  if (size) std::memcpy(out, bytes_.data() + offset, size);
}

FileSource::FileSource(const std::string& path, const char* caller) : ByteSource(path), caller_(caller) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_io(caller, path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail_io(caller, path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw CheckpointError(concat(caller, ": ", path, ": not a regular file"), path, "", 0);
  }
  size_ = std::uint64_t(st.st_size);
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::read(std::uint64_t offset, void* out, std::size_t size) const {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t r = ::pread(fd_, p, std::min<std::size_t>(size, std::size_t(1) << 30), off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_io(caller_, name(), concat("cannot read at byte ", offset), errno);
    if (r == 0) fail_checkpoint(caller_, name(), "file", offset, "the file shrank while it was read");
    p += r;
    offset += std::uint64_t(r);
    size -= std::size_t(r);
  }
}

void write_file_atomically(const std::string& path, const char* caller, const std::function<void(ByteSink&)>& body) {
  if (path.empty()) fail_argument(caller, ": the path is empty");
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) fail_io(caller, path, concat("cannot create a temporary file in ", folder_of(path)), errno);
  auto abandon = [&] {
    ::close(fd);
    ::unlink(tmp.c_str());
  };
  try {
    FileSink sink(fd, path, caller);
    body(sink);
    sink.flush();
    // mkostemp creates the file 0600; a checkpoint is readable like any data file (0644).
    (void)::fchmod(fd, 0644);
    if (::fsync(fd) != 0) fail_io(caller, path, "cannot fsync the temporary file", errno);
  } catch (...) {
    abandon();
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_io(caller, path, "cannot close the temporary file", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_io(caller, path, "cannot rename the temporary file over it", err);
  }
  // The rename is durable once the folder's entry is on disk.
  const std::string folder = folder_of(path);
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail_io(caller, path, concat("cannot open its folder ", folder, " to fsync it"), errno);
  const int synced = ::fsync(dir);
  const int err = errno;
  ::close(dir);
  if (synced != 0 && err != EINVAL) fail_io(caller, path, concat("cannot fsync its folder ", folder), err);
}

}  // namespace streamknn::detail
