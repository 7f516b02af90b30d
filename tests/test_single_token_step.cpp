// The single-token region (engine/single_token_step.cpp) against the per-op path: a decode step's logits
// and the K/V it writes must be the same bits, for every attention shape, weight type, KV element type
// and thread count, across contexts of several attention partitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench/phase_table.h"
#include "core/thread_pool.h"
#include "engine/kv_row_store.h"
#include "engine/model_runner.h"
#include "model/model.h"

using namespace kvserve;

namespace {

const std::string kShared = KVSERVE_SHARED_DIR;

// A model of the shared golden set, or of tests/golden/arch (architectures the shared set lacks).
std::string golden_model_path(const std::string& stem) {
  const std::string arch = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".gguf";
  return std::filesystem::exists(arch) ? arch : kShared + "/golden/gguf/models/" + stem + ".gguf";
}

// A paged cache of n_blocks blocks per layer, handed out in a scrambled order so block tables are not
// the identity. Gemma 4: each layer's rows its own size (layer_block_strides), a layer on another's KV reading its
// source's arrays.
struct TestCache {
  std::vector<std::vector<uint8_t>> k, v;
  std::vector<std::vector<H2OSlot>> records;  // per layer, with H2O eviction
  KVCacheView view;
  std::vector<int32_t> table;

  TestCache(const ModelConfig& c, const std::vector<KVElemType>& types, int block_size, int n_blocks, uint32_t seed) {
    view.block_size = block_size;
    const auto stride = [&](int l) {
      return int64_t{c.kv_heads_of(c.kv_source_layer(l))} * block_size * c.head_dim_of(l);
    };
    view.block_stride = stride(0);
    view.n_blocks = n_blocks;
    view.layer_types = types;
    for (int l = 0; l < c.n_layers; ++l) {
      if (!c.uniform_layers()) view.layer_block_strides.push_back(stride(l));
      const int src = c.kv_source_layer(l);
      const size_t bytes =
          src != l ? 0 : static_cast<size_t>(stride(l) * n_blocks) * (types[l] == KVElemType::F32 ? 4 : 2);
      k.emplace_back(bytes, 0);
      v.emplace_back(bytes, 0);
      view.k_layers.push_back(src != l ? view.k_layers[static_cast<size_t>(src)] : k.back().data());
      view.v_layers.push_back(src != l ? view.v_layers[static_cast<size_t>(src)] : v.back().data());
    }
    for (int b = 0; b < n_blocks; ++b) table.push_back(b);
    std::shuffle(table.begin(), table.end(), std::mt19937(seed));
  }
};

struct RegionCase {
  std::string stem;
  int threads;
  int block_size;
  int n_steps;
  StreamingEviction stream{};  // a streaming window on the full-attention layers (with sinks)
  HeavyHitterEviction h2o{};   // or H2O eviction on them
};

void PrintTo(const RegionCase& c, std::ostream* os) { *os << c.stem << "/t" << c.threads << "/bs" << c.block_size; }

class SingleTokenRegionTest : public ::testing::TestWithParam<RegionCase> {};

TEST_P(SingleTokenRegionTest, LogitsAndKVMatchPerOpPathBitForBit) {
  const RegionCase& p = GetParam();
  auto model = load_model(golden_model_path(p.stem));
  const ModelConfig& c = model->config;
  ThreadPool pool(p.threads);
  using Mode = ModelRunner::SingleTokenRegion;
  const Mode modes[] = {Mode::Off, Mode::On};
  // Every KV element type, mixed per layer.
  std::vector<KVElemType> types;
  for (int l = 0; l < c.n_layers; ++l)
    types.push_back(c.has_own_kv(l) ? std::vector<KVElemType>{KVElemType::F16, KVElemType::BF16,
                                                              KVElemType::F32}[(l + p.n_steps) % 3]
                                    : types[static_cast<size_t>(c.kv_source_layer(l))]);
  const int prompt_len = 7;
  const int n_blocks = (prompt_len + p.n_steps) / p.block_size + 2;
  std::vector<ModelRunner> runners;
  std::vector<TestCache> caches;
  for (Mode m : modes) {
    runners.emplace_back(*model, pool);
    runners.back().set_single_token_region(m);
    // Every model here is dense: a region mode that fell back to the per-op path would compare it with itself.
    ASSERT_EQ(runners.back().single_token_region_applies(), m != Mode::Off || p.threads == 1) << p.stem;
    caches.emplace_back(c, types, p.block_size, n_blocks, 7);
    TestCache& tc = caches.back();
    tc.view.streaming = p.stream;
    tc.view.h2o = p.h2o;
    for (int l = 0; l < c.n_layers && p.h2o.on(); ++l) {
      tc.records.emplace_back(static_cast<size_t>(n_blocks) * c.n_kv_heads * p.block_size);
      tc.view.h2o_records.push_back(c.is_swa_layer(l) ? nullptr : tc.records.back().data());
    }
  }
  std::mt19937 rng(11);
  std::vector<int32_t> tokens(prompt_len);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % c.n_vocab);
  std::vector<std::vector<float>> logits(std::size(modes));
  int64_t pos = 0;
  for (int step = 0; step <= p.n_steps; ++step) {
    // The region's matmul shares each way in turn, and every fourth step its attention and matmuls cut
    // unevenly, thread 0 the fast one and then the slow one (the parts as far from equal as they go), rather
    // than by the rates measured so far.
    using Shares = ModelRunner::RegionShares;
    const Shares shares[] = {Shares::Probed, Shares::Static, Shares::Stealing, Shares::Static};
    runners[1].set_region_shares(shares[step % 4]);
    if (step % 4 == 3) {
      std::vector<double> rates(static_cast<size_t>(p.threads), 1.0);
      rates[0] = step % 8 == 3 ? 100.0 : 0.01;
      runners[1].set_region_rates(rates);
    }
    for (size_t i = 0; i < std::size(modes); ++i) {
      BatchSequence s;
      s.tokens = tokens;
      s.pos0 = pos;
      s.block_table = caches[i].table;
      ASSERT_EQ(runners[i].forward({&s, 1}, caches[i].view, logits[i]), 1);
    }
    for (size_t i = 1; i < std::size(modes); ++i)
      ASSERT_EQ(std::memcmp(logits[0].data(), logits[i].data(), logits[0].size() * sizeof(float)), 0)
          << "mode " << i << " step " << step << " position " << pos;
    pos += static_cast<int64_t>(tokens.size());
    // Next token: the argmax (a text-like sequence) or, every 5th step, a random one.
    int32_t next = static_cast<int32_t>(std::max_element(logits[0].begin(), logits[0].end()) - logits[0].begin());
    if (step % 5 == 4) next = static_cast<int32_t>(rng() % c.n_vocab);
    tokens.assign(1, next);
  }
  for (size_t i = 1; i < std::size(modes); ++i)
    for (int l = 0; l < c.n_layers; ++l) {
      EXPECT_EQ(caches[0].k[l], caches[i].k[l]) << "K of layer " << l << ", mode " << i;
      EXPECT_EQ(caches[0].v[l], caches[i].v[l]) << "V of layer " << l << ", mode " << i;
      if (p.h2o.on()) {
        EXPECT_EQ(std::memcmp(caches[0].records[l].data(), caches[i].records[l].data(),
                              caches[0].records[l].size() * sizeof(H2OSlot)),
                  0)
            << "H2O records of layer " << l << ", mode " << i;
      }
    }
}

