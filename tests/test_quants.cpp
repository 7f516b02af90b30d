// Block layouts, exact dequantization, ggml-exact activation quantizers, and AVX2 vs scalar dots.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu/block32_tiles.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "random_weights.h"

namespace kvserve {
namespace {

using testing::random_floats;
using testing::random_weights;

TEST(QuantsLayout, BlockSizesMatchDTypeTable) {
  EXPECT_EQ(sizeof(BlockQ4_0), static_cast<size_t>(dtype_info(DType::Q4_0).block_bytes));
  EXPECT_EQ(sizeof(BlockQ4_1), static_cast<size_t>(dtype_info(DType::Q4_1).block_bytes));
  EXPECT_EQ(sizeof(BlockQ8_0), static_cast<size_t>(dtype_info(DType::Q8_0).block_bytes));
  EXPECT_EQ(sizeof(BlockQ8_1), static_cast<size_t>(dtype_info(DType::Q8_1).block_bytes));
  EXPECT_EQ(sizeof(BlockQ5_0), static_cast<size_t>(dtype_info(DType::Q5_0).block_bytes));
  EXPECT_EQ(sizeof(BlockQ5_1), static_cast<size_t>(dtype_info(DType::Q5_1).block_bytes));
  EXPECT_EQ(sizeof(BlockQ2_K), static_cast<size_t>(dtype_info(DType::Q2_K).block_bytes));
  EXPECT_EQ(sizeof(BlockQ3_K), static_cast<size_t>(dtype_info(DType::Q3_K).block_bytes));
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(sizeof(BlockIQ4_NL), static_cast<size_t>(dtype_info(DType::IQ4_NL).block_bytes));
  EXPECT_EQ(sizeof(BlockIQ4_XS), static_cast<size_t>(dtype_info(DType::IQ4_XS).block_bytes));
  EXPECT_EQ(offsetof(BlockIQ4_XS, qs), 8u);
  EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);  // Q2_K and Q3_K keep their scales at the end
  EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
  EXPECT_EQ(sizeof(BlockQ4_K), static_cast<size_t>(dtype_info(DType::Q4_K).block_bytes));
  EXPECT_EQ(sizeof(BlockQ5_K), static_cast<size_t>(dtype_info(DType::Q5_K).block_bytes));
  EXPECT_EQ(sizeof(BlockQ6_K), static_cast<size_t>(dtype_info(DType::Q6_K).block_bytes));
  EXPECT_EQ(sizeof(BlockQ8_K), static_cast<size_t>(dtype_info(DType::Q8_K).block_bytes));
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);  // Q6_K keeps its scale at the end
  EXPECT_EQ(offsetof(BlockQ8_K, bsums), 260u);
}

// ------------------------------------------------------------------ dequantization of known blocks

TEST(QuantsDequant, F16AndBF16KnownValues) {
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3555};
  float out[5];
  dequantize_row(DType::F16, halves, out, 5);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[4], 0.333251953125f);
  const uint16_t bf[] = {0x3F80, 0xC040, 0x0000, 0x4049};
  dequantize_row(DType::BF16, bf, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 3.140625f);
}

TEST(QuantsDequant, Q8_0Q4_0Q4_1KnownBlocks) {
  float out[32];
  BlockQ8_0 q8{};
  q8.d = 0x3400;  // 0.25
  for (int j = 0; j < 32; ++j) q8.qs[j] = static_cast<int8_t>(j - 16);
  dequantize_row(DType::Q8_0, &q8, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j - 16) * 0.25f) << j;

  BlockQ4_0 q4{};
  q4.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) q4.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  dequantize_row(DType::Q4_0, &q4, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 0.5f) << j;          // low nibble, minus 8
    EXPECT_EQ(out[j + 16], (7 - j) * 0.5f) << j;     // high nibble (15 - j), minus 8
  }

  BlockQ4_1 q41{};
  q41.d = 0x3800;  // 0.5
  q41.m = 0xBC00;  // -1
  for (int j = 0; j < 16; ++j) q41.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  dequantize_row(DType::Q4_1, &q41, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j * 0.5f - 1.0f) << j;
    EXPECT_EQ(out[j + 16], (15 - j) * 0.5f - 1.0f) << j;
  }
}

// Scales {1,2,3,4,33,34,35,60} and mins {0,1,2,3,40,41,42,63} packed by hand into ggml's 12-byte form:
// bytes 0..3: scale j low 6 bits | top 2 bits of scale j+4; bytes 4..7: the same for the mins;
// bytes 8..11: low nibble of scale j+4 | low nibble of min j+4 << 4.
constexpr uint8_t kPackedScales[12] = {0x81, 0x82, 0x83, 0xC4, 0x80, 0x81, 0x82, 0xC3, 0x81, 0x92, 0xA3, 0xFC};
constexpr int kScales[8] = {1, 2, 3, 4, 33, 34, 35, 60};
constexpr int kMins[8] = {0, 1, 2, 3, 40, 41, 42, 63};

