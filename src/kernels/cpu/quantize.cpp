#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/fp16.h"

namespace kvserve {

namespace {

// ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it quantizes to zeros.
constexpr float kGroupMaxEps = 1e-15f;

// A 32-element block's value of largest magnitude, with its sign (the first one on ties), as ggml's
// Q4_0 / Q5_0 quantizers take it.
float largest_magnitude(const float* xb) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(xb[j])) {
      amax = std::fabs(xb[j]);
      max = xb[j];
    }
  }
  return max;
}

// A 32-element block's smallest and largest values (Q4_1 / Q5_1).
std::pair<float, float> min_max(const float* xb) {
  float min = xb[0], max = xb[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, xb[j]);
    max = std::max(max, xb[j]);
  }
  return {min, max};
}

}  // namespace

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* xb = x + i * kQK4_0;
    const float max = largest_magnitude(xb);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK4_0 / 2 + j] * id;
      const uint8_t q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
      const uint8_t q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float* xb = x + i * kQK4_1;
    const auto [min, max] = min_max(xb);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const float x0 = (xb[j] - min) * id;
      const float x1 = (xb[kQK4_1 / 2 + j] - min) * id;
      const uint8_t q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f))));
      const uint8_t q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f))));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

namespace {

// Element j's 5th bit into bit j of the block's qh (little-endian).
void store_high_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}

void store_5bit(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
  store_high_bits(q, qh);
}

}  // namespace

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* xb = x + i * kQK4_0;
    const float max = largest_magnitude(xb);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint8_t q[kQK4_0];
    for (int j = 0; j < kQK4_0; ++j)
      q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(xb[j] * id + 16.5f))));
    store_5bit(q, y[i].qs, y[i].qh);
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float* xb = x + i * kQK4_1;
    const auto [min, max] = min_max(xb);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint8_t q[kQK4_1];
    for (int j = 0; j < kQK4_1; ++j) q[j] = static_cast<uint8_t>((xb[j] - min) * id + 0.5f);
    store_5bit(q, y[i].qs, y[i].qh);
  }
}

namespace {

// ggml's make_qkx2_quants: quantizes n values to [0, nmax] with a scale and a (non-positive) offset,
// trying nstep+1 candidate scales around the min/max one and keeping the best weighted fit. Returns the
// scale and stores -offset in *the_min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: symmetric quants in [-nmax, nmax)
// stored as l + nmax, scale chosen among 19 candidates around -nmax / (signed extreme) to maximise the
// x^2-weighted fit. Returns the scale (negative when the extreme is positive, as in ggml).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const auto quant = [&](float iscale, int i) { return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = quant(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = quant(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + quant(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// The part of ggml's quantize_row_q4_K_ref / q5_K_ref the two share: per 32-element sub-block a
// weighted scale/min search (make_qkx2_quants with the type's nmax and search range), the scales and
// mins as 6 bits against fp16 super-block scales, then every value requantized against the stored
// scales into L (0..nmax).
struct KScaleMin {
  uint16_t d = 0, dmin = 0;
  uint8_t scales[kKScaleSize] = {};
  uint8_t L[kQK_K] = {};
};

void quantize_k_scale_min(const float* x, int nmax, float rmin, int nstep, KScaleMin& out) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale = 0;  // the min is subtracted, so scales are never negative
  float max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, out.L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(out.scales, 0, sizeof(out.scales));
  for (int j = 0; j < kQK_K / 32; ++j) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    if (j < 4) {
      out.scales[j] = ls;
      out.scales[j + 4] = lm;
    } else {
      out.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      out.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      out.scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  out.d = fp32_to_fp16(max_scale / 63.0f);
  out.dmin = fp32_to_fp16(max_min / 63.0f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc = 0, m = 0;
    k_scale_min(j, out.scales, &sc, &m);
    const float d = fp16_to_fp32(out.d) * sc;
    if (d == 0.0f) continue;
    const float dm = fp16_to_fp32(out.dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      out.L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n) {
  KScaleMin k;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_scale_min(x, 15, -1.0f, 20, k);
    BlockQ4_K& b = y[i];
    b.d = k.d;
    b.dmin = k.dmin;
    std::memcpy(b.scales, k.scales, sizeof(b.scales));
    uint8_t* q = b.qs;
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(k.L[j + l] | (k.L[j + l + 32] << 4));
      q += 32;
    }
  }
}

void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n) {
  KScaleMin k;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_scale_min(x, 31, -0.5f, 15, k);
    BlockQ5_K& b = y[i];
    b.d = k.d;
    b.dmin = k.dmin;
    std::memcpy(b.scales, k.scales, sizeof(b.scales));
    std::memset(b.qh, 0, sizeof(b.qh));
    // 64 elements per 32 qs bytes: the low 4 bits as Q4_K, the 5th in qh bit planes 2j and 2j + 1.
    for (int j = 0; j < kQK_K / 64; ++j)
      for (int l = 0; l < 32; ++l) {
        const int lo = k.L[64 * j + l], hi = k.L[64 * j + 32 + l];
        b.qs[32 * j + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
      }
  }
}

