// The copy of a load's vectors into the buffer the store keeps, with the coordinate test in the
// same pass. Large copies use streaming (non-temporal) stores where the ISA has them: the
// buffer is not read back while it is written, and ordinary stores first read every line they
// write and then evict other data to write it back (refits of 100,000 x 32 float32 rows,
// scikit-learn's NearestNeighbors benchmark: 2.0-2.3 ms against 2.7-3.5 ms with ordinary
// stores, alternating runs on 2 x86-64 cores; docs/python.md has the figures with both halves
// on two threads).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace streamknn::detail {

/// Copies of at least this many bytes stream past the caches; smaller ones stay in them for the
/// reads that follow a small load.
inline constexpr std::size_t kStreamingCopyMinBytes = std::size_t(4) << 20;

/// Whether a copy of `floats` floats in all (one part or several) streams past the caches.
inline bool streaming_pays(std::size_t floats) { return floats * sizeof(float) >= kStreamingCopyMinBytes; }

/// Whether |x| exceeds the float whose bits are `limit` (NaN and +-Inf do: their magnitudes'
/// bits lie above every finite value's), as 0 or 1.
inline std::int32_t beyond_bits(float x, std::int32_t limit) {
  return (std::bit_cast<std::int32_t>(x) & 0x7fffffff) > limit;
}

/// to[i] = float(from[i]) for i < n (a double rounded once, to nearest), and whether every
/// |to[i]| is at most the float whose bits are `limit`. Each float is tested as it is copied;
/// `streaming` (streaming_pays) selects streaming stores where the ISA has them.
template <class T>
bool copy_within(const T* from, float* to, std::size_t n, std::int32_t limit, bool streaming) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  std::int32_t any = 0;
  std::size_t i = 0;
#if defined(__SSE2__)
  if (streaming) {
    for (; i < n && std::uintptr_t(to + i) % 16 != 0; ++i) {  // to a 16-byte boundary
      to[i] = static_cast<float>(from[i]);
      any |= beyond_bits(to[i], limit);
    }
    const __m128i magnitude = _mm_set1_epi32(0x7fffffff), bound = _mm_set1_epi32(limit);
    __m128i flags = _mm_setzero_si128();
    for (; i + 4 <= n; i += 4) {
      __m128 x;
      if constexpr (std::is_same_v<T, float>) {
        x = _mm_loadu_ps(from + i);
      } else {
        x = _mm_movelh_ps(_mm_cvtpd_ps(_mm_loadu_pd(from + i)), _mm_cvtpd_ps(_mm_loadu_pd(from + i + 2)));
      }
      _mm_stream_ps(to + i, x);
      flags = _mm_or_si128(flags, _mm_cmpgt_epi32(_mm_and_si128(_mm_castps_si128(x), magnitude), bound));
    }
    _mm_sfence();  // the streamed lines are visible before the buffer is handed on
    any |= _mm_movemask_epi8(flags) != 0;
  }
#else
  (void)streaming;
#endif
  for (; i < n; ++i) {
    const float x = static_cast<float>(from[i]);
    to[i] = x;
    any |= beyond_bits(x, limit);
  }
  return any == 0;
}

}  // namespace streamknn::detail
