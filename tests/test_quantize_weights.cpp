// Weight quantizers from float (kernels/cpu/quantize.h): ggml's reference semantics on hand-made blocks,
// round trips within the format's step, and Q4_K's scale search beating plain min/max quantization.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"
#include "model/gguf.h"

using namespace kvserve;

namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

}  // namespace

TEST(QuantizeWeights, Q4_0HandCheckedBlock) {
  // Largest magnitude is -8 (negative): d = -8 / -8 = 1, so every integer in [-8, 7] is exact.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j % 16) - 8);
  BlockQ4_0 b{};
  quantize_row_q4_0(x.data(), &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), 1.0f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], static_cast<uint8_t>(j | (j << 4))) << j;
  std::vector<float> y(32);
  dequantize_row_q4_0(&b, y.data(), 32);
  EXPECT_EQ(y, x);

  // Largest magnitude positive: d = 8 / -8 = -1, so +8 maps to q = 0 and -7 to q = 15 (clamped range).
  std::vector<float> p(32, 0.0f);
  p[0] = 8.0f;
  p[1] = -7.0f;
  quantize_row_q4_0(p.data(), &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), -1.0f);
  EXPECT_EQ(b.qs[0] & 0xF, 0);
  EXPECT_EQ(b.qs[1] & 0xF, 15);
  EXPECT_EQ(b.qs[2] & 0xF, 8);  // zero
}

TEST(QuantizeWeights, Q4_1HandCheckedBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j % 16) - 2.0f;  // min -2, step 0.5
  BlockQ4_1 b{};
  quantize_row_q4_1(x.data(), &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.5f);
  EXPECT_EQ(fp16_to_fp32(b.m), -2.0f);
  std::vector<float> y(32);
  dequantize_row_q4_1(&b, y.data(), 32);
  EXPECT_EQ(y, x);
}

TEST(QuantizeWeights, Q5_0AndQ5_1HandCheckedBlocks) {
  // Largest magnitude -16: d = 1, every integer in [-16, 15] exact; element j's 5th bit lands in bit j of qh.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ5_0 b0{};
  quantize_row_q5_0(x.data(), &b0, 32);
  EXPECT_EQ(fp16_to_fp32(b0.d), 1.0f);
  uint32_t qh;
  std::memcpy(&qh, b0.qh, 4);
  EXPECT_EQ(qh, 0xFFFF0000u);  // q = j: elements 16..31 have the 5th bit
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b0.qs[j], static_cast<uint8_t>(j | (j << 4))) << j;
  std::vector<float> y(32);
  dequantize_row_q5_0(&b0, y.data(), 32);
  EXPECT_EQ(y, x);

  // min -4, step 0.25 over 32 levels: exact.
  for (int j = 0; j < 32; ++j) x[j] = 0.25f * static_cast<float>((j * 7) % 32) - 4.0f;
  BlockQ5_1 b1{};
  quantize_row_q5_1(x.data(), &b1, 32);
  EXPECT_EQ(fp16_to_fp32(b1.d), 0.25f);
  EXPECT_EQ(fp16_to_fp32(b1.m), -4.0f);
  dequantize_row_q5_1(&b1, y.data(), 32);
  EXPECT_EQ(y, x);
}

TEST(QuantizeWeights, ZeroRowsStayZero) {
  const std::vector<float> zeros(256, 0.0f);
  std::vector<float> y(256, 1.0f);
  BlockQ4_0 q40[8];
  quantize_row_q4_0(zeros.data(), q40, 256);
  dequantize_row_q4_0(q40, y.data(), 256);
  EXPECT_EQ(y, zeros);
  BlockQ4_K q4k{};
  quantize_row_q4_K(zeros.data(), &q4k, 256);
  dequantize_row_q4_K(&q4k, y.data(), 256);
  EXPECT_EQ(y, zeros);
  BlockQ5_K q5k{};
  quantize_row_q5_K(zeros.data(), &q5k, 256);
  dequantize_row_q5_K(&q5k, y.data(), 256);
  EXPECT_EQ(y, zeros);
  BlockQ6_K q6k{};
  quantize_row_q6_K(zeros.data(), &q6k, 256);
  dequantize_row_q6_K(&q6k, y.data(), 256);
  EXPECT_EQ(y, zeros);
}

