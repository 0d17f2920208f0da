#include "cpu/cpu_search.hpp"

#include <algorithm>

#include <Eigen/Core>

namespace streamknn::detail {

namespace {

using Packet = Eigen::Array<float, 8, 1>;
using PacketMap = Eigen::Map<const Packet, Eigen::Aligned32>;

// Every (query, point) pair is reduced by one of these two functions, always over the padded
// stride in the same order, so a pair's rank does not depend on batch size or slot.
template <bool kInnerProduct, int kQueries>
inline void ranks_padded(const float* const* queries, const float* point, std::size_t stride, float* out) {
  Packet acc[kQueries];
  for (int j = 0; j < kQueries; ++j) acc[j].setZero();
  for (std::size_t i = 0; i < stride; i += 8) {
    const PacketMap p(point + i);
    for (int j = 0; j < kQueries; ++j) {
      const PacketMap q(queries[j] + i);
      if constexpr (kInnerProduct) {
        acc[j] += q * p;
      } else {
        const Packet d = q - p;
        acc[j] += d * d;
      }
    }
  }
  for (int j = 0; j < kQueries; ++j) out[j] = kInnerProduct ? -acc[j].sum() : acc[j].sum();
}

template <bool kInnerProduct, int kDim>
inline float rank_low_dim(const float* query, const float* point) {
  float acc = 0;
  for (int i = 0; i < kDim; ++i) {
    if constexpr (kInnerProduct) {
      acc += query[i] * point[i];
    } else {
      const float d = query[i] - point[i];
      acc += d * d;
    }
  }
  return kInnerProduct ? -acc : acc;
}

/// Bounded max-heap of the k best candidates seen so far (worst on top).
class TopK {
 public:
  void reset(std::size_t k) {
    k_ = k;
    heap_.clear();
    heap_.reserve(k);
  }
  bool admits(float rank, PointId id) const noexcept {
    return heap_.size() < k_ || closer({rank, 0, id}, heap_.front());
  }
  void push(float rank, std::uint32_t slot, PointId id) {
    const Candidate c{rank, slot, id};
    if (heap_.size() < k_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), closer);
    } else {
      std::pop_heap(heap_.begin(), heap_.end(), closer);
      heap_.back() = c;
      std::push_heap(heap_.begin(), heap_.end(), closer);
    }
  }
  std::vector<Candidate>& items() noexcept { return heap_; }

 private:
  std::size_t k_ = 0;
  std::vector<Candidate> heap_;
};

constexpr std::size_t kPointTile = 256;   // rows scanned per query block before moving on
constexpr std::size_t kQueryBlock = 16;   // queries sharing one pass over a tile

inline bool visible_to(const IdRange* visible, std::size_t q, PointId id) noexcept {
  return !visible || (id >= visible[q].begin && id < visible[q].end);
}

/// Scans slots [begin, end) for queries [q0, q1), feeding heaps[q - q0].
template <bool kInnerProduct>
void scan(const CpuSearchInput& in, std::size_t begin, std::size_t end, std::size_t q0, std::size_t q1,
          TopK* heaps) {
  const HostStore& store = *in.store;
  const std::size_t stride = store.stride();
  const float* query_rows = in.queries;
  auto offer = [&](std::size_t q, std::size_t slot, float rank) {
    const PointId id = store.id(slot);
    if (heaps[q - q0].admits(rank, id) && visible_to(in.visible, q, id)) {
      heaps[q - q0].push(rank, static_cast<std::uint32_t>(slot), id);
    }
  };
  for (std::size_t t0 = begin; t0 < end; t0 += kPointTile) {
    const std::size_t t1 = std::min(end, t0 + kPointTile);
    if (stride <= 4) {
      for (std::size_t q = q0; q < q1; ++q) {
        const float* qr = query_rows + q * stride;
        for (std::size_t s = t0; s < t1; ++s) {
          if (store.id(s) == kInvalidId) continue;
          float rank = 0;
          switch (stride) {
            case 1: rank = rank_low_dim<kInnerProduct, 1>(qr, store.row(s)); break;
            case 2: rank = rank_low_dim<kInnerProduct, 2>(qr, store.row(s)); break;
            case 3: rank = rank_low_dim<kInnerProduct, 3>(qr, store.row(s)); break;
            default: rank = rank_low_dim<kInnerProduct, 4>(qr, store.row(s)); break;
          }
          offer(q, s, rank);
        }
      }
      continue;
    }
    std::size_t q = q0;
    for (; q + 4 <= q1; q += 4) {
      const float* qs[4] = {query_rows + q * stride, query_rows + (q + 1) * stride, query_rows + (q + 2) * stride,
                            query_rows + (q + 3) * stride};
      for (std::size_t s = t0; s < t1; ++s) {
        if (store.id(s) == kInvalidId) continue;
        float ranks[4];
        ranks_padded<kInnerProduct, 4>(qs, store.row(s), stride, ranks);
        for (int j = 0; j < 4; ++j) offer(q + j, s, ranks[j]);
      }
    }
    for (; q < q1; ++q) {
      const float* qs[1] = {query_rows + q * stride};
      for (std::size_t s = t0; s < t1; ++s) {
        if (store.id(s) == kInvalidId) continue;
        float rank;
        ranks_padded<kInnerProduct, 1>(qs, store.row(s), stride, &rank);
        offer(q, s, rank);
      }
    }
  }
}

void write_sorted(std::vector<Candidate>& items, std::size_t k, Candidate* out) {
  const std::size_t n = std::min(items.size(), k);
  std::partial_sort(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n), items.end(), closer);
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
  const std::size_t nq = in.num_queries, k = in.k, slots = in.store->slot_count();
  out.assign(nq * k, Candidate{});
  if (nq == 0) return;
  const std::size_t threads = pool.concurrency();
  // Few queries: split the store between threads and merge; many: split the queries.
  const std::size_t chunks = nq >= 2 * threads ? 1 : std::clamp<std::size_t>(slots / 4096, 1, threads);
  const std::size_t query_blocks = (nq + kQueryBlock - 1) / kQueryBlock;
  const std::size_t chunk_len = (slots + chunks - 1) / chunks;
  std::vector<std::vector<TopK>> partial(chunks > 1 ? chunks : 0, std::vector<TopK>(nq));

  pool.parallel_for(chunks * query_blocks, [&](std::size_t task) {
    const std::size_t chunk = task / query_blocks, block = task % query_blocks;
    const std::size_t q0 = block * kQueryBlock, q1 = std::min(nq, q0 + kQueryBlock);
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
    if (in.inner_product) {
      scan<true>(in, begin, end, q0, q1, heaps);
    } else {
      scan<false>(in, begin, end, q0, q1, heaps);
    }
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
