// The exact re-rank (rerank.hpp): one block per query. The screened candidates get float64 keys
// (from rerank_keys_kernel on wide stores, else in the block) and are ordered by the exact
// (key, id) order of core/exact_rank.hpp (by counting where a thread holds each, else a
// bitonic sort); the certificate says whether they hold the k best. Where it fails, the block
// passes over the store and gathers every point whose key may lie at or below the k-th
// candidate's (answer_from_store: a pivot narrows the passes where they do not fit its buffer).
// The answers' distances are rounded once (exact::report), exactly as the CPU backend rounds them.
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/rerank.hpp"
#include "core/exact_rank.hpp"

namespace streamknn::detail::gpu {

namespace {

/// Coordinate i of a stored slot in the device layout (device_types.hpp).
struct DevicePoint {
  const StoreView* s;
  std::uint32_t slot;
  __device__ float operator()(std::uint32_t i) const {
    if (s->chunk_floats == 2) {
      const float2 v = reinterpret_cast<const float2*>(s->vectors)[slot];
      return i == 0 ? v.x : v.y;
    }
    const float4 v = reinterpret_cast<const float4*>(
        s->vectors)[(std::size_t(slot / kTile) * s->chunks + i / 4) * kTile + slot % kTile];
    const std::uint32_t e = i % 4;
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
  }
};

/// A pair's float64 key terms over the chunks part, part + step, ... of a stored slot: squared
/// L2 (mag = the sum itself) or -<q, p> (mag = sum |q_i p_i|), fused multiply-adds in dimension
/// order within the share. Padding elements are zero in both vectors, so they add nothing.
struct KeySums {
  double acc = 0, mag = 0;
};
__device__ KeySums key_sums(const StoreView& s, const float* q, std::uint32_t slot, bool ip, std::uint32_t part,
                            std::uint32_t step) {
  KeySums k;
  const auto add = [&](float qi, float pi) {
    const double a = qi, b = pi;
    if (ip) {
      k.acc = exact::fma64(a, b, k.acc);
      k.mag = exact::fma64(fabs(a), fabs(b), k.mag);
    } else {
      const double d = a - b;
      k.acc = exact::fma64(d, d, k.acc);
    }
  };
  if (s.chunk_floats == 2) {
    if (part == 0) {
      const float2 v = reinterpret_cast<const float2*>(s.vectors)[slot];
      add(q[0], v.x);
      add(q[1], v.y);
    }
  } else {
    const float4* row = reinterpret_cast<const float4*>(s.vectors) + std::size_t(slot / kTile) * s.chunks * kTile +
                        slot % kTile;
    for (std::uint32_t c = part; c < s.chunks; c += step) {
      const float4 v = row[std::size_t(c) * kTile];
      add(q[4 * c], v.x);
      add(q[4 * c + 1], v.y);
      add(q[4 * c + 2], v.z);
      add(q[4 * c + 3], v.w);
    }
  }
  return k;
}

/// The entry of a pair from its summed key terms (E1 of docs/cuda.md: err = (2n + 8) 2^-53 times
/// the key or sum |q_i p_i|, whatever the order of the sums, since each term is still rounded at
/// most n + 2 times).
__device__ RerankEntry make_entry(KeySums k, bool ip, std::uint32_t n, std::uint32_t slot, std::uint64_t id) {
  if (!ip) k.mag = k.acc;
  const double err = k.mag * (double(2 * n + 8) * 0x1p-53);
  return RerankEntry{ip ? -k.acc : k.acc, __double2float_ru(err), slot, id};
}

struct Query {
  const StoreView* s;
  const float* q;
  std::uint32_t n;
  bool ip;

