// AVX2 tiles of the i-quant types below 4 bits. Compiled with -mavx2 -mfma -mf16c; only called after
// cpu_has_avx2() said yes.
//
// A block's grid lookups and signs are the expensive part, so each block is decoded once (iquants.cpp) and
// its int8 quants then multiplied with every token's Q8_K block. |q| <= 62, so q + 64 is 2..126 and maddubs's
// pair sums with |y| <= 128 stay within 2 * 126 * 128 < 2^15; each 16-element sum times its scale (<= 31) in
// madd, and the offset's 64 * scale * bsum, stay far inside int32: the integer part of every block's dot is
// exact, as the scalar reference's.
#include <immintrin.h>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/iquants.h"
#include "kernels/cpu/iquants_decode.h"

namespace kvserve::avx2 {

namespace {

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// block_at(i, scratch) gives block i decoded (into scratch, or from where it already is).
template <int T, typename BlockAt>
void tile_iq(BlockAt block_at, int64_t nb, const void* const* a, float* out) {
  const BlockQ8_K* rows[T];
  for (int t = 0; t < T; ++t) rows[t] = static_cast<const BlockQ8_K*>(a[t]);
  float acc[T];
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  DecodedIQBlock scratch;
  for (int64_t i = 0; i < nb; ++i) {
    const DecodedIQBlock& blk = block_at(i, scratch);
    __m256i sumi[T];
    // q + 64 (2..126) is unsigned for maddubs; the 64 comes off through the activations' 16-element sums.
    const __m256i scales = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk.scale));
    for (int t = 0; t < T; ++t) {
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].bsums));
      sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(scales, bsums), 6));
    }
    for (int j = 0; j < kQK_K / 32; ++j) {
      const __m256i q =
          _mm256_add_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk.q + 32 * j)), _mm256_set1_epi8(64));
      // Scale 2j for the low 16 elements, 2j + 1 for the high ones.
      const __m256i pair = _mm256_set_m128i(_mm_set1_epi16(blk.scale[2 * j + 1]), _mm_set1_epi16(blk.scale[2 * j]));
      for (int t = 0; t < T; ++t) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].qs + 32 * j));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), pair));
      }
    }
    const float f = iq_block_factor(blk);
    for (int t = 0; t < T; ++t) acc[t] = iq_accumulate(acc[t], f * rows[t][i].d, hsum_epi32(sumi[t]));
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

template <typename BlockAt>
void tile_tokens(BlockAt block_at, int64_t nb, const void* const* a, int n_tok, float* out) {
  static_assert(kMaxTileTokens == 4);
  switch (n_tok) {
    case 1:
      tile_iq<1>(block_at, nb, a, out);
      break;
    case 2:
      tile_iq<2>(block_at, nb, a, out);
      break;
    case 3:
      tile_iq<3>(block_at, nb, a, out);
      break;
    default:
      tile_iq<4>(block_at, nb, a, out);
      break;
  }
}

// Decodes each block of a row of Block as it goes.
template <typename Block, typename Decode>
void tile_dispatch(Decode decode, int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  const auto* blocks = static_cast<const Block*>(w);
  tile_tokens(
      [&](int64_t i, DecodedIQBlock& scratch) -> const DecodedIQBlock& {
        decode(blocks + i, scratch);
        return scratch;
      },
      n / kQK_K, a, n_tok, out);
}

}  // namespace

void dot_tile_iq_decoded(int64_t n, const DecodedIQBlock* w, const void* const* a, int n_tok, float* out) {
  tile_tokens([&](int64_t i, DecodedIQBlock&) -> const DecodedIQBlock& { return w[i]; }, n / kQK_K, a, n_tok, out);
}

void dot_tile_iq2_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_XXS>([](const void* b, DecodedIQBlock& o) { iq_decode::iq2_xxs(b, o); }, n, w, a, n_tok, out);
}
void dot_tile_iq2_xs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_XS>([](const void* b, DecodedIQBlock& o) { iq_decode::iq2_xs(b, o); }, n, w, a, n_tok, out);
}
void dot_tile_iq2_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_S>([](const void* b, DecodedIQBlock& o) { iq_decode::iq2_s(b, o); }, n, w, a, n_tok, out);
}
void dot_tile_iq3_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ3_XXS>([](const void* b, DecodedIQBlock& o) { iq_decode::iq3_xxs(b, o); }, n, w, a, n_tok, out);
}
void dot_tile_iq3_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ3_S>([](const void* b, DecodedIQBlock& o) { iq_decode::iq3_s(b, o); }, n, w, a, n_tok, out);
}
void dot_tile_iq1_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ1_S>([](const void* b, DecodedIQBlock& o) { iq_decode::iq1_s(b, o); }, n, w, a, n_tok, out);
}
void dot_tile_iq1_m(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ1_M>([](const void* b, DecodedIQBlock& o) { iq_decode::iq1_m(b, o); }, n, w, a, n_tok, out);
}

}  // namespace kvserve::avx2
