// The checkpoint format, version 2 (docs/durability.md has it byte by byte): a 48-byte header,
// then five sections (CONF, IDS, VECS, TARG, ATTR), each a 16-byte header (tag, CRC-32C of the
// payload, payload length) and its payload. Little-endian throughout. ATTR holds the attribute
// words per point (u32 W) and then slot_count x W words; version 1 is the same with W = 0, and
// is still read.
#include "core/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.hpp"
#include "core/checkpoint_crc.hpp"
#include "core/metric_space.hpp"
#include "streamknn/version.hpp"

namespace streamknn::detail {

namespace {

constexpr char kMagic[8] = {'S', 'K', 'N', 'N', 'C', 'K', 'P', 'T'};
constexpr std::size_t kHeaderBytes = 48;
constexpr std::size_t kSectionHeaderBytes = 16;
constexpr std::size_t kConfBytes = 80;
constexpr std::uint32_t kSectionCount = 5;
/// Header flag: an ORIG section (StoreConfig::origin, dim f64) follows ATTR. Files without an
/// origin keep flags 0 and five sections, readable by every version-1 reader.
constexpr std::uint32_t kFlagOrigin = 1;

constexpr std::uint32_t tag_of(const char (&name)[5]) {
  return std::uint32_t(std::uint8_t(name[0])) | std::uint32_t(std::uint8_t(name[1])) << 8 |
         std::uint32_t(std::uint8_t(name[2])) << 16 | std::uint32_t(std::uint8_t(name[3])) << 24;
}


void write_section(ByteSink& out, const char (&name)[5], const void* payload, std::size_t size) {
  unsigned char head[kSectionHeaderBytes];
  put<std::uint32_t>(head, tag_of(name));
  put<std::uint32_t>(head + 4, crc32c(payload, size));
  put<std::uint64_t>(head + 8, size);
  out.write(head, sizeof head);
  if (size) out.write(payload, size);
}

bool is_classes(const StoreConfig& c) { return c.target.kind == TargetSpec::Kind::Classes; }
std::size_t outputs_of(const StoreConfig& c) { return c.target.value_count(); }

/// Reads a checkpoint section by section, naming the source, section and offset in errors.
class Reader {
 public:
  Reader(const ByteSource& in, const char* caller) : in_(in), caller_(caller) {}

  [[noreturn]] void fail(const char* section, std::uint64_t offset, const std::string& what) const {
    fail_checkpoint(caller_, in_.name(), section, offset, what);
  }

  /// The payload length the section at offset_ declares (0 where the file ends before its header;
  /// section() then names the problem).
  std::uint64_t declared_length() const {
    if (in_.size() - offset_ < kSectionHeaderBytes) return 0;
    unsigned char head[kSectionHeaderBytes];
    in_.read(offset_, head, sizeof head);
    return get<std::uint64_t>(head + 8);
  }

  /// Reads the section at offset_ into payload (exactly `expected` bytes), checking its tag,
  /// length, room in the file and checksum; advances past it.
  void section(const char (&name)[5], void* payload, std::uint64_t expected) {
    const std::uint64_t at = offset_;
    if (in_.size() - at < kSectionHeaderBytes) {
      fail(name, at, concat("the file ends ", in_.size() - at, " bytes into the 16-byte section header (truncated)"));
    }
    unsigned char head[kSectionHeaderBytes];
    in_.read(at, head, sizeof head);
    const auto tag = get<std::uint32_t>(head), crc = get<std::uint32_t>(head + 4);
    const auto length = get<std::uint64_t>(head + 8);
    if (tag != tag_of(name)) {
      char seen[5] = {};
      std::memcpy(seen, head, 4);
      for (char& c : seen) c = (c >= 32 && c < 127) || c == 0 ? c : '?';
      fail(name, at, concat("expected the section tag '", name, "', found '", seen, "' (corrupted)"));
    }
    if (length != expected) {
      fail(name, at + 8, concat("the section holds ", length, " bytes where the configuration implies ", expected,
                                " (corrupted)"));
    }
    const std::uint64_t body = at + kSectionHeaderBytes;
    if (in_.size() - body < length) {
      fail(name, body, concat("the file ends after ", in_.size() - body, " of the section's ", length,
                              " bytes (truncated)"));
    }
    in_.read(body, payload, static_cast<std::size_t>(length));
    const std::uint32_t computed = crc32c(payload, static_cast<std::size_t>(length));
    if (computed != crc) {
      fail(name, at + 4, concat("checksum mismatch (stored 0x", std::hex, crc, ", computed 0x", computed, std::dec,
                                "): the section is corrupted"));
    }
    body_ = body;
    offset_ = body + length;
  }

