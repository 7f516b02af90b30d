#include <immintrin.h>

// GCC 12 takes _mm512_cvtph_ps's undefined pass-through operand for an uninitialised read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/float_tiles_zmm.h"

namespace kvserve::avx512zmm {

namespace {

// One token (decode): the weights stream from memory, and the core's own prefetchers alone left it at ~0.75
// of what a read loop gets (1B-shaped F16 on the Xeon VM: 9.8 tok/s, 12.9-13.4 with the lines 12-64 KiB
// ahead asked into L2, 11.9 with 1 KiB into L1).
constexpr int64_t kDecodeAheadBytes = 16 * 1024;

// R weight rows share each activation load, T tokens each weight conversion. Past the last whole 16 values
// the loads are masked: the lanes past the row's end get no FMA, so a row ends the same way in every call.
float sum_lanes(__m512 v) {
  const __m256 s8 =
      _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

template <int R, int T, typename Elem, typename Load, typename LoadMasked>
[[gnu::always_inline]] inline void tile(int64_t k_begin, int64_t k_end, const void* const* w_rows,
                                        const void* const* a_rows, float* lanes, float* out, Load load,
                                        LoadMasked load_masked) {
  const Elem* w[R];
  const float* a[T];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const Elem*>(w_rows[r]);
  for (int t = 0; t < T; ++t) a[t] = static_cast<const float*>(a_rows[t]);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      acc[r][t] = k_begin > 0 ? _mm512_loadu_ps(lanes + (r * T + t) * kFloatTileLanes) : _mm512_setzero_ps();
  int64_t k = k_begin;
  for (; k + kFloatTileLanes <= k_end; k += kFloatTileLanes) {
    if constexpr (T == 1)
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kDecodeAheadBytes, _MM_HINT_T1);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load(w[r] + k);
    for (int t = 0; t < T; ++t) {
      const __m512 av = _mm512_loadu_ps(a[t] + k);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
    }
  }
  if (k < k_end) {
    const auto mask = static_cast<__mmask16>((1u << (k_end - k)) - 1u);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_masked(mask, w[r] + k);
    for (int t = 0; t < T; ++t) {
      const __m512 av = _mm512_maskz_loadu_ps(mask, a[t] + k);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_mask3_fmadd_ps(wv[r], av, acc[r][t], mask);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      if (out != nullptr)
        out[r * T + t] = sum_lanes(acc[r][t]);
      else
        _mm512_storeu_ps(lanes + (r * T + t) * kFloatTileLanes, acc[r][t]);
}

template <int R, int T>
void tile_f32(int64_t k0, int64_t k1, const void* const* w, const void* const* a, float* lanes, float* out) {
  tile<R, T, float>(
      k0, k1, w, a, lanes, out, [](const float* p) { return _mm512_loadu_ps(p); },
      [](__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); });
}

template <int R, int T>
void tile_f16_wide(int64_t k0, int64_t k1, const void* const* w, const void* const* a, float* lanes, float* out) {
  tile<R, T, uint16_t>(
      k0, k1, w, a, lanes, out,
      [](const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); },
      [](__mmask16 m, const uint16_t* p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); });
}

__m512 widen_bf16(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }

template <int R, int T>
void tile_bf16_wide(int64_t k0, int64_t k1, const void* const* w, const void* const* a, float* lanes, float* out) {
  tile<R, T, uint16_t>(
      k0, k1, w, a, lanes, out,
      [](const uint16_t* p) { return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); },
      [](__mmask16 m, const uint16_t* p) { return widen_bf16(_mm256_maskz_loadu_epi16(m, p)); });
}

using TileFn = void (*)(int64_t, int64_t, const void* const*, const void* const*, float*, float*);

// Every n_rows x n_tok instance, at (n_rows - 1) * kMaxFloatTileTokens + n_tok - 1.
#define KVSERVE_FLOAT_TILE_ROW(name, R)                                                                   \
  tile_##name<R, 1>, tile_##name<R, 2>, tile_##name<R, 3>, tile_##name<R, 4>, tile_##name<R, 5>, \
      tile_##name<R, 6>
#define KVSERVE_FLOAT_TILES(name)                                                                     \
  {KVSERVE_FLOAT_TILE_ROW(name, 1), KVSERVE_FLOAT_TILE_ROW(name, 2), KVSERVE_FLOAT_TILE_ROW(name, 3), \
   KVSERVE_FLOAT_TILE_ROW(name, 4)}
static_assert(kMaxFloatTileRows == 4 && kMaxFloatTileTokens == 6, "the tables list 4 x 6 tiles");
constexpr TileFn kF32[] = KVSERVE_FLOAT_TILES(f32);
constexpr TileFn kF16Wide[] = KVSERVE_FLOAT_TILES(f16_wide);
constexpr TileFn kBF16Wide[] = KVSERVE_FLOAT_TILES(bf16_wide);
#undef KVSERVE_FLOAT_TILES
#undef KVSERVE_FLOAT_TILE_ROW

int tile_index(int n_rows, int n_tok) { return (n_rows - 1) * kMaxFloatTileTokens + (n_tok - 1); }

}  // namespace

void accumulate_float_tiles_f32(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows, const void* const* a,
                                int n_tok, float* lanes, float* out) {
  kF32[tile_index(n_rows, n_tok)](k_begin, k_end, w, a, lanes, out);
}

void accumulate_float_tiles_f16_wide(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows,
                                     const void* const* a, int n_tok, float* lanes, float* out) {
  kF16Wide[tile_index(n_rows, n_tok)](k_begin, k_end, w, a, lanes, out);
}

void accumulate_float_tiles_bf16_wide(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows,
                                      const void* const* a, int n_tok, float* lanes, float* out) {
  kBF16Wide[tile_index(n_rows, n_tok)](k_begin, k_end, w, a, lanes, out);
}

}  // namespace kvserve::avx512zmm
