// AVX2/FMA/F16C dot products. Compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt); only called
// after cpu_has_avx2() said yes.
//
// Every kernel is a "tile": one weight row against up to kMaxTileTokens activation rows. Each weight
// block is loaded and unpacked to int8 (or f32) once and then multiplied with every token's block, so a
// batch of tokens reads the weights once. The integer part of each block's dot is exact (maddubs never
// saturates for these value ranges, see the comments per type), so results differ from the scalar
// reference only by float summation order.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/quants.h"

namespace kvserve::avx2 {

namespace {

using avx2_inline::half_to_float;
using avx2_inline::hsum;

inline float bfloat_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Unsigned x (u8) times signed y, summed in pairs to 16 int16 and then with the given int16 weights
// into 8 int32 lanes.
inline __m256i dot_u8_i8_weighted(__m256i x, __m256i y, __m256i weights) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), weights);
}

// Accumulator sets of the float tiles (4 x 8 lanes: ggml's F16/F32 dot order, which keeps us closest to
// llama.cpp). The same for every tile size on purpose: a token's result must not depend on how many
// tokens share its tile, or the same request would give other logits (and, at near-ties, other greedy
// tokens) depending on what it was batched with, or whether its prefix came from the cache.
constexpr int kFloatAccumulatorSets = 4;

// Runs body(block_index, acc) over nb blocks with S independent accumulator sets and writes the
// horizontal sums to out[0..T). Per token, the arithmetic does not depend on T.
template <int T, int S, typename Body>
inline void accumulate_blocks(int64_t nb, Body&& body, float* out) {
  __m256 acc[S][T];
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) acc[s][t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + S <= nb; i += S)
    for (int s = 0; s < S; ++s) body(i + s, acc[s]);
  for (; i < nb; ++i) body(i, acc[0]);
  for (int t = 0; t < T; ++t) {
    __m256 v = acc[0][t];
    for (int s = 1; s < S; ++s) v = _mm256_add_ps(v, acc[s][t]);
    out[t] = hsum(v);
  }
}

template <typename Block, int T>
inline void cast_rows(const void* const* a, const Block* (&rows)[T]) {
  for (int t = 0; t < T; ++t) rows[t] = static_cast<const Block*>(a[t]);
}

// ---------------------------------------------------------------- float types

// One token (decode): the float tiles' weights stream from memory, and the core's own prefetchers alone
// left F16 at ~0.7 of what a read loop gets (1B-shaped F16, these tiles on the Xeon VM: 9.0 tok/s; 13.2-13.3
// with each line asked 16-32 KiB ahead into L2, 12.4 at 4 KiB and 10.5 at 1 KiB into L1). Measured on
// Intel only. Block i's line once: at every 64 bytes of the row.
constexpr int64_t kDecodeAheadBytes = 16 * 1024;
template <int T, typename Elem>
[[gnu::always_inline]] inline void decode_ahead(const Elem* w, int64_t i) {
  if constexpr (T == 1) {
    constexpr int64_t kBlocksPerLine = 64 / (8 * sizeof(Elem));
    if (i % kBlocksPerLine == 0)
      _mm_prefetch(reinterpret_cast<const char*>(w + 8 * i) + kDecodeAheadBytes, _MM_HINT_T1);
  }
}

// Float-like rows: weights of Elem and activation rows of Act; LoadW / LoadA turn 8 elements at an index
// into __m256, WToFloat / AToFloat one element past the last 8 into a float.
template <int T, typename Elem, typename Act, typename LoadW, typename LoadA, typename WToFloat, typename AToFloat>
inline void tile_float(int64_t n, const Elem* w, const void* const* a, float* out, LoadW load_w, LoadA load_a,
                       WToFloat w_to_float, AToFloat a_to_float) {
  constexpr int S = kFloatAccumulatorSets;
  const Act* rows[T];
  cast_rows<Act, T>(a, rows);
  accumulate_blocks<T, S>(
      n / 8,
      [&](int64_t i, __m256* acc) {
        decode_ahead<T>(w, i);
        const __m256 wv = load_w(w + 8 * i);
        for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(wv, load_a(rows[t] + 8 * i), acc[t]);
      },
      out);
  for (int64_t k = n / 8 * 8; k < n; ++k)
    for (int t = 0; t < T; ++t) out[t] = std::fma(w_to_float(w[k]), a_to_float(rows[t][k]), out[t]);
}