  std::uint64_t body() const noexcept { return body_; }  ///< the last section's payload offset
  std::uint64_t offset() const noexcept { return offset_; }
  void skip_header() noexcept { offset_ = kHeaderBytes; }

 private:
  const ByteSource& in_;
  const char* caller_;
  std::uint64_t offset_ = 0;
  std::uint64_t body_ = 0;
};

void read_header(const ByteSource& in, const Reader& r, std::uint64_t& epoch, std::uint32_t& flags,
                 std::uint32_t& version_out) {
  if (in.size() < kHeaderBytes) {
    r.fail("header", in.size(), concat("the file holds ", in.size(), " bytes, fewer than the 48-byte header (truncated)"));
  }
  unsigned char h[kHeaderBytes];
  in.read(0, h, sizeof h);
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) r.fail("header", 0, "not a streamknn checkpoint (no SKNNCKPT magic)");
  const auto version = get<std::uint32_t>(h + 8), mark = get<std::uint32_t>(h + 12);
  if (mark == kSwappedEndianMark) {
    r.fail("header", 12, "written on a machine of the other byte order; this build reads little-endian checkpoints");
  }
  if (mark != kEndianMark) r.fail("header", 12, concat("the byte-order mark is 0x", std::hex, mark, " (corrupted)"));
  if (version != kCheckpointFormatVersion && version != 1) {
    r.fail("header", 8, concat("format version ", version, "; this library (", version_string(), ") reads version ",
                               kCheckpointFormatVersion, " and 1 (written by ", get<std::uint32_t>(h + 16), ".",
                               get<std::uint32_t>(h + 20), ".", get<std::uint32_t>(h + 24), ")"));
  }
  const std::uint32_t computed = crc32c(h, 44);
  if (computed != get<std::uint32_t>(h + 44)) {
    r.fail("header", 44, concat("checksum mismatch (stored 0x", std::hex, get<std::uint32_t>(h + 44), ", computed 0x",
                                computed, std::dec, "): the header is corrupted"));
  }
  version_out = version;
  flags = get<std::uint32_t>(h + 40);
  if ((flags & ~kFlagOrigin) != 0) r.fail("header", 40, "unknown flags set");
  const std::uint32_t sections = kSectionCount + ((flags & kFlagOrigin) ? 1 : 0);
  if (get<std::uint32_t>(h + 28) != sections) {
    r.fail("header", 28, concat(get<std::uint32_t>(h + 28), " sections where version ", version, " has ", sections,
                                (flags & kFlagOrigin) ? " (with an origin)" : ""));
  }
  epoch = get<std::uint64_t>(h + 32);
}

/// The CONF payload's fields, each checked against the limits the constructor enforces.
void parse_conf(const unsigned char* c, const Reader& r, std::uint64_t at, StoreConfig& config,
                std::uint32_t& slot_count, std::uint64_t& live) {
  const auto field = [&](std::size_t off, const std::string& what) { r.fail("CONF", at + off, what); };
  const auto dim = get<std::uint32_t>(c), metric = get<std::uint32_t>(c + 4);
  const auto kind = get<std::uint32_t>(c + 8), count = get<std::uint32_t>(c + 12);
  if (dim < 1 || dim > (1u << 20)) field(0, concat("dim=", dim, " is outside [1, 1048576]"));
  if (metric > std::uint32_t(Metric::Haversine)) field(4, concat("metric ", metric, " is not a known metric"));
  if (metric == std::uint32_t(Metric::Haversine) && dim != 2) field(0, concat("a haversine store has dim 2, not ", dim));
  if (kind > std::uint32_t(TargetSpec::Kind::Outputs)) field(8, concat("target kind ", kind, " is not a known kind"));
  const std::uint32_t limit = kind == 1 ? (1u << 16) : kind == 2 ? 4096u : 0u;
  if ((kind == 0 && count != 0) || (kind != 0 && (count < 1 || count > limit))) {
    field(12, concat("target count ", count, " is outside the limits of target kind ", kind));
  }
  config.dim = dim;
  config.metric = static_cast<Metric>(metric);
  config.target = {static_cast<TargetSpec::Kind>(kind), count};
  if (get<std::uint32_t>(c + 16) != stored_dim(config.metric, dim)) {
    field(16, concat("stored dim ", get<std::uint32_t>(c + 16), " does not match dim ", dim, " and the metric"));
  }
  slot_count = get<std::uint32_t>(c + 20);
  live = get<std::uint64_t>(c + 24);
  if (live > slot_count) field(24, concat(live, " points in ", slot_count, " slots"));
  config.capacity_hint = get<std::uint64_t>(c + 32);
  config.queue_capacity = get<std::uint64_t>(c + 40);
  config.cpu_threads = get<std::uint64_t>(c + 48);
  config.publish_threads = get<std::uint64_t>(c + 56);
  config.cuda_device = get<std::int32_t>(c + 64);
  const auto backend = get<std::uint32_t>(c + 68), spatial = get<std::uint32_t>(c + 72), debug = get<std::uint32_t>(c + 76);
  if (config.capacity_hint > std::numeric_limits<std::uint32_t>::max()) field(32, "capacity_hint is out of range");
  if (config.queue_capacity < 1 || config.queue_capacity > (1u << 24)) field(40, "queue_capacity is out of range");
  if (config.cpu_threads > kMaxCpuThreads) field(48, "cpu_threads is out of range");
  if (config.publish_threads > kMaxCpuThreads) field(56, "publish_threads is out of range");
  if (config.cuda_device < 0) field(64, "cuda_device is negative");
  if (backend > std::uint32_t(BackendKind::Cuda)) field(68, concat("backend ", backend, " is not a known backend"));
  if (spatial > std::uint32_t(SpatialIndex::Off)) field(72, concat("spatial_index ", spatial, " is not a known value"));
  if (debug > 1) field(76, concat("debug ", debug, " is neither 0 nor 1"));
  config.backend = static_cast<BackendKind>(backend);
  config.spatial_index = static_cast<SpatialIndex>(spatial);
  config.debug = debug != 0;
}

/// The ATTR section: u32 W (0 to kMaxAttributeWords; 0 in version 1), then slot_count x W words.
void read_attributes(Reader& r, const ByteSource& in, std::uint32_t version, StoreConfig& config, StoreImage& image) {
  const std::size_t n = image.slot_count;
  const std::uint64_t length = r.declared_length();
  const std::uint64_t words = length >= 4 && n > 0 ? (length - 4) / (4 * std::uint64_t(n)) : 0;
  const std::uint64_t expected = 4 + 4 * std::uint64_t(n) * std::min<std::uint64_t>(words, kMaxAttributeWords);
  if (expected > in.size()) r.fail("ATTR", r.offset(), "the section is longer than the file (corrupted)");
  std::vector<std::uint32_t> attr(static_cast<std::size_t>(expected / 4));
  r.section("ATTR", attr.data(), expected);
  if (attr[0] > kMaxAttributeWords || (n > 0 && attr[0] != words)) {
    r.fail("ATTR", r.body(), concat(attr[0], " attribute words per point where the section's length implies ", words,
                                    " (at most ", kMaxAttributeWords, ")"));
  }
  if (version == 1 && attr[0] != 0) {
    r.fail("ATTR", r.body(), concat(attr[0], " attribute words per point; version 1 stores none"));
  }
  config.attribute_words = attr[0];
  image.attribute_words = attr[0];
  image.attributes.assign(attr.begin() + 1, attr.end());
}

/// Index of the first non-finite float of data, or data.size().
std::size_t first_bad(std::span<const float> data) { return first_non_finite(data); }

}  // namespace

