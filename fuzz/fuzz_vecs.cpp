// libFuzzer harness: the .fvecs / .ivecs / .bvecs reader (streams/vecs_source.hpp) against an
// independent reading of the format. The first byte picks the kind and a vector limit; the
// rest is the file. The reader must throw DataError exactly when the format is broken
// (empty file, truncated record, dimension outside [1, 2^20] or different from the first,
// NaN/Inf in .fvecs), and otherwise return exactly the vectors the format holds.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "streams/errors.hpp"
#include "streams/vecs_source.hpp"

using namespace streamknn::streams;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_vecs: %s\n", what.c_str());
  std::abort();
}

struct Expected {
  bool ok = false;
  std::size_t count = 0, dim = 0;
  std::vector<std::uint32_t> bits;  // every component's value, as the reader should store it
};

Expected reference(VecsKind kind, const std::uint8_t* p, std::size_t size, std::size_t max_count) {
  Expected e;
  if (size == 0) return e;
  const std::size_t width = kind == VecsKind::Bvecs ? 1 : 4;
  std::size_t off = 0;
  while (off < size && (max_count == 0 || e.count < max_count)) {
    if (size - off < 4) return e;
    std::int32_t d;
    std::memcpy(&d, p + off, 4);
    if (d < 1 || d > (1 << 20)) return e;
    if (e.count == 0) e.dim = std::size_t(d);
    if (std::size_t(d) != e.dim) return e;
    if (size - off - 4 < e.dim * width) return e;
    for (std::size_t c = 0; c < e.dim; ++c) {
      const std::uint8_t* q = p + off + 4 + c * width;
      std::uint32_t bits = 0;
      if (kind == VecsKind::Bvecs) {
        const float f = float(*q);
        std::memcpy(&bits, &f, 4);
      } else {
        std::memcpy(&bits, q, 4);
        if (kind == VecsKind::Fvecs) {
          float f;
          std::memcpy(&f, q, 4);
          if (!std::isfinite(f)) return e;
        }
      }
      e.bits.push_back(bits);
    }
    off += 4 + e.dim * width;
    ++e.count;
  }
  e.ok = true;
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const VecsKind kind = static_cast<VecsKind>(data[0] % 3);
  const std::size_t max_count = (data[0] >> 2) % 4;  // 0 = all
  const char* ext = kind == VecsKind::Fvecs ? ".fvecs" : kind == VecsKind::Ivecs ? ".ivecs" : ".bvecs";
  const std::string path = "/tmp/streamknn-fuzz-vecs-" + std::to_string(::getpid()) + ext;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  const Expected want = reference(kind, data + 1, size - 1, max_count);
  Vecs got;
  try {
    got = read_vecs(path, max_count);
  } catch (const DataError& e) {
    if (want.ok) fail(std::string("a well-formed file was refused: ") + e.what());
    if (std::string(e.what()).find(path) == std::string::npos) fail(std::string("an error that does not name the file: ") + e.what());
    return 0;
  }
  if (!want.ok) fail("a malformed file was accepted");
  if (got.kind != kind || got.count != want.count || got.dim != want.dim) fail("count, dim or kind differ");
  std::vector<std::uint32_t> bits;
  if (kind == VecsKind::Ivecs) {
    if (!got.floats.empty() || got.ints.size() != want.count * want.dim) fail(".ivecs values not kept as ints");
    for (std::int32_t v : got.ints) bits.push_back(std::uint32_t(v));
  } else {
    if (!got.ints.empty() || got.floats.size() != want.count * want.dim) fail("float values missing");
    for (float f : got.floats) {
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      bits.push_back(b);
    }
  }
  if (bits != want.bits) fail("the values read differ from the file's");
  return 0;
}
