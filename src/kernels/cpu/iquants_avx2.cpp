// AVX2 tiles of the i-quant types below 4 bits. Compiled with -mavx2 -mfma -mf16c; only called after
// cpu_has_avx2() said yes.
//
// A block's grid lookups and signs are the expensive part, so each block is decoded once (iquants.cpp) and
// its int8 quants then multiplied with every token's Q8_K block. |q| <= 62, so q + 64 is 2..126 and maddubs's
// pair sums with |y| <= 128 stay within 2 * 126 * 128 < 2^15; each 16-element sum times its scale (<= 31) in
// madd, and the offset's 64 * scale * bsum, stay far inside int32: the integer part of every block's dot is
// exact, as the scalar reference's.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/iq_grids.h"
#include "kernels/cpu/iquants.h"
#include "kernels/cpu/iquants_decode.h"

namespace kvserve::avx2 {

namespace {

using avx2_inline::half_to_float;

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// ---------------------------------------------------------------- decoders
// The scalar decoders' results (iquants_decode.h) with the grid lookups, index bits and signs of 32 elements
// at a time in one register: the same DecodedIQBlock, byte for byte (IQuants.Avx2DecodersMatchTheScalarOnes).

// 32 sign masks (0xFF where negative) from four 8-bit sign fields, field l for elements 8l..8l+7.
inline __m256i spread_signs(uint32_t fields) {
  const __m256i byte_of =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(fields)), byte_of);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// The same from four 7-bit fields (IQ2_XXS, IQ2_XS, IQ3_XXS: the eighth bit makes the count even).
inline __m256i seven_bit_signs(uint32_t f0, uint32_t f1, uint32_t f2, uint32_t f3) {
  using iq_decode::kSevenBitSignMasks;
  return _mm256_setr_epi64x(static_cast<int64_t>(kSevenBitSignMasks[f0]), static_cast<int64_t>(kSevenBitSignMasks[f1]),
                            static_cast<int64_t>(kSevenBitSignMasks[f2]), static_cast<int64_t>(kSevenBitSignMasks[f3]));
}

// Magnitudes negated where the mask says.
inline __m256i apply_signs(__m256i magnitudes, __m256i masks) {
  return _mm256_sub_epi8(_mm256_xor_si256(magnitudes, masks), masks);
}

inline __m256i grid4(const uint64_t* grid, int i0, int i1, int i2, int i3) {
  return _mm256_setr_epi64x(static_cast<int64_t>(grid[i0]), static_cast<int64_t>(grid[i1]),
                            static_cast<int64_t>(grid[i2]), static_cast<int64_t>(grid[i3]));
}

inline void store_q(DecodedIQBlock& out, int ib, __m256i q) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(out.q + 32 * ib), q);
}

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void decode_iq2_xxs_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ2_XXS*>(block);
  iq_decode::set_block_fields(out, half_to_float(b.d), 0.125f, 1.0f);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t idx = load_u32(b.qs + 4 * ib);
    const uint32_t rest = load_u32(b.qs + 4 * ib + 2);
    iq_decode::set_scale32(out, ib, rest >> 28);
    const __m256i g = grid4(kIQ2XXSGrid, idx & 0xFF, (idx >> 8) & 0xFF, (idx >> 16) & 0xFF, idx >> 24);
    store_q(out, ib,
            apply_signs(g, seven_bit_signs(rest & 127, (rest >> 7) & 127, (rest >> 14) & 127, (rest >> 21) & 127)));
  }
}

void decode_iq2_xs_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ2_XS*>(block);
  iq_decode::set_block_fields(out, half_to_float(b.d), 0.125f, 1.0f);
  for (int ib = 0; ib < 8; ++ib) {
    iq_decode::set_nibble_scales(out, ib, b.scales[ib]);
    const uint16_t* v = b.qs + 4 * ib;
    const __m256i g = grid4(kIQ2XSGrid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511);
    store_q(out, ib, apply_signs(g, seven_bit_signs(v[0] >> 9, v[1] >> 9, v[2] >> 9, v[3] >> 9)));
  }
}

void decode_iq2_s_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ2_S*>(block);
  iq_decode::set_block_fields(out, half_to_float(b.d), 0.125f, 1.0f);
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    iq_decode::set_nibble_scales(out, ib, b.scales[ib]);
    const uint8_t* qs = b.qs + 4 * ib;
    const int qh = b.qh[ib];
    const __m256i g = grid4(kIQ2SGrid, qs[0] | ((qh << 8) & 0x300), qs[1] | ((qh << 6) & 0x300),
                            qs[2] | ((qh << 4) & 0x300), qs[3] | ((qh << 2) & 0x300));
    store_q(out, ib, apply_signs(g, spread_signs(load_u32(signs + 4 * ib))));
  }
}

void decode_iq3_xxs_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ3_XXS*>(block);
  iq_decode::set_block_fields(out, half_to_float(b.d), 0.25f, 1.0f);
  const uint8_t* scales_and_signs = b.qs + kQK_K / 4;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load_u32(scales_and_signs + 4 * ib);
    iq_decode::set_scale32(out, ib, aux >> 28);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * ib)));
    const __m256i g = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIQ3XXSGrid), idx, 4);
    store_q(out, ib,
            apply_signs(g, seven_bit_signs(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127)));
  }
}

