// Write and load times of large checkpoints: a 10,000,000 x 2 store (L2) and a 1,000,000 x 128
// store (L2), saved to a folder (default: TMPDIR or /tmp) and loaded back, on the backend named
// (cpu, the default, or cuda). Prints seconds and GB/s of the file. Built, not run by ctest.
//   checkpoint_timing [--dir D] [--backend cpu|cuda] [--scale S]   (S scales the point counts)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "streamknn/streamknn.hpp"

using namespace streamknn;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void run(std::size_t n, std::size_t dim, BackendKind backend, const std::string& dir) {
  StoreConfig config;
  config.dim = dim;
  config.backend = backend;
  config.capacity_hint = n;
  config.queue_capacity = 1 << 20;
  ReferenceSet set(config);
  std::mt19937_64 g(42);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(dim);
  for (std::size_t i = 0; i < n; ++i) {
    for (auto& x : v) x = u(g);
    set.push(Update::insert(i, v));
    if ((i + 1) % (1 << 20) == 0) set.publish();
  }
  set.publish();
  const std::string path = dir + "/timing.skc";
  auto t = std::chrono::steady_clock::now();
  set.save(path);
  const double save_s = seconds_since(t);
  const double gb = double(std::filesystem::file_size(path)) / 1e9;
  LoadOptions options;
  options.backend = backend;
  t = std::chrono::steady_clock::now();
  ReferenceSet loaded = ReferenceSet::load(path, options);
  const double load_s = seconds_since(t);
  std::printf("%9zu x %-4zu  %-4s  file %6.3f GB  save %7.3f s (%5.2f GB/s)  load %7.3f s (%5.2f GB/s)  epoch %llu\n",
              n, dim, backend == BackendKind::Cuda ? "cuda" : "cpu", gb, save_s, gb / save_s, load_s, gb / load_s,
              (unsigned long long)loaded.epoch());
  std::filesystem::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  BackendKind backend = BackendKind::Cpu;
  double scale = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dir") {
      dir = value;
    } else if (flag == "--backend") {
      backend = value == "cuda" ? BackendKind::Cuda : BackendKind::Cpu;
    } else if (flag == "--scale") {
      scale = std::atof(value.c_str());
    } else {
      std::fprintf(stderr, "usage: checkpoint_timing [--dir D] [--backend cpu|cuda] [--scale S]\n");
      return 2;
    }
  }
  std::printf("checkpoint_timing: streamknn %s, folder %s (save includes fsync of file and folder)\n",
              version_string(), dir.c_str());
  run(std::size_t(10'000'000 * scale), 2, backend, dir);
  run(std::size_t(1'000'000 * scale), 128, backend, dir);
  return 0;
}