  __device__ RerankEntry entry(std::uint32_t slot, std::uint64_t id) const {
    return make_entry(key_sums(*s, q, slot, ip, 0, 1), ip, n, slot, id);
  }
  __device__ static exact::Key key(const RerankEntry& e) { return exact::Key{e.key, double(e.err)}; }
  /// The (exact key, id) order; padding (id kNoId) last.
  __device__ bool less(const RerankEntry& a, const RerankEntry& b) const;
};

/// The (exact key, id) order of two entries, out of line: the exact sum's code and registers
/// stay out of the loops that call it, which mostly decide by the float64 intervals first.
__device__ __noinline__ bool exact_entry_less(const Query& qr, const RerankEntry& a, const RerankEntry& b) {
  return exact::exact_less(qr.q, Query::key(a), a.id, DevicePoint{qr.s, a.slot}, Query::key(b), b.id,
                           DevicePoint{qr.s, b.slot}, qr.n, qr.ip);
}

__device__ bool Query::less(const RerankEntry& a, const RerankEntry& b) const {
  if (a.id == kNoId) return false;
  if (b.id == kNoId) return true;
  const double a_hi = a.key + double(a.err), b_lo = b.key - double(b.err);
  if (a_hi < b_lo) return true;  // exact_less's own first test, inline
  return exact_entry_less(*this, a, b);
}

/// sign(exact key - m) of a pair, out of line (report's rare exact rounding).
struct OutOfLineMinus {
  const float* q;
  const StoreView* s;
  std::uint32_t slot, n;
  bool ip;
  __device__ int operator()(double m) const;
};
__device__ __noinline__ int exact_minus_of(const float* q, const StoreView* s, std::uint32_t slot, std::uint32_t n,
                                           bool ip, double m) {
  const DevicePoint point{s, slot};
  return exact::ExactMinus<DevicePoint>{q, &point, n, ip}(m);
}
__device__ int OutOfLineMinus::operator()(double m) const { return exact_minus_of(q, s, slot, n, ip, m); }

__device__ double upper(const exact::Key& k) {
  const double hi = k.key + k.err;
  return hi + fabs(hi) * 0x1p-50;
}

/// Bitonic sort of buf[0, count) by Query::less (count <= capacity, a power of two; the entries
/// from count up to the next power of two are set to padding first). Every thread calls it.
__device__ void sort_entries(const Query& qr, RerankEntry* buf, std::uint32_t count) {
  const std::uint32_t size = ceil_pow2(count > 0 ? count : 1);
  for (std::uint32_t i = count + threadIdx.x; i < size; i += blockDim.x) buf[i] = RerankEntry{0, 0, 0, kNoId};
  __syncthreads();
  for (std::uint32_t span = 2; span <= size; span <<= 1) {
    for (std::uint32_t stride = span / 2; stride > 0; stride >>= 1) {
      for (std::uint32_t i = threadIdx.x; i < size; i += blockDim.x) {
        const std::uint32_t j = i ^ stride;
        if (j <= i) continue;
        const bool ascending = (i & span) == 0;
        const RerankEntry a = buf[i], b = buf[j];
        if (ascending ? qr.less(b, a) : qr.less(a, b)) {
          buf[i] = b;
          buf[j] = a;
        }
      }
      __syncthreads();
    }
  }
}

/// Slots per thread in each pass of the fallback's streams: their loads are in flight together
/// (one block streams the whole store, so its bytes in flight set the pace).
constexpr int kFallbackSlots = 8;

/// Float32 squared-L2 ranks of the slots first + u * stride (u < U) into rank[u], where `screened`
/// (else left as they are); slots past the store are left too. Any summation order will do: E3 of
/// docs/cuda.md bounds every order's error alike.
template <int U>
__device__ void fallback_ranks(const StoreView& s, const float* q, std::uint32_t first, std::uint32_t stride,
                               bool screened, float (&rank)[U]) {
  if (!screened) return;
  if (s.chunk_floats == 2) {
    const float q0 = q[0], q1 = q[1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::uint32_t slot = first + u * stride;
      if (slot >= s.slot_count) continue;
      const float2 v = reinterpret_cast<const float2*>(s.vectors)[slot];
      const float d0 = q0 - v.x, d1 = q1 - v.y;
      rank[u] = __fmaf_rn(d1, d1, __fmul_rn(d0, d0));
    }
    return;
  }
  const float4* vectors = reinterpret_cast<const float4*>(s.vectors);
#pragma unroll
  for (int u = 0; u < U; ++u) rank[u] = 0.0f;
  // Two chunks a step: each slot's loads of both are in flight at once. H200, K = 64, every point
  // stored 100 times: 1,275,219 x 128 31.7 -> 20.0 ms a query, 100,000 x 128 4.7 -> 4.0 ms; four
  // chunks a step spilled registers and took 1.1-1.3x the time of one.
#pragma unroll 2
  for (std::uint32_t c = 0; c < s.chunks; ++c) {
    const float4 qc = make_float4(q[4 * c], q[4 * c + 1], q[4 * c + 2], q[4 * c + 3]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::uint32_t slot = first + u * stride;
      if (slot >= s.slot_count) continue;
      const float4 v = vectors[(std::size_t(slot / kTile) * s.chunks + c) * kTile + slot % kTile];
      const float dx = qc.x - v.x, dy = qc.y - v.y, dz = qc.z - v.z, dw = qc.w - v.w;
      rank[u] = __fmaf_rn(dw, dw, __fmaf_rn(dz, dz, __fmaf_rn(dy, dy, __fmaf_rn(dx, dx, rank[u]))));
    }
  }
}

/// The entry of a stored slot where it is visible to the query (in its id range and passing its
/// predicate, where the search is filtered per query: range and predicate both set, or neither;
/// passing the mask, where one predicate filters every query) and may rank at or before `pivot`
/// (an upper bound `bound` on its key where the pivot is padding); else an entry of id kNoId.
__device__ RerankEntry fallback_entry(const Query& qr, const PredicateDevice* mask, std::uint32_t slot, double bound,
                                      const RerankEntry& pivot, const IdRangeDevice* range,
                                      const PredicateDevice* predicate) {
  constexpr RerankEntry kNone{0, 0, 0, kNoId};
  const StoreView& s = *qr.s;
  if (!s.valid[slot]) return kNone;
  const std::uint64_t id = s.ids[slot];
  const bool admitted = range ? filter_admits(*range, *predicate, s, slot, id) : !mask || attributes_pass(*mask, s, slot);
  if (!admitted) return kNone;
  const RerankEntry e = qr.entry(slot, id);
  if (e.key - double(e.err) > bound) return kNone;
  return pivot.id != kNoId && qr.less(pivot, e) ? kNone : e;
}

/// One pass of the fallback over the store, without barriers: every point fallback_entry admits
/// appended to buf while it has room (capacity entries). Returns how many there were, or more
/// than capacity where they do not fit (the pass then stops early). Points whose float32 rank
/// proves their key beyond `bound` (E3; not for the inner product) get no float64 key. Out of
/// line: its loads and ranks stay out of rerank_kernel's registers, which the searches that need
/// no fallback run on. Its arguments are values, not the kernel's parameters by reference: a
/// pointer to those would make every block copy them to its stack (1,000,000 x 2 stores, 1,024
/// queries: 1.26x the search).
__device__ __noinline__ std::uint32_t gather_within(Query qr, const PredicateDevice* mask, RerankEntry* buf,
                                                   std::uint32_t capacity, double bound, RerankEntry pivot,
                                                   const IdRangeDevice* range, const PredicateDevice* predicate) {
  __shared__ std::uint32_t count;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  const StoreView& s = *qr.s;
  const float within = exact::screen_rank_limit(bound, 0.0, qr.n, qr.ip);
  const bool screened = within < __int_as_float(0x7f800000);
  const volatile std::uint32_t& seen = count;
  for (std::uint32_t base = 0; base < s.slot_count; base += kFallbackSlots * blockDim.x) {
    if (seen > capacity) break;  // the caller narrows the pivot and passes again
    float rank[kFallbackSlots];
    fallback_ranks(s, qr.q, base + threadIdx.x, blockDim.x, screened, rank);
    unsigned passed = 0;  // bit u: slot u may lie within the bound
#pragma unroll
    for (int u = 0; u < kFallbackSlots; ++u) {
      const std::uint32_t slot = base + u * blockDim.x + threadIdx.x;
      if (slot < s.slot_count && !(screened && rank[u] > within)) passed |= 1u << u;
    }
    while (passed) {
      const std::uint32_t slot = base + (__ffs(passed) - 1) * blockDim.x + threadIdx.x;
      passed &= passed - 1;
      const RerankEntry e = fallback_entry(qr, mask, slot, bound, pivot, range, predicate);
      if (e.id == kNoId) continue;
      const std::uint32_t at = atomicAdd(&count, 1u);
      if (at < capacity) buf[at] = e;
    }
  }
  __syncthreads();
  return count;
}

/// The fallback (E5 of docs/cuda.md): the k best stored points visible to the query, sorted into
/// buf (capacity entries, more than k); returns their count (at most capacity). `bound` is the
/// upper bound of the screened list's k-th key: the k best lie within it. Where more points than
/// the buffer holds lie within (ties wider than it at the k-th place), the k-th of those it holds
/// becomes a pivot in the exact order: the k best rank at or before it (it has k points at or
/// before it), and the next pass keeps only those. Each pivot ranks strictly before the last (the
/// k-th of more than k distinct entries at or before it), so each pass keeps fewer points and the
/// passes end.
__device__ std::uint32_t answer_from_store(const Query& qr, const RerankParams& p, RerankEntry* buf,
                                           std::uint32_t capacity, double bound, const IdRangeDevice* range,
                                           const PredicateDevice* predicate) {
  RerankEntry pivot{0, 0, 0, kNoId};
  for (;;) {
    const std::uint32_t held = gather_within(qr, p.mask, buf, capacity, bound, pivot, range, predicate);
    sort_entries(qr, buf, held < capacity ? held : capacity);
    if (held <= capacity) return held;
    pivot = buf[p.k - 1];
    bound = upper(Query::key(pivot));
    __syncthreads();  // every thread has its pivot before the next pass writes buf
  }
}

/// Orders buf[0, count) (count <= blockDim.x) by Query::less, padding last in its list order:
/// each thread counts the entries before its own. The float64 intervals [key - err, key + err]
/// (padding: +inf) decide every pair they separate in one pass over `bounds`; only a thread whose
/// entry overlaps another's takes the exact order for those pairs. Every thread calls it.
__device__ void rank_entries(const Query& qr, RerankEntry* buf, std::uint32_t count) {
  __shared__ double2 bounds[kRerankThreads];
  const std::uint32_t i = threadIdx.x;
  RerankEntry mine{0, 0, 0, kNoId};
  double2 own{__longlong_as_double(0x7ff0000000000000LL), __longlong_as_double(0x7ff0000000000000LL)};
  if (i < count) {
    mine = buf[i];
    if (mine.id != kNoId) own = double2{mine.key - double(mine.err), mine.key + double(mine.err)};
    bounds[i] = own;
  }
  __syncthreads();
  std::uint32_t before = 0;
  bool overlaps = false;
  if (i < count) {
#pragma unroll 8
    for (std::uint32_t j = 0; j < count; ++j) {
      const double2 other = bounds[j];
      const bool below = other.y < own.x;
      before += below;
      overlaps |= !below && !(own.y < other.x) && j != i;
    }
  }
  if (overlaps) {  // exact ties, duplicates, padding among padding: the exact order for those pairs
    const bool padding = mine.id == kNoId;
    for (std::uint32_t j = 0; j < count; ++j) {
      const double2 other = bounds[j];
      if (j == i || other.y < own.x || own.y < other.x) continue;
      const RerankEntry e = buf[j];
      before += e.id == kNoId ? padding && j < i : padding || qr.less(e, mine);
    }
  }
  __syncthreads();
  if (i < count) buf[before] = mine;
  __syncthreads();
}

/// The block's sum of q_i^2 over the stored dimension (thread 0 gets it).
__device__ double query_square_norm(const float* q, std::uint32_t n) {
  __shared__ double partial[kRerankThreads / 32];
  double s = 0;
  for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) s = exact::fma64(double(q[i]), double(q[i]), s);
  for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(kFullMask, s, d);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0) {
    for (std::uint32_t w = 0; w < blockDim.x / 32; ++w) total += partial[w];
  }
  return total;
}

