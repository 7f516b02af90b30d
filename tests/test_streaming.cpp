// StreamingLLM eviction (attention sinks + a window): the sink merge against a dense softmax over the same
// positions, the cache manager's sink blocks, and whole-model runs of stories260K past its 512-token
// context against an independent reference (tests/golden/streaming, scripts/make_streaming_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/long_rope.h"
#include "engine/paged_kv_cache.h"
#include "kernels/cpu/attention_sinks.h"
#include "kernels/cpu/paged_attention.h"
#include "kv/kv_cache_manager.h"
#include "model/loaders.h"
#include "stories_model.h"
#include "test_checks.h"

using namespace kvserve;

namespace {

struct SinkCase {
  int n_heads, n_kv_heads, head_dim, block_size;
  int64_t pos0;
  int n_tokens;
  int64_t window, sinks;
};

// Dense K/V [pos][kv_head][dim] scattered into shuffled blocks; q and q_sink random.
struct SinkFixture {
  std::vector<float> q, q_sink, k_dense, v_dense, k_cache, v_cache;
  std::vector<int32_t> table;
  int64_t block_stride = 0;
};

SinkFixture make_sink_fixture(const SinkCase& c, std::mt19937& rng) {
  const int64_t seq_len = c.pos0 + c.n_tokens;
  const int64_t n_logical = (seq_len + c.block_size - 1) / c.block_size;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  SinkFixture f;
  f.q.resize(static_cast<size_t>(c.n_tokens) * c.n_heads * c.head_dim);
  f.q_sink.resize(f.q.size());
  for (auto& x : f.q) x = uni(rng);
  for (auto& x : f.q_sink) x = 2.0f * uni(rng);
  f.k_dense.resize(static_cast<size_t>(seq_len) * c.n_kv_heads * c.head_dim);
  f.v_dense.resize(f.k_dense.size());
  for (auto& x : f.k_dense) x = uni(rng);
  for (auto& x : f.v_dense) x = uni(rng);
  // Positions no token attends to (past the sinks, before every window) hold values that would show.
  for (int64_t p = c.sinks; p < c.pos0 - c.window + 1; ++p)
    for (int64_t i = 0; i < int64_t{c.n_kv_heads} * c.head_dim; ++i) {
      f.k_dense[static_cast<size_t>(p * c.n_kv_heads * c.head_dim + i)] = 50.0f;
      f.v_dense[static_cast<size_t>(p * c.n_kv_heads * c.head_dim + i)] = 1000.0f;
    }
  std::vector<int32_t> phys(static_cast<size_t>(n_logical * 2 + 1));
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  f.table.assign(phys.begin(), phys.begin() + n_logical);
  f.block_stride = int64_t{c.n_kv_heads} * c.block_size * c.head_dim;
  f.k_cache.assign(phys.size() * static_cast<size_t>(f.block_stride), 0.0f);
  f.v_cache.assign(f.k_cache.size(), 0.0f);
  for (int64_t p = 0; p < seq_len; ++p)
    for (int g = 0; g < c.n_kv_heads; ++g)
      for (int d = 0; d < c.head_dim; ++d) {
        const size_t dense = (static_cast<size_t>(p) * c.n_kv_heads + g) * c.head_dim + d;
        const size_t paged = f.table[p / c.block_size] * f.block_stride + int64_t{g} * c.block_size * c.head_dim +
                             (p % c.block_size) * c.head_dim + d;
        f.k_cache[paged] = f.k_dense[dense];
        f.v_cache[paged] = f.v_dense[dense];
      }
  return f;
}

// Softmax over the sinks (scored with q_sink) and the window (scored with q), in double; lse per head.
void dense_sink_attention(const SinkCase& c, const SinkFixture& f, double scale, std::vector<double>& out,
                          std::vector<double>& lse) {
  const int group = c.n_heads / c.n_kv_heads;
  const int hd = c.head_dim;
  out.assign(static_cast<size_t>(c.n_tokens) * c.n_heads * hd, 0.0);
  lse.assign(static_cast<size_t>(c.n_tokens) * c.n_heads, 0.0);
  for (int t = 0; t < c.n_tokens; ++t) {
    const int64_t p = c.pos0 + t;
    const int64_t w0 = std::max<int64_t>(0, p - c.window + 1);
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / group;
      std::vector<std::pair<int64_t, double>> scores;
      const auto score = [&](const std::vector<float>& q, int64_t j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d)
          dot += double(q[(size_t(t) * c.n_heads + h) * hd + d]) * f.k_dense[(size_t(j) * c.n_kv_heads + g) * hd + d];
        return dot * scale;
      };
      for (int64_t j = 0; j < std::min(c.sinks, w0); ++j) scores.emplace_back(j, score(f.q_sink, j));
      for (int64_t j = w0; j <= p; ++j) scores.emplace_back(j, score(f.q, j));
      double mx = -std::numeric_limits<double>::infinity();
      for (const auto& s : scores) mx = std::max(mx, s.second);
      double sum = 0;
      for (const auto& s : scores) sum += std::exp(s.second - mx);
      lse[size_t(t) * c.n_heads + h] = mx + std::log(sum);
      for (const auto& [j, s] : scores)
        for (int d = 0; d < hd; ++d)
          out[(size_t(t) * c.n_heads + h) * hd + d] +=
              std::exp(s - mx) / sum * f.v_dense[(size_t(j) * c.n_kv_heads + g) * hd + d];
    }
  }
}

}  // namespace

