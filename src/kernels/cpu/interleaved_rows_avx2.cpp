// AVX2 kernels of interleaved_rows.h. Compiled with -mavx2 -mfma -mf16c; only called after cpu_has_avx2().
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/interleaved_rows.h"

namespace kvserve::avx2 {

namespace {

using avx2_inline::broadcast_4_bytes;

// out[r * T + t] = lane r of acc[t].
template <int T>
inline void store_row_lanes(const __m256 (&acc)[T], float* out) {
  for (int t = 0; t < T; ++t) {
    alignas(32) float lanes[kInterleaveRows];
    _mm256_store_ps(lanes, acc[t]);
    for (int r = 0; r < kInterleaveRows; ++r) out[r * T + t] = lanes[r];
  }
}

// Quants are 0..15 and activations -127..127, so each maddubs pair sum is within +-3810 and the 8 of
// them that make up a block's int16 partial sums stay within +-30480: exact, no saturation.
template <bool kQ4_1, int T>
void gemm_fixed(int64_t nb, const uint8_t* group, const PackedActs32* acts, float* out) {
  constexpr size_t kScaleBytes = kQ4_1 ? 32 : 16;
  constexpr size_t kRecordBytes = kScaleBytes + 128;
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec = group + i * kRecordBytes;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
    const uint8_t* qs = rec + kScaleBytes;
    // All 8 quant vectors first (vector g: elements 4g..4g+3 of each row), then one token at a time, so
    // the live set stays within the 16 registers (8 quants, one running sum, a broadcast, a product).
    __m256i q[8];
    for (int h = 0; h < 4; ++h) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
      q[h] = _mm256_and_si256(packed, low_mask);                              // elements 4h..4h+3
      q[h + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);  // 16+4h..16+4h+3
    }
    __m256i sum16[T];
    for (int t = 0; t < T; ++t) {
      const int8_t* y = acts[t].qs + 32 * i;
      __m256i s = _mm256_maddubs_epi16(q[0], broadcast_4_bytes(y));
      for (int g = 1; g < 8; ++g) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[g], broadcast_4_bytes(y + 4 * g)));
      sum16[t] = s;
    }
    __m256 mw;
    if constexpr (kQ4_1) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16)));
    for (int t = 0; t < T; ++t) {
      __m256i isum = _mm256_madd_epi16(sum16[t], ones);  // lane r: row r's sum of q * y over the block
      if constexpr (!kQ4_1) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * acts[t].qsum[i]));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(acts[t].d + i));
      acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc[t]);
      if constexpr (kQ4_1) acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(acts[t].s + i), acc[t]);
    }
  }
  store_row_lanes<T>(acc, out);
}

// Q8_0: quants are signed, so each product is |w| * (y * sign(w)) (pair sums up to 2 * 127 * 127, too
// large to add two in int16: one madd per vector). Quant vectors are read from the record per token.
template <int T>
void gemm_q8_0_fixed(int64_t nb, const uint8_t* group, const PackedActs32* acts, float* out) {
  constexpr size_t kRecordBytes = 16 + 256;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec = group + i * kRecordBytes;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
    const uint8_t* qs = rec + 16;
    for (int t = 0; t < T; ++t) {
      const int8_t* y = acts[t].qs + 32 * i;
      __m256i isum = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
        const __m256i pairs =
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(broadcast_4_bytes(y + 4 * g), w));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, ones));
      }
      const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(acts[t].d + i));
      acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc[t]);
    }
  }
  store_row_lanes<T>(acc, out);
}

template <bool kQ4_1>
void gemm_any(int64_t n, const uint8_t* group, const PackedActs32* acts, int n_tok, float* out) {
  static_assert(kMaxBlock32Tokens == 4, "dispatch below covers 1..4 tokens");
  switch (n_tok) {
    case 1: gemm_fixed<kQ4_1, 1>(n / 32, group, acts, out); break;
    case 2: gemm_fixed<kQ4_1, 2>(n / 32, group, acts, out); break;
    case 3: gemm_fixed<kQ4_1, 3>(n / 32, group, acts, out); break;
    default: gemm_fixed<kQ4_1, 4>(n / 32, group, acts, out); break;
  }
}

}  // namespace

void gemm_interleaved_q8_0(int64_t n, const uint8_t* group, const PackedActs32* acts, int n_tok, float* out) {
  switch (n_tok) {
    case 1: gemm_q8_0_fixed<1>(n / 32, group, acts, out); break;
    case 2: gemm_q8_0_fixed<2>(n / 32, group, acts, out); break;
    case 3: gemm_q8_0_fixed<3>(n / 32, group, acts, out); break;
    default: gemm_q8_0_fixed<4>(n / 32, group, acts, out); break;
  }
}

void gemm_interleaved_q4_0(int64_t n, const uint8_t* group, const PackedActs32* acts, int n_tok, float* out) {
  gemm_any<false>(n, group, acts, n_tok, out);
}

void gemm_interleaved_q4_1(int64_t n, const uint8_t* group, const PackedActs32* acts, int n_tok, float* out) {
  gemm_any<true>(n, group, acts, n_tok, out);
}

}  // namespace kvserve::avx2
