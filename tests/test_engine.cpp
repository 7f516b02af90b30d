// Engine: continuous batching gives every request exactly the tokens it gets alone (Generator), under
// chunking, mixing and preemption; prefix caching reports hits and isolates salts; n > 1 forks with
// reproducible seeds; aborts and errors; and after every run each block is free or cached.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/grammar_matcher.h"
#include "engine/perplexity.h"
#include "engine/sampler.h"
#include "kv/kv_layout.h"
#include "model/loaders.h"
#include "stories_model.h"
#include "test_checks.h"

using namespace kvserve;

namespace {

const std::string kShared = KVSERVE_SHARED_DIR;

const Model& stories() { return test::stories260k(); }

struct ChoiceResult {
  std::vector<int32_t> ids;
  std::string text;
  std::string finish_reason;
  std::string stop_string;
  int32_t stop_token_id = -1;
  std::vector<TokenInfo> prompt_info;
  int prompt_info_events = 0;  // events that carried it
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  bool finished = false;
};

// Collects every event of every request; events arrive on the engine thread.
class Collector {
 public:
  EngineRequest request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params, int n = 1,
                        std::string salt = {}) {
    EngineRequest r;
    r.id = id;
    r.prompt_ids = std::move(prompt);
    r.params = params;
    r.n = n;
    r.cache_salt = std::move(salt);
    r.on_event = [this, id](const RequestEvent& ev) {
      std::lock_guard lk(mu_);
      ChoiceResult& c = results_[id][ev.index];
      for (const TokenInfo& t : ev.tokens) c.ids.push_back(t.id);
      if (!ev.prompt_tokens_info.empty()) {
        c.prompt_info = ev.prompt_tokens_info;
        ++c.prompt_info_events;
      }
      c.text += ev.text;
      if (ev.finished) {
        c.finished = true;
        c.finish_reason = ev.finish_reason;
        c.stop_string = ev.stop_string;
        c.stop_token_id = ev.stop_token_id;
        c.prompt_tokens = ev.prompt_tokens;
        c.completion_tokens = ev.completion_tokens;
        c.cached_tokens = ev.cached_tokens;
      }
      cv_.notify_all();
    };
    return r;
  }
  ChoiceResult get(const std::string& id, int index = 0) {
    std::lock_guard lk(mu_);
    return results_[id][index];
  }
  // Waits until request `id` choice 0 has at least `n` tokens.
  void wait_tokens(const std::string& id, size_t n) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), [&] { return results_[id][0].ids.size() >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::map<int, ChoiceResult>> results_;
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int32_t> tok(3, 511);
  std::vector<int32_t> p(len);
  p[0] = 1;  // BOS
  for (int i = 1; i < len; ++i) p[i] = tok(rng);
  return p;
}

EngineOptions small_options() {
  EngineOptions o;
  o.kv_cache_memory = 4.0 * 1024 * 1024;
  o.block_size = 16;
  o.max_num_batched_tokens = 48;  // forces prompt chunking and mixed prefill/decode steps
  o.max_num_seqs = 16;
  o.model_id = "stories260K";
  return o;
}

uint64_t bytes_per_block(const Model& m, int block_size) {
  const ModelConfig& c = m.config;
  return KVLayout::mha(c.n_layers, c.n_kv_heads, c.head_dim, KVCacheDType::F32, block_size).bytes_per_block();
}

GenerationResult alone(const std::vector<int32_t>& prompt, const SamplingParams& params,
                       const Model& model = stories()) {
  Generator g(model, {});
  return g.generate(prompt, params);
}

void expect_all_blocks_free_or_cached(Engine& e) {
  e.wait_until_idle();
  EXPECT_EQ(e.check_invariants(), "");
  const EngineStats st = e.stats();
  EXPECT_EQ(st.used_blocks, 0);
  EXPECT_EQ(st.free_blocks + st.cached_blocks, st.num_blocks);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
}

// 8 concurrent greedy requests, each compared token for token with the single-sequence Generator.
void run_batch_against_generator(EngineOptions opts, bool expect_preemption, const Model& model = stories()) {
  std::mt19937 rng(1234);
  SamplingParams params;
  params.max_tokens = 40;
  params.ignore_eos = true;  // full-length outputs exercise more decode steps
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(random_prompt(rng, 5 + 9 * i));

  Engine engine(model, opts);
  Collector col;
  for (int i = 0; i < 8; ++i) engine.add_request(col.request(fmt::format("r{}", i), prompts[i], params));
  expect_all_blocks_free_or_cached(engine);

  for (int i = 0; i < 8; ++i) {
    const GenerationResult want = alone(prompts[i], params, model);
    const ChoiceResult got = col.get(fmt::format("r{}", i));
    EXPECT_TRUE(got.finished);
    EXPECT_EQ(got.ids, want.generated_ids) << "request " << i;
    EXPECT_EQ(got.text, want.text) << "request " << i;
    EXPECT_EQ(got.finish_reason, "length");
    EXPECT_EQ(got.prompt_tokens, static_cast<int>(prompts[i].size()));
    EXPECT_EQ(got.completion_tokens, 40);
  }
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.requests_finished, 8u);
  EXPECT_EQ(st.generation_tokens, 8u * 40u);
  if (expect_preemption)
    EXPECT_GT(st.preemptions, 0u);
  else
    EXPECT_EQ(st.preemptions, 0u);
}

// The same, then again with n-gram drafts of 3 tokens verified in multi-token steps.
void run_batch_plain_and_speculative(const EngineOptions& opts, const Model& model) {
  run_batch_against_generator(opts, false, model);
  EngineOptions spec = opts;
  spec.speculative_tokens = 3;
  spec.ngram = {.max_n = 2, .min_n = 1};
  run_batch_against_generator(spec, false, model);
}

}  // namespace

TEST(Engine, ConcurrentGreedyRequestsMatchGeneratorTokenForToken) {
  run_batch_against_generator(small_options(), false);
}

// `serve`'s engine commits the KV pages of the next blocks while idle (between the requests here, and
// before the first): not a token changes.
TEST(Engine, CommittingKVPagesAheadWhileIdleChangesNoToken) {
  EngineOptions o = small_options();
  o.commit_kv_ahead = true;
  run_batch_against_generator(o, false);
}

// Gemma 3's sliding-window layers (8 positions) in batched steps with chunked prefill: each sequence's
// windows start at its own positions, mid-chunk and mid-block, and match the one-sequence Generator.
TEST(Engine, SlidingWindowModelInBatchesMatchesGeneratorTokenForToken) {
  auto gemma = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gemma3.gguf");
  ASSERT_EQ(gemma->config.sliding_window, 8);
  EngineOptions o = small_options();
  o.model_id = "tiny-gemma3";
  run_batch_against_generator(o, false, *gemma);
}

const Model& tiny_gemma3() {
  static const std::unique_ptr<Model> m =
      load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gemma3.gguf");
  return *m;
}

// The hybrid cache's sliding-window layers read released blocks as the zeroed null block, and every slot
// before a window weighs exactly 0: the logits are the very bits of a cache that keeps every position.
// A random prompt of `n` tokens teacher-forced through `m` on a hybrid cache (prompt chunks of 20, so blocks are
// released between them too) and on a full one: the same bits at every position. Returns the hybrid cache's
// group windows.
std::vector<int64_t> expect_hybrid_cache_gives_full_cache_bits(const Model& m, unsigned seed, int n) {
  std::mt19937 rng(seed);
  const std::vector<int32_t> ids = random_prompt(rng, n);
  GeneratorOptions full_opts;
  full_opts.hybrid_kv_cache = false;
  GeneratorOptions hybrid_opts;
  hybrid_opts.prefill_chunk = 20;
  Generator full(m, full_opts), hybrid(m, hybrid_opts);
  EXPECT_FALSE(full.kv_cache().groups.hybrid());
  EXPECT_TRUE(hybrid.kv_cache().groups.hybrid());
  const auto want = full.teacher_forced_logits(ids, 30);
  const auto got = hybrid.teacher_forced_logits(ids, 30);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "position " << i;
  EXPECT_EQ(hybrid.prefill_logits(ids, 50), full.prefill_logits(ids, 50));
  return hybrid.kv_cache().groups.windows;
}

