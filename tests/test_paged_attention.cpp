// Paged attention (fast path and scalar reference) against a dense double-precision softmax attention
// over the same q/k/v, with K/V scattered into random non-contiguous physical blocks. Slots that the
// kernel must never read (past the sequence, unused blocks) hold NaN so a stray read shows up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/fp16.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/quants.h"

using namespace kvserve;

namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim;
};

struct Case {
  Shape shape;
  int block_size;
  int64_t pos0;
  int n_tokens;
  int64_t window = 0;  // sliding window (0: none)
  float softcap = 0;   // attention logit soft-cap (0: none)
  int64_t chunk = 0;   // chunked attention (0: none)
};

struct Fixture {
  std::vector<float> q, k_dense, v_dense;  // dense K/V: [pos][kv_head][dim]
  std::vector<float> k_cache, v_cache;
  std::vector<int32_t> table;
  int64_t block_stride = 0;
};

Fixture make_fixture(const Case& c, std::mt19937& rng) {
  const auto [nh, nkv, hd] = c.shape;
  const int64_t seq_len = c.pos0 + c.n_tokens;
  const int64_t n_logical = (seq_len + c.block_size - 1) / c.block_size;
  const int64_t n_physical = n_logical * 2 + 3;  // spare blocks stay NaN
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  Fixture f;
  f.q.resize(static_cast<size_t>(c.n_tokens) * nh * hd);
  for (auto& x : f.q) x = uni(rng);
  f.k_dense.resize(static_cast<size_t>(seq_len) * nkv * hd);
  f.v_dense.resize(f.k_dense.size());
  for (auto& x : f.k_dense) x = uni(rng);
  for (auto& x : f.v_dense) x = uni(rng);

  std::vector<int32_t> phys(n_physical);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  f.table.assign(phys.begin(), phys.begin() + n_logical);

  f.block_stride = int64_t{nkv} * c.block_size * hd;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  f.k_cache.assign(static_cast<size_t>(n_physical * f.block_stride), nan);
  f.v_cache.assign(f.k_cache.size(), nan);
  for (int64_t p = 0; p < seq_len; ++p) {
    const int64_t base = f.table[p / c.block_size] * f.block_stride + (p % c.block_size) * hd;
    for (int g = 0; g < nkv; ++g) {
      for (int d = 0; d < hd; ++d) {
        const size_t dense = (static_cast<size_t>(p) * nkv + g) * hd + d;
        const size_t paged = base + int64_t{g} * c.block_size * hd + d;
        f.k_cache[paged] = f.k_dense[dense];
        f.v_cache[paged] = f.v_dense[dense];
      }
    }
  }
  return f;
}

std::vector<double> dense_attention(const Case& c, const Fixture& f, double scale) {
  const auto [nh, nkv, hd] = c.shape;
  const int group = nh / nkv;
  std::vector<double> out(static_cast<size_t>(c.n_tokens) * nh * hd, 0.0);
  for (int t = 0; t < c.n_tokens; ++t) {
    const int64_t n_ctx = c.pos0 + t + 1;
    // Positions before a sliding window weigh nothing.
    int64_t j0 = c.window > 0 ? std::max<int64_t>(0, n_ctx - c.window) : 0;
    // Nor those before the token's chunk (Llama 4): its position p = n_ctx - 1 sees [p - p % chunk, p].
    if (c.chunk > 0) j0 = std::max(j0, (n_ctx - 1) / c.chunk * c.chunk);
    for (int h = 0; h < nh; ++h) {
      const int g = h / group;
      std::vector<double> s(n_ctx, -std::numeric_limits<double>::infinity());
      for (int64_t j = j0; j < n_ctx; ++j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d)
          dot += double(f.q[(size_t(t) * nh + h) * hd + d]) * f.k_dense[(size_t(j) * nkv + g) * hd + d];
        s[j] = dot * scale;
        if (c.softcap > 0) s[j] = c.softcap * std::tanh(s[j] / c.softcap);
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < n_ctx; ++j)
        for (int d = 0; d < hd; ++d)
          out[(size_t(t) * nh + h) * hd + d] += s[j] / sum * f.v_dense[(size_t(j) * nkv + g) * hd + d];
    }
  }
  return out;
}

PagedAttentionArgs make_args(const Case& c, const Fixture& f, std::vector<float>& out) {
  PagedAttentionArgs a;
  a.q = f.q.data();
  a.out = out.data();
  a.n_tokens = c.n_tokens;
  a.n_heads = c.shape.n_heads;
  a.n_kv_heads = c.shape.n_kv_heads;
  a.head_dim = c.shape.head_dim;
  a.block_table = f.table.data();
  a.block_size = c.block_size;
  a.pos0 = c.pos0;
  a.k_cache = f.k_cache.data();
  a.v_cache = f.v_cache.data();
  a.block_stride = f.block_stride;
  a.scale = 1.0f / std::sqrt(float(c.shape.head_dim));
  a.window = c.window;
  a.softcap = c.softcap;
  a.chunk = c.chunk;
  return a;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what,
                  const Case& c) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-5 * std::max(1.0, std::abs(want[i]));
    ASSERT_NEAR(got[i], want[i], tol) << what << " heads=" << c.shape.n_heads << "/" << c.shape.n_kv_heads
                                      << " hd=" << c.shape.head_dim << " bs=" << c.block_size << " pos0=" << c.pos0
                                      << " n_tokens=" << c.n_tokens << " window=" << c.window << " chunk=" << c.chunk
                                      << " i=" << i;
  }
}

void check_case(const Case& c, std::mt19937& rng, ThreadPool& pool) {
  const Fixture f = make_fixture(c, rng);
  std::vector<float> out_fast(f.q.size(), -7.0f), out_ref(f.q.size(), -7.0f);
  PagedAttentionArgs a = make_args(c, f, out_fast);
  const auto want = dense_attention(c, f, a.scale);
  paged_attention(a, pool);
  expect_close(out_fast, want, "fast", c);
  a.out = out_ref.data();
  paged_attention_ref(a);
  expect_close(out_ref, want, "ref", c);
}

const Shape kShapes[] = {
    {4, 4, 16},    // MHA
    {8, 4, 32},    // GQA 8/4
    {4, 1, 64},    // GQA 4/1
    {6, 1, 8},     // MQA
    {2, 2, 4},     // tiny head
    {4, 2, 12},    // head_dim not a multiple of 8
    {8, 2, 128},   // large head
    {6, 2, 40},    // 3 heads per KV head, head_dim a multiple of 8 but not of 32
    {13, 1, 72},   // many heads of one KV head: the V sums take 12 (AVX2) or 16 (zmm) heads a pass, 8-wide tail
    {20, 2, 64},   // 10 heads per KV head
};

}  // namespace

