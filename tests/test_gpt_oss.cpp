// gpt-oss's pieces: MXFP4 weights as exact Q5_0 (or F32), the clamped SwiGLU, and the harmony vocabulary's
// end-of-generation rule. The forward pass itself is checked against llama.cpp in test_golden.cpp.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quants.h"
#include "model/loaders.h"
#include "model/model.h"
#include "model/mxfp4_weights.h"
#include "model/tokenizer.h"
#include "test_checks.h"

namespace kvserve {
namespace {

BlockMXFP4 random_block(std::mt19937& rng, uint8_t e) {
  BlockMXFP4 b{};
  b.e = e;
  for (uint8_t& q : b.qs) q = static_cast<uint8_t>(rng() & 0xFF);
  return b;
}

// The OCP MX spec's E2M1 code points, independent of the tables: sign bit 3, exponent bits 2..1, mantissa bit 0.
float e2m1(int code) {
  const int sign = code >> 3, exp = (code >> 1) & 3, man = code & 1;
  const float mag =
      exp == 0 ? 0.5f * static_cast<float>(man) : std::ldexp(1.0f + 0.5f * static_cast<float>(man), exp - 1);
  return sign != 0 ? -mag : mag;
}

TEST(Mxfp4, DequantizesAsTheSpecSays) {
  std::mt19937 rng(7);
  for (const uint8_t e : {uint8_t{1}, uint8_t{100}, uint8_t{127}, uint8_t{130}, uint8_t{200}}) {
    const BlockMXFP4 b = random_block(rng, e);
    float y[32];
    dequantize_row_mxfp4(&b, y, 32);
    for (int j = 0; j < 16; ++j) {
      const float scale = std::ldexp(1.0f, static_cast<int>(e) - 127);
      EXPECT_EQ(y[j], e2m1(b.qs[j] & 0xF) * scale) << "e " << int{e} << " element " << j;
      EXPECT_EQ(y[j + 16], e2m1(b.qs[j] >> 4) * scale) << "e " << int{e} << " element " << j + 16;
    }
  }
}

TEST(Mxfp4, BlocksWithFp16ScalesAreExactlyQ5_0) {
  std::mt19937 rng(11);
  for (int e = 104; e <= 143; ++e)
    for (int rep = 0; rep < 20; ++rep) {
      const BlockMXFP4 b = random_block(rng, static_cast<uint8_t>(e));
      BlockQ5_0 q{};
      ASSERT_TRUE(mxfp4_block_to_q5_0(b, q)) << e;
      float want[32], got[32];
      dequantize_row_mxfp4(&b, want, 32);
      dequantize_row_q5_0(&q, got, 32);
      for (int j = 0; j < 32; ++j) ASSERT_EQ(got[j], want[j]) << "e " << e << " element " << j;
    }
  // Outside fp16's range a block with a value does not fit; one of zeros (codes 0 and 8) does.
  BlockMXFP4 b = random_block(rng, 103);
  b.qs[0] = 0x21;
  BlockQ5_0 q{};
  EXPECT_FALSE(mxfp4_block_to_q5_0(b, q));
  b.e = 144;
  EXPECT_FALSE(mxfp4_block_to_q5_0(b, q));
  std::memset(b.qs, 0x80, sizeof b.qs);
  b.e = 3;
  ASSERT_TRUE(mxfp4_block_to_q5_0(b, q));
  float got[32];
  dequantize_row_q5_0(&q, got, 32);
  for (float v : got) EXPECT_EQ(v, 0.0f);
}

TEST(Mxfp4, WeightsWidenToQ5_0OrF32) {
  std::mt19937 rng(3);
  // Two 64-wide rows: in range; the same with one block's scale far below fp16's.
  std::vector<BlockMXFP4> fits, tiny;
  for (int i = 0; i < 4; ++i) fits.push_back(random_block(rng, static_cast<uint8_t>(120 + i)));
  tiny = fits;
  tiny[2].e = 60;
  tiny[2].qs[5] = 0x17;
  Model m;
  m.layers.resize(1);
  const auto view = [](const std::vector<BlockMXFP4>& blocks, const char* name) {
    Tensor t;
    t.name = name;
    t.type = DType::MXFP4;
    t.ne = {64, 2, 1, 1};
    t.n_dims = 2;
    t.data = blocks.data();
    return t;
  };
  m.layers[0].wq = view(fits, "wq");
  m.layers[0].gate_exps.push_back(view(tiny, "gate_exps[0]"));
  const size_t stored = m.storage.size();
  EXPECT_EQ(widen_mxfp4_weights(m), 2);
  EXPECT_EQ(m.storage.size(), stored + 2);
  ASSERT_EQ(m.layers[0].wq.type, DType::Q5_0);
  ASSERT_EQ(m.layers[0].gate_exps[0].type, DType::F32);
  std::vector<float> want(128), got(128);
  dequantize_row_mxfp4(fits.data(), want.data(), 128);
  dequantize_row_q5_0(static_cast<const BlockQ5_0*>(m.layers[0].wq.data), got.data(), 128);
  EXPECT_EQ(got, want);
  dequantize_row_mxfp4(tiny.data(), want.data(), 128);
  EXPECT_NE(want[64 + 5], 0.0f);  // the tiny block's value survives
  std::memcpy(got.data(), m.layers[0].gate_exps[0].data, 128 * sizeof(float));
  EXPECT_EQ(got, want);
  EXPECT_EQ(widen_mxfp4_weights(m), 0);  // nothing left to convert
}

// A big weight's Q5_0 copy, which the AVX2 kernels read from its interleaved copy, is kept in a temporary file's
// pages rather than memory of its own; its values are the same.
TEST(Mxfp4, LargeWeightsKeepTheirRowMajorCopyInAFile) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no interleaved copy without AVX2";
  std::mt19937 rng(5);
  const int64_t cols = 2048, rows = 1536;  // 98304 blocks: 2.1 MB as Q5_0
  std::vector<BlockMXFP4> blocks;
  for (int64_t i = 0; i < rows * cols / 32; ++i) blocks.push_back(random_block(rng, static_cast<uint8_t>(118 + i % 9)));
  Model m;
  m.layers.resize(1);
  Tensor& t = m.layers[0].down_exps.emplace_back();
  t.name = "down_exps[0]";
  t.type = DType::MXFP4;
  t.ne = {cols, rows, 1, 1};
  t.n_dims = 2;
  t.data = blocks.data();
  // A folder this test knows exists (the default, /var/tmp, may not on every machine).
  ::setenv("KVSERVE_TMPDIR", std::filesystem::temp_directory_path().c_str(), 1);
  const int widened = widen_mxfp4_weights(m);
  ::unsetenv("KVSERVE_TMPDIR");
  ASSERT_EQ(widened, 1);
  ASSERT_EQ(t.type, DType::Q5_0);
  const std::string held = test::mapping_of(t.data);
  EXPECT_NE(held.find("kvserve-weights-"), std::string::npos) << held;
  std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
  for (int64_t r : {int64_t{0}, rows / 2, rows - 1}) {
    dequantize_row_mxfp4(blocks.data() + r * cols / 32, want.data(), cols);
    dequantize_row_q5_0(static_cast<const BlockQ5_0*>(t.data) + r * cols / 32, got.data(), cols);
    EXPECT_EQ(got, want) << "row " << r;
  }
}

TEST(SwigluOai, ClampsAsGgml) {
  const std::vector<float> gate = {-20.0f, -1.0f, 0.0f, 0.5f, 3.0f, 7.0f, 10.0f, 2.0f, 2.0f};
  const std::vector<float> up = {1.0f, 2.0f, 3.0f, -0.5f, 0.25f, 1.0f, 1.0f, -9.0f, 9.0f};
  std::vector<float> out(gate.size());
  swiglu_oai_mul(gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size()), 1.702f, 7.0f);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = std::min(static_cast<double>(gate[i]), 7.0);
    const double u = std::clamp(static_cast<double>(up[i]), -7.0, 7.0);
    const double want = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
    EXPECT_NEAR(out[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << i;
  }
  // A gate past the limit acts as the limit; an up past it as the limit.
  EXPECT_EQ(out[6], out[5] * 1.0f);
  EXPECT_FLOAT_EQ(out[7] / out[8], -6.0f / 8.0f);
}

TEST(HarmonyVocab, EndClosesAMessageNotTheGeneration) {
  Vocab v;
  v.kind = Vocab::Kind::BPE;
  v.pre = "gpt-4o";
  v.tokens = {"a",       "b",           "<|endoftext|>", "<|return|>", "<|call|>",
              "<|end|>", "<|channel|>", "<|message|>",   "<|start|>"};
  v.token_types.assign(v.tokens.size(), TokenType::Normal);
  v.eos_id = 3;
  mark_end_of_turn_tokens(v);
  EXPECT_EQ(v.token_types[5], TokenType::UserDefined);
  EXPECT_EQ(v.token_types[6], TokenType::UserDefined);
  EXPECT_EQ(v.token_types[3], TokenType::Control);
  const auto tok = Tokenizer::create(v);
  EXPECT_TRUE(tok->is_eog(3));
  EXPECT_TRUE(tok->is_eog(4));
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(5));
  // Channel tokens are printed, as llama.cpp prints them (a client parses the harmony format from the text).
  EXPECT_EQ(tok->token_to_piece(6, false), "<|channel|>");
  // Without <|return|> and <|call|>, <|end|> ends generation (Phi-3's).
  Vocab phi = v;
  phi.tokens[3] = "x";
  phi.tokens[4] = "y";
  phi.token_types.assign(phi.tokens.size(), TokenType::Normal);
  phi.eot_id = -1;
  mark_end_of_turn_tokens(phi);
  EXPECT_EQ(phi.token_types[5], TokenType::Control);
  EXPECT_TRUE(Tokenizer::create(phi)->is_eog(5));
}

}  // namespace
}  // namespace kvserve
