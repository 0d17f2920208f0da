// The journal: header and records (format in docs/durability.md), appends, restarts, replay.
#include "core/checkpoint_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>

#include "core/check.hpp"
#include "core/checkpoint.hpp"
#include "core/checkpoint_crc.hpp"
#include "core/metric_space.hpp"

namespace streamknn::detail {

namespace {

constexpr char kMagic[8] = {'S', 'K', 'N', 'N', 'J', 'R', 'N', 'L'};
constexpr std::size_t kHeaderBytes = 48;
constexpr std::size_t kRecordHeaderBytes = 24;
constexpr std::uint32_t kRecordTag = 0x44434552u;  // "RECD"


std::size_t outputs_of(const StoreConfig& c) { return c.target.value_count(); }
bool classes_of(const StoreConfig& c) { return c.target.kind == TargetSpec::Kind::Classes; }

/// Version 2 keeps the attribute words per point in the metric field's upper half (0 in version 1,
/// so a version-1 header of a store without attributes reads the same).
void make_header(unsigned char* h, const StoreConfig& config, std::uint64_t base, std::uint32_t version) {
  std::memset(h, 0, kHeaderBytes);
  std::memcpy(h, kMagic, sizeof kMagic);
  put<std::uint32_t>(h + 8, version);
  put<std::uint32_t>(h + 12, kEndianMark);
  put<std::uint64_t>(h + 16, base);
  put<std::uint32_t>(h + 24, std::uint32_t(config.dim));
  put<std::uint32_t>(h + 28, std::uint32_t(config.metric) | std::uint32_t(config.attribute_words) << 16);
  put<std::uint32_t>(h + 32, std::uint32_t(config.target.kind));
  put<std::uint32_t>(h + 36, config.target.count);
  put<std::uint32_t>(h + 40, std::uint32_t(stored_dim(config.metric, config.dim)));
  put<std::uint32_t>(h + 44, crc32c(h, 44));
}

/// Bytes of a record's payload for these channel sizes: version 1 has four counts and no
/// attribute channel, version 2 five counts and the attribute channel last.
std::uint64_t payload_bytes(std::uint64_t nvec, std::uint64_t ntarget, std::uint64_t nid, std::uint64_t nattr,
                            std::size_t sdim, bool classes, std::size_t outputs, std::size_t words,
                            std::uint32_t version) {
  const std::uint64_t base = nvec * (4 + 4 * sdim) + ntarget * (4 + (classes ? 4 : 4 * outputs)) + nid * 12;
  return version == 1 ? 16 + base : 20 + base + nattr * (4 + 4 * std::uint64_t(words));
}
std::uint32_t counts_bytes(std::uint32_t version) { return version == 1 ? 16 : 20; }

/// Encodes a record (header and payload) into out.
void encode_record(std::uint64_t epoch, const ResolvedBatch& b, const StoreConfig& config, std::uint32_t version,
                   std::vector<unsigned char>& out) {
  const std::size_t sdim = stored_dim(config.metric, config.dim), outputs = outputs_of(config);
  const std::size_t words = config.attribute_words;
  const bool classes = classes_of(config);
  const std::uint64_t length = payload_bytes(b.vector_slots.size(), b.target_slots.size(), b.id_slots.size(),
                                             b.attribute_slots.size(), sdim, classes, outputs, words, version);
  out.resize(kRecordHeaderBytes + length);
  unsigned char* p = out.data();
  put<std::uint32_t>(p, kRecordTag);
  put<std::uint64_t>(p + 8, length);
  put<std::uint64_t>(p + 16, epoch);
  unsigned char* q = p + kRecordHeaderBytes;
  auto bytes = [&](const void* src, std::size_t n) {
    if (n) std::memcpy(q, src, n);
    q += n;
  };
  const std::uint32_t counts[5] = {b.slot_count, std::uint32_t(b.vector_slots.size()),
                                   std::uint32_t(b.target_slots.size()), std::uint32_t(b.id_slots.size()),
                                   std::uint32_t(b.attribute_slots.size())};
  bytes(counts, counts_bytes(version));
  bytes(b.vector_slots.data(), b.vector_slots.size() * 4);
  bytes(b.vectors.data(), b.vector_slots.size() * sdim * 4);
  bytes(b.target_slots.data(), b.target_slots.size() * 4);
  if (classes) {
    bytes(b.labels.data(), b.target_slots.size() * 4);
  } else {
    bytes(b.values.data(), b.target_slots.size() * outputs * 4);
  }
  bytes(b.id_slots.data(), b.id_slots.size() * 4);
  bytes(b.ids.data(), b.id_slots.size() * 8);
  if (version != 1) {
    bytes(b.attribute_slots.data(), b.attribute_slots.size() * 4);
    bytes(b.attributes.data(), b.attribute_slots.size() * words * 4);
  }
  put<std::uint32_t>(p + 4, crc32c(p + 8, kRecordHeaderBytes - 8 + length));
}

struct Scan {
  std::uint64_t base = 0, last = 0;  ///< epochs: the journal starts after base; last record's
  std::uint64_t valid_end = kHeaderBytes;
  std::size_t records = 0;
  bool torn = false;
  std::uint32_t version = kJournalFormatVersion;
};

using Visit = std::function<void(std::uint64_t epoch, const ResolvedBatch& batch, std::size_t index, std::uint64_t at)>;

bool zeros_from(const ByteSource& in, std::uint64_t at) {
  unsigned char buf[4096];
  while (at < in.size()) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(sizeof buf, in.size() - at));
    in.read(at, buf, n);
    if (std::any_of(buf, buf + n, [](unsigned char c) { return c != 0; })) return false;
    at += n;
  }
  return true;
}

