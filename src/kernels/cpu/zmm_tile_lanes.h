#pragma once
// What the 512-bit tiles of 16 lane sums per output share (float_tiles_zmm_avx512vnni.cpp,
// bf16_dot_tiles_avx512bf16.cpp): a row's first range starts its lanes from zero and a later one from where
// the last left them, and its last range sums them into the output in float_tile_reference's order.
// Only for files compiled with AVX-512 flags.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/float_tiles_zmm.h"

namespace kvserve::avx512zmm {

// One token (decode): the weights stream from memory, and the core's own prefetchers alone left it at ~0.75
// of what a read loop gets (1B-shaped F16 on the Xeon VM: 9.8 tok/s, 12.9-13.4 with the lines 12-64 KiB
// ahead asked into L2, 11.9 with 1 KiB into L1).
constexpr int64_t kDecodeAheadBytes = 16 * 1024;

// Lanes i and i + 8 added, then i and i + 4, i and i + 2, and the last two.
inline float sum_lanes(__m512 v) {
  const __m256 s8 =
      _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// acc[r][t] from output r * T + t's lanes, or zero at a row's start.
template <int R, int T>
[[gnu::always_inline]] inline void start_lanes(int64_t k_begin, const float* lanes, __m512 (&acc)[R][T]) {
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      acc[r][t] = k_begin > 0 ? _mm512_loadu_ps(lanes + (r * T + t) * kFloatTileLanes) : _mm512_setzero_ps();
}

// The lanes stored for the next range, or (with `out`) summed into the outputs.
template <int R, int T>
[[gnu::always_inline]] inline void finish_lanes(const __m512 (&acc)[R][T], float* lanes, float* out) {
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      if (out != nullptr)
        out[r * T + t] = sum_lanes(acc[r][t]);
      else
        _mm512_storeu_ps(lanes + (r * T + t) * kFloatTileLanes, acc[r][t]);
}

}  // namespace kvserve::avx512zmm