// More bits, less error: on the same data Q6_K < Q5_K < Q4_K in relative RMS error, each within what
// its bit width allows (a uniform b-bit grid over a Gaussian's range gives roughly 2^-b relative error).
// A quant packed into the wrong place would dequantize to garbage and fail the bounds.
TEST(QuantizeWeights, Q5_KAndQ6_KAreAccurateAndOrderedByBits) {
  const int64_t n = 256 * 32;
  const std::vector<float> x = gaussian(n, 11, 0.02f);
  std::vector<float> y4(static_cast<size_t>(n)), y5(y4.size()), y6(y4.size());
  std::vector<BlockQ4_K> q4(static_cast<size_t>(n / 256));
  std::vector<BlockQ5_K> q5(q4.size());
  std::vector<BlockQ6_K> q6(q4.size());
  quantize_row_q4_K(x.data(), q4.data(), n);
  quantize_row_q5_K(x.data(), q5.data(), n);
  quantize_row_q6_K(x.data(), q6.data(), n);
  dequantize_row_q4_K(q4.data(), y4.data(), n);
  dequantize_row_q5_K(q5.data(), y5.data(), n);
  dequantize_row_q6_K(q6.data(), y6.data(), n);
  const double e4 = rms_error(x, y4) / rms(x), e5 = rms_error(x, y5) / rms(x), e6 = rms_error(x, y6) / rms(x);
  EXPECT_LT(e5, 0.07) << "Q5_K";
  EXPECT_LT(e6, 0.035) << "Q6_K";
  EXPECT_LT(e5, 0.6 * e4) << "Q5_K against Q4_K";
  EXPECT_LT(e6, 0.6 * e5) << "Q6_K against Q5_K";
  // Q6_K's quants are signed around 0 with the extreme's sign folded into d: a lone spike comes back
  // close, and its zero neighbours stay near zero.
  std::vector<float> spike(256, 0.0f);
  spike[37] = -3.0f;
  spike[200] = 0.5f;
  BlockQ6_K b{};
  quantize_row_q6_K(spike.data(), &b, 256);
  std::vector<float> back(256);
  dequantize_row_q6_K(&b, back.data(), 256);
  EXPECT_NEAR(back[37], -3.0f, 0.05f);
  EXPECT_NEAR(back[200], 0.5f, 0.02f);
  EXPECT_EQ(back[0], 0.0f);
}

TEST(QuantizeWeights, RoundTripsWithinHalfAStep) {
  const int64_t n = 32 * 64;
  const std::vector<float> x = gaussian(n, 1, 0.02f);
  std::vector<BlockQ4_0> q40(static_cast<size_t>(n / 32));
  std::vector<BlockQ4_1> q41(static_cast<size_t>(n / 32));
  quantize_row_q4_0(x.data(), q40.data(), n);
  quantize_row_q4_1(x.data(), q41.data(), n);
  std::vector<float> y0(static_cast<size_t>(n)), y1(static_cast<size_t>(n));
  dequantize_row_q4_0(q40.data(), y0.data(), n);
  dequantize_row_q4_1(q41.data(), y1.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const auto& b0 = q40[static_cast<size_t>(i / 32)];
    const auto& b1 = q41[static_cast<size_t>(i / 32)];
    // Half a step, plus the fp16 rounding of the scale (which moves every level by up to 8 * 2^-11 * d).
    const float d0 = std::fabs(fp16_to_fp32(b0.d));
    const float d1 = fp16_to_fp32(b1.d);
    // Q4_0 clamps the side opposite the largest magnitude at 7 steps, so allow a whole step there.
    EXPECT_LE(std::fabs(y0[i] - x[i]), d0 * (1.0f + 0.01f)) << i;
    EXPECT_LE(std::fabs(y1[i] - x[i]), 0.5f * d1 + 0.01f * d1 + std::fabs(fp16_to_fp32(b1.m)) * 1e-3f) << i;
  }
}

