#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "engine/kv_row_store.h"
#include "kernels/cpu/matmul.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"

using namespace kvserve;

TEST(Ops, RmsNormMatchesDefinition) {
  std::vector<float> x = {1, -2, 3, 0.5f}, w = {1, 2, 0.5f, 1}, out(4);
  rmsnorm(x.data(), w.data(), out.data(), 4, 1e-5f);
  const double ms = (1 + 4 + 9 + 0.25) / 4.0;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] / std::sqrt(ms + 1e-5) * w[i], 1e-6);
}

// Reference RoPE straight from the definitions in ../shared/golden/gguf/README.md.
static void rope_ref(std::vector<float>& x, int head_dim, int64_t pos, float base, bool neox) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double theta = pos * std::pow(double(base), -2.0 * i / head_dim);
    const int a = neox ? i : 2 * i, b = neox ? i + head_dim / 2 : 2 * i + 1;
    const double x0 = x[a], x1 = x[b];
    x[a] = float(x0 * std::cos(theta) - x1 * std::sin(theta));
    x[b] = float(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

TEST(Ops, RopeMatchesReferenceBothStyles) {
  for (bool neox : {false, true}) {
    for (int64_t pos : {0, 1, 7, 100, 511}) {
      const int hd = 16;
      std::vector<float> x(2 * hd);
      for (int i = 0; i < 2 * hd; ++i) x[i] = std::sin(0.3f * i + 1);
      std::vector<float> h0(x.begin(), x.begin() + hd), h1(x.begin() + hd, x.end());
      Rope rope(hd, hd, 10000.0f, neox ? RopeStyle::NeoX : RopeStyle::Interleaved, RopeScaling{});
      std::vector<float> cos_sin(rope.n_rot());
      rope.angles(pos, cos_sin.data());
      rope.rotate(x.data(), 2, cos_sin.data());
      rope_ref(h0, hd, pos, 10000.0f, neox);
      rope_ref(h1, hd, pos, 10000.0f, neox);
      for (int i = 0; i < hd; ++i) {
        EXPECT_NEAR(x[i], h0[i], 2e-4) << "pos " << pos << " neox " << neox;
        EXPECT_NEAR(x[hd + i], h1[i], 2e-4);
      }
    }
  }
}

// LongRoPE: pair i's angle is pos * base^(-2i/d) / factor_i, its cos and sin times the attention factor,
// with the long or the short factors as asked.
TEST(Ops, LongRopeDividesByItsFactorsAndScales) {
  const int hd = 8;
  RopeScaling s;
  s.type = RopeScaling::Type::LongRope;
  s.long_factors = {1.0f, 2.0f, 4.0f, 8.0f};
  s.short_factors = {1.0f, 1.5f, 1.25f, 3.0f};
  s.original_context = 4096;
  s.attn_factor = 1.19f;
  for (bool long_factors : {false, true}) {
    const Rope rope(hd, hd, 10000.0f, RopeStyle::NeoX, s, long_factors);
    const std::vector<float>& f = long_factors ? s.long_factors : s.short_factors;
    for (int64_t pos : {0, 3, 1000, 100000}) {
      std::vector<float> cs(hd);
      rope.angles(pos, cs.data());
      for (int i = 0; i < hd / 2; ++i) {
        const double theta = static_cast<double>(pos) * std::pow(10000.0, -2.0 * i / hd) / f[static_cast<size_t>(i)];
        EXPECT_NEAR(cs[2 * i], std::cos(theta) * 1.19, 2e-3 * std::max<double>(1, pos / 1000.0)) << pos << " " << i;
        EXPECT_NEAR(cs[2 * i + 1], std::sin(theta) * 1.19, 2e-3 * std::max<double>(1, pos / 1000.0)) << pos << " " << i;
      }
    }
  }
  s.short_factors.pop_back();
  EXPECT_THROW(Rope(hd, hd, 10000.0f, RopeStyle::NeoX, s, false), Error);
  EXPECT_NO_THROW(Rope(hd, hd, 10000.0f, RopeStyle::NeoX, s, true));
  s.long_factors.pop_back();
  EXPECT_THROW(Rope(hd, hd, 10000.0f, RopeStyle::NeoX, s, true), Error);
}

TEST(Ops, SiluMul) {
  std::vector<float> g = {0, 1, -2}, u = {3, 2, 1}, o(3);
  silu_mul(g.data(), u.data(), o.data(), 3);
  EXPECT_FLOAT_EQ(o[0], 0);
  EXPECT_NEAR(o[1], 2 * (1 / (1 + std::exp(-1.0))), 1e-6);
  EXPECT_NEAR(o[2], -2 / (1 + std::exp(2.0)), 1e-6);
}

// The AVX2 path against the scalar reference: within a few ulp across the whole float range a gate can
// take, every tail length, in place, and non-finite inputs giving exactly what the scalar formula gives.
// GeGLU as llama.cpp's CPU backend computes it: the gate rounded to f16 and its GELU taken from a table of f16
// values, 0 at or below -10 and the gate itself at or above 10. Against the exact tanh formula in double
// (within f16 rounding of input and output) and against the table's definition bit for bit.
TEST(Ops, GeluMulFollowsLlamaCppsF16Table) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-12.0f, 12.0f);
  std::vector<float> gate(4096), up(4096), out(4096);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = uni(rng), up[i] = uni(rng);
  gate[0] = -10.0f, gate[1] = 10.0f, gate[2] = 0.0f, gate[3] = -10.5f, gate[4] = 11.0f;
  gelu_mul(gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size()));
  bool some_rounded = false;
  for (size_t i = 0; i < gate.size(); ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      ASSERT_EQ(out[i], 0.0f) << x;
      continue;
    }
    if (x >= 10.0f) {
      ASSERT_EQ(out[i], x * up[i]) << x;
      continue;
    }
    const float table = fp16_to_fp32(fp32_to_fp16(gelu_tanh(fp16_to_fp32(fp32_to_fp16(x)))));
    ASSERT_EQ(out[i], table * up[i]) << x;
    const double xd = x;
    const double exact = 0.5 * xd * (1.0 + std::tanh(0.7978845608028654 * xd * (1.0 + 0.044715 * xd * xd)));
    // f16 keeps 11 bits: the input moves by up to 2^-11 relative and the output by as much again.
    ASSERT_NEAR(out[i] / up[i], exact, 2e-3 * std::max(1.0, std::fabs(exact))) << x;
    some_rounded |= table != gelu_tanh(x);
  }
  EXPECT_TRUE(some_rounded);  // the table is not the float formula
  std::vector<float> in_place = gate;
  gelu_mul(in_place.data(), up.data(), in_place.data(), static_cast<int64_t>(gate.size()));
  EXPECT_EQ(in_place, out);
}