TEST(Engine, HybridCacheGivesTheBitsOfAFullCache) {
  EXPECT_EQ(expect_hybrid_cache_gives_full_cache_bits(tiny_gemma3(), 5, 90), (std::vector<int64_t>{0, 8, 8, 8, 8, 8}));
}

// Concurrent requests sharing a prefix, on a budget that a full cache would not fit them in: the hybrid
// cache runs them all (with prefix hits through its windowed groups), token for token as a full cache
// computes them alone, and leaves every block free or cached.
TEST(Engine, HybridCacheRunsLongerSequencesInTheSameMemory) {
  const Model& gemma = tiny_gemma3();
  const ModelConfig& c = gemma.config;
  std::mt19937 rng(77);
  const std::vector<int32_t> shared = random_prompt(rng, 70);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    for (int j = 0; j <= 7 * i; ++j) p.push_back(static_cast<int32_t>(3 + (31 * i + 7 * j) % 500));
    prompts.push_back(p);
  }
  SamplingParams params;
  params.max_tokens = 40;
  params.ignore_eos = true;

  EngineOptions o = small_options();
  o.model_id = "tiny-gemma3";
  // 10 blocks of every layer: 160 positions for a full cache.
  o.kv_cache_memory = static_cast<double>(
      KVLayout::mha(c.n_layers, c.n_kv_heads, c.head_dim, KVCacheDType::F32, o.block_size).bytes_per_block() * 10);
  EngineOptions full_opts = o;
  full_opts.hybrid_kv_cache = false;
  // A request of 210 tokens does not fit a full cache at all.
  std::vector<int32_t> longest = shared;
  while (longest.size() < 170) longest.push_back(static_cast<int32_t>(3 + longest.size() * 13 % 500));
  prompts.push_back(longest);
  {
    Engine full(gemma, full_opts);
    EXPECT_EQ(full.stats().num_blocks, 10);
    Collector none;
    EXPECT_THROW(full.add_request(none.request("long", longest, params)), Error);
  }
  Engine engine(gemma, o);
  EXPECT_EQ(engine.stats().num_blocks, 6 * 10 - 1);  // one-layer blocks, less the null block
  Collector col;
  engine.add_request(col.request("first", prompts[0], params));
  engine.wait_until_idle();
  for (int i = 1; i < 7; ++i) engine.add_request(col.request(fmt::format("r{}", i), prompts[i], params));
  expect_all_blocks_free_or_cached(engine);

  GeneratorOptions go;
  go.hybrid_kv_cache = false;
  Generator reference(gemma, go);
  for (int i = 0; i < 7; ++i) {
    const std::string id = i == 0 ? "first" : fmt::format("r{}", i);
    const ChoiceResult got = col.get(id);
    ASSERT_TRUE(got.finished) << id;
    EXPECT_EQ(got.ids, reference.generate(prompts[i], params).generated_ids) << id;
  }
  // The second wave found the first request's prefix: full blocks of 16, all of them in the full layers and
  // the last window's in the sliding-window ones.
  EXPECT_EQ(col.get("r1").cached_tokens, 64);
  EXPECT_GT(engine.stats().preemptions + 0u, 0u);  // 59 one-layer blocks hold one or two of them at a time
}

// Every layer windowed, as Mistral v0.1's (tiny-gqa given a window of 7 on both layers, as a MistralForCausalLM
// folder loads): no layer keeps the whole sequence, so the cache's one group is windowed and a sequence of any
// length runs in a few blocks.
const Model& tiny_gqa_every_layer_windowed() {
  static const std::unique_ptr<Model> m = [] {
    auto gqa = load_model(kShared + "/golden/gguf/models/tiny-gqa.gguf");
    gqa->config.sliding_window = 7;
    gqa->config.swa_layers.assign(static_cast<size_t>(gqa->config.n_layers), true);
    gqa->config.rope_base_swa = gqa->config.rope_base;
    return gqa;
  }();
  return *m;
}

TEST(Engine, EveryLayerWindowedGivesTheBitsOfAFullCache) {
  const Model& m = tiny_gqa_every_layer_windowed();
  std::mt19937 rng(9);
  const std::vector<int32_t> ids = random_prompt(rng, 120);
  GeneratorOptions full_opts{.block_size = 4};
  full_opts.hybrid_kv_cache = false;
  GeneratorOptions hybrid_opts{.block_size = 4};
  hybrid_opts.prefill_chunk = 8;  // blocks are released between prompt chunks too
  Generator full(m, full_opts), hybrid(m, hybrid_opts);
  ASSERT_TRUE(hybrid.kv_cache().groups.hybrid());
  EXPECT_EQ(hybrid.kv_cache().groups.windows, (std::vector<int64_t>{7}));
  EXPECT_NE(hybrid.kv_cache().summary().find("window 7, no limit on a sequence's length"), std::string::npos)
      << hybrid.kv_cache().summary();
  const auto want = full.teacher_forced_logits(ids, 6);
  const auto got = hybrid.teacher_forced_logits(ids, 6);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "position " << i;
  EXPECT_EQ(hybrid.prefill_logits(ids, 100), full.prefill_logits(ids, 100));
  // The window binds: the same model with every position attended gives other logits.
  auto whole = load_model(kShared + "/golden/gguf/models/tiny-gqa.gguf");
  Generator unwindowed(*whole, full_opts);
  EXPECT_NE(unwindowed.prefill_logits(ids, 100), full.prefill_logits(ids, 100));
}

// Requests far longer than a full cache could hold run side by side in the windowed one, token for token as a
// full cache computes them alone, and leave every block free or cached.
TEST(Engine, EveryLayerWindowedRunsSequencesLongerThanTheCache) {
  const Model& m = tiny_gqa_every_layer_windowed();
  const ModelConfig& c = m.config;
  std::mt19937 rng(31);
  const std::vector<int32_t> shared = random_prompt(rng, 100);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p = shared;
    for (int j = 0; j <= 5 * i; ++j) p.push_back(static_cast<int32_t>(3 + (17 * i + 5 * j) % 500));
    prompts.push_back(p);
  }
  SamplingParams params;
  params.max_tokens = 60;
  params.ignore_eos = true;
  EngineOptions o = small_options();
  o.model_id = "tiny-gqa-windowed";
  // 12 blocks of 16: 192 positions, fewer than one request's 160-190 in a full cache beside another.
  o.kv_cache_memory = static_cast<double>(
      KVLayout::mha(c.n_layers, c.n_kv_heads, c.head_dim, KVCacheDType::F32, o.block_size).bytes_per_block() * 12);
  Engine engine(m, o);
  Collector col;
  for (int i = 0; i < 5; ++i) engine.add_request(col.request(fmt::format("r{}", i), prompts[i], params));
  engine.wait_until_idle();
  expect_all_blocks_free_or_cached(engine);
  GeneratorOptions go;
  go.hybrid_kv_cache = false;
  Generator reference(m, go);
  for (int i = 0; i < 5; ++i) {
    const std::string id = fmt::format("r{}", i);
    const ChoiceResult got = col.get(id);
    ASSERT_TRUE(got.finished) << id;
    EXPECT_EQ(got.ids, reference.generate(prompts[i], params).generated_ids) << id;
  }
}

// LongRoPE through the engine: its context (the model's 512, beyond the original 256) picks the long
// factors, as the Generator's does; batched, chunked and decoded steps all rotate with them.
TEST(Engine, LongRopeModelInBatchesMatchesGeneratorTokenForToken) {
  auto phi = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3-longrope.gguf");
  ASSERT_EQ(phi->config.rope_scaling.type, RopeScaling::Type::LongRope);
  EngineOptions o = small_options();
  o.model_id = "tiny-phi3-longrope";
  run_batch_against_generator(o, false, *phi);
}

