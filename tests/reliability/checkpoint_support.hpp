// Helpers of the checkpoint suites: a scratch folder, small stores driven through many publishes
// by a seeded sequence of updates (so that the state of every epoch can be rebuilt), and the
// comparison of two stores by their checkpoints' bytes and their answers.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace checkpoint_test {

using namespace streamknn;

/// A fresh folder under TMPDIR (or /tmp), removed with everything in it at destruction.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/streamknn-ckpt-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

inline void write_bytes(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

/// The checkpoint bytes past the CONF section (ids, vectors, targets, attributes): equal for
/// two stores of the same state whatever backend or threads they were configured with.
inline constexpr std::size_t kStateOffset = 48 + 16 + 80;

inline std::vector<std::byte> state_bytes(const ReferenceSet& set) {
  auto bytes = set.save_bytes();
  return std::vector<std::byte>(bytes.begin() + std::ptrdiff_t(kStateOffset), bytes.end());
}

/// One publish worth of random updates on a store of ids [0, id_space): inserts of absent ids,
/// moves, erases and target changes of present ones (tracked in `present`).
inline void random_batch(ReferenceSet& set, std::mt19937_64& g, std::vector<bool>& present, std::size_t ops) {
  const StoreConfig& c = set.config();
  const std::size_t dim = c.dim;
  for (std::size_t i = 0; i < ops; ++i) {
    const PointId id = g() % present.size();
    const auto v = test::points_for(c.metric, g, 1, dim);
    const int label = int(g() % std::max<std::uint32_t>(c.target.count, 1));
    const auto values = test::uniform(g, c.target.kind == TargetSpec::Kind::Outputs ? c.target.count : 0, -5, 5);
    const unsigned what = unsigned(g() % 10);
    if (!present[id]) {
      if (c.target.kind == TargetSpec::Kind::Classes) {
        set.insert(id, v, label);
      } else if (c.target.kind == TargetSpec::Kind::Outputs) {
        set.insert(id, v, values);
      } else {
        set.insert(id, v);
      }
      present[id] = true;
    } else if (what < 5) {
      set.move(id, v);
    } else if (what < 8 || c.target.kind == TargetSpec::Kind::None) {
      set.erase(id);
      present[id] = false;
    } else if (c.target.kind == TargetSpec::Kind::Classes) {
      set.set_target(id, label);
    } else {
      set.set_target(id, values);
    }
  }
}

/// Requires two stores to give bit-identical answers to the same queries.
inline void require_same_answers(const ReferenceSet& a, const ReferenceSet& b, std::mt19937_64& g) {
  const StoreConfig& c = a.config();
  const auto queries = test::points_for(c.metric, g, 9, c.dim);
  for (const std::size_t k : {std::size_t(1), std::size_t(7), a.size() + 3}) {
    const Neighbors x = a.search(queries, k), y = b.search(queries, k);
    REQUIRE(x.epoch == y.epoch);
    REQUIRE(x.ids == y.ids);
    REQUIRE(x.distances.size() == y.distances.size());
    REQUIRE(std::memcmp(x.distances.data(), y.distances.data(), x.distances.size() * sizeof(float)) == 0);
  }
}

/// A small single-threaded configuration (the crash test forks: no worker threads may exist).
inline StoreConfig small_config(std::size_t dim, Metric metric, TargetSpec target, BackendKind backend) {
  StoreConfig c;
  c.dim = dim;
  c.metric = metric;
  c.target = target;
  c.backend = backend;
  c.cpu_threads = 1;
  c.publish_threads = 1;
  c.capacity_hint = 16;
  return c;
}

}  // namespace checkpoint_test