// GeGLU as transformers computes gelu_pytorch_tanh in float32 (Hugging Face folders): every value through the tanh
// formula, within float rounding of it in double, and in place.
TEST(Ops, GeluExactMulFollowsTheTanhFormula) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> uni(-12.0f, 12.0f);
  std::vector<float> gate(4096), up(4096), out(4096);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = uni(rng), up[i] = uni(rng);
  gelu_exact_mul(gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size()));
  bool differs_from_table = false;
  std::vector<float> table(gate.size());
  gelu_mul(gate.data(), up.data(), table.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double x = gate[i];
    const double exact = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
    ASSERT_NEAR(out[i], exact * up[i], 1e-5 * std::max(1.0, std::fabs(exact * up[i]))) << x;
    differs_from_table |= out[i] != table[i];
  }
  EXPECT_TRUE(differs_from_table);
  std::vector<float> in_place = gate;
  gelu_exact_mul(in_place.data(), up.data(), in_place.data(), static_cast<int64_t>(gate.size()));
  EXPECT_EQ(in_place, out);
}

// An AVX2 gated activation (out = f(gate) * g(up), ref its scalar formula) against its reference: within 4 ulp
// over gates from -120 to 120, the exp range's edges and huge values, and infinities and NaN where the reference
// gives them;
// each element's value depends on that element only (the same bits at every offset and row length: a batch's
// tokens sit at arbitrary offsets of one flattened array), next to out-of-range neighbours too; in place.
template <typename Ref, typename Simd>
void expect_gated_avx2_matches(const Ref& ref, const Simd& simd, float (*up_of)(size_t)) {
  std::vector<float> g, u;
  for (float x = -120.0f; x <= 120.0f; x += 0.01953125f) g.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, -86.99f, -87.0f, -87.01f, 87.99f, 88.0f, 88.01f, 3.4e38f, -3.4e38f})
    g.push_back(x);
  for (float x : {INFINITY, -INFINITY, NAN}) g.push_back(x);
  for (size_t i = 0; i < g.size(); ++i) u.push_back(up_of(i));
  for (int64_t len :
       {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{17}, static_cast<int64_t>(g.size())}) {
    std::vector<float> want(len), got(len);
    ref(g.data(), u.data(), want.data(), len);
    simd(g.data(), u.data(), got.data(), len);
    for (int64_t i = 0; i < len; ++i) {
      if (std::isnan(want[i]) || std::isinf(want[i])) {
        EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "gate " << g[i];
        if (std::isinf(want[i])) {
          EXPECT_EQ(got[i], want[i]) << "gate " << g[i];
        }
        continue;
      }
      EXPECT_LE(std::fabs(got[i] - want[i]), 4 * std::numeric_limits<float>::epsilon() * std::fabs(want[i]) + 1e-37f)
          << "gate " << g[i] << " up " << u[i];
    }
  }
  {
    std::vector<float> gm;
    for (int k = 0; k < 64; ++k) gm.push_back(20.0f * std::sin(1.7f * static_cast<float>(k) + 0.3f));
    gm[5] = 95.0f;
    gm[20] = -100.0f;
    gm[33] = NAN;
    std::vector<float> um(gm.size(), 1.5f);
    for (size_t i = 0; i < gm.size(); ++i) {
      float alone;
      simd(gm.data() + i, um.data() + i, &alone, 1);
      for (size_t off = 0; off <= i; ++off) {
        std::vector<float> o(gm.size() - off);
        simd(gm.data() + off, um.data() + off, o.data(), static_cast<int64_t>(o.size()));
        if (std::isnan(alone)) {
          EXPECT_TRUE(std::isnan(o[i - off]));
        } else {
          EXPECT_EQ(o[i - off], alone) << "element " << i << " at offset " << i - off;
        }
      }
    }
  }
  std::vector<float> inplace(g.begin(), g.begin() + 1000), want(1000);
  ref(g.data(), u.data(), want.data(), 1000);
  simd(inplace.data(), u.data(), inplace.data(), 1000);
  for (int i = 0; i < 1000; ++i)
    EXPECT_LE(std::fabs(inplace[i] - want[i]), 4 * std::numeric_limits<float>::epsilon() * std::fabs(want[i]) + 1e-37f);
}