// Mixture of experts in batched, chunked steps: each token's experts run on the rows routed to them, gathered
// across the batch; every request gets the Generator's tokens.
// Qwen2-MoE adds the gated shared expert, on every token of a batch.
TEST(Engine, MoeModelInBatchesMatchesGeneratorTokenForToken) {
  for (const char* stem : {"tiny-qwen3moe", "tiny-qwen2moe"}) {
    SCOPED_TRACE(stem);
    auto moe = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".gguf");
    ASSERT_TRUE(moe->config.moe());
    EngineOptions o = small_options();
    o.model_id = stem;
    run_batch_against_generator(o, false, *moe);
  }
}

// gpt-oss in batched, chunked steps and verified drafts: learned sinks over windowed and full layers, biased
// experts gathered across the batch; every request gets the Generator's tokens. Its hybrid cache gives the very
// bits of a full one (the sinks join each window's own softmax sum), and H2O, whose kernel keeps no such sums,
// is refused by name.
TEST(Engine, GptOssInBatchesMatchesGeneratorTokenForToken) {
  auto oss = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gptoss.gguf");
  ASSERT_TRUE(oss->config.learned_sinks);
  EngineOptions o = small_options();
  o.model_id = "tiny-gptoss";
  run_batch_plain_and_speculative(o, *oss);
  expect_hybrid_cache_gives_full_cache_bits(*oss, 9, 70);

  GeneratorOptions h2o;
  h2o.h2o = {8, 8};
  EXPECT_ERROR_CONTAINS(Generator(*oss, h2o), "learned attention sinks");
}

// Llama 4 in batched, chunked steps and verified drafts, with a chunk of 8 and a temperature floor scale of 4 (the
// HF variant's, so that both show in these lengths): each sequence's chunks restart at its own positions, mid-step
// and mid-block; the sigmoid-weighted experts and the shared one gathered across the batch. Every request gets the
// Generator's tokens, and the hybrid cache (the chunked layers' blocks released behind their window) the very bits
// of a full one.
TEST(Engine, Llama4InBatchesMatchesGeneratorTokenForToken) {
  auto l4 = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-llama4.gguf");
  l4->config.sliding_window = 8;
  l4->config.attn_temp_length = 4;
  ASSERT_TRUE(l4->config.swa_chunked);
  EngineOptions o = small_options();
  o.model_id = "tiny-llama4";
  run_batch_plain_and_speculative(o, *l4);
  EXPECT_EQ(expect_hybrid_cache_gives_full_cache_bits(*l4, 11, 70), (std::vector<int64_t>{0, 8, 8, 8}));
}

// Gemma 4 in batched, chunked steps and verified drafts: its sliding and full layers' rows of different sizes and KV
// heads in one pool (a hybrid cache's arrays hold the larger rows; a full one's differ per layer), its last layers
// reading earlier layers' KV, the per-layer embeddings of each token. Every request gets the Generator's tokens, and
// the hybrid cache the very bits of a full one.
// tiny-gemma4-moe: its experts beside the dense branch, gathered across the batch or run for one token.
TEST(Engine, Gemma4InBatchesMatchesGeneratorTokenForToken) {
  for (const char* stem : {"tiny-gemma4", "tiny-gemma4-moe"}) {
    auto g4 = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".gguf");
    EngineOptions o = small_options();
    o.model_id = stem;
    run_batch_plain_and_speculative(o, *g4);
    EXPECT_EQ(expect_hybrid_cache_gives_full_cache_bits(*g4, 13, 70), (std::vector<int64_t>{0, 8})) << stem;
  }
}

// DeepSeek's latent attention and routing in batched, chunked steps (each sequence's latent rows through its
// block table, its absorbed queries against them), with and without a prefix cache hit: every request gets
// the Generator's tokens. tiny-deepseek3 adds the sigmoid, biased, group-limited router.
TEST(Engine, MlaModelsInBatchesMatchGeneratorTokenForToken) {
  for (const char* stem : {"tiny-deepseek2", "tiny-deepseek3"}) {
    auto ds = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".gguf");
    ASSERT_TRUE(ds->config.mla());
    EngineOptions o = small_options();
    o.model_id = stem;
    run_batch_plain_and_speculative(o, *ds);  // drafts verified in multi-token steps over the latent rows

    // Two requests sharing a 100-token prompt, one after the other: the second reuses the first's latent rows.
    std::mt19937 rng(5);
    const std::vector<int32_t> prompt = random_prompt(rng, 100);
    SamplingParams params;
    params.max_tokens = 12;
    params.ignore_eos = true;
    const GenerationResult want = alone(prompt, params, *ds);
    Engine engine(*ds, o);
    for (int round = 0; round < 2; ++round) {
      Collector col;
      engine.add_request(col.request(fmt::format("p{}", round), prompt, params));
      expect_all_blocks_free_or_cached(engine);  // waits for the request
      EXPECT_EQ(col.get(fmt::format("p{}", round)).ids, want.generated_ids) << stem << " round " << round;
    }
    EXPECT_GE(engine.stats().prefix_hits, 96u) << stem;
  }
}

// StreamingLLM eviction (attention sinks + a window) in batched, chunked steps: sequences run past the
// model's 512-token context in a budget of 384 positions (preempted and recomputed at times), token for token as the Generator
// computes them alone with the same eviction; a second round hits the first one's sink and window blocks;
// and again with speculative decoding, whose rejected drafts are cut back out of windowed tables.
TEST(Engine, StreamingSequencesRunPastTheContextAndMatchTheGenerator) {
  const Model& m = stories();
  const StreamingEviction stream{.window = 64, .sinks = 4};
  SamplingParams params;
  params.max_tokens = 560;
  params.ignore_eos = true;
  std::mt19937 rng(21);
  const std::vector<int32_t> shared = random_prompt(rng, 90);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    const std::vector<int32_t> tail = random_prompt(rng, 1 + 41 * i);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  GeneratorOptions go;
  go.streaming = stream;
  Generator gen(m, go);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(gen.generate(p, params).generated_ids);
  test::expect_all_blocks_free_or_cached(gen);

  for (int spec : {0, 3}) {
    EngineOptions o = small_options();
    o.streaming = stream;
    o.kv_cache_memory = static_cast<double>(bytes_per_block(m, o.block_size) * 24);  // 384 positions
    o.speculative_tokens = spec;
    o.ngram = {.max_n = 2, .min_n = 1};
    Engine engine(m, o);
    Collector col;
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < prompts.size(); ++i)
        engine.add_request(col.request(fmt::format("s{}-{}", round, i), prompts[i], params));
      expect_all_blocks_free_or_cached(engine);
      for (size_t i = 0; i < prompts.size(); ++i) {
        const ChoiceResult got = col.get(fmt::format("s{}-{}", round, i));
        ASSERT_TRUE(got.finished);
        EXPECT_EQ(got.ids, want[i]) << "spec " << spec << " round " << round << " request " << i;
        EXPECT_EQ(got.completion_tokens, params.max_tokens);
        if (round == 1) {
          EXPECT_GT(got.cached_tokens, 0) << i;
        }
      }
    }
    // 23 blocks hold two or three of these sequences at a time: the rest wait or are recomputed.
    EXPECT_GT(engine.stats().preemptions, 0u) << spec;
  }
  // Without eviction the same budget cannot hold one of these sequences.
  EngineOptions full = small_options();
  full.kv_cache_memory = static_cast<double>(bytes_per_block(m, full.block_size) * 24);
  full.max_model_len = 2048;
  Engine engine(m, full);
  Collector none;
  EXPECT_THROW(engine.add_request(none.request("long", prompts[5], params)), Error);
}

