// Device-resident queries (kernels/device_queries.cu): a chunk of the caller's queries validated and
// converted on the device.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

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
  PredicateDevice* predicates_out = nullptr;  // pass-all predicates, written with ranges_out
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

}  // namespace streamknn::detail::gpu
