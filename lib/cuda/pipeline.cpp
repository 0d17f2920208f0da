// The query pipeline (pipeline.hpp): chunks, graphs and the device-resident batches. The plan's
// kernels and their parameters are in search.cpp.
#include "cuda/pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.hpp"
#include "core/metric_space.hpp"
#include "cuda/tuning.hpp"

namespace streamknn::detail::gpu {

using namespace tuning;

namespace {

static_assert(kDeviceAttributeWords == kMaxAttributeWords);

/// A query's predicate as the kernels test it; none admits every point.
PredicateDevice device_predicate(const Predicate* p) {
  PredicateDevice d{};
  d.range_word = -1;
  if (p == nullptr) return d;
  for (std::size_t w = 0; w < kMaxAttributeWords; ++w) {
    d.required[w] = p->required[w];
    d.forbidden[w] = p->forbidden[w];
  }
  d.range_word = p->range_word;
  d.range_min = p->range_min;
  d.range_max = p->range_max;
  return d;
}

}  // namespace

Pipeline::Pipeline(const StoreConfig& config, const DeviceLimits& device, cudaStream_t stream)
    : config_(config),
      device_(device),
      stored_dim_(stored_dim(config.metric, config.dim)),
      chunks_(chunks_for(stored_dim_)),
      width_(int(chunk_floats_for(stored_dim_))),
      stream_(stream) {}

std::uint32_t Pipeline::classes() const noexcept {
  return config_.target.kind == TargetSpec::Kind::Classes ? config_.target.count : 0;
}
std::uint32_t Pipeline::outputs() const noexcept {
  return config_.target.value_count();
}

ChunkLayout Pipeline::size(QueryContext& c, const Plan& plan, std::uint32_t queries) const {
  return size_context(c, plan, queries, WorkspaceSpec{chunks_, classes(), outputs(), device_.can_map_host_memory, device_.rerank_shared, stream_});
}

void Pipeline::prepare(QueryContext& c, const Plan& plan, const QueryRequest& r) const {
  const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries), qc = plan.chunk_queries;
  const std::uint32_t chunk_count = (nq + qc - 1) / qc;
  const ChunkLayout l = size(c, plan, nq);
  if (config_.debug) std::memset(c.host_out.get(), 0xA5, chunk_count * l.out_bytes);
  const std::size_t padded = std::size_t(chunks_) * 4;
  // Every query's threshold starts at the request's rank limit (a radius's), or unbounded.
  const std::uint32_t start_bound = r.rank_limit < std::numeric_limits<float>::infinity()
                                        ? threshold_bits(r.rank_limit) : kNoBound;
  for (std::uint32_t q = 0; q < nq; ++q) {
    unsigned char* block = c.host_in.get() + (q / qc) * l.in_bytes;
    const std::uint32_t i = q % qc;
    float* row = reinterpret_cast<float*>(block + l.queries) + i * padded;
    std::memcpy(row, r.queries.data() + q * stored_dim_, stored_dim_ * sizeof(float));
    std::fill(row + stored_dim_, row + padded, 0.0f);
    if (r.filtered()) {
      reinterpret_cast<IdRangeDevice*>(block + l.ranges)[i] =
          r.visible.empty() ? IdRangeDevice{0, kNoId} : IdRangeDevice{r.visible[q].begin, r.visible[q].end};
      reinterpret_cast<PredicateDevice*>(block + l.predicates)[i] = device_predicate(r.predicate_of(q));
    }
    reinterpret_cast<std::uint32_t*>(block + l.thresholds)[i] = start_bound;
  }
}

void Pipeline::launch(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode,
                      const BufferViews& views) const {
  const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
  if (nq <= kGraphMaxQueries && plan.chunk_queries >= nq) return launch_graph(c, plan, r, mode, views);
  for (std::uint32_t q0 = 0; q0 < nq; q0 += plan.chunk_queries) {
    enqueue(c, plan, r, mode, views, q0, std::min(plan.chunk_queries, nq - q0), false);
  }
}

/// Small batches: capture the whole pipeline once per shape and replay it.
void Pipeline::launch_graph(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode,
                            const BufferViews& views) const {
  const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
  const GraphKey key = graph_key(plan, nq, static_cast<int>(mode), r.aggregate, views.buffer);
  GraphExec* exec = c.graphs.find(key);
  if (exec == nullptr) {
    GraphExec captured = capture(stream_, [&] { enqueue(c, plan, r, mode, views, 0, nq, true); });
    exec = &c.graphs.insert(key, std::move(captured));
  }
  check_cuda(cudaGraphLaunch(exec->get(), stream_), "cudaGraphLaunch");
}