[[gnu::always_inline]] inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }

[[gnu::always_inline]] inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

[[gnu::always_inline]] inline __m256 load_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

constexpr auto kLoadF32 = [](const float* p) { return load_f32(p); };
constexpr auto kLoadF16 = [](const uint16_t* p) { return load_f16(p); };
constexpr auto kLoadBF16 = [](const uint16_t* p) { return load_bf16(p); };
constexpr auto kF32Value = [](float v) { return v; };
constexpr auto kF16Value = [](uint16_t v) { return half_to_float(v); };
constexpr auto kBF16Value = [](uint16_t v) { return bfloat_to_float(v); };

template <int T>
void tile_f32(int64_t n, const void* w, const void* const* a, float* out) {
  tile_float<T, float, float>(n, static_cast<const float*>(w), a, out, kLoadF32, kLoadF32, kF32Value, kF32Value);
}

template <int T>
void tile_f16(int64_t n, const void* w, const void* const* a, float* out) {
  tile_float<T, uint16_t, uint16_t>(n, static_cast<const uint16_t*>(w), a, out, kLoadF16, kLoadF16, kF16Value,
                                    kF16Value);
}

template <int T>
void tile_bf16(int64_t n, const void* w, const void* const* a, float* out) {
  tile_float<T, uint16_t, uint16_t>(n, static_cast<const uint16_t*>(w), a, out, kLoadBF16, kLoadBF16, kBF16Value,
                                    kBF16Value);
}

// F16 / BF16 weights against activations already rounded to their type and widened back to the floats
// they are (exact): only the weights are converted, where dot_tile_f16 / dot_tile_bf16 also convert each
// token's block again for every row. The same products in the same order: the same bits.
template <int T>
void tile_f16_wide(int64_t n, const void* w, const void* const* a, float* out) {
  tile_float<T, uint16_t, float>(n, static_cast<const uint16_t*>(w), a, out, kLoadF16, kLoadF32, kF16Value, kF32Value);
}

template <int T>
void tile_bf16_wide(int64_t n, const void* w, const void* const* a, float* out) {
  tile_float<T, uint16_t, float>(n, static_cast<const uint16_t*>(w), a, out, kLoadBF16, kLoadF32, kBF16Value,
                                 kF32Value);
}

// ---------------------------------------------------------------- K-quants (256-element blocks)

// Q4_K/Q5_K packed 6-bit scales -> 8 scales then 8 mins, one byte each.
inline void unpack_k_scales(const uint8_t* packed, uint8_t* scales_then_mins) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // mins 4..7
  const uint32_t mins_0_3 = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);  // scales 4..7
  u[2] = mins_0_3;
  u[0] &= kLow6;  // scales 0..3
  std::memcpy(scales_then_mins, u, 16);
}

// Q8_K bsums summed per 32 elements (8 int16), matching the Q4_K/Q5_K sub-blocks.
inline __m128i bsums_per_32(const BlockQ8_K& a) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums + 8));
  return _mm_hadd_epi16(lo, hi);
}

