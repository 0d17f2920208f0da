// The exact re-rank (rerank.hpp): one block per query. The screened candidates get float64 keys
// and are sorted (bitonic) by the exact (key, id) order of core/exact_rank.hpp; the certificate
// says whether they hold the k best; where it fails, the block streams every stored point whose
// key may be at or below the k-th candidate's through its buffer, keeping the k best. The answers'
// distances are rounded once (exact::report), exactly as the CPU backend rounds them.
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/rerank.hpp"
#include "core/exact_rank.hpp"

namespace streamknn::detail::gpu {

namespace {

std::size_t g_rerank_optin = 48 * 1024;  // set once per device by configure_rerank (host only)

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

struct Query {
  const StoreView* s;
  const float* q;
  std::uint32_t n;
  bool ip;

  __device__ RerankEntry entry(std::uint32_t slot, std::uint64_t id) const {
    const exact::Key k = exact::float64_key(q, DevicePoint{s, slot}, n, ip);
    return RerankEntry{k.key, __double2float_ru(k.err), slot, id};
  }
  __device__ static exact::Key key(const RerankEntry& e) { return exact::Key{e.key, double(e.err)}; }
  /// The (exact key, id) order; padding (id kNoId) last.
  __device__ bool less(const RerankEntry& a, const RerankEntry& b) const {
    if (a.id == kNoId) return false;
    if (b.id == kNoId) return true;
    return exact::exact_less(q, key(a), a.id, DevicePoint{s, a.slot}, key(b), b.id, DevicePoint{s, b.slot}, n, ip);
  }
};

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

/// The fallback: every visible stored point whose key may lie at or below `bound`, streamed
/// through buf (capacity entries, at least k + blockDim), keeping the k best. Returns the count.
__device__ std::uint32_t answer_from_store(const Query& qr, const RerankParams& p, RerankEntry* buf,
                                           std::uint32_t capacity, double bound, const IdRangeDevice* range) {
  __shared__ std::uint32_t count;
  __shared__ double limit;
  if (threadIdx.x == 0) {
    count = 0;
    limit = bound;
  }
  __syncthreads();
  const StoreView& s = *p.store;
  for (std::uint32_t base = 0; base < s.slot_count; base += blockDim.x) {
    const std::uint32_t slot = base + threadIdx.x;
    if (slot < s.slot_count && s.valid[slot]) {
      const std::uint64_t id = s.ids[slot];
      if (!range || (id >= range->begin && id < range->end)) {
        const RerankEntry e = qr.entry(slot, id);
        if (e.key - double(e.err) <= limit) buf[atomicAdd(&count, 1u)] = e;
      }
    }
    __syncthreads();
    const std::uint32_t held = count;
    if (held > capacity - blockDim.x) {
      sort_entries(qr, buf, held);
      if (threadIdx.x == 0) {
        count = held < p.k ? held : p.k;
        if (held >= p.k) limit = upper(Query::key(buf[p.k - 1]));
      }
    }
    __syncthreads();
  }
  const std::uint32_t held = count;
  sort_entries(qr, buf, held);
  return held;
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
    const std::uint64_t id = p.screen_id[std::size_t(q) * p.width + j];
    buf[j] = id == kNoId ? RerankEntry{0, 0, 0, kNoId} : qr.entry(p.screen_slot[std::size_t(q) * p.width + j], id);
    valid += id != kNoId;
  }
  __shared__ std::uint32_t listed;
  __shared__ int certified;
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();
  if (valid) atomicAdd(&listed, valid);
  __syncthreads();
  const std::uint32_t m = listed;
  sort_entries(qr, buf, m);  // the padding entries sort last

  // A short list, or a width covering every slot, holds every visible point.
  const bool exhaustive = m < p.width || p.width >= p.store->slot_count;
  if (threadIdx.x == 0) {
    certified = 1;
    if (!exhaustive) {
      certified = 0;
      if (p.width > p.k) {
        const exact::Key kth = Query::key(buf[p.k - 1]), far = Query::key(buf[m - 1]);
        double far_mag = 0, outside_mag = 0;
        if (ip) {
          const DevicePoint fp{p.store, buf[m - 1].slot};
          double qn = 0;
          for (std::uint32_t i = 0; i < p.stored_dim; ++i) {
            far_mag = exact::fma64(fabs(double(qr.q[i])), fabs(double(fp(i))), far_mag);
            qn = exact::fma64(double(qr.q[i]), double(qr.q[i]), qn);
          }
          outside_mag = sqrt(qn) * (1.0 + 0x1p-40) * p.store->max_norm;
        }
        certified = exact::screen_certified(kth, far, far_mag, outside_mag, exact::screen_bound(p.stored_dim), ip);
      }
    }
  }
  __syncthreads();
  std::uint32_t found = m;
  if (!certified) found = answer_from_store(qr, p, buf, capacity, upper(Query::key(buf[p.k - 1])), range);

  const std::size_t row = std::size_t(q) * p.k;
  for (std::uint32_t j = threadIdx.x; j < p.k; j += blockDim.x) {
    if (j < found) {
      const RerankEntry e = buf[j];
      const DevicePoint point{p.store, e.slot};
      p.out_distance[row + j] =
          exact::report(p.metric, Query::key(e), exact::ExactMinus<DevicePoint>{qr.q, &point, p.stored_dim, ip});
      p.out_id[row + j] = e.id;
      p.out_slot[row + j] = e.slot;
    } else {
      p.out_distance[row + j] = __int_as_float(0x7f800000);
      p.out_id[row + j] = kNoId;
      p.out_slot[row + j] = 0;
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

void configure_rerank(std::size_t optin) {
  // The dynamic share is what the opt-in limit leaves beside the kernel's static shared memory.
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, rerank_kernel), "cudaFuncGetAttributes(rerank_kernel)");
  const std::size_t dynamic_limit = optin > attributes.sharedSizeBytes ? optin - attributes.sharedSizeBytes : 0;
  g_rerank_optin = dynamic_limit;
  check_cuda(cudaFuncSetAttribute(rerank_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_limit)),
             "cudaFuncSetAttribute(rerank_kernel)");
}

bool rerank_fits_shared(std::uint32_t width, std::uint32_t k) { return rerank_shared_bytes(width, k) <= g_rerank_optin; }

void launch_rerank(const RerankParams& p, cudaStream_t stream) {
  if (p.num_queries == 0) return;
  const std::uint32_t capacity = rerank_capacity(p.width, p.k);
  const std::size_t shared = p.global_buffer ? 0 : rerank_shared_bytes(p.width, p.k);
  launch_chained("rerank_kernel", rerank_kernel, p.num_queries, kRerankThreads, shared, stream, p, capacity);
}

}  // namespace streamknn::detail::gpu
