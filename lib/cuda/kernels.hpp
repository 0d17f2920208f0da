// Host-callable launchers of the CUDA kernels: one header per kernel family under kernels/, each
// with its parameter struct and launcher, all included here. Plain declarations: the host code
// that calls them never sees device code. Every launcher checks the launch and throws CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"
#include "cuda/kernels/aggregate.hpp"
#include "cuda/kernels/copy_in.hpp"
#include "cuda/kernels/dense.hpp"
#include "cuda/kernels/direct.hpp"
#include "cuda/kernels/resident.hpp"
#include "cuda/kernels/sample.hpp"
#include "cuda/kernels/scan.hpp"
#include "cuda/kernels/scatter.hpp"
#include "cuda/kernels/screen.hpp"
#include "cuda/kernels/select.hpp"
#include "cuda/kernels/spatial.hpp"

namespace streamknn::detail::gpu {

// ---- device-resident queries (kernels/device_queries.cu) -------------------------------------------
/// Reads a chunk of the caller's queries from device memory, validates each row (NaN/Inf or a
/// coordinate beyond `bound`, cosine zero vector, latitude outside [-90, 90] or longitude outside
/// [-180, 180], visible range with begin > end), converts it to the
/// stored form padded to float4 chunks, and sets its threshold to +inf. A bad row is replaced by
/// zeros (so the search stays well defined) and its global index atomicMin'ed into status[0]
/// (status[1] for a bad range); the host reports the first one.
struct DeviceQueryParams {
  const float* in = nullptr;             // caller's queries, row q at in + q * row_stride
  std::size_t row_stride = 0;            // floats
  const IdRangeDevice* visible = nullptr;  // caller's ranges (one per query) or nullptr
  std::uint32_t first = 0;               // global index of the chunk's first query
  std::uint32_t num_queries = 0;         // queries in the chunk
  std::uint32_t dim = 0, stored_dim = 0, chunks = 0;
  int metric = 0;                        // streamknn::Metric as int
  float bound = 0;                       // largest |coordinate| (core/metric_space.hpp coordinate_bound)
  float* queries_out = nullptr;          // num_queries x chunks float4
  IdRangeDevice* ranges_out = nullptr;   // written when visible != nullptr
  std::uint32_t* thresholds = nullptr;   // num_queries
  unsigned long long* status = nullptr;  // [0] first bad query, [1] first bad range (~0: none)
  // Where the kernel hands the status to the host (mapped pinned memory), or nullptr where the
  // caller copies `status` back itself. With it, the last block to finish copies `status` there
  // and sets it back to ~0 where this chunk is the batch's last (`last_chunk`), and leaves
  // `arrivals` at zero for the next launch.
  unsigned long long* host_status = nullptr;
  std::uint32_t* arrivals = nullptr;     // blocks finished (zero between launches)
  bool last_chunk = false;
};
void launch_prepare_device_queries(const DeviceQueryParams& params, cudaStream_t stream);

// ---- KNN-Q lookup and write-back (kernels/knnq.cu) -------------------------------------------------
struct KnnqParams {
  const float* values = nullptr;         // the snapshot's target rows, capacity x outputs
  const std::uint32_t* slots = nullptr;  // num_queries x k neighbour slots (~0u: padding)
  const std::int32_t* actions = nullptr; // num_queries
  const float* targets = nullptr;        // num_queries
  float alpha = 0;
  std::uint32_t num_queries = 0, k = 0, outputs = 0;
  float* q_before = nullptr;             // num_queries x outputs: per-action means (NaN: none)
  float* increment = nullptr;            // num_queries: alpha * (target - q[action]) (0: none)
  // the write-back, one entry per (query, neighbour): slot and its whole new row
  std::uint32_t* out_slots = nullptr;    // num_queries x k
  float* out_values = nullptr;           // num_queries x k x outputs
  // set to ~0 before launch_knnq_rows; the smallest entry x outputs + action whose new value is
  // not finite (lookup_and_update then publishes nothing)
  unsigned long long* non_finite = nullptr;
};
/// Per query: the per-action means of its neighbours' rows (double sums in neighbour order, as
/// the Mean aggregate) and its increment.
void launch_knnq_estimate(const KnnqParams& params, cudaStream_t stream);
/// Per (query, neighbour) entry: the slot's new row, its snapshot row plus the increments of
/// every query that found it, added in query order (as the CPU backend). Entries of one slot
/// write identical rows; padding entries repeat a real slot's entry, so the batch holds
/// num_queries x k target writes, every one well defined. Flags the first non-finite new value
/// in params.non_finite (entries of one slot carry one row, so the smallest flagged entry is
/// the slot's first appearance, the value the CPU backend reports).
void launch_knnq_rows(const KnnqParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