// Q4_K and Q5_K differ only in how the 64 quants of step j are produced. Values are < 32 so
// maddubs pair sums stay below 2 * 31 * 127; scales < 64 keep the int32 block sum far from overflow.
template <int T, typename Quants>
inline void tile_k_scale_min(int64_t nb, const void* const* a, float* out, Quants quants) {
  const BlockQ8_K* rows[T];
  cast_rows<BlockQ8_K, T>(a, rows);
  accumulate_blocks<T, 1>(
      nb,
      [&](int64_t i, __m256* acc) {
        float d, dmin;
        const uint8_t* packed_scales;
        quants.begin_block(i, &d, &dmin, &packed_scales);
        alignas(16) uint8_t scales_mins[16];
        unpack_k_scales(packed_scales, scales_mins);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales_mins + 8)));

        __m256i sumi[T];
        for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
        for (int j = 0; j < kQK_K / 64; ++j) {
          __m256i q_low, q_high;  // elements 64j..64j+31 and 64j+32..64j+63
          quants.step(j, &q_low, &q_high);
          const __m256i scale_low = _mm256_set1_epi16(scales_mins[2 * j]);
          const __m256i scale_high = _mm256_set1_epi16(scales_mins[2 * j + 1]);
          for (int t = 0; t < T; ++t) {
            const int8_t* y = rows[t][i].qs + 64 * j;
            const __m256i y_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
            const __m256i y_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32));
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(dot_u8_i8_weighted(q_low, y_low, scale_low),
                                                                 dot_u8_i8_weighted(q_high, y_high, scale_high)));
          }
        }
        for (int t = 0; t < T; ++t) {
          const BlockQ8_K& y = rows[t][i];
          // min term: dmin * sum_j m_j * (sum of y over sub-block j), folded into the low 4 lanes.
          const __m256i min_sum = _mm256_zextsi128_si256(_mm_madd_epi16(mins, bsums_per_32(y)));
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
          acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * y.d), _mm256_cvtepi32_ps(min_sum), acc[t]);
        }
      },
      out);
}

struct Q4KQuants {
  const BlockQ4_K* blocks;
  const BlockQ4_K* cur = nullptr;
  void begin_block(int64_t i, float* d, float* dmin, const uint8_t** scales) {
    cur = blocks + i;
    *d = half_to_float(cur->d);
    *dmin = half_to_float(cur->dmin);
    *scales = cur->scales;
  }
  void step(int j, __m256i* low, __m256i* high) const {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cur->qs + 32 * j));
    const __m256i mask = _mm256_set1_epi8(0x0F);
    *low = _mm256_and_si256(bits, mask);
    *high = _mm256_and_si256(_mm256_srli_epi16(bits, 4), mask);
  }
};

struct Q5KQuants {
  const BlockQ5_K* blocks;
  const BlockQ5_K* cur = nullptr;
  __m256i high_bits{};  // qh shifted right by 2j before step j: bit 0 -> low half, bit 1 -> high half
  void begin_block(int64_t i, float* d, float* dmin, const uint8_t** scales) {
    cur = blocks + i;
    *d = half_to_float(cur->d);
    *dmin = half_to_float(cur->dmin);
    *scales = cur->scales;
    high_bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cur->qh));
  }
  void step(int j, __m256i* low, __m256i* high) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cur->qs + 32 * j));
    const __m256i mask4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    // Shifts are 16-bit wide; the masks drop bits that crossed in from the neighbouring byte.
    *low = _mm256_or_si256(_mm256_and_si256(bits, mask4), _mm256_and_si256(_mm256_slli_epi16(high_bits, 4), bit4));
    *high = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), mask4),
                            _mm256_and_si256(_mm256_slli_epi16(high_bits, 3), bit4));
    high_bits = _mm256_srli_epi16(high_bits, 2);
  }
};

template <int T>
void tile_q4_K(int64_t n, const void* w, const void* const* a, float* out) {
  tile_k_scale_min<T>(n / kQK_K, a, out, Q4KQuants{static_cast<const BlockQ4_K*>(w)});
}

template <int T>
void tile_q5_K(int64_t n, const void* w, const void* const* a, float* out) {
  tile_k_scale_min<T>(n / kQK_K, a, out, Q5KQuants{static_cast<const BlockQ5_K*>(w)});
}

