// The CUDA backend: a DeviceStore (double buffer) written on an update stream, and a query
// pipeline on a query stream: H2D of the queries from pinned staging, the candidates' search
// ([sample,] scan or query-resident scan; the dense screen; or the direct search), select,
// [aggregate,] the answers into pinned staging (written there by the last kernel for up to 16
// queries, else a D2H copy), all stream-ordered, and for batches of up to 16 queries replayed
// from a captured CUDA graph (one launch).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/metric_space.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_store.hpp"
#include "cuda/kernels.hpp"
#include "cuda/kernels/probe.hpp"
#include "cuda/spatial_tree.hpp"

namespace streamknn::detail {

namespace gpu {
namespace {

constexpr std::size_t kWorkspaceBudget = std::size_t(512) << 20;  // candidates of one launch chunk
constexpr std::size_t kWarpListBudget = std::size_t(256) << 20;   // the scan's global warp lists
/// Batches of up to this many queries (in one chunk) replay a captured graph. Graphs up to 64
/// queries measured no gain above 16 (H100 A/B against graphs up to 64: MNIST-like Q = 24-64
/// 1.02-1.05x, ImageNet-like 0.99-1.00x, GoogleNews-like 0.96-1.02x).
constexpr std::uint32_t kGraphMaxQueries = 16;
/// Graphs one query context keeps (one per batch size, k, output and shape): all are dropped
/// when it is full, so a caller cycling through more shapes than that captures as it goes.
constexpr std::size_t kMaxCachedGraphs = 64;
/// Chunks of up to this many queries have their answers written to the mapped staging by the
/// last kernel (enqueue).
constexpr std::uint32_t kHostWriteMaxQueries = kGraphMaxQueries;
/// A graph's input block of more than this many bytes is read from the mapped staging by a kernel
/// (launch_copy_in) instead of a copy node. Measured on an H200 with bench_graph_copies, a graph of
/// the input and two tiny kernels, host to host: a copy node of 1-8 KB 9.9-10.7 us, 12-24 KB
/// 11.2-12.8 us, 32-100 KB 18.2-18.3 us; the kernel 10.6-12.7 us at every size. A/B against the
/// copy node: MNIST-like Q = 8-16 0.91-0.95x (globaltimer stamps: 7-13 us less from one search's
/// last kernel to the next one's first).
constexpr std::size_t kGraphCopyMaxBytes = 16 * 1024;
constexpr std::size_t kMaxQueryBytes = 64 * 1024;                  // one stored query in shared memory

enum class Mode : int { Neighbors = -1, Labels = 0, Probabilities = 1, Values = 2 };

Mode mode_of(AggregateSpec::Output o) {
  switch (o) {
    case AggregateSpec::Output::Neighbors: return Mode::Neighbors;
    case AggregateSpec::Output::Labels: return Mode::Labels;
    case AggregateSpec::Output::Probabilities: return Mode::Probabilities;
    case AggregateSpec::Output::Values: return Mode::Values;
  }
  return Mode::Neighbors;
}

struct Plan {
  ScanShape shape;
  std::uint32_t k = 0;
  std::uint32_t chunk_queries = 0;  // queries per launch chunk
  std::uint32_t stride = 0;         // candidates per query = blocks_per_group * k
  std::uint32_t sample_step = 0;    // > 0: a sample pass over every sample_step-th tile first
  std::uint32_t sample_tiles = 0;   // tiles that sample holds at the store's capacity
  std::uint32_t sample_per_tile = 0;  // smallest ranks each sampled tile contributes
  bool first_bound = false;         // the scan bounds itself from its first tiles (ScanParams::first_keys)
  std::uint32_t dense_stride = 0;   // > 0: the dense screen (DenseParams) in place of sample and scan
  std::uint32_t direct_blocks = 0;  // > 0: the direct search (launch_direct) in place of sample and scan
  std::uint32_t resident_warps = 0;  // > 0: the query-resident scan (launch_resident) after the sample pass
  bool spatial = false;             // the spatial index's search (launch_spatial_search), nothing else
  std::size_t sample_keys() const { return std::size_t(sample_tiles) * sample_per_tile; }  // per query
};

/// A sample pass ranks 1/kSampleStep of the store first; the k-th rank it finds bounds the
/// full search, so the main pass admits about kSampleStep * k points instead of the
/// k (1 + ln(n / k)) per block a cold start costs. Worth it once the sample holds enough points.
constexpr std::uint32_t kSampleStep = 32;
/// Large stores' sample step for batches of 16+ queries, or 8+ at k >= 128, over dims <= 128: a
/// kSampleStep bound lets about 32 k points per query into the warps' lists, and where a point's
/// rank is cheap those insertions cost more than ranking twice the sample (see sample_step_for).
constexpr std::uint32_t kDenseSampleStep = 16;
/// At most this many sampled tiles per query (the sample's rank workspace: 512 KB per query).
constexpr std::uint32_t kMaxSampleTiles = 4096;
constexpr std::uint32_t kSmallStoreSampleStep = 8;  // stores of fewer than 64 tiles per SM
constexpr std::uint32_t kSmallStoreDenseStep = 4;   // the same for 16+ queries at k >= 128, dims 9-128 (sample_step_for)
/// The dot-product screen (ScanShape::screen) wants at most one pair to rank exactly per query
/// in this many tiles.
constexpr std::uint64_t kScreenSparse = 4;
constexpr std::uint32_t kScreenMinQueries = 9;  // inner product (L2: 13), see choose_screen
/// The dense screen's workspace (a row of screened values and of group minima per query of a
/// chunk): it bounds the queries of one launch chunk.
constexpr std::size_t kDenseBudget = std::size_t(256) << 20;
constexpr std::uint32_t kDenseMinChunks = 16;   // 64 dims: below, a pair's exact rank is cheap
constexpr std::uint32_t kDenseMinQueries = 12;  // see dense_min_queries
constexpr std::uint32_t kDenseLongMinQueries = 2;     // from kDenseLongChunks chunks
constexpr std::uint32_t kDenseLongChunks = 64;        // 256 dims
constexpr std::uint32_t kDenseLargeKMinQueries = 6;   // from kDenseLargeK
constexpr std::uint32_t kDenseLargeK = 128;
constexpr std::uint32_t kDirectMaxQueries = 16;  // see direct_pays
constexpr std::uint32_t kDirectMaxSegments = 4;  // per block, see direct_pays
constexpr std::uint32_t kResidentMinQueries = 16;  // see resident_pays
constexpr std::uint64_t kResidentMinWork = 1024;   // queries x k, see resident_pays
constexpr std::uint32_t kResidentMinTiles = 4;     // tiles per warp at least, see choose_resident
constexpr std::uint32_t kResidentWarps = 4;        // per block, see choose_resident
constexpr std::uint32_t kResidentShareFactor = 4;  // warps per row >= this x the sample step, see choose_resident
/// SpatialIndex::Auto (see spatial_wanted): stores of kSpatialMinSlots slots or more take the
/// index, refit (SpatialTree::refittable) once kSpatialRefitQueries queries have come since the
/// buffer changed, else built once kSpatialBuildQueries have.
constexpr std::uint32_t kSpatialMinSlots = 16384;
constexpr std::uint64_t kSpatialBuildQueries = 1024;
constexpr std::uint64_t kSpatialRefitQueries = 128;
/// The refit's query count for a store of `slots` slots: a refit costs about 40-45 us per million
/// points (ncu, 1,000,000 x 2: 36 us; 10,000,000 x 2: 448 us), the index saves about 0.25 us a
/// query at 1,000,000 x 2 and 2 us at 10,000,000 x 2 (Q = 256-1,024), so at 10M the rule of 128
/// refit for too few (Q = 256 per publish: 0.70-0.74 ms against the scans' 0.56).
std::uint64_t spatial_refit_queries(std::uint32_t slots) {
  return std::max<std::uint64_t>(kSpatialRefitQueries, slots / 25000);
}
/// Auto at k > 32 (lists of two or four entries per lane, filled one insertion at a time): batches
/// of this many queries or more only. H100 A/B, the index against the scans: Q = 1,024 0.33-0.81x
/// at every store and k = 64 / 128; Q = 256 1.0x (k = 64) and 1.17-1.65x slower (k = 128) at
/// 100,000-1,000,000 x 2; Q = 1-16 up to 5x slower.
constexpr std::uint32_t kSpatialLargeKMinQueries = 1024;
/// Queries per launch chunk of the spatial search (it needs no candidate workspace).
constexpr std::uint32_t kSpatialChunkQueries = 1u << 16;

/// Where each array of one launch chunk lives inside the chunk's input and output blocks. The
/// pinned host staging holds one such block per chunk, laid out like the device's, so every
/// chunk is one host-to-device copy, and one device-to-host copy or the last kernel's writes.
struct ChunkLayout {
  std::size_t queries = 0, ranges = 0, thresholds = 0, in_bytes = 0;               // input block
  std::size_t distance = 0, id = 0, label = 0, probability = 0, value = 0, out_bytes = 0;  // output block
};

inline std::size_t align16(std::size_t x) { return (x + 15) & ~std::size_t(15); }

ChunkLayout chunk_layout(std::uint32_t qc, std::uint32_t chunks, std::uint32_t k, std::uint32_t classes,
                         std::uint32_t outputs) {
  ChunkLayout l;
  std::size_t off = 0;
  auto place = [&](std::size_t& at, std::size_t bytes) {
    at = off;
    off = align16(off + bytes);
  };
  place(l.queries, std::size_t(qc) * chunks * 16);
  place(l.ranges, std::size_t(qc) * sizeof(IdRangeDevice));
  place(l.thresholds, std::size_t(qc) * 4);
  l.in_bytes = off;
  off = 0;
  place(l.distance, std::size_t(qc) * k * 4);
  place(l.id, std::size_t(qc) * k * 8);
  place(l.label, std::size_t(qc) * 4);
  place(l.probability, std::size_t(qc) * classes * 4);
  place(l.value, std::size_t(qc) * outputs * 4);
  l.out_bytes = off;
  return l;
}

/// Device memory, pinned staging and cached graphs for one query batch in flight.
struct QueryContext {
  DeviceArray<unsigned char> input, output;  // one chunk block each (see ChunkLayout)
  DeviceArray<Candidate> candidates, warp_lists;
  DeviceArray<std::uint32_t> lengths, slot, sample_keys, first_keys, first_arrivals;
  DeviceArray<double> class_scratch;
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
  using GraphKey =
      std::tuple<int, std::uint32_t, std::uint32_t, int, int, int, int, int, int, bool, bool, bool, bool, bool,
                 std::uint32_t, std::uint32_t, bool, std::uint32_t, std::uint32_t, std::uint32_t, bool>;
  std::map<GraphKey, GraphExec> graphs;
  // search_device's graphs: a plan's key with the caller's buffers and row stride (the kernels
  // hold their addresses), captured the second time a key is seen; `exec` empty until then.
  using DeviceGraphKey = std::tuple<GraphKey, const void*, std::size_t, const void*, const void*, const void*,
                                    const void*, const void*, const void*>;
  struct DeviceGraph {
    GraphExec exec;
  };
  std::map<DeviceGraphKey, DeviceGraph> device_graphs;

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
  std::unique_ptr<QueryContext> acquire() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return std::make_unique<QueryContext>();
    auto ctx = std::move(free_.back());
    free_.pop_back();
    return ctx;
  }
  void release(std::unique_ptr<QueryContext> ctx) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(ctx));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<QueryContext>> free_;
};

}  // namespace

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const StoreConfig& config)
      : config_(config),
        device_(config.cuda_device),
        stored_dim_(stored_dim(config.metric, config.dim)),
        chunks_(static_cast<std::uint32_t>((stored_dim_ + 3) / 4)),
        scope_(device_),
        store_(config, stored_dim_, update_stream_.get()) {
    check_cuda(cudaGetDeviceProperties(&props_, device_), "cudaGetDeviceProperties");
    if (std::size_t(chunks_) * 16 > kMaxQueryBytes) {
      throw InvalidArgument(concat("CUDA backend: dim=", config.dim, " exceeds its limit of ", kMaxQueryBytes / 4,
                                   " (a query must fit in shared memory); use BackendKind::Cpu"));
    }
    configure_select();
    dense_residency_ = configure_dense(props_.sharedMemPerBlockOptin);
    configure_resident(props_.sharedMemPerBlockOptin);
    if (chunks_ == 1) {
      const int width = int(chunk_floats_for(stored_dim_));
      const bool ip = config_.metric == Metric::InnerProduct;
      for (int filtered = 0; filtered < 2; ++filtered) {
        direct_resident_[filtered] = std::uint32_t(direct_blocks_per_sm(width, ip, filtered != 0) * props_.multiProcessorCount);
      }
    }
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(query_stream_.get());
    cudaStreamSynchronize(update_stream_.get());
  }

  BackendKind kind() const noexcept override { return BackendKind::Cuda; }

  std::string name() const override {
    return concat("cuda:", device_, " ", props_.name, " (sm_", props_.major, props_.minor, ", ",
                  props_.multiProcessorCount, " SMs)");
  }

  void reserve(std::size_t slots, std::size_t batch_ops) override {
    DeviceScope scope(device_);
    store_.reserve(slots, batch_ops);
  }

  void apply(const ResolvedBatch& batch, std::uint64_t epoch) override {
    DeviceScope scope(device_);
    const int back = store_.write_back(batch, epoch);
    std::lock_guard lock(mutex_);
    store_.set_front(back);
  }

  Ticket<DeviceSearchStatus> submit_device(const DeviceQueryRequest& r) const override {
    DeviceScope scope(device_);
    const std::shared_ptr<QueryContext> ctx = acquire();
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
    const std::uint32_t k = static_cast<std::uint32_t>(r.k);
    cudaStream_t caller = reinterpret_cast<cudaStream_t>(r.stream);
    cudaStream_t qs = query_stream_.get();
    std::uint64_t epoch = 0;
    {
      if (!ctx->status.get()) {
        ctx->status = DeviceArray<unsigned long long>(2, "device search status");
        ctx->host_status =
            PinnedArray<unsigned long long>(2, "device search status (host)", props_.canMapHostMemory != 0);
        ctx->status_arrivals = DeviceArray<std::uint32_t>(1, "device search status arrivals");
      }
      std::lock_guard lock(mutex_);
      const int b = store_.front();
      DeviceBuffer& buffer = store_.buffer(b);
      epoch = buffer.epoch;
      const Plan plan = plan_for(b, nq, k, r.visible != nullptr);
      try {
        size_context(*ctx, plan, nq);
      } catch (const OutOfMemory& e) {
        throw OutOfMemory(concat("search_device: ", nq, " queries, k=", k, ": not enough memory for their workspace (",
                                 e.what(), ")"));
      }
      // The queries are ready once the work queued on the caller's stream so far has run.
      ctx->caller_ready.record(caller);
      check_cuda(cudaStreamWaitEvent(qs, ctx->caller_ready.get()), "cudaStreamWaitEvent(caller's stream)");
      check_cuda(cudaStreamWaitEvent(qs, buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
      ready_index(plan, b, "search_device");
      launch_device_batch(*ctx, plan, r, b);
      ctx->done.record(qs);
      buffer.last_read.record(qs);
      // Work queued on the caller's stream from now on sees the results.
      check_cuda(cudaStreamWaitEvent(caller, ctx->done.get()), "cudaStreamWaitEvent(results on the caller's stream)");
    }
    const int device = device_;
    const std::size_t dim = config_.dim;
    return Ticket<DeviceSearchStatus>(
        [ctx] { return ctx->done.done(); },
        [ctx, epoch, r, device, dim] {
          ctx->done.wait();
          DeviceSearchStatus status;
          status.epoch = epoch;
          const unsigned long long bad_query = ctx->host_status.get()[0], bad_range = ctx->host_status.get()[1];
          if (bad_query != ~0ull || bad_range != ~0ull) {
            DeviceScope scope(device);  // get() may run on any thread
            if (bad_query != ~0ull) {
              status.bad_query = static_cast<std::size_t>(bad_query);
              status.bad_row.resize(dim);
              check_cuda(cudaMemcpy(status.bad_row.data(), r.queries + status.bad_query * r.row_stride, dim * 4,
                                    cudaMemcpyDeviceToHost),
                         "cudaMemcpy(invalid query row)");
            }
            if (bad_range != ~0ull) {
              status.bad_range = static_cast<std::size_t>(bad_range);
              check_cuda(cudaMemcpy(&status.range, r.visible + status.bad_range, sizeof(IdRange), cudaMemcpyDeviceToHost),
                         "cudaMemcpy(invalid visible range)");
            }
          }
          return status;
        });
  }

  NonFiniteWrite lookup_and_update(const QUpdateRequest& r, std::uint64_t epoch, QUpdate& out) override {
    DeviceScope scope(device_);
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries), k = static_cast<std::uint32_t>(r.k);
    const std::uint32_t T = outputs();
    const std::size_t entries = std::size_t(nq) * k;
    const std::shared_ptr<QueryContext> held = acquire();
    QueryContext& c = *held;
    cudaStream_t qs = query_stream_.get(), us = update_stream_.get();
    // Everything this call allocates, first: an OutOfMemory leaves the published state as it was.
    try {
      fit_array(knnq_.slots, entries, "KNN-Q neighbour slots");
      fit_array(knnq_.q_before, std::size_t(nq) * T, "KNN-Q estimates");
      fit_array(knnq_.increment, nq, "KNN-Q increments");
      fit_array(knnq_.targets, nq, "KNN-Q targets");
      fit_array(knnq_.actions, nq, "KNN-Q actions");
      fit_array(knnq_.non_finite, 1, "KNN-Q non-finite flag");
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(concat("ReferenceSet::lookup_and_update: ", nq, " states, k=", k, ": ", e.what()));
    }
    QueryRequest request;
    request.queries = r.states;
    request.num_queries = nq;
    request.k = k;
    std::uint32_t chunk_queries = 0;
    const float* front_values = nullptr;
    {
      std::lock_guard lock(mutex_);
      const int b = store_.front();
      DeviceBuffer& buffer = store_.buffer(b);
      front_values = buffer.values.get();
      const Plan plan = plan_for(b, nq, k, false);
      try {
        prepare(c, plan, request);
      } catch (const OutOfMemory& e) {
        throw OutOfMemory(concat("ReferenceSet::lookup_and_update: ", nq, " states, k=", k,
                                 ": not enough memory for their workspace (", e.what(), ")"));
      }
      chunk_queries = plan.chunk_queries;
      check_cuda(cudaStreamWaitEvent(qs, buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
      ready_index(plan, b, "ReferenceSet::lookup_and_update");
      for (std::uint32_t q0 = 0; q0 < nq; q0 += plan.chunk_queries) {
        const std::uint32_t n = std::min(plan.chunk_queries, nq - q0);
        enqueue(c, plan, request, Mode::Neighbors, b, q0, n, false);
        check_cuda(cudaMemcpyAsync(knnq_.slots.get() + std::size_t(q0) * k, c.slot.get(), std::size_t(n) * k * 4,
                                   cudaMemcpyDeviceToDevice, qs),
                   "cudaMemcpyAsync(KNN-Q neighbour slots)");
      }
      c.done.record(qs);
      buffer.last_read.record(qs);
    }
    // On the update stream, after the search: estimates, then the write-back as a batch of
    // whole target rows, scattered into the back buffer now and replayed onto the other later.
    check_cuda(cudaStreamWaitEvent(us, c.done.get()), "cudaStreamWaitEvent(KNN-Q search)");
    check_cuda(cudaMemcpyAsync(knnq_.actions.get(), r.actions.data(), std::size_t(nq) * 4, cudaMemcpyHostToDevice, us),
               "cudaMemcpyAsync(KNN-Q actions)");
    check_cuda(cudaMemcpyAsync(knnq_.targets.get(), r.targets.data(), std::size_t(nq) * 4, cudaMemcpyHostToDevice, us),
               "cudaMemcpyAsync(KNN-Q targets)");
    KnnqParams p;
    p.values = front_values;
    p.slots = knnq_.slots.get();
    p.actions = knnq_.actions.get();
    p.targets = knnq_.targets.get();
    p.alpha = r.alpha;
    p.num_queries = nq;
    p.k = k;
    p.outputs = T;
    p.q_before = knnq_.q_before.get();
    p.increment = knnq_.increment.get();
    p.non_finite = knnq_.non_finite.get();
    check_cuda(cudaMemsetAsync(p.non_finite, 0xff, sizeof(unsigned long long), us), "cudaMemsetAsync(KNN-Q flag)");
    launch_knnq_estimate(p, us);
    // The new rows are checked on the device before they are scattered into a buffer, and where
    // one holds a non-finite value nothing is published. The flag costs an 8-byte copy beside
    // the estimates' and moves the call's one wait before the scatter (which queries then wait
    // for through the buffer's event, as after a publish).
    unsigned long long non_finite = ~0ull;
    float bad_value = 0;
    const auto fill = [&](std::uint32_t* slots, float* values) {
      p.out_slots = slots;
      p.out_values = values;
      launch_knnq_rows(p, us);
    };
    const auto accept = [&] {
      check_cuda(cudaMemcpyAsync(&non_finite, p.non_finite, sizeof non_finite, cudaMemcpyDeviceToHost, us),
                 "cudaMemcpyAsync(KNN-Q flag)");
      check_cuda(cudaMemcpyAsync(out.q_before.data(), knnq_.q_before.get(), std::size_t(nq) * T * 4,
                                 cudaMemcpyDeviceToHost, us),
                 "cudaMemcpyAsync(KNN-Q estimates)");
      check_cuda(cudaStreamSynchronize(us), "cudaStreamSynchronize(KNN-Q write-back)");
      if (non_finite == ~0ull) return true;
      check_cuda(cudaMemcpy(&bad_value, p.out_values + non_finite, sizeof bad_value, cudaMemcpyDeviceToHost),
                 "cudaMemcpy(KNN-Q non-finite value)");
      return false;
    };
    const int back = store_.write_back_targets(static_cast<std::uint32_t>(entries), epoch, fill, accept);
    if (back >= 0) {
      std::lock_guard lock(mutex_);
      store_.set_front(back);
    }
    c.done.wait();
    QueryResult ids = unpack(c, config_, Mode::Neighbors, nq, k, chunk_queries, epoch);
    std::copy(ids.neighbors.ids.begin(), ids.neighbors.ids.end(), out.ids.begin());
    if (back >= 0) return {};
    const std::size_t entry = non_finite / T;
    return {true, out.ids[entry], static_cast<std::uint32_t>(non_finite % T), bad_value};
  }

  void read_snapshot(StoreImage& image) const override {
    DeviceScope scope(device_);
    const std::size_t outputs_n = outputs();
    const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
    const std::uint32_t width = chunk_floats_for(stored_dim_);
    std::vector<float> stored;  // the device layout (device_types.hpp)
    const Event copied;
    {
      std::lock_guard lock(mutex_);
      DeviceBuffer& buffer = store_.buffer(store_.front());
      const std::size_t n = buffer.slot_count;
      image.epoch = buffer.epoch;
      image.slot_count = buffer.slot_count;
      const std::size_t floats = width == 2 ? n * 2 : (n + kTile - 1) / kTile * kTile * chunks_ * 4;
      stored.resize(floats);
      image.ids.resize(n);
      image.labels.assign(classes ? n : 0, 0);
      image.values.assign(n * outputs_n, 0.0f);
      cudaStream_t qs = query_stream_.get();
      check_cuda(cudaStreamWaitEvent(qs, buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
      auto copy = [&](void* to, const void* from, std::size_t bytes, const char* what) {
        if (bytes) check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, qs), "cudaMemcpyAsync", what);
      };
      copy(stored.data(), buffer.vectors.get(), floats * 4, "checkpoint: store vectors");
      copy(image.ids.data(), buffer.ids.get(), n * 8, "checkpoint: store ids");
      if (classes) copy(image.labels.data(), buffer.labels.get(), n * 4, "checkpoint: store labels");
      copy(image.values.data(), buffer.values.get(), n * outputs_n * 4, "checkpoint: store values");
      copied.record(qs);
      buffer.last_read.record(qs);
    }
    copied.wait();
    const std::size_t n = image.slot_count;
    image.vectors.assign(n * stored_dim_, 0.0f);
    for (std::size_t s = 0; s < n; ++s) {
      if (image.ids[s] == kNoId) {
        if (classes) image.labels[s] = 0;
        std::fill_n(image.values.data() + s * outputs_n, outputs_n, 0.0f);
        continue;
      }
      float* out = image.vectors.data() + s * stored_dim_;
      for (std::size_t d = 0; d < stored_dim_; ++d) {
        const std::size_t c = d / 4;
        out[d] = width == 2 ? stored[s * 2 + d] : stored[(((s / kTile) * chunks_ + c) * kTile + s % kTile) * 4 + d % 4];
      }
    }
  }

  void read_targets(std::span<const std::uint32_t> slots, ResolvedBatch& batch) const override {
    StoreImage image;  // targets only: the rows of every slot, then those asked for
    DeviceScope scope(device_);
    const std::size_t outputs_n = outputs();
    const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
    const Event copied;
    {
      std::lock_guard lock(mutex_);
      DeviceBuffer& buffer = store_.buffer(store_.front());
      const std::size_t n = buffer.slot_count;
      image.labels.resize(classes ? n : 0);
      image.values.resize(n * outputs_n);
      cudaStream_t qs = query_stream_.get();
      check_cuda(cudaStreamWaitEvent(qs, buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
      if (classes && n) {
        check_cuda(cudaMemcpyAsync(image.labels.data(), buffer.labels.get(), n * 4, cudaMemcpyDeviceToHost, qs),
                   "cudaMemcpyAsync", "journal: store labels");
      }
      if (outputs_n && n) {
        check_cuda(cudaMemcpyAsync(image.values.data(), buffer.values.get(), n * outputs_n * 4, cudaMemcpyDeviceToHost, qs),
                   "cudaMemcpyAsync", "journal: store values");
      }
      copied.record(qs);
      buffer.last_read.record(qs);
    }
    copied.wait();
    batch.target_slots.assign(slots.begin(), slots.end());
    batch.labels.clear();
    batch.values.clear();
    for (const std::uint32_t s : slots) {
      if (classes) batch.labels.push_back(image.labels[s]);
      batch.values.insert(batch.values.end(), image.values.begin() + std::ptrdiff_t(s * outputs_n),
                          image.values.begin() + std::ptrdiff_t((s + 1) * outputs_n));
    }
  }

  Ticket<QueryResult> submit(QueryRequest request) const override {
    DeviceScope scope(device_);
    const std::shared_ptr<QueryContext> ctx = acquire();
    const Mode mode = mode_of(request.aggregate.output);
    const std::uint32_t nq = static_cast<std::uint32_t>(request.num_queries);
    const std::uint32_t k = static_cast<std::uint32_t>(request.k);
    std::uint64_t epoch = 0;
    std::uint32_t chunk_queries = 0;
    {
      std::lock_guard lock(mutex_);
      const int b = store_.front();
      DeviceBuffer& buffer = store_.buffer(b);
      epoch = buffer.epoch;
      const Plan plan = plan_for(b, nq, k, !request.visible.empty());
      try {
        prepare(*ctx, plan, request);
      } catch (const OutOfMemory& e) {
        throw OutOfMemory(concat("ReferenceSet::search: ", nq, " queries, k=", k,
                                 ": not enough memory for their workspace (", e.what(), ")"));
      }
      chunk_queries = plan.chunk_queries;
      check_cuda(cudaStreamWaitEvent(query_stream_.get(), buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
      ready_index(plan, b, "ReferenceSet::search");
      if (nq <= kGraphMaxQueries && plan.chunk_queries >= nq) {
        launch_graph(*ctx, plan, request, mode, b);
      } else {
        for (std::uint32_t q0 = 0; q0 < nq; q0 += plan.chunk_queries) {
          enqueue(*ctx, plan, request, mode, b, q0, std::min(plan.chunk_queries, nq - q0), false);
        }
      }
      ctx->done.record(query_stream_.get());
      buffer.last_read.record(query_stream_.get());
    }
    // The ticket may outlive this backend: it carries its own copy of the configuration.
    const StoreConfig config = config_;
    return Ticket<QueryResult>(
        [ctx] { return ctx->done.done(); },
        [ctx, mode, nq, k, chunk_queries, epoch, config] {
          ctx->done.wait();
          try {
            return unpack(*ctx, config, mode, nq, k, chunk_queries, epoch);
          } catch (const std::bad_alloc&) {
            throw OutOfMemory(concat("ReferenceSet::search: ", nq, " queries, k=", k,
                                     ": not enough host memory for the results; submit the batch in parts"));
          }
        });
  }

 private:
  /// A pooled context, back in the pool when its last holder lets go: the call that took it if
  /// it throws, else the ticket, which may outlive this backend (then the context is freed).
  std::shared_ptr<QueryContext> acquire() const {
    std::weak_ptr<ContextPool> pool = pool_;
    return std::shared_ptr<QueryContext>(pool_->acquire().release(), [pool](QueryContext* c) {
      std::unique_ptr<QueryContext> owned(c);
      if (auto p = pool.lock()) p->release(std::move(owned));
    });
  }

  /// The plan for a batch over buffer b: the spatial index's search where spatial_wanted says
  /// so, else make_plan's. Under mutex_.
  Plan plan_for(int b, std::uint32_t nq, std::uint32_t k, bool filtered) const {
    const DeviceBuffer& buffer = store_.buffer(b);
    if (!spatial_wanted(b, nq, k, filtered)) return make_plan(nq, k, filtered, buffer.capacity);
    Plan plan;
    plan.k = k;
    plan.spatial = true;
    plan.shape.blocks_per_group = 1;
    plan.shape.chunks = chunks_;
    plan.shape.one_chunk_width = int(chunk_floats_for(stored_dim_));
    plan.stride = 0;  // no candidate lists: the search writes the answers
    plan.chunk_queries = std::min(nq, kSpatialChunkQueries);
    return plan;
  }

  /// Whether a batch over buffer b takes the spatial index (StoreConfig::spatial_index): stores
  /// spatial_store() covers, no id ranges, k <= kSpatialMaxK. Auto: stores of kSpatialMinSlots or
  /// more (batches of kSpatialLargeKMinQueries or more at k > 32), where the index is current (at
  /// k <= 32 the walk beat the scans at every batch size measured: H100, 100,000 to 10,000,000 x 2,
  /// K = 16, Q = 1-1,024, 0.04-0.95x the scans' time). Where it is stale, a refit once
  /// spatial_refit_queries queries (this batch included) have come since the buffer last changed,
  /// and where a refit will not do, a build once kSpatialBuildQueries have, or once that many have
  /// waited on the scans since the index was last brought up to date while the buffer's last epoch
  /// had spatial_refit_queries or more and the last refit stayed within its limits (a store that
  /// changes every few hundred queries: one build, then refits; not a store whose points jump,
  /// which the refits cannot follow). A build costs about what the scans of a few hundred queries
  /// save (1,000,000 x 2: 0.11 ms against 0.34 -> 0.08 ms at Q = 1,024) and a refit a third of
  /// that. An index counts as current only while SpatialTree::usable (a refit that sent most moved
  /// points to the overflow does not), and after such a refit builds wait for epochs that last (see
  /// below). A store that changes every few dozen queries keeps the scans (counting only the
  /// queries since the last update made a query thread of 16 per batch, with a publish after every
  /// one or two, pay a refit or a build every 8 batches for an index that served one or two: query
  /// p99 55 -> 172 us, bench_updates). Under mutex_.
  bool spatial_wanted(int b, std::uint32_t nq, std::uint32_t k, bool filtered) const {
    if (config_.spatial_index == streamknn::SpatialIndex::Off || !spatial_store() || filtered || k > kSpatialMaxK ||
        nq == 0) {
      return false;
    }
    if (config_.spatial_index == streamknn::SpatialIndex::Always) return true;
    const DeviceBuffer& buffer = store_.buffer(b);
    if (buffer.slot_count < kSpatialMinSlots || (k > 32 && nq < kSpatialLargeKMinQueries)) return false;
    SpatialTree& index = spatial_[b];
    if (index.usable(buffer)) return true;
    if (index.counted_epoch != buffer.epoch) {
      index.counted_epoch = buffer.epoch;
      index.queries_last_epoch = index.queries_this_epoch;
      index.queries_this_epoch = 0;
    }
    index.queries_this_epoch += nq;
    index.queries_waiting += nq;
    const std::uint64_t refit_queries = spatial_refit_queries(buffer.slot_count);
    if (index.refittable(buffer)) return index.queries_this_epoch >= refit_queries;
    if (index.refit_overflowed()) {
      // Points jump: each epoch needs a build, paid by one batch. Build for epochs that last (this
      // one or the one before ran twice the build's queries): a query thread of 16 per batch with
      // four producers publishing about 1,000 queries apart, building at the 1,024th query of most
      // epochs, had query p99 1.4-4.0x the update-free one; with this rule 0.9-2.1x
      // (bench_updates).
      return index.queries_this_epoch >= kSpatialBuildQueries &&
             std::max(index.queries_this_epoch, index.queries_last_epoch) >= 2 * kSpatialBuildQueries;
    }
    return index.queries_this_epoch >= kSpatialBuildQueries ||
           (index.queries_waiting >= kSpatialBuildQueries && index.queries_last_epoch >= refit_queries &&
            !index.refit_failed());
  }

  /// The store buffer whose device view this is.
  int buffer_of(const StoreView* view) const { return store_.buffer(0).view.get() == view ? 0 : 1; }

  /// Stores the spatial index covers: at most two stored elements under L2 ranks, or points on
  /// the unit sphere (haversine; cosine at three elements), whose grid is on the faces of a cube.
  bool spatial_store() const noexcept {
    if (config_.metric == Metric::InnerProduct) return false;
    return stored_dim_ <= 2 || (stored_dim_ == 3 && (config_.metric == Metric::Haversine || config_.metric == Metric::Cosine));
  }

  /// Brings buffer b's spatial index up to date on the query stream where the plan uses it and
  /// it is stale (after the stream's wait for the buffer's writes): a refit where one will do,
  /// else a build. Under mutex_.
  void ready_index(const Plan& plan, int b, const char* where) const {
    if (!plan.spatial) return;
    const DeviceBuffer& buffer = store_.buffer(b);
    SpatialTree& index = spatial_[b];
    if (index.usable(buffer)) return;
    const int width = int(chunk_floats_for(stored_dim_));
    try {
      if (index.refittable(buffer)) {
        index.refit(buffer, width, query_stream_.get(), props_.multiProcessorCount);
      } else {
        index.build(buffer, width, query_stream_.get(), props_.multiProcessorCount, props_.canMapHostMemory != 0);
      }
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(concat(where, ": not enough device memory for the spatial index of ", buffer.slot_count,
                               " slots (", e.what(), "); StoreConfig::spatial_index = Off does without it"));
    }
    index.queries_waiting = 0;
  }

  /// Launch geometry from the device's properties and the shape: the largest query group and
  /// warps per block whose shared memory leaves room for two blocks per SM, the occupancy
  /// calculator's resident blocks split between the query groups, and a query chunk size that
  /// bounds the candidate workspace.
  Plan make_plan(std::uint32_t nq, std::uint32_t k, bool filtered, std::uint32_t capacity) const {
    Plan plan;
    plan.k = k;
    ScanShape& s = plan.shape;
    s.inner_product = config_.metric == Metric::InnerProduct;
    s.filtered = filtered;
    s.chunks = chunks_;
    // The store keeps chunk_floats_for(stored_dim) floats per slot; the one-chunk kernels read as many.
    s.one_chunk_width = chunks_ == 1 ? int(chunk_floats_for(stored_dim_)) : 0;
    const std::uint32_t tiles = std::max<std::uint32_t>(1, capacity / kTile);
    const std::uint32_t sms = static_cast<std::uint32_t>(props_.multiProcessorCount);
    if (direct_pays(nq, k, filtered, capacity)) {
      plan.direct_blocks = direct_blocks(capacity, nq, direct_resident_[filtered]);
      s.blocks_per_group = int(plan.direct_blocks);
      plan.stride = plan.direct_blocks * k;
      plan.chunk_queries = nq;
      return plan;
    }
    if (dense_pays(nq, k, filtered, tiles)) {
      plan.dense_stride = tiles * kTile;
      s.blocks_per_group = 1;
      plan.stride = k;
      // Rows of the workspace the budget holds; chunks of a multiple of the product kernel's
      // 64-query tile when the batch is split.
      const std::size_t rows = kDenseBudget / (dense_workspace_words(1, plan.dense_stride) * 4);
      plan.chunk_queries = nq <= rows ? nq : std::max<std::uint32_t>(dense_min_queries(k), std::uint32_t(rows / 64 * 64));
      return plan;
    }
    const std::size_t budget = std::min<std::size_t>(props_.sharedMemPerBlockOptin, props_.sharedMemPerMultiprocessor / 2 - 2048);
    const std::vector<int> groups(std::begin(kQueryGroups), std::end(kQueryGroups));
    std::size_t gi = 0;
    while (gi + 1 < groups.size() && std::uint32_t(groups[gi]) < nq) ++gi;  // smallest group >= nq (or 16)
    s.query_group = groups[gi];
    plan.sample_step = sample_step_for(nq, k, tiles);
    if (plan.sample_step) {
      plan.sample_step = std::max(plan.sample_step, (tiles + kMaxSampleTiles - 1) / kMaxSampleTiles);
      plan.sample_tiles = (tiles + plan.sample_step - 1) / plan.sample_step;
      // Enough ranks for a tight bound: about 16 k of them (as many points as the sample rule asks).
      plan.sample_per_tile = 1;
      while (plan.sample_per_tile < kTile && std::size_t(plan.sample_tiles) * plan.sample_per_tile < std::size_t(16) * k) {
        plan.sample_per_tile *= 2;
      }
    }
    if (plan.sample_step != 0 && resident_pays(nq, k, filtered, tiles)) {
      choose_resident(plan, nq, k, capacity);
      return plan;
    }
    // Warps per block: as many as the group's registers allow (16 for small groups, 8 for
    // large), fewer for small stores so every SM gets work, and fewer still when the warps'
    // private lists (query group x k each) would not fit in shared memory.
    auto wanted_warps = [&] {
      int warps = s.query_group <= 4 ? 16 : 8;
      while (warps > 4 && tiles < std::uint32_t(warps) * sms * 2) warps /= 2;
      return warps;
    };
    auto choose_warps = [&] {
      s.warps_per_block = wanted_warps();
      while (s.warps_per_block > 1 && scan_shared_bytes(s, k) > budget) s.warps_per_block /= 2;
    };
    const int best_group = s.query_group, best_warps = wanted_warps();
    choose_warps();
    while (scan_shared_bytes(s, k) > budget || (s.warps_per_block < 4 && gi > 0)) {
      if (gi > 0) {
        s.query_group = groups[--gi];
        choose_warps();
      } else {
        throw InvalidArgument(concat("CUDA backend: k=", k, " with dim=", config_.dim, " needs ", scan_shared_bytes(s, k),
                                     " bytes of shared memory per block, more than the device's ", budget));
      }
    }
    if (global_lists_pay(s, best_group, best_warps, plan.sample_step, k, budget)) {
      s.query_group = best_group;
      s.global_lists = true;
      s.warps_per_block = wanted_warps();
    }
    choose_screen(s, nq, k, plan.sample_step, tiles, wanted_warps(), budget);
    // One to three queries over a large one-chunk store take the several-tiles kernel of a group of
    // 4 (its empty rows admit nothing): a lane's tiles are then loads in flight together and one
    // survivor test on their smallest rank, where the one-query kernel read the grid-wide bound and
    // tested every tile. H100 A/B against it: 10,000,000 x 2 Q = 1 / 2 0.76 / 0.78x, 1,000,000 x 2
    // 0.95 / 0.96x, haversine 0.93-0.95x.
    // Four tiles in flight per warp in the one-query kernel instead measured 1.015x.
    if (s.query_group < 4 && s.one_chunk_width != 0 && !s.filtered && !s.global_lists) {
      ScanShape g = s;
      g.query_group = 4;
      if (tiles_pay(g, plan.sample_step, k, tiles) && scan_shared_bytes(g, k) <= budget) s.query_group = 4;
    }
    s.tiled = tiles_pay(s, plan.sample_step, k, tiles);
    const int per_sm = cached_blocks_per_sm(s, k);
    const int resident = std::max(1, per_sm) * props_.multiProcessorCount;
    std::uint32_t chunk = nq;
    for (;;) {
      const std::uint32_t groups_n = (chunk + s.query_group - 1) / s.query_group;
      // At least a tile per warp, and all resident blocks when the store is large enough.
      const std::uint32_t want = (tiles + s.warps_per_block - 1) / s.warps_per_block;
      s.blocks_per_group = int(std::clamp<std::uint32_t>(want, 1, std::max<std::uint32_t>(1, resident / groups_n)));
      const std::size_t bytes = (std::size_t(chunk) * s.blocks_per_group * k + scan_warp_list_entries(s, chunk, k)) *
                                    sizeof(Candidate) +
                                std::size_t(chunk) * plan.sample_keys() * sizeof(std::uint32_t);
      const bool grid_fits = groups_n <= 65535;  // grid.y holds the query groups
      if ((bytes <= kWorkspaceBudget && grid_fits) || chunk <= std::uint32_t(s.query_group)) break;
      chunk = std::max<std::uint32_t>(s.query_group, chunk / 2 / s.query_group * s.query_group);
    }
    plan.chunk_queries = chunk;
    plan.stride = std::uint32_t(s.blocks_per_group) * k;
    plan.first_bound = first_bound_pays(plan, tiles);
    return plan;
  }

  /// The direct search (launch_direct) instead of the sample pass and the scan: stores of one
  /// float4 chunk (dims <= 4, every metric, with or without id ranges), k <= kDirectMaxK, batches
  /// of at most kDirectMaxQueries queries, where each block streams at most kDirectMaxSegments
  /// segments: every query reads the whole store, and a block's segments are a chain of memory
  /// round trips. H100 A/B against the sample pass and the scan (K = 16 / 64): 100,000 x 2 Q = 1-16
  /// 0.60-0.90x; 1,000,000 x 2 Q = 1-4 0.83-0.95x, Q = 6 0.99 / 1.00x, Q = 8-16 1.01-1.40x;
  /// 10,000,000 x 2 Q = 1 0.96 / 1.11x, Q = 2-16 1.17-3.8x.
  bool direct_pays(std::uint32_t nq, std::uint32_t k, bool filtered, std::uint32_t capacity) const {
    if (chunks_ != 1 || k > kDirectMaxK || nq > kDirectMaxQueries) return false;
    const std::uint64_t segments = (std::uint64_t(capacity) + kDirectSegment - 1) / kDirectSegment;
    return segments * nq <= std::uint64_t(kDirectMaxSegments) * direct_resident_[filtered];
  }

  /// The query-resident scan (launch_resident) instead of the scan, after the sample pass: stores
  /// of one float4 chunk (dims <= 4), L2 ranks (haversine and cosine included), no id ranges,
  /// k <= kResidentMaxK, batches of 16+ queries with nq x k >= kResidentMinWork (4 x that on stores
  /// of fewer than 64 tiles per SM). H100 A/Bs against the sample pass and the scan (two rounds
  /// each):
  /// - 1,000,000 x 2: K = 16 Q = 64 0.90-0.97x, Q = 128 0.67-0.69x, Q = 256 0.59-0.61x, Q = 1,024
  ///   0.48-0.50x; K = 128 Q = 16-1,024 0.73-0.36x. Earlier versions measured K = 16 Q = 16 / 32
  ///   1.37 / 1.14x, so those keep the scan.
  /// - 10,000,000 x 2: K = 16 Q = 64 0.88-0.90x, Q = 128-1,024 0.50-0.53x (Q = 16 / 32 2.2 / 1.4x in
  ///   an earlier version); K = 128 Q = 16 0.99-1.01x, Q = 32-1,024 0.29-0.66x. Haversine K = 16
  ///   Q = 64 0.94-1.01x, Q = 256 / 1,024 0.52-0.63x.
  /// - 100,000 x 2: K = 16 Q = 1,024 0.66-0.70x, Q = 256 1.02-1.05x (kept for the sake of K = 128
  ///   Q = 32, 0.79x, at the same queries x k), Q = 32-128 1.09-1.17x in an earlier version;
  ///   K = 128 Q = 32-1,024 0.54-0.85x.
  bool resident_pays(std::uint32_t nq, std::uint32_t k, bool filtered, std::uint32_t tiles) const {
    if (chunks_ != 1 || filtered || config_.metric == Metric::InnerProduct || k > kResidentMaxK || nq < kResidentMinQueries) {
      return false;
    }
    const bool small = tiles < 64 * std::uint32_t(props_.multiProcessorCount);
    return std::uint64_t(nq) * k >= (small ? 4 : 1) * kResidentMinWork;
  }

  /// The query-resident scan's geometry: kResidentWarps warps per block (fewer where their shared
  /// memory exceeds the device's), a row of blocks per kResidentQueriesPerBlock queries, as many
  /// blocks per row as one wave holds, each warp streaming at least kResidentMinTiles tiles; where
  /// one wave would give a row fewer than 2 x sample_step warps, at least
  /// kResidentShareFactor x sample_step of them. The sample's bound admits about sample_step x k
  /// points per query; with fewer warps per row their lists fill and every further hit rescans a
  /// list of k. Batches whose sample keys and lists (the warps' and the blocks') exceed the
  /// workspace run in chunks of whole rows. H100 A/B against one wave and no chunks (two rounds):
  /// K = 128 Q = 32,768 0.46x (1,000,000 x 2, 98.9 -> 45.1 ms) and 0.36x (10,000,000 x 2); K = 128
  /// Q = 4,096 0.89x / 0.52x; K = 16 Q = 4,096-32,768 0.84-0.98x. Factors 2 and 8 measured
  /// 0.53 / 0.45x and 0.40 / 0.39x at K = 128 Q = 32,768, and 8 lost at 10,000,000 x 2 K = 128
  /// Q = 4,096 (0.59 against 0.52x).
  /// Applied to every batch, the floor took 10,000,000 x 2 haversine Q = 1,024 (sample step 77)
  /// from 3.2 to 4.1 ms; with the one-wave test 3.17 ms again.
  void choose_resident(Plan& plan, std::uint32_t nq, std::uint32_t k, std::uint32_t capacity) const {
    const std::uint32_t sms = static_cast<std::uint32_t>(props_.multiProcessorCount);
    const int width = int(chunk_floats_for(stored_dim_));
    std::uint32_t warps = kResidentWarps;
    while (warps > 1 && resident_shared_bytes(width, warps) > props_.sharedMemPerBlockOptin) warps /= 2;
    const std::uint32_t resident = std::uint32_t(cached_resident_blocks_per_sm(width, warps)) * sms;
    const std::uint32_t tiles = std::max<std::uint32_t>(1, capacity / kResidentTile);
    const std::uint32_t most_blocks = std::max<std::uint32_t>(1, tiles / (warps * kResidentMinTiles));
    // One wave of the whole batch where it already gives each row 2 x sample_step warps (a larger
    // floor there only adds a wave: 10,000,000 x 2 haversine Q = 1,024, sample step 77, 1.29x).
    const std::uint32_t batch_rows = (nq + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock;
    const bool wave_enough = std::uint64_t(resident / batch_rows) * warps >= 2 * std::uint64_t(plan.sample_step);
    const std::uint32_t fewest_blocks =
        wave_enough ? 1 : std::min(most_blocks, (kResidentShareFactor * plan.sample_step + warps - 1) / warps);
    // Per query: a block's list (Candidates) and its warps' lists (8-byte entries), and the keys.
    const std::size_t list_bytes = std::size_t(k) * (sizeof(Candidate) + warps * sizeof(Candidate) / 2);
    const std::size_t key_bytes = plan.sample_keys() * sizeof(std::uint32_t);
    const std::size_t most = kWorkspaceBudget / (key_bytes + fewest_blocks * list_bytes);
    std::uint32_t chunk = nq;
    if (chunk > most) {
      chunk = std::max<std::uint32_t>(kResidentQueriesPerBlock,
                                      std::uint32_t(most / kResidentQueriesPerBlock * kResidentQueriesPerBlock));
    }
    chunk = std::min<std::uint32_t>(chunk, 65535u * kResidentQueriesPerBlock);  // grid.y holds the rows
    const std::uint32_t rows = (chunk + kResidentQueriesPerBlock - 1) / kResidentQueriesPerBlock;
    std::uint32_t blocks = std::clamp<std::uint32_t>(resident / rows, fewest_blocks, most_blocks);
    const std::size_t sample_bytes = std::size_t(chunk) * key_bytes;
    const std::size_t budget_blocks = (kWorkspaceBudget - std::min(sample_bytes, kWorkspaceBudget)) / (std::size_t(chunk) * list_bytes);
    blocks = std::uint32_t(std::clamp<std::size_t>(budget_blocks, 1, blocks));
    plan.resident_warps = warps;
    plan.shape.blocks_per_group = int(blocks);
    plan.stride = blocks * k;
    plan.chunk_queries = chunk;
  }

  int cached_resident_blocks_per_sm(int width, std::uint32_t warps) const {
    const auto key = std::make_pair(width, warps);
    auto it = resident_occupancy_.find(key);
    if (it == resident_occupancy_.end()) it = resident_occupancy_.emplace(key, resident_blocks_per_sm(width, warps)).first;
    return it->second;
  }

  /// The dense screen (DenseParams) instead of the sample pass and the scan: L2 ranks (cosine
  /// included), no id ranges, k <= kDenseMaxK, batches of dense_min_queries(k) or more over stores
  /// small enough that every warp of a scan would see only a few tiles (fewer than 64 per SM), with
  /// vectors of kDenseMinChunks chunks or more, where the selection's shared memory fits (large k
  /// with very long vectors keep the scan). H100 A/Bs against the sample pass and scan: MNIST-like
  /// Q = 16-64 0.65-0.80x, Q = 12 0.88-0.91x; 100,000 x 128 Q = 16-64 0.61-0.94x, Q = 12 0.82x
  /// (K = 128) and 1.02x (K = 64).
  bool dense_pays(std::uint32_t nq, std::uint32_t k, bool filtered, std::uint32_t tiles) const {
    if (filtered || config_.metric == Metric::InnerProduct || chunks_ < kDenseMinChunks || k > kDenseMaxK) return false;
    return nq >= dense_min_queries(k) && tiles < 64 * std::uint32_t(props_.multiProcessorCount) &&
           tiles <= kDenseMaxGroups && dense_select_min_shared(k, chunks_, tiles) <= props_.sharedMemPerBlockOptin;
  }

  /// The smallest batch the dense screen takes. Its product runs a tile of 8 or 16 queries whatever
  /// the batch, and its selection a block per query, so below 16 queries it costs about the same
  /// (MNIST-like: 0.106-0.124 ms at Q = 2-5 since its exact product), while the scan's cost grows
  /// with the batch and k. H100 A/Bs against the sample pass and scan:
  /// - MNIST-like (196 chunks), the exact product (two rounds): Q = 2 0.95-0.96x (K = 64) and
  ///   0.97-0.98x (K = 128), Q = 3 0.80-0.81x / 0.87x, Q = 4 0.76-0.79x / 0.85-0.87x; one query
  ///   keeps the scan (0.100 ms).
  /// - 100,000 x 128 (32 chunks), the screened product: K = 128 Q = 6-11 0.90-0.95x, Q = 5 1.00x,
  ///   Q = 4 1.04x; K = 64 Q = 4-11 1.05-1.12x slower.
  /// The cut at 64 chunks lies between the two shapes measured (32 and 196 chunks).
  std::uint32_t dense_min_queries(std::uint32_t k) const {
    if (chunks_ >= kDenseLongChunks) return kDenseLongMinQueries;
    return k >= kDenseLargeK ? kDenseLargeKMinQueries : kDenseMinQueries;
  }

  /// The sample pass's step, or 0 for none. Measured on an H100 (docs/performance.md):
  /// - Large stores: a single query of dim 128+ starts cold about as fast as it runs a sample
  ///   pass (ImageNet- and GoogleNews-like, K 16-128: 0.95-1.05x); from two queries it pays
  ///   (ImageNet-like Q = 2: 1.2x). At dim <= 8 (one or two float4 chunks) a point costs a few
  ///   flops, so a cold start's list insertions (every warp admits most of its first tiles)
  ///   outweigh the scan even for one query (ncu, 1,000,000 x 2, K = 16, Q = 1: 70 us at 10%
  ///   of DRAM bandwidth): there the sample pass runs from Q = 1.
  /// - Smaller stores: every warp sees only a few tiles, so a cold start admits nearly every point
  ///   into some warp's list, for every query. A denser sample (every 8th tile) pays from groups of
  ///   12 queries, from 8 at k >= 128, and from 4 at dim <= 128, where a sampled tile is a short
  ///   chain of loads for its warp (MNIST-like 70,000 x 784: Q = 12..64 1.3-1.6x faster, Q <= 8 at
  ///   K 16-64 0.55-0.88x; 100,000 x 2: Q = 4 / 8 1.2 / 1.65x; 100,000 x 128: Q = 4..9 1.0-1.5x,
  ///   Q <= 2 0.76-1.0x).
  ///   Since the sample pass splits its sums (L2 over 32+ chunks) it also pays from 8 queries at
  ///   k < 128: MNIST-like K = 64 Q = 8 0.80x; from 4 it was 0.95-1.015x and from 2 1.0-1.08x
  ///   slower. Inner-product batches of 9+ (kScreenMinQueries) take it at any k, since the screen
  ///   that runs them needs its bound; without it they ran the exact form from a cold start (H100
  ///   A/B): MNIST-like Q = 9-11 K = 64 0.63-0.65x (Q = 9 0.296 -> 0.192 ms), K = 32 0.81-0.84x,
  ///   K = 16 0.85-0.87x.
  /// - Large stores, batches of 16+ queries or 8+ at k >= 128, dims <= 128: every 16th tile (two
  ///   A/Bs against every 32nd): ImageNet-like K = 128 Q = 8 / 12 0.95-0.97x, Q = 16-64 0.87-0.91x,
  ///   K = 64 Q = 16-64 0.93-0.98x, 1,000,000 x 2 Q = 32-1,024 0.86-0.92x; 10,000,000 x 2 unchanged
  ///   (kMaxSampleTiles caps its step at 77). GoogleNews-like (300 dims, step capped at 23) gained
  ///   nothing (K = 128 Q = 8-12 1.00-1.01x in three builds), so dims over 128 keep every 32nd tile
  ///   (A/B against the rule without that limit: GoogleNews-like 0.99-1.00x, within the spread of
  ///   that run's unchanged rows, 0.99-1.05x).
  ///   Every 16th tile for fewer queries measured 1.00-1.01x (ImageNet-like K = 64 Q = 2-12, K = 128
  ///   Q = 2-4); every 8th lost at K = 64 (1.02-1.09x) and gained no more at K = 128.
  /// - Smaller stores, 16+ queries at k >= 128 over dims 9-128: every 4th tile (H100 A/B against
  ///   every 8th, three rounds): 100,000 x 128 K = 128 Q = 16-64 0.84-0.96x (K = 64 0.94-0.99x,
  ///   within the batch rows' noise). MNIST-like (784 dims), where a sampled tile costs 6x as much,
  ///   lost 1.00-1.19x.
  std::uint32_t sample_step_for(std::uint32_t nq, std::uint32_t k, std::uint32_t tiles) const {
    const std::uint32_t sms = static_cast<std::uint32_t>(props_.multiProcessorCount);
    auto enough = [&](std::uint32_t step) { return std::size_t(tiles / step) * kTile >= std::size_t(16) * k; };
    if (tiles >= 64 * sms && enough(kSampleStep)) {
      if (nq < 2 && chunks_ > 2) return 0;
      const bool dense = chunks_ <= 32 && (nq >= 16 || (nq >= 8 && k >= 128));
      return dense && enough(kDenseSampleStep) ? kDenseSampleStep : kSampleStep;
    }
    const bool screened_ip = config_.metric == Metric::InnerProduct && nq >= kScreenMinQueries;
    const bool many_lists =
        nq >= 12 || screened_ip || (nq >= 8 && (k >= 128 || split_sample_possible())) || (nq >= 4 && chunks_ <= 32);
    if (!many_lists) return 0;
    if (nq >= 16 && k >= 128 && chunks_ > 2 && chunks_ <= 32 && enough(kSmallStoreDenseStep)) return kSmallStoreDenseStep;
    return enough(kSmallStoreSampleStep) ? kSmallStoreSampleStep : 0;
  }

  /// The split sample pass (split sums) can run: L2 ranks over vectors of enough chunks.
  bool split_sample_possible() const {
    return config_.metric != Metric::InnerProduct && chunks_ > 1 && sample_staged_bytes(chunks_) <= kSampleStagedMaxBytes &&
           sample_split_warps(chunks_) > 1;
  }

  /// The first-tile bound where no sample pass runs and every warp streams three tiles or more:
  /// without it a cold warp admits most points of its first tiles (its list's k-th is the k-th of
  /// a few hundred points); with it the whole grid's first tiles bound every warp after about
  /// one tile. The k-th of the blocks' minima needs at least k blocks.
  bool first_bound_pays(const Plan& plan, std::uint32_t tiles) const {
    const ScanShape& s = plan.shape;
    const std::uint32_t blocks = std::uint32_t(s.blocks_per_group);
    if (plan.sample_step != 0 || s.query_group != 1 || s.filtered || s.tiled || plan.k > blocks ||
        blocks > kFirstBoundMaxBlocks) {
      return false;
    }
    return std::uint64_t(tiles) >= 3 * std::uint64_t(blocks) * std::uint32_t(s.warps_per_block);
  }

  /// Several tiles per lane (one-chunk stores, 4+ queries, no ranges): the survivor test runs on
  /// a group of tiles' smallest rank, and a group with any survivor is scored again tile by tile,
  /// so it pays where survivors are sparse. After a sample pass about sample_step * k points per
  /// query pass it; measured (H100, K = 16, Q = 256-1,024, groups of 16) against one tile per
  /// lane: 10,000,000 x 2 1.2-1.3x (about 6% of the tiles hold a survivor of some query of the
  /// group), 1,000,000 x 2 1.0x (26%), 100,000 x 2 0.94x (66%). So: at most 1 tile in 8.
  bool tiles_pay(const ScanShape& s, std::uint32_t sample_step, std::uint32_t k, std::uint32_t tiles) const {
    if (s.one_chunk_width == 0 || s.query_group < 4 || s.filtered || sample_step == 0) return false;
    return std::size_t(s.query_group) * k * sample_step * 8 <= tiles;
  }

  /// The dot-product screen (ScanShape::screen): batches of more than 12 queries (9 for inner
  /// product) over vectors of several chunks, no ranges, after a sample pass whose bound leaves few
  /// pairs for an exact rank (about sample_step x k per query, at most one per query in
  /// kScreenSparse tiles), when the group's queries, rings and global lists fit. Inner product
  /// takes the same kernel, whose dot products are then the exact ranks. H100 A/B against the exact
  /// form: GoogleNews-like Q = 24-64 0.62-0.67x, ImageNet-like 0.71-0.89x; denser pairs lost:
  /// MNIST-like in groups of 16 1.03-1.22x, and groups of 16 at Q = 12-16 0.90-1.10x. Where 32
  /// queries fill half the SM's shared memory, one block per SM: MNIST-like K = 64 Q = 24-64
  /// 0.97-0.98x, 100,000 x 128 K = 64 0.94-0.96x at Q = 24 and 64; one pair per query in 2 tiles
  /// (K = 128 there) lost 1.08-1.25x.
  /// Batches of 13-16 take a group of 16 since its stage loop is unrolled by 2 (no spills): H100
  /// A/B against the exact form: GoogleNews-like Q = 13 / 16 0.87 / 0.88x (K = 64), 0.91 / 0.93x
  /// (K = 128), ImageNet-like 0.89 / 0.90x, 0.93 / 0.98x, MNIST-like K = 64 0.94x, 100,000 x 128
  /// 0.98-0.99x (the earlier 0.90-1.10x was a fully unrolled kernel that spilled). Inner product
  /// takes a group of 12 for 9-12 queries (no pair to rank again): H100 A/B against the exact form
  /// (two rounds): 100,000 x 128 K = 64 0.92-0.93x, ImageNet-like 0.96-0.99x, GoogleNews- and
  /// MNIST-like 0.99-1.01x. L2 there lost (GoogleNews-like 1.03-1.09x, ImageNet-like 1.03-1.12x,
  /// MNIST-like takes the dense screen).
  void choose_screen(ScanShape& s, std::uint32_t nq, std::uint32_t k, std::uint32_t sample_step, std::uint32_t tiles,
                     int warps, std::size_t budget) const {
    if (s.filtered || chunks_ < 2 || sample_step == 0) return;
    if (nq < (s.inner_product ? kScreenMinQueries : std::uint32_t(kScreenFewGroup) + 1)) return;
    if (std::uint64_t(sample_step) * k * kScreenSparse > tiles) return;
    ScanShape g = s;
    g.query_group = nq <= std::uint32_t(kScreenFewGroup)     ? kScreenFewGroup
                    : nq <= std::uint32_t(kScreenSmallGroup) ? kScreenSmallGroup
                                                             : kScreenGroup;
    g.screen = true;
    g.global_lists = true;
    g.tiled = false;
    g.warps_per_block = warps;
    if (scan_shared_bytes(g, k) > budget) {
      // 32 queries of many chunks (MNIST-like 784 dims: 100 KB) leave no room for two blocks per
      // SM: one block then, with the SM's warps in it (fewer where even that does not fit).
      const std::size_t one_block = props_.sharedMemPerBlockOptin - 2048;
      g.warps_per_block = kScreenMaxWarps;
      while (g.warps_per_block > 8 && scan_shared_bytes(g, k) > one_block) g.warps_per_block /= 2;
      if (scan_shared_bytes(g, k) > one_block) return;
    }
    const std::size_t resident = std::size_t(std::max(1, cached_blocks_per_sm(g, k))) * props_.multiProcessorCount;
    if (resident * g.warps_per_block * g.query_group * k * sizeof(Candidate) > kWarpListBudget) return;
    s = g;
  }

  /// Keep the warps' lists in global memory when in shared memory they would cost warps or a
  /// smaller query group, and a sample pass makes them sparse (about sample_step * k entries
  /// per query over the whole store), within a memory budget.
  bool global_lists_pay(const ScanShape& s, int best_group, int best_warps, std::uint32_t sample_step, std::uint32_t k,
                        std::size_t budget) const {
    if (sample_step == 0 || best_group < 8) return false;
    if (s.query_group == best_group && s.warps_per_block >= best_warps) return false;
    ScanShape g = s;
    g.query_group = best_group;
    g.global_lists = true;
    g.warps_per_block = best_warps;
    if (scan_shared_bytes(g, k) > budget) return false;
    const std::size_t resident = std::size_t(std::max(1, cached_blocks_per_sm(g, k))) * props_.multiProcessorCount;
    return resident * g.warps_per_block * g.query_group * k * sizeof(Candidate) <= kWarpListBudget;
  }

  int cached_blocks_per_sm(const ScanShape& s, std::uint32_t k) const {
    const auto key =
        std::make_tuple(s.query_group, s.warps_per_block, s.inner_product, s.filtered, s.global_lists, s.tiled, s.screen, k);
    auto it = occupancy_.find(key);
    if (it == occupancy_.end()) it = occupancy_.emplace(key, configure_scan(s, k)).first;
    return it->second;
  }

  std::uint32_t classes() const noexcept {
    return config_.target.kind == TargetSpec::Kind::Classes ? config_.target.count : 0;
  }
  std::uint32_t outputs() const noexcept {
    return config_.target.kind == TargetSpec::Kind::Outputs ? config_.target.count : 0;
  }

  /// Sizes the context for the plan and stages every chunk's input block in pinned memory.
  void prepare(QueryContext& c, const Plan& plan, const QueryRequest& r) const {
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries), qc = plan.chunk_queries;
    const std::uint32_t chunk_count = (nq + qc - 1) / qc;
    const ChunkLayout l = size_context(c, plan, nq);
    if (config_.debug) std::memset(c.host_out.get(), 0xA5, chunk_count * l.out_bytes);
    const std::size_t padded = std::size_t(chunks_) * 4;
    for (std::uint32_t q = 0; q < nq; ++q) {
      unsigned char* block = c.host_in.get() + (q / qc) * l.in_bytes;
      const std::uint32_t i = q % qc;
      float* row = reinterpret_cast<float*>(block + l.queries) + i * padded;
      std::memcpy(row, r.queries.data() + q * stored_dim_, stored_dim_ * sizeof(float));
      std::fill(row + stored_dim_, row + padded, 0.0f);
      if (!r.visible.empty()) reinterpret_cast<IdRangeDevice*>(block + l.ranges)[i] = {r.visible[q].begin, r.visible[q].end};
      reinterpret_cast<std::uint32_t*>(block + l.thresholds)[i] = kNoBound;
    }
  }

  /// Sizes the context's device workspace and pinned staging for the plan.
  ChunkLayout size_context(QueryContext& c, const Plan& plan, std::uint32_t nq) const {
    const std::uint32_t qc = plan.chunk_queries, k = plan.k;
    const std::uint32_t chunk_count = (nq + qc - 1) / qc;
    const ChunkLayout l = chunk_layout(qc, chunks_, k, classes(), outputs());
    bool changed = false;
    try {
      changed |= c.fit(c.input, l.in_bytes, "query input block");
      if (c.fit(c.output, l.out_bytes, "query output block")) {
        // A result copy spans alignment gaps and unused rows of a partial chunk: give them defined
        // bytes (on the query stream, which every use of the context is ordered on: it does not
        // synchronise with the legacy default stream).
        check_cuda(cudaMemsetAsync(c.output.get(), 0, c.output.bytes(), query_stream_.get()),
                   "cudaMemsetAsync(query output block)");
        changed = true;
      }
      if (c.fit(c.candidates, std::size_t(qc) * plan.stride, "search candidates")) {
        // The select reads whole list prefixes and masks what lies past a list's length: give
        // those bytes a defined value once.
        check_cuda(cudaMemsetAsync(c.candidates.get(), 0, c.candidates.bytes(), query_stream_.get()),
                   "cudaMemsetAsync(search candidates)");
        changed = true;
      }
      changed |= c.fit(c.lengths, std::size_t(qc) * plan.shape.blocks_per_group, "candidate list lengths");
      // The resident scan's warp lists hold 8-byte entries (half a Candidate each).
      const std::size_t warp_list_entries = plan.resident_warps
                                                ? (std::size_t(qc) * plan.stride * plan.resident_warps + 1) / 2
                                                : scan_warp_list_entries(plan.shape, qc, k);
      changed |= c.fit(c.warp_lists, warp_list_entries, "scan warp lists");
      changed |= c.fit(c.sample_keys, std::size_t(qc) * plan.sample_keys(), "sample pass ranks");
      if (plan.first_bound) {
        changed |= c.fit(c.first_keys, std::size_t(qc) * plan.shape.blocks_per_group, "first-tile bound keys");
        const std::size_t groups = (qc + plan.shape.query_group - 1) / plan.shape.query_group;
        if (c.fit(c.first_arrivals, groups, "first-tile bound arrivals")) {
          // Counted up by every scan block and reset by the last: zero before the first launch.
          check_cuda(cudaMemsetAsync(c.first_arrivals.get(), 0, c.first_arrivals.bytes(), query_stream_.get()),
                     "cudaMemsetAsync(first-tile bound arrivals)");
          changed = true;
        }
      }
      changed |= c.fit(c.slot, std::size_t(qc) * k, "result slots");
      if (plan.dense_stride) {
        changed |= c.fit(c.dense, dense_workspace_words(qc, plan.dense_stride), "dense screen rows");
        changed |= c.fit(c.dense_split, std::size_t(qc) * kDenseSplitMax, "dense selection shares");
        if (c.fit(c.dense_arrivals, qc, "dense selection arrivals")) {
          // Counted up by each query's selection blocks and reset by the last: zero before a launch.
          check_cuda(cudaMemsetAsync(c.dense_arrivals.get(), 0, c.dense_arrivals.bytes(), query_stream_.get()),
                     "cudaMemsetAsync(dense selection arrivals)");
          changed = true;
        }
      }
      if (classes() > kSharedClasses) changed |= c.fit(c.class_scratch, std::size_t(qc) * classes(), "class weights");
      changed |= c.fit(c.host_in, chunk_count * l.in_bytes, "pinned query staging", props_.canMapHostMemory != 0);
      changed |= c.fit(c.host_out, chunk_count * l.out_bytes, "pinned result staging", props_.canMapHostMemory != 0);
    } catch (...) {
      // Arrays fitted before the failure may have moved: graphs captured on them must go too,
      // or the context's next batch would replay a graph reading freed memory.
      c.graphs.clear();
      c.device_graphs.clear();
      c.layout = ChunkLayout{};
      throw;
    }
    // A graph holds the arrays' addresses and the offsets of its own layout, which its key
    // decides (a graph runs one chunk: its query count and k give the layout). So only arrays
    // that moved end the cached graphs; a batch of another size or k leaves them. Clearing them
    // whenever the layout changed made every call of a caller that alternates batch sizes
    // capture and instantiate its graph again.
    if (changed) {
      c.graphs.clear();
      c.device_graphs.clear();
    }
    c.layout = l;
    return l;
  }

  /// Enqueues one chunk of queries [q0, q0 + n) on the query stream: one copy in (in a graph, a
  /// block of more than kGraphCopyMaxBytes read by a kernel from the mapped staging), the
  /// kernels, and the answers to the pinned staging. A small chunk's last kernel writes them
  /// there itself (the staging is mapped): on an H100 a graph of a host-to-device copy, two
  /// kernels or more and a device-to-host copy took 17.4-20.3 us host to host, against 9.7-11.0
  /// us with the last kernel writing the host memory (bench_graph_copies). Larger chunks, whose
  /// answers would cross the bus as scattered small writes, end with the copy.
  void enqueue(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode, int buffer, std::uint32_t q0,
               std::uint32_t n, bool in_graph) const {
    cudaStream_t stream = query_stream_.get();
    const ChunkLayout& l = c.layout;
    const std::uint32_t k = plan.k, block = q0 / plan.chunk_queries;
    if (in_graph && l.in_bytes > kGraphCopyMaxBytes && c.host_in.device_ptr() != nullptr) {
      launch_copy_in(c.host_in.device_ptr() + block * l.in_bytes, c.input.get(), l.in_bytes, stream);
    } else {
      check_cuda(cudaMemcpyAsync(c.input.get(), c.host_in.get() + block * l.in_bytes, l.in_bytes,
                                 cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync(queries)", concat(n, " queries of dim ", config_.dim));
    }
    if (config_.debug) poison(c, n, k, stream);
    const StoreView* view = store_.buffer(buffer).view.get();
    // Where the answers go: the staging itself (mapped where the device can map host memory), or
    // the output block that is copied to it.
    const bool to_host = n <= kHostWriteMaxQueries && c.host_out.device_ptr() != nullptr;
    unsigned char* const answers = to_host ? c.host_out.device_ptr() + block * l.out_bytes : c.output.get();
    const bool neighbors = mode == Mode::Neighbors;
    unsigned char* const selected = neighbors ? answers : c.output.get();  // the aggregate reads them
    SelectParams select = select_params(c, plan, n);
    select.out_distance = reinterpret_cast<float*>(selected + l.distance);
    select.out_id = reinterpret_cast<std::uint64_t*>(selected + l.id);
    select.out_slot = c.slot.get();
    search(c, plan, !r.visible.empty(), view, n, select, stream);

    std::size_t from = 0, to = 0;  // the part of the output block this mode returns
    if (neighbors) {
      from = l.distance;
      to = l.id + std::size_t(n) * k * 8;
    } else {
      AggregateParams agg = aggregate_params(c, view, n, k, mode, r.aggregate);
      agg.out_label = reinterpret_cast<std::int32_t*>(answers + l.label);
      agg.out_probability = reinterpret_cast<float*>(answers + l.probability);
      agg.out_value = reinterpret_cast<float*>(answers + l.value);
      launch_aggregate(agg, stream);
      debug_sync("aggregate_kernel");
      if (mode == Mode::Values) {
        from = l.value;
        to = l.value + std::size_t(n) * outputs() * 4;
      } else {
        from = l.label;
        to = mode == Mode::Probabilities ? l.probability + std::size_t(n) * classes() * 4 : l.label + std::size_t(n) * 4;
      }
    }
    if (!to_host) {
      check_cuda(cudaMemcpyAsync(c.host_out.get() + block * l.out_bytes + from, c.output.get() + from, to - from,
                                 cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync(results)", concat(n, " queries, k=", k));
    }
  }

  /// Each query's k best, written to the outputs of `select`: the candidates, then the selection
  /// over them (the dense screen's selection writes the answers itself).
  void search(QueryContext& c, const Plan& plan, bool filtered, const StoreView* view, std::uint32_t n,
              const SelectParams& select, cudaStream_t stream) const {
    if (find_candidates(c, plan, filtered, view, n, select, stream)) return;
    launch_select(select, stream);
    debug_sync("select_kernel");
  }

  /// Each query's sorted candidate lists for the selection: the direct search, the dense screen,
  /// or the sample pass (where the plan has one) and the scan. True where they were the answers,
  /// written to `select`'s outputs already (the dense screen).
  bool find_candidates(QueryContext& c, const Plan& plan, bool filtered, const StoreView* view, std::uint32_t n,
                       const SelectParams& select, cudaStream_t stream) const {
    if (plan.spatial) {
      SpatialSearchParams spatial;
      spatial.index = spatial_[buffer_of(view)].view();
      spatial.store = view;
      spatial.width = int(chunk_floats_for(stored_dim_));
      spatial.queries = c.in<float>(c.layout.queries);
      spatial.num_queries = n;
      spatial.k = plan.k;
      spatial.out = select;
      launch_spatial_search(spatial, stream);
      debug_sync("spatial_search_kernel");
      return true;
    }
    if (plan.direct_blocks) {
      launch_direct(scan_params(c, plan, filtered, view, n), plan.direct_blocks, int(chunk_floats_for(stored_dim_)),
                    plan.shape.inner_product, stream);
      debug_sync("direct_kernel");
      return false;
    }
    if (plan.dense_stride) {
      DenseParams dense;
      dense.store = view;
      dense.queries = c.in<float>(c.layout.queries);
      dense.num_queries = n;
      dense.k = plan.k;
      dense.chunks = chunks_;
      dense.row_stride = plan.dense_stride;
      dense.screened = c.dense.get();
      dense.group_keys = reinterpret_cast<std::uint32_t*>(c.dense.get() + std::size_t(plan.chunk_queries) * plan.dense_stride);
      dense.metric = select.metric;
      dense.out_distance = select.out_distance;
      dense.out_id = select.out_id;
      dense.out_slot = select.out_slot;
      dense.screen = tensor_screen_bounds(chunks_ * 4);
      dense.shared_limit = props_.sharedMemPerBlockOptin;
      // Idle SMs share each query's exact ranks (MNIST-like: copying about k points into one SM
      // was most of the selection; launch_dense keeps one block where the rows hold the ranks).
      const std::uint32_t sms = static_cast<std::uint32_t>(props_.multiProcessorCount);
      dense.sm_count = sms;
      dense.residency = dense_residency_;
      dense.blocks_per_query = std::clamp<std::uint32_t>(sms / std::max<std::uint32_t>(n, 1), 1, kDenseMaxParts);
      dense.split = c.dense_split.get();
      dense.arrivals = c.dense_arrivals.get();
      launch_dense(dense, stream);
      debug_sync("dense screen kernels");
      return true;
    }
    if (plan.sample_step) sample_bound(c, plan, filtered, view, n, stream);
    if (plan.resident_warps) {
      ScanParams scan = scan_params(c, plan, filtered, view, n);
      scan.screen = screen_bounds(4);
      scan.warp_lists = c.warp_lists.get();
      launch_resident(scan, std::uint32_t(plan.shape.blocks_per_group), plan.resident_warps,
                      int(chunk_floats_for(stored_dim_)), stream);
      debug_sync("resident_kernel");
      return false;
    }
    launch_scan(scan_params(c, plan, filtered, view, n), plan.shape, stream);
    debug_sync("scan_kernel");
    return false;
  }

  ScanParams scan_params(QueryContext& c, const Plan& plan, bool filtered, const StoreView* view,
                         std::uint32_t n) const {
    ScanParams scan;
    scan.store = view;
    scan.queries = c.in<float>(c.layout.queries);
    scan.ranges = filtered ? c.in<IdRangeDevice>(c.layout.ranges) : nullptr;
    scan.num_queries = n;
    scan.k = plan.k;
    scan.threshold = c.in<std::uint32_t>(c.layout.thresholds);
    scan.candidates = c.candidates.get();
    scan.lengths = c.lengths.get();
    scan.warp_lists = plan.shape.global_lists ? c.warp_lists.get() : nullptr;
    scan.first_keys = plan.first_bound ? c.first_keys.get() : nullptr;
    scan.first_arrivals = plan.first_bound ? c.first_arrivals.get() : nullptr;
    if (plan.shape.screen && !plan.shape.inner_product) scan.screen = screen_bounds(chunks_ * 4);
    return scan;
  }

  /// The aggregation of a chunk's selected neighbours (in the context's output block); the
  /// caller sets where the answers go.
  AggregateParams aggregate_params(QueryContext& c, const StoreView* view, std::uint32_t n, std::uint32_t k, Mode mode,
                                   const AggregateSpec& spec) const {
    const ChunkLayout& l = c.layout;
    AggregateParams agg;
    agg.store = view;
    agg.distance = c.out<float>(l.distance);
    agg.id = c.out<std::uint64_t>(l.id);
    agg.slot = c.slot.get();
    agg.num_queries = n;
    agg.k = k;
    agg.mode = static_cast<int>(mode);
    agg.distance_weights = spec.weights == Weights::Distance;
    agg.median = spec.regression == RegressionAggregate::Median;
    agg.classes = classes();
    agg.outputs = outputs();
    agg.class_scratch = c.class_scratch.get();
    return agg;
  }

  SelectParams select_params(QueryContext& c, const Plan& plan, std::uint32_t n) const {
    SelectParams select;
    select.candidates = c.candidates.get();
    select.lengths = c.lengths.get();
    select.blocks = static_cast<std::uint32_t>(plan.shape.blocks_per_group);
    select.num_queries = n;
    select.k = plan.k;
    select.metric = static_cast<int>(config_.metric);
    return select;
  }

  /// The sample pass: rank every plan.sample_step-th tile and write each query's k-th rank
  /// into the thresholds the main pass starts from.
  void sample_bound(QueryContext& c, const Plan& plan, bool filtered, const StoreView* view, std::uint32_t n,
                    cudaStream_t stream) const {
    SampleParams sample;
    sample.store = view;
    sample.queries = c.in<float>(c.layout.queries);
    sample.ranges = filtered ? c.in<IdRangeDevice>(c.layout.ranges) : nullptr;
    sample.num_queries = n;
    sample.k = plan.k;
    sample.step = plan.sample_step;
    sample.sample_tiles = plan.sample_tiles;
    sample.per_tile = plan.sample_per_tile;
    // A one-chunk point is one load: its warp ranks it against 32 queries instead of 4 (ncu,
    // 1,000,000 x 2, Q = 1,024: 262,144 blocks of short warps took 80 us).
    sample.groups_per_warp = chunks_ == 1 ? 8 : 1;
    // Batched loads where the sample gives the SMs few warps (each warp's chain of loads is then
    // the kernel's length); with many warps they cost occupancy. H100 A/B against one load in
    // flight: up to 17 warps per SM 0.80-0.96x (MNIST-like samples of 8 to 32 queries,
    // ImageNet-like Q = 2 to 8), 22-28 per SM 0.98-1.0x, 33 and more 1.02-1.08x.
    const std::size_t sample_warps = std::size_t(plan.sample_tiles) * sample_warps_per_tile(sample);
    sample.batched_loads = chunks_ > 1 && sample_warps <= std::size_t(24) * props_.multiProcessorCount;
    // From 8 queries over vectors of several chunks each warp ranks 8 queries held in shared
    // memory, in one pass with batched loads. H100 A/B against the kernels above: GoogleNews-like
    // Q = 8-64 0.95-0.97x, MNIST-like Q = 16-64 0.93-0.97x (its Q = 64 sample 101 -> 72 us),
    // 100,000 x 128 Q = 64 0.93-0.98x, ImageNet-like 0.98-1.02x.
    sample.chunks = chunks_;
    sample.staged_queries = chunks_ > 1 && n >= kSampleStagedGroup && sample_staged_bytes(chunks_) <= kSampleStagedMaxBytes;
    // Split sums where the staged kernel would give the SMs at most 8 warps each (L2; an inner
    // product's terms have mixed signs, so no margin bounds a change of summation order). H100 A/B
    // against the staged kernel: MNIST-like K = 64 Q = 12 / 16 0.925 / 0.920x, K = 128
    // Q = 8 / 12 / 16 0.88 / 0.94 / 0.94x, Q = 24 0.95-0.98x; with more warps it lost: Q = 32
    // 0.975-0.99x, Q = 64 1.02x, ImageNet-like 1.00-1.02x.
    const std::size_t staged_warps = std::size_t(plan.sample_tiles) * ((n + kSampleStagedGroup - 1) / kSampleStagedGroup);
    sample.split_sums = sample.staged_queries && split_sample_possible() &&
                        staged_warps <= std::size_t(8) * props_.multiProcessorCount;
    // Over large stores, batches of 16+ stage 16 queries per block and batches of 9-12 stage 12:
    // each warp ranks its tile against all of them in one pass. H100 A/Bs against groups of 8:
    // - 16: half the blocks, twice the arithmetic per point load (two rounds): ImageNet-like
    //   Q = 16-64 0.97-0.98x, GoogleNews-like 0.996-1.01x; over 100,000 x 128 (few tiles per SM, so
    //   half the blocks leave SMs idle) 1.02-1.04x slower, hence large stores only. Groups of 16
    //   for batches of 8-12 (half empty) measured 1.01-1.05x slower.
    // - 12: groups of 8 ranked these batches as two, the second half empty and its tiles read again
    //   from L2 (two rounds): GoogleNews-like Q = 9-12 0.985-0.991x (the sample pass 70 us of the
    //   K = 128 Q = 12 search, 46 us at Q = 8: ncu), ImageNet-like K = 128 0.976x, K = 64
    //   0.995-1.004x, inner product 0.98-1.0x.
    const bool large_store = std::uint64_t(plan.sample_tiles) * plan.sample_step >= 64ull * props_.multiProcessorCount;
    if (sample.staged_queries && !sample.split_sums && large_store) {
      const std::uint32_t group = n >= kSampleStagedWideGroup                               ? kSampleStagedWideGroup
                                  : n > kSampleStagedGroup && n <= kSampleStagedMidGroup ? kSampleStagedMidGroup
                                                                                          : kSampleStagedGroup;
      if (sample_staged_bytes(chunks_, group) <= kSampleStagedMaxBytes) sample.staged_group = group;
    }
    // Tile-major blocks where the sampled tiles do not fit L2 (sample.cu, sample_block): H100 A/Bs,
    // GoogleNews-like Q = 32 / 64 0.98-0.99 / 0.976-0.983x, inner product Q = 9-12 0.91-0.98x.
    const std::size_t sampled_bytes = std::size_t(plan.sample_tiles) * kTile * chunks_ * 4 * sizeof(float);
    sample.tile_major = sampled_bytes > std::size_t(props_.l2CacheSize);
    // Ahead of the query-resident scan, that scan's layout over the sample: a pair costs its rank
    // and a min (ncu, 1,000,000 x 2, Q = 1,024: the warp-per-tile kernel took 134 us).
    sample.resident = plan.resident_warps != 0;
    sample.width = chunk_floats_for(stored_dim_);
    sample.keys = c.sample_keys.get();
    sample.threshold = c.in<std::uint32_t>(c.layout.thresholds);
    launch_sample(sample, plan.shape.inner_product, filtered, stream);
    debug_sync("sample kernels");
  }

  /// One chunk [q0, q0 + n) of a device-resident search: validation and conversion on the
  /// device, then the scan and the selection, whose results go straight to the caller's buffers.
  void enqueue_device(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r, int buffer, std::uint32_t q0,
                      std::uint32_t n) const {
    cudaStream_t stream = query_stream_.get();
    const ChunkLayout& l = c.layout;
    const std::uint32_t k = plan.k;
    DeviceQueryParams prep;
    prep.in = r.queries;
    prep.row_stride = r.row_stride;
    prep.visible = reinterpret_cast<const IdRangeDevice*>(r.visible);
    prep.first = q0;
    prep.num_queries = n;
    prep.dim = static_cast<std::uint32_t>(config_.dim);
    prep.stored_dim = static_cast<std::uint32_t>(stored_dim_);
    prep.chunks = chunks_;
    prep.metric = static_cast<int>(config_.metric);
    prep.bound = coordinate_bound(config_.metric, config_.dim);
    prep.queries_out = c.in<float>(l.queries);
    prep.ranges_out = c.in<IdRangeDevice>(l.ranges);
    prep.thresholds = c.in<std::uint32_t>(l.thresholds);
    prep.status = c.status.get();
    prep.host_status = c.host_status.device_ptr();
    prep.arrivals = c.status_arrivals.get();
    prep.last_chunk = q0 + n == r.num_queries;
    launch_prepare_device_queries(prep, stream);
    debug_sync("prepare_device_queries_kernel");
    if (config_.debug) check_cuda(cudaMemsetAsync(c.slot.get(), 0xA5, std::size_t(n) * k * 4, stream), "cudaMemsetAsync(poison slots)");
    const bool filtered = r.visible != nullptr;
    const StoreView* view = store_.buffer(buffer).view.get();
    const bool neighbors = r.aggregate.output == AggregateSpec::Output::Neighbors;
    SelectParams select = select_params(c, plan, n);
    select.out_distance = neighbors ? r.distances + std::size_t(q0) * k : c.out<float>(l.distance);
    select.out_id = neighbors ? r.ids + std::size_t(q0) * k : c.out<std::uint64_t>(l.id);
    select.out_slot = c.slot.get();
    search(c, plan, filtered, view, n, select, stream);
    if (neighbors) return;
    AggregateParams agg = aggregate_params(c, view, n, k, mode_of(r.aggregate.output), r.aggregate);
    agg.out_label = r.labels ? r.labels + q0 : c.out<std::int32_t>(l.label);
    agg.out_probability = r.probabilities ? r.probabilities + std::size_t(q0) * classes() : c.out<float>(l.probability);
    agg.out_value = r.values ? r.values + std::size_t(q0) * outputs() : c.out<float>(l.value);
    launch_aggregate(agg, stream);
    debug_sync("aggregate_kernel");
  }

  template <class T>
  static void fit_array(DeviceArray<T>& a, std::size_t n, const char* what) {
    if (a.size() >= n) return;
    const std::size_t grown = std::max(n, a.size() * 2);
    a = DeviceArray<T>();  // free first: the device may not hold both
    a = DeviceArray<T>(grown, what);
  }

  /// Debug mode: garbage in every result buffer, so an unwritten entry shows.
  void poison(QueryContext& c, std::uint32_t n, std::uint32_t k, cudaStream_t stream) const {
    check_cuda(cudaMemsetAsync(c.output.get(), 0xA5, c.layout.out_bytes, stream), "cudaMemsetAsync(poison results)");
    check_cuda(cudaMemsetAsync(c.slot.get(), 0xA5, std::size_t(n) * k * 4, stream), "cudaMemsetAsync(poison slots)");
  }

  /// Debug mode outside graph capture: wait for the kernel and report its failure by name.
  void debug_sync(const char* kernel) const {
    if (!config_.debug) return;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(query_stream_.get(), &capturing), "cudaStreamIsCapturing");
    if (capturing != cudaStreamCaptureStatusNone) return;
    check_cuda(cudaStreamSynchronize(query_stream_.get()), "cudaStreamSynchronize (debug, after kernel)", kernel);
  }

  /// A device-resident batch on the query stream: the chunks (validation, search, aggregation),
  /// with the status reset before them and copied back after them where the host status is not
  /// mapped (where it is, the validation hands it over and resets it). Small single-chunk
  /// batches run as a CUDA graph once the same plan and caller buffers come back (a caller that
  /// reuses its buffers, as a training loop does): issued call by call they were six or more API
  /// calls, about 25 us of host time before one query's few microseconds of kernels (H100,
  /// 1,000,000 x 2, one query: 37-43 us host to host against 23-25 us for search(); 27-31 us
  /// captured).
  void launch_device_batch(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r, int buffer) const {
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
    cudaStream_t stream = query_stream_.get();
    const bool mapped_status = c.host_status.device_ptr() != nullptr;
    auto reset_status = [&] {
      check_cuda(cudaMemsetAsync(c.status.get(), 0xff, 2 * sizeof(unsigned long long), stream), "cudaMemsetAsync(status)");
      check_cuda(cudaMemsetAsync(c.status_arrivals.get(), 0, sizeof(std::uint32_t), stream),
                 "cudaMemsetAsync(status arrivals)");
    };
    if (mapped_status) {
      // No reset or copy around the batch (two graph nodes: on an H200 the device-resident search's
      // GPU time went 34.5 -> 29.0 us at 1,000,000 x 2 Q = 1, 82 -> 78 us at MNIST-like Q = 1 and
      // 138 -> 129 us at Q = 16). The last chunk's validation writes both host words (a batch has
      // at least one query); the device arrays are reset here only where the last batch did not
      // finish enqueueing.
      if (!c.status_reset) reset_status();
      c.status_reset = false;
    }
    auto enqueue_all = [&] {
      if (!mapped_status) reset_status();
      if (config_.debug) {  // garbage in every result the caller asked for: an unwritten entry shows
        auto poison_out = [&](void* p, std::size_t bytes, const char* what) {
          if (p) check_cuda(cudaMemsetAsync(p, 0xA5, bytes, stream), "cudaMemsetAsync(poison)", what);
        };
        if (r.aggregate.output == AggregateSpec::Output::Neighbors) {
          poison_out(r.distances, std::size_t(nq) * plan.k * 4, "distances");
          poison_out(r.ids, std::size_t(nq) * plan.k * 8, "ids");
        }
        poison_out(r.labels, std::size_t(nq) * 4, "labels");
        poison_out(r.probabilities, std::size_t(nq) * classes() * 4, "probabilities");
        poison_out(r.values, std::size_t(nq) * outputs() * 4, "values");
      }
      for (std::uint32_t q0 = 0; q0 < nq; q0 += plan.chunk_queries) {
        enqueue_device(c, plan, r, buffer, q0, std::min(plan.chunk_queries, nq - q0));
      }
      if (!mapped_status) {
        check_cuda(cudaMemcpyAsync(c.host_status.get(), c.status.get(), 2 * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync(device search status)");
      }
    };
    auto issue = [&] {  // call by call, or as a graph
      if (config_.debug || nq > kGraphMaxQueries || plan.chunk_queries < nq) return enqueue_all();
      const QueryContext::DeviceGraphKey key{graph_key(plan, nq, mode_of(r.aggregate.output), r.aggregate, buffer),
                                             r.queries, r.row_stride, r.visible, r.distances, r.ids, r.labels,
                                             r.probabilities, r.values};
      auto it = c.device_graphs.find(key);
      if (it == c.device_graphs.end()) {  // first seen: run it, and capture it if it comes back
        if (c.device_graphs.size() >= kMaxCachedGraphs) c.device_graphs.clear();
        c.device_graphs.emplace(key, QueryContext::DeviceGraph{});
        return enqueue_all();
      }
      if (!it->second.exec.get()) it->second.exec = capture(enqueue_all);
      check_cuda(cudaGraphLaunch(it->second.exec.get(), stream), "cudaGraphLaunch(device search)");
    };
    issue();
    c.status_reset = true;  // the whole batch is on the stream: its last validation resets the status
  }

  /// What a captured search graph depends on besides its context's arrays: the plan, the batch
  /// size, the mode and aggregation, and the store buffer.
  static QueryContext::GraphKey graph_key(const Plan& plan, std::uint32_t nq, Mode mode, const AggregateSpec& aggregate,
                                          int buffer) {
    return QueryContext::GraphKey{buffer,
                                  nq,
                                  plan.k,
                                  static_cast<int>(mode),
                                  static_cast<int>(aggregate.weights),
                                  static_cast<int>(aggregate.regression),
                                  plan.shape.query_group,
                                  plan.shape.warps_per_block,
                                  plan.shape.blocks_per_group,
                                  plan.shape.filtered,
                                  plan.shape.inner_product,
                                  plan.shape.global_lists,
                                  plan.shape.tiled,
                                  plan.shape.screen,
                                  plan.sample_step,
                                  std::uint32_t(plan.sample_keys()),
                                  plan.first_bound,
                                  plan.dense_stride,
                                  plan.direct_blocks,
                                  plan.resident_warps,
                                  plan.spatial};
  }

  /// The work `enqueue` puts on the query stream, captured and instantiated as a graph.
  template <class Enqueue>
  GraphExec capture(Enqueue enqueue) const {
    cudaStream_t stream = query_stream_.get();
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(status, "cudaGraphInstantiate");
    return GraphExec(exec);
  }

  /// Small batches: capture the whole pipeline once per shape and replay it.
  void launch_graph(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode, int buffer) const {
    const QueryContext::GraphKey key =
        graph_key(plan, static_cast<std::uint32_t>(r.num_queries), mode, r.aggregate, buffer);
    auto it = c.graphs.find(key);
    if (it == c.graphs.end()) {
      GraphExec exec =
          capture([&] { enqueue(c, plan, r, mode, buffer, 0, static_cast<std::uint32_t>(r.num_queries), true); });
      if (c.graphs.size() >= kMaxCachedGraphs) c.graphs.clear();
      it = c.graphs.emplace(key, std::move(exec)).first;
    }
    check_cuda(cudaGraphLaunch(it->second.get(), query_stream_.get()), "cudaGraphLaunch");
  }

  static QueryResult unpack(const QueryContext& c, const StoreConfig& config, Mode mode, std::uint32_t nq,
                            std::uint32_t k, std::uint32_t qc, std::uint64_t epoch) {
    QueryResult result;
    const ChunkLayout& l = c.layout;
    const std::uint32_t count = config.target.count;
    // Query q's row lives in block q / qc at row q % qc. The vectors are filled from the staging
    // in one pass (sized first, they were zeroed and then copied over: 1,024 queries at k = 16
    // are 192 KB of answers, read on the caller's thread after the device is done).
    auto rows = [&]<class T>(std::size_t offset, std::size_t row_values, std::vector<T>& out) {
      out.reserve(std::size_t(nq) * row_values);
      for (std::uint32_t q0 = 0; q0 < nq; q0 += qc) {
        const std::uint32_t n = std::min(qc, nq - q0);
        const T* from = reinterpret_cast<const T*>(c.host_out.get() + (q0 / qc) * l.out_bytes + offset);
        out.insert(out.end(), from, from + std::size_t(n) * row_values);
      }
    };
    switch (mode) {
      case Mode::Neighbors: {
        Neighbors& n = result.neighbors;
        n.num_queries = nq;
        n.k = k;
        n.epoch = epoch;
        rows(l.distance, k, n.distances);
        rows(l.id, k, n.ids);
        break;
      }
      case Mode::Labels:
      case Mode::Probabilities: {
        ClassPredictions& p = result.classes;
        p.num_queries = nq;
        p.num_classes = count;
        p.epoch = epoch;
        rows(l.label, 1, p.labels);
        if (mode == Mode::Probabilities) rows(l.probability, count, p.probabilities);
        break;
      }
      case Mode::Values: {
        RegressionPredictions& p = result.regression;
        p.num_queries = nq;
        p.num_outputs = count;
        p.epoch = epoch;
        rows(l.value, count, p.values);
        break;
      }
    }
    return result;
  }

  StoreConfig config_;
  int device_;
  std::size_t stored_dim_;
  std::uint32_t chunks_;
  DeviceScope scope_;  // the device is current while the members below are created
  cudaDeviceProp props_{};
  std::uint32_t direct_resident_[2] = {};  // direct search blocks resident at once, without and with id ranges
  DenseResidency dense_residency_;         // the dense product kernels' blocks per SM (configure_dense)
  Stream update_stream_;
  mutable Stream query_stream_;
  mutable DeviceStore store_;
  mutable std::mutex mutex_;       // front buffer choice + ordering of work on the query stream
  std::shared_ptr<ContextPool> pool_ = std::make_shared<ContextPool>();
  mutable std::map<std::tuple<int, int, bool, bool, bool, bool, bool, std::uint32_t>, int> occupancy_;  // guarded by mutex_
  mutable std::map<std::pair<int, std::uint32_t>, int> resident_occupancy_;         // guarded by mutex_
  mutable SpatialTree spatial_[2];  // one per store buffer, guarded by mutex_ (built on the query stream)
  struct KnnqWorkspace {  // used by lookup_and_update, which the engine serialises with publish()
    DeviceArray<std::uint32_t> slots;
    DeviceArray<float> q_before, increment, targets;
    DeviceArray<std::int32_t> actions;
    DeviceArray<unsigned long long> non_finite;
  } knnq_;
};

}  // namespace gpu

namespace {

/// The oldest architecture the kernels are written for: asynchronous copies to shared memory
/// (cp.async) and TF32 tensor-core products (mma.sync m16n8k8) need sm_80.
constexpr int kMinComputeMajor = 8;

/// Why `device` cannot run this build's kernels ("" where it can): a compute capability under
/// the minimum, or no kernel image for it in this build.
std::string device_unsupported_reason(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return concat("device ", device, ": its properties cannot be read");
  }
  const std::string what = concat("device ", device, " (", props.name, ", compute capability ", props.major, ".",
                                  props.minor, ")");
  if (props.major < kMinComputeMajor) {
    return concat(what, " is older than the minimum, compute capability ", kMinComputeMajor, ".0 (sm_",
                  kMinComputeMajor, "0)");
  }
  int ptx_version = 0;
  const cudaError_t status = gpu::kernel_image_ptx_version(device, &ptx_version);
  if (status != cudaSuccess) {
    return concat(what, ": this build carries no kernel image it can run (", cudaGetErrorString(status),
                  "); build with CMAKE_CUDA_ARCHITECTURES including ", props.major, props.minor);
  }
  return "";
}

}  // namespace

bool cuda_device_usable(int device) noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (device < 0 || device >= count) return false;
  try {
    return device_unsupported_reason(device).empty();
  } catch (...) {
    return false;
  }
}

std::unique_ptr<Backend> make_cuda_backend(const StoreConfig& config) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw BackendUnavailable(concat("CUDA backend: no CUDA device found (", cudaGetErrorString(status), ")"));
  }
  if (config.cuda_device < 0 || config.cuda_device >= count) {
    throw BackendUnavailable(concat("CUDA backend: device ", config.cuda_device, " does not exist (", count, " found)"));
  }
  if (const std::string why = device_unsupported_reason(config.cuda_device); !why.empty()) {
    throw BackendUnavailable(concat("CUDA backend: ", why));
  }
  return std::make_unique<gpu::CudaBackend>(config);
}

}  // namespace streamknn::detail
