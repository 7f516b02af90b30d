// DeepSeek-V2's multi-head latent attention (engine/mla_attention.cpp) beyond llama.cpp's goldens
// (test_golden.cpp): the cache holds the textbook latent row per token and layer, quantized latent caches
// track the f32 one, and the loader names what is wrong with a bad file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "kv/kv_calc.h"
#include "kv/kv_layout.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/model.h"
#include "test_checks.h"

namespace kvserve {
namespace {

using json = nlohmann::json;

const std::string kArch = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch";

std::vector<int32_t> golden_sequence(const std::string& stem, int* prompt_len) {
  std::ifstream in(kArch + "/" + stem + ".jsonl");
  std::string line;
  std::getline(in, line);
  const json g = json::parse(line);
  std::vector<int32_t> ids = g["prompt_ids"].get<std::vector<int32_t>>();
  *prompt_len = static_cast<int>(ids.size());
  for (int32_t t : g["generated_ids"].get<std::vector<int32_t>>()) ids.push_back(t);
  return ids;
}

// Per token and layer the cache keeps kv_lora_rank + n_rot values and nothing else: no V array, no per-head
// keys. The decompressed heads would take 2 x heads x head size (tiny-deepseek2: 4 x 24 keys + 4 x 16 values
// = 160 values against the latent's 32); kv-calc reads the same figure from the file.
TEST(MLA, CacheHoldsOneLatentRowPerTokenAndLayer) {
  auto m = load_model(kArch + "/tiny-deepseek2.gguf");
  const ModelConfig& c = m->config;
  ASSERT_TRUE(c.mla());
  EXPECT_EQ(c.kv_lora_rank, 24);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.head_dim_v, 16);
  EXPECT_EQ(c.kv_row_dim(), 32);
  for (KVCacheDType dtype : {KVCacheDType::F32, KVCacheDType::F16, KVCacheDType::INT8}) {
    GeneratorOptions o;
    o.kv_cache_memory = 1.0 * 1024 * 1024;
    o.kv_cache_dtype = dtype;
    o.max_context = 256;
    Generator gen(*m, o);
    const PagedKVCache& kv = gen.kv_cache();
    EXPECT_FALSE(kv.storage->has_v());
    EXPECT_EQ(kv.storage->head_dim(), 32);
    const uint64_t row = kv_dtype_row_bytes(dtype, 32);  // int8: 32 values and one f16 scale
    EXPECT_EQ(kv.bytes_per_block, uint64_t{16} * c.n_layers * row) << kv_dtype_name(dtype);
  }
  const GGUFFile f(kArch + "/tiny-deepseek2.gguf");
  const KVModelShape shape = kv_shape_from_gguf(f);
  EXPECT_EQ(shape.kind, AttentionKind::MLA);
  EXPECT_EQ(shape.head_dim, 16);  // the heads' nope part (key_length_mla 24 - rope 8), not the latent's 24
  EXPECT_EQ(KVLayout::mla(shape.n_layers, shape.kv_lora_rank, shape.rope_dim, KVCacheDType::F16).bytes_per_token(),
            uint64_t{3} * 32 * 2);
}

// The older file layout (one attn_kv_b, turned into the absorbed form at load) caches the same latent rows.
TEST(MLA, OlderKvbFilesLoadIntoTheSameAbsorbedForm) {
  auto m = load_model(kArch + "/tiny-deepseek2-kvb.gguf");
  const ModelConfig& c = m->config;
  ASSERT_TRUE(c.mla());
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.n_kv_heads, 1);
  ASSERT_EQ(m->layers[1].wk_b.size(), 4u);
  EXPECT_EQ(m->layers[1].wk_b[0].cols(), c.qk_nope_dim());
  EXPECT_EQ(m->layers[1].wk_b[0].rows(), c.kv_lora_rank);
  EXPECT_EQ(m->layers[1].wv_b[3].rows(), c.head_dim_v);
  EXPECT_FALSE(c.moe_layer(0));
  EXPECT_TRUE(c.moe_layer(1));
}