// Q6_K: quants are used unsigned (0..63, maddubs pair sums <= 2 * 63 * 127 < 2^15); the -32 offset is
// applied once per block through the Q8_K bsums: sum_g sc_g * sum(y in g) * 32.
template <int T>
void tile_q6_K(int64_t n, const void* w, const void* const* a, float* out) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* rows[T];
  cast_rows<BlockQ8_K, T>(a, rows);
  accumulate_blocks<T, 1>(
      n / kQK_K,
      [&](int64_t i, __m256* acc) {
        const BlockQ6_K& b = wb[i];
        const __m256i mask4 = _mm256_set1_epi8(0x0F);
        const __m256i mask2 = _mm256_set1_epi8(0x03);
        const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
        __m256i sumi[T];
        for (int t = 0; t < T; ++t) {
          const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].bsums));
          sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5));
        }
        for (int half = 0; half < 2; ++half) {
          const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * half));
          const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * half + 32));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * half));
          __m256i q[4];  // elements 128*half + 32k .. +31
          q[0] = _mm256_or_si256(_mm256_and_si256(ql0, mask4), _mm256_slli_epi16(_mm256_and_si256(qh, mask2), 4));
          q[1] = _mm256_or_si256(_mm256_and_si256(ql1, mask4),
                                 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), mask2), 4));
          q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask4),
                                 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), mask2), 4));
          q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask4),
                                 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), mask2), 4));
          for (int k = 0; k < 4; ++k) {
            const int group = 8 * half + 2 * k;  // 16-element scale groups of this 32-element run
            const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(b.scales[group + 1]), _mm_set1_epi16(b.scales[group]));
            for (int t = 0; t < T; ++t) {
              const __m256i y =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].qs + 128 * half + 32 * k));
              sumi[t] = _mm256_add_epi32(sumi[t], dot_u8_i8_weighted(q[k], y, scale));
            }
          }
        }
        const float d = half_to_float(b.d);
        for (int t = 0; t < T; ++t)
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * rows[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      },
      out);
}

// ---------------------------------------------------------------- IQ4_XS (non-uniform 4-bit levels)

// Signed x times signed y summed in pairs (|x| <= 127, so pair sums stay within int16), then in 8 int32 lanes
// with the given int16 weights.
inline __m256i dot_i8_i8_weighted(__m256i x, __m256i y, __m256i weights) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)), weights);
}

template <int T>
void tile_iq4_xs(int64_t n, const void* w, const void* const* a, float* out) {
  const auto* wb = static_cast<const BlockIQ4_XS*>(w);
  const BlockQ8_K* rows[T];
  cast_rows<BlockQ8_K, T>(a, rows);
  accumulate_blocks<T, 1>(
      n / kQK_K,
      [&](int64_t i, __m256* acc) {
        const BlockIQ4_XS& b = wb[i];
        __m256i sumi[T];
        for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
          const __m256i q = avx2_inline::iq4_levels_32(b.qs + 16 * ib, kIQ4Values);
          const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(b, ib)));
          for (int t = 0; t < T; ++t) {
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].qs + 32 * ib));
            sumi[t] = _mm256_add_epi32(sumi[t], dot_i8_i8_weighted(q, y, scale));
          }
        }
        const float d = half_to_float(b.d);
        for (int t = 0; t < T; ++t)
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * rows[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      },
      out);
}

// ---------------------------------------------------------------- 2- and 3-bit K-quants

// The 32 two-bit fields at bits 2j..2j+1 of 32 bytes: elements 32j..32j+31 of a 128-element half.
inline __m256i two_bits(__m256i bytes, int j) {
  return _mm256_and_si256(_mm256_srlv_epi32(bytes, _mm256_set1_epi32(2 * j)), _mm256_set1_epi8(3));
}

// int16 weights for 32 elements: sub-block g's in the low 128-bit lane, g + 1's in the high one.
inline __m256i scale_pair(int low, int high) { return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(high)), _mm_set1_epi16(static_cast<int16_t>(low))); }