void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    BlockQ6_K& b = y[i];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < 1e-15f) {
      std::memset(&b, 0, sizeof(b));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    b.d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) b.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_fp32(b.d) * b.scales[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    // Per 128 elements: 64 ql bytes (elements l and l + 64 in ql[l], l + 32 and l + 96 in ql[l + 32]) and
    // 32 qh bytes holding the top 2 bits of elements l, l + 32, l + 64, l + 96.
    for (int j = 0; j < kQK_K / 128; ++j) {
      const int8_t* q = L + 128 * j;
      for (int l = 0; l < 32; ++l) {
        b.ql[64 * j + l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
        b.ql[64 * j + l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
        b.qh[32 * j + l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                                                ((q[l + 96] >> 4) << 6));
      }
    }
  }
}

namespace {

// ggml's best_index_int8: the index of the level (sorted ascending) nearest x, the upper one on ties.
int nearest_level(const int8_t* levels, float x) {
  if (x <= levels[0]) return 0;
  if (x >= levels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < levels[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - static_cast<float>(levels[hi - 1]) < static_cast<float>(levels[hi]) - x ? hi - 1 : hi;
}

// ggml's quantize_row_iq4_nl_impl as llama.cpp's quantize tool runs it without an importance matrix (weights
// x^2, 7 tries either side): per 32-element sub-block the scale with the best x^2-weighted fit of the 16
// non-uniform levels. n_sub 8 (IQ4_XS): the sub-block scales as 6-bit integers against an fp16 super-block
// scale, every value requantized against its stored scale. n_sub 1 (IQ4_NL): the one scale as fp16, the
// values requantized against it. Writes d and the 4-bit indices (q4, IQ4_NL's nibble order), and the
// sub-block scales' stored bits for IQ4_XS.
void quantize_iq4_super_block(const float* x, int n_sub, uint16_t* d_out, uint8_t* q4, uint16_t* scales_h,
                              uint8_t* scales_l) {
  constexpr int kTries = 7;
  const int8_t* levels = kIQ4Values;
  uint8_t L[kQK_K];
  float scales[kQK_K / 32];
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < n_sub; ++ib) {
    const float* xb = x + 32 * ib;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    // The fit of the levels at inverse scale id: sum w q x and sum w q^2 with w = x^2.
    const auto fit = [&](float id, bool keep) {
      float sumqx = 0, sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const int l = nearest_level(levels, id * xb[j]);
        if (keep) L[32 * ib + j] = static_cast<uint8_t>(l);
        const float q = levels[l];
        const float w = xb[j] * xb[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      return std::pair{sumqx, sumq2};
    };
    const auto [sumqx0, sumq20] = fit(1 / (-max / static_cast<float>(levels[0])), true);
    float d = sumq20 > 0 ? sumqx0 / sumq20 : 0.0f;
    float best = d * sumqx0;
    for (int itry = -kTries; itry <= kTries; ++itry) {
      const auto [sumqx, sumq2] = fit(static_cast<float>(itry + levels[0]) / max, false);
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (n_sub > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *d_out = fp32_to_fp16(d);
    const float id = d != 0.0f ? 1 / d : 0.0f;
    for (int ib = 0; ib < n_sub; ++ib) {
      const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1 / dl : 0.0f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(nearest_level(levels, idl * x[32 * ib + j]));
      const int stored = l + 32;
      if (ib % 2 == 0) {
        scales_l[ib / 2] = static_cast<uint8_t>(stored & 0xF);
      } else {
        scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | ((stored & 0xF) << 4));
      }
      *scales_h = static_cast<uint16_t>(*scales_h | ((stored >> 4) << (2 * ib)));
    }
  } else {
    *d_out = fp32_to_fp16(scales[0]);
    const float id = scales[0] != 0.0f ? 1 / scales[0] : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(nearest_level(levels, id * x[j]));
  }
  for (int ib = 0; ib < n_sub; ++ib)
    for (int j = 0; j < 16; ++j) q4[16 * ib + j] = static_cast<uint8_t>(L[32 * ib + j] | (L[32 * ib + 16 + j] << 4));
}

}  // namespace

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i) quantize_iq4_super_block(x + 32 * i, 1, &y[i].d, y[i].qs, nullptr, nullptr);
}

void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i)
    quantize_iq4_super_block(x + kQK_K * i, kQK_K / 32, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l);
}

