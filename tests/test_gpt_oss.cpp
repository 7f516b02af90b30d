// gpt-oss's pieces: MXFP4 weights (scales, quantizer, dots and kernels), the clamped SwiGLU, and the harmony
// vocabulary's end-of-generation rule. The forward pass itself is checked against llama.cpp in test_golden.cpp.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"
#include "model/gpt_oss_experts.h"
#include "model/loaders.h"
#include "model/model.h"
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

// 2^(e - 128) from its bits for every exponent, subnormal ones (e < 2) included.
TEST(Mxfp4, HalfScaleIsTwoToTheEMinus128ForEveryExponent) {
  for (int e = 0; e < 256; ++e) EXPECT_EQ(mxfp4_half_scale(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128)) << e;
}

// ggml's quantize_row_mxfp4_ref: e = floor(log2(max |x|)) - 2 + 127, each value the nearest level (the first of
// two equally near), so values on the grid come back exactly; a block of zeros has e = 0.
TEST(Mxfp4, QuantizesAsGgml) {
  std::mt19937 rng(13);
  std::vector<float> x(32 * 24);
  for (size_t i = 0; i < x.size(); ++i) {
    const float mag = std::ldexp(1.0f, static_cast<int>(i / 32) - 12);  // a different magnitude per block
    x[i] = std::uniform_real_distribution<float>(-mag, mag)(rng);
  }
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // block 1: zeros
  // Block 2: values on the grid of its scale (max 6 * 2^-3: e = floor(log2 0.75) + 125 = 124).
  for (int j = 0; j < 32; ++j) x[64 + j] = static_cast<float>(kMXFP4Values[j % 16]) * std::ldexp(1.0f, -4);
  x[64] = 0.5f * (kMXFP4Values[5] + kMXFP4Values[6]) * std::ldexp(1.0f, -4);  // halfway between 6 and 8: 6 wins
  std::vector<BlockMXFP4> q(x.size() / 32);
  quantize_row_mxfp4(x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  dequantize_row_mxfp4(q.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < q.size(); ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const int want_e = amax > 0.0f ? static_cast<int>(std::floor(std::log2(amax))) + 125 : 0;
    ASSERT_EQ(q[b].e, want_e) << "block " << b;
    const float d = std::ldexp(1.0f, want_e - 128);
    for (int j = 0; j < 32; ++j) {
      const float v = x[b * 32 + j];
      const int code = j < 16 ? q[b].qs[j] & 0xF : q[b].qs[j - 16] >> 4;
      for (int k = 0; k < 16; ++k) {
        const float err = std::fabs(kMXFP4Values[k] * d - v), chosen = std::fabs(kMXFP4Values[code] * d - v);
        ASSERT_TRUE(chosen < err || (chosen == err && code <= k))
            << "block " << b << " element " << j << " level " << k;
      }
    }
  }
  for (int j = 1; j < 32; ++j) EXPECT_EQ(back[64 + j], x[64 + j]) << j;
  EXPECT_EQ(back[64], 6.0f * std::ldexp(1.0f, -4));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(back[32 + j], 0.0f);
}

// The same blocks as llama.cpp's gguf-py quantizer writes for values at several magnitudes (1e-30 to 1e20), zeros,
// values on a block's grid and halfway between two levels (tests/data/mxfp4, scripts/make_mxfp4_fixture.py).
TEST(Mxfp4, QuantizerWritesLlamaCppsBytes) {
  const auto read = [](const std::string& name) {
    std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/mxfp4/" + name, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  const std::vector<char> input = read("input.f32"), want = read("gguf.bin");
  const size_t n = input.size() / sizeof(float);
  ASSERT_EQ(n % 32, 0u);
  ASSERT_EQ(want.size(), n / 32 * sizeof(BlockMXFP4));
  std::vector<float> x(n);
  std::memcpy(x.data(), input.data(), input.size());
  std::vector<BlockMXFP4> got(n / 32);
  quantize_row_mxfp4(x.data(), got.data(), static_cast<int64_t>(n));
  for (size_t b = 0; b < got.size(); ++b)
    ASSERT_EQ(std::memcmp(&got[b], want.data() + b * sizeof(BlockMXFP4), sizeof(BlockMXFP4)), 0) << "block " << b;
}

// The scalar MXFP4 x Q8_0 dot is the double sum of the dequantized products (within float rounding), and the
// AVX2 tile's is the scalar one's.
TEST(Mxfp4, DotMatchesTheDequantizedSum) {
  std::mt19937 rng(17);
  const int64_t n = 32 * 9;
  std::vector<BlockMXFP4> w;
  for (int64_t i = 0; i < n / 32; ++i) w.push_back(random_block(rng, static_cast<uint8_t>(118 + i)));
  std::vector<float> x(n);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  std::vector<BlockQ8_0> a(n / 32);
  quantize_row_q8_0(x.data(), a.data(), n);
  std::vector<float> wf(n), af(n);
  dequantize_row_mxfp4(w.data(), wf.data(), n);
  dequantize_row(DType::Q8_0, a.data(), af.data(), n);
  double want = 0, mag = 0;
  for (int64_t k = 0; k < n; ++k) {
    want += static_cast<double>(wf[k]) * af[k];
    mag += std::fabs(static_cast<double>(wf[k]) * af[k]);
  }
  const float got = vec_dot_mxfp4_q8_0(n, w.data(), a.data());
  EXPECT_NEAR(got, want, 1e-6 * mag);
  if (cpu_has_avx2()) {
    EXPECT_NEAR(avx2::vec_dot_mxfp4_q8_0(n, w.data(), a.data()), got, 1e-6 * mag);
  }
}

// MXFP4 weights multiply with their own kernels (the interleaved rows, in groups and in pairs, and the tiles past the
// last 8) for every scale exponent, the subnormal scales (e < 2) included: each row's products match the scalar dots',
// and the weight keeps MXFP4's bytes in its interleaved copy.
TEST(Mxfp4, KernelsTakeEveryScaleExponent) {
  std::mt19937 rng(19);
  const std::vector<int> exponents = {0, 1, 2, 3, 60, 100, 118, 127, 128, 140, 180, 200, 230};
  const int64_t n_in = 96, n_out = static_cast<int64_t>(exponents.size()) + 8;  // 2 groups of 8 and 5 more rows
  std::vector<BlockMXFP4> blocks;
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t i = 0; i < n_in / 32; ++i)
      blocks.push_back(random_block(rng, static_cast<uint8_t>(exponents[static_cast<size_t>(r) % exponents.size()])));
  Tensor w;
  w.type = DType::MXFP4;
  w.ne = {n_in, n_out, 1, 1};
  w.n_dims = 2;
  w.data = blocks.data();
  // The group layout on every AVX2 core; the pair layout too where the 512-bit kernels run (their scales
  // are built from the exponents by code of their own).
  std::vector<bool> layouts = {false};
  if (cpu_has_avx512_vnni()) layouts.push_back(true);
  for (const bool pairs : layouts) {
    Tensor wl = w;
    std::shared_ptr<uint8_t[]> interleaved;
    if (cpu_has_avx2()) {
      EXPECT_TRUE(has_pair_layout(DType::MXFP4));
      EXPECT_EQ(interleaved_bytes(wl), static_cast<size_t>(n_out / 8 * 8 * n_in / 32) * sizeof(BlockMXFP4));
      interleaved = interleave_rows(wl, pairs);
      wl.interleaved = interleaved.get();
      wl.interleaved_pairs = pairs;
    }
    for (int64_t n_tokens : {1, 3, 8}) {
      std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
      for (float& v : x) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      std::vector<float> got(static_cast<size_t>(n_tokens * n_out), NAN), want(got.size(), NAN);
      set_simd_enabled(false);
      matmul(wl, x.data(), n_tokens, want.data());
      set_simd_enabled(true);
      matmul(wl, x.data(), n_tokens, got.data());
      std::vector<BlockQ8_0> a(static_cast<size_t>(n_in / 32));
      for (int64_t t = 0; t < n_tokens; ++t) {
        quantize_row_q8_0(x.data() + t * n_in, a.data(), n_in);
        for (int64_t r = 0; r < n_out; ++r) {
          const float dot = vec_dot_mxfp4_q8_0(n_in, blocks.data() + r * n_in / 32, a.data());
          const size_t at = static_cast<size_t>(t * n_out + r);
          EXPECT_EQ(want[at], dot) << "row " << r;
          ASSERT_NE(dot, 0.0f) << "row " << r;  // the subnormal scales still give a nonzero product
          EXPECT_NEAR(got[at], dot, 1e-6 * std::fabs(dot)) << "row " << r << " e " << exponents[r % exponents.size()]
                                                           << " tokens " << n_tokens << (pairs ? " (pairs)" : "");
        }
      }
    }
  }
}

// A big expert's blocks repacked from a checkpoint, which the AVX2 kernels read from its interleaved copy, are
// kept in a temporary file's pages rather than memory of their own; a small one, or one of fewer than 8 rows,
// in memory.
TEST(Mxfp4, LargeCheckpointExpertsKeepTheirRowMajorBlocksInAFile) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no interleaved copy without AVX2";
  // A folder this test knows exists (the default, /var/tmp, may not on every machine).
  ::setenv("KVSERVE_TMPDIR", std::filesystem::temp_directory_path().c_str(), 1);
  const std::shared_ptr<uint8_t[]> big = mxfp4_weight_buffer(3 * (size_t{1} << 20), 1536);
  const std::shared_ptr<uint8_t[]> small = mxfp4_weight_buffer(size_t{1} << 16, 1536);
  const std::shared_ptr<uint8_t[]> few_rows = mxfp4_weight_buffer(3 * (size_t{1} << 20), 4);
  ::unsetenv("KVSERVE_TMPDIR");
  EXPECT_NE(test::mapping_of(big.get()).find("kvserve-weights-"), std::string::npos) << test::mapping_of(big.get());
  EXPECT_EQ(test::mapping_of(small.get()).find("kvserve-weights-"), std::string::npos);
  EXPECT_EQ(test::mapping_of(few_rows.get()).find("kvserve-weights-"), std::string::npos);
  big[3 * (size_t{1} << 20) - 1] = 9;
  EXPECT_EQ(big[3 * (size_t{1} << 20) - 1], 9);
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
