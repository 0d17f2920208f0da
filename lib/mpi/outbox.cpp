#include "mpi/outbox.hpp"

#include <cstring>

#include "core/check.hpp"
#include "streamknn/distributed_reference_set.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail::mpi {

namespace {

constexpr std::size_t kHeaderBytes = 16;
constexpr unsigned char kHasTarget = 1, kDoubles = 2, kHasAttributes = 4;  // flag bits of byte 9

bool carries_vector(UpdateKind kind) noexcept { return kind == UpdateKind::Insert || kind == UpdateKind::Move; }

std::size_t value_floats(const Update& u, const StoreConfig& config) noexcept {
  return u.has_target ? config.target.value_count() : 0;
}

/// Bytes of the vector: dim floats, or dim doubles where the update gives them (Update::vector64).
std::size_t vector_bytes(const Update& u, const StoreConfig& config) noexcept {
  if (!carries_vector(u.kind)) return 0;
  return config.dim * (u.vector64.empty() ? sizeof(float) : sizeof(double));
}

/// Attribute words carried: all of the store's for a set-attributes or an insert that gives them.
std::size_t attribute_words(const Update& u, const StoreConfig& config) noexcept {
  if (u.kind == UpdateKind::SetAttributes || (u.kind == UpdateKind::Insert && !u.attributes.empty())) {
    return config.attribute_words;
  }
  return 0;
}

std::size_t round8(std::size_t n) noexcept { return (n + 7) / 8 * 8; }

}  // namespace

std::size_t record_bytes(const Update& u, const StoreConfig& config) noexcept {
  return round8(kHeaderBytes + vector_bytes(u, config) + value_floats(u, config) * sizeof(float) +
                attribute_words(u, config) * sizeof(std::uint32_t));
}

void encode(const Update& u, const StoreConfig& config, std::vector<std::byte>& out) {
  const std::size_t at = out.size();
  out.resize(at + record_bytes(u, config), std::byte{0});
  std::byte* p = out.data() + at;
  std::memcpy(p, &u.id, 8);
  p[8] = static_cast<std::byte>(u.kind);
  p[9] = static_cast<std::byte>((u.has_target ? kHasTarget : 0) | (u.vector64.empty() ? 0 : kDoubles) |
                                 (attribute_words(u, config) ? kHasAttributes : 0));
  std::memcpy(p + 12, &u.label, 4);
  p += kHeaderBytes;
  if (carries_vector(u.kind)) {
    const std::size_t n = vector_bytes(u, config);
    std::memcpy(p, u.vector64.empty() ? static_cast<const void*>(u.vector.data()) : u.vector64.data(), n);
    p += n;
  }
  if (const std::size_t n = value_floats(u, config)) {
    std::memcpy(p, u.values.data(), n * sizeof(float));
    p += n * sizeof(float);
  }
  if (const std::size_t n = attribute_words(u, config)) std::memcpy(p, u.attributes.data(), n * sizeof(std::uint32_t));
}

std::vector<Update> decode(std::span<const std::byte> bytes, const StoreConfig& config) {
  std::vector<Update> out;
  std::size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < kHeaderBytes) throw Error("DistributedReferenceSet::publish: a truncated update record");
    const std::byte* p = bytes.data() + at;
    Update u;
    std::memcpy(&u.id, p, 8);
    u.kind = static_cast<UpdateKind>(p[8]);
    const auto flags = static_cast<unsigned char>(p[9]);
    u.has_target = (flags & kHasTarget) != 0;
    std::memcpy(&u.label, p + 12, 4);
    // A placeholder of the right length, so that record_bytes() counts the words; set below.
    static constexpr std::uint32_t kNoWords[kMaxAttributeWords] = {};
    if (flags & kHasAttributes) u.attributes = {kNoWords, config.attribute_words};
    // Records are multiples of 8 bytes long and buffers start aligned, so the values are aligned.
    const std::byte* payload = p + kHeaderBytes;
    if (carries_vector(u.kind)) {
      if (flags & kDoubles) {
        u.vector64 = {reinterpret_cast<const double*>(payload), config.dim};
      } else {
        u.vector = {reinterpret_cast<const float*>(payload), config.dim};
      }
    }
    const std::size_t size = record_bytes(u, config);
    if (bytes.size() - at < size) throw Error("DistributedReferenceSet::publish: a truncated update record");
    payload += vector_bytes(u, config);
    if (const std::size_t n = value_floats(u, config)) {
      u.values = {reinterpret_cast<const float*>(payload), n};
      payload += n * sizeof(float);
    }
    if (const std::size_t n = attribute_words(u, config)) {
      u.attributes = {reinterpret_cast<const std::uint32_t*>(payload), n};
    }
    if (!u.has_target) u.label = -1;
    out.push_back(u);
    at += size;
  }
  return out;
}

Outbox::Outbox(const StoreConfig& config, int ranks)
    : config_(config), ranks_(ranks), per_rank_(static_cast<std::size_t>(ranks)) {}

std::size_t Outbox::put(std::span<const Update> updates, bool wait) {
  std::unique_lock lock(mutex_);
  std::size_t queued = 0;
  while (queued < updates.size()) {
    if (count_ >= config_.queue_capacity) {
      if (!wait) break;
      space_.wait(lock, [&] { return count_ < config_.queue_capacity; });
    }
    const Update& u = updates[queued];
    encode(u, config_, per_rank_[static_cast<std::size_t>(shard_of(u.id, ranks_))]);
    ++count_;
    ++queued;
  }
  return queued;
}

std::vector<std::vector<std::byte>> Outbox::take() {
  std::vector<std::vector<std::byte>> taken(static_cast<std::size_t>(ranks_));
  {
    std::lock_guard lock(mutex_);
    taken.swap(per_rank_);
    count_ = 0;
  }
  space_.notify_all();
  return taken;
}

std::size_t Outbox::queued() const noexcept {
  std::lock_guard lock(mutex_);
  return count_;
}

}  // namespace streamknn::detail::mpi
