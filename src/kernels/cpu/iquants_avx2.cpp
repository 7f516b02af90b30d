// AVX2 tiles of the i-quant types below 4 bits. Compiled with -mavx2 -mfma -mf16c; only called after
// cpu_has_avx2() said yes.
//
// A block's grid lookups and signs are the expensive part, so each block is decoded once (iquants.cpp) and
// its int8 quants then multiplied with every token's Q8_K block. |q| <= 62 and |y| <= 127, so maddubs's pair
// sums (after moving q's sign onto y) stay below 2^15, and each 16-element sum times its scale (<= 31) in
// madd stays far inside int32: the integer part of every block's dot is exact, as the scalar reference's.
#include <immintrin.h>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/iquants.h"

namespace kvserve::avx2 {

namespace {

template <int T>
void tile_iq(IQDecodeFn decode, size_t block_bytes, int64_t n, const void* w, const void* const* a, float* out) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const BlockQ8_K* rows[T];
  for (int t = 0; t < T; ++t) rows[t] = static_cast<const BlockQ8_K*>(a[t]);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  DecodedIQBlock blk;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(wb + static_cast<size_t>(i) * block_bytes, blk);
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    for (int j = 0; j < kQK_K / 32; ++j) {
      const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk.q + 32 * j));
      const __m256i q_abs = _mm256_sign_epi8(q, q);
      // Scale 2j for the low 16 elements, 2j + 1 for the high ones.
      const __m256i pair = _mm256_set_m128i(_mm_set1_epi16(blk.scale[2 * j + 1]), _mm_set1_epi16(blk.scale[2 * j]));
      for (int t = 0; t < T; ++t) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].qs + 32 * j));
        const __m256i p = _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(y, q));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, pair));
      }
    }
    const float f = blk.d * blk.scale_unit * blk.q_unit;
    for (int t = 0; t < T; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(f * rows[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = avx2_inline::hsum(acc[t]);
}

template <typename Block>
void tile_dispatch(IQDecodeFn decode, int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  static_assert(kMaxTileTokens == 4);
  switch (n_tok) {
    case 1:
      tile_iq<1>(decode, sizeof(Block), n, w, a, out);
      break;
    case 2:
      tile_iq<2>(decode, sizeof(Block), n, w, a, out);
      break;
    case 3:
      tile_iq<3>(decode, sizeof(Block), n, w, a, out);
      break;
    default:
      tile_iq<4>(decode, sizeof(Block), n, w, a, out);
      break;
  }
}

}  // namespace

void dot_tile_iq2_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_XXS>(decode_iq2_xxs, n, w, a, n_tok, out);
}
void dot_tile_iq2_xs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_XS>(decode_iq2_xs, n, w, a, n_tok, out);
}
void dot_tile_iq2_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_S>(decode_iq2_s, n, w, a, n_tok, out);
}
void dot_tile_iq3_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ3_XXS>(decode_iq3_xxs, n, w, a, n_tok, out);
}
void dot_tile_iq3_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ3_S>(decode_iq3_s, n, w, a, n_tok, out);
}
void dot_tile_iq1_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ1_S>(decode_iq1_s, n, w, a, n_tok, out);
}
void dot_tile_iq1_m(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ1_M>(decode_iq1_m, n, w, a, n_tok, out);
}

}  // namespace kvserve::avx2
