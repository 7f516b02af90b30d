// Generator on the paged KV cache: greedy ids identical to llama2.c's for several block sizes, prefix
// reuse across generate() calls, clear errors for a pool too small, and no block left held after a call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/paged_kv_cache.h"
#include "kv/kv_layout.h"
#include "stories_model.h"
#include "test_checks.h"
#include "model/loaders.h"
#include "model/model.h"

using namespace kvserve;
using nlohmann::json;

namespace {

const std::string kShared = KVSERVE_SHARED_DIR;

const Model& stories() { return test::stories260k(); }

std::vector<json> greedy_goldens() { return test::stories_greedy_goldens(); }

// Golden ids that a correct engine must reproduce: all of them, or those before a step whose
// reference top1-top2 margin is ~1e-4 (there float summation order may legitimately flip the choice).
size_t must_match(const json& g) {
  const size_t n_prompt = g["prompt_ids"].size();
  const size_t n = g["generated_ids"].size();
  const float margin = g["min_top1_top2_margin"];
  const size_t pos = g["min_margin_position"];
  return margin < 1e-3f ? std::min(n, pos - n_prompt) : n;
}

using test::one_thread;

using test::greedy;

uint64_t bytes_per_block(int block_size) {
  const ModelConfig& c = stories().config;
  return KVLayout::mha(c.n_layers, c.n_kv_heads, c.head_dim, KVCacheDType::F32, block_size).bytes_per_block();
}

using test::expect_all_blocks_free_or_cached;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no Error thrown)";
}

}  // namespace

// Block size 1 (a block per token), 16 (the default) and 17 (odd; the 30-token prompt spans two blocks),
// with prefill chunks that end mid-block so chunk and block boundaries cross.
TEST(GeneratorPaged, GreedyIdsMatchLlama2cForSeveralBlockSizes) {
  const std::vector<json> goldens = greedy_goldens();
  ASSERT_FALSE(goldens.empty());
  bool crossed_a_block_boundary = false;
  for (const int block_size : {1, 16, 17}) {
    for (const int prefill_chunk : {512, 7}) {
      GeneratorOptions o;
      o.block_size = block_size;
      o.prefill_chunk = prefill_chunk;
      o.kv_cache_memory = 4.0 * 1024 * 1024;
      Generator gen(stories(), o, one_thread());
      EXPECT_EQ(gen.kv_cache().block_size, block_size);
      for (const json& g : goldens) {
        const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
        const auto want = g["generated_ids"].get<std::vector<int32_t>>();
        if (static_cast<int>(prompt.size()) > block_size) crossed_a_block_boundary = true;
        const GenerationResult r = gen.generate(prompt, greedy(static_cast<int>(want.size())));
        ASSERT_EQ(r.generated_ids.size(), want.size());
        for (size_t i = 0; i < must_match(g); ++i)
          ASSERT_EQ(r.generated_ids[i], want[i]) << "block size " << block_size << ", chunk " << prefill_chunk
                                                 << ", prompt '" << g["prompt"].get<std::string>() << "' step " << i;
        expect_all_blocks_free_or_cached(gen);
      }
    }
  }
  EXPECT_TRUE(crossed_a_block_boundary);
}