// The window's attention (every kernel path: one token split over partitions, many tokens, the scalar
// reference) with its lse, then the sinks folded in, against the dense softmax over both.
TEST(AttentionSinks, WindowThenSinksEqualsOneSoftmaxOverBoth) {
  const SinkCase cases[] = {
      {8, 4, 8, 16, 300, 1, 64, 4},     // stories260K's shape, decode far past the sinks
      {8, 4, 8, 16, 300, 37, 64, 4},    // a chunk
      {4, 1, 64, 16, 700, 1, 100, 20},  // MQA, sinks over two blocks, the window mid-block
      {4, 4, 32, 8, 40, 50, 30, 16},    // the chunk's first tokens still reach back to the sinks
      {8, 2, 16, 16, 2000, 3, 250, 1},  // many partitions before the window
      {2, 2, 8, 16, 0, 90, 20, 4},      // a prompt from position 0
  };
  ThreadPool pool(2);
  std::mt19937 rng(7);
  for (const SinkCase& c : cases) {
    const SinkFixture f = make_sink_fixture(c, rng);
    const double scale = 1.0 / std::sqrt(double(c.head_dim));
    std::vector<double> want, want_lse;
    dense_sink_attention(c, f, scale, want, want_lse);
    for (int path = 0; path < 2; ++path) {
      std::vector<float> out(want.size(), -7.0f), lse(want_lse.size(), -7.0f);
      PagedAttentionArgs a;
      a.q = f.q.data();
      a.out = out.data();
      a.n_tokens = c.n_tokens;
      a.n_heads = c.n_heads;
      a.n_kv_heads = c.n_kv_heads;
      a.head_dim = c.head_dim;
      a.block_table = f.table.data();
      a.block_size = c.block_size;
      a.pos0 = c.pos0;
      a.window = c.window;
      a.k_cache = f.k_cache.data();
      a.v_cache = f.v_cache.data();
      a.block_stride = f.block_stride;
      a.scale = static_cast<float>(scale);
      a.lse = lse.data();
      if (path == 0)
        paged_attention(a, pool);
      else
        paged_attention_ref(a);
      merge_attention_sinks(a, f.q_sink.data(), c.sinks, pool);
      double worst = 0, worst_lse = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(want[i] - out[i]));
      for (size_t i = 0; i < want_lse.size(); ++i) worst_lse = std::max(worst_lse, std::abs(want_lse[i] - lse[i]));
      EXPECT_LT(worst, 2e-5) << "pos0 " << c.pos0 << " tokens " << c.n_tokens << " path " << path;
      EXPECT_LT(worst_lse, 2e-5) << "pos0 " << c.pos0 << " tokens " << c.n_tokens << " path " << path;
    }
  }
}

TEST(AttentionSinks, NeedTheWindowsLse) {
  std::vector<float> q(8), out(8);
  std::vector<int32_t> table{0};
  std::vector<float> cache(128);
  PagedAttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  a.n_tokens = 1;
  a.n_heads = a.n_kv_heads = 1;
  a.head_dim = 8;
  a.block_table = table.data();
  a.pos0 = 5;
  a.k_cache = a.v_cache = cache.data();
  a.block_stride = 128;
  a.window = 2;
  EXPECT_ERROR_CONTAINS(merge_attention_sinks(a, q.data(), 2), "lse");
  a.window = 0;
  std::vector<float> lse(1);
  a.lse = lse.data();
  EXPECT_ERROR_CONTAINS(merge_attention_sinks(a, q.data(), 2), "window");
  EXPECT_EQ(sink_query_position(10, 4, 64), 10);
  EXPECT_EQ(sink_query_position(67, 4, 64), 67);
  EXPECT_EQ(sink_query_position(68, 4, 64), 67);
  EXPECT_EQ(sink_query_position(5000, 4, 64), 67);
}

