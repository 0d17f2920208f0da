// The CUDA backend: a DeviceStore (double buffer) written on an update stream, and searches on a
// query stream. Each entry point takes a pooled query context and runs the shared sequence (run):
// under the mutex the front buffer, the plan (planner.hpp, from the batch's shape and the
// device's limits; the spatial schedule says whether the index is wanted), the context sized and
// staged (workspace.hpp), the query stream ordered after the buffer's writes, the spatial index
// brought up to date, the pipeline's kernels (pipeline.hpp), and the events that order later
// work. Tickets read the answers from the pinned staging once the device is done.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <tuple>
#include <vector>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/exact_rank.hpp"
#include "core/metric_space.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device_store.hpp"
#include "cuda/device_support.hpp"
#include "cuda/kernels.hpp"
#include "cuda/pipeline.hpp"
#include "cuda/planner.hpp"
#include "cuda/query_context.hpp"
#include "cuda/snapshot_reads.hpp"
#include "cuda/spatial_schedule.hpp"
#include "cuda/spatial_tree.hpp"
#include "cuda/tuning.hpp"
#include "cuda/workspace.hpp"

namespace streamknn::detail {

namespace gpu {
namespace {

/// Stores the spatial index covers: at most two stored elements under L2 ranks, or points on
/// the unit sphere (haversine; cosine at three elements), whose grid is on the faces of a cube.
bool spatial_store(Metric metric, std::size_t stored_dim) noexcept {
  if (metric == Metric::InnerProduct) return false;
  return stored_dim <= 2 || (stored_dim == 3 && (metric == Metric::Haversine || metric == Metric::Cosine));
}

/// One entry point's batch, as the shared sequence (CudaBackend::run) needs it.
struct BatchCall {
  const char* where = "";    // the entry point, for messages
  const char* items = "queries";
  std::uint32_t queries = 0, k = 0;
  bool filtered = false, neighbors = true;
  bool shared_predicate = false;  // one predicate for every query, no id ranges (a host batch's)
  bool on_caller = false;         // search_device: ordered after and before work on the caller's stream
  cudaStream_t caller = nullptr;  // that stream (0: the legacy default stream)
  bool rank_limited = false;      // the request bounds every query's ranks (QueryRequest::rank_limit)
};

/// What the shared sequence hands back: the front buffer's epoch and values, the plan's chunk.
struct RunInfo {
  std::uint64_t epoch = 0;
  std::uint32_t chunk_queries = 0;
  const float* values = nullptr;
};

}  // namespace

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const StoreConfig& config)
      : config_(config),
        device_(config.cuda_device),
        stored_dim_(stored_dim(config.metric, config.dim)),
        chunks_(chunks_for(stored_dim_)),
        scope_(device_),
        store_(config, stored_dim_, update_stream_.get()),
        schedule_(config.spatial_index, spatial_store(config.metric, stored_dim_)),
        pipeline_(config_, limits_, query_stream_.get()) {
    check_cuda(cudaGetDeviceProperties(&props_, device_), "cudaGetDeviceProperties");
    if (std::size_t(chunks_) * 16 > tuning::kMaxQueryBytes) {
      throw InvalidArgument(concat("CUDA backend: dim=", config.dim, " exceeds its limit of ",
                                   tuning::kMaxQueryBytes / 4,
                                   " (a query must fit in shared memory); use BackendKind::Cpu"));
    }
    configure_select();
    work_out_limits();
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(query_stream_.get());
    cudaStreamSynchronize(update_stream_.get());
  }

  BackendKind kind() const noexcept override { return BackendKind::Cuda; }
  // Predicates are tested in the kernels beside the id ranges (common.cuh, filter_admits); radius
  // bounds go through the k-nearest search (Engine::filtered_by_search): runs_radius() is false.

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

