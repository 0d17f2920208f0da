// staged_upload (staged_upload.hpp). One parallel_for over the 256 KiB blocks of the points: the
// pool hands blocks out in index order, so a block waits only on lower blocks (its buffer's slot
// emptied by the DMA of the buffer `buffers` before it), which threads already hold: no deadlock,
// and no barrier between buffers. A thread that finds a float beyond the bound lowers the shared
// first index; blocks above it are skipped, blocks below it still run, so the lowest is found.
#include "cuda/kmeans/staged_upload.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "core/check.hpp"
#include "core/thread_pool.hpp"
#include "cuda/cuda_raii.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace streamknn::detail::kmeans {

namespace {

using gpu::check_cuda;

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

/// Waits for a stream's work at the end of a scope, errors ignored: no pinned buffer is freed
/// while a copy from it may still run (a throw included).
struct Drain {
  explicit Drain(cudaStream_t s) : stream(s) {}
  Drain(const Drain&) = delete;
  Drain& operator=(const Drain&) = delete;
  ~Drain() { cudaStreamSynchronize(stream); }
  cudaStream_t stream;
};

/// The shared state of one upload.
struct Upload {
  float* to;
  const float* points;
  std::size_t count, per, ring;
  float bound;
  int device;
  cudaStream_t stream;
  std::vector<float*> stage;                     // per slot: its buffer (StagingRing::memory)
  std::vector<gpu::Event> emptied;               // per slot: recorded after its last queued copy
  std::vector<std::atomic<std::size_t>> queued;  // per slot: 1 + the last buffer queued from it
  std::vector<std::atomic<std::size_t>> copied;  // per slot: 1 + the last buffer seen copied out
  std::vector<std::atomic<std::size_t>> filled;  // per buffer: its blocks copied and clean
  std::atomic<std::size_t> first;                // the lowest bad index found so far (count: none)
  std::atomic<bool> failed{false};               // a CUDA call threw: waiters give up

  bool skipped(std::size_t lo) const { return first.load(std::memory_order_acquire) < lo || failed.load(); }

  void lower_first(std::size_t at) {
    std::size_t now = first.load();
    while (at < now && !first.compare_exchange_weak(now, at)) {
    }
  }

  /// Waits until buffer j's slot was emptied by the copy of buffer j - ring; false when the
  /// block should be skipped instead (a lower bad float, or a failed CUDA call).
  bool slot_free(std::size_t j, std::size_t lo) {
    if (j < ring) return true;
    const std::size_t slot = j % ring, need = j - ring + 1;
    if (copied[slot].load(std::memory_order_acquire) >= need) return true;
    for (unsigned spins = 0; queued[slot].load(std::memory_order_acquire) < need; ++spins) {
      if (skipped(lo)) return false;
      if (spins % 256 == 255) {
        std::this_thread::yield();  // the threads filling that buffer may share this core
      } else {
        relax();
      }
    }
    // Buffer j's blocks are the only waiters, and the slot's event is recorded again only after
    // all of them: it still marks buffer j - ring's copy.
    on_device();
    emptied[slot].wait();
    copied[slot].store(need, std::memory_order_release);
    return true;
  }

  /// A pool thread makes the points' device current before its first CUDA call (else the runtime
  /// would start device 0's context for it); the caller's is current already.
  void on_device() const {
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess || now != device) {
      check_cuda(cudaSetDevice(device), "cudaSetDevice", "kmeans point staging");
    }
  }

  /// Copies and tests block t; the block that completes its buffer queues the buffer's copy.
  void block(std::size_t t) {
    const std::size_t lo = t * kStageBlock, len = std::min(kStageBlock, count - lo);
    const std::size_t j = lo / per, slot = j % ring;
    if (skipped(lo) || !slot_free(j, lo)) return;
    float* staged = stage[slot] + (lo - j * per);
    std::memcpy(staged, points + lo, len * sizeof(float));
    const std::size_t at = detail::first_beyond(std::span<const float>(staged, len), bound);  // what was copied
    if (at != len) {
      lower_first(lo + at);
      return;
    }
    const std::size_t begin = j * per, size = std::min(per, count - begin);
    if (filled[j].fetch_add(1, std::memory_order_acq_rel) + 1 != (size + kStageBlock - 1) / kStageBlock) return;
    if (skipped(begin)) return;  // refused already: nothing more is copied
    on_device();
    check_cuda(cudaMemcpyAsync(to + begin, stage[slot], size * sizeof(float), cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync", "kmeans points");
    emptied[slot].record(stream);
    queued[slot].store(j + 1, std::memory_order_release);
  }
};

/// Floats a buffer of the ring takes for a copy of `count` (StagingRing): with no ring yet, an
/// eighth of each buffer's share in whole blocks; with one kept from an earlier copy, the most a
/// buffer holds (grown once, then pinned for the copies that follow).
std::size_t buffer_size(std::size_t count, const StagingRing& ring) {
  const std::size_t most = std::max(kStageBlock, ring.buffer_floats / kStageBlock * kStageBlock);
  if (!ring.memory.empty()) return most;
  const std::size_t share = count / (std::max<std::size_t>(ring.buffers, 1) * 8);
  return std::clamp((share + kStageBlock - 1) / kStageBlock * kStageBlock, kStageBlock, most);
}

}  // namespace

std::size_t staged_upload(float* to, const float* points, std::size_t count, float bound, int device,
                          cudaStream_t stream, ThreadPool& pool, StagingRing& ring) {
  if (count == 0) return 0;
  const std::size_t per = buffer_size(count, ring);
  const std::size_t buffers = (count + per - 1) / per, slots = std::clamp<std::size_t>(ring.buffers, 1, buffers);
  Upload u{to,
           points,
           count,
           per,
           slots,
           bound,
           device,
           stream,
           {},
           {},
           std::vector<std::atomic<std::size_t>>(slots),
           std::vector<std::atomic<std::size_t>>(slots),
           std::vector<std::atomic<std::size_t>>(buffers),
           {count}};
  const std::size_t slot_floats = std::min(count, per);
  ring.memory.resize(std::max(ring.memory.size(), slots));
  for (std::size_t s = 0; s < slots; ++s) {
    if (ring.memory[s].size() < slot_floats) {
      ring.memory[s] = gpu::PinnedArray<float>();  // freed before the larger one is pinned
      ring.memory[s] = gpu::PinnedArray<float>(slot_floats, "kmeans point staging");
    }
    u.stage.push_back(ring.memory[s].get());
  }
  u.emptied.resize(slots);
  const Drain drain{stream};  // destroyed before the buffers
  pool.parallel_for((count + kStageBlock - 1) / kStageBlock, [&](std::size_t t) {
    try {
      u.block(t);
    } catch (...) {
      u.failed = true;  // the waiters stop waiting for a copy that will not be queued
      throw;
    }
  });
  const std::size_t first = u.first.load();
  if (first == count) check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "kmeans points");
  return first;
}

}  // namespace streamknn::detail::kmeans
