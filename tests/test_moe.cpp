// Mixture of experts (Qwen3-MoE, Mixtral-style llama files): the router and its renormalized top-k matter
// (llama.cpp's logits are matched in test_golden.cpp; here, running fewer experts or skipping the
// renormalization misses them by far), bad expert metadata and tensors are named, and the weights a token
// reads count only the experts it runs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "test_checks.h"

using namespace kvserve;
using json = nlohmann::json;

namespace {

const std::string kArch = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/";

// Worst |logit - llama.cpp's| over the golden's first prompt's teacher-forced steps.
float worst_against_golden(const Model& m, const std::string& stem) {
  std::ifstream f(kArch + stem + ".jsonl");
  std::string line;
  std::getline(f, line);
  const json g = json::parse(line);
  auto seq = g["prompt_ids"].get<std::vector<int32_t>>();
  const size_t n_prompt = seq.size();
  const auto ids = g["generated_ids"].get<std::vector<int32_t>>();
  seq.insert(seq.end(), ids.begin(), ids.end() - 1);
  Generator gen(m, {.max_context = 512});
  const auto logits = gen.teacher_forced_logits(seq, static_cast<int>(n_prompt));
  float worst = 0;
  for (size_t s = 0; s < logits.size(); ++s)
    for (const auto& pair : g["step_logits_top"][s])
      worst = std::max(worst, std::fabs(logits[s][pair[0].get<int>()] - pair[1].get<float>()));
  return worst;
}

std::vector<uint8_t> qwen3moe_variant(const test::GgufEdit& e) { return test::edited_gguf(kArch + "tiny-qwen3moe.gguf", e); }


}  // namespace

TEST(Moe, LoadsTheExpertsAndTheRoutingMatters) {
  for (const char* stem : {"tiny-qwen3moe", "tiny-mixtral"}) {
    SCOPED_TRACE(stem);
    auto m = load_model(kArch + stem + ".gguf");
    const ModelConfig& c = m->config;
    ASSERT_TRUE(c.moe());
    EXPECT_EQ(c.n_expert, 4);
    EXPECT_EQ(c.n_expert_used, 2);
    EXPECT_EQ(c.n_ff_exp, 48);
    ASSERT_EQ(m->layers[1].down_exps.size(), 4u);
    EXPECT_EQ(m->layers[1].down_exps[3].ne[0], 48);
    EXPECT_EQ(m->layers[1].down_exps[3].ne[1], 64);
    EXPECT_LE(worst_against_golden(*m, stem), 1e-4f);
    // One expert a token instead of two (its weight renormalized to 1): far off.
    m->config.n_expert_used = 1;
    EXPECT_GT(worst_against_golden(*m, stem), 1e-2f);
    // All four experts, weighted by the full softmax: far off too.
    m->config.n_expert_used = 4;
    EXPECT_GT(worst_against_golden(*m, stem), 1e-2f);
  }
}

TEST(Moe, WeightBytesCountTheExpertsATokenRuns) {
  auto m = load_model(kArch + "tiny-qwen3moe.gguf");
  const size_t all = m->weight_bytes();
  // Each layer's 4 experts are 3 x 48 x 64 f32 each; a token reads 2 of them.
  m->config.n_expert_used = 4;
  EXPECT_EQ(m->weight_bytes() - all, 2u * 2u * 3u * 48u * 64u * 4u);
}

TEST(Moe, BadExpertMetadataAndTensorsAreNamed) {
  using test::expect_gguf_load_error;
  expect_gguf_load_error(qwen3moe_variant({.drop_keys = {"qwen3moe.expert_count"}}), "qwen3moe.expert_count");
  expect_gguf_load_error(qwen3moe_variant({.set_u32 = {{"qwen3moe.expert_used_count", 5}}}),
                         "expert_used_count 5 exceeds expert_count 4");
  expect_gguf_load_error(qwen3moe_variant({.set_u32 = {{"qwen3moe.expert_used_count", 0}}}), "expert_used_count");
  expect_gguf_load_error(qwen3moe_variant({.drop_tensor = "blk.1.ffn_down_exps.weight"}), "blk.1.ffn_down_exps.weight");
  expect_gguf_load_error(qwen3moe_variant({.drop_tensor = "blk.0.ffn_gate_exps.weight",
                                           .add_tensor = "blk.0.ffn_gate_exps.weight",
                                           .add_ne = {64, 48, 3}}),
                         "blk.0.ffn_gate_exps.weight");
  expect_gguf_load_error(qwen3moe_variant({.drop_tensor = "blk.0.ffn_gate_inp.weight",
                                           .add_tensor = "blk.0.ffn_gate_inp.weight",
                                           .add_ne = {64, 5}}),
                         "blk.0.ffn_gate_inp.weight");
  // Experts in an architecture without them.
  expect_gguf_load_error(test::edited_gguf(kArch + "tiny-qwen3.gguf", {.set_u32 = {{"qwen3.expert_count", 4}}}),
                         "not qwen3");
}

// A token's MoE FFN alone in its step (every chosen expert's gate/up in one pass, the downs cut over the
// threads) gives the bits of the same token among others (expert by expert on gathered rows): prompts run a
// token a step against whole, for softmax routing with renormalization, DeepSeek's shared experts and its
// sigmoid, biased, group-limited router.
TEST(Moe, OneTokenStepsGiveTheBitsOfManyTokenSteps) {
  for (const char* stem : {"tiny-qwen3moe", "tiny-deepseek2", "tiny-deepseek3"}) {
    auto m = load_model(kArch + stem + ".gguf");
    std::ifstream f(kArch + stem + ".jsonl");
    std::string line;
    std::getline(f, line);
    const json g = json::parse(line);
    auto seq = g["prompt_ids"].get<std::vector<int32_t>>();
    const auto ids = g["generated_ids"].get<std::vector<int32_t>>();
    seq.insert(seq.end(), ids.begin(), ids.end());
    const auto logits_with_chunk = [&](int chunk) {
      Generator gen(*m, {.max_context = 512, .prefill_chunk = chunk});
      return gen.prefill_logits(seq, 0);
    };
    const std::vector<float> whole = logits_with_chunk(512), single = logits_with_chunk(1);
    ASSERT_EQ(whole.size(), seq.size() * static_cast<size_t>(m->config.n_vocab));
    for (size_t i = 0; i < whole.size(); ++i)
      ASSERT_EQ(whole[i], single[i]) << stem << " position " << i / static_cast<size_t>(m->config.n_vocab);
  }
}