// A windowed group with sinks keeps its first blocks and the window's, releases the rest, and a prefix hit
// needs both.
TEST(KVCacheManagerSinks, KeepsTheSinkBlocksAndTheWindow) {
  KVCacheManagerConfig cfg;
  cfg.num_blocks = 40;
  cfg.block_size = 16;
  cfg.group_windows = {40};
  cfg.group_sinks = {20};  // two blocks
  cfg.max_chunk_tokens = 16;
  KVCacheManager kv(cfg);
  std::vector<int32_t> tokens(400);
  std::iota(tokens.begin(), tokens.end(), 1);
  ASSERT_TRUE(kv.allocate_slots(1, 16));
  kv.cache_blocks(1, tokens, 16);
  for (int64_t n = 16; n < 400; ++n) {
    ASSERT_TRUE(kv.allocate_slots(1, 1)) << n;
    kv.cache_blocks(1, tokens, n + 1);
  }
  const BlockTable& t = kv.block_table(1);
  ASSERT_EQ(t.size(), 25u);
  // The next token (400) attends to [0, 20) and [361, 400]: blocks 0, 1 and 22..24.
  ASSERT_TRUE(kv.allocate_slots(1, 0));
  for (size_t i = 0; i < t.size(); ++i) {
    const bool held = i < 2 || i >= 22;
    EXPECT_EQ(t[i] != kv.null_block(), held) << i;
  }
  EXPECT_EQ(kv.num_held_blocks(1), 5);
  EXPECT_EQ(kv.pool().num_free_blocks(), 35);

  // A prompt repeating the sequence hits the cache: every block is still cached (released ones idle in the
  // free queue), and the hit takes only the sinks' and the window's.
  CachedPrefix hit = kv.get_computed_blocks(std::span<const int32_t>(tokens.data(), 390));
  EXPECT_EQ(hit.num_tokens, 384);
  ASSERT_EQ(hit.block_ids.size(), 24u);
  for (size_t i = 0; i < hit.block_ids.size(); ++i)
    EXPECT_EQ(hit.block_ids[i] != kv.null_block(), i < 2 || i >= 21) << i;
  EXPECT_EQ(hit.block_ids[0], t[0]);
  ASSERT_TRUE(kv.allocate_slots(2, 6, hit));
  EXPECT_EQ(kv.num_held_blocks(2), 2 + 3 + 1);
  kv.free(2);
  kv.free(1);
  EXPECT_EQ(kv.pool().num_free_blocks(), 40);

  // Once a sink block is evicted, no hit reaches past it.
  KVCacheManager small(cfg);
  ASSERT_TRUE(small.allocate_slots(1, 16));
  small.cache_blocks(1, tokens, 16);
  for (int64_t n = 16; n < 200; ++n) {
    ASSERT_TRUE(small.allocate_slots(1, 1));
    small.cache_blocks(1, tokens, n + 1);
  }
  const int32_t sink0 = small.block_table(1)[0];
  small.free(1);
  // Other sequences take every free block, the freed sequence's first block last (tail first on free).
  std::vector<int32_t> other(400, 7);
  int used = 0;
  for (SeqId s = 10; small.pool().block(sink0).hash; ++s, ++used) ASSERT_TRUE(small.allocate_slots(s, 1)) << s;
  EXPECT_GT(used, 0);
  EXPECT_EQ(small.get_computed_blocks(std::span<const int32_t>(tokens.data(), 150)).num_tokens, 0);
}

TEST(KVCacheManagerSinks, BadConfigsAreNamed) {
  KVCacheManagerConfig cfg;
  cfg.num_blocks = 8;
  cfg.group_windows = {0};
  cfg.group_sinks = {4};
  EXPECT_ERROR_CONTAINS(KVCacheManager{cfg}, "windowed group");
  cfg.group_windows = {16};
  cfg.group_sinks = {-1};
  EXPECT_ERROR_CONTAINS(KVCacheManager{cfg}, "negative");
  cfg.group_sinks = {4, 4};
  EXPECT_ERROR_CONTAINS(KVCacheManager{cfg}, "groups");
}

namespace {

const nlohmann::json& streaming_golden() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/streaming/stories260K.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

GeneratorOptions streaming_options(int64_t window, int64_t sinks, int chunk) {
  GeneratorOptions o;
  o.streaming = {window, sinks};
  o.prefill_chunk = chunk;
  o.kv_cache_memory = 4.0 * 1024 * 1024;
  return o;
}

}  // namespace