/// Whether the sorted list buf[0, m) (m = width, a full list) holds the k best of query q: E4 of
/// docs/cuda.md, or E7 after the reduced-precision screen. Thread 0 decides; `qn` is its
/// query_square_norm (inner product only).
__device__ bool list_certified(const RerankParams& p, std::uint32_t q, const RerankEntry* buf, std::uint32_t m,
                               double qn) {
  const bool ip = p.metric == exact::kInnerProduct;
  if (p.width <= p.k) return false;
  const exact::Key kth = Query::key(buf[p.k - 1]), far = Query::key(buf[m - 1]);
  if (p.screen_floor) {
    // Every point the screen left out has a lower bound at or above the width-th one: the k-th
    // exact rank strictly below it (the distance squared for L2 and cosine) leaves none of them
    // a place among the k best, ties by id included.
    const double floor = p.screen_floor[std::size_t(q) * p.width + p.width - 1];
    if (ip) return upper(kth) < floor;
    return floor > 0 && upper(kth) < floor * floor;
  }
  double far_mag = 0, outside_mag = 0;
  if (ip) {
    // err >= sum |q_i p_i| (2n + 8) 2^-53 (make_entry), so this bounds the far point's magnitude.
    far_mag = far.err / (double(2 * p.stored_dim + 8) * 0x1p-53) * (1.0 + 0x1p-50);
    outside_mag = sqrt(qn) * (1.0 + 0x1p-40) * p.store->max_norm;
  }
  return exact::screen_certified(kth, far, far_mag, outside_mag, exact::screen_bound(p.stored_dim), ip);
}