/// Enqueues one chunk of queries [q0, q0 + n) on the query stream: one copy in (in a graph, a
/// block of more than kGraphCopyMaxBytes read by a kernel from the mapped staging), the
/// kernels, and the answers to the pinned staging. A small chunk's last kernel writes them
/// there itself (the staging is mapped): on an H100 a graph of a host-to-device copy, two
/// kernels or more and a device-to-host copy took 17.4-20.3 us host to host, against 9.7-11.0
/// us with the last kernel writing the host memory (bench_graph_copies). Larger chunks, whose
/// answers would cross the bus as scattered small writes, end with the copy.
void Pipeline::enqueue(QueryContext& c, const Plan& plan, const QueryRequest& r, Mode mode, const BufferViews& views,
                       std::uint32_t q0, std::uint32_t n, bool in_graph) const {
  const ChunkLayout& l = c.layout;
  const std::uint32_t k = plan.k, block = q0 / plan.chunk_queries;
  if (in_graph && l.in_bytes > kGraphCopyMaxBytes && c.host_in.device_ptr() != nullptr) {
    launch_copy_in(c.host_in.device_ptr() + block * l.in_bytes, c.input.get(), l.in_bytes, stream_);
  } else {
    check_cuda(cudaMemcpyAsync(c.input.get(), c.host_in.get() + block * l.in_bytes, l.in_bytes, cudaMemcpyHostToDevice,
                               stream_),
               "cudaMemcpyAsync(queries)", concat(n, " queries of dim ", config_.dim));
  }
  if (config_.debug) poison(c, n, k);
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
  search(c, plan, views, n, select);

  std::size_t from = l.distance, to = l.id + std::size_t(n) * k * 8;  // the part of the output block this mode returns
  if (!neighbors) {
    AggregateParams agg = aggregate_params(c, views.store, n, k, mode, r.aggregate);
    agg.out_label = reinterpret_cast<std::int32_t*>(answers + l.label);
    agg.out_probability = reinterpret_cast<float*>(answers + l.probability);
    agg.out_value = reinterpret_cast<float*>(answers + l.value);
    launch_aggregate(agg, stream_);
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
                               cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync(results)", concat(n, " queries, k=", k));
  }
}

/// One chunk [q0, q0 + n) of a device-resident search: validation and conversion on the
/// device, then the scan and the selection, whose results go straight to the caller's buffers.
void Pipeline::enqueue_device(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r, const BufferViews& views,
                              std::uint32_t q0, std::uint32_t n) const {
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
  prep.predicates_out = c.in<PredicateDevice>(l.predicates);
  prep.thresholds = c.in<std::uint32_t>(l.thresholds);
  prep.status = c.status.get();
  prep.host_status = c.host_status.device_ptr();
  prep.arrivals = c.status_arrivals.get();
  prep.last_chunk = q0 + n == r.num_queries;
  launch_prepare_device_queries(prep, stream_);
  debug_sync("prepare_device_queries_kernel");
  if (config_.debug) {
    check_cuda(cudaMemsetAsync(c.slot.get(), 0xA5, std::size_t(n) * k * 4, stream_), "cudaMemsetAsync(poison slots)");
  }
  const bool neighbors = r.aggregate.output == AggregateSpec::Output::Neighbors;
  SelectParams select = select_params(c, plan, n);
  select.out_distance = neighbors ? r.distances + std::size_t(q0) * k : c.out<float>(l.distance);
  select.out_id = neighbors ? r.ids + std::size_t(q0) * k : c.out<std::uint64_t>(l.id);
  select.out_slot = c.slot.get();
  search(c, plan, views, n, select);
  if (neighbors) return;
  AggregateParams agg = aggregate_params(c, views.store, n, k, mode_of(r.aggregate.output), r.aggregate);
  agg.out_label = r.labels ? r.labels + q0 : c.out<std::int32_t>(l.label);
  agg.out_probability = r.probabilities ? r.probabilities + std::size_t(q0) * classes() : c.out<float>(l.probability);
  agg.out_value = r.values ? r.values + std::size_t(q0) * outputs() : c.out<float>(l.value);
  launch_aggregate(agg, stream_);
  debug_sync("aggregate_kernel");
}

void Pipeline::reset_status(QueryContext& c) const {
  check_cuda(cudaMemsetAsync(c.status.get(), 0xff, 2 * sizeof(unsigned long long), stream_), "cudaMemsetAsync(status)");
  check_cuda(cudaMemsetAsync(c.status_arrivals.get(), 0, sizeof(std::uint32_t), stream_),
             "cudaMemsetAsync(status arrivals)");
}