// H2O eviction in batched steps: sequences chunked by the token budget, two choices forked from each
// prompt (the fork copies the capped blocks, which each choice then rewrites as it evicts; seeded sampled
// choices differ, so shared blocks would show), and a budget where sequences wait and are preempted and
// recomputed: every choice is the Generator's token sequence (choice i sampled with seed + i), and the
// pool ends free.
TEST(Engine, HeavyHitterSequencesMatchTheGenerator) {
  const Model& m = stories();
  const HeavyHitterEviction h2o{.heavy = 16, .recent = 24};
  std::mt19937 rng(8);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(random_prompt(rng, 30 + 47 * i));
  for (const bool sampled : {false, true}) {
    SamplingParams params;
    params.max_tokens = 140;
    params.ignore_eos = true;
    if (sampled) {
      params.temperature = 0.9f;
      params.has_seed = true;
      params.seed = 7;
    }
    GeneratorOptions go;
    go.h2o = h2o;
    Generator gen(m, go);
    std::vector<std::vector<std::vector<int32_t>>> want(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      for (uint64_t choice = 0; choice < 2; ++choice) {
        SamplingParams p = params;
        p.seed += choice;
        want[i].push_back(gen.generate(prompts[i], p).generated_ids);
      }
    test::expect_all_blocks_free_or_cached(gen);

    for (const bool tight : {false, true}) {
      EngineOptions o = small_options();
      o.h2o = h2o;
      const ModelConfig& c = m.config;
      const uint64_t block =
          bytes_per_block(m, o.block_size) + uint64_t(c.n_layers) * o.block_size * c.n_kv_heads * 8;
      // Room for every choice at once (each fork succeeds), or 5 blocks and the null one: one sequence of
      // 3 blocks and part of another.
      o.kv_cache_memory = static_cast<double>(block * (tight ? 6 : 64));
      Engine engine(m, o);
      Collector col;
      for (size_t i = 0; i < prompts.size(); ++i)
        engine.add_request(col.request(fmt::format("h{}", i), prompts[i], params, 2));
      expect_all_blocks_free_or_cached(engine);
      for (size_t i = 0; i < prompts.size(); ++i)
        for (int choice = 0; choice < 2; ++choice) {
          const ChoiceResult got = col.get(fmt::format("h{}", i), choice);
          ASSERT_TRUE(got.finished);
          EXPECT_EQ(got.ids, want[i][static_cast<size_t>(choice)])
              << "sampled " << sampled << " tight " << tight << " request " << i << " choice " << choice;
        }
      EXPECT_EQ(engine.stats().preemptions > 0, tight) << sampled;
    }
  }
}

// Speculative decoding with a draft model in batched steps (stories260K F32, drafts from its Q4_0 copy):
// greedy requests give the Generator's tokens without speculation, drafts are proposed and taken, and
// sampled requests give, token for token, what the Generator with the same draft model and seed gives
// (each sequence's samplers see the same draws in the same order). Again on a budget that makes the target
// preempt and recompute; both caches end free or cached.
TEST(Engine, DraftModelSpeculationMatchesTheGenerator) {
  const std::string dir = std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/";
  auto target = load_model(dir + "stories260K-F32.gguf");
  auto draft = load_model(dir + "stories260K-Q4_0.gguf");
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(random_prompt(rng, 5 + 13 * i));
  for (const bool sampled : {false, true}) {
    SamplingParams params;
    params.max_tokens = 48;
    params.ignore_eos = true;
    if (sampled) {
      params.temperature = 0.8f;
      params.has_seed = true;
      params.seed = 42;
    }
    GeneratorOptions go;
    if (sampled) {
      go.speculative_tokens = 4;
      go.draft_model = draft.get();
    }
    Generator gen(*target, go);
    for (const bool tight : {false, true}) {
      EngineOptions o = small_options();
      o.model_id = "stories260K-F32";
      o.speculative_tokens = 4;
      o.draft_model = draft.get();
      if (tight) o.kv_cache_memory = static_cast<double>(bytes_per_block(*target, o.block_size) * 12);
      Engine engine(*target, o);
      Collector col;
      for (size_t i = 0; i < prompts.size(); ++i)
        engine.add_request(col.request(fmt::format("d{}", i), prompts[i], params));
      expect_all_blocks_free_or_cached(engine);
      for (size_t i = 0; i < prompts.size(); ++i) {
        const ChoiceResult got = col.get(fmt::format("d{}", i));
        ASSERT_TRUE(got.finished);
        EXPECT_EQ(got.completion_tokens, params.max_tokens);
        // A preempted sequence drops the drafts it held, whose draws the Generator's sampler never made:
        // sampled, it then follows the same distribution on other draws.
        if (sampled && tight) continue;
        EXPECT_EQ(got.ids, gen.generate(prompts[i], params).generated_ids)
            << (sampled ? "sampled" : "greedy") << (tight ? " tight" : "") << " request " << i;
      }
      const EngineStats st = engine.stats();
      EXPECT_GT(st.draft_tokens, 0u);
      EXPECT_GT(st.accepted_draft_tokens, st.draft_tokens / 2) << "Q4_0 drafts of the same model mostly agree";
      if (tight) {
        EXPECT_GT(st.preemptions, 0u);
      }
    }
  }
  // speculative_max_batch: no drafts while more sequences decode, the same tokens.
  {
    SamplingParams params;
    params.max_tokens = 40;
    params.ignore_eos = true;
    Generator gen(*target, {});
    uint64_t drafted[2] = {0, 0};
    for (const int max_batch : {0, 1}) {
      EngineOptions o = small_options();
      o.speculative_tokens = 4;
      o.draft_model = draft.get();
      o.speculative_max_batch = max_batch;
      Engine engine(*target, o);
      Collector col;
      for (size_t i = 0; i < 4; ++i) engine.add_request(col.request(fmt::format("m{}", i), prompts[i], params));
      expect_all_blocks_free_or_cached(engine);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_EQ(col.get(fmt::format("m{}", i)).ids, gen.generate(prompts[i], params).generated_ids) << max_batch;
      drafted[max_batch] = engine.stats().draft_tokens;
    }
    EXPECT_LT(drafted[1], drafted[0] / 2);
  }
  EngineOptions bad = small_options();
  bad.speculative_tokens = 2;
  bad.draft_model = draft.get();
  bad.streaming = {.window = 64, .sinks = 4};
  EXPECT_THROW(Engine(*target, bad), Error);
}

// LongRoPE on auto across the original context (256): sequences that grow past it are recomputed with the
// long factors (rope_restarts), one whose prompt is past it starts with them, and every request gets the
// Generator's tokens (which follow one pass over the sequence, test_long_rope.cpp) under chunked, batched
// steps. A second round hits the prefix cache with both factor sets' blocks. Again with speculative
// decoding: drafts never carry a sequence across the original context on the short factors, and a restart
// drops the drafts it has.
TEST(Engine, LongRopeSequencesOutgrowingTheOriginalContextAreRecomputedAndMatchTheGenerator) {
  auto phi = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3-longrope.gguf");
  SamplingParams params;
  params.max_tokens = 20;
  params.ignore_eos = true;
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {200, 240, 250, 256, 270}) prompts.push_back(random_prompt(rng, len));
  std::vector<GenerationResult> want;
  for (const auto& p : prompts) want.push_back(alone(p, params, *phi));
  for (int spec : {0, 4}) {
    EngineOptions o = small_options();
    o.model_id = "tiny-phi3-longrope";
    o.kv_cache_memory = 16.0 * 1024 * 1024;
    o.speculative_tokens = spec;
    o.ngram = {.max_n = 2, .min_n = 1};
    Engine engine(*phi, o);
    Collector col;
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < prompts.size(); ++i)
        engine.add_request(col.request(fmt::format("r{}-{}", round, i), prompts[i], params));
      expect_all_blocks_free_or_cached(engine);
      for (size_t i = 0; i < prompts.size(); ++i) {
        const ChoiceResult got = col.get(fmt::format("r{}-{}", round, i));
        EXPECT_EQ(got.ids, want[i].generated_ids) << "spec " << spec << " round " << round << " request " << i;
        EXPECT_EQ(want[i].rope_restarts, i == 1 || i == 2 || i == 3 ? 1 : 0) << i;
        if (round == 1) {
          EXPECT_GT(got.cached_tokens, 0) << i;
        }
      }
    }
    // 240 + 20, 250 + 20 and 256 + 20 tokens cross 256 in each round; 200 + 20 never does; 270 starts long.
    EXPECT_EQ(engine.stats().rope_restarts, 6u) << spec;
    EXPECT_EQ(engine.stats().preemptions, 0u) << spec;
    if (spec > 0) {
      EXPECT_GT(engine.stats().draft_tokens, 0u);
    }
  }
}

