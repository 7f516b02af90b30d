// matmul (threaded, token-tiled, SIMD or scalar) against matmul_ref, and matmul_ref against plain loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/bf16_dot_tiles_zmm.h"
#include "kernels/cpu/float_tiles_zmm.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "random_weights.h"

namespace kvserve {
namespace {

using testing::random_floats;
using testing::random_weights;

// Interleaved copies made by make_tensor live until the test binary exits (a few KiB each).
std::vector<std::shared_ptr<uint8_t[]>>& interleaved_keepalive() {
  static std::vector<std::shared_ptr<uint8_t[]>> buffers;
  return buffers;
}

// Like a loaded model's weights: Q4_0/Q4_1/Q8_0/K-quant tensors also get their 8-row interleaved copy (in
// the pair layout where the model loader would use it, unless `pairs` says otherwise), so every test here
// runs the interleaved kernels (grouped rows) and the one-row tiles (the rows past the last 8).
Tensor make_tensor(DType type, int64_t n_out, int64_t n_in, const std::vector<uint8_t>& data,
                   std::optional<bool> pairs = std::nullopt) {
  Tensor t;  // name left empty: assigning a literal trips a GCC 12 -Wrestrict false positive at -O3
  t.type = type;
  t.ne = {n_in, n_out, 1, 1};
  t.n_dims = 2;
  t.data = data.data();
  if (has_interleaved_layout(type) && n_out >= kInterleaveRows) {
    t.interleaved_pairs = pairs.value_or(interleaved_pairs_preferred(type));
    interleaved_keepalive().push_back(interleave_rows(t, t.interleaved_pairs));
    t.interleaved = interleaved_keepalive().back().get();
  }
  return t;
}

// Per-output scale for tolerances: sum_k |W[r][k]| * |x[t][k]| in double over dequantized weights.
std::vector<double> abs_products(const Tensor& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t n_in = w.cols(), n_out = w.rows();
  std::vector<double> out(n_tokens * n_out);
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    dequantize_row(w.type, w.row(r), row.data(), n_in);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int64_t k = 0; k < n_in; ++k) s += std::fabs(static_cast<double>(row[k]) * x[t * n_in + k]);
      out[t * n_out + r] = s;
    }
  }
  return out;
}

class MatmulTypes : public ::testing::TestWithParam<DType> {
 protected:
  void TearDown() override { set_simd_enabled(true); }
};

TEST_P(MatmulTypes, MatchesReferenceForManyShapes) {
  const DType type = GetParam();
  const int64_t n_in = dtype_info(type).block_elems == 256 ? 512 : 96;
  ThreadPool pool(3);  // more threads than cores on purpose: ranges must still cover every row once
  std::mt19937 rng(static_cast<uint32_t>(type) + 1);
  for (int64_t n_out : {1, 7, 37, 53}) {
    const auto data = random_weights(type, n_out, n_in, rng);
    const Tensor w = make_tensor(type, n_out, n_in, data);
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 13, 16, 17}) {
      const auto x = random_floats(n_tokens * n_in, rng);
      std::vector<float> ref(n_tokens * n_out), got(n_tokens * n_out, NAN);
      matmul_ref(w, x.data(), n_tokens, ref.data());
      const auto scale = abs_products(w, x, n_tokens);
      for (bool simd : {true, false}) {
        set_simd_enabled(simd);
        std::fill(got.begin(), got.end(), NAN);
        matmul(w, x.data(), n_tokens, got.data(), pool);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], ref[i], 2e-5 * scale[i] + 1e-6)
              << dtype_name(type) << " n_out " << n_out << " n_tokens " << n_tokens << " simd " << simd << " i " << i;
        }
      }
      set_simd_enabled(true);
    }
  }
}

// The largest quants against the largest activations: the K-quant kernels' int16 sums sit closest to
// overflow there (Q5_K: 4 maddubs pair sums of 31 * 127 * 2 per int16 lane, Q6_K: 2 of 63 * 127 * 2).
// Every quant bit is set; the activations are all +-1, so each Q8_K quant is +-127.
TEST(MatmulKQuants, LargestQuantsAndActivationsDoNotOverflow) {
  ThreadPool pool(2);
  std::mt19937 rng(9);
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t n_in = 2 * kQK_K, n_out = 16;
    auto data = random_weights(type, n_out, n_in, rng);
    const size_t block = dtype_info(type).block_bytes;
    for (size_t b = 0; b < data.size() / block; ++b) {
      uint8_t* p = data.data() + b * block;
      if (type == DType::Q4_K) std::memset(p + offsetof(BlockQ4_K, qs), 0xFF, sizeof(BlockQ4_K::qs));
      if (type == DType::Q5_K) {
        std::memset(p + offsetof(BlockQ5_K, qs), 0xFF, sizeof(BlockQ5_K::qs));
        std::memset(p + offsetof(BlockQ5_K, qh), 0xFF, sizeof(BlockQ5_K::qh));
      }
      if (type == DType::Q6_K) {
        std::memset(p + offsetof(BlockQ6_K, ql), 0xFF, sizeof(BlockQ6_K::ql));
        std::memset(p + offsetof(BlockQ6_K, qh), 0xFF, sizeof(BlockQ6_K::qh));
      }
    }
    const Tensor w = make_tensor(type, n_out, n_in, data);
    for (float sign : {1.0f, -1.0f}) {
      const int64_t n_tokens = 7;
      std::vector<float> x(n_tokens * n_in, sign);
      std::vector<float> ref(n_tokens * n_out), got(n_tokens * n_out, NAN);
      matmul_ref(w, x.data(), n_tokens, ref.data());
      matmul(w, x.data(), n_tokens, got.data(), pool);
      const auto scale = abs_products(w, x, n_tokens);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], 2e-5 * scale[i] + 1e-6) << dtype_name(type) << " sign " << sign << " i " << i;
    }
  }
}

TEST_P(MatmulTypes, LargeRowCountSplitsAcrossThreads) {
  const DType type = GetParam();
  const int64_t n_in = dtype_info(type).block_elems == 256 ? 256 : 64;
  const int64_t n_out = 16 * 9 + 5;  // not a multiple of the row grain
  ThreadPool pool(2);
  std::mt19937 rng(5);
  const auto data = random_weights(type, n_out, n_in, rng);
  const Tensor w = make_tensor(type, n_out, n_in, data);
  const int64_t n_tokens = 6;
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> ref(n_tokens * n_out), got(n_tokens * n_out, NAN);
  matmul_ref(w, x.data(), n_tokens, ref.data());
  matmul(w, x.data(), n_tokens, got.data(), pool);
  const auto scale = abs_products(w, x, n_tokens);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 2e-5 * scale[i] + 1e-6) << i;
}

// Token t of x multiplied alone: asserts each output is the bits `batch` (all of x's tokens) gave it, and
// returns them.
std::vector<float> expect_alone_as_in_batch(const Tensor& w, const std::vector<float>& x,
                                            const std::vector<float>& batch, int64_t t, ThreadPool& pool) {
  const int64_t n_in = w.cols(), n_out = w.rows();
  std::vector<float> alone(n_out);
  matmul(w, x.data() + t * n_in, 1, alone.data(), pool);
  for (int64_t r = 0; r < n_out; ++r) {
    EXPECT_EQ(batch[t * n_out + r], alone[r]) << dtype_name(w.type) << " token " << t << " row " << r;
    if (batch[t * n_out + r] != alone[r]) break;
  }
  return alone;
}

// Batch invariance: a token's outputs are bit-identical whether it is multiplied alone or among others
// (in any tile position). The engine relies on it: a request's greedy tokens must not depend on what it
// was batched with, nor on whether its prefix K/V came from the cache.
TEST_P(MatmulTypes, EachTokenIsBitIdenticalAloneOrInABatch) {
  const DType type = GetParam();
  const int64_t n_in = dtype_info(type).block_elems == 256 ? 768 : 224;  // odd block counts too
  const int64_t n_out = 19;
  ThreadPool pool(2);
  std::mt19937 rng(static_cast<uint32_t>(type) + 77);
  const auto data = random_weights(type, n_out, n_in, rng);
  const Tensor w = make_tensor(type, n_out, n_in, data);
  const int64_t n_tokens = 11;  // passes of 4, 4 and 3 (6 and 5 in the Q4 interleaved kernels)
  const auto x = random_floats(n_tokens * n_in, rng);
  for (bool simd : {true, false}) {
    SCOPED_TRACE(simd ? "simd" : "scalar");
    set_simd_enabled(simd);
    std::vector<float> batch(n_tokens * n_out);
    matmul(w, x.data(), n_tokens, batch.data(), pool);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const std::vector<float> alone = expect_alone_as_in_batch(w, x, batch, t, pool);
      if (HasFailure()) break;             // (set_simd_enabled(true) below still runs)
      std::vector<float> pair(2 * n_out);  // as the second token of a 2-token tile
      std::vector<float> two(x.begin() + ((t + 1) % n_tokens) * n_in, x.begin() + ((t + 1) % n_tokens + 1) * n_in);
      two.insert(two.end(), x.begin() + t * n_in, x.begin() + (t + 1) * n_in);
      matmul(w, two.data(), 2, pair.data(), pool);
      for (int64_t r = 0; r < n_out; ++r) ASSERT_EQ(pair[n_out + r], alone[r]) << dtype_name(type) << " token " << t;
    }
  }
  set_simd_enabled(true);
}

// Q/K/V-style fusion: one conversion and one parallel pass over the stacked rows must give exactly what
// separate calls give, including row counts that split tiles and thread ranges across the weights.
TEST_P(MatmulTypes, SharedInputMatchesSeparateCalls) {
  const DType type = GetParam();
  const int64_t n_in = dtype_info(type).block_elems == 256 ? 512 : 96;
  const int64_t rows[] = {37, 5, 21};
  ThreadPool pool(2);
  std::mt19937 rng(static_cast<uint32_t>(type) + 5);
  std::vector<std::vector<uint8_t>> data;
  std::vector<Tensor> ws;
  for (int64_t r : rows) data.push_back(random_weights(type, r, n_in, rng));
  for (size_t i = 0; i < data.size(); ++i) ws.push_back(make_tensor(type, rows[i], n_in, data[i]));
  for (int64_t n_tokens : {1, 6}) {
    const auto x = random_floats(n_tokens * n_in, rng);
    std::vector<std::vector<float>> fused(3), separate(3);
    std::vector<MatmulOutput> outs;
    for (size_t i = 0; i < 3; ++i) {
      fused[i].assign(n_tokens * rows[i], -1.0f);
      separate[i].resize(n_tokens * rows[i]);
      matmul(ws[i], x.data(), n_tokens, separate[i].data(), pool);
      outs.push_back({&ws[i], fused[i].data()});
    }
    matmul_shared_input(outs, x.data(), n_tokens, pool);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(fused[i], separate[i]) << dtype_name(type) << " weight " << i;
  }
}

// The residual add fused into the matmul: every row of every token gets exactly matmul's value added once
// (rows past the last 8 and ranges cut across threads included), the same bits as matmul then
// add_inplace.
TEST_P(MatmulTypes, MatmulAddEqualsMatmulThenAdd) {
  const DType type = GetParam();
  const int64_t n_in = dtype_info(type).block_elems == 256 ? 512 : 96;
  const int64_t n_out = 75;
  ThreadPool pool(2);
  std::mt19937 rng(static_cast<uint32_t>(type) + 17);
  const auto data = random_weights(type, n_out, n_in, rng);
  const Tensor w = make_tensor(type, n_out, n_in, data);
  for (int64_t n_tokens : {1, 7, 16}) {
    const auto x = random_floats(n_tokens * n_in, rng);
    const auto residual = random_floats(n_tokens * n_out, rng);
    std::vector<float> want = residual, product(n_tokens * n_out);
    matmul(w, x.data(), n_tokens, product.data(), pool);
    for (size_t i = 0; i < want.size(); ++i) want[i] += product[i];
    std::vector<float> got = residual, scratch(n_tokens * n_out, NAN);
    matmul_add(w, x.data(), n_tokens, got.data(), scratch.data(), pool);
    EXPECT_EQ(got, want) << dtype_name(type) << " " << n_tokens << " tokens";
  }
  std::vector<float> y(n_out);
  EXPECT_THROW(matmul_add(w, y.data(), 1, y.data(), nullptr, pool), Error);
}

