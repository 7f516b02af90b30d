#pragma once
// Small AVX2 helpers shared by the *_avx2.cpp kernels. Include only from files compiled with
// -mavx2 -mfma -mf16c. Everything here has internal linkage (unnamed namespace) on purpose: an inline
// function with external linkage instantiated in an AVX2-compiled file could be the copy the linker
// keeps for every caller, and would then run AVX2 code on any CPU.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvserve::avx2_inline {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i broadcast_4_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Byte k = 0xFF where bit k of `bits` is set, else 0.
inline __m256i bytes_from_bits(uint32_t bits) {
  // shuffle_epi8 stays within 128-bit lanes: the low lane spreads bytes 0-1 of the broadcast, the high 2-3.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) in the low lane, high nibbles
// (elements 16..31) in the high lane.
inline __m256i unpack_nibbles_32(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// The 32 quants 0..31 of a Q5_0 / Q5_1 block in element order: the nibbles, and bit j of qh as element
// j's 5th bit.
inline __m256i unpack_5bit_32(const uint8_t* qs, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_or_si256(unpack_nibbles_32(qs), _mm256_and_si256(bytes_from_bits(bits), _mm256_set1_epi8(0x10)));
}

// The 32 signed levels of an IQ4_NL block / IQ4_XS run of 16 index bytes, in element order (`levels`:
// the 16 levels).
inline __m256i iq4_levels_32(const uint8_t* qs, const int8_t* levels) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(levels));
  return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), unpack_nibbles_32(qs));
}

}  // namespace
}  // namespace kvserve::avx2_inline
