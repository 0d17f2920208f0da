// The CPU search's driver: exact_search splits a batch into (slot chunk) x (query block) tasks on
// the pool, runs the scan kernels (cpu_scan.cpp) on each and merges the per-chunk top-k lists in
// (rank, id) order; and the check that this CPU runs the ISA the kernels were built for.
#include "cpu/cpu_search.hpp"

#include <algorithm>
#include <vector>

#include "cpu/cpu_scan.hpp"

namespace streamknn::detail {

namespace {

void write_sorted(std::vector<Candidate>& items, std::size_t k, Candidate* out) {
  const std::size_t n = std::min(items.size(), k);
  std::partial_sort(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n), items.end(), Closer{});
  std::copy_n(items.begin(), n, out);
  std::fill(out + n, out + k, Candidate{});
}

}  // namespace

const char* cpu_search_isa() noexcept { return STREAMKNN_CPU_ISA_NAME; }

bool cpu_search_supported() noexcept {
#if defined(__x86_64__) && defined(__AVX2__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

void exact_search(const CpuSearchInput& in, ThreadPool& pool, std::vector<Candidate>& out) {
  const std::size_t nq = in.num_queries, k = in.k, slots = in.store->slot_count(), stride = in.store->stride();
  out.assign(nq * k, Candidate{});
  if (nq == 0) return;
  const std::size_t threads = pool.concurrency();
  // Work = (slot chunk) x (query block). A query block (about 64 KiB of queries) shares every
  // pass over the store, so the store is read from memory once per block; the slots are split
  // between threads unless there are enough blocks to keep every thread busy, and the per-chunk
  // top-k lists are merged. The split changes no rank (see the recipe in cpu_scan.cpp), only who
  // finds it.
  // (A multiple of 12, so that the kernels' groups of 4 and 6 queries fill it.)
  const std::size_t block = std::clamp<std::size_t>(16384 / std::max<std::size_t>(stride, 1) / 12 * 12, 24, 264);
  const std::size_t query_blocks = (nq + block - 1) / block;
  constexpr std::size_t kMinChunk = 4096;
  const std::size_t chunks =
      query_blocks >= 2 * threads ? 1 : std::clamp<std::size_t>(slots / kMinChunk, 1, threads);
  // (A multiple of 8, so the low-dimension path's vector loads start aligned inside the columns.)
  const std::size_t chunk_len = ((slots + chunks - 1) / chunks + 7) / 8 * 8;
  std::vector<std::vector<TopK>> partial(chunks > 1 ? chunks : 0, std::vector<TopK>(nq));

  pool.parallel_for(chunks * query_blocks, [&](std::size_t task) {
    const std::size_t chunk = task / query_blocks, b = task % query_blocks;
    const std::size_t q0 = b * block, q1 = std::min(nq, q0 + block);
    const std::size_t begin = std::min(slots, chunk * chunk_len), end = std::min(slots, begin + chunk_len);
    std::vector<TopK> local;
    TopK* heaps;
    if (chunks > 1) {
      heaps = partial[chunk].data() + q0;
    } else {
      local.resize(q1 - q0);
      heaps = local.data();
    }
    for (std::size_t q = q0; q < q1; ++q) heaps[q - q0].reset(k);
    scan_slots(in, q0, q1, begin, end, heaps);
    if (chunks == 1) {
      for (std::size_t q = q0; q < q1; ++q) write_sorted(heaps[q - q0].items(), k, out.data() + q * k);
    }
  });
  if (chunks == 1) return;
  pool.parallel_for(nq, [&](std::size_t q) {
    std::vector<Candidate> merged;
    for (std::size_t c = 0; c < chunks; ++c) {
      auto& items = partial[c][q].items();
      merged.insert(merged.end(), items.begin(), items.end());
    }
    write_sorted(merged, k, out.data() + q * k);
  });
}

}  // namespace streamknn::detail