TEST(QuantizeWeights, Q4_KIsAccurateAndBeatsPlainMinMax) {
  const int64_t n = 256 * 32;
  const std::vector<float> x = gaussian(n, 7, 0.02f);
  std::vector<BlockQ4_K> q(static_cast<size_t>(n / 256));
  quantize_row_q4_K(x.data(), q.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row_q4_K(q.data(), y.data(), n);
  for (const BlockQ4_K& b : q) {
    EXPECT_GE(fp16_to_fp32(b.d), 0.0f);
    EXPECT_GE(fp16_to_fp32(b.dmin), 0.0f);
  }
  const double err = rms_error(x, y) / rms(x);
  // Plain per-32 min/max 4-bit quantization (Q4_1) of the same data, as a yardstick.
  std::vector<BlockQ4_1> q41(static_cast<size_t>(n / 32));
  quantize_row_q4_1(x.data(), q41.data(), n);
  std::vector<float> y41(static_cast<size_t>(n));
  dequantize_row_q4_1(q41.data(), y41.data(), n);
  const double err41 = rms_error(x, y41) / rms(x);
  EXPECT_LT(err, 0.15) << "relative RMS error of Q4_K";
  EXPECT_LT(err, err41) << "Q4_K (with its scale search) should beat plain min/max 4-bit";
}

TEST(QuantizeWeights, Q5RoundTripsWithinHalfAStep) {
  const int64_t n = 32 * 64;
  const std::vector<float> x = gaussian(n, 2, 0.02f);
  std::vector<BlockQ5_0> q50(static_cast<size_t>(n / 32));
  std::vector<BlockQ5_1> q51(static_cast<size_t>(n / 32));
  quantize_row_q5_0(x.data(), q50.data(), n);
  quantize_row_q5_1(x.data(), q51.data(), n);
  std::vector<float> y0(static_cast<size_t>(n)), y1(static_cast<size_t>(n));
  dequantize_row_q5_0(q50.data(), y0.data(), n);
  dequantize_row_q5_1(q51.data(), y1.data(), n);
  double err0 = 0, err1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d0 = std::fabs(fp16_to_fp32(q50[static_cast<size_t>(i / 32)].d));
    const auto& b1 = q51[static_cast<size_t>(i / 32)];
    const float d1 = fp16_to_fp32(b1.d);
    // As Q4_0: the side opposite the largest magnitude clamps at 15 steps, so a whole step there.
    EXPECT_LE(std::fabs(y0[i] - x[i]), d0 * (1.0f + 0.01f)) << i;
    EXPECT_LE(std::fabs(y1[i] - x[i]), 0.5f * d1 + 0.01f * d1 + std::fabs(fp16_to_fp32(b1.m)) * 1e-3f) << i;
    err0 += std::fabs(y0[i] - x[i]);
    err1 += std::fabs(y1[i] - x[i]);
  }
  // 5 bits: about half the error of 4.
  std::vector<BlockQ4_0> q40(static_cast<size_t>(n / 32));
  quantize_row_q4_0(x.data(), q40.data(), n);
  std::vector<float> y4(static_cast<size_t>(n));
  dequantize_row_q4_0(q40.data(), y4.data(), n);
  double err4 = 0;
  for (int64_t i = 0; i < n; ++i) err4 += std::fabs(y4[i] - x[i]);
  EXPECT_LT(err0, 0.6 * err4);
  EXPECT_LT(err1, 0.6 * err4);
}