INSTANTIATE_TEST_SUITE_P(Matmul, MatmulTypes,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                           DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::IQ4_NL,
                                           DType::MXFP4, DType::IQ4_XS, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                                           DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,
                                           DType::IQ1_S, DType::IQ1_M),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

TEST(MatmulRef, F32MatchesDoubleLoop) {
  std::mt19937 rng(11);
  const int64_t n_in = 40, n_out = 9, n_tokens = 3;
  const auto data = random_weights(DType::F32, n_out, n_in, rng);
  const Tensor w = make_tensor(DType::F32, n_out, n_in, data);
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> y(n_tokens * n_out);
  matmul_ref(w, x.data(), n_tokens, y.data());
  const auto* wf = reinterpret_cast<const float*>(data.data());
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < n_out; ++r) {
      double s = 0;
      for (int64_t k = 0; k < n_in; ++k) s += static_cast<double>(wf[r * n_in + k]) * x[t * n_in + k];
      EXPECT_NEAR(y[t * n_out + r], s, 1e-6 * std::fabs(s) + 1e-6);
    }
}

TEST(MatmulRef, F16MatchesDoubleLoopWithinActivationRounding) {
  std::mt19937 rng(12);
  const int64_t n_in = 64, n_out = 5, n_tokens = 2;
  const auto data = random_weights(DType::F16, n_out, n_in, rng);
  const Tensor w = make_tensor(DType::F16, n_out, n_in, data);
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> y(n_tokens * n_out);
  matmul_ref(w, x.data(), n_tokens, y.data());
  const auto* wh = reinterpret_cast<const uint16_t*>(data.data());
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < n_out; ++r) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        const double p = static_cast<double>(fp16_to_fp32(wh[r * n_in + k])) * x[t * n_in + k];
        s += p;
        mag += std::fabs(p);
      }
      // Activations are rounded to f16: relative error at most 2^-11 per product.
      EXPECT_NEAR(y[t * n_out + r], s, mag / 2048 + 1e-6);
    }
}

TEST(MatmulRef, ZeroTokensIsANoOp) {
  std::mt19937 rng(1);
  const auto data = random_weights(DType::Q4_0, 4, 32, rng);
  const Tensor w = make_tensor(DType::Q4_0, 4, 32, data);
  EXPECT_NO_THROW(matmul(w, nullptr, 0, nullptr));
}

TEST(MatmulErrors, RejectsBadShapesAndTypes) {
  std::vector<uint8_t> data(4096);
  std::vector<float> x(512), y(512);
  // Row length not a multiple of the K-quant block.
  EXPECT_THROW(matmul(make_tensor(DType::Q4_K, 2, 100, data), x.data(), 1, y.data()), Error);
  // A type kvserve cannot compute with.
  EXPECT_THROW(matmul(make_tensor(DType::TQ1_0, 2, 256, data), x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul_ref(make_tensor(DType::TQ2_0, 1, 256, data), x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul(make_tensor(DType::Q8_K, 1, 256, data), x.data(), 1, y.data()), Error);  // activations only
  // No data.
  Tensor empty = make_tensor(DType::F32, 2, 8, data);
  empty.data = nullptr;
  EXPECT_THROW(matmul(empty, x.data(), 1, y.data()), Error);
  EXPECT_THROW(dequantize_row(DType::Q4_0, data.data(), y.data(), 33), Error);
}

// Enough activation elements that the conversion itself is split across the pool (prefill-sized): the
// packed activations written by the workers must land in the caller's buffers.
TEST_P(MatmulTypes, PrefillSizedBatchConvertsInParallel) {
  const DType type = GetParam();
  const int64_t n_in = 1024, n_out = 24, n_tokens = 40;  // 40960 elements >= the parallel threshold
  ThreadPool pool(2);
  std::mt19937 rng(static_cast<uint32_t>(type) + 9);
  const auto data = random_weights(type, n_out, n_in, rng);
  const Tensor w = make_tensor(type, n_out, n_in, data);
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> ref(n_tokens * n_out), got(n_tokens * n_out, NAN);
  matmul_ref(w, x.data(), n_tokens, ref.data());
  matmul(w, x.data(), n_tokens, got.data(), pool);
  const auto scale = abs_products(w, x, n_tokens);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 2e-5 * scale[i] + 1e-6) << dtype_name(type) << " " << i;
}

TEST(MatmulSharedInput, MixedWeightTypesFallBackToSeparateCalls) {
  std::mt19937 rng(3);
  const int64_t n_in = 64, n_tokens = 3;
  const auto a = random_weights(DType::Q8_0, 16, n_in, rng);
  const auto b = random_weights(DType::F16, 8, n_in, rng);
  const Tensor wa = make_tensor(DType::Q8_0, 16, n_in, a), wb = make_tensor(DType::F16, 8, n_in, b);
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> ya(n_tokens * 16), yb(n_tokens * 8), ea(ya.size()), eb(yb.size());
  const MatmulOutput outs[] = {{&wa, ya.data()}, {&wb, yb.data()}};
  matmul_shared_input(outs, x.data(), n_tokens);
  matmul(wa, x.data(), n_tokens, ea.data());
  matmul(wb, x.data(), n_tokens, eb.data());
  EXPECT_EQ(ya, ea);
  EXPECT_EQ(yb, eb);
}

// Activations converted token by token on the pool's threads (MatmulActs::prepare / convert_token, rows in
// a scattered order) give the bits of the matmuls that convert them themselves, for every conversion path:
// the Q8_0/Q8_1 pack (Q4_0, Q4_1, Q8_0), Q8_K rows (Q4_K), F16 rows and F32 (read in place).
TEST(MatmulConverted, TokenByTokenConversionMatchesMatmulBitForBit) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const int64_t n_in = 256, n_tokens = 7;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(type));
    const auto a = random_weights(type, 40, n_in, rng), b = random_weights(type, 24, n_in, rng);
    const Tensor wa = make_tensor(type, 40, n_in, a), wb = make_tensor(type, 24, n_in, b);
    const auto x = random_floats(n_tokens * n_in, rng);
    std::vector<float> ya(n_tokens * 40), yb(n_tokens * 24), ea(ya.size()), eb(yb.size());
    const MatmulOutput outs[] = {{&wa, ya.data()}, {&wb, yb.data()}};
    const MatmulOutput expected[] = {{&wa, ea.data()}, {&wb, eb.data()}};
    matmul_shared_input(expected, x.data(), n_tokens, pool);

    MatmulActs acts;
    acts.prepare(type, x.data(), n_in, n_tokens);
    pool.parallel_for_dynamic(n_tokens, [&](int64_t begin, int64_t end) {
      for (int64_t t = end - 1; t >= begin; --t) acts.convert_token(t);
    });
    matmul_converted(outs, acts, pool);
    EXPECT_EQ(ya, ea);
    EXPECT_EQ(yb, eb);

    // y += w x: the same as matmul_add.
    auto residual = random_floats(n_tokens * 40, rng);
    auto expected_sum = residual;
    std::vector<float> scratch(ya.size());
    matmul_add(wa, x.data(), n_tokens, expected_sum.data(), scratch.data(), pool);
    matmul_add_converted(wa, acts, residual.data(), scratch.data(), pool);
    EXPECT_EQ(residual, expected_sum);
  }
}

// Stacked weights of different types (a Q4_K_M file's Q/K/V: Q5_0, Q5_0, Q8_0; or Q4_K, Q4_K, Q6_K) from one
// MatmulActs converted for each type: the bits of separate matmuls, converted whole or token by token, in
// one pass over the pool or in pieces (matmul_rows_stacked, as the single-token region calls it).
TEST(MatmulConverted, StackedWeightsOfDifferentTypesMatchSeparateMatmuls) {
  ThreadPool pool(2);
  std::mt19937 rng(13);
  const int64_t n_in = 256;
  const DType mixes[][3] = {{DType::Q5_0, DType::Q5_0, DType::Q8_0},
                            {DType::Q4_K, DType::Q6_K, DType::Q4_K},
                            {DType::Q4_0, DType::F16, DType::Q4_1}};
  const int64_t rows[3] = {48, 16, 32};
  for (const auto& mix : mixes) {
    SCOPED_TRACE(std::string(dtype_name(mix[0])) + "/" + std::string(dtype_name(mix[1])) + "/" +
                 std::string(dtype_name(mix[2])));
    std::vector<std::vector<uint8_t>> data;
    std::vector<Tensor> w;
    for (int i = 0; i < 3; ++i) data.push_back(random_weights(mix[i], rows[i], n_in, rng));
    for (int i = 0; i < 3; ++i) w.push_back(make_tensor(mix[i], rows[i], n_in, data[static_cast<size_t>(i)]));
    for (int64_t n_tokens : {int64_t{1}, int64_t{5}}) {
      const auto x = random_floats(n_tokens * n_in, rng);
      std::vector<std::vector<float>> expected(3), got(3), pieces(3);
      for (int i = 0; i < 3; ++i) {
        expected[i].resize(static_cast<size_t>(n_tokens * rows[i]));
        got[i].assign(expected[i].size(), NAN);
        pieces[i].assign(expected[i].size(), NAN);
        matmul(w[i], x.data(), n_tokens, expected[i].data(), pool);
      }
      const MatmulOutput outs[] = {{&w[0], got[0].data()}, {&w[1], got[1].data()}, {&w[2], got[2].data()}};
      const MatmulOutput outs_pieces[] = {
          {&w[0], pieces[0].data()}, {&w[1], pieces[1].data()}, {&w[2], pieces[2].data()}};
      ASSERT_TRUE(matmul_inputs_stackable(outs));
      EXPECT_FALSE(matmul_inputs_shareable(outs));
      MatmulActs acts;
      acts.prepare(outs, x.data(), n_tokens);
      for (int64_t t = n_tokens - 1; t >= 0; --t) acts.convert_token(t);
      matmul_converted(outs, acts, pool);
      MatmulActs whole;
      whole.convert(outs, x.data(), n_tokens);
      const int64_t chunk = matmul_balance_chunk_rows(outs_pieces, n_tokens);
      ASSERT_GT(chunk, 0);
      for (int64_t b = 0; b < 96; b += 16) matmul_rows_stacked(outs_pieces, whole, b, std::min<int64_t>(96, b + 16));
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(got[i], expected[i]) << "weight " << i << ", " << n_tokens << " tokens";
        EXPECT_EQ(pieces[i], expected[i]) << "weight " << i << ", " << n_tokens << " tokens, in pieces";
      }
    }
  }
}

TEST(MatmulConverted, RejectsOtherWeightsAndTokensOutOfRange) {
  std::mt19937 rng(12);
  const int64_t n_in = 64;
  const auto a = random_weights(DType::Q8_0, 8, n_in, rng), b = random_weights(DType::F16, 8, n_in, rng);
  const Tensor wa = make_tensor(DType::Q8_0, 8, n_in, a), wb = make_tensor(DType::F16, 8, n_in, b);
  const auto x = random_floats(2 * n_in, rng);
  std::vector<float> y(2 * 8), scratch(y.size());
  MatmulActs acts;
  acts.prepare(DType::Q8_0, x.data(), n_in, 2);
  EXPECT_THROW(acts.convert_token(2), Error);
  EXPECT_THROW(acts.convert_token(-1), Error);
  acts.convert_token(0);
  acts.convert_token(1);
  // Converted for Q8_0: an F16 weight, or a Q8_0 one beside it, is refused.
  EXPECT_THROW(matmul_add_converted(wb, acts, y.data(), scratch.data(), ThreadPool::global()), Error);
  const MatmulOutput mixed[] = {{&wa, y.data()}, {&wb, y.data()}};
  EXPECT_THROW(matmul_converted(mixed, acts, ThreadPool::global()), Error);
  // Stacked: weights of other row lengths, or more than three, are refused.
  const auto c = random_weights(DType::Q8_0, 8, 2 * n_in, rng);
  const Tensor wc = make_tensor(DType::Q8_0, 8, 2 * n_in, c);
  const MatmulOutput other_length[] = {{&wa, y.data()}, {&wc, y.data()}};
  EXPECT_FALSE(matmul_inputs_stackable(other_length));
  EXPECT_THROW(acts.convert(other_length, x.data(), 1), Error);
  const MatmulOutput four[] = {{&wa, y.data()}, {&wb, y.data()}, {&wa, y.data()}, {&wb, y.data()}};
  EXPECT_FALSE(matmul_inputs_stackable(four));
  EXPECT_THROW(acts.prepare(four, x.data(), 1), Error);
  // Converted for both types, a weight of a third is still refused.
  const auto d = random_weights(DType::Q4_0, 8, n_in, rng);
  const Tensor wd = make_tensor(DType::Q4_0, 8, n_in, d);
  acts.convert(mixed, x.data(), 2);
  matmul_converted(mixed, acts, ThreadPool::global());
  EXPECT_THROW(matmul_add_converted(wd, acts, y.data(), scratch.data(), ThreadPool::global()), Error);
  EXPECT_THROW(matmul_add_converted(wa, acts, y.data(), nullptr, ThreadPool::global()), Error);
}