void check_header(const ByteSource& in, const char* caller, const StoreConfig& config, Scan& scan) {
  auto fail = [&](std::uint64_t at, const std::string& what) { fail_checkpoint(caller, in.name(), "header", at, what); };
  if (in.size() < kHeaderBytes) fail(in.size(), concat("the file holds ", in.size(), " bytes, fewer than the 48-byte header"));
  unsigned char h[kHeaderBytes];
  in.read(0, h, sizeof h);
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) fail(0, "not a streamknn journal (no SKNNJRNL magic)");
  const auto mark = get<std::uint32_t>(h + 12);
  if (mark == kSwappedEndianMark) fail(12, "written on a machine of the other byte order");
  if (mark != kEndianMark) fail(12, "the byte-order mark is corrupted");
  const std::uint32_t version = get<std::uint32_t>(h + 8);
  if (version != kJournalFormatVersion && version != 1) {
    fail(8, concat("format version ", version, "; this library reads versions ", kJournalFormatVersion, " and 1"));
  }
  if (crc32c(h, 44) != get<std::uint32_t>(h + 44)) fail(44, "checksum mismatch: the header is corrupted");
  scan.version = version;
  unsigned char want[kHeaderBytes];
  make_header(want, config, 0, version);
  if (std::memcmp(h + 24, want + 24, 20) != 0) {
    fail(24, concat("the journal is of another store (dim ", get<std::uint32_t>(h + 24), ", metric ",
                    get<std::uint32_t>(h + 28) & 0xffffu, ", attribute words ", get<std::uint32_t>(h + 28) >> 16,
                    ", target kind ", get<std::uint32_t>(h + 32), " x ",
                    get<std::uint32_t>(h + 36), ")"));
  }
  scan.base = scan.last = get<std::uint64_t>(h + 16);
}

/// Decodes a payload whose length matched its counts.
void decode_payload(const unsigned char* q, const StoreConfig& config, std::uint32_t version, ResolvedBatch& b) {
  const std::size_t sdim = stored_dim(config.metric, config.dim), outputs = outputs_of(config);
  const bool classes = classes_of(config);
  b.slot_count = get<std::uint32_t>(q);
  const std::size_t nv = get<std::uint32_t>(q + 4), nt = get<std::uint32_t>(q + 8), ni = get<std::uint32_t>(q + 12);
  const std::size_t na = version == 1 ? 0 : get<std::uint32_t>(q + 16);
  q += counts_bytes(version);
  auto take = [&](auto& v, std::size_t n) {
    v.resize(n);
    if (n) std::memcpy(v.data(), q, n * sizeof(v[0]));
    q += n * sizeof(v[0]);
  };
  take(b.vector_slots, nv);
  take(b.vectors, nv * sdim);
  take(b.target_slots, nt);
  take(b.labels, classes ? nt : 0);
  take(b.values, classes ? 0 : nt * outputs);
  take(b.id_slots, ni);
  take(b.ids, ni);
  take(b.attribute_slots, na);
  take(b.attributes, na * config.attribute_words);
}