/// Keys of the screened candidates of wide stores: blockIdx.y the query, each candidate summed by
/// `group` threads (a power of two up to 32) over its chunks, then combined by shuffles.
__global__ void __launch_bounds__(kRerankThreads) rerank_keys_kernel(RerankParams p, std::uint32_t group) {
  start_chained_kernel();
  const std::uint32_t q = blockIdx.y;
  const std::uint32_t j = blockIdx.x * (blockDim.x / group) + threadIdx.x / group, part = threadIdx.x % group;
  const bool ip = p.metric == exact::kInnerProduct;
  const std::size_t at = std::size_t(q) * p.width + j;
  const std::uint64_t id = j < p.width ? p.screen_id[at] : kNoId;
  const std::uint32_t slot = id != kNoId ? p.screen_slot[at] : 0;
  KeySums k;
  if (id != kNoId) k = key_sums(*p.store, p.queries + std::size_t(q) * p.query_stride, slot, ip, part, group);
  for (std::uint32_t d = group / 2; d > 0; d >>= 1) {  // every lane of the warp takes part
    k.acc += __shfl_xor_sync(kFullMask, k.acc, int(d));
    k.mag += __shfl_xor_sync(kFullMask, k.mag, int(d));
  }
  if (part == 0 && j < p.width) {
    p.keys[at] = id == kNoId ? RerankEntry{0, 0, 0, kNoId} : make_entry(k, ip, p.stored_dim, slot, id);
  }
}

