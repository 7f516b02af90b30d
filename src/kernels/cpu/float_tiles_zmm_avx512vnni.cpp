#include <immintrin.h>

// GCC 12 takes _mm512_castps256_ps512's undefined upper half for an uninitialised read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cmath>
#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/float_tiles_zmm.h"

namespace kvserve::avx512zmm {

namespace {

using avx2_inline::half_to_float;
using avx2_inline::hsum;

// avx2::accumulate_blocks with kFloatAccumulatorSets = 4: block i (8 values) goes to set i % 4 while whole
// groups of 4 blocks last, the blocks after them to set 0, and out = hsum(((set0 + set1) + set2) + set3).
// Here sets 0 and 1 are the low and high halves of acc[0][r][t], sets 2 and 3 those of acc[1][r][t]: a
// group's 32 values are two 16-value halves, lane for lane the 256-bit tile's FMAs. R weight rows share
// each activation load (a tile of one row loads one activation value per multiply-add, and streaming them
// from L2 bounded it), T tokens each weight conversion.
constexpr int64_t kDecodeAheadBytes = 16 * 1024;

template <int R, int T, typename Elem, typename Load16, typename Load8, typename ToFloat>
[[gnu::always_inline]] inline void tile(int64_t n, const Elem* const* w, const void* const* a, float* out,
                                        Load16 load16, Load8 load8, ToFloat to_float) {
  const float* rows[T];
  for (int t = 0; t < T; ++t) rows[t] = static_cast<const float*>(a[t]);
  __m512 acc[2][R][T];
  for (auto& half : acc)
    for (auto& row : half)
      for (__m512& v : row) v = _mm512_setzero_ps();
  const int64_t nb = n / 8;
  const int64_t groups = nb / 4;
  for (int64_t j = 0; j < groups; ++j) {
    // One token (decode): the weights stream from memory, and the core's own prefetchers alone left it at
    // ~0.75 of what a read loop gets (1B-shaped F16 on the Xeon VM: 9.8 tok/s, 12.9-13.4 with the lines
    // 12-64 KiB ahead asked into L2, 11.9 with 1 KiB into L1). A group of 32 values of a 16-bit row is
    // one line; an F32 row's, two.
    if constexpr (T == 1)
      for (int r = 0; r < R; ++r)
        for (size_t line = 0; line < sizeof(Elem) / 2; ++line)
          _mm_prefetch(reinterpret_cast<const char*>(w[r] + 32 * j) + kDecodeAheadBytes + 64 * line, _MM_HINT_T1);
    for (int h = 0; h < 2; ++h) {
      __m512 wv[R];
      for (int r = 0; r < R; ++r) wv[r] = load16(w[r] + 32 * j + 16 * h);
      for (int t = 0; t < T; ++t) {
        const __m512 av = _mm512_loadu_ps(rows[t] + 32 * j + 16 * h);
        for (int r = 0; r < R; ++r) acc[h][r][t] = _mm512_fmadd_ps(wv[r], av, acc[h][r][t]);
      }
    }
  }
  for (int64_t i = groups * 4; i < nb; ++i) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_castps256_ps512(load8(w[r] + 8 * i));
    for (int t = 0; t < T; ++t) {
      const __m512 av = _mm512_castps256_ps512(_mm256_loadu_ps(rows[t] + 8 * i));
      for (int r = 0; r < R; ++r) acc[0][r][t] = _mm512_mask3_fmadd_ps(wv[r], av, acc[0][r][t], 0x00FF);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      const __m512 lo = acc[0][r][t], hi = acc[1][r][t];
      const __m256 s1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo), 1));
      const __m256 s3 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi), 1));
      __m256 v = _mm256_add_ps(_mm512_castps512_ps256(lo), s1);
      v = _mm256_add_ps(v, _mm512_castps512_ps256(hi));
      v = _mm256_add_ps(v, s3);
      float o = hsum(v);
      for (int64_t k = nb * 8; k < n; ++k) o = std::fma(to_float(w[r][k]), rows[t][k], o);
      out[r * T + t] = o;
    }
}

float bfloat_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <int R, int T>
void tile_f32(int64_t n, const void* const* w, const void* const* a, float* out) {
  tile<R, T>(
      n, reinterpret_cast<const float* const*>(w), a, out, [](const float* p) { return _mm512_loadu_ps(p); },
      [](const float* p) { return _mm256_loadu_ps(p); }, [](float v) { return v; });
}

template <int R, int T>
void tile_f16_wide(int64_t n, const void* const* w, const void* const* a, float* out) {
  tile<R, T>(
      n, reinterpret_cast<const uint16_t* const*>(w), a, out,
      [](const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); },
      [](const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); },
      [](uint16_t v) { return half_to_float(v); });
}

template <int R, int T>
void tile_bf16_wide(int64_t n, const void* const* w, const void* const* a, float* out) {
  tile<R, T>(
      n, reinterpret_cast<const uint16_t* const*>(w), a, out,
      [](const uint16_t* p) {
        const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
      },
      [](const uint16_t* p) {
        const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
      },
      [](uint16_t v) { return bfloat_to_float(v); });
}

using TileFn = void (*)(int64_t, const void* const*, const void* const*, float*);

// Every n_rows x n_tok instance, at (n_rows - 1) * kMaxFloatTileTokens + n_tok - 1.
#define KVSERVE_FLOAT_TILE_ROW(name, R) tile_##name<R, 1>, tile_##name<R, 2>, tile_##name<R, 3>, tile_##name<R, 4>
static_assert(kMaxFloatTileRows == 3 && kMaxFloatTileTokens == 4, "the tables list 3 x 4 tiles");
constexpr TileFn kF32[] = {KVSERVE_FLOAT_TILE_ROW(f32, 1), KVSERVE_FLOAT_TILE_ROW(f32, 2),
                           KVSERVE_FLOAT_TILE_ROW(f32, 3)};
constexpr TileFn kF16Wide[] = {KVSERVE_FLOAT_TILE_ROW(f16_wide, 1), KVSERVE_FLOAT_TILE_ROW(f16_wide, 2),
                               KVSERVE_FLOAT_TILE_ROW(f16_wide, 3)};
constexpr TileFn kBF16Wide[] = {KVSERVE_FLOAT_TILE_ROW(bf16_wide, 1), KVSERVE_FLOAT_TILE_ROW(bf16_wide, 2),
                                KVSERVE_FLOAT_TILE_ROW(bf16_wide, 3)};
#undef KVSERVE_FLOAT_TILE_ROW

int tile_index(int n_rows, int n_tok) { return (n_rows - 1) * kMaxFloatTileTokens + (n_tok - 1); }

}  // namespace

void dot_tiles_f32(int64_t n, const void* const* w, int n_rows, const void* const* a, int n_tok, float* out) {
  kF32[tile_index(n_rows, n_tok)](n, w, a, out);
}

void dot_tiles_f16_wide(int64_t n, const void* const* w, int n_rows, const void* const* a, int n_tok, float* out) {
  kF16Wide[tile_index(n_rows, n_tok)](n, w, a, out);
}

void dot_tiles_bf16_wide(int64_t n, const void* const* w, int n_rows, const void* const* a, int n_tok, float* out) {
  kBF16Wide[tile_index(n_rows, n_tok)](n, w, a, out);
}

}  // namespace kvserve::avx512zmm
