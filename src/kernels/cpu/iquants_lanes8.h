#pragma once
// The tokens-in-lanes i-quant kernel on 256-bit registers: 8 tokens in the lanes, four activations of each
// a register, four weights of a row and the row's scale broadcast (the 16-lane zmm kernel's design, see
// iquants_gemm_avx512vnni.cpp). Included by iquants_gemm_avx512vnni.cpp (vpdpbusd EVEX-encoded, 32
// registers: batches of 5 to 8 tokens) and iquants_gemm_avxvnni.cpp (VEX-encoded, 16 registers: cores with
// AVX-VNNI but no AVX-512). Exact integer block dots and iq_accumulate lane by lane, so the scalar
// reference's bits.
//
// Everything here has internal linkage on purpose: the two files are compiled for different instruction
// sets, and one shared inline definition would let the linker keep either copy for both.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/iquants.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see above

constexpr int kLanes8 = 8;

[[gnu::always_inline]] inline __m256i lanes8_dpbusd(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u8, s8);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#else
#error "iquants_lanes8.h needs AVX512-VNNI with AVX512-VL, or AVX-VNNI"
#endif
}

// Rows per band: three accumulators a row (a sub-block's, the block's, the float one) must fit the registers
// beside the activations, their offsets and a broadcast.
#if defined(__AVX512VL__)
constexpr int kLanes8BandRows = 8;
#else
constexpr int kLanes8BandRows = 4;
#endif

inline __m256i lanes8_broadcast_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(static_cast<int>(v));
}

// A row of `decode`'s type (nb blocks of block_bytes) into CodedIQBlocks.
inline void lanes_decode_coded(IQDecodeFn decode, const uint8_t* blocks, size_t block_bytes, int64_t nb,
                               CodedIQBlock* out) {
  DecodedIQBlock d;
  for (int64_t i = 0; i < nb; ++i) {
    decode(blocks + static_cast<size_t>(i) * block_bytes, d);
    for (int j = 0; j < kQK_K / 32; ++j)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[i].u + 32 * j),
                         _mm256_add_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(d.q + 32 * j)),
                                         _mm256_set1_epi8(kCodedOffset)));
    for (int j = 0; j < 2; ++j)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[i].scale + 8 * j),
                         _mm256_cvtepi16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(d.scale + 8 * j))));
    out[i].f = iq_block_factor(d);
  }
}

// n_tok (1..8) Q8_K rows into the 8-lane layout (iquants.h's IQTokenLanes with 8 lanes).
inline void lanes8_from_tokens(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out) {
  const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_tok), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i row_offset =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(row_bytes)));
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* block = rows + static_cast<size_t>(i) * sizeof(BlockQ8_K);
    const auto* qs = reinterpret_cast<const int*>(block + offsetof(BlockQ8_K, qs));
    for (int k = 0; k < kQK_K / 4; ++k)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out.q + (i * kQK_K / 4 + k) * 32),
                         _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), qs + k, row_offset, valid, 1));
    const auto* bsums = reinterpret_cast<const int*>(block + offsetof(BlockQ8_K, bsums));
    for (int s = 0; s < kQK_K / 16; s += 2) {
      // One gather reads sub-blocks s and s + 1's sums (low and high half): each sign-extended, times 64.
      const __m256i two = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), bsums + s / 2, row_offset, valid, 1);
      _mm256_store_si256(reinterpret_cast<__m256i*>(out.bias + (i * 16 + s) * kLanes8),
                         _mm256_slli_epi32(_mm256_srai_epi32(_mm256_slli_epi32(two, 16), 16), 6));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out.bias + (i * 16 + s + 1) * kLanes8),
                         _mm256_slli_epi32(_mm256_srai_epi32(two, 16), 6));
    }
    _mm256_store_ps(out.d + i * kLanes8,
                    _mm256_mask_i32gather_ps(_mm256_setzero_ps(), reinterpret_cast<const float*>(block), row_offset,
                                             _mm256_castsi256_ps(valid), 1));
  }
}

// R rows (w, nb blocks each, w_stride blocks apart) x the 8 token lanes; out[r * 8 + t].
template <int R, int kSub>
void lanes8_rows(int64_t nb, const CodedIQBlock* w, int64_t w_stride, const IQTokenLanes& acts, float* out) {
  __m256 accf[R];
  for (int r = 0; r < R; ++r) accf[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const int8_t* yq = acts.q + i * kQK_K * kLanes8;
    const int32_t* bias = acts.bias + i * 16 * kLanes8;
    const CodedIQBlock* wi[R];
    for (int r = 0; r < R; ++r) wi[r] = w + r * w_stride + i;
    __m256i sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
    for (int s = 0; s < kQK_K / kSub; ++s) {
      __m256i acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
      for (int g = 0; g < kSub / 4; ++g) {
        const __m256i y = _mm256_load_si256(reinterpret_cast<const __m256i*>(yq + (kSub / 4 * s + g) * 32));
        for (int r = 0; r < R; ++r)
          acc[r] = lanes8_dpbusd(acc[r], lanes8_broadcast_u32(wi[r]->u + kSub * s + 4 * g), y);
      }
      __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(bias + kSub / 16 * s * kLanes8));
      if constexpr (kSub == 32)
        b = _mm256_add_epi32(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(bias + (2 * s + 1) * kLanes8)));
      for (int r = 0; r < R; ++r)
        sum[r] = _mm256_add_epi32(
            sum[r], _mm256_mullo_epi32(_mm256_sub_epi32(acc[r], b), _mm256_set1_epi32(wi[r]->scale[kSub / 16 * s])));
    }
    const __m256 yd = _mm256_load_ps(acts.d + i * kLanes8);
    for (int r = 0; r < R; ++r)
      accf[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(wi[r]->f), yd), _mm256_cvtepi32_ps(sum[r]), accf[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kLanes8, accf[r]);
}

template <int kSub, int R>
void lanes8_tail(int rows, int64_t nb, const CodedIQBlock* w, const IQTokenLanes& acts, float* out) {
  if constexpr (R > 0) {
    if (rows == R) return lanes8_rows<R, kSub>(nb, w, nb, acts, out);
    lanes8_tail<kSub, R - 1>(rows, nb, w, acts, out);
  }
}

template <int kSub>
void lanes8_gemm_rows(int64_t nb, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  constexpr int kBand = kLanes8BandRows;
  int r = 0;
  for (; r + kBand <= n_rows; r += kBand) lanes8_rows<kBand, kSub>(nb, w + r * nb, nb, acts, out + r * kLanes8);
  lanes8_tail<kSub, kBand - 1>(n_rows - r, nb, w + r * nb, acts, out + r * kLanes8);
}

inline void lanes8_gemm(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts,
                        float* out) {
  if (iq_scale_per_32(type))
    lanes8_gemm_rows<32>(n / kQK_K, w, n_rows, acts, out);
  else
    lanes8_gemm_rows<16>(n / kQK_K, w, n_rows, acts, out);
}

}  // namespace
}  // namespace kvserve