// Q2_K x Q8_K: quants 0..3 with a 4-bit scale and min per 16 elements. The min term goes through the
// activations' bsums, as Q4_K's.
template <int T>
void tile_q2_K(int64_t n, const void* w, const void* const* a, float* out) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* rows[T];
  cast_rows<BlockQ8_K, T>(a, rows);
  accumulate_blocks<T, 1>(
      n / kQK_K,
      [&](int64_t i, __m256* acc) {
        const BlockQ2_K& b = wb[i];
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
        __m256i sumi[T];
        for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
        for (int half = 0; half < 2; ++half) {
          const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * half));
          for (int j = 0; j < 4; ++j) {
            const int g = 8 * half + 2 * j;
            const __m256i q = two_bits(bytes, j);
            const __m256i scale = scale_pair(b.scales[g] & 0xF, b.scales[g + 1] & 0xF);
            for (int t = 0; t < T; ++t) {
              const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].qs + 128 * half + 32 * j));
              sumi[t] = _mm256_add_epi32(sumi[t], dot_u8_i8_weighted(q, y, scale));
            }
          }
        }
        const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
        for (int t = 0; t < T; ++t) {
          const BlockQ8_K& y = rows[t][i];
          const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
          acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(y.d * dmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums)), acc[t]);
        }
      },
      out);
}

// Q3_K x Q8_K: quants -4..3 used unsigned (q + 4, 0..7: maddubs pair sums <= 2 * 7 * 128), the +4 taken
// off through the bsums (sum_g scale_g * 4 * sum(y in g)); signed 6-bit scales per 16 elements.
template <int T>
void tile_q3_K(int64_t n, const void* w, const void* const* a, float* out) {
  const auto* wb = static_cast<const BlockQ3_K*>(w);
  const BlockQ8_K* rows[T];
  cast_rows<BlockQ8_K, T>(a, rows);
  accumulate_blocks<T, 1>(
      n / kQK_K,
      [&](int64_t i, __m256* acc) {
        const BlockQ3_K& b = wb[i];
        alignas(16) int8_t scales[16];
        unpack_q3_K_scales(b.scales, scales);
        const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(scales)));
        const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
        __m256i sumi[T];
        for (int t = 0; t < T; ++t) {
          const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].bsums));
          sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 2));
        }
        for (int half = 0; half < 2; ++half) {
          const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * half));
          for (int j = 0; j < 4; ++j) {
            const int g = 8 * half + 2 * j;
            const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(hmask, _mm256_set1_epi32(4 * half + j)), _mm256_set1_epi8(1));
            const __m256i q = _mm256_or_si256(two_bits(bytes, j), _mm256_slli_epi16(high, 2));
            const __m256i scale = scale_pair(scales[g], scales[g + 1]);
            for (int t = 0; t < T; ++t) {
              const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i].qs + 128 * half + 32 * j));
              sumi[t] = _mm256_add_epi32(sumi[t], dot_u8_i8_weighted(q, y, scale));
            }
          }
        }
        const float d = half_to_float(b.d);
        for (int t = 0; t < T; ++t)
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * rows[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      },
      out);
}

// Dispatches a runtime token count 1..4 to the templated tile.
#define KVSERVE_TILE_DISPATCH(name)                                                         \
  void dot_tile_##name(int64_t n, const void* w, const void* const* a, int n_tok, float* out) { \
    switch (n_tok) {                                                                        \
      case 1: tile_##name<1>(n, w, a, out); break;                                          \
      case 2: tile_##name<2>(n, w, a, out); break;                                          \
      case 3: tile_##name<3>(n, w, a, out); break;                                          \
      default: tile_##name<4>(n, w, a, out); break;                                         \
    }                                                                                       \
  }

}  // namespace

static_assert(kMaxTileTokens == 4, "KVSERVE_TILE_DISPATCH handles 1..4 tokens");