// Weights of kMaxZmmGroups interleaved 8-row groups (the most any kernel takes) and kMaxZmmTokens (the most any kernel takes) packed
// activation rows, for calling the Q4_0 / Q4_1 / Q5_0 / IQ4_NL / Q8_0 interleaved kernels directly.
struct Q32KernelCase {
  std::vector<uint8_t> data;
  Tensor w;                          // the group layout
  std::shared_ptr<uint8_t[]> paired;  // the same rows in the pair layout
  ActPack32 pack;
  std::vector<std::vector<uint8_t>> rows;
  static constexpr int kTok = std::max({avx2::kMaxInterleavedTokens, avx512zmm::kMaxZmmTokens, amx::kMaxAmxTokens});
  PackedActs32 acts[kTok];

  // edit_weights may change the raw blocks before the repack; token 0's activations are all -1 when
  // extreme_token0 (every quant at -127).
  Q32KernelCase(DType type, int64_t n_in, std::mt19937& rng, const std::function<void(std::vector<uint8_t>&)>& edit_weights = {},
                bool extreme_token0 = false) {
    data = random_weights(type, avx512zmm::kMaxZmmGroups * kInterleaveRows, n_in, rng);
    if (edit_weights) edit_weights(data);
    w = make_tensor(type, avx512zmm::kMaxZmmGroups * kInterleaveRows, n_in, data, /*pairs=*/false);
    if (has_pair_layout(type)) paired = interleave_rows(w, /*pairs=*/true);
    const DType act_type = type == DType::Q4_1 ? DType::Q8_1 : DType::Q8_0;
    pack.reset(act_type, n_in, kTok);
    for (int t = 0; t < kTok; ++t) {
      auto x = random_floats(n_in, rng);
      if (t == 0 && extreme_token0) std::fill(x.begin(), x.end(), -1.0f);
      rows.emplace_back(row_bytes(act_type, n_in));
      if (act_type == DType::Q8_1) {
        quantize_row_q8_1(x.data(), reinterpret_cast<BlockQ8_1*>(rows.back().data()), n_in);
      } else {
        quantize_row_q8_0(x.data(), reinterpret_cast<BlockQ8_0*>(rows.back().data()), n_in);
      }
      pack.pack(t, rows.back().data());
    }
    for (int t = 0; t < kTok; ++t) acts[t] = pack.token(t);
  }
};

// The AVX2 and VNNI (or zmm) versions of one interleaved kernel (Acts: PackedActs32 or const BlockQ8_K*) on
// the same groups and tokens, for every group and token count up to max_groups and max_tok: the same
// bits. The AVX2 reference runs in passes of the groups and tokens it takes. The VNNI one also gets a far
// prefetch stream, which must not change anything.
template <typename Fn, typename Acts>
void expect_vnni_bit_identical(Fn avx2_gemm, Fn vnni_gemm, int64_t n_in, const uint8_t* first_group, const Acts* acts,
                               DType type, int max_tok = avx2::kMaxInterleavedTokens,
                               int max_groups = avx2::kMaxInterleavedGroups) {
  constexpr int kPass = avx2::kMaxInterleavedTokens;
  constexpr int kPassGroups = avx2::kMaxInterleavedGroups;
  const size_t group_bytes = interleaved_group_bytes(type, n_in);
  const int64_t stride = 8 * max_groups + 1;
  for (int n_groups = 1; n_groups <= max_groups; ++n_groups)
    for (int n_tok = 1; n_tok <= max_tok; ++n_tok) {
      std::vector<float> a(stride * max_tok, -7.0f), b(a.size(), -7.0f);
      for (int g0 = 0; g0 < n_groups; g0 += kPassGroups)
        for (int t0 = 0; t0 < n_tok; t0 += kPass)
          avx2_gemm(n_in, first_group + g0 * group_bytes, std::min(kPassGroups, n_groups - g0), acts + t0,
                    std::min(kPass, n_tok - t0), a.data() + t0 * stride + 8 * g0, stride, nullptr);
      vnni_gemm(n_in, first_group, n_groups, acts, n_tok, b.data(), stride, first_group);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << dtype_name(type) << " groups " << n_groups << " tokens " << n_tok;
    }
}

// A pair kernel (on `paired`, the pair layout) against the AVX2 kernel (on `groups`, the same rows in the
// group layout, in the passes of groups and tokens it takes), for every pair and token count the pair
// kernels take: the same bits, and nothing written past the pairs' rows. The pair kernel also gets a far
// prefetch stream.
template <typename Fn, typename PairFn, typename Acts>
void expect_pairs_bit_identical(Fn avx2_gemm, PairFn pair_gemm, int64_t n_in, const uint8_t* groups, const uint8_t* paired,
                                const Acts* acts, DType type) {
  constexpr int kTok = avx512zmm::kMaxZmmTokens, kPass = avx2::kMaxInterleavedTokens;
  constexpr int64_t kStride = 8 * avx512zmm::kMaxZmmGroups + 1;
  const size_t group_bytes = interleaved_group_bytes(type, n_in);
  for (int n_pairs = 1; n_pairs <= avx512zmm::kMaxZmmPairs; ++n_pairs)
    for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
      std::vector<float> a(kStride * kTok, -7.0f), b(a.size(), -7.0f);
      for (int g0 = 0; g0 < 2 * n_pairs; g0 += 2)
        for (int t0 = 0; t0 < n_tok; t0 += kPass)
          avx2_gemm(n_in, groups + g0 * group_bytes, 2, acts + t0, std::min(kPass, n_tok - t0),
                    a.data() + t0 * kStride + 8 * g0, kStride, nullptr);
      pair_gemm(n_in, paired, n_pairs, acts, n_tok, b.data(), kStride, groups);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << dtype_name(type) << " pairs " << n_pairs << " tokens " << n_tok;
    }
}

// The interleaved kernels called directly, for every group and token count they take: each token's 8
// outputs per group land at out + t * stride + 8 * g (and nowhere else) with the same bits as that group
// and token multiplied alone.
TEST(InterleavedKernels, EveryGroupAndTokenCountStoresEachTokensRowsAtItsStride) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  constexpr int kTok = avx2::kMaxInterleavedTokens;
  constexpr int kGroups = avx2::kMaxInterleavedGroups;
  constexpr int64_t kStride = 8 * kGroups + 3;  // not a multiple of 8: stores must not assume alignment
  const int64_t n_in = 160;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::MXFP4, DType::Q8_0}) {
    std::mt19937 rng(static_cast<uint32_t>(type) + 5);
    Q32KernelCase c(type, n_in, rng);
    const Tensor& w = c.w;
    const PackedActs32* acts = c.acts;
    const auto gemm = type == DType::Q4_0     ? avx2::gemm_interleaved_q4_0
                      : type == DType::Q4_1   ? avx2::gemm_interleaved_q4_1
                      : type == DType::Q5_0   ? avx2::gemm_interleaved_q5_0
                      : type == DType::IQ4_NL ? avx2::gemm_interleaved_iq4_nl
                      : type == DType::MXFP4  ? avx2::gemm_interleaved_mxfp4
                                              : avx2::gemm_interleaved_q8_0;
    const auto* first_group = static_cast<const uint8_t*>(w.interleaved);
    const size_t group_bytes = interleaved_group_bytes(type, n_in);
    float alone[kGroups][kTok][kInterleaveRows];
    for (int g = 0; g < kGroups; ++g)
      for (int t = 0; t < kTok; ++t)
        gemm(n_in, first_group + g * group_bytes, 1, &acts[t], 1, alone[g][t], kInterleaveRows, nullptr);
    for (int n_groups = 1; n_groups <= kGroups; ++n_groups) {
      for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
        std::vector<float> out(kStride * kTok, -7.0f);
        // A far prefetch stream (here the weights' own bytes) is only a hint: the same results.
        gemm(n_in, first_group, n_groups, acts, n_tok, out.data(), kStride, first_group + group_bytes);
        for (int t = 0; t < kTok; ++t)
          for (int64_t i = 0; i < kStride; ++i) {
            const float got = out[t * kStride + i];
            const std::string where = std::string(dtype_name(type)) + " groups " + std::to_string(n_groups) +
                                      " n_tok " + std::to_string(n_tok) + " token " + std::to_string(t) +
                                      " lane " + std::to_string(i);
            if (t < n_tok && i < kInterleaveRows * n_groups) {
              EXPECT_EQ(got, alone[i / kInterleaveRows][t][i % kInterleaveRows]) << where;
            } else {
              EXPECT_EQ(got, -7.0f) << where << ": written outside the token's rows";
            }
          }
      }
    }
    // And the single-token result is the dot product itself.
    for (int t = 0; t < kTok; ++t) {
      std::vector<float> act(n_in);
      dequantize_row(type == DType::Q4_1 ? DType::Q8_1 : DType::Q8_0, c.rows[t].data(), act.data(), n_in);
      std::vector<float> wrow(n_in);
      for (int r = 0; r < kGroups * kInterleaveRows; ++r) {
        dequantize_row(type, w.row(r), wrow.data(), n_in);
        double dot = 0, mag = 0;
        for (int64_t k = 0; k < n_in; ++k) {
          dot += static_cast<double>(wrow[k]) * act[k];
          mag += std::fabs(static_cast<double>(wrow[k]) * act[k]);
        }
        // Q4_1's offset term uses the fp16-rounded block sum, as ggml does: a looser bound there.
        EXPECT_NEAR(alone[r / kInterleaveRows][t][r % kInterleaveRows], dot,
                    (type == DType::Q4_1 ? 2e-3 : 1e-5) * mag + 1e-5)
            << dtype_name(type);
      }
    }
  }
}