TEST(QuantizeWeights, RowDispatcherMatchesTheRoutines) {
  const int64_t n = 256;
  const std::vector<float> x = gaussian(n, 3);
  std::vector<uint8_t> a(row_bytes(DType::Q8_0, n)), b(a.size());
  quantize_row(DType::Q8_0, x.data(), a.data(), n);
  quantize_row_q8_0(x.data(), reinterpret_cast<BlockQ8_0*>(b.data()), n);
  EXPECT_EQ(a, b);
  std::vector<uint8_t> f16(row_bytes(DType::F16, n));
  quantize_row(DType::F16, x.data(), f16.data(), n);
  const auto* h = reinterpret_cast<const uint16_t*>(f16.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h[i], fp32_to_fp16(x[static_cast<size_t>(i)]));
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K})
    EXPECT_TRUE(can_quantize(t)) << dtype_name(t);
  std::vector<uint8_t> q50(row_bytes(DType::Q5_0, n)), q50_direct(q50.size());
  quantize_row(DType::Q5_0, x.data(), q50.data(), n);
  quantize_row_q5_0(x.data(), reinterpret_cast<BlockQ5_0*>(q50_direct.data()), n);
  EXPECT_EQ(q50, q50_direct);
  std::vector<uint8_t> q51(row_bytes(DType::Q5_1, n)), q51_direct(q51.size());
  quantize_row(DType::Q5_1, x.data(), q51.data(), n);
  quantize_row_q5_1(x.data(), reinterpret_cast<BlockQ5_1*>(q51_direct.data()), n);
  EXPECT_EQ(q51, q51_direct);
  std::vector<uint8_t> k5(row_bytes(DType::Q5_K, n)), k5_direct(k5.size());
  quantize_row(DType::Q5_K, x.data(), k5.data(), n);
  quantize_row_q5_K(x.data(), reinterpret_cast<BlockQ5_K*>(k5_direct.data()), n);
  EXPECT_EQ(k5, k5_direct);
  std::vector<uint8_t> xs(row_bytes(DType::IQ4_XS, n)), xs_direct(xs.size());
  quantize_row(DType::IQ4_XS, x.data(), xs.data(), n);
  quantize_row_iq4_xs(x.data(), reinterpret_cast<BlockIQ4_XS*>(xs_direct.data()), n);
  EXPECT_EQ(xs, xs_direct);
  EXPECT_FALSE(can_quantize(DType::Q3_K));
  std::vector<uint8_t> out(row_bytes(DType::Q3_K, n));
  EXPECT_THROW(quantize_row(DType::Q3_K, x.data(), out.data(), n), Error);
}

// A block built from the 16 levels themselves comes back exactly: the level grid at scale 1 is the best
// fit, IQ4_XS's super-block scale is -1/32 with sub-block scale -32 (stored 0), and a sub-block at half
// the scale gets -16 (stored 16: low bits 0, high bits 1).
TEST(QuantizeWeights, IQ4HandCheckedBlocks) {
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>(kIQ4Values[(5 * j + j / 32) % 16]);
  for (int j = 32; j < 64; ++j) x[j] *= 0.5f;
  BlockIQ4_XS b{};
  quantize_row_iq4_xs(x.data(), &b, 256);
  EXPECT_EQ(fp16_to_fp32(b.d), -1.0f / 32);
  EXPECT_EQ(b.scales_l[0], 0x00);
  EXPECT_EQ(b.scales_h, 1 << 2);
  for (int j = 1; j < 4; ++j) EXPECT_EQ(b.scales_l[j], 0) << j;
  EXPECT_EQ(b.qs[0] & 0xF, 0);  // x[0] is level 0
  std::vector<float> y(256);
  dequantize_row_iq4_xs(&b, y.data(), 256);
  EXPECT_EQ(y, x);

  // IQ4_NL: one scale per 32 as fp16; levels times 2 come back exactly.
  std::vector<float> x32(64);
  for (int j = 0; j < 64; ++j) x32[j] = 2.0f * static_cast<float>(kIQ4Values[(3 * j) % 16]);
  BlockIQ4_NL nl[2];
  quantize_row_iq4_nl(x32.data(), nl, 64);
  EXPECT_EQ(fp16_to_fp32(nl[0].d), 2.0f);
  std::vector<float> y32(64);
  dequantize_row_iq4_nl(nl, y32.data(), 64);
  EXPECT_EQ(y32, x32);

  // All zero: scale 0, every index the level nearest 0 (1, index 8), so it dequantizes to zeros.
  const std::vector<float> zeros(256, 0.0f);
  quantize_row_iq4_xs(zeros.data(), &b, 256);
  dequantize_row_iq4_xs(&b, y.data(), 256);
  EXPECT_EQ(y, zeros);
  EXPECT_EQ(b.qs[0], 0x88);
}