void decode_iq3_s_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ3_S*>(block);
  iq_decode::set_block_fields(out, half_to_float(b.d), 1.0f, 1.0f);
  const __m256i shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int ib = 0; ib < 8; ++ib) {
    iq_decode::set_scale32(out, ib, iq_decode::iq3_s_scale_field(b, ib));
    // Index k (elements 4k..4k+3) is qs[8 ib + k] with bit k of qh[ib] as its ninth bit.
    const __m256i low = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * ib)));
    const __m256i high = _mm256_slli_epi32(
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.qh[ib]), shifts), _mm256_set1_epi32(1)), 8);
    const __m256i g = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIQ3SGrid), _mm256_or_si256(low, high), 4);
    store_q(out, ib, apply_signs(g, spread_signs(load_u32(b.signs + 4 * ib))));
  }
}

// IQ1: 8 * grid value (bytes -1, 0, 1) plus each 8 elements' delta (+-1).
inline __m256i iq1_values(__m256i grid, __m256i deltas) {
  const __m256i eight = _mm256_and_si256(_mm256_slli_epi16(grid, 3), _mm256_set1_epi8(static_cast<char>(0xF8)));
  return _mm256_add_epi8(eight, deltas);
}

// Eight bytes of +1, or of -1 where `negative_bit` (0 or 1) is set; without a branch (the bit is random).
inline int64_t delta8(uint32_t negative_bit) {
  const uint64_t all = 0 - static_cast<uint64_t>(negative_bit);
  return static_cast<int64_t>((0x0101010101010101ull & ~all) | all);
}

void decode_iq1_s_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ1_S*>(block);
  iq_decode::set_block_fields(out, half_to_float(b.d), 1.0f, 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t qh = b.qh[ib];
    iq_decode::set_scale32(out, ib, (qh >> 12) & 7u);
    const uint8_t* qs = b.qs + 4 * ib;
    const __m256i g = grid4(kIQ1SGrid, qs[0] | ((qh & 7) << 8), qs[1] | (((qh >> 3) & 7) << 8),
                            qs[2] | (((qh >> 6) & 7) << 8), qs[3] | (((qh >> 9) & 7) << 8));
    store_q(out, ib, iq1_values(g, _mm256_set1_epi64x(delta8(qh >> 15))));
  }
}

void decode_iq1_m_simd(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ1_M*>(block);
  uint16_t sc[4];
  iq_decode::set_block_fields(out, half_to_float(iq_decode::iq1_m_scale_words(b, sc)), 1.0f, 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    iq_decode::set_iq1_m_scales(out, ib, sc);
    const uint8_t* qs = b.qs + 4 * ib;
    const uint32_t h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
    const __m256i g = grid4(kIQ1SGrid, qs[0] | ((h0 & 7) << 8), qs[1] | (((h0 >> 4) & 7) << 8), qs[2] | ((h1 & 7) << 8),
                            qs[3] | (((h1 >> 4) & 7) << 8));
    const __m256i deltas =
        _mm256_setr_epi64x(delta8((h0 >> 3) & 1), delta8(h0 >> 7), delta8((h1 >> 3) & 1), delta8(h1 >> 7));
    store_q(out, ib, iq1_values(g, deltas));
  }
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

IQDecodeFn iq_decoder(DType type) {
  switch (type) {
    case DType::IQ2_XXS:
      return decode_iq2_xxs_simd;
    case DType::IQ2_XS:
      return decode_iq2_xs_simd;
    case DType::IQ2_S:
      return decode_iq2_s_simd;
    case DType::IQ3_XXS:
      return decode_iq3_xxs_simd;
    case DType::IQ3_S:
      return decode_iq3_s_simd;
    case DType::IQ1_S:
      return decode_iq1_s_simd;
    case DType::IQ1_M:
      return decode_iq1_m_simd;
    default:
      return nullptr;
  }
}

void dot_tile_iq_decoded(int64_t n, const DecodedIQBlock* w, const void* const* a, int n_tok, float* out) {
  tile_tokens([&](int64_t i, DecodedIQBlock&) -> const DecodedIQBlock& { return w[i]; }, n / kQK_K, a, n_tok, out);
}

void dot_tile_iq2_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_XXS>(decode_iq2_xxs_simd, n, w, a, n_tok, out);
}
void dot_tile_iq2_xs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_XS>(decode_iq2_xs_simd, n, w, a, n_tok, out);
}
void dot_tile_iq2_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ2_S>(decode_iq2_s_simd, n, w, a, n_tok, out);
}
void dot_tile_iq3_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ3_XXS>(decode_iq3_xxs_simd, n, w, a, n_tok, out);
}
void dot_tile_iq3_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ3_S>(decode_iq3_s_simd, n, w, a, n_tok, out);
}
void dot_tile_iq1_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ1_S>(decode_iq1_s_simd, n, w, a, n_tok, out);
}
void dot_tile_iq1_m(int64_t n, const void* w, const void* const* a, int n_tok, float* out) {
  tile_dispatch<BlockIQ1_M>(decode_iq1_m_simd, n, w, a, n_tok, out);
}

}  // namespace kvserve::avx2
