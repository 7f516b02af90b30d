// The tokens-in-lanes i-quant kernel (iquants_lanes.h) on AVX512-VNNI: 16 tokens in the lanes of a zmm, or 8
// in a ymm for batches of 5 to 8 (half the work), and the gathers that put tokens in the lanes. Compiled with
// the AVX-512 VNNI flags; only called after cpu_has_avx512_vnni().
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (_mm512_cvtepi32_ps, gathers) pass an _mm512_undefined_*() value initialized
// from itself, which -W(maybe-)uninitialized reports once inlined.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstddef>
#include <cstring>

#include "kernels/cpu/iquants.h"
#include "kernels/cpu/iquants_lanes.h"

namespace kvserve::avx512vnni {

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
  lanes_gemm<LanesZmm>(type, n, w, n_rows, acts, out);
}

void tokens_to_lanes8(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out) {
  lanes8_from_tokens(rows, row_bytes, n_tok, n, out);
}

void gemm_iq_coded8(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  lanes_gemm<LanesYmm>(type, n, w, n_rows, acts, out);
}

}  // namespace kvserve::avx512vnni