TEST(Ops, SiluMulAvx2MatchesScalarReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  expect_gated_avx2_matches([](const float* g, const float* u, float* o, int64_t n) { silu_mul_ref(g, u, o, n); },
                            [](const float* g, const float* u, float* o, int64_t n) { avx2::silu_mul(g, u, o, n); },
                            [](size_t i) { return 0.5f + 0.25f * static_cast<float>(i % 7); });
}

TEST(Ops, GeluExactMulAvx2MatchesScalarReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  expect_gated_avx2_matches(
      [](const float* g, const float* u, float* o, int64_t n) { gelu_exact_mul_ref(g, u, o, n); },
      [](const float* g, const float* u, float* o, int64_t n) { avx2::gelu_exact_mul(g, u, o, n); },
      [](size_t i) { return 0.5f + 0.25f * static_cast<float>(i % 7); });
}

// gpt-oss's clamped SwiGLU (alpha 1.702, limit 7): gates past the limit, ups past +-limit and NaN included.
TEST(Ops, SwigluOaiAvx2MatchesScalarReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  expect_gated_avx2_matches(
      [](const float* g, const float* u, float* o, int64_t n) { swiglu_oai_mul_ref(g, u, o, n, 1.702f, 7.0f); },
      [](const float* g, const float* u, float* o, int64_t n) { avx2::swiglu_oai_mul(g, u, o, n, 1.702f, 7.0f); },
      [](size_t i) { return 4.0f * (static_cast<float>(i % 7) - 3.0f) + 0.5f; });  // -11.5..12.5
}