  Ticket<QueryResult> submit(QueryRequest request) const override {
    DeviceScope scope(device_);
    const std::shared_ptr<QueryContext> ctx = acquire(pool_);
    const Mode mode = mode_of(request.aggregate.output);
    const std::uint32_t nq = static_cast<std::uint32_t>(request.num_queries);
    const std::uint32_t k = static_cast<std::uint32_t>(request.k);
    BatchCall call{"ReferenceSet::search", "queries", nq, k, request.filtered(), mode == Mode::Neighbors,
                   request.shared_predicate()};
    call.rank_limited = request.rank_limit < std::numeric_limits<float>::infinity();
    const RunInfo ran = run(
        *ctx, call, [&](const Plan& plan) { pipeline_.prepare(*ctx, plan, request); },
        [&](const Plan& plan, const BufferViews& views) { pipeline_.launch(*ctx, plan, request, mode, views); });
    // The ticket may outlive this backend: it carries its own copy of the configuration.
    const StoreConfig config = config_;
    return Ticket<QueryResult>(
        [ctx] { return ctx->done.done(); },
        [ctx, mode, nq, k, ran, config] {
          ctx->done.wait();
          try {
            return unpack(*ctx, config, mode, nq, k, ran.chunk_queries, ran.epoch);
          } catch (const std::bad_alloc&) {
            throw OutOfMemory(concat("ReferenceSet::search: ", nq, " queries, k=", k,
                                     ": not enough host memory for the results; submit the batch in parts"));
          }
        });
  }

  Ticket<DeviceSearchStatus> submit_device(const DeviceQueryRequest& r) const override {
    DeviceScope scope(device_);
    const std::shared_ptr<QueryContext> ctx = acquire(pool_);
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
    const std::uint32_t k = static_cast<std::uint32_t>(r.k);
    if (!ctx->status.get()) {
      ctx->status = DeviceArray<unsigned long long>(2, "device search status");
      ctx->host_status =
          PinnedArray<unsigned long long>(2, "device search status (host)", props_.canMapHostMemory != 0);
      ctx->status_arrivals = DeviceArray<std::uint32_t>(1, "device search status arrivals");
    }
    const bool neighbors = r.aggregate.output == AggregateSpec::Output::Neighbors;
    const BatchCall call{"search_device", "queries", nq, k, r.visible != nullptr, neighbors, false, true,
                         reinterpret_cast<cudaStream_t>(r.stream)};
    const RunInfo ran = run(
        *ctx, call, [&](const Plan& plan) { pipeline_.size(*ctx, plan, nq); },
        [&](const Plan& plan, const BufferViews& views) { pipeline_.launch_device(*ctx, plan, r, views); });
    const int device = device_;
    const std::size_t dim = config_.dim;
    const std::uint64_t epoch = ran.epoch;
    return Ticket<DeviceSearchStatus>([ctx] { return ctx->done.done(); },
                                      [ctx, epoch, r, device, dim] {
                                        ctx->done.wait();
                                        return device_status(*ctx, epoch, r, device, dim);
                                      });
  }