// The vpdpbusd kernels (AVX512-VNNI, and AVX-VNNI where the CPU has it) against the AVX2 ones: the same
// exact integer block sums and the same float operations, so the same bits, for every group and token count
// and for the extreme quants (Q8_0's -128 and 127, Q4's 0 and 15, activations at +-127).
TEST(InterleavedKernels, VnniKernelsAreBitIdenticalToAvx2) {
  if (!cpu_has_avx2() || !(cpu_has_avx512_vnni() || cpu_has_avx_vnni()))
    GTEST_SKIP() << "neither AVX512-VNNI nor AVX-VNNI on this CPU (or turned off)";
  const int64_t n_in = 256;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::MXFP4, DType::Q8_0}) {
    std::mt19937 rng(static_cast<uint32_t>(type) + 31);
    // Row 0: the extreme quant bytes (every nibble 0xF, or bytes -128 and 127 alternating).
    const auto extreme_row0 = [&](std::vector<uint8_t>& data) {
      // Q5_0's from its qh on: every quant 31; IQ4_NL's every index 15 (level 113); MXFP4's (after its
      // 1-byte scale) level -12.
      const size_t block = dtype_info(type).block_bytes, quant_off = type == DType::Q4_1    ? 4
                                                                     : type == DType::MXFP4 ? 1
                                                                                            : 2;
      for (int64_t b = 0; b < n_in / 32; ++b)
        for (size_t k = quant_off; k < block; ++k)
          data[b * block + k] = type == DType::Q8_0 ? static_cast<uint8_t>(k % 2 ? 0x80 : 0x7F) : 0xFF;
    };
    Q32KernelCase c(type, n_in, rng, extreme_row0, true);
    const Tensor& w = c.w;
    const PackedActs32* acts = c.acts;
    const auto avx2_gemm = type == DType::Q4_0     ? avx2::gemm_interleaved_q4_0
                           : type == DType::Q4_1   ? avx2::gemm_interleaved_q4_1
                           : type == DType::Q5_0   ? avx2::gemm_interleaved_q5_0
                           : type == DType::IQ4_NL ? avx2::gemm_interleaved_iq4_nl
                           : type == DType::MXFP4  ? avx2::gemm_interleaved_mxfp4
                                                   : avx2::gemm_interleaved_q8_0;
    if (cpu_has_avx_vnni()) {
      const auto avx_vnni_gemm = type == DType::Q4_0     ? avxvnni::gemm_interleaved_q4_0
                                 : type == DType::Q4_1   ? avxvnni::gemm_interleaved_q4_1
                                 : type == DType::Q5_0   ? avxvnni::gemm_interleaved_q5_0
                                 : type == DType::IQ4_NL ? avxvnni::gemm_interleaved_iq4_nl
                                 : type == DType::MXFP4  ? avxvnni::gemm_interleaved_mxfp4
                                                         : avxvnni::gemm_interleaved_q8_0;
      expect_vnni_bit_identical(avx2_gemm, avx_vnni_gemm, n_in, static_cast<const uint8_t*>(w.interleaved), acts, type);
    }
    if (!cpu_has_avx512_vnni()) continue;
    const auto vnni_gemm = type == DType::Q4_0     ? avx512vnni::gemm_interleaved_q4_0
                           : type == DType::Q4_1   ? avx512vnni::gemm_interleaved_q4_1
                           : type == DType::Q5_0   ? avx512vnni::gemm_interleaved_q5_0
                           : type == DType::IQ4_NL ? avx512vnni::gemm_interleaved_iq4_nl
                           : type == DType::MXFP4  ? avx512vnni::gemm_interleaved_mxfp4
                                                   : avx512vnni::gemm_interleaved_q8_0;
    expect_vnni_bit_identical(avx2_gemm, vnni_gemm, n_in, static_cast<const uint8_t*>(w.interleaved), acts, type);
    if (!has_pair_layout(type)) continue;
    // The 512-bit pair kernels on the pair layout (both groups of a pair in one register, up to
    // kMaxZmmTokens tokens), whichever kernel matmul would pick on this CPU: every pair and token count,
    // with a far stream, against the AVX2 kernel on the group layout in the passes it takes.
    const auto pair_gemm = type == DType::Q4_0     ? avx512zmm::gemm_pairs_q4_0
                           : type == DType::Q4_1   ? avx512zmm::gemm_pairs_q4_1
                           : type == DType::Q5_0   ? avx512zmm::gemm_pairs_q5_0
                           : type == DType::IQ4_NL ? avx512zmm::gemm_pairs_iq4_nl
                           : type == DType::MXFP4  ? avx512zmm::gemm_pairs_mxfp4
                                                   : avx512zmm::gemm_pairs_q8_0;
    expect_pairs_bit_identical(avx2_gemm, pair_gemm, n_in, static_cast<const uint8_t*>(w.interleaved), c.paired.get(),
                               acts, type);
  }
}

// The float tiles against widened activations (the activations rounded to F16 / BF16, then held as the
// floats they are) give the bits of the tiles that read the rounded rows themselves: for row lengths with
// whole groups of 32 values, blocks of 8 after them, and values past the last 8.
TEST(FloatTiles, WideTilesGiveTheBitsOfTheNarrowOnes) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(31);
  std::normal_distribution<float> dist;
  for (const int64_t n : {int64_t{5}, int64_t{8}, int64_t{24}, int64_t{32}, int64_t{40}, int64_t{100}, int64_t{2053}}) {
    std::vector<float> x(4 * n), wf(3 * n);
    for (float& v : x) v = dist(rng);
    for (float& v : wf) v = dist(rng);
    std::vector<uint16_t> w16(3 * n), wb(3 * n), x16(4 * n), xb(4 * n);
    std::vector<float> x16_wide(4 * n), xb_wide(4 * n);
    for (int64_t i = 0; i < 3 * n; ++i) w16[i] = fp32_to_fp16(wf[i]), wb[i] = fp32_to_bf16(wf[i]);
    for (int64_t t = 0; t < 4; ++t) {
      avx2::quantize_row_f16(x.data() + t * n, x16.data() + t * n, n);
      quantize_row_bf16(x.data() + t * n, xb.data() + t * n, n);
      avx2::round_row_f16_wide(x.data() + t * n, x16_wide.data() + t * n, n);
      avx2::round_row_bf16_wide(x.data() + t * n, xb_wide.data() + t * n, n);
    }
    struct Case {
      const char* name;
      const uint16_t* w;  // 3 rows of n
      const uint16_t* narrow;  // the activations the narrow tile reads
      const float* wide;
      void (*narrow_tile)(int64_t, const void*, const void* const*, int, float*);
      void (*wide_tile)(int64_t, const void*, const void* const*, int, float*);
    };
    const Case cases[] = {
        {"F16", w16.data(), x16.data(), x16_wide.data(), avx2::dot_tile_f16, avx2::dot_tile_f16_wide},
        {"BF16", wb.data(), xb.data(), xb_wide.data(), avx2::dot_tile_bf16, avx2::dot_tile_bf16_wide},
    };
    for (const Case& c : cases)
      for (int n_tok = 1; n_tok <= 4; ++n_tok) {
        const void* narrow[4];
        const void* wide[4];
        for (int t = 0; t < n_tok; ++t) narrow[t] = c.narrow + t * n, wide[t] = c.wide + t * n;
        for (int r = 0; r < 3; ++r) {
          float want[4], got[4];
          c.narrow_tile(n, c.w + r * n, narrow, n_tok, want);
          c.wide_tile(n, c.w + r * n, wide, n_tok, got);
          for (int t = 0; t < n_tok; ++t) ASSERT_EQ(got[t], want[t]) << c.name << " n " << n << " row " << r;
        }
      }
  }
}

// The 512-bit float tiles (float_tiles_zmm.h) give every output the bits of float_tile_reference, the
// scalar lane model: every tile shape up to 4 rows x 6 tokens, with the row taken whole and in ranges
// (the lanes carried between calls and summed by the last one), for row lengths below 16, with and without
// values past the last 16.
using TileAccumulate = void (*)(int64_t, int64_t, const void* const*, int, const void* const*, int, float*, float*);

// The n_rows x n_tok outputs of a 512-bit tile kind over rows of n values taken in ranges of `range` (the
// last one shorter where n is not a multiple). The first range starts from zero, whatever the buffer holds
// (NaNs); the lanes wait in it between ranges, and the last range's call sums them.
std::vector<float> tile_outputs_in_ranges(TileAccumulate tiles, int64_t n, int64_t range, const void* const* rows,
                                          int n_rows, const void* const* acts, int n_tok) {
  std::vector<float> lanes(static_cast<size_t>(n_rows * n_tok * avx512zmm::kFloatTileLanes), std::nanf(""));
  std::vector<float> got(static_cast<size_t>(n_rows * n_tok));
  for (int64_t k0 = 0; k0 < n; k0 += range) {
    const int64_t k1 = std::min(n, k0 + range);
    tiles(k0, k1, rows, n_rows, acts, n_tok, lanes.data(), k1 == n ? got.data() : nullptr);
  }
  return got;
}

TEST(FloatTiles, ZmmTilesGiveTheBitsOfTheScalarLaneModel) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  constexpr int kRows = avx512zmm::kMaxFloatTileRows, kTok = avx512zmm::kMaxFloatTileTokens;
  std::mt19937 rng(37);
  std::normal_distribution<float> dist;
  for (const int64_t n : {int64_t{5}, int64_t{16}, int64_t{40}, int64_t{96}, int64_t{2053}}) {
    std::vector<float> wf(kRows * n), x(kTok * n);
    for (float& v : wf) v = dist(rng);
    for (float& v : x) v = dist(rng);
    std::vector<uint16_t> w16(kRows * n), wb(kRows * n);
    for (int64_t i = 0; i < kRows * n; ++i) w16[i] = fp32_to_fp16(wf[i]), wb[i] = fp32_to_bf16(wf[i]);
    struct Case {
      const char* name;
      const void* w;
      size_t elem;
      TileAccumulate tiles;
      float (*value)(const void* row, int64_t k);
    };
    const Case cases[] = {
        {"F32", wf.data(), 4, avx512zmm::accumulate_float_tiles_f32,
         [](const void* row, int64_t k) { return static_cast<const float*>(row)[k]; }},
        {"F16", w16.data(), 2, avx512zmm::accumulate_float_tiles_f16_wide,
         [](const void* row, int64_t k) { return fp16_to_fp32(static_cast<const uint16_t*>(row)[k]); }},
        {"BF16", wb.data(), 2, avx512zmm::accumulate_float_tiles_bf16_wide,
         [](const void* row, int64_t k) { return bf16_to_fp32(static_cast<const uint16_t*>(row)[k]); }},
    };
    for (const Case& c : cases) {
      const void* rows[kRows];
      const void* acts[kTok];
      for (int r = 0; r < kRows; ++r) rows[r] = static_cast<const uint8_t*>(c.w) + r * n * c.elem;
      for (int t = 0; t < kTok; ++t) acts[t] = x.data() + t * n;
      float want[kRows][kTok];
      for (int r = 0; r < kRows; ++r)
        for (int t = 0; t < kTok; ++t)
          want[r][t] = avx512zmm::float_tile_reference(
              n, [&](int64_t k) { return c.value(rows[r], k); }, x.data() + t * n);
      // Whole rows, ranges of 16, and ranges of 48 (the last one shorter where n is not a multiple).
      for (const int64_t range : {n, int64_t{16}, int64_t{48}})
        for (int n_rows = 1; n_rows <= kRows; ++n_rows)
          for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
            const std::vector<float> got = tile_outputs_in_ranges(c.tiles, n, range, rows, n_rows, acts, n_tok);
            for (int r = 0; r < n_rows; ++r)
              for (int t = 0; t < n_tok; ++t)
                ASSERT_EQ(got[r * n_tok + t], want[r][t]) << c.name << " n " << n << " range " << range << " " << n_rows
                                                          << " x " << n_tok << " row " << r << " token " << t;
          }
    }
  }
}

// matmul over float weights gives a token the same bits alone and in a batch (on full-width AVX-512 cores
// the 4 x 6 tiles with rows in ranges and long chunks past 32 tokens; elsewhere the 256-bit tiles or AMX),
// for rows long enough to be cut into ranges, a length past the last 16 values and a row count past the last
// 4; and where the 512-bit tiles run, each output is the scalar lane model's bits.
TEST(FloatTiles, MatmulGivesATokenTheSameBitsWhateverItsBatch) {
  ThreadPool pool(2);
  const int64_t n_in = 2056, n_out = 37, n_tokens = 40;
  for (DType type : {DType::F32, DType::F16, DType::BF16}) {
    std::mt19937 rng(static_cast<uint32_t>(type) + 5);
    const auto data = random_weights(type, n_out, n_in, rng);
    const Tensor w = make_tensor(type, n_out, n_in, data);
    const auto x = random_floats(n_tokens * n_in, rng);
    std::vector<float> batch(n_tokens * n_out);
    matmul(w, x.data(), n_tokens, batch.data(), pool);
    for (int64_t t = 0; t < n_tokens; ++t) {
      expect_alone_as_in_batch(w, x, batch, t, pool);
      if (HasFailure()) return;
    }
    const bool zmm_tiles = cpu_has_avx2() && cpu_uses_zmm_path(env_switch("KVSERVE_ZMM_FLOAT"), false) &&
                           !(type == DType::BF16 && (cpu_has_amx_bf16() || bf16_dot_in_use()));
    if (!zmm_tiles) continue;
    for (int64_t t = 0; t < n_tokens; t += 7) {
      // The activations as the tiles read them: F16 / BF16 weights take them rounded to their type.
      std::vector<float> a(x.begin() + t * n_in, x.begin() + (t + 1) * n_in);
      for (float& v : a)
        v = type == DType::F16    ? fp16_to_fp32(fp32_to_fp16(v))
            : type == DType::BF16 ? bf16_to_fp32(fp32_to_bf16(v))
                                  : v;
      for (int64_t r = 0; r < n_out; ++r) {
        const uint8_t* row = data.data() + r * static_cast<int64_t>(row_bytes(type, n_in));
        const float want = avx512zmm::float_tile_reference(
            n_in,
            [&](int64_t k) {
              return type == DType::F32   ? reinterpret_cast<const float*>(row)[k]
                     : type == DType::F16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k])
                                          : bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
            },
            a.data());
        ASSERT_EQ(batch[t * n_out + r], want) << dtype_name(type) << " token " << t << " row " << r;
      }
    }
  }
}

