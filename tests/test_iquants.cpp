// The i-quant types below 4 bits (iquants.h): dequantizers bit for bit as ggml's and dots as ggml's CPU
// kernels, on random blocks ggml itself read (tests/data/iquants, scripts/make_iq_fixture.cpp); the AVX2
// decoders byte for byte the scalar ones; the AVX2 tiles and the AVX-512 tokens-in-lanes kernel the scalar
// reference's bits; the decoded form's bounds that the SIMD integer arithmetic relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/iquants.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "random_weights.h"

namespace kvserve {
namespace {

constexpr DType kTypes[] = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                            DType::IQ3_S,   DType::IQ1_S,  DType::IQ1_M};

struct GgmlCase {
  DType type;
  int n_blocks;
  std::vector<uint8_t> blocks;
  std::vector<float> weights;  // ggml's to_float
  std::vector<float> activations;
  float dot;  // ggml's vec_dot with the activations as Q8_K
};

std::vector<GgmlCase> read_ggml_cases() {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/iquants/ggml_iq_blocks.bin", std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<GgmlCase> out;
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (at + n > bytes.size()) throw std::runtime_error("fixture too short");
    std::memcpy(dst, bytes.data() + at, n);
    at += n;
  };
  while (at < bytes.size()) {
    GgmlCase c;
    uint32_t id = 0, nb = 0;
    take(&id, 4);
    take(&nb, 4);
    c.type = static_cast<DType>(id);
    c.n_blocks = static_cast<int>(nb);
    c.blocks.resize(static_cast<size_t>(dtype_info(c.type).block_bytes) * nb);
    take(c.blocks.data(), c.blocks.size());
    c.weights.resize(static_cast<size_t>(nb) * kQK_K);
    take(c.weights.data(), c.weights.size() * 4);
    c.activations.resize(c.weights.size());
    take(c.activations.data(), c.activations.size() * 4);
    take(&c.dot, 4);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<BlockQ8_K> to_q8_K(const std::vector<float>& x) {
  std::vector<BlockQ8_K> q(x.size() / kQK_K);
  quantize_row_q8_K(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

TEST(IQuants, DequantizersAreBitIdenticalToGgmls) {
  const std::vector<GgmlCase> cases = read_ggml_cases();
  ASSERT_EQ(cases.size(), std::size(kTypes));
  for (size_t k = 0; k < cases.size(); ++k) {
    const GgmlCase& c = cases[k];
    ASSERT_EQ(c.type, kTypes[k]);
    std::vector<float> got(c.weights.size(), NAN);
    dequantize_row_iq(c.type, c.blocks.data(), got.data(), static_cast<int64_t>(got.size()));
    int differing = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &c.weights[i], 4) != 0 && differing++ < 3)
        ADD_FAILURE() << dtype_name(c.type) << " element " << i << ": " << got[i] << " vs ggml's " << c.weights[i];
    EXPECT_EQ(differing, 0) << dtype_name(c.type);
  }
}

using Tile = void (*)(int64_t, const void*, const void* const*, int, float*);

Tile avx2_tile(DType type) {
  switch (type) {
    case DType::IQ2_XXS:
      return avx2::dot_tile_iq2_xxs;
    case DType::IQ2_XS:
      return avx2::dot_tile_iq2_xs;
    case DType::IQ2_S:
      return avx2::dot_tile_iq2_s;
    case DType::IQ3_XXS:
      return avx2::dot_tile_iq3_xxs;
    case DType::IQ3_S:
      return avx2::dot_tile_iq3_s;
    case DType::IQ1_S:
      return avx2::dot_tile_iq1_s;
    default:
      return avx2::dot_tile_iq1_m;
  }
}

TEST(IQuants, DotsAgreeWithGgmlsCpuKernels) {
  const std::vector<GgmlCase> cases = read_ggml_cases();
  ASSERT_EQ(cases.size(), std::size(kTypes));
  for (const GgmlCase& c : cases) {
    const auto q = to_q8_K(c.activations);
    const auto n = static_cast<int64_t>(c.activations.size());
    // Only the float summation order differs: the integer part of each block is exact in both.
    const float tol = 2e-5f * (std::fabs(c.dot) + 1.0f);
    EXPECT_NEAR(vec_dot_iq_q8_K(c.type, n, c.blocks.data(), q.data()), c.dot, tol) << dtype_name(c.type);
    if (!cpu_has_avx2()) continue;
    const void* rows[1] = {q.data()};
    float out = NAN;
    avx2_tile(c.type)(n, c.blocks.data(), rows, 1, &out);
    EXPECT_NEAR(out, c.dot, tol) << dtype_name(c.type) << " (AVX2)";
  }
}

// The scalar dot is the dequantized row times the dequantized Q8_K activations, summed exactly.
TEST(IQuants, ScalarDotIsTheDequantizedProduct) {
  std::mt19937 rng(5);
  const int64_t n = 4 * kQK_K;
  for (DType type : kTypes) {
    for (int trial = 0; trial < 20; ++trial) {
      const auto w = testing::random_weights(type, 1, n, rng);
      const auto x = testing::random_floats(n, rng);
      const auto q = to_q8_K(x);
      std::vector<float> wf(n), xf(n);
      dequantize_row_iq(type, w.data(), wf.data(), n);
      dequantize_row_q8_K(q.data(), xf.data(), n);
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        want += static_cast<double>(wf[i]) * xf[i];
        magnitude += std::fabs(static_cast<double>(wf[i]) * xf[i]);
      }
      EXPECT_NEAR(vec_dot_iq_q8_K(type, n, w.data(), q.data()), want, 1e-5 * magnitude + 1e-6) << dtype_name(type);
    }
  }
}

// Every kernel takes the same float step per block (iq_accumulate) after an exact integer dot, so the AVX2
// tiles and the AVX-512 kernel give the scalar reference's bits, for every token whatever shares its call.
TEST(IQuants, SimdKernelsGiveTheScalarReferencesBitsWhateverTheBatch) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(6);
  const int64_t n = 3 * kQK_K;
  constexpr int kTok = avx2::kMaxTileTokens;
  for (DType type : kTypes) {
    const auto w = testing::random_weights(type, 1, n, rng);
    std::vector<std::vector<BlockQ8_K>> acts;
    for (int t = 0; t < kTok; ++t) acts.push_back(to_q8_K(testing::random_floats(n, rng)));
    const void* rows[kTok];
    const BlockQ8_K* q8[kTok];
    float want[kTok];
    for (int t = 0; t < kTok; ++t) {
      rows[t] = q8[t] = acts[static_cast<size_t>(t)].data();
      want[t] = vec_dot_iq_q8_K(type, n, w.data(), q8[t]);
    }
    for (int n_tok = 1; n_tok <= avx2::kMaxTileTokens; ++n_tok) {
      float out[avx2::kMaxTileTokens];
      avx2_tile(type)(n, w.data(), rows, n_tok, out);
      for (int t = 0; t < n_tok; ++t)
        EXPECT_EQ(std::memcmp(&out[t], &want[t], 4), 0)
            << dtype_name(type) << " AVX2, token " << t << " of " << n_tok << ": " << out[t] << " vs " << want[t];
    }
  }
}