TEST(QuantsDequant, KScaleMinUnpacking) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(j, kPackedScales, &sc, &m);
    EXPECT_EQ(sc, kScales[j]) << j;
    EXPECT_EQ(m, kMins[j]) << j;
  }
}

TEST(QuantsDequant, Q4_KKnownBlock) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kPackedScales, 12);
  for (int jj = 0; jj < 4; ++jj)
    for (int l = 0; l < 32; ++l) b.qs[32 * jj + l] = static_cast<uint8_t>((l & 0xF) | (((l + jj) & 0xF) << 4));
  std::vector<float> out(256);
  dequantize_row(DType::Q4_K, &b, out.data(), 256);
  for (int jj = 0; jj < 4; ++jj) {
    for (int l = 0; l < 32; ++l) {
      const int sub_low = 2 * jj, sub_high = 2 * jj + 1;
      EXPECT_EQ(out[64 * jj + l], kScales[sub_low] * (l & 0xF) - 0.5f * kMins[sub_low]);
      EXPECT_EQ(out[64 * jj + 32 + l], kScales[sub_high] * ((l + jj) & 0xF) - 0.5f * kMins[sub_high]);
    }
  }
}

TEST(QuantsDequant, Q5_KKnownBlock) {
  BlockQ5_K b{};
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kPackedScales, 12);
  for (int jj = 0; jj < 4; ++jj)
    for (int l = 0; l < 32; ++l) b.qs[32 * jj + l] = static_cast<uint8_t>((l & 0xF) | (((l + jj) & 0xF) << 4));
  // Bit 2jj of qh[l] is the 5th bit of element 64jj + l, bit 2jj+1 that of element 64jj + 32 + l.
  for (int l = 0; l < 32; ++l) b.qh[l] = (l % 2 == 0) ? 0x55 : 0xAA;
  std::vector<float> out(256);
  dequantize_row(DType::Q5_K, &b, out.data(), 256);
  for (int jj = 0; jj < 4; ++jj) {
    for (int l = 0; l < 32; ++l) {
      const int high_low_half = (l % 2 == 0) ? 16 : 0;
      const int high_high_half = (l % 2 == 0) ? 0 : 16;
      EXPECT_EQ(out[64 * jj + l], kScales[2 * jj] * ((l & 0xF) + high_low_half) - 0.5f * kMins[2 * jj]);
      EXPECT_EQ(out[64 * jj + 32 + l],
                kScales[2 * jj + 1] * (((l + jj) & 0xF) + high_high_half) - 0.5f * kMins[2 * jj + 1]);
    }
  }
}

TEST(QuantsDequant, Q6_KKnownBlock) {
  BlockQ6_K b{};
  b.d = 0x3800;  // 0.5
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g % 2 ? -(g + 1) : g + 1);
  // All quants 0 -> value -32, except element 0 (ql low 1, qh bits 0-1 = 0 -> 1 - 32),
  // element 32 (ql[32] low 0, qh bits 2-3 = 1 -> 16 - 32), element 64 (ql[0] high 2, qh bits 4-5 = 2
  // -> 34 - 32) and element 96 (ql[32] high 0, qh bits 6-7 = 3 -> 48 - 32).
  b.ql[0] = 0x21;
  b.qh[0] = 0xE4;  // 0b11'10'01'00
  std::vector<float> out(256);
  dequantize_row(DType::Q6_K, &b, out.data(), 256);
  EXPECT_EQ(out[0], 0.5f * 1 * -31);
  EXPECT_EQ(out[32], 0.5f * 3 * -16);
  EXPECT_EQ(out[64], 0.5f * 5 * 2);
  EXPECT_EQ(out[96], 0.5f * 7 * 16);
  for (int e : {1, 15, 16, 31, 33, 100, 128, 200, 255}) {
    const int g = e / 16;
    EXPECT_EQ(out[e], 0.5f * b.scales[g] * -32) << e;
  }
}

TEST(QuantsDequant, Q5_0Q5_1KnownBlocks) {
  BlockQ5_0 b0{};
  b0.d = 0x3800;  // 0.5
  BlockQ5_1 b1{};
  b1.d = 0x3400;  // 0.25
  b1.m = 0xBC00;  // -1
  // Element j's low 4 bits: j & 0xF (j < 16 in low nibbles, 16..31 in high ones); 5th bit: bit j of qh,
  // set for j = 0, 3, 17 and 31.
  for (int j = 0; j < 16; ++j) b0.qs[j] = b1.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const uint32_t qh = (1u << 0) | (1u << 3) | (1u << 17) | (1u << 31);
  std::memcpy(b0.qh, &qh, 4);
  std::memcpy(b1.qh, &qh, 4);
  float out0[32], out1[32];
  dequantize_row(DType::Q5_0, &b0, out0, 32);
  dequantize_row(DType::Q5_1, &b1, out1, 32);
  for (int j = 0; j < 32; ++j) {
    const int low4 = j < 16 ? j : 15 - (j - 16);
    const int q = low4 + ((qh >> j) & 1 ? 16 : 0);
    EXPECT_EQ(out0[j], 0.5f * (q - 16)) << j;
    EXPECT_EQ(out1[j], 0.25f * q - 1.0f) << j;
  }
  EXPECT_EQ(out0[0], 0.5f * (0 + 16 - 16));
  EXPECT_EQ(out0[31], 0.5f * (0 + 16 - 16));
  EXPECT_EQ(out0[1], 0.5f * (1 - 16));
}