// IQ4_XS (4.25 bits) lands near Q4_K (4.5 bits) on Gaussian weights, far better than a wrong packing.
TEST(QuantizeWeights, IQ4_XSIsAccurate) {
  const int64_t n = 256 * 32;
  const std::vector<float> x = gaussian(n, 17, 0.02f);
  std::vector<BlockIQ4_XS> q(static_cast<size_t>(n / 256));
  std::vector<BlockQ4_K> q4(q.size());
  quantize_row_iq4_xs(x.data(), q.data(), n);
  quantize_row_q4_K(x.data(), q4.data(), n);
  std::vector<float> y(static_cast<size_t>(n)), y4(y.size());
  dequantize_row_iq4_xs(q.data(), y.data(), n);
  dequantize_row_q4_K(q4.data(), y4.data(), n);
  const double e = rms_error(x, y) / rms(x), e4 = rms_error(x, y4) / rms(x);
  EXPECT_LT(e, 0.11);
  EXPECT_LT(e, 1.2 * e4) << "against Q4_K's " << e4;
}

// The independent reference: every tensor llama.cpp's quantize tool wrote into the tiny-gqa variants
// (from the F16 tiny-gqa.gguf, no importance matrix) is what quantize_row writes from the same F16 values,
// byte for byte, for every type quantize_row supports.
TEST(QuantizeWeights, MatchesLlamaCppQuantizeByteForByte) {
  const std::string shared = std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/";
  const std::string quant = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/quant/";
  const GGUFFile source(shared + "tiny-gqa.gguf");
  std::map<DType, int> checked;
  for (const std::string& path :
       {shared + "tiny-gqa-Q8_0.gguf", shared + "tiny-gqa-Q4_0.gguf", shared + "tiny-gqa-Q4_1.gguf",
        shared + "tiny-gqa-Q4_K_M.gguf", shared + "tiny-gqa-Q5_K_M.gguf", shared + "tiny-gqa-Q6_K.gguf",
        shared + "tiny-gqa-BF16.gguf", quant + "tiny-gqa-Q5_0.gguf", quant + "tiny-gqa-Q5_1.gguf",
        quant + "tiny-gqa-IQ4_NL.gguf", quant + "tiny-gqa-IQ4_XS.gguf"}) {
    const GGUFFile file(path);
    for (const GGUFTensorInfo& t : file.tensors()) {
      const GGUFTensorInfo* src = source.find_tensor(t.name);
      ASSERT_NE(src, nullptr) << t.name;
      if (src->type != DType::F16 || !can_quantize(t.type) || t.type == DType::F16) continue;
      SCOPED_TRACE(path + ": " + t.name + " as " + std::string(dtype_name(t.type)));
      const int64_t cols = t.ne[0], rows = t.bytes / row_bytes(t.type, cols);
      ASSERT_EQ(src->ne[0], cols);
      const auto* h = reinterpret_cast<const uint16_t*>(src->data);
      std::vector<float> x(static_cast<size_t>(cols));
      std::vector<uint8_t> q(row_bytes(t.type, cols));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(j)] = fp16_to_fp32(h[r * cols + j]);
        quantize_row(t.type, x.data(), q.data(), cols);
        ASSERT_EQ(std::memcmp(q.data(), t.data + r * q.size(), q.size()), 0) << "row " << r;
      }
      ++checked[t.type];
    }
  }
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K, DType::BF16, DType::IQ4_NL, DType::IQ4_XS})
    EXPECT_GT(checked[type], 0) << dtype_name(type);
}