KVSERVE_TILE_DISPATCH(f32)
KVSERVE_TILE_DISPATCH(f16)
KVSERVE_TILE_DISPATCH(bf16)
KVSERVE_TILE_DISPATCH(f16_wide)
KVSERVE_TILE_DISPATCH(bf16_wide)
KVSERVE_TILE_DISPATCH(q2_K)
KVSERVE_TILE_DISPATCH(q3_K)
KVSERVE_TILE_DISPATCH(iq4_xs)
KVSERVE_TILE_DISPATCH(q4_K)
KVSERVE_TILE_DISPATCH(q5_K)
KVSERVE_TILE_DISPATCH(q6_K)
#undef KVSERVE_TILE_DISPATCH

namespace {
template <typename W, typename A>
float single(void (*tile)(int64_t, const void*, const void* const*, int, float*), int64_t n, const W* w, const A* a) {
  const void* rows[1] = {a};
  float out = 0.0f;
  tile(n, w, rows, 1, &out);
  return out;
}
}  // namespace

float vec_dot_f32_f32(int64_t n, const float* w, const float* a) { return single(dot_tile_f32, n, w, a); }
float vec_dot_f16_f16(int64_t n, const uint16_t* w, const uint16_t* a) { return single(dot_tile_f16, n, w, a); }
float vec_dot_bf16_bf16(int64_t n, const uint16_t* w, const uint16_t* a) { return single(dot_tile_bf16, n, w, a); }
float vec_dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a) { return single(dot_tile_q2_K, n, w, a); }
float vec_dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a) { return single(dot_tile_q3_K, n, w, a); }
float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a) { return single(dot_tile_iq4_xs, n, w, a); }
float vec_dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) { return single(dot_tile_q4_K, n, w, a); }
float vec_dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a) { return single(dot_tile_q5_K, n, w, a); }
float vec_dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a) { return single(dot_tile_q6_K, n, w, a); }

}  // namespace kvserve::avx2

namespace kvserve::avx2 {

namespace {

// roundf (half away from zero) on 8 lanes, bit-exact: truncate, then step away from zero when the
// dropped fraction (exact in float for |x| < 2^23) is at least one half.
inline __m256 round_half_away(__m256 v) {
  const __m256 truncated = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, truncated));
  const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign_mask), _mm256_set1_ps(1.0f));  // +-1 with v's sign
  const __m256 away = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm256_add_ps(truncated, _mm256_and_ps(away, step));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline uint16_t float_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

// The 32 elements of x times mul, rounded half away from zero: the int32 quants in q, the int8 ones
// (saturated) stored to qs and returned.
inline __m256i quantize_32_with(const float* x, __m256 mul, int8_t* qs, __m256i (&q)[4]) {
  for (int k = 0; k < 4; ++k)
    q[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), mul)));
  // int32 -> int8 with the lanes back in order (packs interleave the 128-bit halves).
  const __m256i q01 = _mm256_packs_epi32(q[0], q[1]);
  const __m256i q23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), bytes);
  return bytes;
}

// One 32-element block: the quants into qs, returns d (unrounded) and the quant sum in *sum.
inline float quantize_block_32(const float* x, int8_t* qs, int* sum) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    // Operand order as std::max(amax, |x|): a NaN element leaves amax alone, like the scalar quantizer.
    amax = _mm256_max_ps(_mm256_andnot_ps(sign_mask, v[k]), amax);
  }
  const float d = hmax(amax) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  __m256i q[4];
  quantize_32_with(x, _mm256_set1_ps(id), qs, q);
  if (sum != nullptr) {
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    *sum = _mm_cvtsi128_si32(s4);
  }
  return d;
}

