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
  const PredicateDevice* predicates = nullptr;  ///< one per query where ranges is set
  const PredicateDevice* mask = nullptr;  ///< one predicate for every query (no ranges), or nullptr
  std::uint32_t num_queries = 0;
  std::uint32_t k = 0;                 ///< answers per query
  std::uint32_t width = 0;             ///< screened candidates per query (k')
  std::uint32_t stored_dim = 0;
  int metric = 0;                      ///< streamknn::Metric as int
  const std::uint64_t* screen_id = nullptr;    ///< num_queries x width, the selection's order
  const std::uint32_t* screen_slot = nullptr;
  /// num_queries x width keys written by launch_rerank_keys, or nullptr: the re-rank's block
  /// computes them itself (stores of at most kRerankInlineChunks chunks).
  RerankEntry* keys = nullptr;
  float* out_distance = nullptr;       ///< num_queries x k
  std::uint64_t* out_id = nullptr;
  std::uint32_t* out_slot = nullptr;   ///< ~0u past the last answer
  /// The reduced-precision screen's lower bounds (num_queries x width, the selection's order), or
  /// nullptr for the float32 screen: the certificate then holds where the k-th exact rank lies
  /// below the width-th bound (docs/cuda.md, E7).
  const float* screen_floor = nullptr;
  RerankEntry* global_buffer = nullptr;  ///< num_queries x rerank_capacity entries where they exceed shared memory
};

inline constexpr std::uint32_t kRerankThreads = 256;
/// Stores of at most this many float4 chunks get their keys inside the re-rank's block: a
/// thread reads its candidate's few chunks in one round trip. Wider ones take launch_rerank_keys
/// first, which spreads each query's candidates over blocks (a whole SM's loads per query) and
/// each candidate over a group of threads.
inline constexpr std::uint32_t kRerankInlineChunks = 4;
/// Threads per candidate in launch_rerank_keys: about four chunks each, at most a warp.
inline constexpr std::uint32_t rerank_key_group(std::uint32_t chunks) {
  std::uint32_t g = 1;
  while (g < 32 && 8 * g <= chunks) g <<= 1;
  return g;
}
/// Whether the store's keys come from launch_rerank_keys (else the re-rank's block).
inline constexpr bool rerank_keys_apart(std::uint32_t chunks) { return chunks > kRerankInlineChunks; }

/// Entries of a query's buffer: the screened list, then room for one round of the fallback.
inline constexpr std::uint32_t rerank_capacity(std::uint32_t width, std::uint32_t k) {
  std::uint32_t need = (width > k ? width : k) + kRerankThreads, p = 1;
  while (p < need) p <<= 1;
  return p;
}
inline constexpr std::size_t rerank_shared_bytes(std::uint32_t width, std::uint32_t k) {
  return std::size_t(rerank_capacity(width, k)) * sizeof(RerankEntry);
}
/// Raises the kernel's shared-memory limit to what `optin` bytes per block leave beside its
/// static shared memory; returns that dynamic limit (call once per device).
std::size_t configure_rerank(std::size_t optin);
/// True where a query's buffer fits `dynamic_limit` (configure_rerank's) bytes of shared memory
/// (else pass a global buffer).
inline constexpr bool rerank_fits_shared(std::uint32_t width, std::uint32_t k, std::size_t dynamic_limit) {
  return rerank_shared_bytes(width, k) <= dynamic_limit;
}
/// The keys of every screened candidate into params.keys (stores of more than
/// kRerankInlineChunks chunks).
void launch_rerank_keys(const RerankParams& params, std::uint32_t chunks, cudaStream_t stream);
void launch_rerank(const RerankParams& params, cudaStream_t stream);

}  // namespace streamknn::detail::gpu
