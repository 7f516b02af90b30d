// Scalar reference kernels for the GGUF block types. Formulas and evaluation order follow ggml's
// reference C code so dequantization and activation quantization are bit-exact with it.
#include "kernels/cpu/quants.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace kvserve {

namespace {

// Quant values 0..15 of one Q4_K block in element order.
void unpack_q4_K(const BlockQ4_K& b, uint8_t* q) {
  for (int j = 0; j < kQK_K / 64; ++j) {
    const uint8_t* qs = b.qs + 32 * j;
    for (int l = 0; l < 32; ++l) {
      q[64 * j + l] = qs[l] & 0xF;
      q[64 * j + 32 + l] = qs[l] >> 4;
    }
  }
}

}  // namespace

namespace {

uint32_t high_bits_q5(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

}  // namespace

void unpack_q5_0(const BlockQ5_0& b, int8_t* q) {
  const uint32_t qh = high_bits_q5(b.qh);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    q[j] = static_cast<int8_t>(((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16);
    q[j + 16] = static_cast<int8_t>(((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
  }
}

void unpack_q5_1(const BlockQ5_1& b, uint8_t* q) {
  const uint32_t qh = high_bits_q5(b.qh);
  for (int j = 0; j < kQK4_1 / 2; ++j) {
    q[j] = static_cast<uint8_t>((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4));
    q[j + 16] = static_cast<uint8_t>((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}

// Both 2-bit layouts: 128-element halves of 32 bytes each, element 32j + l of a half in bits 2j..2j+1 of
// byte l; Q3_K's high bit of that element is bit 4 * half + j of hmask[l].
void unpack_q2_K(const BlockQ2_K& b, uint8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, j = (e % 128) / 32, l = e % 32;
    q[e] = (b.qs[32 * half + l] >> (2 * j)) & 3;
  }
}

void unpack_q3_K(const BlockQ3_K& b, int8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = (b.qs[32 * half + l] >> (2 * j)) & 3;
    const bool high = (b.hmask[l] >> (4 * half + j)) & 1;
    q[e] = static_cast<int8_t>(low - (high ? 0 : 4));
  }
}

// Scale j's low 4 bits are in byte j (j < 8, low nibble) or j - 8 (high nibble); its high 2 bits in
// byte 8 + j % 4 at bit 2 * (j / 4).
void unpack_q3_K_scales(const uint8_t* packed, int8_t* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

void unpack_q5_K(const BlockQ5_K& b, uint8_t* q) {
  for (int j = 0; j < kQK_K / 64; ++j) {
    const uint8_t* qs = b.qs + 32 * j;
    const int low_bit = 2 * j, high_bit = 2 * j + 1;  // qh bit planes of the two 32-element halves
    for (int l = 0; l < 32; ++l) {
      q[64 * j + l] = (qs[l] & 0xF) | (((b.qh[l] >> low_bit) & 1) << 4);
      q[64 * j + 32 + l] = (qs[l] >> 4) | (((b.qh[l] >> high_bit) & 1) << 4);
    }
  }
}

void unpack_q6_K(const BlockQ6_K& b, int8_t* q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    int8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l + 0] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

// ---------------------------------------------------------------- dequantization

void dequantize_row_f16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

void dequantize_row_q8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[i * kQK8_1 + j] = x[i].qs[j] * d;
  }
}

void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) y[i * kQK_K + j] = x[i].d * x[i].qs[j];
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int low = (x[i].qs[j] & 0xF) - 8;
      const int high = (x[i].qs[j] >> 4) - 8;
      y[i * kQK4_0 + j] = low * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = high * d;
    }
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const int low = x[i].qs[j] & 0xF;
      const int high = x[i].qs[j] >> 4;
      y[i * kQK4_1 + j] = low * d + m;
      y[i * kQK4_1 + j + kQK4_1 / 2] = high * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  int8_t q[kQK4_0];
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_q5_0(x[i], q);
    for (int j = 0; j < kQK4_0; ++j) y[i * kQK4_0 + j] = q[j] * d;
  }
}

void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float d = mxfp4_half_scale(x[i].e);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[i * kQK4_0 + j] = kMXFP4Values[x[i].qs[j] & 0xF] * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = kMXFP4Values[x[i].qs[j] >> 4] * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  uint8_t q[kQK4_1];
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    unpack_q5_1(x[i], q);
    for (int j = 0; j < kQK4_1; ++j) y[i * kQK4_1 + j] = q[j] * d + m;
  }
}

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n) {
  uint8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    unpack_q2_K(x[i], q);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float scale = d * (x[i].scales[g] & 0xF);
      const float offset = dmin * (x[i].scales[g] >> 4);
      for (int l = 0; l < 16; ++l) y[i * kQK_K + 16 * g + l] = scale * q[16 * g + l] - offset;
    }
  }
}

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n) {
  int8_t q[kQK_K], scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_q3_K(x[i], q);
    unpack_q3_K_scales(x[i].scales, scales);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float scale = d * scales[g];
      for (int l = 0; l < 16; ++l) y[i * kQK_K + 16 * g + l] = scale * q[16 * g + l];
    }
  }
}

