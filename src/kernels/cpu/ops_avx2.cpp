// AVX2 elementwise kernels of ops.h. Compiled with -mavx2 -mfma -mf16c; only called after cpu_has_avx2().
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace kvserve::avx2 {

namespace {

// exp(x) for x in [kExpLow, kExpHigh], where 2^n stays a normal float: Cephes' expf (n = round(x / ln 2),
// x - n ln 2 in two parts so the reduction is exact to float precision, degree-6 polynomial; silu built on
// it stays within 4 ulp of the std::exp formula, tested). Lanes outside the range are left to the caller.
constexpr float kExpLow = -87.0f;
constexpr float kExpHigh = 88.0f;

inline __m256 exp_in_range(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

}  // namespace

// Every element goes through exactly one of two formulas chosen by its own value (the vector one in
// range, the scalar one outside it or for NaN), never by its neighbours or its position: so a token's
// output is the same bits alone or at any offset in a batch, whatever the row length.
namespace {

// g / (1 + exp(x)) * m for 8 lanes, x in exp_in_range's range; `mask` gets a 1 bit for each such lane, the
// others (out of range, or NaN) left to the caller's scalar formula.
inline __m256 sigmoid_gated(__m256 g, __m256 x, __m256 m, int& mask) {
  // Ordered compares are false for NaN, so a NaN lane also takes the scalar formula.
  const __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kExpLow), _CMP_GE_OQ),
                                        _mm256_cmp_ps(x, _mm256_set1_ps(kExpHigh), _CMP_LE_OQ));
  const __m256 e = exp_in_range(_mm256_and_ps(x, in_range));  // out-of-range lanes: e^0, replaced by the caller
  mask = _mm256_movemask_ps(in_range);
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), m);
}

// Stores r, with the lanes `mask` leaves out computed by `scalar` (element j alone) instead. Patched in a copy:
// out may be an input, whose lanes the scalar formula still reads.
template <typename Scalar>
inline void store_patched(__m256 r, int mask, float* out, const Scalar& scalar) {
  if (mask == 0xFF) {
    _mm256_storeu_ps(out, r);
    return;
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, r);
  for (int j = 0; j < 8; ++j)
    if ((mask >> j & 1) == 0) scalar(j, lanes + j);
  std::copy(lanes, lanes + 8, out);
}

inline void silu_mul_8(const float* gate, const float* up, float* out) {
  const __m256 g = _mm256_loadu_ps(gate);
  int mask = 0;
  const __m256 r = sigmoid_gated(g, _mm256_sub_ps(_mm256_setzero_ps(), g), _mm256_loadu_ps(up), mask);
  store_patched(r, mask, out, [&](int j, float* o) { silu_mul_ref(gate + j, up + j, o, 1); });
}

// As swiglu_oai_mul_ref, lane by lane: min / max with the limit second so a NaN input stays NaN, as
// std::min / std::clamp keep it; alpha * -g as the scalar formula rounds it.
inline void swiglu_oai_8(const float* gate, const float* up, float* out, float alpha, float limit) {
  const __m256 lim = _mm256_set1_ps(limit);
  const __m256 g = _mm256_min_ps(lim, _mm256_loadu_ps(gate));
  const __m256 u = _mm256_min_ps(lim, _mm256_max_ps(_mm256_set1_ps(-limit), _mm256_loadu_ps(up)));
  const __m256 x = _mm256_mul_ps(_mm256_set1_ps(alpha), _mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
  int mask = 0;
  const __m256 r = sigmoid_gated(g, x, _mm256_add_ps(u, _mm256_set1_ps(1.0f)), mask);
  store_patched(r, mask, out, [&](int j, float* o) { swiglu_oai_mul_ref(gate + j, up + j, o, 1, alpha, limit); });
}

// g / (1 + exp(-2u)) * up, -2u as gelu_exact_mul_ref rounds it.
inline void gelu_exact_8(const float* gate, const float* up, float* out) {
  const __m256 g = _mm256_loadu_ps(gate);
  const __m256 t = _mm256_fmadd_ps(_mm256_set1_ps(kGeluCoefA), _mm256_mul_ps(g, g), _mm256_set1_ps(1.0f));
  const __m256 x = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluMinus2Sqrt2OverPi), g), t);
  int mask = 0;
  const __m256 r = sigmoid_gated(g, x, _mm256_loadu_ps(up), mask);
  store_patched(r, mask, out, [&](int j, float* o) { gelu_exact_mul_ref(gate + j, up + j, o, 1); });
}

// Rows of n through an 8-lane step: the last partial 8 padded with zeros in a copy.
template <typename Step>
inline void by_8(const float* gate, const float* up, float* out, int64_t n, const Step& step) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) step(gate + i, up + i, out + i);
  if (i < n) {
    float g[8] = {}, u[8] = {}, o[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    step(g, u, o);
    std::copy(o, o + (n - i), out + i);
  }
}

}  // namespace

void silu_mul(const float* gate, const float* up, float* out, int64_t n) { by_8(gate, up, out, n, silu_mul_8); }

void gelu_exact_mul(const float* gate, const float* up, float* out, int64_t n) { by_8(gate, up, out, n, gelu_exact_8); }

void swiglu_oai_mul(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  by_8(gate, up, out, n, [&](const float* g, const float* u, float* o) { swiglu_oai_8(g, u, o, alpha, limit); });
}

// Two passes instead of the scalar loop's compare chain through x[best] (a 128k vocabulary, one row per
// sequence per step): the maximum over the non-NaN elements, then the first index holding it (== also
// matches a -0.0 against +0.0, which the scalar `>` treats as equal too).
int64_t argmax(const float* x, int64_t n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  // _mm256_max_ps(a, b) returns b when a is NaN, so a NaN element never replaces the running maxima.
  __m256 m0 = _mm256_set1_ps(x[0]);
  __m256 m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  m0 = _mm256_max_ps(m1, m0);  // no NaN lanes: order does not matter
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m0);
  float m = lanes[0];
  for (int l = 1; l < 8; ++l) m = std::max(m, lanes[l]);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const __m256 target = _mm256_set1_ps(m);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), target, _CMP_EQ_OQ));
    if (hit != 0) return j + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; j < n; ++j)
    if (x[j] == m) return j;
  return 0;  // not reached: m is one of the elements
}

// Each element's weight depends on its own value only (the vector formula in range, 0 below it or for
// NaN), so the weights are the same bits at any offset; the sum is taken in double over 8 lanes, then
// the tail, then the lanes in order.
double exp_weights(const float* x, int64_t n, float max, float inv_t, float* w) {
  const __m256 vmax = _mm256_set1_ps(max), vinv = _mm256_set1_ps(inv_t), low = _mm256_set1_ps(kExpLow);
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax), vinv);
    // Ordered: false for NaN, so NaN lanes get 0 as the ones far below the maximum do.
    const __m256 in_range = _mm256_cmp_ps(a, low, _CMP_GE_OQ);
    const __m256 e = _mm256_and_ps(exp_in_range(_mm256_and_ps(a, in_range)), in_range);
    _mm256_storeu_ps(w + i, e);
    sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double tail = 0.0;
  for (; i < n; ++i) {
    const float a = (x[i] - max) * inv_t;
    w[i] = a >= kExpLow ? std::exp(a) : 0.0f;  // false for NaN
    tail += w[i];
  }
  alignas(32) double lanes[8];
  _mm256_store_pd(lanes, sum_lo);
  _mm256_store_pd(lanes + 4, sum_hi);
  double sum = tail;
  for (double l : lanes) sum += l;
  return sum;
}

}  // namespace kvserve::avx2