// Two steps of 32 values whose lane 0 tells the order of a pair's products: the first step leaves 1 there
// (values 0, 1 = 1 x 1, 0); the second adds values 33 (odd) = 2^24 and 32 (even) = 1. Odd first:
// 1 + 2^24 rounds (a tie) to 2^24, and + 1 again to 2^24; even first: 1 + 1 = 2, + 2^24 = 2^24 + 2 exactly.
struct PairOrderCase {
  std::vector<uint16_t> w = std::vector<uint16_t>(64, 0), a = std::vector<uint16_t>(64, 0);
  PairOrderCase() {
    for (int k : {0, 32, 33}) a[k] = fp32_to_bf16(1.0f);
    w[0] = w[32] = fp32_to_bf16(1.0f);
    w[33] = fp32_to_bf16(16777216.0f);
  }
};

// The vdpbf16ps tiles (bf16_dot_tiles_zmm.h) give each output the bits it has alone, whatever the tile's
// shape, the output's place in it and the ranges the row is cut into; on Intel's cores the bits of the scalar
// model of the instruction (elsewhere within rounding of it): row
// lengths past the last 32 values and odd ones, products of every size down to subnormal results and
// subnormal inputs (which the instruction reads as zero), and exact cancellations.
TEST(Bf16DotTiles, GiveAnOutputItsBitsAloneAndOnIntelTheModels) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  constexpr int kRows = avx512zmm::kMaxFloatTileRows, kTok = avx512zmm::kMaxFloatTileTokens;
  std::mt19937 rng(41);
  std::normal_distribution<float> dist;
  std::uniform_int_distribution<int> pick(0, 15);
  // Intel documents the instruction's steps; AMD's cores (not measured here) are held to the model within
  // rounding, and to the same bits whatever the tile and the ranges, which is what batch invariance needs.
  const bool documented = cpu_is_intel();
  if (documented) {
    const PairOrderCase c;
    const void* row = c.w.data();
    const void* act = c.a.data();
    float got = 0.0f;
    avx512zmm::accumulate_bf16_dot_tiles(0, 64, &row, 1, &act, 1, nullptr, &got);
    EXPECT_EQ(got, 16777216.0f) << "the odd product of a pair is not added first";
  }
  for (const int64_t n : {int64_t{5}, int64_t{32}, int64_t{33}, int64_t{96}, int64_t{1001}, int64_t{2080}}) {
    std::vector<uint16_t> w(kRows * n), x(kTok * n);
    // Mostly normal values; some tiny ones (products below float's normal range), some subnormal BF16
    // values, and a weight that repeats its negated neighbour so a pair of products cancels.
    const auto fill = [&](std::vector<uint16_t>& v) {
      for (size_t i = 0; i < v.size(); ++i) {
        const int kind = pick(rng);
        const float f = dist(rng);
        v[i] = kind == 0   ? fp32_to_bf16(f * 1e-20f)
               : kind == 1 ? static_cast<uint16_t>((f < 0 ? 0x8000u : 0u) | static_cast<unsigned>(pick(rng) + 1))
               : kind == 2 && i % 2 == 1 ? static_cast<uint16_t>(v[i - 1] ^ 0x8000u)
                                         : fp32_to_bf16(f);
      }
    };
    fill(w);
    fill(x);
    const void* rows[kRows];
    const void* acts[kTok];
    for (int r = 0; r < kRows; ++r) rows[r] = w.data() + r * n;
    for (int t = 0; t < kTok; ++t) acts[t] = x.data() + t * n;
    // Each output alone, the row whole: the model's bits (on Intel's cores) or near them.
    float want[kRows][kTok];
    for (int r = 0; r < kRows; ++r)
      for (int t = 0; t < kTok; ++t) {
        const float model = avx512zmm::bf16_dot_tile_reference(n, w.data() + r * n, x.data() + t * n);
        want[r][t] = tile_outputs_in_ranges(avx512zmm::accumulate_bf16_dot_tiles, n, n, &rows[r], 1, &acts[t], 1)[0];
        if (documented) {
          ASSERT_EQ(std::bit_cast<uint32_t>(want[r][t]), std::bit_cast<uint32_t>(model))
              << "n " << n << " row " << r << " token " << t << ": " << want[r][t] << " model " << model;
        } else {
          double scale = 0.0;
          for (int64_t k = 0; k < n; ++k)
            scale += std::fabs(static_cast<double>(bf16_to_fp32(w[r * n + k])) * bf16_to_fp32(x[t * n + k]));
          ASSERT_NEAR(want[r][t], model, 1e-5 * scale + 1e-30) << "n " << n << " row " << r << " token " << t;
        }
      }
    // Every tile shape and range split: the bits of the output alone.
    for (const int64_t range : {n, int64_t{32}, int64_t{96}})
      for (int n_rows = 1; n_rows <= kRows; ++n_rows)
        for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
          const std::vector<float> got =
              tile_outputs_in_ranges(avx512zmm::accumulate_bf16_dot_tiles, n, range, rows, n_rows, acts, n_tok);
          for (int r = 0; r < n_rows; ++r)
            for (int t = 0; t < n_tok; ++t)
              ASSERT_EQ(std::bit_cast<uint32_t>(got[r * n_tok + t]), std::bit_cast<uint32_t>(want[r][t]))
                  << "n " << n << " range " << range << " " << n_rows << " x " << n_tok << " row " << r << " token "
                  << t << ": " << got[r * n_tok + t] << " alone " << want[r][t];
        }
  }
}

// The model itself: a subnormal sum is zero (its sign kept), a subnormal input counts as zero, and a pair's
// odd product is added before its even one.
TEST(Bf16DotTiles, ScalarModelFlushesSubnormalsAndAddsTheOddProductFirst) {
  EXPECT_EQ(avx512zmm::bf16_dot_fma(1e-20f, 1e-20f, 0.0f), 0.0f);  // 1e-40 is subnormal
  EXPECT_EQ(avx512zmm::bf16_dot_fma(1e-39f, 1e30f, 0.0f), 0.0f);   // 1e-39 reads as zero
  EXPECT_TRUE(std::signbit(avx512zmm::bf16_dot_fma(-1e-20f, 1e-20f, -0.0f)));
  EXPECT_EQ(avx512zmm::bf16_dot_fma(2.0f, 3.0f, 1.0f), 7.0f);
  const PairOrderCase c;
  EXPECT_EQ(avx512zmm::bf16_dot_tile_reference(64, c.w.data(), c.a.data()), 16777216.0f);
}

// matmul over BF16 weights on the vdpbf16ps tiles (forced on where the core has AVX512-BF16, with AMX's
// tile unit turned off): a token's bits alone are its bits in a batch (rows cut into ranges, long
// chunks past 32 tokens), each is the scalar model's (on Intel's cores), and each is near the exact sum.
TEST(Bf16DotTiles, MatmulGivesEachTokenTheModelsBitsWhateverItsBatch) {
  set_amx_enabled(false);
  set_bf16_dot(1);
  if (!bf16_dot_in_use()) {
    set_bf16_dot(-1);
    set_amx_enabled(true);
    GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  }
  ThreadPool pool(2);
  const int64_t n_in = 2056, n_out = 37, n_tokens = 40;
  std::mt19937 rng(53);
  const auto data = random_weights(DType::BF16, n_out, n_in, rng);
  const Tensor w = make_tensor(DType::BF16, n_out, n_in, data);
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> batch(n_tokens * n_out), ref(n_tokens * n_out);
  matmul(w, x.data(), n_tokens, batch.data(), pool);
  matmul_ref(w, x.data(), n_tokens, ref.data());
  const auto scale = abs_products(w, x, n_tokens);
  for (int64_t t = 0; t < n_tokens && !HasFailure(); ++t) {
    expect_alone_as_in_batch(w, x, batch, t, pool);
    std::vector<uint16_t> a(n_in);
    quantize_row_bf16(x.data() + t * n_in, a.data(), n_in);
    for (int64_t r = 0; r < n_out; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(data.data() + r * row_bytes(DType::BF16, n_in));
      if (cpu_is_intel()) {  // the instruction's documented steps; elsewhere the bound below
        EXPECT_EQ(batch[t * n_out + r], avx512zmm::bf16_dot_tile_reference(n_in, row, a.data())) << t << " " << r;
      }
      EXPECT_NEAR(batch[t * n_out + r], ref[t * n_out + r], 2e-5 * scale[t * n_out + r] + 1e-6) << t << " " << r;
    }
  }
  set_bf16_dot(-1);
  set_amx_enabled(true);
}

// BF16 weights on the AMX tile unit (bf16_gemm_amx.h): a token's outputs are the same bits whatever its
// batch, its place in it and the row ranges the rows are computed in, for row lengths with and without a
// tail past the last 32 values and row counts past the last 16 (the padded copy); and each is within float
// rounding of the exact sum of the BF16-rounded products.
TEST(Bf16Amx, EachOutputIsTheSameBitsWhateverTheBatch) {
  if (!cpu_has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or KVSERVE_NO_AMX set)";
  ThreadPool pool(2);
  for (const int64_t n_in : {int64_t{7}, int64_t{32}, int64_t{100}, int64_t{224}}) {
    for (const int64_t n_out : {int64_t{5}, int64_t{16}, int64_t{37}, int64_t{50}}) {
      std::mt19937 rng(static_cast<uint32_t>(n_in * 1000 + n_out));
      const auto data = random_weights(DType::BF16, n_out, n_in, rng);
      const Tensor w = make_tensor(DType::BF16, n_out, n_in, data);
      const int64_t n_tokens = 40;  // groups of 16, 16 and 8: passes of two groups and of one
      const auto x = random_floats(n_tokens * n_in, rng);
      std::vector<float> batch(n_tokens * n_out);
      matmul(w, x.data(), n_tokens, batch.data(), pool);
      const std::string where = std::to_string(n_in) + " x " + std::to_string(n_out);
      // Exact sums of the rounded products, in double.
      const auto* wb = reinterpret_cast<const uint16_t*>(data.data());
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < n_out; ++r) {
          double s = 0, mag = 0;
          for (int64_t k = 0; k < n_in; ++k) {
            const double p =
                static_cast<double>(bf16_to_fp32(wb[r * n_in + k])) * bf16_to_fp32(fp32_to_bf16(x[t * n_in + k]));
            s += p;
            mag += std::fabs(p);
          }
          ASSERT_NEAR(batch[t * n_out + r], s, 1e-6 * mag + 1e-30) << where << " token " << t << " row " << r;
        }
      // Each token alone.
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<float> alone(n_out);
        matmul(w, x.data() + t * n_in, 1, alone.data(), pool);
        for (int64_t r = 0; r < n_out; ++r)
          ASSERT_EQ(batch[t * n_out + r], alone[r]) << where << " token " << t << " row " << r;
      }
      // The tokens in reverse order: each in another group and column.
      std::vector<float> reversed_x(x.size()), reversed(n_tokens * n_out);
      for (int64_t t = 0; t < n_tokens; ++t)
        std::copy_n(x.begin() + t * n_in, n_in, reversed_x.begin() + (n_tokens - 1 - t) * n_in);
      matmul(w, reversed_x.data(), n_tokens, reversed.data(), pool);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < n_out; ++r)
          ASSERT_EQ(reversed[(n_tokens - 1 - t) * n_out + r], batch[t * n_out + r]) << where << " token " << t;
      // Rows in ranges that cut the tiles' 16-row halves anywhere.
      MatmulActs acts;
      acts.convert(DType::BF16, x.data(), n_in, n_tokens);
      std::vector<float> ranged(n_tokens * n_out, NAN);
      for (int64_t begin = 0, step = 3; begin < n_out; begin += step, step += 7)
        matmul_rows(w, acts, ranged.data(), begin, std::min(n_out, begin + step));
      EXPECT_EQ(ranged, batch) << where;
    }
  }
}

