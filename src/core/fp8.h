#pragma once
// 8-bit floats of the OCP FP8 formats, as the KV cache stores them: E4M3 (OCP "E4M3FN", PyTorch's
// float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN, largest finite 448, smallest subnormal 2^-9)
// and E5M2 (bias 15, IEEE-like: infinities and NaNs at exponent 31, largest finite 57344, smallest
// subnormal 2^-16; the high byte of an IEEE half). Conversions from f32 round to nearest, ties to even,
// and saturate: a finite value beyond the largest finite one becomes it (as vLLM's fp8 KV cache stores,
// not PyTorch's cast, which would give NaN / infinity and poison every later attention step).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kvserve {

namespace fp8_detail {

// kMan mantissa bits, exponent bias kBias; `max_finite` the format's largest finite value. Branch-light
// bit arithmetic (every K/V value of every token goes through it): below the smallest normal, a multiple
// of the subnormal step rounded by adding and removing 2^23 (f32's own round to nearest even, exact for
// these small quotients); above, the f32 bits rounded to kMan mantissa bits, ties to even, a carry
// moving into the exponent as it should.
template <int kMan, int kBias>
inline uint8_t encode(float x, float max_finite, uint8_t nan_code) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint8_t>(sign | nan_code);
  const float a = std::fmin(std::fabs(x), max_finite);
  constexpr int kMinNormalExp = 1 - kBias;
  constexpr float kMinNormal = 1.0f / static_cast<float>(1u << (kBias - 1));           // 2^(1 - kBias)
  constexpr float kSubnormalScale = static_cast<float>(1u << (kMan - kMinNormalExp));  // 1 / subnormal step
  if (a < kMinNormal) {
    // A quotient of 2^kMan is the smallest normal, whose code is the same integer.
    const float q = (a * kSubnormalScale + 8388608.0f) - 8388608.0f;
    return static_cast<uint8_t>(sign | static_cast<int>(q));
  }
  std::memcpy(&bits, &a, 4);
  constexpr int kDrop = 23 - kMan;
  bits += ((1u << (kDrop - 1)) - 1) + ((bits >> kDrop) & 1);
  const int exp = static_cast<int>(bits >> 23) - 127 + kBias;
  const auto man = static_cast<int>((bits >> kDrop) & ((1u << kMan) - 1));
  return static_cast<uint8_t>(sign | (exp << kMan) | man);
}

template <int kMan, int kBias>
inline float decode_finite(uint8_t c) {
  const int e = (c & 0x7f) >> kMan;
  const int m = c & ((1 << kMan) - 1);
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - kBias - kMan)
                         : std::ldexp(static_cast<float>((1 << kMan) + m), e - kBias - kMan);
  return (c & 0x80) ? -v : v;
}

}  // namespace fp8_detail

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

inline uint8_t fp32_to_fp8_e4m3(float x) { return fp8_detail::encode<3, 7>(x, kFp8E4M3Max, 0x7f); }
inline float fp8_e4m3_to_fp32(uint8_t c) {
  if ((c & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  return fp8_detail::decode_finite<3, 7>(c);
}

inline uint8_t fp32_to_fp8_e5m2(float x) { return fp8_detail::encode<2, 15>(x, kFp8E5M2Max, 0x7f); }
inline float fp8_e5m2_to_fp32(uint8_t c) {
  if ((c & 0x7c) == 0x7c) {
    if ((c & 0x03) != 0) return std::numeric_limits<float>::quiet_NaN();
    return (c & 0x80) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return fp8_detail::decode_finite<2, 15>(c);
}

}  // namespace kvserve