  NonFiniteWrite lookup_and_update(const QUpdateRequest& r, std::uint64_t epoch, QUpdate& out) override {
    DeviceScope scope(device_);
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries), k = static_cast<std::uint32_t>(r.k);
    const std::shared_ptr<QueryContext> held = acquire(pool_);
    QueryContext& c = *held;
    fit_knnq(nq, k);  // everything this call allocates, first: an OutOfMemory leaves the published state as it was
    QueryRequest request;
    request.queries = r.states;
    request.num_queries = nq;
    request.k = k;
    const BatchCall call{"ReferenceSet::lookup_and_update", "states", nq, k, false, true};
    const RunInfo ran = run(
        c, call, [&](const Plan& plan) { pipeline_.prepare(c, plan, request); },
        [&](const Plan& plan, const BufferViews& views) {
          for (std::uint32_t q0 = 0; q0 < nq; q0 += plan.chunk_queries) {
            const std::uint32_t n = std::min(plan.chunk_queries, nq - q0);
            pipeline_.enqueue(c, plan, request, Mode::Neighbors, views, q0, n, false);
            check_cuda(cudaMemcpyAsync(knnq_.slots.get() + std::size_t(q0) * k, c.slot.get(), std::size_t(n) * k * 4,
                                       cudaMemcpyDeviceToDevice, query_stream_.get()),
                       "cudaMemcpyAsync(KNN-Q neighbour slots)");
          }
        });
    const KnnqWrite written = knnq_write_back(r, epoch, c, ran.values, out);
    c.done.wait();
    QueryResult ids = unpack(c, config_, Mode::Neighbors, nq, k, ran.chunk_queries, epoch);
    std::copy(ids.neighbors.ids.begin(), ids.neighbors.ids.end(), out.ids.begin());
    if (written.published) return {};
    const std::uint32_t T = outputs();
    const std::size_t entry = written.non_finite / T;
    return {true, out.ids[entry], static_cast<std::uint32_t>(written.non_finite % T), written.bad_value};
  }

  void read_snapshot(StoreImage& image) const override { reads_.image(image); }

  bool read_vectors(std::span<const std::uint32_t> slots, std::vector<float>& out) const override {
    reads_.vectors(slots, out);
    return true;
  }

  bool device_rows(DeviceRows& out) const override {
    reads_.rows(out);
    return true;
  }

  void read_targets(std::span<const std::uint32_t> slots, ResolvedBatch& batch) const override {
    reads_.targets(slots, batch);
  }

 private:
  /// The entry points' shared sequence, under the mutex: the front buffer, the plan, the context
  /// sized (`prepare`; an OutOfMemory names the entry point and the batch), the query stream
  /// ordered after the caller's stream (search_device) and the buffer's writes, the spatial index
  /// brought up to date where the plan uses it, the batch enqueued (`launch`), and the events
  /// that order the ticket, the next write to the buffer and the caller's stream after it.
  template <class Prepare, class Launch>
  RunInfo run(QueryContext& c, const BatchCall& call, Prepare&& prepare, Launch&& launch) const {
    cudaStream_t qs = query_stream_.get();
    std::lock_guard lock(mutex_);
    const int b = store_.front();
    DeviceBuffer& buffer = store_.buffer(b);
    const Plan plan = plan_for(b, call);
    try {
      prepare(plan);
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(concat(call.where, ": ", call.queries, " ", call.items, ", k=", call.k,
                               ": not enough memory for their workspace (", e.what(), ")"));
    }
    if (call.on_caller) {
      // The queries are ready once the work queued on the caller's stream so far has run.
      c.caller_ready.record(call.caller);
      check_cuda(cudaStreamWaitEvent(qs, c.caller_ready.get()), "cudaStreamWaitEvent(caller's stream)");
    }
    check_cuda(cudaStreamWaitEvent(qs, buffer.written.get()), "cudaStreamWaitEvent(front buffer written)");
    ready_index(plan, b, call.where);
    launch(plan, BufferViews{b, buffer.view.get(), spatial_[b].view()});
    c.done.record(qs);
    buffer.last_read.record(qs);
    if (call.on_caller) {
      // Work queued on the caller's stream from now on sees the results.
      check_cuda(cudaStreamWaitEvent(call.caller, c.done.get()), "cudaStreamWaitEvent(results on the caller's stream)");
    }
    return RunInfo{buffer.epoch, plan.chunk_queries, buffer.values.get()};
  }

  /// The plan for a batch over buffer b: the planner's, for the batch's shape, with the spatial
  /// index where the schedule wants it. Under mutex_.
  Plan plan_for(int b, const BatchCall& call) const {
    const DeviceBuffer& buffer = store_.buffer(b);
    SearchShape shape;
    shape.queries = call.queries;
    // The kernels before the exact re-rank keep the screen's width of candidates per query.
    shape.k = exact::screen_width(call.k, kMaxSelectK);
    shape.dim = config_.dim;
    shape.stored_dim = stored_dim_;
    shape.chunks = chunks_;
    shape.metric = config_.metric;
    shape.neighbors = call.neighbors;
    shape.filtered = call.filtered;
    shape.shared_predicate = call.shared_predicate;
    shape.rank_limited = call.rank_limited;
    shape.capacity = buffer.capacity;
    shape.slot_count = buffer.slot_count;
    // The spatial walk keeps the screen's width too: its limits and rules apply to that list.
    shape.spatial = schedule_.wants(b, buffer, spatial_[b], call.queries, shape.k, call.filtered);
    shape.reduced = store_.has_reduced();
    shape.reduced_always = config_.reduced_screen == ReducedScreen::Always;
    shape.reduced_int8 = config_.reduced_format == ReducedFormat::Int8;
    Plan plan = plan_search(shape, limits_);
    plan.width = plan.k;
    plan.k = call.k;
    return plan;
  }

  /// Brings buffer b's spatial index up to date on the query stream where the plan uses it and
  /// it is stale (after the stream's wait for the buffer's writes): a refit where one will do,
  /// else a build. Under mutex_.
  void ready_index(const Plan& plan, int b, const char* where) const {
    if (!plan.as<SpatialPlan>()) return;
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
    schedule_.note_ready(b);
  }

  /// The device's limits for the planner (DeviceLimits): its properties, and the blocks per SM
  /// of the kernels whose grids it sizes, for this store's vector width and metric. Raises the
  /// dense and resident kernels' shared-memory limits first (their occupancy depends on them).
  void work_out_limits() {
    limits_.major = props_.major;
    limits_.minor = props_.minor;
    limits_.sms = static_cast<std::uint32_t>(props_.multiProcessorCount);
    limits_.shared_per_block_optin = props_.sharedMemPerBlockOptin;
    limits_.shared_per_sm = props_.sharedMemPerMultiprocessor;
    limits_.l2_bytes = static_cast<std::size_t>(props_.l2CacheSize);
    limits_.can_map_host_memory = props_.canMapHostMemory != 0;
    limits_.dense = configure_dense(props_.sharedMemPerBlockOptin);
    configure_resident(props_.sharedMemPerBlockOptin);
    limits_.rerank_shared = configure_rerank(props_.sharedMemPerBlockOptin);
    if (store_.has_reduced()) {
      limits_.reduced_blocks_per_sm = [this](std::uint32_t group, std::uint32_t width) {
        return reduced_blocks_per_sm_memo(group, width);
      };
    }
    if (chunks_ == 1) {
      const int width = int(chunk_floats_for(stored_dim_));
      const bool ip = config_.metric == Metric::InnerProduct;
      for (int filtered = 0; filtered < 2; ++filtered) {
        limits_.direct_blocks_per_sm[filtered] = std::uint32_t(direct_blocks_per_sm(width, ip, filtered != 0));
      }
      for (const Filtering f : {Filtering::None, Filtering::PerQuery, Filtering::Mask}) {
        for (std::uint32_t i = 0, warps = 1; warps <= kResidentMaxWarps; ++i, warps *= 2) {
          if (resident_shared_bytes(width, warps) > props_.sharedMemPerBlockOptin) continue;
          limits_.resident_blocks_per_sm[static_cast<int>(f)][i] = std::uint32_t(resident_blocks_per_sm(width, warps, f));
        }
      }
    }
    limits_.scan_blocks_per_sm = [this](const ScanShape& s, std::uint32_t k) { return scan_blocks_per_sm(s, k); };
  }

  /// configure_scan's blocks per SM for a shape (it raises that kernel's shared-memory limit
  /// first, as its launch needs), once per shape and k. Under mutex_ (the planner runs there).
  int scan_blocks_per_sm(const ScanShape& s, std::uint32_t k) const {
    const auto key =
        std::make_tuple(s.query_group, s.warps_per_block, s.inner_product, s.filtered, s.global_lists, s.tiled, s.screen, k);
    auto it = scan_occupancy_.find(key);
    if (it == scan_occupancy_.end()) it = scan_occupancy_.emplace(key, configure_scan(s, k)).first;
    return it->second;
  }

  /// reduced_blocks_per_sm for this store, once per group and width. Under mutex_ (the planner runs there).
  int reduced_blocks_per_sm_memo(std::uint32_t group, std::uint32_t width) const {
    const auto key = std::make_pair(group, width);
    auto it = reduced_occupancy_.find(key);
    if (it == reduced_occupancy_.end()) {
      const int per_sm = reduced_blocks_per_sm(config_.metric == Metric::InnerProduct, config_.reduced_format, group,
                                               width, reduced_pairs_for(chunks_, config_.reduced_format),
                                               props_.sharedMemPerBlockOptin);
      it = reduced_occupancy_.emplace(key, per_sm).first;
    }
    return it->second;
  }

  std::uint32_t outputs() const noexcept {
    return config_.target.value_count();
  }

  /// lookup_and_update's arrays for nq states at k.
  void fit_knnq(std::uint32_t nq, std::uint32_t k) {
    try {
      grow(knnq_.slots, std::size_t(nq) * k, "KNN-Q neighbour slots");
      grow(knnq_.q_before, std::size_t(nq) * outputs(), "KNN-Q estimates");
      grow(knnq_.increment, nq, "KNN-Q increments");
      grow(knnq_.targets, nq, "KNN-Q targets");
      grow(knnq_.actions, nq, "KNN-Q actions");
      grow(knnq_.non_finite, 1, "KNN-Q non-finite flag");
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(concat("ReferenceSet::lookup_and_update: ", nq, " states, k=", k, ": ", e.what()));
    }
  }

  /// What knnq_write_back did: published the new rows, or found a non-finite value (its index
  /// among the batch's nq x k x outputs values, and the value) and published nothing.
  struct KnnqWrite {
    bool published = false;
    unsigned long long non_finite = ~0ull;
    float bad_value = 0;
  };

  /// On the update stream, after the search (c.done): estimates, then the write-back as a batch
  /// of whole target rows, scattered into the back buffer now and replayed onto the other later,
  /// and the back buffer published. `front_values`: the searched buffer's target rows.
  KnnqWrite knnq_write_back(const QUpdateRequest& r, std::uint64_t epoch, const QueryContext& c,
                            const float* front_values, QUpdate& out) {
    const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries), k = static_cast<std::uint32_t>(r.k);
    const std::uint32_t T = outputs();
    cudaStream_t us = update_stream_.get();
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
    KnnqWrite written;
    const auto fill = [&](std::uint32_t* slots, float* values) {
      p.out_slots = slots;
      p.out_values = values;
      launch_knnq_rows(p, us);
    };
    const auto accept = [&] {
      check_cuda(cudaMemcpyAsync(&written.non_finite, p.non_finite, sizeof written.non_finite, cudaMemcpyDeviceToHost, us),
                 "cudaMemcpyAsync(KNN-Q flag)");
      check_cuda(cudaMemcpyAsync(out.q_before.data(), knnq_.q_before.get(), std::size_t(nq) * T * 4,
                                 cudaMemcpyDeviceToHost, us),
                 "cudaMemcpyAsync(KNN-Q estimates)");
      check_cuda(cudaStreamSynchronize(us), "cudaStreamSynchronize(KNN-Q write-back)");
      if (written.non_finite == ~0ull) return true;
      check_cuda(cudaMemcpy(&written.bad_value, p.out_values + written.non_finite, sizeof written.bad_value,
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy(KNN-Q non-finite value)");
      return false;
    };
    const int back = store_.write_back_targets(nq * k, epoch, fill, accept);
    if (back >= 0) {
      std::lock_guard lock(mutex_);
      store_.set_front(back);
      written.published = true;
    }
    return written;
  }

  /// A finished device-resident search's status: its epoch, and the first invalid query row
  /// and range (copied back for the error message). get() may run on any thread.
  static DeviceSearchStatus device_status(const QueryContext& c, std::uint64_t epoch, const DeviceQueryRequest& r,
                                          int device, std::size_t dim) {
    DeviceSearchStatus status;
    status.epoch = epoch;
    const unsigned long long bad_query = c.host_status.get()[0], bad_range = c.host_status.get()[1];
    if (bad_query == ~0ull && bad_range == ~0ull) return status;
    DeviceScope scope(device);
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
    return status;
  }

  StoreConfig config_;
  int device_;
  std::size_t stored_dim_;
  std::uint32_t chunks_;
  DeviceScope scope_;  // the device is current while the members below are created
  cudaDeviceProp props_{};
  DeviceLimits limits_;  // the planner's view of the device (work_out_limits)
  Stream update_stream_;
  mutable Stream query_stream_;
  mutable DeviceStore store_;
  mutable std::mutex mutex_;       // front buffer choice + ordering of work on the query stream
  SnapshotReads reads_{config_, device_, stored_dim_, store_, mutex_, query_stream_};
  std::shared_ptr<ContextPool> pool_ = std::make_shared<ContextPool>();
  mutable std::map<std::tuple<int, int, bool, bool, bool, bool, bool, std::uint32_t>, int> scan_occupancy_;  // under mutex_
  mutable std::map<std::pair<std::uint32_t, std::uint32_t>, int> reduced_occupancy_;  // under mutex_
  mutable SpatialTree spatial_[2];  // one per store buffer, guarded by mutex_ (built on the query stream)
  mutable SpatialSchedule schedule_;  // under mutex_
  Pipeline pipeline_;  // reads config_ and limits_ (declared before it)
  struct KnnqWorkspace {  // used by lookup_and_update, which the engine serialises with publish()
    DeviceArray<std::uint32_t> slots;
    DeviceArray<float> q_before, increment, targets;
    DeviceArray<std::int32_t> actions;
    DeviceArray<unsigned long long> non_finite;
  } knnq_;
};

}  // namespace gpu

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