TEST(PagedAttention, MatchesDenseAcrossShapesBlocksAndChunks) {
  std::mt19937 rng(1234);
  ThreadPool pool(2);
  for (const Shape& shape : kShapes) {
    for (int bs : {1, 4, 16, 32}) {
      // (pos0, n_tokens): prefill from 0, later prefill chunks, decode steps, block boundaries.
      const std::pair<int64_t, int> chunks[] = {{0, 1},   {0, 7},   {0, 33},  {5, 11}, {16, 16},
                                                {31, 1},  {32, 1},  {47, 9},  {99, 1}, {130, 6},
                                                {299, 1}, {270, 30}};
      for (auto [pos0, n] : chunks) {
        // Keep the test fast: long chunks on wide heads only at the default block size.
        if (shape.n_heads * shape.head_dim >= 256 && pos0 + n > 64 && bs != 16) continue;
        check_case({shape, bs, pos0, n}, rng, pool);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Sliding windows (Gemma's local layers, Mistral), some with Gemma 2's score soft-cap: each token attends to its last `window` positions, so
// whole partitions (128 positions) and blocks fall before the window, or a window starts mid-block, for
// different tokens of one chunk at different places. SIMD worker and reference against dense attention,
// on one thread and with partitions spread over threads (which must give the one thread's bits).
TEST(PagedAttention, SlidingWindowMatchesDense) {
  std::mt19937 rng(4321);
  ThreadPool pool(2);
  for (const Shape& shape : kShapes) {
    for (int bs : {1, 16, 32}) {
      const std::pair<int64_t, int> chunks[] = {{0, 7}, {5, 11}, {31, 1}, {99, 1}, {130, 6}, {299, 1}, {270, 30}};
      for (auto [pos0, n] : chunks) {
        for (int64_t window : {1, 3, 16, 40, 128, 129, 200, 1000}) {
          if (shape.n_heads * shape.head_dim >= 256 && pos0 + n > 64 && bs != 16) continue;
          // Gemma 2's soft-capped scores with some of the windows (its local layers have both).
          const Case c{shape, bs, pos0, n, window, window % 2 == 0 ? 0.5f : 0.0f};
          check_case(c, rng, pool);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  for (const Shape shape : {Shape{4, 1, 64}, Shape{9, 3, 64}, Shape{4, 2, 12}}) {
    for (int64_t window : {5, 128, 300}) {
      const Case c{shape, 16, 700, 1, window, window == 128 ? 0.7f : 0.0f};
      const Fixture f = make_fixture(c, rng);
      std::vector<float> one(f.q.size(), -7.0f);
      {
        ThreadPool one_thread(1);
        paged_attention(make_args(c, f, one), one_thread);
      }
      for (int threads : {2, 3}) {
        ThreadPool split_pool(threads);
        std::vector<float> split(f.q.size(), -9.0f);
        paged_attention(make_args(c, f, split), split_pool);
        ASSERT_EQ(split, one) << "window " << window << " threads " << threads;
      }
    }
  }
}

// Chunked attention (Llama 4's rotating layers): each token attends from the start of its chunk, so a chunk of
// prefill holds tokens whose attention restarts mid-chunk, at a block's start or inside it, and a partition
// before the chunk reads nothing. SIMD worker and reference against dense attention; split over threads gives
// the one thread's bits.
TEST(PagedAttention, ChunkedAttentionMatchesDense) {
  std::mt19937 rng(2468);
  ThreadPool pool(2);
  for (const Shape& shape : {kShapes[0], kShapes[1], kShapes[3], kShapes[5], kShapes[8]}) {
    for (int bs : {1, 16, 32}) {
      const std::pair<int64_t, int> chunks[] = {{0, 7}, {5, 11}, {31, 1}, {99, 1}, {130, 6}, {270, 30}};
      for (auto [pos0, n] : chunks) {
        for (int64_t chunk : {1, 3, 8, 16, 128, 200}) {
          if (shape.n_heads * shape.head_dim >= 256 && pos0 + n > 64 && bs != 16) continue;
          // One case with a sliding window as well: the later start wins.
          Case c{shape, bs, pos0, n, chunk == 200 ? 150 : 0, 0.0f, chunk};
          check_case(c, rng, pool);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  for (int64_t chunk : {5, 128, 300}) {
    const Case c{Shape{4, 1, 64}, 16, 700, 1, 0, 0.0f, chunk};
    const Fixture f = make_fixture(c, rng);
    std::vector<float> one(f.q.size(), -7.0f);
    {
      ThreadPool one_thread(1);
      paged_attention(make_args(c, f, one), one_thread);
    }
    ThreadPool split_pool(3);
    std::vector<float> split(f.q.size(), -9.0f);
    paged_attention(make_args(c, f, split), split_pool);
    ASSERT_EQ(split, one) << "chunk " << chunk;
  }
}

TEST(PagedAttention, RandomShapesAgainstDense) {
  std::mt19937 rng(99);
  ThreadPool pool(2);
  for (int iter = 0; iter < 40; ++iter) {
    const int nkv = std::uniform_int_distribution<int>(1, 4)(rng);
    const int group = std::uniform_int_distribution<int>(1, 4)(rng);
    const int hd = std::uniform_int_distribution<int>(1, 40)(rng) * 2 + 2;  // 4..82
    const int bs_choices[] = {1, 4, 16, 32};
    const int bs = bs_choices[std::uniform_int_distribution<int>(0, 3)(rng)];
    const int64_t seq = std::uniform_int_distribution<int>(1, 300)(rng);
    const int n = std::uniform_int_distribution<int>(1, std::min<int>(seq, 16))(rng);
    check_case({{nkv * group, nkv, hd}, bs, seq - n, n}, rng, pool);
    if (HasFatalFailure()) return;
  }
}

TEST(PagedAttention, ScalarFallbackMatchesWhenSimdDisabled) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  setenv("KVSERVE_NO_SIMD", "1", 1);
  check_case({{8, 2, 32}, 16, 40, 5}, rng, pool);
  unsetenv("KVSERVE_NO_SIMD");
}

TEST(PagedAttention, LargeScoresStayFinite) {
  // Peaked softmax: scores in the hundreds must not overflow exp (the online max keeps them <= 0).
  std::mt19937 rng(5);
  const Case c{{2, 1, 16}, 4, 20, 3};
  Fixture f = make_fixture(c, rng);
  std::vector<float> out(f.q.size());
  PagedAttentionArgs a = make_args(c, f, out);
  a.scale = 100.0f;
  paged_attention(a);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  const auto want = dense_attention(c, f, a.scale);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-3);
}

TEST(PagedAttention, RejectsBadShapes) {
  std::vector<float> buf(64);
  std::vector<int32_t> table{0};
  PagedAttentionArgs a;
  a.q = a.out = buf.data();
  a.k_cache = a.v_cache = buf.data();
  a.block_table = table.data();
  a.n_tokens = 1;
  a.n_heads = 3;
  a.n_kv_heads = 2;
  a.head_dim = 4;
  a.block_size = 4;
  a.block_stride = 32;
  EXPECT_ANY_THROW(paged_attention(a));
  a.n_heads = 4;
  a.block_stride = 8;  // smaller than n_kv_heads * block_size * head_dim
  EXPECT_ANY_THROW(paged_attention_ref(a));
}

namespace {

// The fixture's caches as `type` rows (encode_kv_row: fp8 codes, q8_0 or q4_0 blocks), and its dense K/V
// replaced by what those rows hold (decode_kv_row): attention over the stored values is what the fast
// path and the reference must compute. Slots no position fills stay NaN (a stray read shows up) but
// for the block types, where they are zeroed first (a NaN row has no scale to round to).
struct EncodedCaches {
  std::vector<unsigned char> k, v;
};

EncodedCaches encode_caches(Fixture& f, KVElemType type, int hd) {
  auto encode = [&](std::vector<float>& rows, std::vector<unsigned char>& out) {
    if (kv_elem_is_block_type(type))
      for (float& x : rows)
        if (std::isnan(x)) x = 0.0f;
    const size_t n_rows = rows.size() / static_cast<size_t>(hd);
    out.resize(n_rows * kv_bytes(type, hd));
    for (size_t r = 0; r < n_rows; ++r) encode_kv_row(type, rows.data() + r * hd, hd, out.data() + r * kv_bytes(type, hd));
  };
  auto round_trip = [&](std::vector<float>& rows) {
    std::vector<unsigned char> bytes;
    encode(rows, bytes);
    for (size_t r = 0; r < rows.size() / static_cast<size_t>(hd); ++r)
      decode_kv_row(type, bytes.data() + r * kv_bytes(type, hd), hd, rows.data() + r * hd);
  };
  EncodedCaches c;
  encode(f.k_cache, c.k);
  encode(f.v_cache, c.v);
  round_trip(f.k_dense);
  round_trip(f.v_dense);
  return c;
}

void check_encoded_case(const Case& c, KVElemType type, std::mt19937& rng, ThreadPool& pool) {
  Fixture f = make_fixture(c, rng);
  const EncodedCaches e = encode_caches(f, type, c.shape.head_dim);
  std::vector<float> out_fast(f.q.size(), -7.0f), out_ref(f.q.size(), -7.0f);
  PagedAttentionArgs a = make_args(c, f, out_fast);
  a.k_cache = e.k.data();
  a.v_cache = e.v.data();
  a.kv_type = type;
  const auto want = dense_attention(c, f, a.scale);
  paged_attention(a, pool);
  const std::string name = kv_elem_name(type);
  expect_close(out_fast, want, ("fast " + name).c_str(), c);
  a.out = out_ref.data();
  paged_attention_ref(a);
  expect_close(out_ref, want, ("ref " + name).c_str(), c);
}

}  // namespace

TEST(PagedAttention, HalfPrecisionCachesMatchDenseOverRoundedValues) {
  std::mt19937 rng(321);
  ThreadPool pool(2);
  for (KVElemType type : {KVElemType::F16, KVElemType::BF16}) {
    for (const Shape& shape : kShapes) {
      for (int bs : {1, 16, 32}) {
        for (auto [pos0, n] : {std::pair<int64_t, int>{0, 9}, {40, 1}, {63, 5}}) {
          check_encoded_case(Case{shape, bs, pos0, n}, type, rng, pool);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// int8 (q8_0) and int4 (q4_0) caches, fast path and reference, over head sizes of one to four blocks,
// single tokens and chunks, blocks of 1-32 slots, a sliding window and soft-capping.
TEST(PagedAttention, BlockQuantizedCachesMatchDenseOverDequantizedValues) {
  std::mt19937 rng(654);
  ThreadPool pool(2);
  for (KVElemType type : {KVElemType::Q8_0, KVElemType::Q4_0}) {
    for (const Shape shape : {Shape{4, 2, 32}, Shape{4, 4, 64}, Shape{9, 3, 64}, Shape{8, 1, 64}, Shape{8, 2, 128},
                              Shape{2, 1, 96}, Shape{16, 1, 576}}) {
      for (int bs : {1, 16, 32}) {
        for (auto [pos0, n, window, softcap] : {std::tuple<int64_t, int, int64_t, float>{0, 9, 0, 0.0f},
                                                {40, 1, 0, 0.0f},
                                                {300, 1, 0, 0.0f},
                                                {250, 6, 0, 0.0f},
                                                {200, 3, 37, 0.0f},
                                                {63, 5, 0, 1.5f}}) {
          Case c{shape, bs, pos0, n};
          c.window = window;
          c.softcap = softcap;
          check_encoded_case(c, type, rng, pool);
          if (HasFatalFailure()) return;
        }
      }
    }
    // A head size that is not whole blocks of 32 is refused, not misread.
    const Case c{Shape{4, 2, 16}, 16, 0, 1};
    Fixture f = make_fixture(c, rng);
    std::vector<float> out(f.q.size());
    PagedAttentionArgs a = make_args(c, f, out);
    a.kv_type = type;
    EXPECT_THROW(paged_attention(a, pool), Error);
    EXPECT_THROW(paged_attention_ref(a), Error);
  }
}

// fp8 caches (E4M3, E5M2) over every shape the f32 tests take, tails of under 8 included.
TEST(PagedAttention, Fp8CachesMatchDenseOverDecodedValues) {
  std::mt19937 rng(987);
  ThreadPool pool(2);
  for (KVElemType type : {KVElemType::FP8_E4M3, KVElemType::FP8_E5M2}) {
    for (const Shape& shape : kShapes) {
      for (int bs : {1, 16, 32}) {
        for (auto [pos0, n, window] : {std::tuple<int64_t, int, int64_t>{0, 9, 0}, {40, 1, 0}, {300, 1, 0},
                                       {63, 5, 0}, {200, 3, 37}}) {
          Case c{shape, bs, pos0, n};
          c.window = window;
          check_encoded_case(c, type, rng, pool);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Every finite fp8 code through the fast path's widening: one position (softmax weight exactly 1) whose
// V row holds all of them gives them back as the scalar decode has them, bit for bit.
TEST(PagedAttention, Fp8WideningGivesEveryCodeItsScalarValue) {
  ThreadPool pool(1);
  for (KVElemType type : {KVElemType::FP8_E4M3, KVElemType::FP8_E5M2}) {
    const int hd = 256;
    std::vector<unsigned char> k(hd, 0x38), v(hd);  // any K row
    std::vector<float> want(hd);
    for (int i = 0; i < hd; ++i) {
      unsigned char code = static_cast<unsigned char>(i);
      decode_kv_row(type, &code, 1, &want[static_cast<size_t>(i)]);
      if (!std::isfinite(want[static_cast<size_t>(i)])) code = 0x01;  // NaN / infinity: never stored
      v[static_cast<size_t>(i)] = code;
      decode_kv_row(type, &code, 1, &want[static_cast<size_t>(i)]);
    }
    std::vector<float> q(hd, 0.01f), out(hd, -7.0f);
    const int32_t table[1] = {0};
    PagedAttentionArgs a;
    a.q = q.data();
    a.out = out.data();
    a.n_tokens = 1;
    a.n_heads = a.n_kv_heads = 1;
    a.head_dim = hd;
    a.block_table = table;
    a.block_size = 1;
    a.k_cache = k.data();
    a.v_cache = v.data();
    a.kv_type = type;
    a.block_stride = hd;
    a.scale = 0.0625f;
    paged_attention(a, pool);
    for (int i = 0; i < hd; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << kv_elem_name(type) << " code " << i;
    if (cpu_has_avx2() && cpu_has_avx512_vnni()) {
      std::fill(out.begin(), out.end(), -7.0f);
      kvserve::detail::paged_attention_items_avx2(a, 0, 1);
      std::vector<float> out5(hd, -7.0f);
      PagedAttentionArgs a5 = a;
      a5.out = out5.data();
      kvserve::detail::paged_attention_items_avx512(a5, 0, 1);
      EXPECT_EQ(out, want);
      EXPECT_EQ(out5, want);
    }
  }
}

// The quantized caches through the AVX2 and the AVX-512 workers: the same bits, item by item and
// partition by partition.
TEST(PagedAttention, QuantizedCachesZmmWorkerIsBitIdenticalToAvx2) {
  if (!cpu_has_avx2() || !cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX512 on this CPU (or turned off)";
  std::mt19937 rng(24);
  for (KVElemType type : {KVElemType::Q8_0, KVElemType::Q4_0, KVElemType::FP8_E4M3, KVElemType::FP8_E5M2}) {
    std::vector<Shape> shapes = {Shape{4, 1, 64}, Shape{9, 3, 64}, Shape{8, 2, 128}, Shape{3, 1, 128}, Shape{4, 2, 32},
                                 Shape{2, 2, 96}, Shape{18, 1, 96}, Shape{16, 1, 576}};
    if (!kv_elem_is_block_type(type)) shapes.insert(shapes.end(), {Shape{6, 2, 40}, Shape{4, 2, 12}, Shape{2, 1, 24}});
    for (const Shape shape : shapes) {
      for (auto [pos0, n, bs] : {std::tuple<int64_t, int, int>{0, 5, 16}, {300, 1, 16}, {250, 6, 16}, {201, 1, 8}}) {
        const Case c{shape, bs, pos0, n};
        Fixture f = make_fixture(c, rng);
        const EncodedCaches e = encode_caches(f, type, shape.head_dim);
        std::vector<float> a2(f.q.size(), -7.0f), a5(f.q.size(), -7.0f);
        PagedAttentionArgs args2 = make_args(c, f, a2), args5 = make_args(c, f, a5);
        for (PagedAttentionArgs* a : {&args2, &args5}) {
          a->kv_type = type;
          a->k_cache = e.k.data();
          a->v_cache = e.v.data();
        }
        const int64_t n_items = int64_t{n} * shape.n_kv_heads;
        kvserve::detail::paged_attention_items_avx2(args2, 0, n_items);
        kvserve::detail::paged_attention_items_avx512(args5, 0, n_items);
        ASSERT_EQ(a2, a5) << kv_elem_name(type) << " hd " << shape.head_dim << " pos0 " << pos0 << " bs " << bs;
        const int group = shape.n_heads / shape.n_kv_heads;
        const int64_t n_parts = kvserve::detail::partition_count(args2, n - 1);
        std::vector<float> p2(static_cast<size_t>(n_parts * group * (shape.head_dim + 2))), p5(p2.size());
        kvserve::detail::paged_attention_partition_avx2(args2, n - 1, 0, 0, n_parts, p2.data());
        kvserve::detail::paged_attention_partition_avx512(args5, n - 1, 0, 0, n_parts, p5.data());
        ASSERT_EQ(p2, p5) << kv_elem_name(type) << " partitions: hd " << shape.head_dim << " pos0 " << pos0
                          << " bs " << bs;
      }
    }
  }
}

// The prefetch stream's steps name each line of each run once, in order, per_slot a step (fewer at the end),
// across run boundaries and for runs of any length (a power of two or not), and stop at its end.
TEST(PagedAttention, LineStreamStepsThroughEveryLineOfItsRunsInOrder) {
  std::vector<char> memory(64 * 1024);
  for (int64_t run_lines : {1, 3, 32, 96}) {
    for (int64_t per_slot : {1, 2, 5, 7, 200}) {
      std::vector<const char*> runs;
      for (int64_t r = 0; r < 4; ++r) runs.push_back(memory.data() + (3 - r) * run_lines * 64 + 8 * r);
      const int64_t n_lines = 4 * run_lines;
      detail::LinePrefetchStream s{runs.data(), run_lines, n_lines, 0, per_slot, 0, 0};
      std::vector<const char*> asked;
      int steps = 0;
      for (; steps < 1000 && s.next < n_lines; ++steps) {
        const size_t before = asked.size();
        detail::step_line_stream(s, [&](const char* line) { asked.push_back(line); });
        const auto done = static_cast<int64_t>(before);
        ASSERT_EQ(static_cast<int64_t>(asked.size()) - done, std::min(per_slot, n_lines - done));
      }
      ASSERT_EQ(steps, (n_lines + per_slot - 1) / per_slot) << run_lines << " " << per_slot;
      ASSERT_EQ(static_cast<int64_t>(asked.size()), n_lines);
      for (int64_t i = 0; i < n_lines; ++i)
        ASSERT_EQ(asked[static_cast<size_t>(i)], runs[static_cast<size_t>(i / run_lines)] + i % run_lines * 64)
            << "line " << i << ", runs of " << run_lines << ", " << per_slot << " a step";
      detail::step_line_stream(s, [&](const char*) { ADD_FAILURE() << "a line past the stream's end"; });
    }
  }
  // No stream: nothing asked.
  detail::LinePrefetchStream none{nullptr, 0, 0, 0, 4, 0, 0};
  detail::step_line_stream(none, [&](const char*) { ADD_FAILURE() << "a line of an empty stream"; });
}

// Contexts of several partitions in blocks of 2-4 slots and 8-16-wide heads, half precision: a block's
// rows of one KV head span less than a cache line here, where the next partition's K rows are asked for
// during the values pass (LinePrefetchStream) in whole lines.
TEST(PagedAttention, TinyBlocksOfTinyHeadsOverSeveralPartitions) {
  std::mt19937 rng(4321);
  ThreadPool pool(2);
  for (KVElemType type : {KVElemType::F16, KVElemType::BF16}) {
    for (const Shape shape : {Shape{4, 2, 8}, Shape{2, 2, 16}, Shape{3, 1, 8}}) {
      for (int bs : {2, 4}) {
        for (auto [pos0, n] : {std::pair<int64_t, int>{300, 1}, {250, 6}}) {
          const Case c{shape, bs, pos0, n};
          Fixture f = make_fixture(c, rng);
          const EncodedCaches h = encode_caches(f, type, shape.head_dim);
          std::vector<float> out(f.q.size(), -7.0f);
          PagedAttentionArgs a = make_args(c, f, out);
          a.k_cache = h.k.data();
          a.v_cache = h.v.data();
          a.kv_type = type;
          paged_attention(a, pool);
          expect_close(out, dense_attention(c, f, a.scale), type == KVElemType::F16 ? "f16" : "bf16", c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(PagedAttention, BatchOfSequencesEqualsOneCallEach) {
  // A batched step: decode tokens and prefill chunks of different sequences, shapes shared, caches not.
  std::mt19937 rng(77);
  ThreadPool pool(2);
  const Shape shape{8, 2, 32};
  const Case cases[] = {{shape, 16, 40, 1}, {shape, 16, 0, 13}, {shape, 16, 5, 0}, {shape, 16, 99, 1},
                        {shape, 16, 17, 4}, {shape, 16, 0, 1}};
  std::vector<Fixture> fixtures;
  for (const Case& c : cases) fixtures.push_back(make_fixture(c, rng));
  std::vector<std::vector<float>> single(std::size(cases)), batched(std::size(cases));
  std::vector<PagedAttentionArgs> args;
  for (size_t i = 0; i < std::size(cases); ++i) {
    single[i].assign(fixtures[i].q.size(), -7.0f);
    batched[i].assign(fixtures[i].q.size(), -9.0f);
    paged_attention(make_args(cases[i], fixtures[i], single[i]), pool);
    args.push_back(make_args(cases[i], fixtures[i], batched[i]));
  }
  for (bool simd : {true, false}) {
    if (!simd) setenv("KVSERVE_NO_SIMD", "1", 1);
    paged_attention_batch(args, pool);
    if (!simd) unsetenv("KVSERVE_NO_SIMD");
    for (size_t i = 0; i < std::size(cases); ++i) {
      if (simd) {
        EXPECT_EQ(batched[i], single[i]) << "sequence " << i;  // same worker, same order: bit-identical
      } else {
        const auto want = dense_attention(cases[i], fixtures[i], args[i].scale);
        expect_close(batched[i], want, "batch scalar", cases[i]);
      }
    }
  }
}

TEST(PagedAttention, EachTokenOfAChunkIsBitIdenticalToItAlone) {
  // The AVX2 worker shares K/V reads among up to 4 tokens of a chunk; a token's output must not depend on
  // that grouping (nor on thread ranges, nor the cache's element type), so prefill and decode of the same
  // position agree exactly.
  std::mt19937 rng(4);
  for (KVElemType type : {KVElemType::F32, KVElemType::Q8_0, KVElemType::Q4_0, KVElemType::FP8_E4M3}) {
    for (const Shape shape : {Shape{8, 2, 32}, Shape{9, 3, 64}, Shape{4, 4, 16}, Shape{12, 1, 64}, Shape{16, 1, 576}}) {
      if (kv_elem_is_block_type(type) && shape.head_dim % kKVQuantGroup != 0) continue;
      for (auto [pos0, n, window] : {std::tuple<int64_t, int, int64_t>{21, 11, 0}, {250, 9, 0}, {250, 9, 40}}) {
        Case c{shape, 16, pos0, n};  // 21..31 cross a block boundary mid-chunk, 250..258 a partition's
        c.window = window;
        Fixture f = make_fixture(c, rng);
        const EncodedCaches e = type == KVElemType::F32 ? EncodedCaches{} : encode_caches(f, type, shape.head_dim);
        auto args = [&](std::vector<float>& out) {
          PagedAttentionArgs a = make_args(c, f, out);
          if (type != KVElemType::F32) {
            a.k_cache = e.k.data();
            a.v_cache = e.v.data();
            a.kv_type = type;
          }
          return a;
        };
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> chunk(f.q.size(), -7.0f);
          paged_attention(args(chunk), pool);
          const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
          for (int t = 0; t < c.n_tokens; ++t) {
            std::vector<float> alone(row, -9.0f);
            PagedAttentionArgs a = args(alone);
            a.q = f.q.data() + t * row;
            a.n_tokens = 1;
            a.pos0 = c.pos0 + t;
            paged_attention(a, pool);
            for (int64_t i = 0; i < row; ++i)
              ASSERT_EQ(chunk[t * row + i], alone[i]) << kv_elem_name(type) << " heads " << shape.n_heads << " pos0 "
                                                      << pos0 << " window " << window << " token " << t
                                                      << " threads " << threads;
          }
        }
      }
    }
  }
}

TEST(PagedAttention, ContextPartitionsSpreadOverThreadsGiveTheSameBits) {
  // With fewer (token, KV head) items than threads can share (MQA, or 3 KV heads on 2 threads), each
  // token's context partitions (128 positions) are computed on different threads and folded after. The
  // result must be the one thread's (no split), the same inside a large batch (no split either), and
  // match dense attention.
  std::mt19937 rng(11);
  for (const Shape shape : {Shape{4, 1, 64}, Shape{9, 3, 64}, Shape{4, 2, 12}}) {
    for (auto [pos0, n] : {std::pair<int64_t, int>{700, 1}, {300, 2}, {127, 1}, {128, 1}, {250, 3}}) {
      const Case c{shape, 16, pos0, n};
      const Fixture f = make_fixture(c, rng);
      std::vector<float> one(f.q.size(), -7.0f);
      {
        ThreadPool pool(1);
        paged_attention(make_args(c, f, one), pool);
      }
      const PagedAttentionArgs probe = make_args(c, f, one);
      expect_close(one, dense_attention(c, f, probe.scale), "one thread", c);
      for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> split(f.q.size(), -9.0f);
        paged_attention(make_args(c, f, split), pool);
        ASSERT_EQ(split, one) << "heads " << shape.n_heads << "/" << shape.n_kv_heads << " pos0 " << pos0 << " threads "
                              << threads;
      }
      ThreadPool pool(2);
      std::vector<std::vector<float>> outs(8, std::vector<float>(f.q.size(), -5.0f));
      std::vector<PagedAttentionArgs> batch;
      for (auto& o : outs) batch.push_back(make_args(c, f, o));
      paged_attention_batch(batch, pool);
      for (const auto& o : outs) ASSERT_EQ(o, one) << "in a batch: heads " << shape.n_heads << " pos0 " << pos0;
    }
  }
}

TEST(PagedAttention, DecodeBatchBySequenceGivesEachSequenceItsOwnBits) {
  // A decode step of many sequences goes sequence by sequence, each thread streaming its next sequence's
  // K/V in (detail::LinePrefetchStream): every output must be the bits of that sequence alone, for any
  // thread count, cache type and head shape (head sizes that are not a multiple of 8 never prefetch).
  std::mt19937 rng(21);
  for (const Shape shape : {Shape{32, 8, 64}, Shape{9, 3, 64}, Shape{8, 2, 128}, Shape{4, 2, 12}}) {
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      const int n_seqs = 4 * threads + 1;
      std::vector<Case> cases;
      std::vector<Fixture> fixtures;
      for (int i = 0; i < n_seqs; ++i) {
        const int64_t pos0s[] = {0, 15, 16, 127, 128, 200, 31, 64, 300};
        cases.push_back({shape, 16, pos0s[i % std::size(pos0s)] + i, 1});
        fixtures.push_back(make_fixture(cases.back(), rng));
      }
      for (KVElemType type : {KVElemType::F32, KVElemType::F16}) {
        std::vector<EncodedCaches> halves;
        if (type != KVElemType::F32)
          for (Fixture& f : fixtures) halves.push_back(encode_caches(f, type, shape.head_dim));
        const auto args_of = [&](int i, std::vector<float>& out) {
          PagedAttentionArgs a = make_args(cases[i], fixtures[i], out);
          if (type != KVElemType::F32) {
            a.k_cache = halves[i].k.data();
            a.v_cache = halves[i].v.data();
            a.kv_type = type;
          }
          return a;
        };
        std::vector<std::vector<float>> alone(n_seqs), batched(n_seqs);
        std::vector<PagedAttentionArgs> batch;
        for (int i = 0; i < n_seqs; ++i) {
          alone[i].assign(fixtures[i].q.size(), -7.0f);
          batched[i].assign(fixtures[i].q.size(), -9.0f);
          paged_attention(args_of(i, alone[i]), pool);
          batch.push_back(args_of(i, batched[i]));
        }
        ASSERT_TRUE(detail::attends_by_sequence(batch, threads));
        ASSERT_FALSE(detail::attends_by_sequence(std::span(batch).first(4 * threads - 1), threads));
        paged_attention_batch(batch, pool);
        for (int i = 0; i < n_seqs; ++i)
          ASSERT_EQ(batched[i], alone[i]) << "heads " << shape.n_heads << "/" << shape.n_kv_heads << " dim "
                                          << shape.head_dim << " threads " << threads << " sequence " << i;
        if (type == KVElemType::F32)
          expect_close(batched[1], dense_attention(cases[1], fixtures[1], batch[1].scale), "batch", cases[1]);
        EXPECT_EQ(detail::t_next_sequence.n_lines, 0) << "the caller's stream is cleared";
      }
    }
  }
  // A chunk of several tokens in the batch keeps the item path.
  std::vector<float> out(64);
  Case c{Shape{8, 2, 32}, 16, 10, 2};
  Fixture f = make_fixture(c, rng);
  std::vector<PagedAttentionArgs> mixed(8, make_args(c, f, out));
  EXPECT_FALSE(detail::attends_by_sequence(mixed, 2));
}

TEST(PagedAttention, Avx2SoftmaxExpIsWithinAMillionthOfStdExp) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f * static_cast<float>(i) / 200000.0f;
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(kvserve::detail::exp_nonpositive_avx2(x) - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(kvserve::detail::exp_nonpositive_avx2(0.0f), 1.0f);
  EXPECT_LT(kvserve::detail::exp_nonpositive_avx2(-1000.0f), 1e-37f);
  if (cpu_has_avx512_vnni()) {  // the 512-bit build of the worker shares the exponential: the same bits
    for (float x = 0.0f; x > -100.0f; x -= 0.173f)
      ASSERT_EQ(kvserve::detail::exp_nonpositive_avx512(x), kvserve::detail::exp_nonpositive_avx2(x)) << x;
  }
}

namespace {

// One score in the AVX2 worker's documented order, scalar: lane l of two FMA chains (16-wide steps, an
// 8-wide tail into the first), the chains added lane by lane, then lanes (l + l+4), (.0 + .2), (.1 + .3),
// and those two added; then times scale.
float ordered_score(const float* q, const float* k, int hd, float scale) {
  float s0[8] = {}, s1[8] = {};
  int d = 0;
  for (; d + 16 <= hd; d += 16)
    for (int l = 0; l < 8; ++l) {
      s0[l] = std::fma(q[d + l], k[d + l], s0[l]);
      s1[l] = std::fma(q[d + 8 + l], k[d + 8 + l], s1[l]);
    }
  if (d < hd)
    for (int l = 0; l < 8; ++l) s0[l] = std::fma(q[d + l], k[d + l], s0[l]);
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = s0[l] + s1[l];
  float x[4];
  for (int l = 0; l < 4; ++l) x[l] = v[l] + v[l + 4];
  const float y0 = x[0] + x[2], y1 = x[1] + x[3];
  return (y0 + y1) * scale;
}

}  // namespace

// The scores are summed in exactly one order whatever the cache type, head count or slot count: the
// 8-slot reduction and the in-register widening must give the bits of the scalar order above.
TEST(PagedAttention, Avx2ScoresFollowTheDocumentedSummationOrderBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const KVElemType type : {KVElemType::F32, KVElemType::F16, KVElemType::BF16}) {
    for (const int hd : {8, 16, 24, 64, 72, 128}) {
      for (const int n_heads : {1, 2, 3, 4, 5, 8}) {
        for (const int n : {1, 5, 8, 13, 16, 32}) {
          const int64_t row0 = 3;
          std::vector<float> q(static_cast<size_t>(n_heads) * hd);
          for (float& x : q) x = nd(rng);
          const size_t k_elems = static_cast<size_t>(row0 + n) * hd;
          std::vector<float> k_f32(k_elems);
          std::vector<uint16_t> k_half(k_elems);
          for (size_t i = 0; i < k_elems; ++i) {
            const float x = nd(rng) * 3.0f;
            k_half[i] = type == KVElemType::BF16 ? fp32_to_bf16(x) : fp32_to_fp16(x);
            k_f32[i] = type == KVElemType::F32 ? x
                       : type == KVElemType::BF16 ? bf16_to_fp32(k_half[i])
                                                  : fp16_to_fp32(k_half[i]);
          }
          const void* cache = type == KVElemType::F32 ? static_cast<const void*>(k_f32.data()) : k_half.data();
          const int stride = n + 3;
          std::vector<float> got(static_cast<size_t>(n_heads) * stride, -7.0f);
          const float scale = 0.125f + 0.01f * static_cast<float>(hd);
          kvserve::detail::attention_block_scores_avx2(q.data(), n_heads, hd, cache, type, row0, n, scale, got.data(),
                                                       stride);
          if (cpu_has_avx512_vnni()) {  // the 512-bit worker's dot chains give the same bits
            std::vector<float> zmm(got.size(), -7.0f);
            kvserve::detail::attention_block_scores_avx512(q.data(), n_heads, hd, cache, type, row0, n, scale,
                                                           zmm.data(), stride);
            ASSERT_EQ(zmm, got) << "avx512 scores: type " << static_cast<int>(type) << " hd " << hd << " heads "
                                << n_heads << " n " << n;
          }
          for (int h = 0; h < n_heads; ++h) {
            for (int s = 0; s < stride; ++s) {
              const float g = got[static_cast<size_t>(h) * stride + s];
              if (s >= n) {
                ASSERT_EQ(g, -7.0f) << "wrote past the slots";
                continue;
              }
              const float want = ordered_score(q.data() + static_cast<size_t>(h) * hd,
                                               k_f32.data() + static_cast<size_t>(row0 + s) * hd, hd, scale);
              ASSERT_EQ(g, want) << "type " << static_cast<int>(type) << " hd " << hd << " heads " << n_heads
                                 << " n " << n << " head " << h << " slot " << s;
            }
          }
        }
      }
    }
  }
}

// The 512-bit build of the worker (paged_attention_zmm_avx512vnni.cpp) against the AVX2 build: the same
// bits for every entry point, cache type, head grouping, head size (including sizes that leave an 8-wide
// tail) and context length (several partitions, tokens of a chunk in groups).
// The single-token region walks several KV heads per call, block by block with the heads inside: each
// head's partials must be those of one call per head, and nothing else in the buffer may change. Shapes
// with up to 4 query heads per KV head and hd % 8 == 0 take the multi-head walk (8 KV heads: two calls
// of 4); the others fall back to one head at a time.
TEST(PagedAttention, PartitionHeadsIsBitIdenticalToOneHeadAtATime) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or turned off)";
  struct Worker {
    const char* name;
    decltype(&kvserve::detail::paged_attention_partition_avx2) partition;
    decltype(&kvserve::detail::paged_attention_partition_heads_avx2) partition_heads;
  };
  std::vector<Worker> workers{
      {"avx2", kvserve::detail::paged_attention_partition_avx2, kvserve::detail::paged_attention_partition_heads_avx2}};
  if (cpu_has_avx512_vnni())
    workers.push_back({"avx512", kvserve::detail::paged_attention_partition_avx512,
                       kvserve::detail::paged_attention_partition_heads_avx512});
  std::mt19937 rng(29);
  for (const KVElemType type : {KVElemType::F32, KVElemType::F16, KVElemType::BF16}) {
    for (const Shape shape : {Shape{9, 3, 64}, Shape{8, 2, 128}, Shape{16, 8, 64}, Shape{12, 3, 64}, Shape{4, 4, 64},
                              Shape{6, 3, 40}, Shape{24, 3, 64}, Shape{6, 3, 12}}) {
      for (auto [pos0, bs] : {std::pair<int64_t, int>{300, 16}, {201, 8}, {170, 32}, {5, 16}}) {
        const Case c{shape, bs, pos0, 1};
        Fixture f = make_fixture(c, rng);
        const EncodedCaches half = encode_caches(f, type == KVElemType::BF16 ? KVElemType::BF16 : KVElemType::F16, shape.head_dim);
        std::vector<float> out(f.q.size());
        PagedAttentionArgs a = make_args(c, f, out);
        a.kv_type = type;
        if (type != KVElemType::F32) {
          a.k_cache = half.k.data();
          a.v_cache = half.v.data();
        }
        const int group = shape.n_heads / shape.n_kv_heads;
        const int64_t n_parts = kvserve::detail::partition_count(a, 0);
        const size_t stride = static_cast<size_t>(n_parts * group * (shape.head_dim + 2));
        for (const Worker& w : workers) {
          for (int h0 : {0, 1}) {
            for (int64_t p0 : {int64_t{0}, int64_t{1}}) {
              if (h0 >= shape.n_kv_heads || p0 >= n_parts) continue;
              const int n_kvh = shape.n_kv_heads - h0;
              std::vector<float> one(stride * shape.n_kv_heads, -7.0f), many(one);
              for (int h = h0; h < shape.n_kv_heads; ++h)
                w.partition(a, 0, h, p0, n_parts, one.data() + static_cast<size_t>(h) * stride);
              w.partition_heads(a, 0, h0, n_kvh, p0, n_parts, many.data() + static_cast<size_t>(h0) * stride, stride, nullptr);
              ASSERT_EQ(one, many) << w.name << " type " << static_cast<int>(type) << " heads " << shape.n_heads << "/"
                                   << shape.n_kv_heads << " hd " << shape.head_dim << " pos0 " << pos0 << " bs " << bs
                                   << " from head " << h0 << " partition " << p0;
            }
          }
        }
      }
    }
  }
}

// The batch-1 decode step hands each thread a range of (partition, KV head) units, cut anywhere:
// attend_decode_units must write exactly those units' partials, each as one call per head gives it.
TEST(PagedAttention, DecodeUnitsWriteExactlyTheirUnits) {
  const kvserve::detail::SimdWorker* w = kvserve::detail::simd_worker_in_use();
  if (w == nullptr) GTEST_SKIP() << "no AVX2 on this CPU (or turned off)";
  std::mt19937 rng(31);
  for (const Shape shape : {Shape{9, 3, 64}, Shape{16, 8, 64}, Shape{8, 2, 128}, Shape{6, 3, 40}}) {
    for (auto [pos0, bs] : {std::pair<int64_t, int>{300, 16}, {201, 8}, {5, 16}}) {
      const Case c{shape, bs, pos0, 1};
      Fixture f = make_fixture(c, rng);
      const EncodedCaches half = encode_caches(f, KVElemType::F16, shape.head_dim);
      std::vector<float> out(f.q.size());
      PagedAttentionArgs a = make_args(c, f, out);
      a.kv_type = KVElemType::F16;
      a.k_cache = half.k.data();
      a.v_cache = half.v.data();
      const int64_t n_parts = kvserve::detail::partition_count(a, 0);
      const int64_t n_units = n_parts * shape.n_kv_heads;
      const size_t unit = kvserve::detail::partition_partial_floats(a);
      std::vector<float> want(static_cast<size_t>(n_units) * unit, -7.0f);
      for (int h = 0; h < shape.n_kv_heads; ++h)
        w->partition(a, 0, h, 0, n_parts, want.data() + static_cast<size_t>(h * n_parts) * unit);
      for (int64_t first = 0; first <= n_units; ++first) {
        for (int64_t last = first; last <= n_units; ++last) {
          std::vector<float> got(want.size(), -7.0f);
          kvserve::detail::attend_decode_units(*w, a, first, last, got.data());
          for (int64_t u = 0; u < n_units; ++u) {
            // Unit u = (partition u / n_kv_heads, head u % n_kv_heads), stored head-major.
            const size_t at = static_cast<size_t>((u % shape.n_kv_heads) * n_parts + u / shape.n_kv_heads) * unit;
            const bool mine = u >= first && u < last;
            for (size_t i = 0; i < unit; ++i)
              ASSERT_EQ(got[at + i], mine ? want[at + i] : -7.0f)
                  << "heads " << shape.n_heads << "/" << shape.n_kv_heads << " pos0 " << pos0 << " bs " << bs
                  << " units [" << first << ", " << last << ") unit " << u << " float " << i;
          }
        }
      }
    }
  }
}

TEST(PagedAttention, ZmmWorkerIsBitIdenticalToAvx2) {
  if (!cpu_has_avx2() || !cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX512 on this CPU (or turned off)";
  std::mt19937 rng(23);
  for (const KVElemType type : {KVElemType::F32, KVElemType::F16, KVElemType::BF16}) {
    // Head sizes 64 and 128 have their own 512-bit score loops (q held in registers) for groups of 1-4 heads.
    // Groups past 4 sum the V rows many heads a pass (12 in the AVX2 build, 16 in the zmm one): 13 and 20 heads
    // split differently in the two, and 16 x 576 is MLA's latent row.
    for (const Shape shape : {Shape{4, 1, 64}, Shape{9, 3, 64}, Shape{5, 1, 64}, Shape{6, 1, 64}, Shape{8, 2, 128},
                              Shape{3, 1, 128}, Shape{2, 2, 128}, Shape{13, 1, 72}, Shape{20, 1, 64}, Shape{16, 1, 576},
                              Shape{4, 2, 24}, Shape{2, 2, 72}, Shape{4, 2, 12}}) {
      // Block sizes 8 and 32 give the 16-slot score loop a half-filled and a two-pass block.
      for (auto [pos0, n, bs] : {std::tuple<int64_t, int, int>{0, 5, 16}, {300, 1, 16}, {250, 6, 16}, {201, 1, 8},
                                 {170, 3, 32}}) {
        const Case c{shape, bs, pos0, n};
        Fixture f = make_fixture(c, rng);
        const EncodedCaches half = encode_caches(f, type == KVElemType::BF16 ? KVElemType::BF16 : KVElemType::F16, shape.head_dim);
        std::vector<float> a2(f.q.size(), -7.0f), a5(f.q.size(), -7.0f);
        PagedAttentionArgs args2 = make_args(c, f, a2), args5 = make_args(c, f, a5);
        for (PagedAttentionArgs* a : {&args2, &args5}) {
          a->kv_type = type;
          if (type != KVElemType::F32) {
            a->k_cache = half.k.data();
            a->v_cache = half.v.data();
          }
        }
        const std::string where = "type " + std::to_string(static_cast<int>(type)) + " heads " +
                                  std::to_string(shape.n_heads) + "/" + std::to_string(shape.n_kv_heads) + " hd " +
                                  std::to_string(shape.head_dim) + " pos0 " + std::to_string(pos0) + " bs " + std::to_string(bs);
        const int64_t n_items = int64_t{n} * shape.n_kv_heads;
        kvserve::detail::paged_attention_items_avx2(args2, 0, n_items);
        kvserve::detail::paged_attention_items_avx512(args5, 0, n_items);
        ASSERT_EQ(a2, a5) << "items: " << where;
        // The split path: one partition at a time, then the merge.
        const int group = shape.n_heads / shape.n_kv_heads;
        const int64_t t = n - 1;
        const int64_t n_parts = kvserve::detail::partition_count(args2, t);
        std::vector<float> p2(static_cast<size_t>(n_parts * group * (shape.head_dim + 2))), p5(p2.size());
        for (int64_t part = 0; part < n_parts; ++part) {
          const size_t off = static_cast<size_t>(part * group * (shape.head_dim + 2));
          kvserve::detail::paged_attention_partition_avx2(args2, t, 0, part, part + 1, p2.data() + off);
          kvserve::detail::paged_attention_partition_avx512(args5, t, 0, part, part + 1, p5.data() + off);
        }
        ASSERT_EQ(p2, p5) << "partitions: " << where;
        kvserve::detail::paged_attention_merge_avx2(args2, t, 0, p2.data());
        kvserve::detail::paged_attention_merge_avx512(args5, t, 0, p5.data());
        ASSERT_EQ(a2, a5) << "merge: " << where;
      }
    }
  }
}