void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* b = x + kQK4_0 * i;
    float amax = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) amax = std::max(amax, std::fabs(b[j]));
    // ggml: e = floor(log2(amax)) - 2 + 127, so that amax lands between levels 8 and 12 (times 2^(e - 128));
    // kept within E8M0's finite range here (ggml's cast is undefined outside it).
    const float e = amax > 0.0f ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
    y[i].e = static_cast<uint8_t>(std::clamp(e, 0.0f, 254.0f));
    const float d = mxfp4_half_scale(y[i].e);
    // The nearest level, the first of equally near ones (ggml's best_index_mxfp4).
    const auto nearest = [d](float v) {
      int best = 0;
      float best_err = std::fabs(kMXFP4Values[0] * d - v);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(kMXFP4Values[k] * d - v);
        if (err < best_err) {
          best = k;
          best_err = err;
        }
      }
      return best;
    };
    for (int j = 0; j < kQK4_0 / 2; ++j)
      y[i].qs[j] = static_cast<uint8_t>(nearest(b[j]) | nearest(b[j + kQK4_0 / 2]) << 4);
  }
}

bool can_quantize(DType type) {
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4:
      return true;
    default: return false;
  }
}

void quantize_row(DType type, const float* x, void* dst, int64_t n) {
  switch (type) {
    case DType::F32: std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: quantize_row_f16(x, static_cast<uint16_t*>(dst), n); return;
    case DType::BF16: quantize_row_bf16(x, static_cast<uint16_t*>(dst), n); return;
    case DType::Q8_0: quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n); return;
    case DType::Q4_0: quantize_row_q4_0(x, static_cast<BlockQ4_0*>(dst), n); return;
    case DType::Q4_1: quantize_row_q4_1(x, static_cast<BlockQ4_1*>(dst), n); return;
    case DType::Q5_0: quantize_row_q5_0(x, static_cast<BlockQ5_0*>(dst), n); return;
    case DType::Q5_1: quantize_row_q5_1(x, static_cast<BlockQ5_1*>(dst), n); return;
    case DType::Q4_K: quantize_row_q4_K(x, static_cast<BlockQ4_K*>(dst), n); return;
    case DType::Q5_K: quantize_row_q5_K(x, static_cast<BlockQ5_K*>(dst), n); return;
    case DType::Q6_K: quantize_row_q6_K(x, static_cast<BlockQ6_K*>(dst), n); return;
    case DType::IQ4_NL:
      quantize_row_iq4_nl(x, static_cast<BlockIQ4_NL*>(dst), n);
      return;
    case DType::IQ4_XS:
      quantize_row_iq4_xs(x, static_cast<BlockIQ4_XS*>(dst), n);
      return;
    case DType::MXFP4:
      quantize_row_mxfp4(x, static_cast<BlockMXFP4*>(dst), n);
      return;
    default: fail("quantizing to {} is not supported", dtype_name(type));
  }
}

}  // namespace kvserve
