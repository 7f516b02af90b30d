#pragma once
// 8-bit floats of the OCP FP8 formats, as the KV cache stores them: E4M3 (OCP "E4M3FN", PyTorch's
// float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN, largest finite 448, smallest subnormal 2^-9)
// and E5M2 (bias 15, IEEE-like: infinities and NaNs at exponent 31, largest finite 57344, smallest
// subnormal 2^-16; the high byte of an IEEE half). Conversions from f32 round to nearest, ties to even,
// and saturate: a finite value beyond the largest finite one becomes it (as vLLM's fp8 KV cache stores,
// not PyTorch's cast, which would give NaN / infinity and poison every later attention step).
#include <cmath>
#include <cstdint>
#include <limits>

namespace kvserve {

namespace fp8_detail {

// kMan mantissa bits, exponent bias kBias; `max_finite` the format's largest finite value.
template <int kMan, int kBias>
inline uint8_t encode(float x, float max_finite, uint8_t nan_code) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | nan_code);
  float a = std::fabs(x);
  if (a > max_finite) a = max_finite;
  constexpr int kMinNormalExp = 1 - kBias;
  if (a < std::ldexp(1.0f, kMinNormalExp)) {
    // Subnormal: multiples of 2^(kMinNormalExp - kMan); a quotient of 2^kMan is the smallest normal,
    // whose code is the same integer.
    const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, kMan - kMinNormalExp)));
    return static_cast<uint8_t>(sign | q);
  }
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;
  auto q = static_cast<int>(std::nearbyint(std::ldexp(a, kMan - exp)));  // in [2^kMan, 2^(kMan+1)]
  if (q == (1 << (kMan + 1))) {
    q = 1 << kMan;
    ++exp;
  }
  return static_cast<uint8_t>(sign | ((exp + kBias) << kMan) | (q - (1 << kMan)));
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