void encode_checkpoint(const StoreConfig& config, const StoreImage& image, ByteSink& out) {
  const std::size_t sdim = stored_dim(config.metric, config.dim), outputs = outputs_of(config);
  unsigned char h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, sizeof kMagic);
  put<std::uint32_t>(h + 8, kCheckpointFormatVersion);
  put<std::uint32_t>(h + 12, kEndianMark);
  put<std::uint32_t>(h + 16, std::uint32_t(kVersionMajor));
  put<std::uint32_t>(h + 20, std::uint32_t(kVersionMinor));
  put<std::uint32_t>(h + 24, std::uint32_t(kVersionPatch));
  const bool origin = !config.origin.empty();
  put<std::uint32_t>(h + 28, kSectionCount + (origin ? 1 : 0));
  put<std::uint32_t>(h + 40, origin ? kFlagOrigin : 0);
  put<std::uint64_t>(h + 32, image.epoch);
  put<std::uint32_t>(h + 44, crc32c(h, 44));
  out.write(h, sizeof h);

  std::uint64_t live = 0;
  for (const PointId id : image.ids) live += id != kInvalidId;
  unsigned char c[kConfBytes] = {};
  put<std::uint32_t>(c, std::uint32_t(config.dim));
  put<std::uint32_t>(c + 4, std::uint32_t(config.metric));
  put<std::uint32_t>(c + 8, std::uint32_t(config.target.kind));
  put<std::uint32_t>(c + 12, config.target.count);
  put<std::uint32_t>(c + 16, std::uint32_t(sdim));
  put<std::uint32_t>(c + 20, image.slot_count);
  put<std::uint64_t>(c + 24, live);
  put<std::uint64_t>(c + 32, config.capacity_hint);
  put<std::uint64_t>(c + 40, config.queue_capacity);
  put<std::uint64_t>(c + 48, config.cpu_threads);
  put<std::uint64_t>(c + 56, config.publish_threads);
  put<std::int32_t>(c + 64, config.cuda_device);
  put<std::uint32_t>(c + 68, std::uint32_t(config.backend));
  put<std::uint32_t>(c + 72, std::uint32_t(config.spatial_index));
  put<std::uint32_t>(c + 76, config.debug ? 1u : 0u);
  write_section(out, "CONF", c, sizeof c);
  const std::size_t n = image.slot_count;
  write_section(out, "IDS ", image.ids.data(), n * sizeof(PointId));
  write_section(out, "VECS", image.vectors.data(), n * sdim * sizeof(float));
  if (is_classes(config)) {
    write_section(out, "TARG", image.labels.data(), n * sizeof(std::int32_t));
  } else {
    write_section(out, "TARG", image.values.data(), n * outputs * sizeof(float));
  }
  {
    const std::size_t words = config.attribute_words;
    std::vector<std::uint32_t> attr(1 + n * words, 0u);
    attr[0] = std::uint32_t(words);
    if (words) std::copy_n(image.attributes.data(), std::min(image.attributes.size(), n * words), attr.data() + 1);
    write_section(out, "ATTR", attr.data(), attr.size() * sizeof(std::uint32_t));
  }
  if (origin) write_section(out, "ORIG", config.origin.data(), config.origin.size() * sizeof(double));
}