// Quantized KV caches (int8, int4, fp8; tiny-gqa, head size 64) under chunked prefill, mixed steps,
// batched decode and a prefix hit: every request gets the tokens the Generator gives it alone on the same
// cache dtype (each K/V row is rounded by itself, so batching changes no stored bit), and every block is
// free or cached after.
class EngineQuantizedKV : public ::testing::TestWithParam<KVCacheDType> {};

TEST_P(EngineQuantizedKV, InBatchesMatchesGeneratorTokenForToken) {
  auto gqa = load_model(kShared + "/golden/gguf/models/tiny-gqa.gguf");
  EngineOptions o = small_options();
  o.model_id = "tiny-gqa";
  o.kv_cache_dtype = GetParam();
  SamplingParams params;
  params.max_tokens = 24;
  params.ignore_eos = true;
  std::mt19937 rng(21);
  const std::vector<int32_t> shared = random_prompt(rng, 40);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_prompt(rng, 3 + 17 * i));
  prompts.push_back(shared);
  prompts.back().push_back(77);
  Engine engine(*gqa, o);
  Collector col;
  engine.add_request(col.request("warm", shared, params));
  engine.wait_until_idle();
  for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(col.request(fmt::format("r{}", i), prompts[i], params));
  expect_all_blocks_free_or_cached(engine);
  GeneratorOptions go;
  go.kv_cache_dtype = GetParam();
  go.enable_prefix_caching = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Generator g(*gqa, go);
    EXPECT_EQ(col.get(fmt::format("r{}", i)).ids, g.generate(prompts[i], params).generated_ids) << i;
  }
  EXPECT_GE(col.get(fmt::format("r{}", prompts.size() - 1)).cached_tokens, 32);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EngineQuantizedKV,
                         ::testing::Values(KVCacheDType::INT8, KVCacheDType::INT4, KVCacheDType::FP8_E4M3,
                                           KVCacheDType::FP8_E5M2),
                         [](const ::testing::TestParamInfo<KVCacheDType>& i) {
                           return std::string(kv_dtype_name(i.param));
                         });

TEST(Engine, TinyKVBudgetPreemptsAndEveryRequestStillCompletesIdentically) {
  EngineOptions o = small_options();
  // The longest request needs ceil((68 + 40) / 16) = 7 blocks; 10 blocks hold one or two at a time.
  o.kv_cache_memory = static_cast<double>(bytes_per_block(stories(), o.block_size) * 10);
  run_batch_against_generator(o, true);
}

// Speculative decoding in the batched engine (prompt lookup, 4 drafts, 1-3-grams): every greedy request gets
// the tokens the Generator gives it alone without speculation, under chunked prefill with a 48-token step
// budget (drafts that do not fit a step are dropped), and again with a KV budget so small that sequences
// are preempted (their drafts dropped, the rest recomputed); drafts are proposed and many taken; every
// block is free or cached after.
TEST(Engine, SpeculativeGreedyMatchesGeneratorTokenForToken) {
  std::mt19937 rng(31);
  SamplingParams params;
  params.max_tokens = 60;
  params.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_prompt(rng, 4 + 7 * i));
  // llama2.c's story prompts: stories260K retells its own phrases, so many drafts are taken.
  for (const nlohmann::json& g : test::stories_greedy_goldens())
    prompts.push_back(g["prompt_ids"].get<std::vector<int32_t>>());
  for (bool tiny_budget : {false, true}) {
    EngineOptions o = small_options();
    o.speculative_tokens = 4;
    o.ngram = {.max_n = 3, .min_n = 1};
    // The longest request needs ceil((18 + 60 + 4) / 16) = 6 blocks; 8 hold one or two at a time.
    if (tiny_budget) o.kv_cache_memory = static_cast<double>(bytes_per_block(stories(), o.block_size) * 8);
    Engine engine(stories(), o);
    Collector col;
    for (size_t i = 0; i < prompts.size(); ++i)
      engine.add_request(col.request(fmt::format("r{}", i), prompts[i], params));
    expect_all_blocks_free_or_cached(engine);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const ChoiceResult got = col.get(fmt::format("r{}", i));
      EXPECT_EQ(got.ids, alone(prompts[i], params).generated_ids) << "request " << i << " tiny " << tiny_budget;
      EXPECT_EQ(got.completion_tokens, 60);
    }
    const EngineStats st = engine.stats();
    std::printf("speculative engine (tiny budget %d): %llu of %llu drafts taken, %llu preemptions\n", tiny_budget,
                static_cast<unsigned long long>(st.accepted_draft_tokens),
                static_cast<unsigned long long>(st.draft_tokens), static_cast<unsigned long long>(st.preemptions));
    EXPECT_GT(st.draft_tokens, 0u);
    EXPECT_GT(st.accepted_draft_tokens, 0u);
    EXPECT_LE(st.accepted_draft_tokens, st.draft_tokens);
    if (tiny_budget) {
      EXPECT_GT(st.preemptions, 0u);
    }
  }
}

// Sampling under speculation in the engine (top-k 3 at temperature 1.5, two choices a request): every token is
// one of the target's 3 most likely at its position (teacher-forced logits), as a correct verification
// allows, and seeded requests repeat themselves on a second engine.
TEST(Engine, SpeculativeSamplingStaysInTopKAndRepeats) {
  std::mt19937 rng(5);
  SamplingParams params;
  params.temperature = 1.5f;
  params.top_k = 3;
  params.max_tokens = 50;
  params.ignore_eos = true;
  params.has_seed = true;
  params.seed = 77;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(random_prompt(rng, 6 + 5 * i));
  EngineOptions o = small_options();
  o.speculative_tokens = 3;
  o.ngram = {.max_n = 2, .min_n = 1};
  std::vector<std::vector<std::vector<int32_t>>> runs;
  uint64_t drafted = 0;
  for (int run = 0; run < 2; ++run) {
    Engine engine(stories(), o);
    Collector col;
    for (size_t i = 0; i < prompts.size(); ++i)
      engine.add_request(col.request(fmt::format("r{}", i), prompts[i], params, 2));
    expect_all_blocks_free_or_cached(engine);
    drafted += engine.stats().draft_tokens;
    std::vector<std::vector<int32_t>> ids;
    for (size_t i = 0; i < prompts.size(); ++i)
      for (int c = 0; c < 2; ++c) ids.push_back(col.get(fmt::format("r{}", i), c).ids);
    runs.push_back(ids);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_GT(drafted, 0u);
  GeneratorOptions go;
  go.enable_prefix_caching = false;
  Generator plain(stories(), go);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int c = 0; c < 2; ++c) {
      const std::vector<int32_t>& got = runs[0][i * 2 + static_cast<size_t>(c)];
      ASSERT_EQ(got.size(), 50u);
      std::vector<int32_t> seq = prompts[i];
      seq.insert(seq.end(), got.begin(), got.end());
      const auto logits = plain.teacher_forced_logits(seq, static_cast<int>(prompts[i].size()));
      for (size_t t = 0; t < got.size(); ++t) {
        const float mine = logits[t][static_cast<size_t>(got[t])];
        const auto above = std::count_if(logits[t].begin(), logits[t].end(), [&](float x) { return x > mine; });
        EXPECT_LT(above, 3) << "request " << i << " choice " << c << " step " << t;
      }
    }
  }
}

TEST(Engine, PrefixCacheHitsSharedPrefixAndSaltIsolates) {
  std::mt19937 rng(7);
  const std::vector<int32_t> shared = random_prompt(rng, 64);
  std::vector<int32_t> a = shared, b = shared;
  for (int i = 0; i < 6; ++i) a.push_back(100 + i), b.push_back(200 + i);
  SamplingParams params;
  params.max_tokens = 12;

  Engine engine(stories(), small_options());
  Collector col;
  engine.add_request(col.request("a", a, params, 1, "tenant"));
  engine.wait_until_idle();
  engine.add_request(col.request("b", b, params, 1, "tenant"));
  engine.wait_until_idle();
  engine.add_request(col.request("c", b, params, 1, "other-tenant"));
  expect_all_blocks_free_or_cached(engine);

  EXPECT_EQ(col.get("a").cached_tokens, 0);
  EXPECT_GE(col.get("b").cached_tokens, 48);
  EXPECT_EQ(col.get("c").cached_tokens, 0);
  EXPECT_EQ(col.get("a").ids, alone(a, params).generated_ids);
  EXPECT_EQ(col.get("b").ids, alone(b, params).generated_ids);
  EXPECT_EQ(col.get("c").ids, col.get("b").ids);
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.prefix_queries, a.size() + 2 * b.size());
  EXPECT_EQ(st.prefix_hits, static_cast<uint64_t>(col.get("b").cached_tokens));
  EXPECT_GT(st.cached_blocks, 0);
}