__global__ void __launch_bounds__(kRerankThreads) rerank_kernel(RerankParams p, std::uint32_t capacity) {
  start_chained_kernel();
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const std::uint32_t q = blockIdx.x;
  RerankEntry* buf = p.global_buffer ? p.global_buffer + std::size_t(q) * capacity
                                     : reinterpret_cast<RerankEntry*>(shared_raw);
  const bool ip = p.metric == exact::kInnerProduct;
  const Query qr{p.store, p.queries + std::size_t(q) * p.query_stride, p.stored_dim, ip};
  const IdRangeDevice* range = p.ranges ? p.ranges + q : nullptr;

  std::uint32_t valid = 0;
  for (std::uint32_t j = threadIdx.x; j < p.width; j += blockDim.x) {
    const std::size_t at = std::size_t(q) * p.width + j;
    if (p.keys) {
      buf[j] = p.keys[at];
    } else {
      const std::uint64_t id = p.screen_id[at];
      buf[j] = id == kNoId ? RerankEntry{0, 0, 0, kNoId} : qr.entry(p.screen_slot[at], id);
    }
    valid += buf[j].id != kNoId;
  }
  __shared__ std::uint32_t listed;
  __shared__ int certified;
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();
  if (valid) atomicAdd(&listed, valid);
  __syncthreads();
  const std::uint32_t m = listed;
  if (p.width <= blockDim.x) {
    rank_entries(qr, buf, p.width);
  } else {
    sort_entries(qr, buf, p.width);  // the padding entries sort last
  }

  // A short list, or a width covering every slot, holds every visible point.
  const bool exhaustive = m < p.width || p.width >= p.store->slot_count;
  const double qn = ip && !exhaustive ? query_square_norm(qr.q, p.stored_dim) : 0.0;
  if (threadIdx.x == 0) certified = exhaustive || list_certified(p, q, buf, m, qn);
  __syncthreads();
  std::uint32_t found = m;
  if (!certified) found = answer_from_store(qr, p, buf, capacity, upper(Query::key(buf[p.k - 1])), range,
                                           range ? p.predicates + q : nullptr);

  const std::size_t row = std::size_t(q) * p.k;
  for (std::uint32_t j = threadIdx.x; j < p.k; j += blockDim.x) {
    if (j < found) {
      const RerankEntry e = buf[j];
      p.out_distance[row + j] =
          exact::report(p.metric, Query::key(e), OutOfLineMinus{qr.q, p.store, e.slot, p.stored_dim, ip});
      p.out_id[row + j] = e.id;
      p.out_slot[row + j] = e.slot;
    } else {
      p.out_distance[row + j] = __int_as_float(0x7f800000);
      p.out_id[row + j] = kNoId;
      p.out_slot[row + j] = ~0u;  // the padding slot the aggregate and KNN-Q kernels skip
    }
  }
  if (p.metric == exact::kHaversine) {  // faithful and non-decreasing (exact_rank.hpp, report)
    __syncthreads();
    if (threadIdx.x == 0) {
      const std::uint32_t n = found < p.k ? found : p.k;
      for (std::uint32_t j = 1; j < n; ++j) {
        if (p.out_distance[row + j] < p.out_distance[row + j - 1]) p.out_distance[row + j] = p.out_distance[row + j - 1];
      }
    }
  }
}

}  // namespace

