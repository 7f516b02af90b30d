// The i-quants below 4 bits on AVX512-VNNI: each block decoded once (iquants_decode.h), its quants times
// their 16-element scales widened to int16 (|q * scale| <= 62 * 31), and vpdpwssd multiplies them with the
// activations widened to int16, 32 products an instruction and no offset or sign fix-ups. Each lane's sum
// is exact (at most 16 products of <= 1922 * 128), so every block's integer dot is the scalar reference's.
// Compiled with the AVX-512 VNNI flags; only called after cpu_has_avx512_vnni().
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (_mm512_cvtepi32_ps, _mm512_castsi256_si512, the reductions) pass an
// _mm512_undefined_*() value initialized from itself, which -W(maybe-)uninitialized reports once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/iquants.h"
#include "kernels/cpu/iquants_decode.h"

namespace kvserve::avx512vnni {

namespace {

template <typename Decode>
void decode_wide(Decode decode, const uint8_t* blocks, size_t block_bytes, int64_t nb, WideIQBlock* out) {
  DecodedIQBlock d;
  for (int64_t i = 0; i < nb; ++i) {
    decode(blocks + static_cast<size_t>(i) * block_bytes, d);
    for (int j = 0; j < kQK_K / 32; ++j) {
      const __m512i q = _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(d.q + 32 * j)));
      const __m512i scale = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(d.scale[2 * j])),
                                               _mm256_set1_epi16(d.scale[2 * j + 1]), 1);
      _mm512_store_si512(out[i].w + 32 * j, _mm512_mullo_epi16(q, scale));
    }
    out[i].d = iq_block_factor(d);
  }
}

template <int T>
void dot_wide_tokens(int64_t nb, const WideIQBlock* w, const int16_t* y16, int64_t y_stride, const BlockQ8_K* const* a,
                     float* out) {
  float acc[T];
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int j = 0; j < kQK_K / 32; ++j) {
      const __m512i wv = _mm512_load_si512(w[i].w + 32 * j);
      for (int t = 0; t < T; ++t)
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], wv, _mm512_loadu_si512(y16 + t * y_stride + i * kQK_K + 32 * j));
    }
    for (int t = 0; t < T; ++t) acc[t] = iq_accumulate(acc[t], w[i].d * a[t][i].d, _mm512_reduce_add_epi32(sumi[t]));
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

}  // namespace

void decode_iq_wide(DType type, const void* row, int64_t n, WideIQBlock* out) {
  const auto* bytes = static_cast<const uint8_t*>(row);
  const int64_t nb = n / kQK_K;
  switch (type) {
    case DType::IQ2_XXS:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq2_xxs(b, o); }, bytes,
                         sizeof(BlockIQ2_XXS), nb, out);
    case DType::IQ2_XS:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq2_xs(b, o); }, bytes, sizeof(BlockIQ2_XS),
                         nb, out);
    case DType::IQ2_S:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq2_s(b, o); }, bytes, sizeof(BlockIQ2_S),
                         nb, out);
    case DType::IQ3_XXS:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq3_xxs(b, o); }, bytes,
                         sizeof(BlockIQ3_XXS), nb, out);
    case DType::IQ3_S:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq3_s(b, o); }, bytes, sizeof(BlockIQ3_S),
                         nb, out);
    case DType::IQ1_S:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq1_s(b, o); }, bytes, sizeof(BlockIQ1_S),
                         nb, out);
    default:
      return decode_wide([](const void* b, DecodedIQBlock& o) { iq_decode::iq1_m(b, o); }, bytes, sizeof(BlockIQ1_M),
                         nb, out);
  }
}

void widen_activations(const BlockQ8_K* a, int64_t n, int16_t* y16) {
  const auto* q = reinterpret_cast<const uint8_t*>(a);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const auto* qs = reinterpret_cast<const BlockQ8_K*>(q + static_cast<size_t>(i) * sizeof(BlockQ8_K))->qs;
    for (int j = 0; j < kQK_K / 32; ++j)
      _mm512_storeu_si512(y16 + i * kQK_K + 32 * j,
                          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j))));
  }
}

void dot_iq_wide(int64_t n, const WideIQBlock* w, const int16_t* y16, int64_t y_stride, const BlockQ8_K* const* a,
                 int n_tok, float* out) {
  static_assert(kMaxWideTokens == 8);
  const int64_t nb = n / kQK_K;
  switch (n_tok) {
    case 1:
      return dot_wide_tokens<1>(nb, w, y16, y_stride, a, out);
    case 2:
      return dot_wide_tokens<2>(nb, w, y16, y_stride, a, out);
    case 3:
      return dot_wide_tokens<3>(nb, w, y16, y_stride, a, out);
    case 4:
      return dot_wide_tokens<4>(nb, w, y16, y_stride, a, out);
    case 5:
      return dot_wide_tokens<5>(nb, w, y16, y_stride, a, out);
    case 6:
      return dot_wide_tokens<6>(nb, w, y16, y_stride, a, out);
    case 7:
      return dot_wide_tokens<7>(nb, w, y16, y_stride, a, out);
    default:
      return dot_wide_tokens<8>(nb, w, y16, y_stride, a, out);
  }
}

}  // namespace kvserve::avx512vnni