// The tile unit's configuration is one per thread: BF16 calls between AMX-INT8 ones (other tile shapes)
// leave each kernel's results as they are alone.
TEST(Bf16Amx, SharesTheTileUnitWithTheInt8Kernels) {
  if (!cpu_has_amx_bf16() || !cpu_has_amx_int8()) GTEST_SKIP() << "no AMX-BF16 and AMX-INT8 on this CPU";
  ThreadPool pool(1);  // one thread: every call on the same tiles
  std::mt19937 rng(5);
  const int64_t n_in = 256, n_out = 64, n_tokens = 48;
  const auto q_data = random_weights(DType::Q8_0, n_out, n_in, rng);
  const auto b_data = random_weights(DType::BF16, n_out, n_in, rng);
  const Tensor q = make_tensor(DType::Q8_0, n_out, n_in, q_data);
  const Tensor b = make_tensor(DType::BF16, n_out, n_in, b_data);
  const auto x = random_floats(n_tokens * n_in, rng);
  std::vector<float> q_first(n_tokens * n_out), b_first(n_tokens * n_out), q_again(n_tokens * n_out),
      b_again(n_tokens * n_out);
  matmul(q, x.data(), n_tokens, q_first.data(), pool);
  matmul(b, x.data(), n_tokens, b_first.data(), pool);
  matmul(q, x.data(), n_tokens, q_again.data(), pool);
  matmul(b, x.data(), 1, b_again.data(), pool);  // another BF16 shape (one token) in between
  matmul(b, x.data(), n_tokens, b_again.data(), pool);
  EXPECT_EQ(q_again, q_first);
  EXPECT_EQ(b_again, b_first);
}

// The AMX pair kernels against the zmm ones (in their passes of up to kMaxZmmTokens) on the same pairs
// and tokens: the same bits for every pair count and token count up to kMaxAmxTokens, with the extreme
// quants in row 0 and the extreme activations in token 0; and with tokens whose quants do not lie at one
// stride (copied to one inside). The far stream must not change anything.
TEST(InterleavedKernels, AmxKernelsAreBitIdenticalToTheZmmOnes) {
  if (!cpu_has_amx_int8()) GTEST_SKIP() << "no AMX-INT8 on this CPU (or KVSERVE_NO_AMX set)";
  for (const int64_t n_in : {int64_t{32}, int64_t{96}, int64_t{256}}) {
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::MXFP4, DType::Q8_0}) {
      std::mt19937 rng(static_cast<uint32_t>(type) + 77 + static_cast<uint32_t>(n_in));
      const auto extreme_row0 = [&](std::vector<uint8_t>& data) {
        const size_t block = dtype_info(type).block_bytes, quant_off = type == DType::Q4_1    ? 4
                                                                       : type == DType::MXFP4 ? 1
                                                                                              : 2;
        for (int64_t b = 0; b < n_in / 32; ++b)
          for (size_t k = quant_off; k < block; ++k)
            data[b * block + k] = type == DType::Q8_0 ? static_cast<uint8_t>(k % 2 ? 0x80 : 0x7F) : 0xFF;
      };
      Q32KernelCase c(type, n_in, rng, extreme_row0, true);
      const auto zmm = type == DType::Q4_0     ? avx512zmm::gemm_pairs_q4_0
                       : type == DType::Q4_1   ? avx512zmm::gemm_pairs_q4_1
                       : type == DType::Q5_0   ? avx512zmm::gemm_pairs_q5_0
                       : type == DType::IQ4_NL ? avx512zmm::gemm_pairs_iq4_nl
                       : type == DType::MXFP4  ? avx512zmm::gemm_pairs_mxfp4
                                               : avx512zmm::gemm_pairs_q8_0;
      const auto tiles = type == DType::Q4_0     ? amx::gemm_pairs_q4_0
                         : type == DType::Q4_1   ? amx::gemm_pairs_q4_1
                         : type == DType::Q5_0   ? amx::gemm_pairs_q5_0
                         : type == DType::IQ4_NL ? amx::gemm_pairs_iq4_nl
                         : type == DType::MXFP4  ? amx::gemm_pairs_mxfp4
                                                 : amx::gemm_pairs_q8_0;
      constexpr int kTok = amx::kMaxAmxTokens, kPass = avx512zmm::kMaxZmmTokens;
      constexpr int64_t kStride = 8 * avx512zmm::kMaxZmmGroups + 3;
      // 64-byte aligned, as matmul gives it.
      std::vector<int8_t> unpacked_storage(avx512zmm::kMaxZmmPairs * n_in / 32 * amx::kUnpackedBlockBytes + 64);
      const std::span<int8_t> unpacked(
          reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(unpacked_storage.data()) + 63) & ~uintptr_t{63}),
          unpacked_storage.size() - 64);
      amx::unpack_pairs(type, n_in, c.paired.get(), avx512zmm::kMaxZmmPairs, unpacked.data());
      // Tokens in reverse order: their quants lie at a negative stride.
      PackedActs32 reversed[kTok];
      for (int t = 0; t < kTok; ++t) reversed[t] = c.acts[kTok - 1 - t];
      for (const PackedActs32* acts :
           {static_cast<const PackedActs32*>(c.acts), static_cast<const PackedActs32*>(reversed)})
        for (int n_pairs = 1; n_pairs <= avx512zmm::kMaxZmmPairs; ++n_pairs)
          for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
            std::vector<float> want(kStride * kTok, -7.0f), got(want.size(), -7.0f);
            for (int t0 = 0; t0 < n_tok; t0 += kPass)
              zmm(n_in, c.paired.get(), n_pairs, acts + t0, std::min(kPass, n_tok - t0), want.data() + t0 * kStride,
                  kStride, nullptr);
            tiles(n_in, c.paired.get(), n_pairs, acts, n_tok, got.data(), kStride, c.paired.get(), nullptr);
            ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                << dtype_name(type) << " n_in " << n_in << " pairs " << n_pairs << " tokens " << n_tok
                << (acts == reversed ? " (reversed)" : "");
            // The same with the quants put in B's layout beforehand (Q8_0's records are B already).
            if (type == DType::Q8_0) continue;
            std::vector<float> got_unpacked(want.size(), -7.0f);
            tiles(n_in, c.paired.get(), n_pairs, acts, n_tok, got_unpacked.data(), kStride, nullptr, unpacked.data());
            ASSERT_EQ(std::memcmp(want.data(), got_unpacked.data(), want.size() * sizeof(float)), 0)
                << dtype_name(type) << " (unpacked) n_in " << n_in << " pairs " << n_pairs << " tokens " << n_tok;
          }
    }
  }
}

// The pair layout is the group layout's records interleaved piece by piece (interleaved_rows.h): for
// groups 2j and 2j + 1 and each block, each piece of the even group's record then the same piece of the
// odd group's; a last odd group stays as it is. The pieces, as the 512-bit kernels load them:
// Q4_0 / Q4_1 / Q8_0 d (and m) rows of 16 bytes and quant vectors of 32, MXFP4's 8 exponent bytes; the
// K-quants' d and dmin rows,
// 8-byte sub-block scales, 16-byte mins of two sub-blocks (Q4_K / Q5_K) and 32-byte vectors.
TEST(InterleavedPairs, PairLayoutInterleavesTheGroupRecordsPieceByPiece) {
  std::mt19937 rng(41);
  const std::vector<std::pair<DType, std::vector<std::pair<size_t, int>>>> specs = {
      {DType::Q4_0, {{16, 1}, {32, 4}}},
      {DType::Q4_1, {{16, 2}, {32, 4}}},
      {DType::Q5_0, {{16, 1}, {32, 5}}},
      {DType::IQ4_NL, {{16, 1}, {32, 4}}},
      {DType::MXFP4, {{8, 1}, {32, 4}}},
      {DType::Q8_0, {{16, 1}, {32, 8}}},
      {DType::Q4_K, {{16, 2}, {8, 8}, {16, 4}, {32, 32}}},
      {DType::Q5_K, {{16, 2}, {8, 8}, {16, 4}, {32, 40}}},
      {DType::Q6_K, {{16, 1}, {8, 16}, {32, 48}}},
      {DType::Q3_K, {{16, 1}, {8, 16}, {32, 24}}},
      {DType::Q2_K, {{16, 2}, {8, 16}, {8, 8}, {32, 16}}},
      {DType::IQ4_XS, {{16, 1}, {8, 8}, {32, 32}}},
  };
  for (const auto& [type, pieces] : specs)
    for (int64_t n_out : {16, 40, 61}) {
      const int64_t n_in = dtype_info(type).block_elems == 256 ? 512 : 96;
      const auto data = random_weights(type, n_out, n_in, rng);
      const Tensor w = make_tensor(type, n_out, n_in, data, /*pairs=*/false);
      const auto paired = interleave_rows(w, /*pairs=*/true);
      const auto* groups = static_cast<const uint8_t*>(w.interleaved);
      const size_t record = interleaved_block_bytes(type), group_bytes = interleaved_group_bytes(type, n_in);
      const int64_t nb = n_in / dtype_info(type).block_elems, n_groups = n_out / 8;
      const int64_t paired_groups = interleaved_paired_groups(n_out);
      EXPECT_EQ(paired_groups, n_out / 16 * 2);
      for (int64_t g = 0; g < n_groups; ++g)
        for (int64_t i = 0; i < nb; ++i)
          for (size_t k = 0; k < record; ++k) {
            const uint8_t want = groups[g * group_bytes + i * record + k];
            size_t at = g * group_bytes + i * record + k;
            if (g < paired_groups) {
              // Byte k lies in piece `n` of a segment starting at byte `start` of the group's record: in
              // the pair's record that segment starts at 2 * start, and the piece at 2 n + half.
              const size_t half = static_cast<size_t>(g % 2);
              size_t start = 0;
              for (const auto& [bytes, count] : pieces) {
                if (k < start + bytes * count) {
                  const size_t n = (k - start) / bytes;
                  at = (g - half) * group_bytes + 2 * i * record + 2 * start + (2 * n + half) * bytes +
                       (k - start) % bytes;
                  break;
                }
                start += bytes * count;
              }
            }
            ASSERT_EQ(paired[at], want) << dtype_name(type) << " rows " << n_out << " group " << g << " block " << i
                                        << " byte " << k;
          }
    }
}