// stories260K over 1100 tokens of text (its context is 512), as one sequence in chunks of 37 and one token
// at a time: every position's next-token log-probability within 1e-4 of the reference, with sinks and
// window-only, and the whole logits where the reference kept them.
TEST(StreamingGolden, TextPastTheContextMatchesTheReference) {
  const Model& m = test::stories260k();
  const nlohmann::json& g = streaming_golden();
  const std::vector<int32_t> ids = g["text_ids"].get<std::vector<int32_t>>();
  const int nv = m.config.n_vocab;
  for (const char* key : {"text_sinks", "text_window_only"}) {
    const nlohmann::json& ref = g[key];
    const auto want = ref["next_token_logprobs"].get<std::vector<double>>();
    ASSERT_EQ(want.size() + 1, ids.size());
    Generator gen(m, streaming_options(ref["window"], ref["sinks"], 37));
    const std::vector<float> logits = gen.prefill_logits(ids, 0);
    ASSERT_EQ(logits.size(), ids.size() * static_cast<size_t>(nv));
    double worst = 0;
    int argmax_agree = 0;
    const auto argmax = ref["argmax"].get<std::vector<int>>();
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const float* z = logits.data() + i * static_cast<size_t>(nv);
      worst = std::max(worst, std::abs(test::log_softmax_at(z, nv, ids[i + 1]) - want[i]));
      argmax_agree += static_cast<int>(std::max_element(z, z + nv) - z) == argmax[i];
    }
    EXPECT_LT(worst, 1e-4) << key;
    EXPECT_GE(argmax_agree, static_cast<int>(want.size()) - 2) << key;
    for (const auto& [pos, row] : ref["logits_at"].items()) {
      const auto want_row = row.get<std::vector<double>>();
      const float* z = logits.data() + std::stoul(pos) * static_cast<size_t>(nv);
      double w = 0;
      for (int i = 0; i < nv; ++i) w = std::max(w, std::abs(want_row[static_cast<size_t>(i)] - z[i]));
      EXPECT_LT(w, 1e-4) << key << " position " << pos;
    }
    test::expect_all_blocks_free_or_cached(gen);
  }
  // One token a step (decode) for the first 700 positions, with sinks.
  const nlohmann::json& ref = g["text_sinks"];
  const auto want = ref["next_token_logprobs"].get<std::vector<double>>();
  Generator gen(m, streaming_options(ref["window"], ref["sinks"], 512));
  const std::vector<int32_t> head(ids.begin(), ids.begin() + 700);
  const auto rows = gen.teacher_forced_logits(head, 1);
  ASSERT_EQ(rows.size(), head.size());
  double worst = 0;
  for (size_t i = 0; i + 1 < head.size(); ++i)
    worst = std::max(worst, std::abs(test::log_softmax_at(rows[i].data(), nv, head[i + 1]) - want[i]));
  EXPECT_LT(worst, 1e-4);
}

// Greedy generation to 700 positions with sinks: the reference's tokens, and the cache held no more than
// the sinks' and the window's blocks.
TEST(StreamingGolden, GreedyPastTheContextMatchesTheReference) {
  const Model& m = test::stories260k();
  const nlohmann::json& ref = streaming_golden()["greedy"];
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto want = ref["generated_ids"].get<std::vector<int32_t>>();
  Generator gen(m, streaming_options(ref["window"], ref["sinks"], 512));
  SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  params.max_tokens = static_cast<int>(want.size());
  const GenerationResult r = gen.generate(prompt, params);
  EXPECT_EQ(r.generated_ids, want);
  test::expect_all_blocks_free_or_cached(gen);
}

// A window alone is the same numbers as a sliding-window model's layers: with the window past the whole
// sequence, streaming changes nothing.
TEST(StreamingGolden, AWindowPastTheSequenceChangesNothing) {
  const Model& m = test::stories260k();
  const nlohmann::json& g = streaming_golden();
  std::vector<int32_t> ids = g["text_ids"].get<std::vector<int32_t>>();
  ids.resize(300);
  Generator plain(m, {});
  Generator stream(m, streaming_options(400, 4, 512));
  EXPECT_EQ(plain.prefill_logits(ids, 0), stream.prefill_logits(ids, 0));
}

TEST(Streaming, BadSettingsAreNamed) {
  const Model& m = test::stories260k();
  GeneratorOptions o;
  o.streaming = {0, 4};
  EXPECT_ERROR_CONTAINS(Generator(m, o), "--streaming-window");
  o.streaming = {-3, 0};
  EXPECT_ERROR_CONTAINS(Generator(m, o), "negative");
  o.streaming = {64, 4};
  o.hybrid_kv_cache = false;
  EXPECT_ERROR_CONTAINS(Generator(m, o), "hybrid");
  o.hybrid_kv_cache = true;
  o.draft_model = &m;
  o.speculative_tokens = 2;
  EXPECT_ERROR_CONTAINS(Generator(m, o), "draft model");
}

