#pragma once
// The tokens-in-lanes i-quant kernel (iquants.h's CodedIQBlock and IQTokenLanes): a register holds four
// activations of each token in its lanes, one vpdpbusd multiplies them with four weights of one row
// (broadcast), so 4 x lanes products an instruction land in the tokens' sums and a row's 16-element scale is
// a broadcast too. The weights are the decoded quants plus 64 (2..126, unsigned for vpdpbusd); the 64 comes
// off through the activations' 16-element sums. Each sub-block's sum (at most 32 products of 126 * 128) times
// its scale (<= 31), summed over a block, is exact in int32, so every block's integer dot is the scalar
// reference's; the float step per block is iq_accumulate's, lane by lane, so the results are its bits.
//
// One text for three register shapes (LanesZmm: 16 lanes, LanesYmm: 8): included by
// iquants_gemm_avx512vnni.cpp (zmm, and ymm with vpdpbusd EVEX-encoded for batches of 5 to 8 tokens) and
// iquants_gemm_avxvnni.cpp (ymm, VEX-encoded, 16 registers: cores with AVX-VNNI but no AVX-512).
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

// The register shapes: what the kernel below needs of each.
struct LanesYmm {
  static constexpr int kLanes = 8;
  // Rows per band: three accumulators a row (a sub-block's, the block's, the float one) beside the
  // activations, their offsets and a broadcast, in AVX-512VL's 32 registers or AVX2's 16.
#if defined(__AVX512VL__)
  static constexpr int kBandRows = 8;
#else
  static constexpr int kBandRows = 4;
#endif
  using I = __m256i;
  using F = __m256;
  static I zero() { return _mm256_setzero_si256(); }
  static F fzero() { return _mm256_setzero_ps(); }
  static I load(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
  static F loadf(const float* p) { return _mm256_load_ps(p); }
  static I dpbusd(I acc, I u8, I s8) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u8, s8);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#else
#error "iquants_lanes.h needs AVX512-VNNI with AVX512-VL, or AVX-VNNI"
#endif
  }
  static I broadcast(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(static_cast<int>(v));
  }
  static I set1(int v) { return _mm256_set1_epi32(v); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  // iq_accumulate lane by lane: acc + (f * d) * float(sum), fused.
  static F accumulate(F acc, float f, F d, I sum) {
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(f), d), _mm256_cvtepi32_ps(sum), acc);
  }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
};

#if defined(__AVX512F__)
struct LanesZmm {
  static constexpr int kLanes = 16;
  static constexpr int kBandRows = 8;
  using I = __m512i;
  using F = __m512;
  static I zero() { return _mm512_setzero_si512(); }
  static F fzero() { return _mm512_setzero_ps(); }
  static I load(const void* p) { return _mm512_load_si512(p); }
  static F loadf(const float* p) { return _mm512_load_ps(p); }
  static I dpbusd(I acc, I u8, I s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
  static I broadcast(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(static_cast<int>(v));
  }
  static I set1(int v) { return _mm512_set1_epi32(v); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static F accumulate(F acc, float f, F d, I sum) {
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(f), d), _mm512_cvtepi32_ps(sum), acc);
  }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
};
#endif

// R rows (w, nb blocks each, w_stride blocks apart) x the V::kLanes token lanes; out[r * kLanes + t]. kSub:
// the elements that share a scale (16, or 32 where each pair of 16-element scales is one), so the multiply
// by the scale is taken once per kSub elements.
template <typename V, int R, int kSub>
void lanes_rows(int64_t nb, const CodedIQBlock* w, int64_t w_stride, const IQTokenLanes& acts, float* out) {
  constexpr int L = V::kLanes;
  typename V::F accf[R];
  for (int r = 0; r < R; ++r) accf[r] = V::fzero();
  for (int64_t i = 0; i < nb; ++i) {
    const int8_t* yq = acts.q + i * kQK_K * L;
    const int32_t* bias = acts.bias + i * 16 * L;
    const CodedIQBlock* wi[R];
    for (int r = 0; r < R; ++r) wi[r] = w + r * w_stride + i;
    typename V::I sum[R];
    for (int r = 0; r < R; ++r) sum[r] = V::zero();
    for (int s = 0; s < kQK_K / kSub; ++s) {
      typename V::I acc[R];
      for (int r = 0; r < R; ++r) acc[r] = V::zero();
      for (int g = 0; g < kSub / 4; ++g) {
        const typename V::I y = V::load(yq + (kSub / 4 * s + g) * 4 * L);
        for (int r = 0; r < R; ++r) acc[r] = V::dpbusd(acc[r], V::broadcast(wi[r]->u + kSub * s + 4 * g), y);
      }
      typename V::I b = V::load(bias + kSub / 16 * s * L);
      if constexpr (kSub == 32) b = V::add(b, V::load(bias + (2 * s + 1) * L));
      for (int r = 0; r < R; ++r)
        sum[r] = V::add(sum[r], V::mullo(V::sub(acc[r], b), V::set1(wi[r]->scale[kSub / 16 * s])));
    }
    const typename V::F yd = V::loadf(acts.d + i * L);
    for (int r = 0; r < R; ++r) accf[r] = V::accumulate(accf[r], wi[r]->f, yd, sum[r]);
  }
  for (int r = 0; r < R; ++r) V::storef(out + r * L, accf[r]);
}

template <typename V, int kSub, int R>
void lanes_tail(int rows, int64_t nb, const CodedIQBlock* w, const IQTokenLanes& acts, float* out) {
  if constexpr (R > 0) {
    if (rows == R) return lanes_rows<V, R, kSub>(nb, w, nb, acts, out);
    lanes_tail<V, kSub, R - 1>(rows, nb, w, acts, out);
  }
}

template <typename V, int kSub>
void lanes_gemm_rows(int64_t nb, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  constexpr int kBand = V::kBandRows, L = V::kLanes;
  int r = 0;
  for (; r + kBand <= n_rows; r += kBand) lanes_rows<V, kBand, kSub>(nb, w + r * nb, nb, acts, out + r * L);
  lanes_tail<V, kSub, kBand - 1>(n_rows - r, nb, w + r * nb, acts, out + r * L);
}

// out[r * V::kLanes + t] for r < n_rows (rows of `type`, n / 256 blocks each, one after another from w).
template <typename V>
void lanes_gemm(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  if (iq_scale_per_32(type))
    lanes_gemm_rows<V, 32>(n / kQK_K, w, n_rows, acts, out);
  else
    lanes_gemm_rows<V, 16>(n / kQK_K, w, n_rows, acts, out);
}

}  // namespace
}  // namespace kvserve