std::size_t configure_rerank(std::size_t optin) {
  // The dynamic share is what the opt-in limit leaves beside the kernel's static shared memory.
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, rerank_kernel), "cudaFuncGetAttributes(rerank_kernel)");
  const std::size_t dynamic_limit = optin > attributes.sharedSizeBytes ? optin - attributes.sharedSizeBytes : 0;
  check_cuda(cudaFuncSetAttribute(rerank_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_limit)),
             "cudaFuncSetAttribute(rerank_kernel)");
  return dynamic_limit;
}

void launch_rerank_keys(const RerankParams& p, std::uint32_t chunks, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  const std::uint32_t group = rerank_key_group(chunks), per_block = kRerankThreads / group;
  const dim3 grid((p.width + per_block - 1) / per_block, p.num_queries);
  launch_chained("rerank_keys_kernel", rerank_keys_kernel, grid, kRerankThreads, 0, stream, p, group);
}

void launch_rerank(const RerankParams& p, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  const std::uint32_t capacity = rerank_capacity(p.width, p.k);
  const std::size_t shared = p.global_buffer ? 0 : rerank_shared_bytes(p.width, p.k);
  launch_chained("rerank_kernel", rerank_kernel, p.num_queries, kRerankThreads, shared, stream, p, capacity);
}

}  // namespace streamknn::detail::gpu