// The tokens-in-lanes kernels (16 lanes on zmm, 8 on ymm with AVX-512 or with AVX-VNNI): every row and token
// the scalar reference's bits, with 1..lanes tokens (the missing ones zero) and row counts around the bands.
struct LaneKernel {
  const char* name;
  bool available;
  int lanes;
  void (*decode)(DType, const void*, int64_t, CodedIQBlock*);
  void (*to_lanes)(const uint8_t*, size_t, int, int64_t, IQTokenLanes&);
  void (*gemm)(DType, int64_t, const CodedIQBlock*, int, const IQTokenLanes&, float*);
};

TEST(IQuants, TokenLanesKernelsGiveTheScalarReferencesBits) {
  const LaneKernel kernels[] = {
      {"zmm x16", cpu_has_avx512_vnni(), 16, avx512vnni::decode_iq_coded, avx512vnni::tokens_to_lanes,
       avx512vnni::gemm_iq_coded},
      {"ymm x8 (AVX-512)", cpu_has_avx512_vnni(), 8, avx512vnni::decode_iq_coded, avx512vnni::tokens_to_lanes8,
       avx512vnni::gemm_iq_coded8},
      {"ymm x8 (AVX-VNNI)", cpu_has_avx_vnni(), 8, avxvnni::decode_iq_coded, avxvnni::tokens_to_lanes8,
       avxvnni::gemm_iq_coded8},
  };
  int ran = 0;
  std::mt19937 rng(8);
  const int64_t n = 2 * kQK_K;
  constexpr int kMaxLanes = 16, kRows = 11;
  for (const LaneKernel& k : kernels) {
    if (!k.available) continue;
    ++ran;
    for (DType type : kTypes) {
      const auto w = testing::random_weights(type, kRows, n, rng);
      const size_t row_bytes = w.size() / kRows;
      std::vector<BlockQ8_K> acts(static_cast<size_t>(kMaxLanes * n / kQK_K));
      const auto x = testing::random_floats(kMaxLanes * n, rng);
      quantize_row_q8_K(x.data(), acts.data(), kMaxLanes * n);
      std::vector<CodedIQBlock> coded(static_cast<size_t>(kRows * n / kQK_K));
      for (int r = 0; r < kRows; ++r) k.decode(type, w.data() + r * row_bytes, n, coded.data() + r * n / kQK_K);
      std::vector<int8_t> q(static_cast<size_t>(n * kMaxLanes) + 64);
      std::vector<int32_t> bias(static_cast<size_t>(n) + 16);
      std::vector<float> d(static_cast<size_t>(n / kQK_K * kMaxLanes) + 16);
      auto aligned = [](auto* p) {
        return reinterpret_cast<decltype(p)>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
      };
      IQTokenLanes lanes{aligned(q.data()), aligned(bias.data()), aligned(d.data())};
      for (int n_tok : {1, 5, k.lanes}) {
        k.to_lanes(reinterpret_cast<const uint8_t*>(acts.data()), sizeof(BlockQ8_K) * n / kQK_K, n_tok, n, lanes);
        for (int n_rows : {1, 3, 4, 7, 8, 11}) {
          std::vector<float> out(static_cast<size_t>(n_rows * k.lanes), NAN);
          k.gemm(type, n, coded.data(), n_rows, lanes, out.data());
          for (int r = 0; r < n_rows; ++r)
            for (int t = 0; t < k.lanes; ++t) {
              const float got = out[static_cast<size_t>(r * k.lanes + t)];
              if (t >= n_tok) {  // a lane without a token stays zero
                EXPECT_EQ(got, 0.0f) << k.name << " " << dtype_name(type) << " row " << r << " lane " << t;
                continue;
              }
              const float want = vec_dot_iq_q8_K(type, n, w.data() + r * row_bytes, acts.data() + t * n / kQK_K);
              EXPECT_EQ(std::memcmp(&got, &want, 4), 0)
                  << k.name << " " << dtype_name(type) << " row " << r << " token " << t << " of " << n_tok << ": "
                  << got << " vs " << want;
            }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no vpdpbusd on this CPU";
}

// The AVX2 decoders give the scalar ones' blocks byte for byte (quants, scales, d, units), on random bits
// that reach every grid entry, index bit, sign pattern and scale.
TEST(IQuants, Avx2DecodersMatchTheScalarOnes) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(9);
  for (DType type : kTypes) {
    const IQDecodeFn scalar = iq_decoder(type), simd = avx2::iq_decoder(type);
    ASSERT_NE(simd, nullptr) << dtype_name(type);
    const int64_t nb = 2048;
    const auto w = testing::random_weights(type, 1, nb * kQK_K, rng);
    const auto block_bytes = static_cast<size_t>(dtype_info(type).block_bytes);
    int differing = 0;
    for (int64_t i = 0; i < nb; ++i) {
      DecodedIQBlock want{}, got{};
      scalar(w.data() + static_cast<size_t>(i) * block_bytes, want);
      simd(w.data() + static_cast<size_t>(i) * block_bytes, got);
      const bool same = std::memcmp(want.q, got.q, sizeof(want.q)) == 0 &&
                        std::memcmp(want.scale, got.scale, sizeof(want.scale)) == 0 && want.d == got.d &&
                        want.scale_unit == got.scale_unit && want.q_unit == got.q_unit;
      if (!same && differing++ < 2) ADD_FAILURE() << dtype_name(type) << " block " << i;
    }
    EXPECT_EQ(differing, 0) << dtype_name(type);
  }
  EXPECT_EQ(avx2::iq_decoder(DType::Q4_K), nullptr);
}

// What the AVX2 arithmetic relies on: |q| <= 62 (maddubs pair sums below 2^15) and odd scales 1..31, for
// every block (random bits reach every grid entry, sign pattern and scale).
TEST(IQuants, DecodedBlocksStayWithinTheKernelsBounds) {
  std::mt19937 rng(7);
  for (DType type : kTypes) {
    const IQDecodeFn decode = iq_decoder(type);
    ASSERT_NE(decode, nullptr);
    EXPECT_TRUE(is_low_bit_iquant(type));
    const auto w = testing::random_weights(type, 1, 512 * kQK_K, rng);
    int max_q = 0, max_scale = 0;
    bool odd = true;
    DecodedIQBlock blk;
    for (int64_t i = 0; i < 512; ++i) {
      decode(w.data() + static_cast<size_t>(i) * static_cast<size_t>(dtype_info(type).block_bytes), blk);
      for (int8_t v : blk.q) max_q = std::max(max_q, std::abs(static_cast<int>(v)));
      for (int16_t s : blk.scale) {
        max_scale = std::max<int>(max_scale, s);
        odd = odd && s >= 1 && s % 2 == 1;
      }
    }
    EXPECT_LE(max_q, 62) << dtype_name(type);
    EXPECT_GT(max_q, 0) << dtype_name(type);
    EXPECT_LE(max_scale, 31) << dtype_name(type);
    EXPECT_TRUE(odd) << dtype_name(type);
  }
  EXPECT_FALSE(is_low_bit_iquant(DType::IQ4_XS));
  EXPECT_FALSE(is_low_bit_iquant(DType::Q4_K));
  std::vector<float> y(kQK_K);
  std::vector<uint8_t> block(256);
  EXPECT_THROW(dequantize_row_iq(DType::Q4_K, block.data(), y.data(), kQK_K), Error);
}

}  // namespace
}  // namespace kvserve