/// Reads every whole record after the header, in order, calling visit; stops at a torn tail.
Scan scan_journal(const ByteSource& in, const char* caller, const StoreConfig& config, const Visit& visit) {
  Scan scan;
  check_header(in, caller, config, scan);
  const std::size_t sdim = stored_dim(config.metric, config.dim), outputs = outputs_of(config);
  const bool classes = classes_of(config);
  std::vector<unsigned char> payload;
  ResolvedBatch batch;
  std::uint64_t at = kHeaderBytes;
  while (at < in.size()) {
    const std::string name = concat("record ", scan.records);
    auto fail = [&](std::uint64_t where, const std::string& what) { fail_checkpoint(caller, in.name(), name, where, what); };
    // A record that runs into the end of the file, or a tail of zeros (blocks the file system
    // allocated before the data reached them), is a write the crash cut short: torn, dropped.
    const std::uint64_t room = in.size() - at;
    if (room < kRecordHeaderBytes) {
      scan.torn = true;
      break;
    }
    unsigned char h[kRecordHeaderBytes];
    in.read(at, h, sizeof h);
    const auto length = get<std::uint64_t>(h + 8), epoch = get<std::uint64_t>(h + 16);
    const bool tagged = get<std::uint32_t>(h) == kRecordTag;
    const bool fits = length <= room - kRecordHeaderBytes;
    bool sound = false;
    if (tagged && fits) {
      payload.resize(static_cast<std::size_t>(length));
      in.read(at + kRecordHeaderBytes, payload.data(), payload.size());
      const std::uint32_t crc = crc32c(payload.data(), payload.size(), crc32c(h + 8, kRecordHeaderBytes - 8));
      sound = crc == get<std::uint32_t>(h + 4);
    }
    if (!sound) {
      const bool runs_to_end = tagged && (!fits || at + kRecordHeaderBytes + length == in.size());
      if (runs_to_end || zeros_from(in, at)) {
        scan.torn = true;
        break;
      }
      fail(tagged ? at + 4 : at, tagged ? "checksum mismatch with records after it: the journal is corrupted"
                      : "no record tag: the journal is corrupted");
    }
    if (length < counts_bytes(scan.version)) {
      fail(at + 8, concat("a payload of ", length, " bytes is shorter than its counts"));
    }
    const std::uint64_t expect =
        payload_bytes(get<std::uint32_t>(payload.data() + 4), get<std::uint32_t>(payload.data() + 8),
                      get<std::uint32_t>(payload.data() + 12),
                      scan.version == 1 ? 0 : get<std::uint32_t>(payload.data() + 16), sdim, classes, outputs,
                      config.attribute_words, scan.version);
    if (expect != length) fail(at + 8, concat("the payload holds ", length, " bytes where its counts imply ", expect));
    if (epoch != scan.last + 1) fail(at + 16, concat("epoch ", epoch, " follows epoch ", scan.last, " (records missing)"));
    decode_payload(payload.data(), config, scan.version, batch);
    visit(epoch, batch, scan.records, at);
    scan.last = epoch;
    ++scan.records;
    at += kRecordHeaderBytes + length;
    scan.valid_end = at;
  }
  return scan;
}

[[noreturn]] void fail_io(const std::string& path, const char* what, int err) {
  throw CheckpointError(concat("ReferenceSet journal: ", path, ": ", what, ": ", std::strerror(err)), path, "", 0);
}

}  // namespace

Journal::Journal(const std::string& path, const StoreConfig& config, std::uint64_t epoch, const JournalOptions& options)
    : path_(path), config_(config), options_(options) {
  const char* caller = "ReferenceSet::open_journal";
  if (path.empty()) fail_argument(caller, ": the path is empty");
  bool exists = ::access(path.c_str(), F_OK) == 0;
  if (exists) {
    const FileSource in(path, caller);
    if (in.size() == 0) {
      exists = false;
    } else {
      const Scan scan = scan_journal(in, caller, config, [](std::uint64_t, const ResolvedBatch&, std::size_t, std::uint64_t) {});
      version_ = scan.version;  // records appended to a version-1 journal stay version 1
      if (scan.last != epoch) {
        throw CheckpointError(concat(caller, ": ", path, ": the journal ends at epoch ", scan.last,
                                     " but the store is at epoch ", epoch,
                                     "; load it with its checkpoint first, or remove it (save() first) to start anew"),
                              path, "", scan.valid_end);
      }
      end_ = scan.valid_end;
      open_for_append();
      if (scan.torn && ::ftruncate(fd_, off_t(end_)) != 0) fail_io(path, "cannot cut the torn last record", errno);
    }
  }
  if (!exists) {
    unsigned char h[kHeaderBytes];
    make_header(h, config, epoch, version_);
    write_file_atomically(path, caller, [&](ByteSink& out) { out.write(h, sizeof h); });
    end_ = kHeaderBytes;
    open_for_append();
  }
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

void Journal::open_for_append() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) fail_io(path_, "cannot open for appending", errno);
}

