// The workspace of a query batch (workspace.hpp).
#include "cuda/workspace.hpp"

#include <algorithm>
#include <vector>

#include "cuda/kernels.hpp"
#include "cuda/query_context.hpp"

namespace streamknn::detail::gpu {

Mode mode_of(AggregateSpec::Output o) noexcept {
  switch (o) {
    case AggregateSpec::Output::Neighbors: return Mode::Neighbors;
    case AggregateSpec::Output::Labels: return Mode::Labels;
    case AggregateSpec::Output::Probabilities: return Mode::Probabilities;
    case AggregateSpec::Output::Values: return Mode::Values;
  }
  return Mode::Neighbors;
}

namespace {

std::size_t align16(std::size_t x) { return (x + 15) & ~std::size_t(15); }

/// Fits a device array that must start out zero (a count the kernels reset, or bytes read
/// before they are written): zeroes it on the stream where it was allocated again (the query
/// stream, which every use of the context is ordered on: it does not synchronise with the legacy
/// default stream).
template <class T>
bool fit_zeroed(QueryContext& c, DeviceArray<T>& a, std::size_t n, const char* what, const WorkspaceSpec& spec,
                const char* memset_call) {
  if (!c.fit(a, n, what)) return false;
  check_cuda(cudaMemsetAsync(a.get(), 0, a.bytes(), spec.stream), memset_call);
  return true;
}

/// The candidate lists, their lengths, the warp lists, the sample's ranks and the first-tile
/// bound's keys of one launch chunk (`qc` queries); true where any moved.
bool fit_search(QueryContext& c, const Plan& plan, std::uint32_t qc, const WorkspaceSpec& spec) {
  bool changed = false;
  // The select reads whole list prefixes and masks what lies past a list's length: give those
  // bytes a defined value once.
  changed |= fit_zeroed(c, c.candidates, std::size_t(qc) * plan.stride, "search candidates", spec,
                        "cudaMemsetAsync(search candidates)");
  changed |= c.fit(c.lengths, std::size_t(qc) * plan.lists, "candidate list lengths");
  // The resident scan's warp lists hold 8-byte entries (half a Candidate each).
  std::size_t warp_list_entries = 0;
  if (const auto* resident = plan.as<ResidentPlan>()) {
    warp_list_entries = (std::size_t(qc) * plan.stride * resident->warps + 1) / 2;
  } else if (const auto* scan = plan.as<ScanPlan>()) {
    warp_list_entries = scan_warp_list_entries(scan->shape, qc, plan.width);
  }
  changed |= c.fit(c.warp_lists, warp_list_entries, "scan warp lists");
  changed |= c.fit(c.sample_keys, std::size_t(qc) * plan.sample_keys(), "sample pass ranks");
  const auto* scan = plan.as<ScanPlan>();
  const auto* reduced = plan.as<ReducedPlan>();  // its first-segment bound and segment counters
  if ((scan && scan->first_bound) || reduced) {
    changed |= c.fit(c.first_keys, std::size_t(qc) * plan.lists, "first-tile bound keys");
    // Counted up by every scan block and reset by the last: zero before the first launch.
    const std::size_t groups = reduced ? (qc + reduced->group - 1) / reduced->group * kReducedCounters
                                       : (qc + scan->shape.query_group - 1) / scan->shape.query_group;
    changed |= fit_zeroed(c, c.first_arrivals, groups, "first-tile bound arrivals", spec,
                          "cudaMemsetAsync(first-tile bound arrivals)");
  }
  changed |= c.fit(c.slot, std::size_t(qc) * plan.k, "result slots");
  changed |= c.fit(c.screen_distance, std::size_t(qc) * plan.width, "screened distances");
  changed |= c.fit(c.screen_id, std::size_t(qc) * plan.width, "screened ids");
  changed |= c.fit(c.screen_slot, std::size_t(qc) * plan.width, "screened slots");
  if (rerank_keys_apart(spec.chunks)) {
    changed |= c.fit(c.rerank_keys, std::size_t(qc) * plan.width, "exact re-rank keys");
  }
  if (!rerank_fits_shared(plan.width, plan.k, spec.rerank_shared)) {
    changed |= c.fit(c.rerank_buffer, std::size_t(qc) * rerank_capacity(plan.width, plan.k), "exact re-rank buffers");
  }
  if (const auto* dense = plan.as<DensePlan>()) {
    changed |= c.fit(c.dense, dense_workspace_words(qc, dense->row_stride), "dense screen rows");
    changed |= c.fit(c.dense_split, std::size_t(qc) * kDenseSplitMax, "dense selection shares");
    // Counted up by each query's selection blocks and reset by the last: zero before a launch.
    changed |= fit_zeroed(c, c.dense_arrivals, qc, "dense selection arrivals", spec,
                          "cudaMemsetAsync(dense selection arrivals)");
  }
  return changed;
}

}  // namespace

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
  place(l.predicates, std::size_t(qc) * sizeof(PredicateDevice));
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

ChunkLayout size_context(QueryContext& c, const Plan& plan, std::uint32_t nq, const WorkspaceSpec& spec) {
  const std::uint32_t qc = plan.chunk_queries;
  const std::uint32_t chunk_count = (nq + qc - 1) / qc;
  const ChunkLayout l = chunk_layout(qc, spec.chunks, plan.k, spec.classes, spec.outputs);
  bool changed = false;
  try {
    changed |= c.fit(c.input, l.in_bytes, "query input block");
    // A result copy spans alignment gaps and unused rows of a partial chunk: give them defined bytes.
    changed |= fit_zeroed(c, c.output, l.out_bytes, "query output block", spec, "cudaMemsetAsync(query output block)");
    changed |= fit_search(c, plan, qc, spec);
    if (spec.classes > kSharedClasses) changed |= c.fit(c.class_scratch, std::size_t(qc) * spec.classes, "class weights");
    changed |= c.fit(c.host_in, chunk_count * l.in_bytes, "pinned query staging", spec.mapped);
    changed |= c.fit(c.host_out, chunk_count * l.out_bytes, "pinned result staging", spec.mapped);
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

QueryResult unpack(const QueryContext& c, const StoreConfig& config, Mode mode, std::uint32_t nq, std::uint32_t k,
                   std::uint32_t qc, std::uint64_t epoch) {
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

}  // namespace streamknn::detail::gpu