// Q2_K and Q3_K against ggml's dequantizers as its reference C code walks the block (pointers advanced
// per 128 elements, a shifting high-bit mask that is not reset between the halves), on random blocks.
void ggml_order_q2_K(const BlockQ2_K& b, float* y) {
  const float d = fp16_to_fp32(b.d), min = fp16_to_fp32(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc = b.scales[is++];
      float dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
      sc = b.scales[is++];
      dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
      shift += 2;
    }
    q += 32;
  }
}

void ggml_order_q3_K(const BlockQ3_K& b, float* y) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, b.scales, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  const float d_all = fp16_to_fp32(b.d);
  const uint8_t* q = b.qs;
  const uint8_t* hm = b.hmask;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      float dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l) *y++ = dl * (static_cast<int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

TEST(QuantsDequant, Q2_KQ3_KMatchGgmlsLoopOrder) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 20; ++trial) {
    const auto w2 = random_weights(DType::Q2_K, 1, 256, rng);
    const auto w3 = random_weights(DType::Q3_K, 1, 256, rng);
    float got[256], want[256];
    dequantize_row(DType::Q2_K, w2.data(), got, 256);
    ggml_order_q2_K(*reinterpret_cast<const BlockQ2_K*>(w2.data()), want);
    for (int e = 0; e < 256; ++e) ASSERT_EQ(got[e], want[e]) << "Q2_K trial " << trial << " element " << e;
    dequantize_row(DType::Q3_K, w3.data(), got, 256);
    ggml_order_q3_K(*reinterpret_cast<const BlockQ3_K*>(w3.data()), want);
    for (int e = 0; e < 256; ++e) ASSERT_EQ(got[e], want[e]) << "Q3_K trial " << trial << " element " << e;
  }
}

TEST(QuantsDequant, IQ4_NLKnownBlock) {
  BlockIQ4_NL b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float out[32];
  dequantize_row(DType::IQ4_NL, &b, out, 32);
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * levels[j]) << j;
    EXPECT_EQ(out[j + 16], 0.5f * levels[15 - j]) << j;
  }
}

// IQ4_XS's scales as ggml's dot product unpacks them: two a step from one scales_l byte, the high bits
// shifted out of scales_h four at a time.
TEST(QuantsDequant, IQ4_XSScalesMatchGgmlsUnpacking) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 50; ++trial) {
    const auto w = random_weights(DType::IQ4_XS, 1, 256, rng);
    const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(w.data());
    float got[256];
    dequantize_row(DType::IQ4_XS, &b, got, 256);
    const float d = fp16_to_fp32(b.d);
    uint16_t h = b.scales_h;
    for (int ib = 0; ib < 8; ib += 2) {
      const int ls1 = (b.scales_l[ib / 2] & 0xf) | ((h << 4) & 0x30);
      const int ls2 = (b.scales_l[ib / 2] >> 4) | ((h << 2) & 0x30);
      h >>= 4;
      for (int half = 0; half < 2; ++half) {
        const float dl = d * ((half == 0 ? ls1 : ls2) - 32);
        const uint8_t* qs = b.qs + 16 * (ib + half);
        for (int j = 0; j < 16; ++j) {
          ASSERT_EQ(got[32 * (ib + half) + j], dl * kIQ4Values[qs[j] & 0xF]) << trial;
          ASSERT_EQ(got[32 * (ib + half) + j + 16], dl * kIQ4Values[qs[j] >> 4]) << trial;
        }
      }
    }
  }
}

// ------------------------------------------------------------------ activation quantizers

// Scale chosen so d = 1/64 exactly: q = round(64 x). x[1], x[2] sit on ties, which ggml's roundf breaks
// away from zero.
std::vector<float> q8_hand_case() {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.1f;
  x[1] = 2.5f / 64;
  x[2] = -2.5f / 64;
  x[31] = 127.0f / 64;  // amax
  return x;
}

int q8_hand_expected(int j) {
  if (j == 1) return 3;
  if (j == 2) return -3;
  if (j == 31) return 127;
  return static_cast<int>(std::lround(6.4 * (j - 16)));
}

TEST(QuantsActivation, Q8_0HandCheckedBytes) {
  const auto x = q8_hand_case();
  BlockQ8_0 b;
  quantize_row_q8_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x2400);  // fp16(1/64)
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], q8_hand_expected(j)) << j;
  EXPECT_EQ(b.qs[0], -102);
  EXPECT_EQ(b.qs[30], 90);
}

TEST(QuantsActivation, Q8_1HandCheckedBytes) {
  const auto x = q8_hand_case();
  BlockQ8_1 b;
  quantize_row_q8_1(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x2400);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(b.qs[j], q8_hand_expected(j)) << j;
    sum += q8_hand_expected(j);
  }
  EXPECT_EQ(b.s, fp32_to_fp16(sum / 64.0f));  // s = d * sum(q), d exact here
}

