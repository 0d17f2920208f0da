// The scan kernel's shared-memory layout (SharedLayout) and the constants that size it: the
// staged loads' ring of point chunks and the screen's queue of flagged pairs. Only scan.cu (whose
// host code sizes its launches with it) and its scan_*.cuh parts include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"

namespace streamknn::detail::gpu {

namespace {

// Staged point loads (multi-chunk stores, groups of 4 and 8 queries): each lane copies its point's
// chunks into its warp's shared-memory ring with cp.async, kStageChunks per stage, one stage ahead
// of the one it scores, so the warp's next loads are in flight while it does the arithmetic of the
// current ones, without holding them in registers. H100 A/B against the register-pipelined loop it
// replaced: MNIST-like K = 128 Q = 4 0.82x, K = 64 Q = 8 0.88x, GoogleNews-like K = 64 Q = 8 0.93x,
// the other Q = 4 / 8 rows 0.97-1.02x. Groups of 12 and 16 lost 4-16% with it (ptxas then spilled
// at 64 registers).
constexpr int kStageChunks = 4;
constexpr int kStages = 2;
constexpr std::uint32_t kPendingPairs = 64;  // the screen's queue of flagged pairs per warp (ranked from 32)

__host__ __device__ constexpr bool staged_loads(int qg, int one_chunk_width) {
  return one_chunk_width == 0 && (qg == 4 || qg == 8);
}
/// Stages of the warp's ring of point chunks (staged loads and the screen), or 0.
__host__ __device__ constexpr int ring_stages(int qg, int one_chunk_width, bool screen) {
  return screen || staged_loads(qg, one_chunk_width) ? kStages : 0;
}

/// Shared memory: the query group, its id ranges and (screen) squared norms, read-only; then per
/// warp: its lists, their lengths, its thresholds, the ranks of the current tile (screen: a queue
/// of pairs instead), a sort scratch and, with staged loads or the screen, its ring of point
/// chunks.
struct SharedLayout {
  std::size_t queries, ranges, norms, warp_base, warp_bytes, lists, counts, thresholds, ranks, scratch, stage, pending,
      total;
};

__host__ __device__ inline std::size_t align16(std::size_t x) { return (x + 15) & ~std::size_t(15); }

/// With global_lists the warps' lists live in ScanParams::warp_lists instead.
__host__ __device__ inline SharedLayout shared_layout(int qg, int warps, std::uint32_t chunks, std::uint32_t k,
                                                      bool global_lists, int stages, bool screen,
                                                      bool inner_product) {
  SharedLayout l{};
  std::size_t off = 0;
  l.queries = off;
  off += align16(std::size_t(qg) * chunks * sizeof(float4));
  l.ranges = off;
  off += align16(std::size_t(qg) * sizeof(IdRangeDevice));
  l.norms = off;
  if (screen) off += align16(std::size_t(qg) * sizeof(float));
  l.warp_base = off;
  std::size_t w = 0;  // offsets inside one warp's area
  l.lists = w;
  if (!global_lists) w += align16(std::size_t(qg) * k * sizeof(Candidate));
  l.counts = w;
  w += align16(std::size_t(qg) * sizeof(std::uint32_t));
  l.thresholds = w;
  w += align16(std::size_t(qg) * sizeof(std::uint32_t));
  l.ranks = w;  // the screen queues its pairs instead
  if (!screen) w += align16(std::size_t(qg) * 32 * sizeof(float));
  l.scratch = w;
  w += align16(32 * sizeof(Candidate));
  l.stage = w;
  w += std::size_t(stages) * kStageChunks * 32 * sizeof(float4);
  l.pending = w;
  if (screen) w += (inner_product ? 3 : 2) * kPendingPairs * sizeof(std::uint32_t);  // slot, query (, rank)
  l.warp_bytes = w;
  l.total = off + std::size_t(warps) * w;
  return l;
}

}  // namespace

}  // namespace streamknn::detail::gpu
