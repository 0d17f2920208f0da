// Device descriptions for the planner's tests (test_planner.cpp): cudaDeviceProp's figures of
// four cards and a model of the occupancy calculator for the kernels whose grids the planner
// sizes, so plans can be checked without a GPU.
//
// The figures: H100 / H200 (sm_90: 132 SMs, 227 KB opt-in shared memory per block, 228 KB per SM,
// 50 MB L2), A100 (sm_80: 108 SMs, 163 KB, 164 KB, 40 MB), RTX 3090 (sm_86: 82 SMs, 99 KB, 100 KB,
// 6 MB) and L40S (sm_89: 142 SMs, 99 KB, 100 KB, 96 MB), with the CUDA programming guide's limits
// per SM: 2,048 threads and 32 blocks (sm_80, sm_90), 1,536 threads and 16 blocks (sm_86) or 24
// (sm_89), 65,536 registers everywhere, and 1 KB of shared memory the runtime reserves per block.
//
// The occupancy model: blocks per SM = the least of the threads', the blocks', the registers' and
// the shared memory's limits. Registers per thread (allocated per warp in units of 256) are what
// the kernels' launch bounds and their documented ptxas figures give:
// - scan: 64 for every variant (scan.cu: max_threads' 1,024 threads leave groups of 1-2 their 64;
//   groups of 12 compile to 64 without a minimum of blocks), 80 for the narrow one-query kernel
//   (256 threads, 3 blocks per SM), 128 for the screen (16 warps of 32 lanes, its 4 x 8 sums);
// - direct: its launch bounds' blocks per SM (5 without id ranges, 3 with them) where the threads
//   allow them;
// - resident: 128 (launch bounds of 8 warps and 1 block: ptxas may take up to 255; 128 is the
//   model's choice), with the dynamic shared memory resident_shared_bytes gives.
// Shared memory is the kernels' own formulas (scan_shared_bytes, resident_shared_bytes), so every
// limit that depends on k and the dimension is exact; only the register counts are modelled.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/kernels.hpp"
#include "cuda/planner.hpp"

namespace planner_test {

using namespace streamknn::detail::gpu;

struct Card {
  std::string name;
  int major = 0, minor = 0;
  std::uint32_t sms = 0;
  std::size_t optin = 0, per_sm = 0, l2 = 0;
  int max_threads = 0, max_blocks = 0;
};

inline const Card kH100{"sm_90 (H100)", 9, 0, 132, 227 * 1024, 228 * 1024, 50u << 20, 2048, 32};
inline const Card kH200{"sm_90 (H200)", 9, 0, 132, 227 * 1024, 228 * 1024, 60u << 20, 2048, 32};
inline const Card kA100{"sm_80 (A100)", 8, 0, 108, 163 * 1024, 164 * 1024, 40u << 20, 2048, 32};
inline const Card kRtx3090{"sm_86 (RTX 3090)", 8, 6, 82, 99 * 1024, 100 * 1024, 6u << 20, 1536, 16};
inline const Card kL40S{"sm_89 (L40S)", 8, 9, 142, 99 * 1024, 100 * 1024, 96u << 20, 1536, 24};

/// Blocks per SM of a kernel of `threads` threads, `regs` registers per thread and `shared`
/// bytes of dynamic shared memory per block on `card` (0 where one block does not fit).
inline int blocks_per_sm(const Card& card, int threads, int regs, std::size_t shared) {
  constexpr std::size_t kReserved = 1024;
  if (shared + kReserved > card.per_sm || shared > card.optin) return 0;
  const int warps = (threads + 31) / 32;
  const int by_threads = card.max_threads / (warps * 32);
  const int regs_per_warp = (regs * 32 + 255) / 256 * 256;
  const int by_regs = 65536 / (regs_per_warp * warps);
  const int by_shared = int(card.per_sm / (shared + kReserved));
  return std::min({by_threads, card.max_blocks, by_regs, by_shared});
}

/// The scan kernel's registers per thread for a shape (see above).
inline int scan_registers(const ScanShape& s) {
  if (s.screen) return 128;
  const bool narrow = s.query_group == 1 && !s.global_lists && s.one_chunk_width == 0 && !s.tiled &&
                      s.warps_per_block * 32 <= 256;
  return narrow ? 80 : 64;
}

/// The limits the backend would pass for `card` and a store of `stored_dim` floats per vector.
inline DeviceLimits limits_for(const Card& card, std::size_t stored_dim, streamknn::Metric metric) {
  DeviceLimits d;
  d.major = card.major;
  d.minor = card.minor;
  d.sms = card.sms;
  d.shared_per_block_optin = card.optin;
  d.shared_per_sm = card.per_sm;
  d.l2_bytes = card.l2;
  d.can_map_host_memory = true;
  const bool one_chunk = stored_dim <= 4;
  const int width = int(chunk_floats_for(stored_dim));
  if (one_chunk) {
    for (int filtered = 0; filtered < 2; ++filtered) {
      const int launch_bound = filtered ? 3 : 5;
      d.direct_blocks_per_sm[filtered] = std::uint32_t(std::max(1, std::min(launch_bound, card.max_threads / 256)));
    }
    // The resident kernel's registers (ptxas, sm_90): 128 unfiltered, 136 / 144 filtered per query
    // / by a mask, allocated in units of 8.
    const int registers[3] = {128, 136, 144};
    for (int f = 0; f < 3; ++f) {
      for (int i = 0; i < 4; ++i) {
        const std::uint32_t warps = 1u << i;
        if (resident_shared_bytes(width, warps) > card.optin) continue;
        d.resident_blocks_per_sm[f][i] = std::uint32_t(
            std::max(1, blocks_per_sm(card, int(warps) * 32, registers[f], resident_shared_bytes(width, warps))));
      }
    }
  }
  (void)metric;
  d.scan_blocks_per_sm = [card](const ScanShape& s, std::uint32_t k) {
    return blocks_per_sm(card, s.warps_per_block * 32, scan_registers(s), scan_shared_bytes(s, k));
  };
  return d;
}

/// The search shape of a batch of `queries` over a store of `capacity` slots.
inline SearchShape shape_of(std::uint32_t capacity, std::size_t dim, streamknn::Metric metric, std::uint32_t queries,
                            std::uint32_t k, bool filtered = false) {
  SearchShape q;
  q.queries = queries;
  q.k = k;
  q.dim = dim;
  q.stored_dim = metric == streamknn::Metric::Haversine ? 3 : dim;
  q.chunks = std::uint32_t((q.stored_dim + 3) / 4);
  q.metric = metric;
  q.filtered = filtered;
  q.capacity = (capacity + kTile - 1) / kTile * kTile;
  q.slot_count = capacity;
  return q;
}

}  // namespace planner_test
