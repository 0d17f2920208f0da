// The CPU search's scan kernels: the 8-float vector layer (AVX2 + FMA, or GCC/Clang vectors in the
// portable build), the one recipe by which every (query, point) rank is computed, the
// register-blocked direct-form kernels, the column kernels for up to 4 stored dimensions, and the
// norm-based screening pass for large squared-L2 batches with its proof, driven by Scanner over
// one task's queries and slots. cpu_search.cpp splits a batch into such tasks and merges them.
#include "cpu/cpu_scan.hpp"

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
inline Vec vadd(Vec a, Vec b) noexcept { return _mm256_add_ps(a, b); }
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
/// limit lane l = thresholds[l / kPoints] (reads up to 8 thresholds).
template <int kPoints>
inline Vec spread(const float* thresholds) noexcept {
  static_assert(kPoints == 1 || kPoints == 2 || kPoints == 4 || kPoints == 8);
  if constexpr (kPoints == 8) {
    return _mm256_broadcast_ss(thresholds);
  } else if constexpr (kPoints == 1) {
    return _mm256_loadu_ps(thresholds);
  } else {
    const Vec t = _mm256_castps128_ps256(_mm_loadu_ps(thresholds));
    if constexpr (kPoints == 4) return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
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
inline Vec vadd(Vec a, Vec b) noexcept { return a + b; }
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

/// Ranks of kQueries queries against kPoints rows, row j at row0 + j * row_step floats:
/// global lane i * kPoints + j holds (query i, row j), lane l of out[l / 8] holds global lane l.
/// Every lane follows the recipe at the top.
template <bool kInnerProduct, int kQueries, int kPoints>
inline void pair_ranks(const float* const* queries, const float* row0, std::size_t row_step, std::size_t stride,
                       Vec* out) noexcept {
  constexpr int kGroups = (kQueries * kPoints + 7) / 8;
  Vec acc[8 * kGroups];
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
  for (int g = 0; g < kGroups; ++g) {
    const Vec r = reduce8(acc + 8 * g);
    out[g] = kInnerProduct ? vneg(r) : r;
  }
}

/// Ranks of one query against 8 points held dimension by dimension (kDim <= 4): lane l holds
/// point l. Squared L2 is d0*d0, then fma(di, di, r) for each further dimension in order;
/// inner product q0*p0, then fma(qi, pi, r), negated.
template <bool kInnerProduct, int kDim>
inline Vec low_dim_ranks(const Vec* query, const Vec* point) noexcept {
  Vec r;
  for (int d = 0; d < kDim; ++d) {
    if constexpr (kInnerProduct) {
      r = d == 0 ? vmul(query[d], point[d]) : vmadd(query[d], point[d], r);
    } else {
      const Vec diff = vsub(query[d], point[d]);
      r = d == 0 ? vmul(diff, diff) : vmadd(diff, diff, r);
    }
  }
  return kInnerProduct ? vneg(r) : r;
}

// ---- the screening pass for large batches (squared L2 only) -----------------------------------
//
// For a block of many queries, each (query q, point p) pair first gets a cheap lower bound X
// on its rank, computed GEMM-style from H = <-2q, p> (one fused multiply-add per element, 16
// points per pair of vectors, no reduction) and the norms:
//     X = fl(fl(P + H) + Q),   P = fl(Np * (1 - c)),   Q = fl(Nq * (1 - c)),   c = (4 D' + 64) u,
// where Np, Nq are |p|^2, |q|^2 computed in float (sequential fma chains), D' the padded
// stride and u = 2^-24. A pair whose X exceeds the query's current heap limit is skipped;
// every other pair gets its exact rank r (the recipe at the top) and goes to the heap as
// before. So the answer is the exact top-k by (r, id), bit-for-bit the same as without the
// screen, provided that X <= r for every pair that is screened:
//
// Claim: if D' <= 2^16 (so D'u <= 2^-8), Np is in [2^-60, 2^60] and Nq <= 2^60, then X <= r.
// Proof. Let d = |q - p|^2 and M = |q|^2 + |p|^2 (exact reals), gamma = D'u / (1 - D'u).
//  (a) Every float operation is fl(x) = x(1 + e) + h with |e| <= u and |h| <= 2^-150 (h only
//      for subnormal results). The ranges keep every coordinate below 2^31 in magnitude, so no
//      value overflows, and M >= 2^-61: fewer than 2^18 operations contribute h terms below
//      2^-132 in all, far under the slack (D' + 42) u M >= 2^-85 left in (d); they are dropped.
//  (b) Sums of D' products by chained fma: |Np - |p|^2| <= gamma |p|^2, |Nq - |q|^2| <= gamma
//      |q|^2, |H + 2<q,p>| <= 2 gamma sum|q_i p_i| <= 2 gamma |q||p| <= gamma M. With
//      S = Np + Nq + H (exact sum of the floats) and d = |q|^2 + |p|^2 - 2<q,p>:
//      |S - d| <= 2 gamma M.
//  (c) In r each term (q_i - p_i)^2 enters as fl(q_i - p_i)^2 (two factors 1 + e), then passes
//      through at most D'/8 fma roundings and 3 tree additions of non-negative values, so
//      r >= (1 - n u) d with n = D'/8 + 5; and d <= 2M. Hence r >= d - 2 n u M
//      >= S - (2 gamma + 2 n u) M, and with M <= (Np + Nq) / (1 - gamma):
//      r >= S - c0 (Np + Nq), c0 = (3 D' + 16) u  (as (2 gamma + 2 n u) / (1 - gamma)
//      <= (2.27 D' + 10.1) u).
//  (d) The test's roundings. P + Q <= (Np + Nq)(1 - c)(1 + u) <= (Np + Nq)(1 - c + u), so
//      A = P + H + Q <= S - (c - u)(Np + Nq). The two additions err by at most
//      u |P + H| + u (1 + u) |P + H + Q| <= 2.01 u (P + |H| + Q) <= 4.2 u (Np + Nq), so
//      X <= S - (c - 5.2 u)(Np + Nq) <= S - c0 (Np + Nq) <= r, as c - 6u = (4 D' + 58) u >= c0.
//                                                                                         QED
// Points outside the range get P = -inf and queries outside it Q = -inf: never skipped.
// In the portable build without fma the multiply and the add round separately: every chain
// has twice the roundings, and c = (8 D' + 64) u covers them the same way.
constexpr float kNormLow = 0x1p-60f, kNormHigh = 0x1p60f;
#if defined(STREAMKNN_CPU_AVX2) || defined(__FP_FAST_FMAF)
constexpr std::size_t kScreenSlack = 4;
#else
constexpr std::size_t kScreenSlack = 8;
#endif
inline float screen_factor(std::size_t stride) noexcept {
  return 1.0f - float(kScreenSlack * stride + 64) * 0x1p-24f;
}

/// Points per panel: a panel holds 16 points dimension by dimension (panel[e * 16 + j]).
constexpr std::size_t kPanel = 16;

/// Copies rows[0..n) (n <= 16, row-major, `stride` floats each) into a panel, zero-filling
/// the missing points. Pure data movement: the values are unchanged.
inline void pack_panel(const float* rows, std::size_t n, std::size_t stride, float* panel) noexcept {
#ifdef STREAMKNN_CPU_AVX2
  if (n == kPanel) {
    for (std::size_t half = 0; half < 2; ++half) {
      const float* r = rows + half * 8 * stride;
      for (std::size_t e = 0; e < stride; e += 8) {
        Vec v[8];
        for (std::size_t j = 0; j < 8; ++j) v[j] = vload(r + j * stride + e);
        const Vec t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
        const Vec t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
        const Vec t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
        const Vec t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
        const Vec u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
        const Vec u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
        const Vec u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
        const Vec u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
        float* out = panel + e * kPanel + half * 8;
        _mm256_store_ps(out + 0 * kPanel, _mm256_permute2f128_ps(u0, u4, 0x20));
        _mm256_store_ps(out + 1 * kPanel, _mm256_permute2f128_ps(u1, u5, 0x20));
        _mm256_store_ps(out + 2 * kPanel, _mm256_permute2f128_ps(u2, u6, 0x20));
        _mm256_store_ps(out + 3 * kPanel, _mm256_permute2f128_ps(u3, u7, 0x20));
        _mm256_store_ps(out + 4 * kPanel, _mm256_permute2f128_ps(u0, u4, 0x31));
        _mm256_store_ps(out + 5 * kPanel, _mm256_permute2f128_ps(u1, u5, 0x31));
        _mm256_store_ps(out + 6 * kPanel, _mm256_permute2f128_ps(u2, u6, 0x31));
        _mm256_store_ps(out + 7 * kPanel, _mm256_permute2f128_ps(u3, u7, 0x31));
      }
    }
    return;
  }
#endif
  for (std::size_t e = 0; e < stride; ++e) {
    for (std::size_t j = 0; j < kPanel; ++j) panel[e * kPanel + j] = j < n ? rows[j * stride + e] : 0.0f;
  }
}

/// P for the 16 points of a panel (see the claim above); lanes >= n are left as they come.
inline void panel_terms(const float* panel, std::size_t stride, float* out) noexcept {
  Vec n0 = vzero(), n1 = vzero();
  for (std::size_t e = 0; e < stride; ++e) {
    const Vec a = vload(panel + e * kPanel), b = vload(panel + e * kPanel + 8);
    n0 = vmadd(a, a, n0);
    n1 = vmadd(b, b, n1);
  }
  alignas(32) float norms[kPanel];
  vstore(norms, n0);
  vstore(norms + 8, n1);
  const float f = screen_factor(stride);
  for (std::size_t j = 0; j < kPanel; ++j) {
    const float n = norms[j];
    out[j] = n >= kNormLow && n <= kNormHigh ? n * f : -std::numeric_limits<float>::infinity();
  }
}

/// acc[2 i + h] lane l = <q2[i], point 8 h + l of the panel>, one fma per element in order of e.
template <int kQueries>
inline void screen_dots(const float* const* q2, const float* panel, std::size_t stride, Vec* acc) noexcept {
  for (int a = 0; a < 2 * kQueries; ++a) acc[a] = vzero();
  for (std::size_t e = 0; e < stride; ++e) {
    const Vec p0 = vload(panel + e * kPanel), p1 = vload(panel + e * kPanel + 8);
    for (int i = 0; i < kQueries; ++i) {
      const Vec b = vbroadcast(q2[i][e]);
      acc[2 * i] = vmadd(b, p0, acc[2 * i]);
      acc[2 * i + 1] = vmadd(b, p1, acc[2 * i + 1]);
    }
  }
}

/// Blocks of at least this many queries (and rows of at least this many floats) take the
/// screening pass when ranking by squared L2.
constexpr std::size_t kScreenMinQueries = 24, kScreenMinStride = 16;

/// How far ahead the first pass over a tile prefetches each of its row streams (bytes).
constexpr std::size_t kPrefetchBytes = 8192;

/// One task's view: queries [q0, q1) against slots [begin, end), feeding heaps[q - q0].
/// limits[q - q0] mirrors heaps[q - q0].limit() (padded by 16 for the vector loads).
template <bool kInnerProduct>
class Scanner {
 public:
  Scanner(const CpuSearchInput& in, std::size_t q0, std::size_t q1, TopK* heaps)
      : in_(in), store_(*in.store), stride_(store_.stride()), q0_(q0), q1_(q1), heaps_(heaps),
        limits_(q1 - q0 + 16, std::numeric_limits<float>::infinity()) {}

  void scan(std::size_t begin, std::size_t end) {
    if (store_.by_column()) return scan_low_dim(begin, end);
    if (!kInnerProduct && q1_ - q0_ >= kScreenMinQueries && stride_ >= kScreenMinStride && stride_ <= 65536) {
      return scan_screened(begin, end);
    }
    // Up to 4 queries pass over the slots once. More share point tiles of about 32 KiB, which
    // stay in cache while every group of 4 passes over them; the first group fetches the tile
    // from memory and prefetches ahead.
    const bool single_pass = q1_ - q0_ <= 4;
    const std::size_t tile = single_pass ? end - begin : std::clamp<std::size_t>(8192 / stride_, 16, 1024);
    for (std::size_t t0 = begin; t0 < end; t0 += tile) {
      const std::size_t t1 = std::min(end, t0 + tile);
      bool prefetch = !single_pass;
      std::size_t q = q0_;
      for (; q + 6 <= q1_; q += 6, prefetch = false) rows<6, 2>(q, 6, t0, t1, prefetch);
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
  /// Many queries, squared L2: the screening pass (see the claim above) over point tiles of
  /// about 32 KiB packed into panels, 6 queries x 16 points per kernel call; the pairs it cannot
  /// rule out get their exact rank.
  void scan_screened(std::size_t begin, std::size_t end) {
    constexpr int kGroup = 6;
    const std::size_t nq = q1_ - q0_;
    const float f = screen_factor(stride_);
    AlignedVector<float> q2(nq * stride_);
    std::vector<float> qterm(nq);
    for (std::size_t q = 0; q < nq; ++q) {
      const float* row = in_.queries + (q0_ + q) * stride_;
      float norm = 0;
      for (std::size_t e = 0; e < stride_; ++e) {
        q2[q * stride_ + e] = -2.0f * row[e];
        norm = std::fma(row[e], row[e], norm);
      }
      qterm[q] = norm <= kNormHigh ? norm * f : -std::numeric_limits<float>::infinity();
    }
    const std::size_t tile = std::clamp<std::size_t>(8192 / stride_ / kPanel * kPanel, kPanel, 512);
    AlignedVector<float> panels(tile * stride_);
    AlignedVector<float> pterm(tile);
    for (std::size_t t0 = begin; t0 < end; t0 += tile) {
      const std::size_t n = std::min(tile, end - t0), count = (n + kPanel - 1) / kPanel;
      for (std::size_t g = 0; g < count; ++g) {
        float* panel = panels.data() + g * kPanel * stride_;
        pack_panel(store_.row(t0 + g * kPanel), std::min(kPanel, n - g * kPanel), stride_, panel);
        panel_terms(panel, stride_, pterm.data() + g * kPanel);
      }
      for (std::size_t q = q0_; q < q1_; q += kGroup) {
        const std::size_t used = std::min<std::size_t>(kGroup, q1_ - q);
        const float* qs[kGroup];
        for (std::size_t i = 0; i < kGroup; ++i) qs[i] = q2.data() + (q - q0_ + std::min(i, used - 1)) * stride_;
        for (std::size_t g = 0; g < count; ++g) {
          Vec acc[2 * kGroup];
          screen_dots<kGroup>(qs, panels.data() + g * kPanel * stride_, stride_, acc);
          const std::size_t first = t0 + g * kPanel, valid = std::min(kPanel, n - g * kPanel);
          const Vec p0 = vload(pterm.data() + g * kPanel), p1 = vload(pterm.data() + g * kPanel + 8);
          for (std::size_t i = 0; i < used; ++i) {
            const Vec qt = vbroadcast(qterm[q - q0_ + i]);
            for (std::size_t h = 0; h < 2; ++h) {
              const Vec x = vadd(vadd(h ? p1 : p0, acc[2 * i + h]), qt);
              unsigned open = not_greater(x, vbroadcast(limits_[q - q0_ + i]));
              if (valid < 8 * (h + 1)) open &= valid <= 8 * h ? 0u : (1u << (valid - 8 * h)) - 1;
              for (; open; open &= open - 1) rank_exactly(q + i, first + 8 * h + std::size_t(__builtin_ctz(open)));
            }
          }
        }
      }
    }
  }

  /// The exact rank of one pair (the recipe at the top), offered to the query's heap.
  void rank_exactly(std::size_t q, std::size_t slot) {
    const PointId id = store_.id(slot);
    if (id == kInvalidId || !in_.admits(q, slot, id)) return;
    const float* qs[1] = {in_.queries + q * stride_};
    Vec r;
    pair_ranks<kInnerProduct, 1, 1>(qs, store_.row(slot), 0, stride_, &r);
    alignas(32) float rank[8];
    vstore(rank, r);
    offer(q, slot, rank[0]);
  }

  /// Queries [q, q + used) (used <= kQueries; the spare lanes repeat the last query and are
  /// ignored) against rows [t0, t1). The kPoints rows of one kernel call come from kPoints
  /// equal parts of the range, so that each part is read in order: kPoints sequential streams,
  /// which the hardware prefetcher follows (adjacent rows read interleaved get half the memory
  /// bandwidth here). Rows left over by the split go one at a time.
  template <int kQueries, int kPoints>
  void rows(std::size_t q, std::size_t used, std::size_t t0, std::size_t t1, bool prefetch) {
    constexpr int kGroups = (kQueries * kPoints + 7) / 8;
    const float* qs[kQueries];
    for (std::size_t i = 0; i < kQueries; ++i) qs[i] = in_.queries + (q + std::min(i, used - 1)) * stride_;
    const float* limits = limits_.data() + (q - q0_);
    const std::size_t part = (t1 - t0) / kPoints, step = part * stride_;
    for (std::size_t s = t0; s < t0 + part; ++s) {
      if (prefetch && (s - t0) % 16 == 0) {
        for (int j = 0; j < kPoints; ++j) {
          const char* ahead = reinterpret_cast<const char*>(store_.row(s) + j * step) + kPrefetchBytes;
          for (std::size_t b = 0; b < 16 * stride_ * sizeof(float); b += 64) __builtin_prefetch(ahead + b, 0, 1);
        }
      }
      Vec r[kGroups];
      pair_ranks<kInnerProduct, kQueries, kPoints>(qs, store_.row(s), step, stride_, r);
      for (int g = 0; g < kGroups; ++g) {
        const unsigned hits = not_greater(r[g], spread<kPoints>(limits + g * (8 / kPoints))) &
                              lane_mask(used * kPoints, g);
        if (hits) offer_lanes<kPoints>(r[g], hits, q + std::size_t(g * (8 / kPoints)), s, part);
      }
    }
    for (std::size_t s = t0 + kPoints * part; s < t1; ++s) {
      constexpr int kSingleGroups = (kQueries + 7) / 8;
      Vec r[kSingleGroups];
      pair_ranks<kInnerProduct, kQueries, 1>(qs, store_.row(s), 0, stride_, r);
      for (int g = 0; g < kSingleGroups; ++g) {
        const unsigned hits = not_greater(r[g], spread<1>(limits + 8 * g)) & lane_mask(used, g);
        if (hits) offer_lanes<1>(r[g], hits, q + std::size_t(8 * g), s, 0);
      }
    }
  }

  /// Bits of the valid lanes of group g when `lanes` global lanes are valid.
  static unsigned lane_mask(std::size_t lanes, int g) noexcept {
    const std::size_t below = std::size_t(8 * g);
    return lanes <= below ? 0u : lanes - below >= 8 ? 0xffu : (1u << (lanes - below)) - 1;
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
    if (heap.admits(rank, id) && in_.admits(q, slot, id)) {
      heap.push(rank, static_cast<std::uint32_t>(slot), id);
      limits_[q - q0_] = heap.limit();
    }
  }

  /// Up to 4 stored dimensions, held column by column: 8 points are one vector per dimension.
  /// Queries pass in groups over tiles of slots that stay in L1 while each group passes.
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
    // Queries per pass: as many as the 16 vector registers hold beside the point vectors.
    constexpr std::size_t kGroup = kDim == 1 ? 8 : kDim == 2 ? 4 : 2;
    constexpr std::size_t kTileSlots = 16384 / (kDim * sizeof(float)) / 8 * 8;  // 16 KiB of columns
    const float* columns[kDim];
    for (int d = 0; d < kDim; ++d) columns[d] = store_.column(std::size_t(d));
    for (std::size_t t0 = begin; t0 < end; t0 += kTileSlots) {
      const std::size_t t1 = std::min(end, t0 + kTileSlots);
      std::size_t q = q0_;
      for (; q + kGroup <= q1_; q += kGroup) low_dim_pass<kDim, kGroup>(columns, q, t0, t1);
      if constexpr (kGroup > 4) {
        if (q + 4 <= q1_) low_dim_pass<kDim, 4>(columns, q, t0, t1), q += 4;
      }
      if constexpr (kGroup > 2) {
        if (q + 2 <= q1_) low_dim_pass<kDim, 2>(columns, q, t0, t1), q += 2;
      }
      if (q < q1_) low_dim_pass<kDim, 1>(columns, q, t0, t1);
    }
  }

  /// Queries [q, q + kQueries) against slots [t0, t1); t0 is a multiple of 8, so every load
  /// stays inside the columns, and lanes at or past t1 are masked off.
  template <int kDim, std::size_t kQueries>
  void low_dim_pass(const float* const* columns, std::size_t q, std::size_t t0, std::size_t t1) {
    Vec query[kQueries][kDim], limit[kQueries];
    for (std::size_t j = 0; j < kQueries; ++j) {
      for (int d = 0; d < kDim; ++d) query[j][d] = vbroadcast(in_.queries[(q + j) * kDim + std::size_t(d)]);
      limit[j] = vbroadcast(limits_[q + j - q0_]);
    }
    for (std::size_t s = t0; s < t1; s += 8) {
      Vec point[kDim];
      for (int d = 0; d < kDim; ++d) point[d] = vload(columns[d] + s);
      Vec rank[kQueries];
      unsigned any = 0;
      for (std::size_t j = 0; j < kQueries; ++j) {
        rank[j] = low_dim_ranks<kInnerProduct, kDim>(query[j], point);
        any |= not_greater(rank[j], limit[j]);
      }
      if (!any) continue;  // the common case once the heaps are full
      const unsigned valid = t1 - s >= 8 ? 0xffu : (1u << (t1 - s)) - 1;
      for (std::size_t j = 0; j < kQueries; ++j) {
        const unsigned hits = not_greater(rank[j], limit[j]) & valid;
        if (!hits) continue;
        offer_lanes<8>(rank[j], hits, q + j, s, 1);  // lane l: slot s + l
        limit[j] = vbroadcast(limits_[q + j - q0_]);
      }
    }
  }

  const CpuSearchInput& in_;
  const HostStore& store_;
  const std::size_t stride_, q0_, q1_;
  TopK* heaps_;
  std::vector<float> limits_;
};

}  // namespace

void scan_slots(const CpuSearchInput& in, std::size_t q0, std::size_t q1, std::size_t begin, std::size_t end,
                TopK* heaps) {
  if (in.inner_product) {
    Scanner<true>(in, q0, q1, heaps).scan(begin, end);
  } else {
    Scanner<false>(in, q0, q1, heaps).scan(begin, end);
  }
}

}  // namespace streamknn::detail