namespace {

// 32 elements from 16 bytes of 4-bit indices (element j in the low nibble of byte j, j + 16 in the high).
void iq4_block(const uint8_t* qs, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIQ4Values[qs[j] & 0xF];
    y[j + 16] = d * kIQ4Values[qs[j] >> 4];
  }
}

int iq4_block_dot(const uint8_t* qs, const int8_t* a) {
  int sum = 0;
  for (int j = 0; j < 16; ++j) sum += a[j] * kIQ4Values[qs[j] & 0xF] + a[j + 16] * kIQ4Values[qs[j] >> 4];
  return sum;
}

}  // namespace

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) iq4_block(x[i].qs, fp16_to_fp32(x[i].d), y + i * kQK4_0);
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) iq4_block(x[i].qs + 16 * ib, d * iq4_xs_scale(x[i], ib), y + i * kQK_K + 32 * ib);
  }
}

namespace {

// Q4_K and Q5_K: 8 sub-blocks of 32, each d * scale * q - dmin * min with 6-bit scales and mins.
template <typename Block, typename Unpack>
void dequantize_scale_min_blocks(const Block* x, float* y, int64_t n, Unpack unpack) {
  uint8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    unpack(x[i], q);
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, m;
      k_scale_min(sub, x[i].scales, &sc, &m);
      const float scale = d * sc;
      const float offset = dmin * m;
      for (int l = 0; l < 32; ++l) y[i * kQK_K + 32 * sub + l] = scale * q[32 * sub + l] - offset;
    }
  }
}

}  // namespace

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  dequantize_scale_min_blocks(x, y, n, [](const BlockQ4_K& b, uint8_t* q) { unpack_q4_K(b, q); });
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  dequantize_scale_min_blocks(x, y, n, [](const BlockQ5_K& b, uint8_t* q) { unpack_q5_K(b, q); });
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  int8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    unpack_q6_K(x[i], q);
    // ggml evaluates d * scale * q left to right; keep that order for bit-exactness.
    for (int j = 0; j < kQK_K; ++j) y[i * kQK_K + j] = d * x[i].scales[j / 16] * q[j];
  }
}

// ---------------------------------------------------------------- activation quantization

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_row_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // Quantize with the unrounded scale; only the stored scale is rounded to fp16.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const float* xb = x + i * kQK8_1;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
      sum += y[i].qs[j];
    }
    // ggml stores the sum scaled by the unrounded d.
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    float max = 0.0f, amax = 0.0f;  // max: the signed value of largest magnitude (first one on ties)
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      y[i].d = 0.0f;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * xb[j])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

// ---------------------------------------------------------------- scalar dot products

// The float dots sum in double, as ggml's scalar ones do (ggml_float): each product is exact in
// float for f16 and bf16, so this is the near-exact sum that every SIMD order is measured against.
float vec_dot_f32_f32(int64_t n, const float* w, const float* a) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i] * a[i]);
  return static_cast<float>(sum);
}

float vec_dot_f16_f16(int64_t n, const uint16_t* w, const uint16_t* a) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(w[i]) * fp16_to_fp32(a[i]));
  return static_cast<float>(sum);
}

float vec_dot_bf16_bf16(int64_t n, const uint16_t* w, const uint16_t* a) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(w[i]) * bf16_to_fp32(a[i]));
  return static_cast<float>(sum);
}

float vec_dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += w[i].qs[j] * a[i].qs[j];
    sum += isum * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d));
  }
  return sum;
}

float vec_dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      isum += ((w[i].qs[j] & 0xF) - 8) * a[i].qs[j];
      isum += ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + kQK4_0 / 2];
    }
    sum += isum * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d));
  }
  return sum;
}

float vec_dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      isum += (w[i].qs[j] & 0xF) * a[i].qs[j];
      isum += (w[i].qs[j] >> 4) * a[i].qs[j + kQK4_1 / 2];
    }
    // sum_j (d_w q_j + m) * d_a a_j = d_w d_a sum(q a) + m * (d_a sum(a)); the last factor is a.s.
    sum += (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d)) * isum + fp16_to_fp32(w[i].m) * fp16_to_fp32(a[i].s);
  }
  return sum;
}