// A block whose largest magnitude is 0 (all zeros or NaNs): the scalar quantizer's answer.
inline void quantize_row_q8_K_scalar_block(const float* x, BlockQ8_K* y) { kvserve::quantize_row_q8_K(x, y, kQK_K); }

}  // namespace

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void round_row_f16_wide(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  for (; i < n; ++i) y[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void round_row_bf16_wide(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) y[i].d = float_to_half(quantize_block_32(x + i * kQK8_0, y[i].qs, nullptr));
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    int sum = 0;
    const float d = quantize_block_32(x + i * kQK8_1, y[i].qs, &sum);
    y[i].d = float_to_half(d);
    y[i].s = float_to_half(static_cast<float>(sum) * d);
  }
}

namespace {

// Lane k = the maximum of the 8 lanes of v[k] (no NaN lanes): a transposing reduction, exact for max.
inline __m256 hmax8(const __m256 (&v)[8]) {
  const auto pair_max = [](__m256 a, __m256 b) {
    return _mm256_max_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
  };
  const __m256 h0123 = pair_max(pair_max(v[0], v[1]), pair_max(v[2], v[3]));
  const __m256 h4567 = pair_max(pair_max(v[4], v[5]), pair_max(v[6], v[7]));
  return _mm256_max_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// Lane k = the sum of the 8 int32 lanes of v[k].
inline __m256i hsum8_epi32(const __m256i (&v)[8]) {
  const __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                          _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// Eight 32-element blocks of x: quants to qs, fp16-rounded scales (as floats) to d, and per block either
// 8 * the sum of the stored int8 quants (q4_offset) or the fp16-rounded d * the quant sum (s), exactly as
// quantize_row_q8_0 / quantize_row_q8_1 followed by ActPack32::pack give them: the same per-lane
// operations, with the scale's horizontal max, divisions and fp16 roundings done for 8 blocks at once
// (one block at a time they were a latency chain of ~38 cycles per block).
template <bool kQ8_1>
inline void quantize_8_blocks_packed(const float* x, int8_t* qs, float* d, int32_t* q4_offset, float* s) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 amax[8];
  for (int b = 0; b < 8; ++b) {
    amax[b] = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k)
      // Operand order as quantize_block_32: a NaN element leaves amax alone.
      amax[b] = _mm256_max_ps(_mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 32 * b + 8 * k)), amax[b]);
  }
  const __m256 dv = _mm256_div_ps(hmax8(amax), _mm256_set1_ps(127.0f));
  const __m256 nonzero = _mm256_cmp_ps(dv, _mm256_setzero_ps(), _CMP_NEQ_UQ);
  const __m256 idv = _mm256_and_ps(nonzero, _mm256_div_ps(_mm256_set1_ps(1.0f), dv));
  _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm256_cvtps_ph(dv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  alignas(32) float id[8];
  _mm256_store_ps(id, idv);
  __m256i sums[8];
  for (int b = 0; b < 8; ++b) {
    __m256i q[4];
    const __m256i bytes = quantize_32_with(x + 32 * b, _mm256_set1_ps(id[b]), qs + 32 * b, q);
    if constexpr (kQ8_1) {
      // quantize_row_q8_1 sums the int32 quants (before the int8 saturation).
      sums[b] = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    } else {
      // ActPack32::pack sums the stored int8 quants.
      sums[b] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes), _mm256_set1_epi16(1));
    }
  }
  const __m256i total = hsum8_epi32(sums);
  if constexpr (kQ8_1) {
    const __m256 sd = _mm256_mul_ps(_mm256_cvtepi32_ps(total), dv);
    _mm256_storeu_ps(s, _mm256_cvtph_ps(_mm256_cvtps_ph(sd, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q4_offset), _mm256_slli_epi32(total, 3));
  }
}