// Two prompts sharing a 20-odd token prefix: the same greedy tokens with and without the prefix cache,
// and with it the second call starts from the first prompt's full blocks.
TEST(GeneratorPaged, SharedPrefixReusesBlocksAndKeepsTokens) {
  const Tokenizer& tok = *stories().tokenizer;
  const std::vector<int32_t> a =
      tok.encode("Once upon a time, there was a little boy who loved to play with his toy car. One day,", true, false);
  const std::vector<int32_t> b =
      tok.encode("Once upon a time, there was a little boy who loved to play with his red ball. He", true, false);
  size_t common = 0;
  while (common < std::min(a.size(), b.size()) && a[common] == b[common]) ++common;
  ASSERT_GE(common, 16u);
  ASSERT_LT(common, b.size());

  for (const int block_size : {4, 8, 16}) {
    GeneratorOptions cached_opts;
    cached_opts.block_size = block_size;
    cached_opts.kv_cache_memory = 4.0 * 1024 * 1024;
    GeneratorOptions plain_opts = cached_opts;
    plain_opts.enable_prefix_caching = false;
    Generator cached(stories(), cached_opts, one_thread());
    Generator plain(stories(), plain_opts, one_thread());
    const size_t bs = static_cast<size_t>(block_size);

    const GenerationResult ca = cached.generate(a, greedy(48));
    expect_all_blocks_free_or_cached(cached);
    const GenerationResult cb = cached.generate(b, greedy(48));
    expect_all_blocks_free_or_cached(cached);
    const GenerationResult ca2 = cached.generate(a, greedy(48));
    expect_all_blocks_free_or_cached(cached);
    const GenerationResult pa = plain.generate(a, greedy(48));
    const GenerationResult pb = plain.generate(b, greedy(48));
    expect_all_blocks_free_or_cached(plain);

    EXPECT_EQ(ca.cached_tokens, 0);
    EXPECT_EQ(cb.cached_tokens, static_cast<int>(std::min(common, b.size() - 1) / bs * bs)) << "block size " << bs;
    EXPECT_EQ(ca2.cached_tokens, static_cast<int>((a.size() - 1) / bs * bs)) << "block size " << bs;
    EXPECT_EQ(pa.cached_tokens, 0);
    EXPECT_EQ(pb.cached_tokens, 0);
    EXPECT_EQ(ca.generated_ids, pa.generated_ids) << "block size " << bs;
    EXPECT_EQ(cb.generated_ids, pb.generated_ids) << "block size " << bs;
    EXPECT_EQ(ca2.generated_ids, pa.generated_ids) << "block size " << bs;
    EXPECT_EQ(cb.text, pb.text);

    const PrefixCacheStats st = cached.kv_cache_manager().stats();
    EXPECT_EQ(st.queries, 3u);
    EXPECT_EQ(st.hit_tokens, static_cast<uint64_t>(cb.cached_tokens + ca2.cached_tokens));
  }
}

TEST(GeneratorPaged, PoolHoldingNoBlockIsAnErrorNamingTheBudget) {
  GeneratorOptions o;
  o.block_size = 16;
  o.kv_cache_memory = 1000;
  const std::string msg = error_of([&] { Generator g(stories(), o, one_thread()); });
  EXPECT_NE(msg.find("1000 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds no block"), std::string::npos) << msg;
}