// Multi-head latent attention (DeepSeek-V2) under streaming: the cached latent row is key and value, and the
// sinks' query turns only its q_pe part. Against the reference's decompressed heads (positions within the
// cache), over 700 tokens of text past the model's 512-token context: chunks of 37, and one token a step.
TEST(StreamingGolden, MlaPastTheContextMatchesTheReference) {
  auto m = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-deepseek2-kvb.gguf");
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/streaming/tiny-deepseek2-kvb.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  const std::vector<int32_t> ids = g["text_ids"].get<std::vector<int32_t>>();
  const nlohmann::json& ref = g["text_sinks"];
  const auto want = ref["next_token_logprobs"].get<std::vector<double>>();
  const int nv = m->config.n_vocab;
  Generator gen(*m, streaming_options(ref["window"], ref["sinks"], 37));
  const std::vector<float> logits = gen.prefill_logits(ids, 0);
  double worst = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    worst = std::max(worst,
                     std::abs(test::log_softmax_at(logits.data() + i * static_cast<size_t>(nv), nv, ids[i + 1]) - want[i]));
  EXPECT_LT(worst, 1e-4);
  test::expect_all_blocks_free_or_cached(gen);
  const auto rows = gen.teacher_forced_logits(ids, 1);
  worst = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    worst = std::max(worst, std::abs(test::log_softmax_at(rows[i].data(), nv, ids[i + 1]) - want[i]));
  EXPECT_LT(worst, 1e-4);
}

// Quantized latent caches under streaming: tiny-deepseek3's rows (64 values) are stored under the Hadamard
// rotation in int8, so the sinks' query turns with them; int8 tracks f32 as without eviction.
TEST(Streaming, QuantizedLatentRowsTrackF32) {
  auto m = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-deepseek3.gguf");
  std::vector<int32_t> ids = streaming_golden()["text_ids"].get<std::vector<int32_t>>();
  ids.resize(400);
  const int nv = m->config.n_vocab;
  const auto logits_with = [&](KVCacheDType dtype, int64_t window) {
    GeneratorOptions o = streaming_options(window, 4, 64);
    o.kv_cache_dtype = dtype;
    Generator gen(*m, o);
    return gen.prefill_logits(ids, 0);
  };
  const auto mean_diff = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += std::fabs(a[i] - b[i]);
    return sum / static_cast<double>(a.size());
  };
  const auto ref = logits_with(KVCacheDType::F32, 40);
  EXPECT_GT(mean_diff(ref, logits_with(KVCacheDType::F32, 1000)), 0.05) << "eviction changed nothing";
  const double full = mean_diff(logits_with(KVCacheDType::F32, 1000), logits_with(KVCacheDType::INT8, 1000));
  const double streamed = mean_diff(ref, logits_with(KVCacheDType::INT8, 40));
  EXPECT_GT(streamed, 0.0);
  EXPECT_LT(streamed, 2.0 * full + 0.02) << "without eviction " << full;
  (void)nv;
}

// LongRoPE's auto factors under streaming: the model sees no distance past sinks + window - 1, so the short
// factors stay while that fits the original context (no recompute), and the long ones come as before
// otherwise.
TEST(Streaming, LongRopeKeepsTheShortFactorsWhenTheWindowFitsTheOriginalContext) {
  auto m = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3-longrope.gguf");
  const int64_t original = m->config.rope_scaling.original_context;
  ASSERT_GT(original, 64);
  EXPECT_EQ(long_rope_after(m->config, LongRopeFactors::Auto, {.window = original - 4, .sinks = 4}), -1);
  EXPECT_EQ(long_rope_after(m->config, LongRopeFactors::Auto, {.window = original, .sinks = 4}), original);
  EXPECT_EQ(long_rope_after(m->config, LongRopeFactors::Long, {.window = 64, .sinks = 4}), 0);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + i * 7 % 200);
  SamplingParams params;
  params.max_tokens = static_cast<int>(original) + 60;
  params.ignore_eos = true;
  for (const int64_t window : {int64_t{64}, original + 10}) {
    Generator gen(*m, streaming_options(window, 4, 512));
    const GenerationResult r = gen.generate(prompt, params);
    EXPECT_EQ(r.generated_ids.size(), static_cast<size_t>(params.max_tokens));
    EXPECT_EQ(r.rope_restarts, window < original ? 0 : 1) << window;
  }
}
