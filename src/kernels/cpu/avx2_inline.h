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

}  // namespace
}  // namespace kvserve::avx2_inline