/// Debug mode: garbage in every result the caller asked for, so an unwritten entry shows.
void Pipeline::poison_device_outputs(const Plan& plan, const DeviceQueryRequest& r) const {
  const std::size_t nq = r.num_queries;
  auto poison_out = [&](void* p, std::size_t bytes, const char* what) {
    if (p) check_cuda(cudaMemsetAsync(p, 0xA5, bytes, stream_), "cudaMemsetAsync(poison)", what);
  };
  if (r.aggregate.output == AggregateSpec::Output::Neighbors) {
    poison_out(r.distances, nq * plan.k * 4, "distances");
    poison_out(r.ids, nq * plan.k * 8, "ids");
  }
  poison_out(r.labels, nq * 4, "labels");
  poison_out(r.probabilities, nq * classes() * 4, "probabilities");
  poison_out(r.values, nq * outputs() * 4, "values");
}

/// Every chunk of a device-resident batch, with the status reset before them and copied back
/// after them where the host status is not mapped.
void Pipeline::enqueue_device_all(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r,
                                  const BufferViews& views) const {
  const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
  const bool mapped_status = c.host_status.device_ptr() != nullptr;
  if (!mapped_status) reset_status(c);
  if (config_.debug) poison_device_outputs(plan, r);
  for (std::uint32_t q0 = 0; q0 < nq; q0 += plan.chunk_queries) {
    enqueue_device(c, plan, r, views, q0, std::min(plan.chunk_queries, nq - q0));
  }
  if (!mapped_status) {
    check_cuda(cudaMemcpyAsync(c.host_status.get(), c.status.get(), 2 * sizeof(unsigned long long),
                               cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync(device search status)");
  }
}

/// A device-resident batch on the query stream: the chunks (validation, search, aggregation),
/// with the status reset before them and copied back after them where the host status is not
/// mapped (where it is, the validation hands it over and resets it). Small single-chunk
/// batches run as a CUDA graph once the same plan and caller buffers come back (a caller that
/// reuses its buffers, as a training loop does): issued call by call they were six or more API
/// calls, about 25 us of host time before one query's few microseconds of kernels (H100,
/// 1,000,000 x 2, one query: 37-43 us host to host against 23-25 us for search(); 27-31 us
/// captured).
void Pipeline::launch_device(QueryContext& c, const Plan& plan, const DeviceQueryRequest& r,
                             const BufferViews& views) const {
  const std::uint32_t nq = static_cast<std::uint32_t>(r.num_queries);
  if (c.host_status.device_ptr() != nullptr) {
    // No reset or copy around the batch (two graph nodes: on an H200 the device-resident search's
    // GPU time went 34.5 -> 29.0 us at 1,000,000 x 2 Q = 1, 82 -> 78 us at MNIST-like Q = 1 and
    // 138 -> 129 us at Q = 16). The last chunk's validation writes both host words (a batch has
    // at least one query); the device arrays are reset here only where the last batch did not
    // finish enqueueing.
    if (!c.status_reset) reset_status(c);
    c.status_reset = false;
  }
  auto enqueue_all = [&] { enqueue_device_all(c, plan, r, views); };
  if (config_.debug || nq > kGraphMaxQueries || plan.chunk_queries < nq) {
    enqueue_all();
  } else {
    const GraphKey plan_key =
        graph_key(plan, nq, static_cast<int>(mode_of(r.aggregate.output)), r.aggregate, views.buffer);
    const DeviceGraphKey key = device_graph_key(plan_key, r);
    GraphExec* exec = c.device_graphs.find(key);
    if (exec == nullptr) {  // first seen: run it, and capture it if it comes back
      c.device_graphs.insert(key, GraphExec());
      enqueue_all();
    } else {
      if (!exec->get()) *exec = capture(stream_, enqueue_all);
      check_cuda(cudaGraphLaunch(exec->get(), stream_), "cudaGraphLaunch(device search)");
    }
  }
  c.status_reset = true;  // the whole batch is on the stream: its last validation resets the status
}

/// Debug mode: garbage in every result buffer, so an unwritten entry shows.
void Pipeline::poison(QueryContext& c, std::uint32_t n, std::uint32_t k) const {
  check_cuda(cudaMemsetAsync(c.output.get(), 0xA5, c.layout.out_bytes, stream_), "cudaMemsetAsync(poison results)");
  check_cuda(cudaMemsetAsync(c.slot.get(), 0xA5, std::size_t(n) * k * 4, stream_), "cudaMemsetAsync(poison slots)");
}

/// Debug mode outside graph capture: wait for the kernel and report its failure by name.
void Pipeline::debug_sync(const char* kernel) const {
  if (!config_.debug) return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream_, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) return;
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (debug, after kernel)", kernel);
}

}  // namespace streamknn::detail::gpu
