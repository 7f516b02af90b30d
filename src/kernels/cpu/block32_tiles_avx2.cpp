// AVX2 tiles of block32_tiles.h. Compiled with -mavx2 -mfma -mf16c; only called after cpu_has_avx2().
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/block32_tiles.h"
#include "kernels/cpu/quants.h"

namespace kvserve::avx2 {

namespace {

using avx2_inline::half_to_float;
using avx2_inline::hsum;
using avx2_inline::iq4_levels_32;
using avx2_inline::unpack_5bit_32;
using avx2_inline::unpack_nibbles_32;

// Weight block policies. Signed quants (Q8_0, Q4_0 after -8) go through maddubs as |x| * (y * sign(x));
// |x| <= 128 and |y| <= 127 keep every pair sum below 2^15. Q4_1's quants are 0..15 and used unsigned
// directly; its min term m * s needs no per-element work.
struct Q8_0Weights {
  using Block = BlockQ8_0;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static __m256i quants(const Block& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
  static float min(const Block&) { return 0.0f; }
};

struct Q4_0Weights {
  using Block = BlockQ4_0;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static __m256i quants(const Block& b) { return _mm256_sub_epi8(unpack_nibbles_32(b.qs), _mm256_set1_epi8(8)); }
  static float min(const Block&) { return 0.0f; }
};

struct Q4_1Weights {
  using Block = BlockQ4_1;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static constexpr bool kSigned = false;
  static constexpr bool kHasMin = true;
  static __m256i quants(const Block& b) { return unpack_nibbles_32(b.qs); }
  static float min(const Block& b) { return half_to_float(b.m); }
};

// Q5_0: 0..31 less 16; IQ4_NL: its signed levels (-127..113); Q5_1: 0..31 unsigned, with Q4_1's min term.
struct Q5_0Weights {
  using Block = BlockQ5_0;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static __m256i quants(const Block& b) { return _mm256_sub_epi8(unpack_5bit_32(b.qs, b.qh), _mm256_set1_epi8(16)); }
  static float min(const Block&) { return 0.0f; }
};

struct IQ4_NLWeights {
  using Block = BlockIQ4_NL;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static __m256i quants(const Block& b) { return iq4_levels_32(b.qs, kIQ4Values); }
  static float min(const Block&) { return 0.0f; }
};

// MXFP4: the levels twice E2M1's (-12..12), the scale 2^(e - 128).
struct MXFP4Weights {
  using Block = BlockMXFP4;
  static float scale(const Block& b) { return mxfp4_half_scale(b.e); }
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  static __m256i quants(const Block& b) { return iq4_levels_32(b.qs, kMXFP4Values); }
  static float min(const Block&) { return 0.0f; }
};

struct Q5_1Weights {
  using Block = BlockQ5_1;
  static float scale(const Block& b) { return half_to_float(b.d); }
  static constexpr bool kSigned = false;
  static constexpr bool kHasMin = true;
  static __m256i quants(const Block& b) { return unpack_5bit_32(b.qs, b.qh); }
  static float min(const Block& b) { return half_to_float(b.m); }
};

template <typename W, int R, int T>
void tile_fixed(int64_t nb, const uint8_t* w, size_t row_stride, const PackedActs32* acts, float* out) {
  using Block = typename W::Block;
  const Block* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const Block*>(w + r * row_stride);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
  float offset[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      acc[r][t] = _mm256_setzero_ps();
      offset[r][t] = 0.0f;
    }
  for (int64_t i = 0; i < nb; ++i) {
    __m256i x[R], abs_x[R];
    __m256 dw[R];
    float mw[R];
    for (int r = 0; r < R; ++r) {
      x[r] = W::quants(rows[r][i]);
      if constexpr (W::kSigned) abs_x[r] = _mm256_sign_epi8(x[r], x[r]);
      dw[r] = _mm256_set1_ps(W::scale(rows[r][i]));
      if constexpr (W::kHasMin) mw[r] = W::min(rows[r][i]);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i y = _mm256_load_si256(reinterpret_cast<const __m256i*>(acts[t].qs + 32 * i));
      const __m256 da = _mm256_broadcast_ss(acts[t].d + i);
      for (int r = 0; r < R; ++r) {
        __m256i pairs;
        if constexpr (W::kSigned) {
          pairs = _mm256_maddubs_epi16(abs_x[r], _mm256_sign_epi8(y, x[r]));
        } else {
          pairs = _mm256_maddubs_epi16(x[r], y);
        }
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), sum, acc[r][t]);
        if constexpr (W::kHasMin) offset[r][t] = std::fma(mw[r], acts[t].s[i], offset[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]) + offset[r][t];
}

template <typename W>
void tile_any(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
              float* out) {
  using Fn = void (*)(int64_t, const uint8_t*, size_t, const PackedActs32*, float*);
  static_assert(kMaxTileRows == 4 && kMaxBlock32Tokens == 4, "the table below covers 4 x 4");
  static constexpr Fn kTable[4][4] = {
      {tile_fixed<W, 1, 1>, tile_fixed<W, 1, 2>, tile_fixed<W, 1, 3>, tile_fixed<W, 1, 4>},
      {tile_fixed<W, 2, 1>, tile_fixed<W, 2, 2>, tile_fixed<W, 2, 3>, tile_fixed<W, 2, 4>},
      {tile_fixed<W, 3, 1>, tile_fixed<W, 3, 2>, tile_fixed<W, 3, 3>, tile_fixed<W, 3, 4>},
      {tile_fixed<W, 4, 1>, tile_fixed<W, 4, 2>, tile_fixed<W, 4, 3>, tile_fixed<W, 4, 4>},
  };
  kTable[n_rows - 1][n_tok - 1](n / 32, w, row_stride, acts, out);
}

}  // namespace

void tile_q8_0(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out) {
  tile_any<Q8_0Weights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

void tile_q4_0(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out) {
  tile_any<Q4_0Weights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

void tile_q4_1(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out) {
  tile_any<Q4_1Weights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

void tile_q5_0(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out) {
  tile_any<Q5_0Weights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

void tile_q5_1(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out) {
  tile_any<Q5_1Weights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

void tile_iq4_nl(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
                 float* out) {
  tile_any<IQ4_NLWeights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

void tile_mxfp4(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
                float* out) {
  tile_any<MXFP4Weights>(n, w, row_stride, n_rows, acts, n_tok, out);
}

}  // namespace kvserve::avx2