TEST(QuantsActivation, Q8_KHandCheckedBytes) {
  std::vector<float> x(256, 0.0f);
  x[5] = -2.0f;  // largest magnitude, negative: iscale = -127 / -2 = 63.5
  x[7] = 1.0f;   // 63.5 -> nearest_int ties to even -> 64
  x[9] = -1.0f;  // -63.5 -> -64
  x[20] = 0.5f;  // 31.75 -> 32
  BlockQ8_K b;
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.d, 1.0f / 63.5f);
  EXPECT_EQ(b.qs[5], -127);
  EXPECT_EQ(b.qs[7], 64);
  EXPECT_EQ(b.qs[9], -64);
  EXPECT_EQ(b.qs[20], 32);
  EXPECT_EQ(b.bsums[0], -127 + 64 - 64);
  EXPECT_EQ(b.bsums[1], 32);
  for (int g = 2; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);

  // A positive maximum maps to -127 with a negative d: ggml divides -127 by the signed max.
  std::vector<float> y(256, 0.25f);
  y[100] = 3.0f;
  quantize_row_q8_K(y.data(), &b, 256);
  EXPECT_EQ(b.qs[100], -127);
  EXPECT_LT(b.d, 0.0f);

  std::vector<float> zeros(256, 0.0f);
  quantize_row_q8_K(zeros.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);
}

TEST(QuantsActivation, RoundTripWithinHalfStep) {
  std::mt19937 rng(7);
  const int64_t n = 1024;
  auto x = random_floats(n, rng, 3.0f);
  std::vector<float> back(n);

  std::vector<BlockQ8_0> q80(n / 32);
  quantize_row_q8_0(x.data(), q80.data(), n);
  dequantize_row(DType::Q8_0, q80.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i / 32 * 32 + j]));
    const float d = amax / 127;
    // Half a step, plus the fp16 rounding of d applied to up to 127 steps.
    EXPECT_LE(std::fabs(back[i] - x[i]), d * (0.5f + 127.0f / 2048.0f)) << i;
  }

  std::vector<BlockQ8_1> q81(n / 32);
  quantize_row_q8_1(x.data(), q81.data(), n);
  dequantize_row(DType::Q8_1, q81.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = fp16_to_fp32(q81[i / 32].d);
    EXPECT_LE(std::fabs(back[i] - x[i]), d * (0.5f + 127.0f / 2048.0f) * 1.01f) << i;
  }
  for (const auto& b : q81) {
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += b.qs[j];
    EXPECT_NEAR(fp16_to_fp32(b.s), sum * fp16_to_fp32(b.d), std::fabs(sum * fp16_to_fp32(b.d)) * 2e-3 + 1e-6);
  }

  std::vector<BlockQ8_K> q8k(n / 256);
  quantize_row_q8_K(x.data(), q8k.data(), n);
  dequantize_row(DType::Q8_K, q8k.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_LE(std::fabs(back[i] - x[i]), std::fabs(q8k[i / 256].d) * 0.5f * 1.0001f) << i;
  }
  for (const auto& b : q8k) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
      EXPECT_EQ(b.bsums[g], sum);
    }
  }
}

// ------------------------------------------------------------------ AVX2 vs scalar dots

// Sum of |w_i * a_i| over dequantized values: the scale for float-rounding tolerances.
double abs_dot(DType wt, const void* w, DType at, const void* a, int64_t n) {
  std::vector<float> wf(n), af(n);
  dequantize_row(wt, w, wf.data(), n);
  dequantize_row(at, a, af.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * af[i]);
  return s;
}

struct DotCase {
  DType weight;
  DType act;
  int64_t n;
};

class QuantsDot : public ::testing::TestWithParam<DotCase> {};