void Journal::append(std::uint64_t epoch, const ResolvedBatch& batch) {
  encode_record(epoch, batch, config_, version_, scratch_);
  std::size_t done = 0;
  while (done < scratch_.size()) {
    const ssize_t w = ::pwrite(fd_, scratch_.data() + done, scratch_.size() - done, off_t(end_ + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      (void)::ftruncate(fd_, off_t(end_));  // the next reader must not find half a record mid-file
      fail_io(path_, "cannot append a record", err);
    }
    done += std::size_t(w);
  }
  if (options_.sync_each_publish && ::fdatasync(fd_) != 0) {
    const int err = errno;
    (void)::ftruncate(fd_, off_t(end_));
    fail_io(path_, "cannot fdatasync a record", err);
  }
  end_ += scratch_.size();
}

void Journal::restart(std::uint64_t epoch, std::uint64_t from) {
  std::vector<unsigned char> kept(static_cast<std::size_t>(end_ - from));
  {
    const FileSource in(path_, "ReferenceSet::save (journal)");
    if (in.size() < end_) fail_io(path_, "shrank while open", EIO);
    in.read(from, kept.data(), kept.size());
  }
  unsigned char h[kHeaderBytes];
  make_header(h, config_, epoch, version_);
  write_file_atomically(path_, "ReferenceSet::save (journal)", [&](ByteSink& out) {
    out.write(h, sizeof h);
    if (!kept.empty()) out.write(kept.data(), kept.size());
  });
  end_ = kHeaderBytes + kept.size();
  open_for_append();
}

void replay_journal(const std::string& path, const char* caller, const StoreConfig& config, StoreImage& image,
                    IdIndex& index, LoadReport& report) {
  const FileSource in(path, caller);
  const std::size_t sdim = stored_dim(config.metric, config.dim), outputs = outputs_of(config);
  const bool classes = classes_of(config);
  bool started = false;
  const Scan scan = scan_journal(in, caller, config, [&](std::uint64_t epoch, const ResolvedBatch& b, std::size_t n,
                                                         std::uint64_t at) {
    const std::string name = concat("record ", n);
    auto fail = [&](const std::string& what) { fail_checkpoint(caller, path, name, at, what); };
    if (epoch <= image.epoch) {
      ++report.skipped;
      return;
    }
    if (!started && epoch != image.epoch + 1) {
      fail(concat("the journal's first record past the checkpoint is epoch ", epoch, " but the checkpoint holds epoch ",
                  image.epoch, ": the epochs between are missing"));
    }
    started = true;
    // Every slot stays below what the batch could reach: the slots before it plus one per id write.
    const std::uint64_t bound = std::uint64_t(std::max(image.slot_count, b.slot_count)) + b.id_slots.size();
    for (const auto* slots : {&b.vector_slots, &b.target_slots, &b.id_slots, &b.attribute_slots}) {
      for (const std::uint32_t s : *slots) {
        if (s >= bound) fail(concat("slot ", s, " lies beyond the store (corrupted)"));
      }
    }
    if (b.slot_count > image.slot_count + b.id_slots.size()) fail("the slot count grows beyond its inserts (corrupted)");
    if (first_non_finite(b.vectors) != b.vectors.size() || first_non_finite(b.values) != b.values.size()) {
      fail("a vector or target value is not finite (corrupted)");
    }
    for (const std::int32_t label : b.labels) {
      if (label < 0 || std::uint32_t(label) >= config.target.count) fail(concat("label ", label, " is out of range"));
    }
    // Ids: first every written slot's old id leaves, then the new ones arrive (an id may move
    // from one slot to another within a batch: erased, then inserted again).
    if (image.ids.size() < bound) image.resize(static_cast<std::size_t>(bound), sdim, classes, outputs);
    for (const std::uint32_t s : b.id_slots) {
      if (image.ids[s] != kInvalidId) index.erase(image.ids[s]);
    }
    for (std::size_t i = 0; i < b.id_slots.size(); ++i) {
      if (b.ids[i] != kInvalidId && !index.insert(b.ids[i], b.id_slots[i])) {
        fail(concat("id ", b.ids[i], " is inserted twice (corrupted)"));
      }
    }
    if (!image.apply(b, sdim, classes, outputs)) fail("a point lies above the slot count (corrupted)");
    image.epoch = epoch;
    if (image.slot_count > 0 && image.ids[image.slot_count - 1] == kInvalidId) {
      fail("the top slot is free (corrupted)");
    }
    if (index.size() > image.slot_count) fail("more points than slots (corrupted)");
    ++report.replayed;
  });
  if (scan.base > image.epoch) {
    fail_checkpoint(caller, path, "header", 16, concat("the journal starts after epoch ", scan.base,
                                                       " but the checkpoint holds epoch ", image.epoch,
                                                       ": the epochs between are missing"));
  }
  report.torn = scan.torn ? 1 : 0;
}

}  // namespace streamknn::detail