TEST(Engine, ParallelSamplingForksAndEachChoiceIsReproducible) {
  std::mt19937 rng(99);
  const std::vector<int32_t> prompt = random_prompt(rng, 21);  // partial last block: fork copies it
  SamplingParams params;
  params.temperature = 0.9f;
  params.seed = 42;
  params.has_seed = true;
  params.max_tokens = 30;
  params.ignore_eos = true;

  Engine engine(stories(), small_options());
  Collector col;
  engine.add_request(col.request("n2", prompt, params, 2));
  engine.wait_until_idle();
  engine.add_request(col.request("again", prompt, params, 2));
  expect_all_blocks_free_or_cached(engine);

  const ChoiceResult c0 = col.get("n2", 0), c1 = col.get("n2", 1);
  EXPECT_EQ(c0.ids.size(), 30u);
  EXPECT_EQ(c1.ids.size(), 30u);
  EXPECT_NE(c0.ids, c1.ids);
  EXPECT_EQ(col.get("again", 0).ids, c0.ids);
  EXPECT_EQ(col.get("again", 1).ids, c1.ids);
  // Choice i samples exactly as one sequence with seed + i would.
  SamplingParams p1 = params;
  p1.seed = 43;
  EXPECT_EQ(c0.ids, alone(prompt, params).generated_ids);
  EXPECT_EQ(c1.ids, alone(prompt, p1).generated_ids);
  EXPECT_EQ(c0.prompt_tokens, 21);
  EXPECT_EQ(engine.stats().prompt_tokens, 42u);  // the prompt counted once per request, not per choice
}

// n > 1 on the hybrid cache: the fork copies the partial last block of every group, and each choice then
// releases its own windowed blocks; each samples as one sequence on a full cache with seed + i.
TEST(Engine, ParallelSamplingOnTheHybridCacheForksEveryGroup) {
  const Model& gemma = tiny_gemma3();
  std::mt19937 rng(99);
  const std::vector<int32_t> prompt = random_prompt(rng, 37);
  SamplingParams params;
  params.temperature = 0.9f;
  params.seed = 42;
  params.has_seed = true;
  params.max_tokens = 40;
  params.ignore_eos = true;
  EngineOptions o = small_options();
  o.model_id = "tiny-gemma3";
  Engine engine(gemma, o);
  Collector col;
  engine.add_request(col.request("n3", prompt, params, 3));
  expect_all_blocks_free_or_cached(engine);
  GeneratorOptions go;
  go.hybrid_kv_cache = false;
  Generator reference(gemma, go);
  for (int i = 0; i < 3; ++i) {
    SamplingParams p = params;
    p.seed = 42 + static_cast<uint64_t>(i);
    EXPECT_EQ(col.get("n3", i).ids, reference.generate(prompt, p).generated_ids) << "choice " << i;
  }
  EXPECT_NE(col.get("n3", 0).ids, col.get("n3", 1).ids);
}

// 8 concurrent seeded requests, each with its own temperature / top-k / top-p / min-p, whose decode
// rows the engine samples together on the pool: each matches its sequence generated alone.
TEST(Engine, ConcurrentSeededSamplingMatchesGeneratorTokenForToken) {
  std::mt19937 rng(4321);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params(8);
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(random_prompt(rng, 4 + 7 * i));
    SamplingParams& p = params[static_cast<size_t>(i)];
    p.max_tokens = 24;
    p.ignore_eos = true;
    p.has_seed = true;
    p.seed = 500 + static_cast<uint64_t>(i);
    p.temperature = i == 0 ? 0.0f : 0.5f + 0.2f * static_cast<float>(i);
    p.top_k = i % 3 == 1 ? 20 : 0;
    p.top_p = i % 2 == 0 ? 0.9f : 1.0f;
    p.min_p = i == 5 ? 0.02f : 0.0f;
  }
  Engine engine(stories(), small_options());
  Collector col;
  const auto name = [](int i) { return fmt::format("s{}", i); };
  for (int i = 0; i < 8; ++i) engine.add_request(col.request(name(i), prompts[i], params[i]));
  expect_all_blocks_free_or_cached(engine);
  for (int i = 0; i < 8; ++i) {
    const ChoiceResult got = col.get(name(i));
    EXPECT_EQ(got.completion_tokens, 24);
    EXPECT_EQ(got.ids, alone(prompts[i], params[i]).generated_ids) << "request " << i;
  }
}

TEST(Engine, AbortMidwayFreesBlocks) {
  std::mt19937 rng(5);
  SamplingParams params;
  params.max_tokens = 400;
  params.ignore_eos = true;
  Engine engine(stories(), small_options());
  Collector col;
  engine.add_request(col.request("long", random_prompt(rng, 30), params));
  col.wait_tokens("long", 3);
  engine.abort_request("long");
  engine.abort_request("unknown");  // harmless
  expect_all_blocks_free_or_cached(engine);
  const ChoiceResult r = col.get("long");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_LT(r.completion_tokens, 400);
  EXPECT_EQ(r.completion_tokens, static_cast<int>(r.ids.size()));
}

TEST(Engine, RejectsRequestsThatCanNeverRun) {
  EngineOptions o = small_options();
  o.kv_cache_memory = static_cast<double>(bytes_per_block(stories(), o.block_size) * 4);  // 64 tokens
  Engine engine(stories(), o);
  Collector col;
  const int64_t ctx = stories().config.n_ctx_train;
  SamplingParams params;
  params.max_tokens = 8;
  std::vector<int32_t> too_long(static_cast<size_t>(ctx), 5);
  EXPECT_THROW(engine.add_request(col.request("ctx", too_long, params)), Error);
  params.max_tokens = static_cast<int>(ctx);
  EXPECT_THROW(engine.add_request(col.request("ctx+max", {1, 5, 6}, params)), Error);
  params.max_tokens = 70;  // 73 tokens fit the context but not the 64-token pool
  EXPECT_THROW(engine.add_request(col.request("pool", {1, 5, 6}, params)), Error);
  params.max_tokens = 4;
  EXPECT_THROW(engine.add_request(col.request("empty", {}, params)), Error);
  EXPECT_THROW(engine.add_request(col.request("vocab", {1, 100000}, params)), Error);
  engine.add_request(col.request("ok", {1, 5, 6}, params));
  EXPECT_THROW(engine.add_request(col.request("ok", {1, 5, 6}, params)), Error);  // duplicate id
  expect_all_blocks_free_or_cached(engine);
  EXPECT_TRUE(col.get("ok").finished);
}

