#include <immintrin.h>

// GCC 12 takes _mm512_cvtph_ps's undefined pass-through operand for an uninitialised read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/float_tiles_zmm.h"
#include "kernels/cpu/zmm_tile_lanes.h"

namespace kvserve::avx512zmm {

namespace {

// R weight rows share each activation load, T tokens each weight conversion. Past the last whole 16 values
// the loads are masked: the lanes past the row's end get no FMA, so a row ends the same way in every call.
template <int R, int T, typename Elem, typename Load, typename LoadMasked>
[[gnu::always_inline]] inline void tile(int64_t k_begin, int64_t k_end, const void* const* w_rows,
                                        const void* const* a_rows, float* lanes, float* out, Load load,
                                        LoadMasked load_masked) {
  const Elem* w[R];
  const float* a[T];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const Elem*>(w_rows[r]);
  for (int t = 0; t < T; ++t) a[t] = static_cast<const float*>(a_rows[t]);
  __m512 acc[R][T];
  start_lanes<R, T>(k_begin, lanes, acc);
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
  finish_lanes<R, T>(acc, lanes, out);
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
