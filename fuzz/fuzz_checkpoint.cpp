// libFuzzer harness: the checkpoint loader (ReferenceSet::load_bytes). The first byte picks the
// mode: even, the rest is loaded as it is (checksums must catch the mutation); odd, every
// checksum the rest declares is recomputed first, so that mutations reach the checks of the
// contents (counts, ids, labels, values, the top slot). The loader must either throw
// streamknn::CheckpointError or return a store that saves back to a checkpoint that loads to
// the same state; anything else (another exception, a crash, a sanitizer report) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "streamknn/streamknn.hpp"

using namespace streamknn;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", what);
  std::abort();
}

/// CRC-32C, bit by bit: an independent implementation of what the format specifies.
std::uint32_t crc32c(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = ~0u;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

/// Recomputes the header's checksum and that of every section whose declared length fits.
void fix_checksums(std::vector<std::uint8_t>& f) {
  if (f.size() < 48) return;
  const std::uint32_t h = crc32c(f.data(), 44);
  std::memcpy(f.data() + 44, &h, 4);
  std::size_t at = 48;
  while (f.size() - at >= 16) {
    std::uint64_t length;
    std::memcpy(&length, f.data() + at + 8, 8);
    if (length > f.size() - at - 16) return;
    const std::uint32_t c = crc32c(f.data() + at + 16, std::size_t(length));
    std::memcpy(f.data() + at + 4, &c, 4);
    at += 16 + std::size_t(length);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::vector<std::uint8_t> file(data + 1, data + size);
  if (data[0] & 1) fix_checksums(file);
  LoadOptions options;
  options.backend = BackendKind::Cpu;
  options.cpu_threads = 1;
  options.publish_threads = 1;
  options.capacity_hint = 0;
  options.queue_capacity = 16;
  const auto bytes = std::as_bytes(std::span(file));
  try {
    ReferenceSet set = ReferenceSet::load_bytes(bytes, options);
    const std::vector<float> query(set.config().dim, 0.5f);
    const Neighbors n = set.search(query, 3);
    if (n.epoch != set.epoch()) fail("the loaded store answers from another epoch");
    const auto again = set.save_bytes();
    ReferenceSet reloaded = ReferenceSet::load_bytes(again, options);
    if (reloaded.save_bytes() != again) fail("a loaded store does not save back to the same checkpoint");
  } catch (const CheckpointError&) {
  } catch (const Error& e) {
    // A checkpoint whose fields pass the loader's checks is a valid configuration: any other
    // refusal is a loader gap.
    std::fprintf(stderr, "fuzz_checkpoint: %s\n", e.what());
    fail("an error other than CheckpointError");
  }
  return 0;
}