// add_requests queues a batch as one: the engine's first step admits all of them (every first token
// comes before any second one), and a batch with one bad request queues none.
TEST(Engine, AddRequestsQueuesTheWholeBatchForOneStepOrNone) {
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 256;  // room for every prompt in one step
  Engine engine(stories(), o);
  std::mutex mu;
  std::vector<std::pair<int, size_t>> order;  // (request, its token count so far), in event order
  std::vector<size_t> seen(6, 0);
  SamplingParams params;
  params.max_tokens = 4;
  params.ignore_eos = true;
  std::mt19937 rng(9);
  const auto batch = [&](const std::string& tag, std::vector<int32_t> bad_prompt) {
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 6; ++i) {
      EngineRequest r;
      r.id = fmt::format("{}{}", tag, i);
      r.prompt_ids = i == 4 && !bad_prompt.empty() ? bad_prompt : random_prompt(rng, 6 + 3 * i);
      r.params = params;
      r.on_event = [&, i](const RequestEvent& ev) {
        std::lock_guard lk(mu);
        for (size_t k = 0; k < ev.tokens.size(); ++k) order.emplace_back(i, ++seen[static_cast<size_t>(i)]);
      };
      reqs.push_back(std::move(r));
    }
    return reqs;
  };
  EXPECT_THROW(engine.add_requests(batch("a", {1, 100000})), Error);  // token outside the vocabulary
  std::vector<EngineRequest> bias_outside = batch("c", {});
  bias_outside[3].params.logit_bias = {{100000, 1.0f}};
  EXPECT_THROW(engine.add_requests(std::move(bias_outside)), Error);  // logit_bias outside the vocabulary
  std::vector<EngineRequest> dup = batch("b", {});
  dup[5].id = dup[1].id;
  EXPECT_THROW(engine.add_requests(std::move(dup)), Error);
  engine.wait_until_idle();
  EXPECT_EQ(engine.stats().requests_finished, 0u);
  {
    std::lock_guard lk(mu);
    EXPECT_TRUE(order.empty());
  }
  engine.add_requests(batch("b", {}));  // the ids of the refused batch are free again
  expect_all_blocks_free_or_cached(engine);
  EXPECT_EQ(engine.stats().requests_finished, 6u);
  std::lock_guard lk(mu);
  ASSERT_EQ(order.size(), 24u);
  for (size_t k = 0; k < 6; ++k) EXPECT_EQ(order[k].second, 1u) << "event " << k;
}

// A stop string ends a choice before it (the string hidden); vLLM's stop_token_ids end one at the first such
// token (its text left out); min_tokens holds every end back until that many tokens are out: the token is
// never drawn before, and a stop string that appears before is passed over. The engine, plain and
// speculative, gives the Generator's tokens and text; the free run's tokens say where each must end.
TEST(Engine, StopStringsStopTokenIdsAndMinTokensEndWhereTheyShould) {
  std::mt19937 rng(21);
  const std::vector<int32_t> prompt = random_prompt(rng, 10);
  SamplingParams params;
  params.max_tokens = 48;
  params.ignore_eos = true;
  const GenerationResult free_run = alone(prompt, params);
  ASSERT_EQ(free_run.generated_ids.size(), 48u);
  const int32_t stop_id = free_run.generated_ids[6];
  const auto first_stop =
      static_cast<size_t>(std::find(free_run.generated_ids.begin(), free_run.generated_ids.end(), stop_id) -
                          free_run.generated_ids.begin());

  SamplingParams stop_at = params;
  stop_at.stop_token_ids = {stop_id};
  SamplingParams held = stop_at;
  held.min_tokens = static_cast<int>(first_stop) + 4;
  SamplingParams stop_string = params;
  stop_string.stop = {free_run.text.substr(8, 3)};
  SamplingParams held_string = params;  // a stop string of the free run's early text, passed over
  held_string.stop = {free_run.text.substr(2, 4)};
  held_string.min_tokens = 30;
  const std::vector<std::pair<std::string, SamplingParams>> cases = {
      {"stop_at", stop_at}, {"held", held}, {"stop_string", stop_string}, {"held_string", held_string}};

  std::map<std::string, GenerationResult> want;
  for (const auto& [name, p] : cases) want[name] = alone(prompt, p);
  const std::vector<int32_t>& a = want["stop_at"].generated_ids;
  EXPECT_EQ(want["stop_at"].finish_reason, "stop");
  EXPECT_EQ(a, std::vector<int32_t>(free_run.generated_ids.begin(), free_run.generated_ids.begin() + first_stop + 1));
  SamplingParams before_stop = params;  // the stop token's text is left out
  before_stop.max_tokens = static_cast<int>(first_stop);
  EXPECT_EQ(want["stop_at"].text, alone(prompt, before_stop).text);
  const std::vector<int32_t>& b = want["held"].generated_ids;
  ASSERT_GT(b.size(), static_cast<size_t>(held.min_tokens));
  EXPECT_EQ(std::find(b.begin(), b.begin() + held.min_tokens, stop_id), b.begin() + held.min_tokens);
  EXPECT_EQ(std::vector<int32_t>(b.begin(), b.begin() + first_stop),
            std::vector<int32_t>(a.begin(), a.begin() + first_stop));
  if (want["held"].finish_reason == "stop") {
    EXPECT_EQ(b.back(), stop_id);
  }
  ASSERT_NE(free_run.text.find(held_string.stop[0]), std::string::npos);
  EXPECT_GT(want["held_string"].generated_ids.size(), 30u);
  EXPECT_EQ(want["held_string"].text.substr(0, 8), free_run.text.substr(0, 8));  // past the early stop string
  EXPECT_EQ(want["stop_string"].finish_reason, "stop");
  EXPECT_EQ(want["stop_string"].text, free_run.text.substr(0, free_run.text.find(stop_string.stop[0])));
  // The Generator says what ended each, as the engine does below.
  EXPECT_EQ(want["stop_at"].stop_token_id, stop_id);
  EXPECT_EQ(want["stop_at"].stop_string, "");
  EXPECT_EQ(want["stop_string"].stop_string, stop_string.stop[0]);
  EXPECT_EQ(want["stop_string"].stop_token_id, -1);
  EXPECT_EQ(free_run.stop_token_id, -1);
  EXPECT_EQ(free_run.stop_string, "");

  for (const int speculative : {0, 3}) {
    EngineOptions o = small_options();
    o.speculative_tokens = speculative;
    Engine engine(stories(), o);
    Collector col;
    for (const auto& [name, p] : cases) engine.add_request(col.request(name, prompt, p));
    expect_all_blocks_free_or_cached(engine);
    for (const auto& [name, p] : cases) {
      SCOPED_TRACE(name + " speculative " + std::to_string(speculative));
      EXPECT_EQ(col.get(name).ids, want[name].generated_ids);
      EXPECT_EQ(col.get(name).text, want[name].text);
      EXPECT_EQ(col.get(name).finish_reason, want[name].finish_reason);
    }
    // vLLM's stop_reason: the stop token id drawn, or the stop string matched.
    EXPECT_EQ(col.get("stop_at").stop_token_id, stop_id);
    EXPECT_EQ(col.get("stop_at").stop_string, "");
    EXPECT_EQ(col.get("stop_string").stop_string, stop_string.stop[0]);
    EXPECT_EQ(col.get("stop_string").stop_token_id, -1);
    for (const auto& [name, p] : cases) {
      EXPECT_EQ(col.get(name).stop_string, want[name].stop_string) << name;
      EXPECT_EQ(col.get(name).stop_token_id, want[name].stop_token_id) << name;
    }
    if (col.get("held_string").finish_reason == "stop") {
      EXPECT_EQ(col.get("held_string").stop_string, held_string.stop[0]);
    }
  }
}