TEST(GeneratorPaged, PoolTooSmallForPromptPlusMaxTokensIsAnError) {
  GeneratorOptions o;
  o.block_size = 8;
  o.kv_cache_memory = static_cast<double>(bytes_per_block(8) * 4);  // 32 tokens
  Generator gen(stories(), o, one_thread());
  EXPECT_EQ(gen.kv_cache().num_blocks, 4);
  EXPECT_EQ(gen.kv_cache().capacity_tokens(), 32);
  const std::vector<int32_t> prompt = stories().tokenizer->encode("Once upon a time", true, false);

  const std::string msg = error_of([&] { gen.generate(prompt, greedy(64)); });
  EXPECT_NE(msg.find(std::to_string(bytes_per_block(8) * 4) + " bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not fit in the KV cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find("32 tokens"), std::string::npos) << msg;
  expect_all_blocks_free_or_cached(gen);

  // What fits still runs, and gives llama2.c's tokens.
  const std::vector<json> goldens = greedy_goldens();
  const auto it = std::find_if(goldens.begin(), goldens.end(),
                               [](const json& g) { return g["prompt"] == "Once upon a time"; });
  ASSERT_NE(it, goldens.end());
  const auto want = (*it)["generated_ids"].get<std::vector<int32_t>>();
  const int n = 32 - static_cast<int>(prompt.size());
  const GenerationResult r = gen.generate(prompt, greedy(n));
  EXPECT_EQ(r.generated_ids, std::vector<int32_t>(want.begin(), want.begin() + n));
  expect_all_blocks_free_or_cached(gen);

  const std::string tf = error_of([&] { gen.teacher_forced_logits(std::vector<int32_t>(40, 5), 4); });
  EXPECT_NE(tf.find("does not fit in the KV cache"), std::string::npos) << tf;
  expect_all_blocks_free_or_cached(gen);
}

TEST(GeneratorPaged, RequestBeyondTheContextIsAnError) {
  GeneratorOptions o;
  o.max_context = 64;
  o.kv_cache_memory = 4.0 * 1024 * 1024;
  Generator gen(stories(), o, one_thread());
  const std::vector<int32_t> prompt = stories().tokenizer->encode("Once upon a time", true, false);
  const std::string msg = error_of([&] { gen.generate(prompt, greedy(100)); });
  EXPECT_NE(msg.find("exceeds the context of 64 tokens"), std::string::npos) << msg;
  const std::string long_prompt = error_of([&] { gen.generate(std::vector<int32_t>(64, 5), greedy(1)); });
  EXPECT_NE(long_prompt.find("the context holds 64"), std::string::npos) << long_prompt;
  const std::string bad_id = error_of([&] { gen.generate({1, 100000}, greedy(1)); });
  EXPECT_NE(bad_id.find("outside the vocabulary"), std::string::npos) << bad_id;
  expect_all_blocks_free_or_cached(gen);
  // Exactly the context is fine.
  EXPECT_EQ(gen.generate(prompt, greedy(64 - static_cast<int>(prompt.size()))).generated_ids.size(),
            64 - prompt.size());
  expect_all_blocks_free_or_cached(gen);
}

TEST(GeneratorPaged, CancelledAndFailedCallsFreeTheirBlocks) {
  GeneratorOptions o;
  o.block_size = 4;
  o.kv_cache_memory = 4.0 * 1024 * 1024;
  Generator gen(stories(), o, one_thread());
  const std::vector<int32_t> prompt = stories().tokenizer->encode("Lily and Ben", true, false);
  int seen = 0;
  const GenerationResult r = gen.generate(prompt, greedy(100), [&](int32_t, const std::string&) { return ++seen < 10; });
  EXPECT_EQ(r.generated_ids.size(), 10u);
  expect_all_blocks_free_or_cached(gen);
  EXPECT_THROW(gen.generate(prompt, greedy(10), [](int32_t, const std::string&) -> bool { throw Error("boom"); }),
               Error);
  expect_all_blocks_free_or_cached(gen);
  // The blocks the cancelled call filled are cached: the same prompt now starts from them.
  EXPECT_EQ(gen.generate(prompt, greedy(4)).cached_tokens, static_cast<int>((prompt.size() - 1) / 4 * 4));
  expect_all_blocks_free_or_cached(gen);
}

TEST(GeneratorPaged, DefaultBudgetIsCappedAtWhatOneSequenceCanUse) {
  Generator with_cache(stories(), {}, one_thread());
  const int64_t ctx = with_cache.max_context();
  EXPECT_EQ(with_cache.kv_cache().capacity_tokens(), 2 * ((ctx + 15) / 16) * 16);
  GeneratorOptions o;
  o.enable_prefix_caching = false;
  Generator without(stories(), o, one_thread());
  EXPECT_EQ(without.kv_cache().capacity_tokens(), (ctx + 15) / 16 * 16);
  EXPECT_NE(without.kv_cache().summary().find("blocks of 16 tokens"), std::string::npos);
}

TEST(GeneratorKVCacheMemory, ParsesLikeServe) {
  EXPECT_EQ(parse_kv_cache_memory("4096"), 4096.0);
  EXPECT_EQ(parse_kv_cache_memory("512M"), 512.0 * 1024 * 1024);
  EXPECT_EQ(parse_kv_cache_memory("2G"), 2.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_kv_cache_memory("1.5GiB"), 1.5 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_kv_cache_memory("2GB"), 2e9);
  const double ram = static_cast<double>(total_ram_bytes());
  EXPECT_NEAR(parse_kv_cache_memory("0.5"), 0.5 * ram, 2);
  EXPECT_NEAR(parse_kv_cache_memory("25%"), 0.25 * ram, 2);
  for (const char* bad : {"lots", "12X", "", "0", "1", "1.5", "-2G"}) {
    const std::string msg = error_of([&] { parse_kv_cache_memory(bad); });
    EXPECT_NE(msg.find("--kv-cache-memory"), std::string::npos) << bad << ": " << msg;
  }
}

// Quantized KV caches on tiny-gqa (head size 64): llama.cpp's golden sequence teacher-forced, the logits
// within a bound of the f32 cache's at every step (a wrong row, scale, block offset or code moves them by
// whole units), most steps' argmax unchanged, and the bytes a row of 64 takes against f32's 256:
// - int8 (q8_0, 8.5 bits a value): 68 bytes, within 0.2 (0.052 measured; 49 of 49 argmaxes kept);
// - int4 (q4_0, 4.5 bits): 36 bytes, within 1.5 (0.97; 38 of 49: this random-weight model's logits have
//   near ties, its first step's top two 0.15 apart);
// - fp8 E4M3 (no scale: 3 mantissa bits, values under 2^-6 in steps of 2^-9): 64 bytes, within 0.6 (0.30;
//   48 of 49);
// - fp8 E5M2 (2 mantissa bits): 64 bytes, within 1.0 (0.61; 42 of 49).
// Every one of them is stored under a Hadamard rotation (kv_rotation), which q and the output undo.
TEST(GeneratorPaged, QuantizedKVCachesTrackF32Logits) {
  auto gqa = load_model(kShared + "/golden/gguf/models/tiny-gqa.gguf");
  std::ifstream golden(kShared + "/golden/gguf/golden/tiny-gqa.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(golden, line));
  const json g = json::parse(line);
  std::vector<int32_t> ids = g["prompt_ids"].get<std::vector<int32_t>>();
  for (int32_t t : g["generated_ids"].get<std::vector<int32_t>>()) ids.push_back(t);
  const int prompt_len = static_cast<int>(g["prompt_ids"].size());
  auto logits_with = [&](KVCacheDType dtype, uint64_t* block_bytes) {
    GeneratorOptions o;
    o.kv_cache_memory = 4.0 * 1024 * 1024;
    o.kv_cache_dtype = dtype;
    o.max_context = 512;
    Generator gen(*gqa, o, one_thread());
    *block_bytes = gen.kv_cache().bytes_per_block;
    auto l = gen.teacher_forced_logits(ids, prompt_len);
    expect_all_blocks_free_or_cached(gen);
    return l;
  };
  uint64_t b32 = 0;
  const auto ref = logits_with(KVCacheDType::F32, &b32);
  struct Expect {
    KVCacheDType dtype;
    uint64_t row_bytes;
    float max_dlogit;
    int argmax_tenths;
  };
  for (const Expect& e : {Expect{KVCacheDType::INT8, 68, 0.2f, 9}, Expect{KVCacheDType::INT4, 36, 1.5f, 7},
                          Expect{KVCacheDType::FP8_E4M3, 64, 0.6f, 9}, Expect{KVCacheDType::FP8_E5M2, 64, 1.0f, 8}}) {
    const std::string name(kv_dtype_name(e.dtype));
    uint64_t bq = 0;
    const auto q = logits_with(e.dtype, &bq);
    EXPECT_EQ(bq * 256, b32 * e.row_bytes) << name;
    ASSERT_EQ(ref.size(), q.size());
    float worst = 0;
    size_t argmax_same = 0;
    const auto am = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    for (size_t s = 0; s < ref.size(); ++s) {
      for (size_t i = 0; i < ref[s].size(); ++i) worst = std::max(worst, std::abs(ref[s][i] - q[s][i]));
      argmax_same += am(ref[s]) == am(q[s]);
    }
    EXPECT_LT(worst, e.max_dlogit) << name;
    EXPECT_GT(worst, 0.0f) << name;  // the cache really rounded
    EXPECT_GE(argmax_same * 10, ref.size() * static_cast<size_t>(e.argmax_tenths)) << name;
    std::printf("kv %s: max |dlogit| %.4f, argmax the same at %zu of %zu steps\n", name.c_str(), worst, argmax_same,
                ref.size());
  }

  for (KVCacheDType t : {KVCacheDType::INT8, KVCacheDType::INT4}) {
    GeneratorOptions bad;
    bad.kv_cache_memory = 4.0 * 1024 * 1024;
    bad.kv_cache_dtype = t;
    try {
      Generator gen(stories(), bad, one_thread());
      FAIL() << "stories260K's head size 8 was taken for " << kv_dtype_name(t);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kv_dtype_name(t)), std::string::npos) << what;
      EXPECT_NE(what.find("head size is 8"), std::string::npos) << what;
    }
  }
}

// Half-precision KV (serve's default is f16): the cache holds half the bytes per block, and the
// teacher-forced logits stay close to the f32 cache's. Close, not equal: K and V are rounded to 11
// (f16) or 8 (bf16) significant bits; over stories260K's 5 layers that moves logits (range ~20) by
// well under the tolerance below, while a broken conversion (wrong rows, truncation to zero) moves
// them by whole units.
TEST(GeneratorPaged, HalfPrecisionKVCacheTracksF32Logits) {
  const auto goldens = greedy_goldens();
  ASSERT_FALSE(goldens.empty());
  const json& g = goldens.front();
  std::vector<int32_t> ids = g["prompt_ids"].get<std::vector<int32_t>>();
  for (int32_t t : g["generated_ids"].get<std::vector<int32_t>>()) ids.push_back(t);
  const int prompt_len = static_cast<int>(g["prompt_ids"].size());

  auto logits_with = [&](KVCacheDType dtype, uint64_t* block_bytes) {
    GeneratorOptions o;
    o.kv_cache_memory = 4.0 * 1024 * 1024;
    o.block_size = 16;
    o.kv_cache_dtype = dtype;
    Generator gen(stories(), o, one_thread());
    *block_bytes = gen.kv_cache().bytes_per_block;
    auto l = gen.teacher_forced_logits(ids, prompt_len);
    expect_all_blocks_free_or_cached(gen);
    return l;
  };
  uint64_t b32 = 0, b16 = 0, bb16 = 0;
  const auto ref = logits_with(KVCacheDType::F32, &b32);
  const auto f16 = logits_with(KVCacheDType::F16, &b16);
  const auto bf16 = logits_with(KVCacheDType::BF16, &bb16);
  EXPECT_EQ(b16 * 2, b32);
  EXPECT_EQ(bb16 * 2, b32);
  ASSERT_EQ(ref.size(), f16.size());
  ASSERT_EQ(ref.size(), bf16.size());
  float max_f16 = 0, max_bf16 = 0;
  size_t argmax_same_f16 = 0;
  for (size_t s = 0; s < ref.size(); ++s) {
    for (size_t i = 0; i < ref[s].size(); ++i) {
      max_f16 = std::max(max_f16, std::abs(ref[s][i] - f16[s][i]));
      max_bf16 = std::max(max_bf16, std::abs(ref[s][i] - bf16[s][i]));
    }
    const auto am = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    argmax_same_f16 += am(ref[s]) == am(f16[s]);
  }
  EXPECT_LT(max_f16, 0.05f);
  EXPECT_LT(max_bf16, 0.5f);
  EXPECT_GT(max_f16, 0.0f);  // the f16 path really rounded
  EXPECT_GE(argmax_same_f16 * 10, ref.size() * 9);
  std::printf("kv f16: max |dlogit| %.4f, bf16: %.4f over %zu steps\n", max_f16, max_bf16, ref.size());
}