// The phase profile times every phase of every one-token step on each thread, counts exactly the bytes each
// phase reads (weights; attention's K and V rows of the positions attended, per layer's element type), and
// changes nothing the step computes. Prompts (several tokens) are not one-token steps and are not counted.
TEST(StepPhaseProfile, TimesEachPhaseAndCountsWhatItRead) {
  auto model = load_model(golden_model_path("tiny-gqa"));
  const ModelConfig& c = model->config;
  for (const int threads : {2, 3}) {
    ThreadPool pool(threads);
    ModelRunner plain(*model, pool), profiled(*model, pool);
    EXPECT_EQ(profiled.phase_profile(), nullptr);
    profiled.set_phase_profile(true);
    ASSERT_NE(profiled.phase_profile(), nullptr);
    ASSERT_TRUE(profiled.single_token_region_applies());
    std::vector<KVElemType> types;
    for (int l = 0; l < c.n_layers; ++l) types.push_back(l % 2 ? KVElemType::F16 : KVElemType::F32);
    const int prompt_len = 9, n_steps = 150;  // past one attention partition of 128
    const int n_blocks = (prompt_len + n_steps) / 16 + 2;
    TestCache plain_cache(c, types, 16, n_blocks, 3), profiled_cache(c, types, 16, n_blocks, 3);
    std::vector<int32_t> tokens(prompt_len, 5);
    std::vector<float> plain_logits, profiled_logits;
    double attention_bytes = 0;
    int64_t pos = 0;
    for (int step = 0; step <= n_steps; ++step) {
      BatchSequence s;
      s.tokens = tokens;
      s.pos0 = pos;
      s.block_table = plain_cache.table;
      ASSERT_EQ(plain.forward({&s, 1}, plain_cache.view, plain_logits), 1);
      ASSERT_EQ(profiled.forward({&s, 1}, profiled_cache.view, profiled_logits), 1);
      ASSERT_EQ(plain_logits, profiled_logits) << "step " << step;
      if (step == 0) {
        EXPECT_EQ(profiled.phase_profile()->steps(), 0) << "a prompt is not a one-token step";
      } else {
        for (int l = 0; l < c.n_layers; ++l)
          attention_bytes += static_cast<double>((pos + 1) * c.n_kv_heads * 2 * kv_row_bytes(types[l], c.head_dim));
      }
      pos += static_cast<int64_t>(tokens.size());
      tokens.assign(
          1, static_cast<int32_t>(std::max_element(plain_logits.begin(), plain_logits.end()) - plain_logits.begin()));
    }
    const StepPhaseProfile& p = *profiled.phase_profile();
    EXPECT_EQ(p.steps(), n_steps);
    ASSERT_EQ(p.threads(), threads);
    double qkv = 0, wo = 0, gate_up = 0, down = 0;
    for (const LayerWeights& L : model->layers) {
      qkv += static_cast<double>(L.wq.bytes() + L.wk.bytes() + L.wv.bytes());
      wo += static_cast<double>(L.wo.bytes());
      gate_up += static_cast<double>(L.w_gate.bytes() + L.w_up.bytes());
      down += static_cast<double>(L.w_down.bytes());
    }
    EXPECT_EQ(p.bytes(StepPhase::Qkv), n_steps * qkv);
    EXPECT_EQ(p.bytes(StepPhase::Wo), n_steps * wo);
    EXPECT_EQ(p.bytes(StepPhase::GateUp), n_steps * gate_up);
    EXPECT_EQ(p.bytes(StepPhase::Down), n_steps * down);
    EXPECT_EQ(p.bytes(StepPhase::Head), n_steps * static_cast<double>(model->output.bytes()));
    EXPECT_EQ(p.bytes(StepPhase::Attention), attention_bytes);
    EXPECT_EQ(p.bytes(StepPhase::Merge), 0);
    for (int t = 0; t < threads; ++t)
      for (const StepPhase ph : {StepPhase::Qkv, StepPhase::Attention, StepPhase::Merge, StepPhase::Wo,
                                 StepPhase::GateUp, StepPhase::Down, StepPhase::Head})
        EXPECT_GT(p.work_ns(t, ph), 0) << "thread " << t << " " << step_phase_name(ph);

    const bench::PhaseSummary sum = bench::summarize_phases(p);
    EXPECT_EQ(sum.steps, n_steps);
    ASSERT_EQ(sum.rows.size(), static_cast<size_t>(kStepPhases));
    double wall = 0;
    for (const bench::PhaseRow& r : sum.rows) {
      EXPECT_GT(r.wall_us, 0) << r.phase;
      EXPECT_EQ(r.work_us.size(), static_cast<size_t>(threads));
      EXPECT_NEAR(r.gb_s, r.bytes / (r.wall_us * 1e3), 1e-9 * (1 + r.gb_s)) << r.phase;
      wall += r.wall_us;
    }
    EXPECT_EQ(sum.rows[1].phase, "attention");
    EXPECT_NEAR(sum.rows[1].bytes, attention_bytes / n_steps, 1e-6);
    EXPECT_NEAR(sum.wall_us, wall, 1e-9 * wall);
    EXPECT_NE(bench::format_phases(sum).find("phase profile of 150 one-token steps"), std::string::npos);

    profiled.set_phase_profile(false);
    EXPECT_EQ(profiled.phase_profile(), nullptr);
  }
}

