// The device memory, pinned staging and cached graphs of one query batch in flight, and the pool
// the backend takes them from.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_raii.hpp"
#include "cuda/device_types.hpp"
#include "cuda/graph_cache.hpp"
#include "cuda/workspace.hpp"

namespace streamknn::detail::gpu {

/// Device memory, pinned staging and cached graphs for one query batch in flight.
struct QueryContext {
  DeviceArray<unsigned char> input, output;  // one chunk block each (see ChunkLayout)
  DeviceArray<Candidate> candidates, warp_lists;
  DeviceArray<std::uint32_t> lengths, slot, sample_keys, first_keys, first_arrivals;
  DeviceArray<double> class_scratch;
  DeviceArray<float> screen_distance;        // the screen's width best per query (Plan::width), re-ranked
  DeviceArray<std::uint64_t> screen_id;      // by the exact re-rank into the answers
  DeviceArray<std::uint32_t> screen_slot;
  DeviceArray<RerankEntry> rerank_keys;      // its keys, on stores of many chunks (rerank_keys_apart)
  DeviceArray<RerankEntry> rerank_buffer;    // its buffers where they exceed shared memory
  DeviceArray<float> dense;                  // the dense screen's rows and group keys
  DeviceArray<Candidate> dense_split;        // the dense selection's shares (DenseParams::split)
  DeviceArray<std::uint32_t> dense_arrivals; // and its per-query arrival counts
  PinnedArray<unsigned char> host_in, host_out;  // one block per chunk
  ChunkLayout layout;
  Event done;
  // device-resident searches (search_device)
  Event caller_ready;                        // recorded on the caller's stream
  DeviceArray<unsigned long long> status;    // [0] first bad query, [1] first bad range
  PinnedArray<unsigned long long> host_status;  // mapped where the device can map host memory
  DeviceArray<std::uint32_t> status_arrivals;   // DeviceQueryParams::arrivals
  // Whether status holds ~0 and status_arrivals 0, as the last chunk's validation leaves them
  // (where host_status is mapped); not after a batch whose enqueueing threw.
  bool status_reset = false;
  GraphCache<GraphKey, GraphExec> graphs;
  // search_device's graphs, captured the second time a key is seen: empty until then.
  GraphCache<DeviceGraphKey, GraphExec> device_graphs;

  /// Grows `a` to at least n elements (twice its size at least), freeing it first: true where
  /// it was allocated again (its contents and address are new).
  template <class T>
  bool fit(DeviceArray<T>& a, std::size_t n, const char* what) {
    if (a.size() >= n) return false;
    const std::size_t grown = std::max(n, a.size() * 2);
    a = DeviceArray<T>();
    a = DeviceArray<T>(grown, what);
    return true;
  }
  template <class T>
  bool fit(PinnedArray<T>& a, std::size_t n, const char* what, bool mapped = false) {
    if (a.size() >= n) return false;
    const std::size_t grown = std::max(n, a.size() * 2);
    a = PinnedArray<T>();
    a = PinnedArray<T>(grown, what, mapped);
    return true;
  }
  template <class T>
  T* in(std::size_t offset) const { return reinterpret_cast<T*>(input.get() + offset); }
  template <class T>
  T* out(std::size_t offset) const { return reinterpret_cast<T*>(output.get() + offset); }
};

/// Query contexts not in use; shared with the tickets that hold one.
class ContextPool {
 public:
  std::unique_ptr<QueryContext> take() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return std::make_unique<QueryContext>();
    auto ctx = std::move(free_.back());
    free_.pop_back();
    return ctx;
  }
  void give_back(std::unique_ptr<QueryContext> ctx) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(ctx));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<QueryContext>> free_;
};

/// A pooled context, back in the pool when its last holder lets go: the call that took it if
/// it throws, else the ticket, which may outlive the pool's backend (then the context is freed).
inline std::shared_ptr<QueryContext> acquire(const std::shared_ptr<ContextPool>& pool) {
  std::weak_ptr<ContextPool> weak = pool;
  return std::shared_ptr<QueryContext>(pool->take().release(), [weak](QueryContext* c) {
    std::unique_ptr<QueryContext> owned(c);
    if (auto p = weak.lock()) p->give_back(std::move(owned));
  });
}

}  // namespace streamknn::detail::gpu
