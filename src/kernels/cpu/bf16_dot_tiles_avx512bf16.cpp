#include <immintrin.h>

// GCC 12 takes the undefined pass-through operand of _mm512_extractf64x4_pd for an uninitialised read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/bf16_dot_tiles_zmm.h"
#include "kernels/cpu/zmm_tile_lanes.h"

namespace kvserve::avx512zmm {

namespace {

// A vector cast: the same 64 bytes read as 32 BF16 values.
__m512bh as_bf16(__m512i v) { return (__m512bh)v; }

// R weight rows share each activation load, T tokens each weight load. Past the last whole 32 values the
// loads are masked to zero, so the last step adds zero products: the same in every call.
template <int R, int T>
void tile(int64_t k_begin, int64_t k_end, const void* const* w_rows, const void* const* a_rows, float* lanes,
          float* out) {
  const uint16_t* w[R];
  const uint16_t* a[T];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint16_t*>(w_rows[r]);
  for (int t = 0; t < T; ++t) a[t] = static_cast<const uint16_t*>(a_rows[t]);
  __m512 acc[R][T];
  start_lanes<R, T>(k_begin, lanes, acc);
  int64_t k = k_begin;
  for (; k + kBf16DotStep <= k_end; k += kBf16DotStep) {
    if constexpr (T == 1)
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kDecodeAheadBytes, _MM_HINT_T1);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = as_bf16(_mm512_loadu_si512(w[r] + k));
    for (int t = 0; t < T; ++t) {
      const __m512bh av = as_bf16(_mm512_loadu_si512(a[t] + k));
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], av);
    }
  }
  if (k < k_end) {
    const auto mask = static_cast<__mmask32>((uint64_t{1} << (k_end - k)) - 1u);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = as_bf16(_mm512_maskz_loadu_epi16(mask, w[r] + k));
    for (int t = 0; t < T; ++t) {
      const __m512bh av = as_bf16(_mm512_maskz_loadu_epi16(mask, a[t] + k));
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], av);
    }
  }
  finish_lanes<R, T>(acc, lanes, out);
}

using TileFn = void (*)(int64_t, int64_t, const void* const*, const void* const*, float*, float*);

// Every n_rows x n_tok instance, at (n_rows - 1) * kMaxFloatTileTokens + n_tok - 1.
#define KVSERVE_BF16_DOT_ROW(R) tile<R, 1>, tile<R, 2>, tile<R, 3>, tile<R, 4>, tile<R, 5>, tile<R, 6>
static_assert(kMaxFloatTileRows == 4 && kMaxFloatTileTokens == 6, "the table lists 4 x 6 tiles");
constexpr TileFn kTiles[] = {KVSERVE_BF16_DOT_ROW(1), KVSERVE_BF16_DOT_ROW(2), KVSERVE_BF16_DOT_ROW(3),
                             KVSERVE_BF16_DOT_ROW(4)};
#undef KVSERVE_BF16_DOT_ROW

}  // namespace

void accumulate_bf16_dot_tiles(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows, const void* const* a,
                               int n_tok, float* lanes, float* out) {
  kTiles[(n_rows - 1) * kMaxFloatTileTokens + (n_tok - 1)](k_begin, k_end, w, a, lanes, out);
}

}  // namespace kvserve::avx512zmm