// matmul over the pair layout gives the group layout's bits for every row, token count and thread split:
// whole pairs, a last odd group, ranges and stacked matrices (matmul_shared_input) that cut a pair.
// The pair layout needs the 512-bit kernels, so never without AVX512-VNNI, nor for a type without an
// interleaved layout; with VNNI, Q4_0 and Q8_0 are always paired (on a Zen 4 too), every interleaved
// type where the core runs zmm at full width.
TEST(InterleavedPairs, PreferredOnlyWhereThe512BitKernelsRun) {
  if (env_switch("KVSERVE_PAIRS") >= 0 || cpu_zmm_forced() >= 0) GTEST_SKIP() << "the environment overrides the choice";
  for (DType type :
       {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::MXFP4,
        DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    const bool paired = interleaved_pairs_preferred(type);
    if (!has_interleaved_layout(type) || !cpu_has_avx512_vnni()) {
      EXPECT_FALSE(paired) << dtype_name(type);
    } else if (cpu_prefers_zmm() || type == DType::Q4_0 || type == DType::Q8_0) {
      EXPECT_TRUE(paired) << dtype_name(type);
    } else {
      EXPECT_FALSE(paired) << dtype_name(type);
    }
  }
}

TEST(InterleavedPairs, MatmulOverPairsIsBitIdenticalToGroups) {
  if (!cpu_has_avx2() || !cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX512-VNNI on this CPU (or turned off)";
  std::mt19937 rng(43);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::MXFP4, DType::Q8_0, DType::Q4_K,
                     DType::Q5_K, DType::Q6_K}) {
    const int64_t n_in = dtype_info(type).block_elems == 256 ? 512 : 160;
    for (int64_t n_out : {16, 24, 40, 61, 200}) {
      const auto data = random_weights(type, n_out, n_in, rng);
      const Tensor groups = make_tensor(type, n_out, n_in, data, false), pairs = make_tensor(type, n_out, n_in, data, true);
      for (int threads : {1, 3})
        for (int64_t n_tokens : {1, 3, 8, 9, 17}) {
          ThreadPool pool(threads);
          const auto x = random_floats(n_tokens * n_in, rng);
          std::vector<float> a(n_tokens * n_out, NAN), b(a.size(), NAN);
          matmul(groups, x.data(), n_tokens, a.data(), pool);
          matmul(pairs, x.data(), n_tokens, b.data(), pool);
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
              << dtype_name(type) << " rows " << n_out << " threads " << threads << " tokens " << n_tokens;
        }
    }
    // Stacked: 24 rows (a pair and an odd group) then 40, so the second matrix's ranges start mid-pair.
    const auto da = random_weights(type, 24, n_in, rng), db = random_weights(type, 40, n_in, rng);
    const Tensor ga = make_tensor(type, 24, n_in, da, false), gb = make_tensor(type, 40, n_in, db, false);
    const Tensor pa = make_tensor(type, 24, n_in, da, true), pb = make_tensor(type, 40, n_in, db, true);
    for (int threads : {2, 3})
      for (int64_t n_tokens : {1, 8, 17}) {
        ThreadPool pool(threads);
        const auto x = random_floats(n_tokens * n_in, rng);
        std::vector<float> ya(n_tokens * 24), yb(n_tokens * 40), za(ya.size()), zb(yb.size());
        const MatmulOutput g_outs[] = {{&ga, ya.data()}, {&gb, yb.data()}};
        const MatmulOutput p_outs[] = {{&pa, za.data()}, {&pb, zb.data()}};
        matmul_shared_input(g_outs, x.data(), n_tokens, pool);
        matmul_shared_input(p_outs, x.data(), n_tokens, pool);
        ASSERT_EQ(ya, za) << dtype_name(type) << " threads " << threads << " tokens " << n_tokens;
        ASSERT_EQ(yb, zb) << dtype_name(type) << " threads " << threads << " tokens " << n_tokens;
      }
  }
}

// matmul of w with a path turned off by set_enabled(false), then on again: the same bits, on 1 and 3
// threads, for each token count.
void expect_same_bits_with_path_off_and_on(const Tensor& w, void (*set_enabled)(bool),
                                           std::initializer_list<int64_t> token_counts, std::mt19937& rng) {
  const int64_t n_in = w.cols(), n_out = w.rows();
  for (int threads : {1, 3})
    for (int64_t n_tokens : token_counts) {
      ThreadPool pool(threads);
      const auto x = random_floats(n_tokens * n_in, rng);
      std::vector<float> a(n_tokens * n_out, NAN), b(a.size(), NAN);
      set_enabled(false);
      matmul(w, x.data(), n_tokens, a.data(), pool);
      set_enabled(true);
      matmul(w, x.data(), n_tokens, b.data(), pool);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << dtype_name(w.type) << " rows " << n_out << " threads " << threads << " tokens " << n_tokens;
    }
}

// The same for two matrices stacked on one input (matmul_shared_input), n_tokens tokens, on each thread count.
void expect_stacked_same_bits_with_path_off_and_on(const Tensor& a, const Tensor& b, void (*set_enabled)(bool),
                                                   int64_t n_tokens, std::initializer_list<int> thread_counts,
                                                   std::mt19937& rng) {
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const auto x = random_floats(n_tokens * a.cols(), rng);
    std::vector<float> ya(n_tokens * a.rows()), yb(n_tokens * b.rows()), za(ya.size()), zb(yb.size());
    const MatmulOutput off[] = {{&a, ya.data()}, {&b, yb.data()}};
    const MatmulOutput on[] = {{&a, za.data()}, {&b, zb.data()}};
    set_enabled(false);
    matmul_shared_input(off, x.data(), n_tokens, pool);
    set_enabled(true);
    matmul_shared_input(on, x.data(), n_tokens, pool);
    ASSERT_EQ(ya, za) << dtype_name(a.type) << " threads " << threads;
    ASSERT_EQ(yb, zb) << dtype_name(b.type) << " threads " << threads;
  }
}

// matmul with the AMX pair kernels (calls of 32 tokens and more) gives the zmm kernels' bits: whole pairs,
// a last odd group, the one-row tail, thread splits that cut a pair, token counts that end in a short pass,
// and stacked matrices.
TEST(InterleavedPairs, MatmulWithAmxIsBitIdenticalToTheZmmKernels) {
  if (!cpu_has_amx_int8()) GTEST_SKIP() << "no AMX-INT8 on this CPU (or KVSERVE_NO_AMX set)";
  struct AmxBack {  // turned back on however the test ends
    ~AmxBack() { set_amx_enabled(true); }
  } restore;
  std::mt19937 rng(59);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::Q8_0}) {
    const int64_t n_in = 288;
    for (int64_t n_out : {40, 61, 200}) {
      const auto data = random_weights(type, n_out, n_in, rng);
      const Tensor w = make_tensor(type, n_out, n_in, data, true);
      expect_same_bits_with_path_off_and_on(w, set_amx_enabled, {32, 45, 64}, rng);
    }
    const auto da = random_weights(type, 24, n_in, rng), db = random_weights(type, 40, n_in, rng);
    const Tensor pa = make_tensor(type, 24, n_in, da, true), pb = make_tensor(type, 40, n_in, db, true);
    expect_stacked_same_bits_with_path_off_and_on(pa, pb, set_amx_enabled, 33, {3}, rng);
  }
}

// One-token pair calls that also ask 8 KiB ahead into L2 (the default on Intel) and those that do not give
// the group kernels' bits, whichever the host's default is.
TEST(InterleavedPairs, OneTokenCallsGiveTheGroupKernelsBitsWithAndWithoutTheL2Stream) {
  if (!cpu_has_avx2() || !cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX512-VNNI on this CPU (or turned off)";
  struct DefaultBack {  // restores the host's default however the test ends
    ~DefaultBack() { set_decode_l2_ahead(-1); }
  } restore;
  std::mt19937 rng(53);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::IQ4_NL, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K, DType::Q3_K, DType::Q2_K}) {
    const int64_t n_in = dtype_info(type).block_elems == 256 ? 2048 : 1024;
    for (int64_t n_out : {16, 40, 200}) {
      const auto data = random_weights(type, n_out, n_in, rng);
      const Tensor groups = make_tensor(type, n_out, n_in, data, false), pairs = make_tensor(type, n_out, n_in, data, true);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        const auto x = random_floats(n_in, rng);
        std::vector<float> want(n_out, NAN);
        matmul(groups, x.data(), 1, want.data(), pool);
        for (int l2 : {0, 1}) {
          set_decode_l2_ahead(l2);
          ASSERT_EQ(decode_l2_ahead_enabled(), l2 == 1);
          std::vector<float> got(n_out, NAN);
          matmul(pairs, x.data(), 1, got.data(), pool);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
              << dtype_name(type) << " rows " << n_out << " threads " << threads << " l2 " << l2;
        }
        set_decode_l2_ahead(-1);
      }
    }
  }
}

// Many-token calls on K-quant weights in the group layout pair each chunk's groups into a scratch copy
// and run the 512-bit pair kernels (matmul.cpp): the same bits as the group kernels for every row split,
// with a last odd group, across threads and for matrices stacked so that ranges start mid-pair; and the
// copy of two groups is the pair layout's.
TEST(InterleavedPairs, ChunksPairedOnTheFlyGiveTheGroupKernelsBits) {
  if (!cpu_has_avx2() || !cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX512-VNNI on this CPU (or turned off)";
  struct FlyOn {  // restores the default however the test ends
    ~FlyOn() { set_fly_pairs_enabled(true); }
  } restore;
  std::mt19937 rng(47);
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t n_in = 512;
    for (int64_t n_out : {40, 61, 200}) {
      const auto data = random_weights(type, n_out, n_in, rng);
      const Tensor w = make_tensor(type, n_out, n_in, data, /*pairs=*/false);
      const size_t group_bytes = interleaved_group_bytes(type, n_in);
      const auto paired = interleave_rows(w, /*pairs=*/true);
      std::vector<uint8_t> pair(2 * group_bytes);
      pair_two_groups(type, n_in, static_cast<const uint8_t*>(w.interleaved) + 2 * group_bytes, pair.data());
      ASSERT_EQ(std::memcmp(pair.data(), paired.get() + 2 * group_bytes, pair.size()), 0) << dtype_name(type);
      expect_same_bits_with_path_off_and_on(w, set_fly_pairs_enabled, {16, 40, 130}, rng);
    }
    const auto da = random_weights(type, 24, n_in, rng), db = random_weights(type, 40, n_in, rng);
    const Tensor ga = make_tensor(type, 24, n_in, da, false), gb = make_tensor(type, 40, n_in, db, false);
    expect_stacked_same_bits_with_path_off_and_on(ga, gb, set_fly_pairs_enabled, 130, {2, 3}, rng);
  }
}

// The K-quant interleaved kernels (Q8_K activation rows) under the same contract: every group and token
// count stores each token's rows at its stride with the bits of that group and token alone, and a
// single token's value is the dot product of the dequantized row and activations.
class InterleavedKQuants : public ::testing::TestWithParam<DType> {};

TEST_P(InterleavedKQuants, EveryGroupAndTokenCountMatchesAloneAndTheDotProduct) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  const DType type = GetParam();
  const auto gemm = type == DType::Q4_K     ? avx2::gemm_interleaved_q4_K
                    : type == DType::Q5_K   ? avx2::gemm_interleaved_q5_K
                    : type == DType::IQ4_XS ? avx2::gemm_interleaved_iq4_xs
                    : type == DType::Q3_K   ? avx2::gemm_interleaved_q3_K
                    : type == DType::Q2_K   ? avx2::gemm_interleaved_q2_K
                                            : avx2::gemm_interleaved_q6_K;
  constexpr int kTok = avx2::kMaxInterleavedTokens;
  constexpr int kGroups = avx2::kMaxInterleavedGroups;
  constexpr int64_t kStride = 8 * kGroups + 3;
  const int64_t n_in = 3 * kQK_K;
  std::mt19937 rng(41);
  const auto data = random_weights(type, kGroups * kInterleaveRows, n_in, rng);
  const Tensor w = make_tensor(type, kGroups * kInterleaveRows, n_in, data, /*pairs=*/false);
  std::vector<std::vector<BlockQ8_K>> rows(kTok, std::vector<BlockQ8_K>(n_in / kQK_K));
  const BlockQ8_K* acts[kTok];
  for (int t = 0; t < kTok; ++t) {
    const auto x = random_floats(n_in, rng);
    quantize_row_q8_K(x.data(), rows[t].data(), n_in);
    acts[t] = rows[t].data();
  }
  const auto* first_group = static_cast<const uint8_t*>(w.interleaved);
  const size_t group_bytes = interleaved_group_bytes(type, n_in);
  float alone[kGroups][kTok][kInterleaveRows];
  for (int g = 0; g < kGroups; ++g)
    for (int t = 0; t < kTok; ++t)
      gemm(n_in, first_group + g * group_bytes, 1, &acts[t], 1, alone[g][t], kInterleaveRows, nullptr);
  for (int n_groups = 1; n_groups <= kGroups; ++n_groups) {
    for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
      std::vector<float> out(kStride * kTok, -7.0f);
      gemm(n_in, first_group, n_groups, acts, n_tok, out.data(), kStride, first_group + group_bytes);
      for (int t = 0; t < kTok; ++t)
        for (int64_t i = 0; i < kStride; ++i) {
          const float got = out[t * kStride + i];
          const std::string where = std::string(dtype_name(type)) + " groups " + std::to_string(n_groups) + " n_tok " + std::to_string(n_tok) +
                                    " token " + std::to_string(t) + " lane " + std::to_string(i);
          if (t < n_tok && i < kInterleaveRows * n_groups) {
            EXPECT_EQ(got, alone[i / kInterleaveRows][t][i % kInterleaveRows]) << where;
          } else {
            EXPECT_EQ(got, -7.0f) << where << ": written outside the token's rows";
          }
        }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    std::vector<float> act(n_in), wrow(n_in);
    dequantize_row(DType::Q8_K, rows[t].data(), act.data(), n_in);
    for (int r = 0; r < kGroups * kInterleaveRows; ++r) {
      dequantize_row(type, w.row(r), wrow.data(), n_in);
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        dot += static_cast<double>(wrow[k]) * act[k];
        mag += std::fabs(static_cast<double>(wrow[k]) * act[k]);
      }
      EXPECT_NEAR(alone[r / kInterleaveRows][t][r % kInterleaveRows], dot, 1e-5 * mag + 1e-5)
          << dtype_name(type) << " row " << r;
    }
  }
}

// Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K and Q3_K with vpdpbusd (AVX512-VNNI, and AVX-VNNI where the CPU has it)
// against the AVX2 kernels, bit for bit, with one row of the largest quants (where the AVX2 kernels' int16
// sums are closest to overflowing) and one token of the largest activations.
TEST_P(InterleavedKQuants, VnniKernelsAreBitIdenticalToAvx2) {
  const DType type = GetParam();
  if (!cpu_has_avx2() || !(cpu_has_avx512_vnni() || cpu_has_avx_vnni()))
    GTEST_SKIP() << "neither AVX512-VNNI nor AVX-VNNI on this CPU (or turned off)";
  // Enough groups and tokens for the zmm kernels too.
  constexpr int kTok = avx512zmm::kMaxZmmTokens;
  constexpr int kGroups = avx512zmm::kMaxZmmGroups;
  const int64_t n_in = 2 * kQK_K;
  std::mt19937 rng(43);
  auto data = random_weights(type, kGroups * kInterleaveRows, n_in, rng);
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {  // row 0: every quant at its largest
    uint8_t* p = data.data() + b * dtype_info(type).block_bytes;
    if (type == DType::Q4_K) std::memset(p + offsetof(BlockQ4_K, qs), 0xFF, sizeof(BlockQ4_K::qs));
    if (type == DType::Q5_K) std::memset(p + offsetof(BlockQ5_K, qh), 0xFF, sizeof(BlockQ5_K::qh) + sizeof(BlockQ5_K::qs));
    if (type == DType::Q6_K) {
      std::memset(p + offsetof(BlockQ6_K, ql), 0xFF, sizeof(BlockQ6_K::ql));
      std::memset(p + offsetof(BlockQ6_K, qh), 0xFF, sizeof(BlockQ6_K::qh));
    }
    if (type == DType::Q3_K) {  // every quant 7 (3 + 4) and every scale -32
      std::memset(p + offsetof(BlockQ3_K, hmask), 0xFF, sizeof(BlockQ3_K::hmask) + sizeof(BlockQ3_K::qs));
      std::memset(p + offsetof(BlockQ3_K, scales), 0, sizeof(BlockQ3_K::scales));
    }
    if (type == DType::Q2_K)  // every quant 3, every scale and min 15
      std::memset(p + offsetof(BlockQ2_K, scales), 0xFF, sizeof(BlockQ2_K::scales) + sizeof(BlockQ2_K::qs));
    if (type == DType::IQ4_XS) {  // every level -127 and every scale -32: the largest products
      std::memset(p + offsetof(BlockIQ4_XS, scales_h), 0, 2 + sizeof(BlockIQ4_XS::scales_l));
      std::memset(p + offsetof(BlockIQ4_XS, qs), 0, sizeof(BlockIQ4_XS::qs));
    }
  }
  const Tensor w = make_tensor(type, kGroups * kInterleaveRows, n_in, data, /*pairs=*/false);
  std::vector<std::vector<BlockQ8_K>> rows(kTok, std::vector<BlockQ8_K>(n_in / kQK_K));
  const BlockQ8_K* acts[kTok];
  for (int t = 0; t < kTok; ++t) {
    auto x = random_floats(n_in, rng);
    if (t == 0) std::fill(x.begin(), x.end(), -1.0f);
    quantize_row_q8_K(x.data(), rows[t].data(), n_in);
    acts[t] = rows[t].data();
  }
  const auto avx2_gemm = type == DType::Q4_K     ? avx2::gemm_interleaved_q4_K
                         : type == DType::Q5_K   ? avx2::gemm_interleaved_q5_K
                         : type == DType::IQ4_XS ? avx2::gemm_interleaved_iq4_xs
                         : type == DType::Q3_K   ? avx2::gemm_interleaved_q3_K
                         : type == DType::Q2_K   ? avx2::gemm_interleaved_q2_K
                                                 : avx2::gemm_interleaved_q6_K;
  if (cpu_has_avx_vnni()) {
    const auto avx_vnni_gemm = type == DType::Q4_K     ? avxvnni::gemm_interleaved_q4_K
                               : type == DType::Q5_K   ? avxvnni::gemm_interleaved_q5_K
                               : type == DType::IQ4_XS ? avxvnni::gemm_interleaved_iq4_xs
                               : type == DType::Q3_K   ? avxvnni::gemm_interleaved_q3_K
                               : type == DType::Q2_K   ? avxvnni::gemm_interleaved_q2_K
                                                       : avxvnni::gemm_interleaved_q6_K;
    expect_vnni_bit_identical(avx2_gemm, avx_vnni_gemm, n_in, static_cast<const uint8_t*>(w.interleaved), acts, type);
  }
  if (!cpu_has_avx512_vnni()) return;
  const auto vnni_gemm = type == DType::Q4_K     ? avx512vnni::gemm_interleaved_q4_K
                         : type == DType::Q5_K   ? avx512vnni::gemm_interleaved_q5_K
                         : type == DType::IQ4_XS ? avx512vnni::gemm_interleaved_iq4_xs
                         : type == DType::Q3_K   ? avx512vnni::gemm_interleaved_q3_K
                         : type == DType::Q2_K   ? avx512vnni::gemm_interleaved_q2_K
                                                 : avx512vnni::gemm_interleaved_q6_K;
  expect_vnni_bit_identical(avx2_gemm, vnni_gemm, n_in, static_cast<const uint8_t*>(w.interleaved), acts, type);
  // The 512-bit pair kernels on the pair layout, for every pair and token count.
  const auto paired = interleave_rows(w, /*pairs=*/true);
  const auto pair_gemm = type == DType::Q4_K   ? avx512zmm::gemm_pairs_q4_K
                         : type == DType::Q5_K ? avx512zmm::gemm_pairs_q5_K
                         : type == DType::Q3_K ? avx512zmm::gemm_pairs_q3_K
                         : type == DType::Q2_K ? avx512zmm::gemm_pairs_q2_K
                         : type == DType::IQ4_XS ? avx512zmm::gemm_pairs_iq4_xs
                                               : avx512zmm::gemm_pairs_q6_K;
  expect_pairs_bit_identical(avx2_gemm, pair_gemm, n_in, static_cast<const uint8_t*>(w.interleaved), paired.get(), acts,
                             type);
}

// The AVX2 Q5_K and Q6_K kernels over quants unpacked once (matmul's path for more than 3 tokens) give the
// bits of the kernels that unpack them themselves, for every group and token count, and write only each
// token's rows.
class UnpackedKQuants : public ::testing::TestWithParam<DType> {};

TEST_P(UnpackedKQuants, UnpackedQuantsGiveTheBitsOfThePackedKernel) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or KVSERVE_NO_SIMD set)";
  const DType type = GetParam();
  const bool q5 = type == DType::Q5_K;
  constexpr int kTok = avx2::kMaxInterleavedTokens;
  constexpr int kGroups = avx2::kMaxInterleavedGroups;
  constexpr int64_t kStride = 8 * kGroups + 3;
  const int64_t n_in = 3 * kQK_K;
  std::mt19937 rng(47);
  auto data = random_weights(type, kGroups * kInterleaveRows, n_in, rng);
  // One row of the largest quants, where the int16 pair sums sit closest to overflow.
  for (int64_t b = 0; b < n_in / kQK_K; ++b) {
    uint8_t* p = data.data() + b * dtype_info(type).block_bytes;
    if (q5) {
      std::memset(p + offsetof(BlockQ5_K, qs), 0xFF, sizeof(BlockQ5_K::qs));
      std::memset(p + offsetof(BlockQ5_K, qh), 0xFF, sizeof(BlockQ5_K::qh));
    } else {
      std::memset(p + offsetof(BlockQ6_K, ql), 0xFF, sizeof(BlockQ6_K::ql));
      std::memset(p + offsetof(BlockQ6_K, qh), 0xFF, sizeof(BlockQ6_K::qh));
    }
  }
  const Tensor w = make_tensor(type, kGroups * kInterleaveRows, n_in, data, /*pairs=*/false);
  std::vector<std::vector<BlockQ8_K>> rows(kTok, std::vector<BlockQ8_K>(n_in / kQK_K));
  const BlockQ8_K* acts[kTok];
  for (int t = 0; t < kTok; ++t) {
    const auto x = random_floats(n_in, rng);
    quantize_row_q8_K(x.data(), rows[t].data(), n_in);
    acts[t] = rows[t].data();
  }
  const auto* groups = static_cast<const uint8_t*>(w.interleaved);
  std::vector<uint8_t> unpacked(static_cast<size_t>(kGroups * n_in / kQK_K) * kUnpackedKBlockBytes);
  (q5 ? avx2::unpack_q5_K_groups : avx2::unpack_q6_K_groups)(n_in, groups, kGroups, unpacked.data());
  const auto packed_gemm = q5 ? avx2::gemm_interleaved_q5_K : avx2::gemm_interleaved_q6_K;
  // The AVX2 kernel over the unpacked copy, and Q5_K's vpdpbusd twins where the CPU has AVX512-VNNI or AVX-VNNI: each
  // must give the AVX2 packed kernel's bits.
  using UnpackedGemm = decltype(&avx2::gemm_interleaved_q5_K_unpacked);
  std::vector<std::pair<const char*, UnpackedGemm>> unpacked_gemms = {
      {"avx2", q5 ? avx2::gemm_interleaved_q5_K_unpacked : avx2::gemm_interleaved_q6_K_unpacked}};
  if (q5 && cpu_has_avx512_vnni()) unpacked_gemms.emplace_back("avx512vnni", avx512vnni::gemm_interleaved_q5_K_unpacked);
  if (q5 && cpu_has_avx_vnni()) unpacked_gemms.emplace_back("avxvnni", avxvnni::gemm_interleaved_q5_K_unpacked);
  std::vector<float> packed(kStride * kTok), got(kStride * kTok);
  for (const auto& [isa, unpacked_gemm] : unpacked_gemms)
    for (int n_groups = 1; n_groups <= kGroups; ++n_groups)
      for (int n_tok = 1; n_tok <= kTok; ++n_tok) {
        std::fill(packed.begin(), packed.end(), -7.0f);
        std::fill(got.begin(), got.end(), -7.0f);
        packed_gemm(n_in, groups, n_groups, acts, n_tok, packed.data(), kStride, nullptr);
        unpacked_gemm(n_in, groups, n_groups, unpacked.data(), acts, n_tok, got.data(), kStride, groups);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], packed[i]) << isa << " " << dtype_name(type) << " groups " << n_groups << " n_tok "
                                       << n_tok << " at " << i;
        EXPECT_EQ(got[kStride * (n_tok - 1) + 8 * n_groups], -7.0f) << isa << ": written past the rows";
      }
}

INSTANTIATE_TEST_SUITE_P(KQuants, UnpackedKQuants, ::testing::Values(DType::Q5_K, DType::Q6_K),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(KQuants, InterleavedKQuants,
                         ::testing::Values(DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::Q2_K,
                                           DType::Q3_K),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kvserve