namespace {

// Quants q times activations a over 16-element sub-block g (the K-quants' scale groups).
template <typename Q>
int group16_dot(const Q* q, const int8_t* a, int g) {
  int sum = 0;
  for (int l = 0; l < 16; ++l) sum += q[16 * g + l] * a[16 * g + l];
  return sum;
}

}  // namespace

float vec_dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a) {
  int8_t q[kQK4_0];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    unpack_q5_0(w[i], q);
    int isum = 0;
    for (int j = 0; j < kQK4_0; ++j) isum += q[j] * a[i].qs[j];
    sum += isum * (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d));
  }
  return sum;
}

float vec_dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a) {
  uint8_t q[kQK4_1];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    unpack_q5_1(w[i], q);
    int isum = 0;
    for (int j = 0; j < kQK4_1; ++j) isum += q[j] * a[i].qs[j];
    sum += (fp16_to_fp32(w[i].d) * fp16_to_fp32(a[i].d)) * isum + fp16_to_fp32(w[i].m) * fp16_to_fp32(a[i].s);
  }
  return sum;
}

float vec_dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a) {
  uint8_t q[kQK_K];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack_q2_K(w[i], q);
    int isum = 0, min_sum = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      isum += (w[i].scales[g] & 0xF) * group16_dot(q, a[i].qs, g);
      min_sum += (w[i].scales[g] >> 4) * a[i].bsums[g];
    }
    // ggml: dall * isum - dmin * summs, each super-block scale times the activation scale first.
    sum += a[i].d * fp16_to_fp32(w[i].d) * isum - a[i].d * fp16_to_fp32(w[i].dmin) * min_sum;
  }
  return sum;
}

float vec_dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a) {
  int8_t q[kQK_K], scales[16];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack_q3_K(w[i], q);
    unpack_q3_K_scales(w[i].scales, scales);
    int isum = 0;
    for (int g = 0; g < kQK_K / 16; ++g) isum += scales[g] * group16_dot(q, a[i].qs, g);
    sum += fp16_to_fp32(w[i].d) * a[i].d * isum;
  }
  return sum;
}

float vec_dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i)
    sum += (fp16_to_fp32(a[i].d) * fp16_to_fp32(w[i].d)) * iq4_block_dot(w[i].qs, a[i].qs);
  return sum;
}

float vec_dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j)
      isum += a[i].qs[j] * kMXFP4Values[w[i].qs[j] & 0xF] + a[i].qs[j + 16] * kMXFP4Values[w[i].qs[j] >> 4];
    sum += (mxfp4_half_scale(w[i].e) * fp16_to_fp32(a[i].d)) * static_cast<float>(isum);
  }
  return sum;
}

float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(w[i].d) * a[i].d;
    // ggml adds each sub-block's scaled sum in turn.
    for (int ib = 0; ib < 8; ++ib)
      sum += d * iq4_xs_scale(w[i], ib) * iq4_block_dot(w[i].qs + 16 * ib, a[i].qs + 32 * ib);
  }
  return sum;
}

namespace {

// Shared by Q4_K and Q5_K: unsigned quants with a 6-bit scale and min per 32 elements.
float dot_k_scale_min(const uint8_t* q, const uint8_t* packed_scales, float d, float dmin, const BlockQ8_K& a) {
  int scaled_sum = 0, min_sum = 0;
  for (int sub = 0; sub < 8; ++sub) {
    uint8_t sc, m;
    k_scale_min(sub, packed_scales, &sc, &m);
    int isum = 0;
    for (int l = 0; l < 32; ++l) isum += q[32 * sub + l] * a.qs[32 * sub + l];
    scaled_sum += sc * isum;
    min_sum += m * (a.bsums[2 * sub] + a.bsums[2 * sub + 1]);
  }
  return d * a.d * scaled_sum - dmin * a.d * min_sum;
}

}  // namespace

float vec_dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  uint8_t q[kQK_K];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack_q4_K(w[i], q);
    sum += dot_k_scale_min(q, w[i].scales, fp16_to_fp32(w[i].d), fp16_to_fp32(w[i].dmin), a[i]);
  }
  return sum;
}

float vec_dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a) {
  uint8_t q[kQK_K];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack_q5_K(w[i], q);
    sum += dot_k_scale_min(q, w[i].scales, fp16_to_fp32(w[i].d), fp16_to_fp32(w[i].dmin), a[i]);
  }
  return sum;
}

float vec_dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a) {
  int8_t q[kQK_K];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    unpack_q6_K(w[i], q);
    int isum = 0;
    for (int g = 0; g < kQK_K / 16; ++g) isum += w[i].scales[g] * group16_dot(q, a[i].qs, g);
    sum += fp16_to_fp32(w[i].d) * a[i].d * isum;
  }
  return sum;
}

}  // namespace kvserve