void decode_checkpoint(const ByteSource& in, const char* caller, StoreConfig& config, StoreImage& image,
                       IdIndex& index) {
  Reader r(in, caller);
  std::uint32_t flags = 0, version = 0;
  read_header(in, r, image.epoch, flags, version);
  r.skip_header();
  unsigned char c[kConfBytes];
  r.section("CONF", c, kConfBytes);
  const std::uint64_t conf_at = r.body();
  std::uint64_t live = 0;
  parse_conf(c, r, conf_at, config, image.slot_count, live);
  const std::size_t n = image.slot_count, sdim = stored_dim(config.metric, config.dim), outputs = outputs_of(config);
  const bool classes = is_classes(config);
  // Every length below is checked against the file before anything of that size is allocated.
  const std::uint64_t need = std::uint64_t(n) * (8 + 4 * sdim + (classes ? 4 : 4 * outputs));
  if (need > in.size()) {
    r.fail("CONF", conf_at + 20, concat(n, " slots need ", need, " bytes but the file holds ", in.size(),
                                        " (truncated or corrupted)"));
  }
  image.ids.resize(n);
  r.section("IDS ", image.ids.data(), std::uint64_t(n) * 8);
  const std::uint64_t ids_at = r.body();
  image.vectors.resize(n * sdim);
  r.section("VECS", image.vectors.data(), std::uint64_t(n) * sdim * 4);
  const std::uint64_t vecs_at = r.body();
  image.labels.assign(classes ? n : 0, 0);
  image.values.assign(n * outputs, 0.0f);
  if (classes) {
    r.section("TARG", image.labels.data(), std::uint64_t(n) * 4);
  } else {
    r.section("TARG", image.values.data(), std::uint64_t(n) * outputs * 4);
  }
  const std::uint64_t targ_at = r.body();
  read_attributes(r, in, version, config, image);
  config.origin.clear();
  if (flags & kFlagOrigin) {
    if (config.metric != Metric::L2) r.fail("header", 40, "an origin on a store whose metric is not l2 (corrupted)");
    config.origin.resize(config.dim);
    r.section("ORIG", config.origin.data(), std::uint64_t(config.dim) * 8);
    for (std::size_t i = 0; i < config.dim; ++i) {
      if (!std::isfinite(config.origin[i])) {
        r.fail("ORIG", r.body() + 8 * i, concat("origin[", i, "] = ", config.origin[i], " is not finite (corrupted)"));
      }
    }
  }
  if (r.offset() != in.size()) {
    r.fail("ATTR", r.offset(), concat(in.size() - r.offset(), " bytes follow the last section (corrupted)"));
  }

  std::uint64_t counted = 0;
  index = IdIndex();
  index.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(live, n)));
  for (std::size_t s = 0; s < n; ++s) {
    // Ids of millions of points land in random buckets: ask for the bucket 16 ids ahead.
    if (s + 16 < n) index.prefetch(image.ids[s + 16]);
    if (image.ids[s] == kInvalidId) continue;
    ++counted;
    if (!index.insert(image.ids[s], static_cast<std::uint32_t>(s))) {
      r.fail("IDS ", ids_at + s * 8, concat("slot ", s, " repeats id ", image.ids[s], " (corrupted)"));
    }
    if (const std::size_t bad = first_bad({image.vectors.data() + s * sdim, sdim}); bad != sdim) {
      r.fail("VECS", vecs_at + (s * sdim + bad) * 4, concat("slot ", s, "'s vector is not finite"));
    }
    if (classes && (image.labels[s] < 0 || std::uint32_t(image.labels[s]) >= config.target.count)) {
      r.fail("TARG", targ_at + s * 4, concat("slot ", s, "'s label ", image.labels[s], " is outside [0, ",
                                              config.target.count, ")"));
    }
    if (const std::size_t bad = first_bad({image.values.data() + s * outputs, outputs}); bad != outputs) {
      r.fail("TARG", targ_at + (s * outputs + bad) * 4, concat("slot ", s, "'s target value is not finite"));
    }
  }
  if (counted != live) {
    r.fail("IDS ", ids_at, concat(counted, " slots hold a point where CONF says ", live, " (corrupted)"));
  }
  if (n > 0 && image.ids[n - 1] == kInvalidId) {
    r.fail("IDS ", ids_at + (n - 1) * 8, concat("the top slot ", n - 1, " is free (the slot count is the high-water mark)"));
  }
  if (live > 0 && image.epoch == 0) r.fail("header", 32, "epoch 0 with points stored (epoch 0 is the empty store)");
}

}  // namespace streamknn::detail