// Quantized latent caches against the f32 one, teacher-forced over a golden sequence. tiny-deepseek3's rows
// (56 + 8 = 64 values) are stored under the Hadamard rotation, tiny-deepseek2's (32) are not: both paths.
TEST(MLA, QuantizedLatentCachesTrackF32Logits) {
  for (const std::string stem : {"tiny-deepseek2", "tiny-deepseek3"}) {
    auto m = load_model(kArch + "/" + stem + ".gguf");
    int prompt_len = 0;
    const std::vector<int32_t> ids = golden_sequence(stem, &prompt_len);
    const auto logits_with = [&](KVCacheDType dtype) {
      GeneratorOptions o;
      o.kv_cache_memory = 1.0 * 1024 * 1024;
      o.kv_cache_dtype = dtype;
      o.max_context = 256;
      Generator gen(*m, o);
      auto l = gen.teacher_forced_logits(ids, prompt_len);
      test::expect_all_blocks_free_or_cached(gen);
      return l;
    };
    const auto ref = logits_with(KVCacheDType::F32);
    const auto am = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    // Bounds on the mean |logit difference| and the share of steps whose argmax agrees. The routers of these
    // random MoE models flip experts on small changes, so single logits can move far; a cache whose q and row
    // disagree (q left unrotated under a rotated int8 row, tried) lands at a mean of 4 and no agreeing step.
    struct Expect {
      KVCacheDType dtype;
      double max_mean;
      double min_same;
    };
    for (const Expect& e : {Expect{KVCacheDType::F16, 0.01, 1.0}, Expect{KVCacheDType::BF16, 0.06, 0.95},
                            Expect{KVCacheDType::INT8, 0.25, 0.85}, Expect{KVCacheDType::FP8_E4M3, 1.0, 0.55},
                            Expect{KVCacheDType::INT4, 2.5, 0.3}}) {
      const auto q = logits_with(e.dtype);
      ASSERT_EQ(q.size(), ref.size());
      double sum = 0, n = 0;
      size_t same = 0;
      for (size_t s = 0; s < ref.size(); ++s) {
        for (size_t i = 0; i < ref[s].size(); ++i) sum += std::fabs(ref[s][i] - q[s][i]);
        n += static_cast<double>(ref[s].size());
        same += am(ref[s]) == am(q[s]);
      }
      const std::string what = stem + " " + std::string(kv_dtype_name(e.dtype));
      EXPECT_LE(sum / n, e.max_mean) << what;
      EXPECT_GT(sum, 0.0) << what << ": the cache dtype changed nothing";
      EXPECT_GE(static_cast<double>(same), e.min_same * static_cast<double>(ref.size())) << what;
    }
  }
}

TEST(MLA, BadFilesAreNamed) {
  const std::string path = kArch + "/tiny-deepseek2.gguf";
  test::expect_gguf_load_error(test::edited_gguf(path, {.drop_keys = {"deepseek2.attention.kv_lora_rank"}}),
                               "deepseek2.attention.kv_lora_rank");
  test::expect_gguf_load_error(test::edited_gguf(path, {.set_u32 = {{"deepseek2.expert_gating_func", 3}}}),
                               "expert_gating_func 3");
  test::expect_gguf_load_error(test::edited_gguf(path, {.set_u32 = {{"deepseek2.leading_dense_block_count", 9}}}),
                               "leading_dense_block_count 9");
  test::expect_gguf_load_error(test::edited_gguf(path, {.set_u32 = {{"deepseek2.rope.dimension_count", 24}}}),
                               "rope.dimension_count 24");
  test::expect_gguf_load_error(test::edited_gguf(path, {.drop_tensor = "blk.2.attn_k_b.weight",
                                                        .add_tensor = "blk.2.attn_k_b.weight",
                                                        .add_ne = {16, 24, 3}}),
                               "blk.2.attn_k_b.weight");
  test::expect_gguf_load_error(test::edited_gguf(path, {.drop_tensor = "blk.1.ffn_up_shexp.weight"}),
                               "blk.1.ffn_up_shexp.weight");
  test::expect_gguf_load_error(test::edited_gguf(path, {.set_u32 = {{"deepseek2.expert_group_count", 3}}}),
                               "groups");
}

}  // namespace
}  // namespace kvserve