// The vectorized argmax against the scalar loop it replaces: ties (first wins), NaNs anywhere (never
// chosen; index 0 when x[0] is NaN), -0.0 against +0.0, infinities, every length around the 8/16 steps.
TEST(Ops, ArgmaxAvx2MatchesScalarLoop) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-3, 3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int checked = 0;
  for (int64_t n = 1; n <= 70; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      // Few distinct values, so ties are common.
      for (float& v : x) v = static_cast<float>(small(rng));
      const int kind = trial % 8;
      if (kind == 1) x[rng() % n] = nan;
      if (kind == 2) x[0] = nan;
      if (kind == 3)
        for (float& v : x) v = (rng() % 2) ? 0.0f : -0.0f;
      if (kind == 4) x[rng() % n] = INFINITY;
      if (kind == 5)
        for (float& v : x) v = (rng() % 3) ? nan : -INFINITY;
      if (kind == 6)
        for (float& v : x) v = -static_cast<float>(rng() % 1000);
      if (kind == 7)
        for (float& v : x) v = nan;
      ASSERT_EQ(avx2::argmax(x.data(), n), argmax_ref(x.data(), n)) << "n " << n << " trial " << trial;
      ASSERT_EQ(argmax(x.data(), n), argmax_ref(x.data(), n));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 70 * 40);
  // A 128k-vocabulary row with the maximum near the end.
  std::vector<float> big(128256);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * 0.001f;
  big[128250] = 5.0f;
  EXPECT_EQ(avx2::argmax(big.data(), static_cast<int64_t>(big.size())), 128250);
}

// Temperature sampling's weights: the vector exp against std::exp element by element (NaN and far-below
// elements get 0), the double sum against the scalar one, every length around the 8-wide steps.
TEST(Ops, ExpWeightsAvx2MatchesScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n = 1; n <= 40; ++n) {
    for (float inv_t : {0.5f, 1.0f, 1.7f, 40.0f}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = logit(rng);
      if (n > 3) x[rng() % n] = nan;
      if (n > 5) x[rng() % n] = -INFINITY;
      float mx = -INFINITY;
      for (float v : x)
        if (v > mx) mx = v;
      std::vector<float> got(x.size(), -1.0f), want(x.size(), -1.0f);
      const double sum = avx2::exp_weights(x.data(), n, mx, inv_t, got.data());
      const double want_sum = exp_weights_ref(x.data(), n, mx, inv_t, want.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_GE(got[i], 0.0f) << "n " << n << " i " << i;
        ASSERT_LE(got[i], 1.0f);
        // Below exp(-87) the vector path answers 0 where std::exp gives a tiny or denormal value.
        ASSERT_LE(std::fabs(got[i] - want[i]), 4 * std::numeric_limits<float>::epsilon() * want[i] + 2e-38f)
            << "n " << n << " i " << i << " x " << x[i];
        if (std::isnan(x[i])) {
          ASSERT_EQ(got[i], 0.0f);
        }
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
      EXPECT_GE(sum, 1.0 - 1e-6);  // the maximum's own weight is 1
    }
  }
}

TEST(Ops, PrefetchHintsLeaveMemoryAsItWas) {
  std::vector<float> buf(1000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i) * 0.5f;
  const std::vector<float> before = buf;
  prefetch_for_read(buf.data(), buf.size() * sizeof(float));
  prefetch_for_write(buf.data(), buf.size() * sizeof(float));
  // Lines past the end and a null pointer are asked for (or skipped) without a fault.
  prefetch_for_read(buf.data() + buf.size(), 4096);
  prefetch_for_read(nullptr, 4096);
  prefetch_for_write(nullptr, 4096);
  EXPECT_EQ(std::memcmp(buf.data(), before.data(), buf.size() * sizeof(float)), 0);
}

TEST(Ops, KvRowAddressIsWhereStoreKvRowWrites) {
  const int64_t n = 24, off = 40;
  std::vector<float> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = 1.0f + static_cast<float>(i);
  for (const KVElemType type : {KVElemType::F32, KVElemType::F16, KVElemType::BF16}) {
    std::vector<unsigned char> cache(1024, 0);
    store_kv_row(type, src.data(), n, cache.data(), off);
    const auto* row = static_cast<unsigned char*>(kv_row_address(type, cache.data(), off));
    const size_t bytes = kv_row_bytes(type, n);
    EXPECT_EQ(bytes, static_cast<size_t>(n) * (type == KVElemType::F32 ? 4 : 2));
    // Every byte outside [row, row + bytes) is untouched, and the row's last element is not zero.
    for (size_t i = 0; i < cache.size(); ++i) {
      const bool inside = cache.data() + i >= row && cache.data() + i < row + bytes;
      if (!inside) {
        EXPECT_EQ(cache[i], 0) << "byte " << i;
      }
    }
    const size_t elem = type == KVElemType::F32 ? 4 : 2;
    EXPECT_NE(std::memcmp(row + bytes - elem, std::vector<unsigned char>(elem, 0).data(), elem), 0);
  }
}