template <bool kQ8_1>
void quantize_row_packed(const float* x, int8_t* qs, float* d, int32_t* q4_offset, float* s, int64_t n) {
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8)
    quantize_8_blocks_packed<kQ8_1>(x + 32 * i, qs + 32 * i, d + i, kQ8_1 ? nullptr : q4_offset + i,
                                    kQ8_1 ? s + i : nullptr);
  for (; i < nb; ++i) {
    int sum = 0;
    const float di = quantize_block_32(x + 32 * i, qs + 32 * i, kQ8_1 ? &sum : nullptr);
    d[i] = _cvtsh_ss(float_to_half(di));
    if constexpr (kQ8_1) {
      s[i] = _cvtsh_ss(float_to_half(static_cast<float>(sum) * di));
    } else {
      int32_t bytes_sum = 0;
      for (int j = 0; j < 32; ++j) bytes_sum += qs[32 * i + j];
      q4_offset[i] = 8 * bytes_sum;
    }
  }
}

}  // namespace

void quantize_row_q8_0_packed(const float* x, int8_t* qs, float* d, int32_t* q4_offset, int64_t n) {
  quantize_row_packed<false>(x, qs, d, q4_offset, nullptr, n);
}

void quantize_row_q8_1_packed(const float* x, int8_t* qs, float* d, float* s, int64_t n) {
  quantize_row_packed<true>(x, qs, d, nullptr, s, n);
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 magic = _mm256_set1_ps(12582912.f);  // nearest_int's 1.5 * 2^23
  const __m256i mantissa = _mm256_set1_epi32(0x007fffff);
  const __m256i bias = _mm256_set1_epi32(0x00400000);
  const __m256i max_q = _mm256_set1_epi32(127);
  const __m256i low_byte = _mm256_set1_epi32(0xff);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < kQK_K / 8; ++k)
      // Operand order as the scalar `ax > amax`: a NaN element leaves amax alone.
      amax = _mm256_max_ps(_mm256_andnot_ps(sign_mask, _mm256_loadu_ps(xb + 8 * k)), amax);
    const float am = hmax(amax);
    if (am == 0.0f) {
      quantize_row_q8_K_scalar_block(xb, y + i);
      continue;
    }
    // The scale comes from the first element of largest magnitude, with its sign, as in the scalar one.
    int first = -1;
    const __m256 target = _mm256_set1_ps(am);
    for (int k = 0; k < kQK_K / 8 && first < 0; ++k) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign_mask, _mm256_loadu_ps(xb + 8 * k)), target, _CMP_EQ_OQ));
      if (hit != 0) first = 8 * k + __builtin_ctz(static_cast<unsigned>(hit));
    }
    const float iscale = -127.0f / xb[first];
    const __m256 scale = _mm256_set1_ps(iscale);
    for (int k = 0; k < kQK_K / 32; ++k) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        __m256 prod = _mm256_mul_ps(scale, _mm256_loadu_ps(xb + 32 * k + 8 * j));
        // nearest_int rounds the product to float and then adds: no fused multiply-add here.
        asm("" : "+x"(prod));
        const __m256i bits = _mm256_castps_si256(_mm256_add_ps(prod, magic));
        const __m256i v = _mm256_min_epi32(_mm256_sub_epi32(_mm256_and_si256(bits, mantissa), bias), max_q);
        q[j] = _mm256_and_si256(v, low_byte);  // the int8 cast keeps the low byte
      }
      const __m256i q01 = _mm256_packus_epi32(q[0], q[1]);
      const __m256i q23 = _mm256_packus_epi32(q[2], q[3]);
      const __m256i bytes =
          _mm256_permutevar8x32_epi32(_mm256_packus_epi16(q01, q23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 32 * k), bytes);
      // Sums of 16 quants: byte pairs, then 4-lane int32 sums, one 128-bit half per 16 elements.
      const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes), _mm256_set1_epi16(1));
      const __m256i sum8 = _mm256_hadd_epi32(sum4, sum4);
      const __m256i sum16 = _mm256_hadd_epi32(sum8, sum8);
      y[i].bsums[2 * k] = static_cast<int16_t>(_mm256_cvtsi256_si32(sum16));
      y[i].bsums[2 * k + 1] = static_cast<int16_t>(_mm256_extract_epi32(sum16, 4));
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace kvserve::avx2