// vLLM's prompt_logprobs: each prompt token's log-probability given the ones before it (and the top k), as a
// teacher-forced pass over the prompt gives them, on each choice's first event; computed whole although the
// prompt is in the prefix cache and runs in chunks, and the choices' tokens are those without it.
TEST(Engine, PromptLogprobsAreTheTeacherForcedOnes) {
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = random_prompt(rng, 70);  // two 48-token chunks
  SamplingParams params;
  params.max_tokens = 6;
  params.temperature = 0.0f;
  params.ignore_eos = true;
  SamplingParams with = params;
  with.prompt_logprobs = 3;

  Generator g(stories(), {});
  const std::vector<float> logits = g.prefill_logits(prompt, 0);
  const int32_t n_vocab = stories().config.n_vocab;
  ASSERT_EQ(logits.size(), prompt.size() * static_cast<size_t>(n_vocab));

  Engine engine(stories(), small_options());
  Collector col;
  engine.add_request(col.request("plain", prompt, params));  // puts the prompt in the prefix cache
  engine.wait_until_idle();
  engine.add_request(col.request("scored", prompt, with, /*n=*/2));
  expect_all_blocks_free_or_cached(engine);
  const ChoiceResult plain = col.get("plain");
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const ChoiceResult c = col.get("scored", i);
    EXPECT_EQ(c.ids, plain.ids);
    EXPECT_EQ(c.prompt_info_events, 1);
    EXPECT_EQ(c.cached_tokens, 0);
    ASSERT_EQ(c.prompt_info.size(), prompt.size());
    EXPECT_EQ(c.prompt_info[0].id, prompt[0]);
    EXPECT_TRUE(std::isnan(c.prompt_info[0].logprob));
    EXPECT_TRUE(c.prompt_info[0].top.empty());
    for (size_t p = 1; p < prompt.size(); ++p) {
      const TokenInfo& t = c.prompt_info[p];
      EXPECT_EQ(t.id, prompt[p]);
      const float* row = logits.data() + (p - 1) * static_cast<size_t>(n_vocab);
      EXPECT_NEAR(t.logprob, -negative_log_likelihood(row, n_vocab, prompt[p]), 1e-4) << p;
      EXPECT_EQ(t.rank, 1 + std::count_if(row, row + n_vocab, [&](float v) { return v > row[prompt[p]]; })) << p;
      ASSERT_EQ(t.top.size(), 3u);
      EXPECT_EQ(t.top[0].first, Sampler::argmax(row, n_vocab)) << p;
      EXPECT_GE(t.top[0].second, t.top[1].second);
      EXPECT_GE(t.top[1].second, t.top[2].second);
      EXPECT_GE(t.top[0].second, t.logprob);
    }
  }
  EXPECT_TRUE(col.get("plain").prompt_info.empty());

  // max_tokens 0: the prompt scored, nothing drawn.
  SamplingParams only = with;
  only.max_tokens = 0;
  engine.add_request(col.request("only", prompt, only, /*n=*/2));
  expect_all_blocks_free_or_cached(engine);
  for (int i = 0; i < 2; ++i) {
    const ChoiceResult c = col.get("only", i);
    EXPECT_TRUE(c.finished);
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_TRUE(c.ids.empty());
    EXPECT_EQ(c.completion_tokens, 0);
    ASSERT_EQ(c.prompt_info.size(), prompt.size());
    for (size_t p = 1; p < prompt.size(); ++p)
      EXPECT_FLOAT_EQ(c.prompt_info[p].logprob, col.get("scored").prompt_info[p].logprob) << p;
  }
  SamplingParams bad = with;
  bad.prompt_logprobs = 21;
  EXPECT_THROW(engine.add_request(col.request("bad", prompt, bad)), Error);

  // With prompt-lookup drafts the prompt's rows are the same, and so are the tokens.
  EngineOptions o = small_options();
  o.speculative_tokens = 3;
  Engine speculative(stories(), o);
  speculative.add_request(col.request("speculative", prompt, with));
  expect_all_blocks_free_or_cached(speculative);
  const ChoiceResult sp = col.get("speculative");
  EXPECT_EQ(sp.ids, plain.ids);
  ASSERT_EQ(sp.prompt_info.size(), prompt.size());
  for (size_t p = 1; p < prompt.size(); ++p)
    EXPECT_FLOAT_EQ(sp.prompt_info[p].logprob, col.get("scored").prompt_info[p].logprob) << p;
}

// A control token's text is left out of the output unless the request asks to see it (a tool-call marker
// the server's parser reads): forced by logit_bias, BOS comes out as "" or as its text.
TEST(Engine, ShownControlTokensAppearInTheText) {
  std::mt19937 rng(12);
  const std::vector<int32_t> prompt = random_prompt(rng, 6);
  const Model& model = stories();
  const int32_t bos = model.tokenizer->bos();
  ASSERT_GE(bos, 0);
  SamplingParams params;
  params.max_tokens = 3;
  params.ignore_eos = true;
  params.logit_bias = {{bos, 100.0f}};
  Engine engine(model, small_options());
  Collector col;
  EngineRequest hidden = col.request("hidden", prompt, params);
  EngineRequest shown = col.request("shown", prompt, params);
  shown.shown_special_tokens = {bos};
  engine.add_request(std::move(hidden));
  engine.add_request(std::move(shown));
  expect_all_blocks_free_or_cached(engine);
  EXPECT_EQ(col.get("hidden").ids, std::vector<int32_t>(3, bos));
  EXPECT_EQ(col.get("hidden").text, "");
  const std::string piece = model.tokenizer->token_to_piece(bos, /*special=*/true);
  ASSERT_FALSE(piece.empty());
  EXPECT_EQ(col.get("shown").text, piece + piece + piece);
}

// Structured output through the engine, batched: every greedy token is the model's best among those the
// grammar allows at that point, by the Generator's own logits (teacher forcing, one token at a time) masked
// by a fresh matcher replaying the text; a finished reply is the schema's JSON; sampled choices forked from
// one prompt each follow the grammar too.
TEST(Engine, GrammarConstrainedRepliesAreTheBestAllowedTokens) {
  const Model& model = stories();
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
          "pet": {"enum": ["cat", "dog"]}}, "required": ["name", "age", "pet"]})");
  const std::shared_ptr<const Grammar> grammar = json_schema_grammar(schema);
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(random_prompt(rng, 5 + 7 * i));
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 240;
  SamplingParams sampled = greedy;
  sampled.temperature = 1;
  sampled.seed = 3;
  sampled.has_seed = true;
  Engine engine(model, small_options());
  Collector col;
  for (int i = 0; i < 4; ++i) {
    EngineRequest r = col.request(fmt::format("g{}", i), prompts[i], greedy);
    r.grammar = grammar;
    engine.add_request(std::move(r));
  }
  EngineRequest forked = col.request("s", prompts[1], sampled, 3);
  forked.grammar = grammar;
  engine.add_request(std::move(forked));
  expect_all_blocks_free_or_cached(engine);

  const GrammarTokenTable table(*model.tokenizer);
  int finished = 0;
  for (int i = 0; i < 4; ++i) {
    const ChoiceResult got = col.get(fmt::format("g{}", i));
    ASSERT_FALSE(got.ids.empty());
    std::vector<int32_t> ids = prompts[i];
    ids.insert(ids.end(), got.ids.begin(), got.ids.end());
    Generator g(model, {});
    const auto logits = g.teacher_forced_logits(ids, static_cast<int>(prompts[i].size()));
    GrammarMatcher replay(grammar, table);
    for (size_t t = 0; t < got.ids.size(); ++t) {
      // Row 0 follows the whole prompt, row t the prompt and the first t generated tokens.
      std::vector<float> row = logits[t];
      replay.mask(row.data(), static_cast<int32_t>(row.size()));
      ASSERT_EQ(got.ids[t], Sampler::argmax(row.data(), static_cast<int32_t>(row.size())))
          << "request " << i << " token " << t << " after '" << got.text << "'";
      ASSERT_TRUE(replay.accept(got.ids[t]));
    }
    if (got.finish_reason == "stop") {
      ++finished;
      EXPECT_TRUE(replay.done() || replay.can_end());
      const auto reply = nlohmann::json::parse(got.text);
      EXPECT_TRUE(reply["name"].is_string() && reply["age"].is_number_integer() && reply["pet"].is_string()) << got.text;
      EXPECT_LE(reply["name"].get<std::string>().size(), 6u * 4) << got.text;
    } else {
      EXPECT_EQ(got.finish_reason, "length");
    }
  }
  EXPECT_GE(finished, 3);
  for (int k = 0; k < 3; ++k) {
    const ChoiceResult got = col.get("s", k);
    GrammarMatcher replay(grammar, table);
    for (int32_t id : got.ids) ASSERT_TRUE(replay.accept(id)) << "choice " << k;
    if (got.finish_reason == "stop") {
      EXPECT_FALSE(nlohmann::json::parse(got.text, nullptr, false).is_discarded()) << got.text;
    }
  }
}

TEST(Engine, DestructorAbortsUnfinishedRequests) {
  std::mt19937 rng(3);
  SamplingParams params;
  params.max_tokens = 400;
  params.ignore_eos = true;
  Collector col;
  {
    Engine engine(stories(), small_options());
    engine.add_request(col.request("x", random_prompt(rng, 20), params));
    col.wait_tokens("x", 1);
  }
  EXPECT_TRUE(col.get("x").finished);
  EXPECT_EQ(col.get("x").finish_reason, "abort");
}
