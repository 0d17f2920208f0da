// The GPU suites' pair of stores: the same store on the CPU backend and on the CUDA backend (its
// result buffers poisoned before every search: StoreConfig::debug); every update goes to both, and
// their publishes must agree. test_gpu_vs_cpu (gpu_twin.hpp), test_gpu_filters and
// test_reduced_screen build their twins on it.
#pragma once

#include "support/test_support.hpp"

namespace test {

class TwinStores {
 public:
  /// Both stores as `config` says, but for their backends.
  explicit TwinStores(const StoreConfig& config)
      : cpu(on(config, BackendKind::Cpu)), gpu(on(config, BackendKind::Cuda)) {}

  /// `config` on backend `kind`, poisoned outputs on the CUDA backend.
  static StoreConfig on(StoreConfig config, BackendKind kind) {
    config.backend = kind;
    config.debug = kind == BackendKind::Cuda;
    return config;
  }

  /// Pushes to both, publishing a store whose queue is full.
  void push(const Update& u) {
    while (!cpu.try_push(u)) cpu.publish();
    while (!gpu.try_push(u)) gpu.publish();
  }

  /// Publishes both: the same updates applied and rejected, the same epoch.
  void publish() {
    const PublishReport a = cpu.publish(), b = gpu.publish();
    REQUIRE(a.applied == b.applied);
    REQUIRE(a.rejected.size() == b.rejected.size());
    REQUIRE(a.epoch == b.epoch);
  }

  ReferenceSet cpu, gpu;
};

}  // namespace test
