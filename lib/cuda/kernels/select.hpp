// The selection (kernels/select.cu): the k best of the scan's lists per query, written for the
// exact re-rank: in no particular order, but the k-th (the largest by (rank, id)) last.
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

struct SelectParams {
  const Candidate* candidates = nullptr;   // as written by the scan (see ScanParams)
  const std::uint32_t* lengths = nullptr;
  std::uint32_t blocks = 0;                // scan blocks per query group (lists per query)
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;
  int metric = 0;                 // streamknn::Metric as int
  float* out_distance = nullptr;  // num_queries x k, reported distances
  std::uint64_t* out_id = nullptr;
  std::uint32_t* out_slot = nullptr;
};
/// Entries of each list the selection's first round loads. Random data puts about
/// Poisson(k / blocks) entries of the answer in each list, and one list cut before its share
/// sends the query to a second round over up to kSelectCapacity entries: the smallest take of
/// at least 2 with blocks x P(share >= take) <= 1/256 (four shares once they average 8 or more),
/// never more than k.
std::uint32_t first_take(std::uint32_t blocks, std::uint32_t k);
/// Largest k the selection supports, and the most candidates it sorts in shared memory.
inline constexpr std::uint32_t kMaxSelectK = 4096;
inline constexpr std::uint32_t kSelectCapacity = 8192;
/// Raises the selection kernel's shared-memory limit; call once per device.
void configure_select();
void launch_select(const SelectParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
