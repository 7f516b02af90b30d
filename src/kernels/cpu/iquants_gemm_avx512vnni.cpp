// The i-quants below 4 bits over many tokens on AVX512-VNNI, with the tokens in the lanes: a zmm holds four
// consecutive activations of each of 16 tokens, one vpdpbusd multiplies them with four weights of one row
// (broadcast), so 64 products an instruction land in the 16 tokens' sums and a row's 16-element scale is a
// broadcast too. Weights are the decoded quants plus 64 (2..126, unsigned for vpdpbusd); the 64 comes off
// through the activations' 16-element sums. Each sub-block's sum (at most 16 products of 126 * 128) times
// its scale (<= 31), summed over a block, is exact in int32: every block's integer dot is the scalar
// reference's, and the float step per block is iq_accumulate's, lane by lane, so the results are the scalar
// reference's bits.
//
// Batches of 5 to 8 tokens take the same kernel on ymm with 8 lanes (iquants_lanes8.h), which does half the
// work. Compiled with the AVX-512 VNNI flags; only called after cpu_has_avx512_vnni().
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (_mm512_cvtepi32_ps, gathers) pass an _mm512_undefined_*() value initialized
// from itself, which -W(maybe-)uninitialized reports once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstddef>
#include <cstring>

#include "kernels/cpu/iquants.h"
#include "kernels/cpu/iquants_lanes8.h"

namespace kvserve::avx512vnni {

namespace {

inline __m512i broadcast_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(static_cast<int>(v));
}

// R rows (w, rows of nb blocks each, w_stride blocks apart) x the 16 token lanes of acts; out[r * 16 + t].
// kSub: the elements that share a scale (16, or 32 where each pair of 16-element scales is one), so a
// multiply by the scale is taken once per kSub elements.
template <int R, int kSub>
void rows_by_tokens(int64_t nb, const CodedIQBlock* w, int64_t w_stride, const IQTokenLanes& acts, float* out) {
  __m512 accf[R];
  for (int r = 0; r < R; ++r) accf[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const int8_t* yq = acts.q + i * kQK_K * 16;
    const int32_t* bias = acts.bias + i * 16 * 16;
    const CodedIQBlock* wi[R];
    for (int r = 0; r < R; ++r) wi[r] = w + r * w_stride + i;
    __m512i sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_si512();
    for (int s = 0; s < kQK_K / kSub; ++s) {
      __m512i acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
      for (int g = 0; g < kSub / 4; ++g) {
        const __m512i y = _mm512_load_si512(yq + (kSub / 4 * s + g) * 64);
        for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbusd_epi32(acc[r], broadcast_u32(wi[r]->u + kSub * s + 4 * g), y);
      }
      __m512i b = _mm512_load_si512(bias + kSub * s);
      if constexpr (kSub == 32) b = _mm512_add_epi32(b, _mm512_load_si512(bias + kSub * s + 16));
      for (int r = 0; r < R; ++r)
        sum[r] = _mm512_add_epi32(
            sum[r], _mm512_mullo_epi32(_mm512_sub_epi32(acc[r], b), _mm512_set1_epi32(wi[r]->scale[kSub / 16 * s])));
    }
    const __m512 yd = _mm512_load_ps(acts.d + i * 16);
    for (int r = 0; r < R; ++r)
      accf[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(wi[r]->f), yd), _mm512_cvtepi32_ps(sum[r]), accf[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * 16, accf[r]);
}

template <int kSub>
void gemm_rows(int64_t nb, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  int r = 0;
  for (; r + 8 <= n_rows; r += 8) rows_by_tokens<8, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
  switch (n_rows - r) {
    case 1:
      return rows_by_tokens<1, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    case 2:
      return rows_by_tokens<2, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    case 3:
      return rows_by_tokens<3, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    case 4:
      return rows_by_tokens<4, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    case 5:
      return rows_by_tokens<5, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    case 6:
      return rows_by_tokens<6, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    case 7:
      return rows_by_tokens<7, kSub>(nb, w + r * nb, nb, acts, out + r * 16);
    default:
      return;
  }
}

}  // namespace

void decode_iq_coded(DType type, const void* row, int64_t n, CodedIQBlock* out) {
  lanes_decode_coded(avx2::iq_decoder(type), static_cast<const uint8_t*>(row),
                     static_cast<size_t>(dtype_info(type).block_bytes), n / kQK_K, out);
}

void tokens_to_lanes(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out) {
  const int64_t nb = n / kQK_K;
  const __mmask16 valid = static_cast<__mmask16>((1u << n_tok) - 1);
  // Byte offsets of the 16 tokens' rows (the missing ones masked off, their lanes zero).
  const __m512i row_offset = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(static_cast<int>(row_bytes)));
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* block = rows + static_cast<size_t>(i) * sizeof(BlockQ8_K);
    const auto* qs = block + offsetof(BlockQ8_K, qs);
    for (int k = 0; k < kQK_K / 4; ++k)
      _mm512_store_si512(out.q + (i * kQK_K / 4 + k) * 64,
                         _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, row_offset, qs + 4 * k, 1));
    const auto* bsums = block + offsetof(BlockQ8_K, bsums);
    for (int s = 0; s < kQK_K / 16; s += 2) {
      // One gather reads sub-blocks s and s + 1's sums (low and high half): each sign-extended, times 64.
      const __m512i two = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, row_offset, bsums + 2 * s, 1);
      _mm512_store_si512(out.bias + (i * 16 + s) * 16,
                         _mm512_slli_epi32(_mm512_srai_epi32(_mm512_slli_epi32(two, 16), 16), 6));
      _mm512_store_si512(out.bias + (i * 16 + s + 1) * 16, _mm512_slli_epi32(_mm512_srai_epi32(two, 16), 6));
    }
    _mm512_store_ps(out.d + i * 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, row_offset,
                                                             block + offsetof(BlockQ8_K, d), 1));
  }
}

void gemm_iq_coded(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  if (iq_scale_per_32(type))
    gemm_rows<32>(n / kQK_K, w, n_rows, acts, out);
  else
    gemm_rows<16>(n / kQK_K, w, n_rows, acts, out);
}

void tokens_to_lanes8(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out) {
  lanes8_from_tokens(rows, row_bytes, n_tok, n, out);
}

void gemm_iq_coded8(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  lanes8_gemm(type, n, w, n_rows, acts, out);
}

}  // namespace kvserve::avx512vnni
