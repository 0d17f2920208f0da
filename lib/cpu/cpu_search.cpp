#include "cpu/cpu_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define STREAMKNN_CPU_AVX2 1
#endif

namespace streamknn::detail {

namespace {

// ---- how one (query, point) rank is computed ------------------------------------------------
//
// Rows above 4 stored dimensions are padded with zeros to a multiple of 8 floats (the queries
// too), and every pair is reduced by pair_ranks() below, whichever block shape, batch, slot or
// thread it falls in:
//   - lane l (0..7) of an 8-float accumulator takes elements l, l+8, l+16, ... in order:
//     acc = fma(q - p, q - p, acc) for squared L2, acc = fma(q, p, acc) for inner product,
//     starting from acc = 0 (so the first step is a rounded product);
//   - the 8 lanes are summed by one fixed tree, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7));
//   - inner product negates the sum (exact).
// Each operation is a single IEEE operation written out explicitly (fused multiply-add where
// the CPU has it, else a multiply and an add), so nothing depends on compiler contraction and
// a pair's rank is bit-for-bit the same in a batch of 1 and in a batch of 64. The direct form
// (q - p)^2 keeps identical vectors at exactly 0.

#ifdef STREAMKNN_CPU_AVX2
using Vec = __m256;
inline Vec vzero() noexcept { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) noexcept { return _mm256_load_ps(p); }
inline Vec vsub(Vec a, Vec b) noexcept { return _mm256_sub_ps(a, b); }
inline Vec vmul(Vec a, Vec b) noexcept { return _mm256_mul_ps(a, b); }
inline Vec vmadd(Vec a, Vec b, Vec c) noexcept { return _mm256_fmadd_ps(a, b, c); }
inline Vec vbroadcast(float x) noexcept { return _mm256_set1_ps(x); }
inline Vec vneg(Vec a) noexcept { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
/// Lane j of the result is the tree sum of acc[j] (the tree above): the hadds pair lanes
/// (0,1),(2,3) then those pairs, within each 128-bit half; the last add joins the halves.
inline Vec reduce8(const Vec* acc) noexcept {
  const Vec s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
  const Vec s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
  const Vec t0 = _mm256_hadd_ps(s01, s23), t1 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}
/// Bit l set where rank[l] is not greater than limit[l] (NaN passes: the heap decides).
inline unsigned not_greater(Vec rank, Vec limit) noexcept {
  return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(rank, limit, _CMP_NGT_UQ)));
}
/// limit lane l = thresholds[l / kPoints].
template <int kPoints>
inline Vec spread(const float* thresholds) noexcept {
  static_assert(kPoints == 1 || kPoints == 2 || kPoints == 4 || kPoints == 8);
  if constexpr (kPoints == 8) {
    return _mm256_broadcast_ss(thresholds);
  } else {
    const Vec t = _mm256_castps128_ps256(_mm_loadu_ps(thresholds));
    if constexpr (kPoints == 4) return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    if constexpr (kPoints == 2) return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 1, 2, 3, 3, 3, 3, 3));
  }
}
inline void vstore(float* out, Vec v) noexcept { _mm256_storeu_ps(out, v); }
/// Makes the compiler hold a loaded query row in a register for all the points it meets
/// (left alone, GCC reloads it once per point: 10 loads per step instead of 6). Changes no value.
inline void keep_in_register(Vec& v) noexcept { asm("" : "+x"(v)); }
#else
// Portable build (STREAMKNN_CPU_ISA=portable): the same operations on GCC/Clang vectors. The
// multiply-add is fused lane by lane where the target has a fast fma, else a multiply then an
// add (a target without fma cannot contract them), the same way on every path.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // internal vectors, never passed across units
#endif
typedef float Vec __attribute__((vector_size(32)));
inline Vec vzero() noexcept { return Vec{}; }
inline Vec vload(const float* p) noexcept {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline Vec vsub(Vec a, Vec b) noexcept { return a - b; }
inline Vec vmul(Vec a, Vec b) noexcept { return a * b; }
inline Vec vbroadcast(float x) noexcept { return Vec{} + x; }
inline Vec vmadd(Vec a, Vec b, Vec c) noexcept {
#ifdef __FP_FAST_FMAF
  Vec r;
  for (int l = 0; l < 8; ++l) r[l] = std::fma(a[l], b[l], c[l]);
  return r;
#else
  return a * b + c;
#endif
}
inline Vec vneg(Vec a) noexcept { return -a; }
inline Vec reduce8(const Vec* acc) noexcept {
  Vec r;
  for (int j = 0; j < 8; ++j) {
    const Vec& a = acc[j];
    r[j] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  }
  return r;
}
inline unsigned not_greater(Vec rank, Vec limit) noexcept {
  unsigned m = 0;
  for (int l = 0; l < 8; ++l) m |= unsigned(!(rank[l] > limit[l])) << l;
  return m;
}
template <int kPoints>
inline Vec spread(const float* thresholds) noexcept {
  Vec t;
  for (int l = 0; l < 8; ++l) t[l] = thresholds[std::min(l / kPoints, 8 / kPoints - 1)];
  return t;
}
inline void vstore(float* out, Vec v) noexcept { std::memcpy(out, &v, sizeof v); }
inline void keep_in_register(Vec&) noexcept {}
#endif

/// Ranks of kQueries queries against kPoints rows, row j at row0 + j * row_step floats
/// (kQueries * kPoints <= 8): lane i * kPoints + j holds (query i, row j). Every lane follows
/// the recipe at the top.
template <bool kInnerProduct, int kQueries, int kPoints>
inline Vec pair_ranks(const float* const* queries, const float* row0, std::size_t row_step,
                      std::size_t stride) noexcept {
  static_assert(kQueries * kPoints <= 8);
  Vec acc[8];
  for (auto& a : acc) a = vzero();
  for (std::size_t e = 0; e < stride; e += 8) {
    Vec p[kPoints];
    for (int j = 0; j < kPoints; ++j) p[j] = vload(row0 + j * row_step + e);
    for (int i = 0; i < kQueries; ++i) {
      Vec q = vload(queries[i] + e);
      keep_in_register(q);
      for (int j = 0; j < kPoints; ++j) {
        if constexpr (kInnerProduct) {
          acc[i * kPoints + j] = vmadd(q, p[j], acc[i * kPoints + j]);
        } else {
          const Vec d = vsub(q, p[j]);
          acc[i * kPoints + j] = vmadd(d, d, acc[i * kPoints + j]);
        }
      }
    }
  }
  const Vec r = reduce8(acc);
  return kInnerProduct ? vneg(r) : r;
}

/// Ranks of one query against 8 points held dimension by dimension (column d at
/// columns[d], kDim <= 4): lane l holds point l. Squared L2 is d0*d0, then fma(di, di, r) for
/// each further dimension in order; inner product q0*p0, then fma(qi, pi, r), negated.
template <bool kInnerProduct, int kDim>
inline Vec low_dim_ranks(const Vec* query, const float* const* columns, std::size_t i) noexcept {
  Vec r;
  for (int d = 0; d < kDim; ++d) {
    const Vec p = vload(columns[d] + i);
    if constexpr (kInnerProduct) {
      r = d == 0 ? vmul(query[d], p) : vmadd(query[d], p, r);
    } else {
      const Vec diff = vsub(query[d], p);
      r = d == 0 ? vmul(diff, diff) : vmadd(diff, diff, r);
    }
  }
  return kInnerProduct ? vneg(r) : r;
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
  /// Ranks above this cannot enter (+inf until the heap is full; equal ranks may, by id).
  float limit() const noexcept {
    return heap_.size() < k_ ? std::numeric_limits<float>::infinity() : heap_.front().rank;
  }
  std::vector<Candidate>& items() noexcept { return heap_; }

 private:
  std::size_t k_ = 0;
  std::vector<Candidate> heap_;
};

/// How far ahead the first pass over a tile prefetches each of its row streams (bytes).
constexpr std::size_t kPrefetchBytes = 8192;

inline bool visible_to(const IdRange* visible, std::size_t q, PointId id) noexcept {
  return !visible || (id >= visible[q].begin && id < visible[q].end);
}

/// One task's view: queries [q0, q1) against slots [begin, end), feeding heaps[q - q0].
/// limits[q - q0] mirrors heaps[q - q0].limit() (padded by 8 for the vector loads).
template <bool kInnerProduct>
class Scanner {
 public:
  Scanner(const CpuSearchInput& in, std::size_t q0, std::size_t q1, TopK* heaps)
      : in_(in), store_(*in.store), stride_(store_.stride()), q0_(q0), q1_(q1), heaps_(heaps),
        limits_(q1 - q0 + 8, std::numeric_limits<float>::infinity()) {}

  void scan(std::size_t begin, std::size_t end) {
    if (stride_ <= 4) return scan_low_dim(begin, end);
    // Up to 4 queries pass over the slots once. More share point tiles of about 32 KiB, which
    // stay in cache while every group of 4 passes over them; the first group fetches the tile
    // from memory and prefetches ahead.
    const bool single_pass = q1_ - q0_ <= 4;
    const std::size_t tile = single_pass ? end - begin : std::clamp<std::size_t>(8192 / stride_, 16, 1024);
    for (std::size_t t0 = begin; t0 < end; t0 += tile) {
      const std::size_t t1 = std::min(end, t0 + tile);
      bool prefetch = !single_pass;
      std::size_t q = q0_;
      for (; q + 4 <= q1_; q += 4, prefetch = false) rows<4, 2>(q, 4, t0, t1, prefetch);
      switch (q1_ - q) {
        case 3: rows<4, 2>(q, 3, t0, t1, prefetch); break;  // the 4th query lanes are masked off
        case 2: rows<2, 4>(q, 2, t0, t1, prefetch); break;
        case 1: rows<1, 4>(q, 1, t0, t1, prefetch); break;
        default: break;
      }
    }
  }

 private:
  /// Queries [q, q + used) (used <= kQueries; the spare lanes repeat the last query and are
  /// ignored) against rows [t0, t1). The kPoints rows of one kernel call come from kPoints
  /// equal parts of the range, so that each part is read in order: kPoints sequential streams,
  /// which the hardware prefetcher follows (adjacent rows read interleaved get half the memory
  /// bandwidth here). Rows left over by the split go one at a time.
  template <int kQueries, int kPoints>
  void rows(std::size_t q, std::size_t used, std::size_t t0, std::size_t t1, bool prefetch) {
    const float* qs[kQueries];
    for (std::size_t i = 0; i < kQueries; ++i) qs[i] = in_.queries + (q + std::min(i, used - 1)) * stride_;
    const float* limits = limits_.data() + (q - q0_);
    const unsigned lanes = (1u << (used * kPoints)) - 1;
    const std::size_t part = (t1 - t0) / kPoints, step = part * stride_;
    for (std::size_t s = t0; s < t0 + part; ++s) {
      if (prefetch && (s - t0) % 16 == 0) {
        for (int j = 0; j < kPoints; ++j) {
          const char* ahead = reinterpret_cast<const char*>(store_.row(s) + j * step) + kPrefetchBytes;
          for (std::size_t b = 0; b < 16 * stride_ * sizeof(float); b += 64) __builtin_prefetch(ahead + b, 0, 1);
        }
      }
      const Vec r = pair_ranks<kInnerProduct, kQueries, kPoints>(qs, store_.row(s), step, stride_);
      const unsigned hits = not_greater(r, spread<kPoints>(limits)) & lanes;
      if (hits) offer_lanes<kPoints>(r, hits, q, s, part);
    }
    const unsigned single_lanes = (1u << used) - 1;
    for (std::size_t s = t0 + kPoints * part; s < t1; ++s) {
      const Vec r = pair_ranks<kInnerProduct, kQueries, 1>(qs, store_.row(s), 0, stride_);
      const unsigned hits = not_greater(r, spread<1>(limits)) & single_lanes;
      if (hits) offer_lanes<1>(r, hits, q, s, 0);
    }
  }

  /// Lane l holds (query q + l / kPoints, slot s + (l % kPoints) * part).
  template <int kPoints>
  void offer_lanes(Vec r, unsigned hits, std::size_t q, std::size_t s, std::size_t part) {
    alignas(32) float rank[8];
    vstore(rank, r);
    for (; hits; hits &= hits - 1) {
      const int lane = __builtin_ctz(hits);
      offer(q + std::size_t(lane / kPoints), s + std::size_t(lane % kPoints) * part, rank[lane]);
    }
  }

  void offer(std::size_t q, std::size_t slot, float rank) {
    const PointId id = store_.id(slot);
    if (id == kInvalidId) return;  // free slot
    TopK& heap = heaps_[q - q0_];
    if (heap.admits(rank, id) && visible_to(in_.visible, q, id)) {
      heap.push(rank, static_cast<std::uint32_t>(slot), id);
      limits_[q - q0_] = heap.limit();
    }
  }

  /// Up to 4 stored dimensions, rows unpadded: each tile of slots is copied column by column
  /// (dimension by dimension) so that 8 points take one vector per dimension, then every query
  /// of the block passes over the copy.
  void scan_low_dim(std::size_t begin, std::size_t end) {
    switch (stride_) {
      case 1: return low_dim_tiles<1>(begin, end);
      case 2: return low_dim_tiles<2>(begin, end);
      case 3: return low_dim_tiles<3>(begin, end);
      default: return low_dim_tiles<4>(begin, end);
    }
  }

  template <int kDim>
  void low_dim_tiles(std::size_t begin, std::size_t end) {
    constexpr std::size_t kTile = 1024;
    alignas(32) float columns[kDim][kTile];
    const float* column_ptrs[kDim];
    for (int d = 0; d < kDim; ++d) column_ptrs[d] = columns[d];
    for (std::size_t t0 = begin; t0 < end; t0 += kTile) {
      const std::size_t n = std::min(kTile, end - t0), padded = (n + 7) / 8 * 8;
      const float* rows = store_.row(t0);
      for (std::size_t i = 0; i < n; ++i) {
        for (int d = 0; d < kDim; ++d) columns[d][i] = rows[i * kDim + std::size_t(d)];
      }
      for (std::size_t i = n; i < padded; ++i) {
        for (int d = 0; d < kDim; ++d) columns[d][i] = 0;
      }
      for (std::size_t q = q0_; q < q1_; ++q) {
        Vec query[kDim];
        for (int d = 0; d < kDim; ++d) query[d] = vbroadcast(in_.queries[q * kDim + std::size_t(d)]);
        for (std::size_t i = 0; i < padded; i += 8) {
          const Vec r = low_dim_ranks<kInnerProduct, kDim>(query, column_ptrs, i);
          unsigned hits = not_greater(r, vbroadcast(limits_[q - q0_]));
          if (i + 8 > n) hits &= (1u << (n - i)) - 1;  // padding lanes
          if (hits) offer_lanes<8>(r, hits, q, t0 + i, 1);  // lane l: slot t0 + i + l
        }
      }
    }
  }

  const CpuSearchInput& in_;
  const HostStore& store_;
  const std::size_t stride_, q0_, q1_;
  TopK* heaps_;
  std::vector<float> limits_;
};

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
  const std::size_t nq = in.num_queries, k = in.k, slots = in.store->slot_count(), stride = in.store->stride();
  out.assign(nq * k, Candidate{});
  if (nq == 0) return;
  const std::size_t threads = pool.concurrency();
  // Work = (slot chunk) x (query block). A query block (about 64 KiB of queries) shares every
  // pass over the store, so the store is read from memory once per block; the slots are split
  // between threads unless there are enough blocks to keep every thread busy, and the per-chunk
  // top-k lists are merged. The split changes no rank (see the recipe above), only who finds it.
  const std::size_t block = std::clamp<std::size_t>(16384 / std::max<std::size_t>(stride, 1) / 4 * 4, 16, 256);
  const std::size_t query_blocks = (nq + block - 1) / block;
  constexpr std::size_t kMinChunk = 4096;
  const std::size_t chunks =
      query_blocks >= 2 * threads ? 1 : std::clamp<std::size_t>(slots / kMinChunk, 1, threads);
  const std::size_t chunk_len = (slots + chunks - 1) / chunks;
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
    if (in.inner_product) {
      Scanner<true>(in, q0, q1, heaps).scan(begin, end);
    } else {
      Scanner<false>(in, q0, q1, heaps).scan(begin, end);
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
