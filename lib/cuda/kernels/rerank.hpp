// The exact re-rank (kernels/rerank.cu): each query's screened candidates (the selection's k'
// best by float32 rank) re-ranked by the exact arithmetic of core/exact_rank.hpp, the k answers
// written with their distances rounded once; where the certificate fails, the same block answers
// the query from every stored point. Plain declarations for host code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

/// One buffer entry: float64 key, its error bound (rounded up), slot and id (24 bytes).
struct RerankEntry {
  double key;
  float err;
  std::uint32_t slot;
  std::uint64_t id;
};

struct RerankParams {
  const StoreView* store = nullptr;
  const float* queries = nullptr;      ///< num_queries rows of query_stride floats (stored form, padded)
  std::uint32_t query_stride = 0;
  const IdRangeDevice* ranges = nullptr;  ///< nullptr or one per query
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;                 ///< answers per query
  std::uint32_t width = 0;             ///< screened candidates per query (k')
  std::uint32_t stored_dim = 0;
  int metric = 0;                      ///< streamknn::Metric as int
  const std::uint64_t* screen_id = nullptr;    ///< num_queries x width, the selection's order
  const std::uint32_t* screen_slot = nullptr;
  float* out_distance = nullptr;       ///< num_queries x k
  std::uint64_t* out_id = nullptr;
  std::uint32_t* out_slot = nullptr;
  RerankEntry* global_buffer = nullptr;  ///< num_queries x rerank_capacity entries where they exceed shared memory
};

inline constexpr std::uint32_t kRerankThreads = 256;
/// Entries of a query's buffer: the screened list, then room for one round of the fallback.
inline constexpr std::uint32_t rerank_capacity(std::uint32_t width, std::uint32_t k) {
  std::uint32_t need = (width > k ? width : k) + kRerankThreads, p = 1;
  while (p < need) p <<= 1;
  return p;
}
inline constexpr std::size_t rerank_shared_bytes(std::uint32_t width, std::uint32_t k) {
  return std::size_t(rerank_capacity(width, k)) * sizeof(RerankEntry);
}
/// Raises the kernel's shared-memory limit to `optin` bytes; call once per device.
void configure_rerank(std::size_t optin);
/// True where a query's buffer fits the shared memory configure_rerank allowed (else pass a
/// global buffer).
bool rerank_fits_shared(std::uint32_t width, std::uint32_t k);
void launch_rerank(const RerankParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