float scalar_dot(DType wt, int64_t n, const void* w, const void* a) {
  switch (wt) {
    case DType::F32: return vec_dot_f32_f32(n, static_cast<const float*>(w), static_cast<const float*>(a));
    case DType::F16: return vec_dot_f16_f16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a));
    case DType::BF16:
      return vec_dot_bf16_bf16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a));
    case DType::Q8_0:
      return vec_dot_q8_0_q8_0(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::Q4_0:
      return vec_dot_q4_0_q8_0(n, static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::Q4_1:
      return vec_dot_q4_1_q8_1(n, static_cast<const BlockQ4_1*>(w), static_cast<const BlockQ8_1*>(a));
    case DType::Q5_0:
      return vec_dot_q5_0_q8_0(n, static_cast<const BlockQ5_0*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::Q5_1:
      return vec_dot_q5_1_q8_1(n, static_cast<const BlockQ5_1*>(w), static_cast<const BlockQ8_1*>(a));
    case DType::Q2_K:
      return vec_dot_q2_K_q8_K(n, static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q3_K:
      return vec_dot_q3_K_q8_K(n, static_cast<const BlockQ3_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::IQ4_NL:
      return vec_dot_iq4_nl_q8_0(n, static_cast<const BlockIQ4_NL*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::IQ4_XS:
      return vec_dot_iq4_xs_q8_K(n, static_cast<const BlockIQ4_XS*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q4_K:
      return vec_dot_q4_K_q8_K(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q5_K:
      return vec_dot_q5_K_q8_K(n, static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q6_K:
      return vec_dot_q6_K_q8_K(n, static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(a));
    default: ADD_FAILURE(); return 0;
  }
}

float avx2_dot(DType wt, int64_t n, const void* w, const void* a) {
  switch (wt) {
    case DType::F32: return avx2::vec_dot_f32_f32(n, static_cast<const float*>(w), static_cast<const float*>(a));
    case DType::F16:
      return avx2::vec_dot_f16_f16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a));
    case DType::BF16:
      return avx2::vec_dot_bf16_bf16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a));
    case DType::Q8_0:
      return avx2::vec_dot_q8_0_q8_0(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::Q4_0:
      return avx2::vec_dot_q4_0_q8_0(n, static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::Q4_1:
      return avx2::vec_dot_q4_1_q8_1(n, static_cast<const BlockQ4_1*>(w), static_cast<const BlockQ8_1*>(a));
    case DType::Q5_0:
      return avx2::vec_dot_q5_0_q8_0(n, static_cast<const BlockQ5_0*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::Q5_1:
      return avx2::vec_dot_q5_1_q8_1(n, static_cast<const BlockQ5_1*>(w), static_cast<const BlockQ8_1*>(a));
    case DType::Q2_K:
      return avx2::vec_dot_q2_K_q8_K(n, static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q3_K:
      return avx2::vec_dot_q3_K_q8_K(n, static_cast<const BlockQ3_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::IQ4_NL:
      return avx2::vec_dot_iq4_nl_q8_0(n, static_cast<const BlockIQ4_NL*>(w), static_cast<const BlockQ8_0*>(a));
    case DType::IQ4_XS:
      return avx2::vec_dot_iq4_xs_q8_K(n, static_cast<const BlockIQ4_XS*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q4_K:
      return avx2::vec_dot_q4_K_q8_K(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q5_K:
      return avx2::vec_dot_q5_K_q8_K(n, static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(a));
    case DType::Q6_K:
      return avx2::vec_dot_q6_K_q8_K(n, static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(a));
    default: ADD_FAILURE(); return 0;
  }
}

// Converts float activations to the dot type with the scalar quantizers.
std::vector<uint8_t> convert_activations(DType at, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(row_bytes(at, n));
  switch (at) {
    case DType::F32: std::memcpy(out.data(), x.data(), n * 4); break;
    case DType::F16: quantize_row_f16(x.data(), reinterpret_cast<uint16_t*>(out.data()), n); break;
    case DType::BF16: quantize_row_bf16(x.data(), reinterpret_cast<uint16_t*>(out.data()), n); break;
    case DType::Q8_0: quantize_row_q8_0(x.data(), reinterpret_cast<BlockQ8_0*>(out.data()), n); break;
    case DType::Q8_1: quantize_row_q8_1(x.data(), reinterpret_cast<BlockQ8_1*>(out.data()), n); break;
    case DType::Q8_K: quantize_row_q8_K(x.data(), reinterpret_cast<BlockQ8_K*>(out.data()), n); break;
    default: ADD_FAILURE();
  }
  return out;
}

TEST_P(QuantsDot, Avx2MatchesScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  const DotCase c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(c.weight) * 31 + static_cast<uint32_t>(c.n));
  for (int trial = 0; trial < 20; ++trial) {
    const auto w = random_weights(c.weight, 1, c.n, rng);
    const auto a = convert_activations(c.act, random_floats(c.n, rng));
    const float ref = scalar_dot(c.weight, c.n, w.data(), a.data());
    const float simd = avx2_dot(c.weight, c.n, w.data(), a.data());
    const double scale = abs_dot(c.weight, w.data(), c.act, a.data(), c.n);
    EXPECT_NEAR(simd, ref, 1e-5 * scale + 1e-6) << dtype_name(c.weight) << " trial " << trial;
    // And both agree with a double-precision dot of the dequantized values.
    std::vector<float> wf(c.n), af(c.n);
    dequantize_row(c.weight, w.data(), wf.data(), c.n);
    dequantize_row(c.act, a.data(), af.data(), c.n);
    double exact = 0;
    if (c.weight == DType::Q4_1 || c.weight == DType::Q5_1) {
      // ggml's offset term is m * s with s the fp16-rounded block sum, so split it out the same way.
      const auto* ab = reinterpret_cast<const BlockQ8_1*>(a.data());
      const auto block_min = [&](int64_t b) {
        return fp16_to_fp32(c.weight == DType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(w.data())[b].m
                                                    : reinterpret_cast<const BlockQ5_1*>(w.data())[b].m);
      };
      for (int64_t i = 0; i < c.n; ++i) exact += static_cast<double>(wf[i] - block_min(i / 32)) * af[i];
      for (int64_t b = 0; b < c.n / 32; ++b) exact += static_cast<double>(block_min(b)) * fp16_to_fp32(ab[b].s);
    } else {
      for (int64_t i = 0; i < c.n; ++i) exact += static_cast<double>(wf[i]) * af[i];
    }
    EXPECT_NEAR(ref, exact, 1e-5 * scale + 1e-6) << dtype_name(c.weight) << " trial " << trial;
  }
}

// The AVX2 activation quantizers must be bit-identical to the scalar ones (golden numerics), including
// exact .5 ties (roundf rounds them away from zero), zero blocks and the int8 order after packing.
TEST(QuantsActivations, Avx2Q8QuantizersMatchScalarBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  std::mt19937 rng(17);
  const int64_t n = 32 * 40;
  std::vector<float> x = random_floats(n, rng);
  for (int j = 0; j < 32; ++j) x[j] = (j == 0) ? 127.0f : static_cast<float>(j % 7) - 3.5f;  // d = 1: ties
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;                                                    // d = 0
  for (int j = 64; j < 96; ++j) x[j] = (j == 64) ? -254.0f : 0.5f * static_cast<float>(j - 80);  // d = 2
  for (int64_t j = 96; j < n; ++j) x[j] *= static_cast<float>(1 + j % 5) * 3.0f;
  std::vector<BlockQ8_0> a0(n / 32), b0(n / 32);
  quantize_row_q8_0(x.data(), a0.data(), n);
  avx2::quantize_row_q8_0(x.data(), b0.data(), n);
  EXPECT_EQ(std::memcmp(a0.data(), b0.data(), a0.size() * sizeof(BlockQ8_0)), 0);
  std::vector<BlockQ8_1> a1(n / 32), b1(n / 32);
  quantize_row_q8_1(x.data(), a1.data(), n);
  avx2::quantize_row_q8_1(x.data(), b1.data(), n);
  EXPECT_EQ(std::memcmp(a1.data(), b1.data(), a1.size() * sizeof(BlockQ8_1)), 0);
  // The ties really are ties: 2.5 -> 3 and -3.5 -> -4 in the first block.
  EXPECT_EQ(b0[0].qs[6], 3);   // 6 % 7 - 3.5 = 2.5
  EXPECT_EQ(b0[0].qs[7], -4);  // 0 - 3.5
}

// ActPack32::quantize_avx2 (8 blocks at a time, straight into the pack) against quantize-then-pack, for
// row lengths with and without a tail of blocks past the last 8, ties, zero blocks, NaN and infinities.
TEST(QuantsActivations, PackedQuantizersMatchQuantizeThenPack) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  std::mt19937 rng(23);
  for (int64_t n : {int64_t{32}, int64_t{32 * 7}, int64_t{32 * 8}, int64_t{32 * 19}, int64_t{2048}}) {
    const int tok = 3;
    std::vector<float> x = random_floats(n * tok, rng);
    for (int j = 0; j < 32; ++j) x[j] = (j == 0) ? 127.0f : static_cast<float>(j % 7) - 3.5f;  // ties
    if (n >= 64)
      for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // d = 0
    if (n >= 128) {
      x[70] = std::numeric_limits<float>::quiet_NaN();
      x[100] = std::numeric_limits<float>::infinity();
      x[101] = -std::numeric_limits<float>::infinity();
    }
    for (int64_t j = n; j < n * tok; ++j) x[j] *= static_cast<float>(1 + j % 5) * 3.0f;
    for (DType act : {DType::Q8_0, DType::Q8_1}) {
      ActPack32 want, got;
      want.reset(act, n, tok);
      got.reset(act, n, tok);
      for (int t = 0; t < tok; ++t) {
        std::vector<uint8_t> row(row_bytes(act, n));
        if (act == DType::Q8_0) {
          avx2::quantize_row_q8_0(x.data() + t * n, reinterpret_cast<BlockQ8_0*>(row.data()), n);
        } else {
          avx2::quantize_row_q8_1(x.data() + t * n, reinterpret_cast<BlockQ8_1*>(row.data()), n);
        }
        want.pack(t, row.data());
        got.quantize_avx2(t, x.data() + t * n);
      }
      for (int t = 0; t < tok; ++t) {
        const PackedActs32 w = want.token(t), g = got.token(t);
        ASSERT_EQ(std::memcmp(w.qs, g.qs, static_cast<size_t>(n)), 0) << "n " << n << " token " << t;
        ASSERT_EQ(std::memcmp(w.d, g.d, static_cast<size_t>(n / 32) * sizeof(float)), 0) << "n " << n;
        if (act == DType::Q8_0) {
          ASSERT_EQ(std::memcmp(w.q4_offset, g.q4_offset, static_cast<size_t>(n / 32) * sizeof(int32_t)), 0);
        } else {
          ASSERT_EQ(std::memcmp(w.s, g.s, static_cast<size_t>(n / 32) * sizeof(float)), 0);
        }
      }
    }
  }
}

// quantize_row_q8_K feeds every K-quant matmul: the AVX2 one must give the scalar one's bytes, scale and
// block sums for ordinary blocks, all-zero blocks, a negative extreme, ties for the extreme (the first
// one sets the sign), exact .5 rounding ties, infinities and NaNs.
TEST(QuantsActivations, Avx2Q8KQuantizerMatchesScalarBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  std::mt19937 rng(29);
  const int64_t n = 256 * 12;
  std::vector<float> x = random_floats(n, rng);
  for (int64_t j = 0; j < n; ++j) x[j] *= static_cast<float>(1 + j % 7) * 2.5f;
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);                  // block 1: zeros
  x[512 + 77] = -40.0f;                                               // block 2: negative extreme
  x[768 + 5] = 1000.0f;                                               // block 3: +1000 first, then -1000
  x[768 + 200] = -1000.0f;
  x[1024 + 9] = -1000.0f;                                             // block 4: -1000 first, then +1000
  x[1024 + 100] = 1000.0f;
  for (int j = 0; j < 256; ++j)                                       // block 5: scale 1, .5 ties
    x[1280 + j] = j == 0 ? -127.0f : static_cast<float>(j % 9) - 4.5f;
  x[1536 + 3] = INFINITY;                                             // block 6: an infinity
  x[1792 + 17] = NAN;                                                 // block 7: a NaN among normals
  for (int j = 0; j < 256; ++j) x[2048 + j] = (j % 2) ? NAN : 0.0f;   // block 8: NaNs and zeros
  for (int j = 0; j < 256; ++j) x[2304 + j] = 1e-30f * static_cast<float>(j - 128);  // block 9: tiny values
  std::vector<BlockQ8_K> a(n / 256), b(n / 256);
  quantize_row_q8_K(x.data(), a.data(), n);
  avx2::quantize_row_q8_K(x.data(), b.data(), n);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i].d, &b[i].d, sizeof(float)), 0) << "block " << i;
    EXPECT_EQ(std::memcmp(a[i].qs, b[i].qs, sizeof(a[i].qs)), 0) << "block " << i;
    EXPECT_EQ(std::memcmp(a[i].bsums, b[i].bsums, sizeof(a[i].bsums)), 0) << "block " << i;
  }
  // The cases are what they claim: the sign of the first extreme decides, and ties round to even.
  EXPECT_EQ(b[3].qs[5], -127);
  EXPECT_EQ(b[4].qs[9], -127);
  EXPECT_EQ(b[4].qs[100], 127);
  EXPECT_EQ(b[5].qs[1], -4);  // -3.5 -> -4
  EXPECT_EQ(b[5].qs[2], -2);  // -2.5 -> -2 (to even, not away from zero)
}

// F16C's conversion against the scalar one (the KV cache's f16 stores and F16-weight activations):
// the same bits for normals, halfway ties, values that round up into the next binade or to infinity,
// f16 subnormals and underflow, zeros and infinities; NaN stays NaN with its sign.
TEST(QuantsActivations, Avx2F16ConversionMatchesScalarBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  std::mt19937 rng(23);
  std::vector<float> x = random_floats(1000, rng);
  for (float& v : x) v *= 37.0f;
  const float specials[] = {0.0f,       -0.0f,     1.0f,        1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f,
                            1.0f + 3 * 0x1p-11f,   65504.0f,    65519.0f,        65520.0f,
                            -65520.0f,  1e6f,      0x1p-14f,    0x1p-24f,        0x1p-25f,
                            0x1.8p-25f, 0x1p-26f,  -0x1.4p-20f, 0x1.ffcp-15f,    INFINITY,
                            -INFINITY,  NAN,       -NAN,        1e-30f,          2047.5f};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  // Random bit patterns cover exponents the scaled normals above do not.
  for (int i = 0; i < 4000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  for (int64_t len : {int64_t{0}, int64_t{5}, static_cast<int64_t>(x.size())}) {
    std::vector<uint16_t> want(len), got(len);
    quantize_row_f16(x.data(), want.data(), len);
    avx2::quantize_row_f16(x.data(), got.data(), len);
    for (int64_t i = 0; i < len; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(fp16_to_fp32(got[i]))) << i;
        EXPECT_EQ(got[i] & 0x8000, want[i] & 0x8000) << i;
      } else {
        EXPECT_EQ(got[i], want[i]) << "x = " << x[i];
      }
    }
  }
}

// Multi-row tiles of the 32-element block types: every (rows, tokens) shape gives each (row, token) pair
// the scalar reference's value to float rounding, and bit-for-bit the same value as the 1 x 1 tile
// (batch invariance: a token's logits must not depend on what it is batched with).
void check_block32_tiles(const DotCase& c, std::mt19937& rng) {
  constexpr int kRows = avx2::kMaxTileRows;
  constexpr int kTok = avx2::kMaxBlock32Tokens;
  const auto w = random_weights(c.weight, kRows, c.n, rng);
  const size_t stride = w.size() / kRows;
  std::vector<std::vector<uint8_t>> blocks;
  ActPack32 pack;
  pack.reset(c.act, c.n, kTok);
  for (int t = 0; t < kTok; ++t) {
    blocks.push_back(convert_activations(c.act, random_floats(c.n, rng)));
    pack.pack(t, blocks.back().data());
  }
  PackedActs32 acts[kTok];
  for (int t = 0; t < kTok; ++t) acts[t] = pack.token(t);
  const auto tile = avx2::block32_tile(c.weight);
  float single[kRows][kTok];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTok; ++t) {
      tile(c.n, w.data() + r * stride, stride, 1, &acts[t], 1, &single[r][t]);
      const float ref = scalar_dot(c.weight, c.n, w.data() + r * stride, blocks[t].data());
      const double scale = abs_dot(c.weight, w.data() + r * stride, c.act, blocks[t].data(), c.n);
      EXPECT_NEAR(single[r][t], ref, 1e-5 * scale + 1e-6) << "row " << r << " token " << t;
    }
  for (int n_rows = 1; n_rows <= kRows; ++n_rows)
    for (int n_tok = 1; n_tok <= kTok; ++n_tok)
      for (int r0 = 0; r0 + n_rows <= kRows; ++r0)
        for (int t0 = 0; t0 + n_tok <= kTok; ++t0) {
          float out[kRows * kTok];
          tile(c.n, w.data() + r0 * stride, stride, n_rows, acts + t0, n_tok, out);
          for (int r = 0; r < n_rows; ++r)
            for (int t = 0; t < n_tok; ++t)
              EXPECT_EQ(out[r * n_tok + t], single[r0 + r][t0 + t])
                  << n_rows << " x " << n_tok << " tile at row " << r0 + r << " token " << t0 + t;
        }
}

TEST_P(QuantsDot, TileMatchesSingleDots) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  const DotCase c = GetParam();
  std::mt19937 rng(99);
  if (has_block32_tile(c.weight)) {
    check_block32_tiles(c, rng);
    return;
  }
  const auto w = random_weights(c.weight, 1, c.n, rng);
  std::vector<std::vector<uint8_t>> acts;
  const void* ptrs[avx2::kMaxTileTokens];
  for (int t = 0; t < avx2::kMaxTileTokens; ++t) acts.push_back(convert_activations(c.act, random_floats(c.n, rng)));
  for (int t = 0; t < avx2::kMaxTileTokens; ++t) ptrs[t] = acts[t].data();
  using Tile = void (*)(int64_t, const void*, const void* const*, int, float*);
  Tile tile = nullptr;
  switch (c.weight) {
    case DType::F32: tile = avx2::dot_tile_f32; break;
    case DType::F16: tile = avx2::dot_tile_f16; break;
    case DType::BF16: tile = avx2::dot_tile_bf16; break;
    case DType::Q2_K: tile = avx2::dot_tile_q2_K; break;
    case DType::Q3_K: tile = avx2::dot_tile_q3_K; break;
    case DType::IQ4_XS: tile = avx2::dot_tile_iq4_xs; break;
    case DType::Q4_K: tile = avx2::dot_tile_q4_K; break;
    case DType::Q5_K: tile = avx2::dot_tile_q5_K; break;
    case DType::Q6_K: tile = avx2::dot_tile_q6_K; break;
    default: FAIL();
  }
  for (int n_tok = 1; n_tok <= avx2::kMaxTileTokens; ++n_tok) {
    float out[avx2::kMaxTileTokens];
    tile(c.n, w.data(), ptrs, n_tok, out);
    for (int t = 0; t < n_tok; ++t) {
      const float ref = scalar_dot(c.weight, c.n, w.data(), ptrs[t]);
      const double scale = abs_dot(c.weight, w.data(), c.act, ptrs[t], c.n);
      EXPECT_NEAR(out[t], ref, 1e-5 * scale + 1e-6) << "n_tok " << n_tok << " token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Quants, QuantsDot,
    ::testing::Values(DotCase{DType::F32, DType::F32, 517}, DotCase{DType::F16, DType::F16, 517},
                      DotCase{DType::BF16, DType::BF16, 517}, DotCase{DType::Q8_0, DType::Q8_0, 544},
                      DotCase{DType::Q4_0, DType::Q8_0, 544}, DotCase{DType::Q4_1, DType::Q8_1, 544},
                      DotCase{DType::Q4_K, DType::Q8_K, 768}, DotCase{DType::Q5_K, DType::Q8_K, 768},
                      DotCase{DType::Q6_K, DType::Q8_K, 768}, DotCase{DType::Q5_0, DType::Q8_0, 544},
                      DotCase{DType::Q5_1, DType::Q8_1, 544}, DotCase{DType::Q2_K, DType::Q8_K, 768},
                      DotCase{DType::Q3_K, DType::Q8_K, 768}, DotCase{DType::IQ4_NL, DType::Q8_0, 544},
                      DotCase{DType::IQ4_XS, DType::Q8_K, 768}),
    [](const ::testing::TestParamInfo<DotCase>& info) { return std::string(dtype_name(info.param.weight)); });

}  // namespace
}  // namespace kvserve