TEST(StepPhaseProfile, NoStepsSaysSo) {
  StepPhaseProfile p;
  p.reset(2);
  StepPhaseProfile::Clock off(nullptr, 0);
  off.work_done(StepPhase::Qkv);  // a no-op
  const bench::PhaseSummary sum = bench::summarize_phases(p);
  EXPECT_EQ(sum.steps, 0);
  EXPECT_TRUE(sum.rows.empty());
  EXPECT_NE(bench::format_phases(sum).find("no one-token step ran"), std::string::npos);
}

// Contexts past 128 positions (several partitions); MHA, GQA and MQA; F16, BF16, F32 and quantized weights
// (Q4_K_M and Q5_K_M with a Q6_K V beside Q4_K / Q5_K Q and K in some layers);
// qwen2's biases; qwen3's per-head q/k norms (and q wider than the embedding); Gemma 3's post-norms, GeGLU
// and sliding windows of 8 positions (local layers past whole partitions of 128); 8-wide heads (stories260K); 2 and 3
// threads, so KV heads and partitions split unevenly.
INSTANTIATE_TEST_SUITE_P(
    Models, SingleTokenRegionTest,
    ::testing::Values(RegionCase{"tiny-gqa-Q4_0", 2, 16, 300}, RegionCase{"tiny-gqa-Q8_0", 2, 32, 200},
                      RegionCase{"tiny-gqa-Q4_1", 2, 16, 140}, RegionCase{"tiny-gqa-Q4_K_M", 2, 16, 140},
                      RegionCase{"tiny-gqa-Q5_K_M", 3, 16, 140}, RegionCase{"tiny-gqa-Q6_K", 2, 16, 140},
                      RegionCase{"tiny-gqa-BF16", 2, 16, 140}, RegionCase{"tiny-mha", 2, 16, 260},
                      RegionCase{"tiny-mqa", 2, 16, 260}, RegionCase{"tiny-qwen2", 2, 16, 140},
                      RegionCase{"stories260K-Q4_1", 2, 16, 200}, RegionCase{"stories260K-F32", 2, 8, 140},
                      RegionCase{"tiny-gqa", 3, 16, 140}, RegionCase{"tiny-mqa", 3, 16, 140},
                      RegionCase{"tiny-qwen3", 2, 16, 140}, RegionCase{"tiny-qwen3", 3, 16, 140},
                      RegionCase{"tiny-gemma3", 2, 16, 300}, RegionCase{"tiny-gemma3", 3, 8, 160},
                      RegionCase{"tiny-gemma2", 2, 16, 200}, RegionCase{"tiny-gemma", 2, 16, 140},
                      RegionCase{"tiny-phi3", 2, 16, 140}, RegionCase{"tiny-phi3-longrope", 2, 16, 140},
                      RegionCase{"tiny-phi4", 2, 16, 140}, RegionCase{"tiny-smollm3", 2, 16, 140},
                      RegionCase{"tiny-granite", 2, 16, 140}, RegionCase{"tiny-mistral3", 2, 16, 140},
                      // Gemma 4: sliding and full layers of their own head sizes and KV heads, a layer whose
                      // values are its keys' projection, layers on earlier layers' KV, per-layer embeddings,
                      // output scales.
                      RegionCase{"tiny-gemma4", 2, 16, 200}, RegionCase{"tiny-gemma4", 3, 8, 160},
                      RegionCase{"tiny-gemma4", 2, 16, 160, {.window = 40, .sinks = 4}},
                      // Streaming windows with sinks: window starts mid-block and past whole partitions, sinks
                      // over one block and two, Gemma 3's local layers keeping their own window.
                      RegionCase{"tiny-gqa", 2, 16, 300, {.window = 40, .sinks = 4}},
                      RegionCase{"tiny-mqa", 3, 16, 260, {.window = 100, .sinks = 20}},
                      RegionCase{"tiny-gemma3", 2, 16, 200, {.window = 50, .sinks = 4}},
                      RegionCase{"stories260K-F32", 2, 8, 200, {.window = 30, .sinks = 3}},
                      RegionCase{"tiny-qwen3", 3, 16, 200, {.window = 130, .sinks = 0}},
                      // H2O: budgets that end mid-block and on a block, a KV head per thread and fewer heads
                      // than threads, Gemma 3's local layers beside the capped ones, q/k norms, soft-capping.
                      RegionCase{"tiny-gqa", 2, 16, 200, {}, {.heavy = 20, .recent = 13}},
                      RegionCase{"tiny-mqa", 3, 16, 160, {}, {.heavy = 16, .recent = 16}},
                      RegionCase{"tiny-gemma3", 2, 16, 140, {}, {.heavy = 10, .recent = 30}},
                      RegionCase{"tiny-gemma2", 2, 16, 140, {}, {.heavy = 24, .recent = 8}},
                      RegionCase{"stories260K-F32", 2, 8, 200, {}, {.heavy = 12, .recent = 20}},
                      RegionCase{"tiny-qwen3", 3, 16, 140, {}, {.heavy = 0, .recent = 40}}),
    [](const auto& info) {
      std::string n =
          info.param.stem + "_t" + std::to_string(info.param.threads) + "_bs" + std::to_string(info.param.block_size) +
          (info.param.stream.on() ? "_w" + std::to_string(info.param.stream.window) + "_s" +
                                        std::to_string(info.param.stream.sinks)
                                  : "") +
          (info.param.h2o.on() ? "_h" + std::to_string(info.param.h2o.heavy) + "_r" + std::to_string(info.param.h2o.recent)
                               : "");
      std::replace_if(
          n.begin(), n.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
      return n;
    });

}  // namespace
