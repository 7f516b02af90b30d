// gen-model's random llama GGUFs (model/random_model.h, model/gguf_writer.h): the written file loads with
// our loader and generates, its metadata round-trips (tokenizer keys copied from the vocabulary file,
// padding), the same weights written as F32 / F16 / Q8_0 give near-identical logits, quantized types
// fall back where the block size does not divide a row, and a seed gives the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/loaders.h"
#include "test_checks.h"
#include "model/model.h"
#include "model/random_model.h"

using namespace kvserve;

namespace {

const std::string kVocab = KVSERVE_SHARED_DIR "/models/llama-2-tiny-random/llama-2-tiny-random.gguf";

RandomModelSpec tiny_spec(DType type) {
  RandomModelSpec s;
  s.name = "tiny-random";
  s.n_embd = 64, s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.n_ff = 128, s.n_ctx = 256;
  s.weight_type = type;
  s.vocab_from = kVocab;
  s.seed = 42;
  return s;
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("kvserve-genmodel-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

std::string write_tiny(const TempDir& dir, const RandomModelSpec& s, const std::string& name) {
  const std::string path = dir.file(name);
  write_random_model(s, path);
  return path;
}

bool same_value(const GGUFValue& a, const GGUFValue& b, size_t elem_bytes) {
  if (a.type != b.type || a.u64 != b.u64 || a.i64 != b.i64 || a.f64 != b.f64 || a.str != b.str) return false;
  if (!a.is_array()) return true;
  if (a.elem_type != b.elem_type || a.count != b.count || a.strings != b.strings) return false;
  if (a.raw && b.raw && std::memcmp(a.raw, b.raw, elem_bytes * a.count) != 0) return false;
  return true;
}

}  // namespace

TEST(GenModel, WrittenFileLoadsAndGenerates) {
  TempDir dir;
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    RandomModelSpec s = tiny_spec(t);
    if (dtype_info(t).block_elems == 256) s.n_embd = 256, s.n_ff = 512;  // rows that the K-quants' 256-blocks divide
    const std::string path = write_tiny(dir, s, std::string(dtype_name(t)) + ".gguf");
    auto m = load_model(path);
    EXPECT_EQ(m->format, "gguf");
    EXPECT_EQ(m->config.n_embd, s.n_embd);
    EXPECT_EQ(m->config.n_layers, 2);
    EXPECT_EQ(m->config.n_heads, 4);
    EXPECT_EQ(m->config.n_kv_heads, 2);
    EXPECT_EQ(m->config.n_ff, s.n_ff);
    EXPECT_EQ(m->config.n_ctx_train, 256);
    EXPECT_EQ(m->config.n_vocab, 32000);
    EXPECT_TRUE(m->config.tied_output);
    EXPECT_EQ(m->layers[0].wq.type, t);
    EXPECT_EQ(m->layers[1].w_down.type, t);
    EXPECT_EQ(m->output_norm.type, DType::F32);
    if (cpu_has_avx2() && has_interleaved_layout(t)) {
      // Repacked into one buffer in forward order: each tensor starts where the one before it ends.
      const uint8_t* next = nullptr;
      for (const LayerWeights& L : m->layers)
        for (const Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
          const auto* start = static_cast<const uint8_t*>(w->interleaved);
          ASSERT_NE(start, nullptr) << w->name;
          if (next != nullptr) {
            EXPECT_EQ(start, next) << w->name;
          }
          next = start + (interleaved_bytes(*w) + 63) / 64 * 64;
        }
      EXPECT_EQ(m->output.interleaved, next);
    }

    GeneratorOptions go;
    go.max_context = 64;
    Generator gen(*m, go);
    SamplingParams sp;
    sp.max_tokens = 5;
    sp.ignore_eos = true;
    const std::vector<int32_t> prompt = m->tokenizer->encode("Hello world", true, false);
    ASSERT_GE(prompt.size(), 2u);
    GenerationResult r = gen.generate(prompt, sp);
    EXPECT_EQ(r.generated_ids.size(), 5u);
    for (int32_t id : r.generated_ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 32000);
    }
  }
}

// qwen3 and gemma3 files: the loader finds their q/k norms (and gemma3's post-norms and sliding window, every
// 6th layer global), and they generate.
TEST(GenModel, Qwen3AndGemma3FilesLoadWithTheirArchitecture) {
  TempDir dir;
  for (const char* arch : {"qwen3", "gemma3"}) {
    SCOPED_TRACE(arch);
    RandomModelSpec s = tiny_spec(DType::Q8_0);
    s.arch = arch;
    s.n_layers = 7;
    s.head_dim = 32;  // q is 128 wide, n_embd 64
    if (s.arch == "gemma3") s.sliding_window = 16;
    auto m = load_model(write_tiny(dir, s, std::string(arch) + ".gguf"));
    EXPECT_EQ(m->config.arch, arch);
    EXPECT_TRUE(m->config.qk_norm);
    EXPECT_EQ(m->config.head_dim, 32);
    EXPECT_TRUE(m->layers[6].q_norm.valid());
    EXPECT_EQ(m->config.post_norms, s.arch == "gemma3");
    if (s.arch == "gemma3") {
      EXPECT_EQ(m->config.sliding_window, 16);
      for (int l = 0; l < 7; ++l) EXPECT_EQ(m->config.is_swa_layer(l), l != 5) << l;
      EXPECT_TRUE(m->layers[3].ffn_post_norm.valid());
    }
    Generator gen(*m, {.max_context = 64});
    SamplingParams sp;
    sp.max_tokens = 40;
    sp.ignore_eos = true;
    EXPECT_EQ(gen.generate(m->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 40u);
  }
  RandomModelSpec bad = tiny_spec(DType::F16);
  bad.sliding_window = 8;  // llama has no sliding window
  EXPECT_THROW(plan_random_model(bad), Error);
  bad = tiny_spec(DType::F16);
  bad.arch = "gpt2";
  EXPECT_THROW(plan_random_model(bad), Error);
}

// qwen3moe: the experts' stacked tensors load as views, and the file generates. The Qwen3-30B-A3B preset has
// the real model's 30.5B parameters (its model card; 3.3B active).
TEST(GenModel, Qwen3MoeFilesLoadAndGenerate) {
  TempDir dir;
  RandomModelSpec s = tiny_spec(DType::Q8_0);
  s.arch = "qwen3moe";
  s.n_layers = 3;
  s.head_dim = 32;
  s.n_expert = 6;
  s.n_expert_used = 2;
  s.n_ff_exp = 32;
  auto m = load_model(write_tiny(dir, s, "moe.gguf"));
  EXPECT_EQ(m->config.arch, "qwen3moe");
  EXPECT_EQ(m->config.n_expert, 6);
  EXPECT_EQ(m->config.n_expert_used, 2);
  EXPECT_EQ(m->config.n_ff_exp, 32);
  ASSERT_EQ(m->layers[2].gate_exps.size(), 6u);
  EXPECT_EQ(m->layers[2].gate_exps[5].type, DType::Q8_0);
  Generator gen(*m, {.max_context = 64});
  SamplingParams sp;
  sp.max_tokens = 30;
  sp.ignore_eos = true;
  EXPECT_EQ(gen.generate(m->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);
  s.n_expert_used = 7;
  EXPECT_THROW(plan_random_model(s), Error);
  s.n_expert_used = 0;
  EXPECT_THROW(plan_random_model(s), Error);

  auto p = random_model_preset("qwen3-30b-a3b");
  ASSERT_TRUE(p);
  p->vocab_from = kVocab;
  EXPECT_NEAR(static_cast<double>(plan_random_model(*p).n_params) / 1e9, 30.5, 0.1);
}

// gpt-oss: sinks, biases, YaRN, the sliding window on the even layers and MXFP4 experts whatever the weight type,
// as llama.cpp's converter writes them; the file generates. The gpt-oss-20b preset has the real model's 20.9B
// parameters (its model card: 21B, 3.6B active).
TEST(GenModel, GptOssFilesLoadAndGenerate) {
  TempDir dir;
  RandomModelSpec s = tiny_spec(DType::Q8_0);
  s.arch = "gpt-oss";
  s.n_layers = 4, s.head_dim = 32, s.sliding_window = 8;
  s.n_expert = 4, s.n_expert_used = 2, s.n_ff_exp = 64;
  auto m = load_model(write_tiny(dir, s, "gpt-oss.gguf"));
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, "gpt-oss");
  EXPECT_TRUE(c.learned_sinks);
  EXPECT_EQ(c.ffn_act, FfnActivation::SwigluOai);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.swa_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(c.n_expert, 4);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_TRUE(m->unread_tensors.empty());
  const LayerWeights& L = m->layers[3];
  EXPECT_EQ(L.wq.type, DType::Q8_0);
  EXPECT_TRUE(L.bq.valid() && L.bo.valid() && L.attn_sinks.valid() && L.ffn_gate_inp_b.valid());
  ASSERT_EQ(L.down_exps.size(), 4u);
  EXPECT_EQ(L.gate_exps[1].type, DType::MXFP4);
  EXPECT_EQ(L.down_exps[3].type, DType::MXFP4);
  Generator gen(*m, {.max_context = 64});
  SamplingParams sp;
  sp.max_tokens = 30;
  sp.ignore_eos = true;
  EXPECT_EQ(gen.generate(m->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);
  s.n_ff_exp = 48;  // not whole MXFP4 blocks
  EXPECT_THROW(plan_random_model(s), Error);

  // One expert: its biases still {width, 1} matrices, as llama.cpp reads them.
  s.n_ff_exp = 64, s.n_expert = 1, s.n_expert_used = 1;
  const std::string one = write_tiny(dir, s, "gpt-oss-1.gguf");
  {
    const GGUFFile f(one);
    for (const char* name : {"blk.0.ffn_gate_exps.bias", "blk.0.ffn_up_exps.bias", "blk.0.ffn_down_exps.bias"}) {
      const GGUFTensorInfo* t = f.find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->n_dims, 2) << name;
      EXPECT_EQ(t->ne[1], 1) << name;
    }
  }
  auto single = load_model(one);
  EXPECT_TRUE(single->unread_tensors.empty());
  Generator one_gen(*single, {.max_context = 64});
  EXPECT_EQ(one_gen.generate(single->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);

  auto p = random_model_preset("gpt-oss-20b");
  ASSERT_TRUE(p);
  p->vocab_from = kVocab;
  EXPECT_NEAR(static_cast<double>(plan_random_model(*p).n_params) / 1e9, 20.9, 0.05);
}

// llama4: every moe_layer_step-th layer experts beside a shared one, the others dense; chunked attention and a
// NoPE layer in four, as llama.cpp reads such a file; it generates. The Llama-4-Scout preset has the real text
// model's 107.8B parameters (its model card's 109B count the vision encoder too; 17B active).
TEST(GenModel, Llama4FilesLoadAndGenerate) {
  TempDir dir;
  RandomModelSpec s = tiny_spec(DType::Q8_0);
  s.arch = "llama4";
  s.n_layers = 4, s.head_dim = 32;
  s.n_expert = 4, s.n_expert_used = 1, s.n_ff_exp = 64, s.moe_layer_step = 2;
  auto m = load_model(write_tiny(dir, s, "llama4.gguf"));
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, "llama4");
  EXPECT_EQ(c.moe_layer_step, 2);
  EXPECT_TRUE(c.swa_chunked && c.qk_l2_norm);
  EXPECT_EQ(c.sliding_window, 8192);
  EXPECT_EQ(c.nope_layers, (std::vector<bool>{false, false, false, true}));
  EXPECT_TRUE(m->unread_tensors.empty());
  EXPECT_TRUE(m->layers[0].w_down.valid());
  EXPECT_EQ(m->layers[1].gate_exps.size(), 4u);
  EXPECT_TRUE(m->layers[3].ffn_down_shexp.valid());
  Generator gen(*m, {.max_context = 64});
  SamplingParams sp;
  sp.max_tokens = 30;
  sp.ignore_eos = true;
  EXPECT_EQ(gen.generate(m->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);
  s.moe_layer_step = 0;
  EXPECT_THROW(plan_random_model(s), Error);
  s.moe_layer_step = 2;
  s.arch = "qwen3moe";  // the step is llama4's
  EXPECT_THROW(plan_random_model(s), Error);

  auto p = random_model_preset("llama-4-scout");
  ASSERT_TRUE(p);
  p->vocab_from = kVocab;
  EXPECT_NEAR(static_cast<double>(plan_random_model(*p).n_params) / 1e9, 107.8, 0.1);
}

TEST(GenModel, MetadataRoundTrips) {
  TempDir dir;
  RandomModelSpec s = tiny_spec(DType::F16);
  s.rope_base = 500000.0f;
  s.rms_eps = 1e-6f;
  s.tied_output = false;
  const std::string path = write_tiny(dir, s, "meta.gguf");
  GGUFFile f(path);
  GGUFFile v(kVocab);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_str("general.architecture"), "llama");
  EXPECT_EQ(f.get_str("general.name"), "tiny-random");
  EXPECT_EQ(f.get_u32("general.file_type"), 1u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_u32("llama.block_count"), 2u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count"), 4u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.get_u32("llama.feed_forward_length"), 128u);
  EXPECT_EQ(f.get_u32("llama.context_length"), 256u);
  EXPECT_EQ(f.get_u32("llama.rope.dimension_count"), 16u);
  EXPECT_EQ(f.get_u32("llama.vocab_size"), 32000u);
  EXPECT_FLOAT_EQ(f.get_f32("llama.rope.freq_base"), 500000.0f);
  EXPECT_FLOAT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-6f);

  // Every tokenizer key of the vocabulary file, unchanged and in the same order.
  std::vector<std::string> want_keys, got_keys;
  for (const auto& [k, val] : v.metadata())
    if (k.starts_with("tokenizer.")) want_keys.push_back(k);
  for (const auto& [k, val] : f.metadata())
    if (k.starts_with("tokenizer.")) got_keys.push_back(k);
  EXPECT_EQ(got_keys, want_keys);
  for (const std::string& k : want_keys) {
    const GGUFValue* a = v.find(k);
    const GGUFValue* b = f.find(k);
    ASSERT_NE(b, nullptr) << k;
    const size_t elem = a->elem_type == GGUFType::FLOAT32 || a->elem_type == GGUFType::INT32 ||
                                a->elem_type == GGUFType::UINT32
                            ? 4
                            : 1;
    EXPECT_TRUE(same_value(*a, *b, elem)) << k;
  }

  // Tensors: names, shapes and types as llama.cpp's converter writes them.
  auto tensor = [&](const std::string& name) {
    const GGUFTensorInfo* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t;
  };
  EXPECT_EQ(f.tensors().size(), 3u + 2 * 9);
  const GGUFTensorInfo* emb = tensor("token_embd.weight");
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 32000);
  EXPECT_EQ(emb->type, DType::F16);
  EXPECT_EQ(tensor("output.weight")->ne[1], 32000);
  EXPECT_EQ(tensor("blk.1.attn_k.weight")->ne[1], 32);
  EXPECT_EQ(tensor("blk.1.ffn_down.weight")->ne[0], 128);
  const GGUFTensorInfo* norm = tensor("blk.0.ffn_norm.weight");
  EXPECT_EQ(norm->type, DType::F32);
  for (int i = 0; i < 64; ++i) {
    float x;
    std::memcpy(&x, norm->data + 4 * i, 4);
    ASSERT_EQ(x, 1.0f);
  }
  for (const GGUFTensorInfo& t : f.tensors()) EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;

  auto m = load_model(path);
  EXPECT_FALSE(m->config.tied_output);
  EXPECT_FLOAT_EQ(m->config.rope_base, 500000.0f);
  const Vocab want = load_gguf_vocab(kVocab);
  EXPECT_EQ(m->vocab.tokens, want.tokens);
  EXPECT_EQ(m->vocab.bos_id, want.bos_id);
  EXPECT_EQ(m->vocab.eos_id, want.eos_id);
  EXPECT_EQ(m->tokenizer->encode("The quick brown fox", true, false),
            Tokenizer::create(want)->encode("The quick brown fox", true, false));
}

TEST(GenModel, VocabularyPadding) {
  RandomModelSpec s = tiny_spec(DType::F32);
  s.vocab_size = 32010;
  RandomModelPlan plan = plan_random_model(s);
  EXPECT_EQ(plan.n_vocab, 32010);
  const std::vector<uint8_t> bytes = plan.writer.to_bytes();
  auto f = std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), "padded");
  const auto tokens = f->get_str_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32010u);
  EXPECT_EQ(tokens[32000], "[PAD32000]");
  EXPECT_EQ(tokens[32009], "[PAD32009]");
  EXPECT_EQ(f->get_f32_array("tokenizer.ggml.scores").size(), 32010u);
  EXPECT_EQ(f->get_f32_array("tokenizer.ggml.scores")[32005], -1000.0f);
  EXPECT_EQ(f->get_i32_array("tokenizer.ggml.token_type")[32005], 5);
  auto m = load_gguf_model(f);
  EXPECT_EQ(m->config.n_vocab, 32010);
  EXPECT_EQ(m->tok_embd.ne[1], 32010);
  EXPECT_EQ(m->tokenizer->encode("Hello", true, false), load_model(kVocab)->tokenizer->encode("Hello", true, false));

  s.vocab_size = 100;  // smaller than the file's vocabulary
  EXPECT_THROW(plan_random_model(s), Error);
}

TEST(GenModel, F32F16AndQ8_0GiveNearIdenticalLogits) {
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<int32_t> ids;
  for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
    RandomModelPlan plan = plan_random_model(tiny_spec(t));
    const std::vector<uint8_t> bytes = plan.writer.to_bytes();
    auto m = load_gguf_model(std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), "tiny"));
    if (ids.empty()) ids = m->tokenizer->encode("Once upon a time there was a little robot", true, false);
    GeneratorOptions go;
    go.max_context = 64;
    Generator gen(*m, go);
    logits.push_back(gen.teacher_forced_logits(ids, 1));
  }
  ASSERT_EQ(logits[0].size(), ids.size());
  for (size_t k = 1; k < logits.size(); ++k) {
    SCOPED_TRACE(k == 1 ? "F16 vs F32" : "Q8_0 vs F32");
    double worst = 0, scale = 0;
    int same_argmax = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      const auto& a = logits[0][p];
      const auto& b = logits[k][p];
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) {
        worst = std::max(worst, static_cast<double>(std::fabs(a[j] - b[j])));
        scale = std::max(scale, static_cast<double>(std::fabs(a[j])));
      }
      same_argmax += std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
    }
    EXPECT_GT(scale, 0.1) << "logits should not be degenerate";
    EXPECT_LT(worst, (k == 1 ? 0.01 : 0.03) * scale) << "max |logit difference| " << worst << " of max |logit| " << scale;
    EXPECT_GE(same_argmax, static_cast<int>(ids.size()) - 1);
  }
}

TEST(GenModel, QuantizedTypesFallBackWhereBlocksDoNotFit) {
  EXPECT_EQ(fallback_weight_type(DType::Q4_K, 576), DType::Q4_0);
  EXPECT_EQ(fallback_weight_type(DType::Q4_K, 1536), DType::Q4_K);
  EXPECT_EQ(fallback_weight_type(DType::Q8_0, 48), DType::F16);
  EXPECT_EQ(fallback_weight_type(DType::IQ4_XS, 576), DType::IQ4_NL);  // as llama.cpp's quantize tool
  EXPECT_EQ(fallback_weight_type(DType::IQ4_XS, 48), DType::F16);
  RandomModelSpec s = tiny_spec(DType::Q4_K);  // hidden 64, ffn 128: no row is a multiple of 256
  RandomModelPlan plan = plan_random_model(s);
  EXPECT_FALSE(plan.notes.empty());
  const std::vector<uint8_t> bytes = plan.writer.to_bytes();
  GGUFFile f(bytes.data(), bytes.size(), "fallback");
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, DType::Q4_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, DType::Q4_0);
}

// deepseek2: MLA and shared experts after a dense layer load as the file says, the cache holds the latent rows,
// and the file generates. The DeepSeek-V2-Lite preset has the real model's 15.7B parameters (its model card).
TEST(GenModel, DeepseekFilesLoadAndGenerate) {
  TempDir dir;
  RandomModelSpec s = tiny_spec(DType::Q8_0);
  s.arch = "deepseek2";
  s.n_layers = 3;
  s.kv_lora_rank = 64, s.q_lora_rank = 32, s.qk_nope_dim = 32, s.qk_rope_dim = 32, s.v_head_dim = 32;
  s.n_expert = 6, s.n_expert_used = 2, s.n_ff_exp = 32, s.n_expert_shared = 1, s.n_dense_lead = 1;
  auto m = load_model(write_tiny(dir, s, "ds.gguf"));
  const ModelConfig& c = m->config;
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.kv_row_dim(), 96);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_expert_shared, 1);
  EXPECT_FALSE(c.moe_layer(0));
  EXPECT_TRUE(c.moe_layer(2));
  ASSERT_EQ(m->layers[2].wk_b.size(), static_cast<size_t>(s.n_heads));
  EXPECT_TRUE(m->layers[2].ffn_up_shexp.valid());
  for (KVCacheDType dtype : {KVCacheDType::F16, KVCacheDType::INT8}) {  // int8: 96-value rows, not rotated
    Generator gen(*m, {.kv_cache_dtype = dtype, .max_context = 64});
    EXPECT_EQ(gen.kv_cache().bytes_per_block, 16u * 3u * kv_dtype_row_bytes(dtype, 96));
    SamplingParams sp;
    sp.max_tokens = 30;
    sp.ignore_eos = true;
    EXPECT_EQ(gen.generate(m->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);
  }
  s.n_dense_lead = 4;
  EXPECT_THROW(plan_random_model(s), Error);
  s.n_dense_lead = 1;
  s.qk_rope_dim = 31;
  EXPECT_THROW(plan_random_model(s), Error);

  auto p = random_model_preset("deepseek-v2-lite");
  ASSERT_TRUE(p);
  p->vocab_from = kVocab;
  EXPECT_NEAR(static_cast<double>(plan_random_model(*p).n_params) / 1e9, 15.7, 0.05);
}

TEST(GenModel, PresetsAndSeeds) {
  auto p = random_model_preset("llama-3.2-1b");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->n_embd, 2048);
  EXPECT_EQ(p->n_layers, 16);
  EXPECT_EQ(p->n_heads, 32);
  EXPECT_EQ(p->n_kv_heads, 8);
  EXPECT_EQ(p->n_ff, 8192);
  auto q = random_model_preset("smollm2-135m");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->n_embd, 576);
  EXPECT_EQ(q->n_layers, 30);
  EXPECT_EQ(q->n_heads, 9);
  EXPECT_EQ(q->n_kv_heads, 3);
  EXPECT_EQ(q->n_ff, 1536);
  EXPECT_FALSE(random_model_preset("gpt-5"));
  // Parameter counts of the real models (their model cards: Qwen3-0.6B 0.6B, of which 0.44B not embedding;
  // Gemma 3 1B 1.0B) with their vocabulary sizes.
  for (auto [name, want_m] : {std::pair<const char*, double>{"qwen3-0.6b", 596.0}, {"gemma-3-1b", 999.9}}) {
    auto r = random_model_preset(name);
    ASSERT_TRUE(r) << name;
    r->vocab_from = kVocab;
    EXPECT_NEAR(static_cast<double>(plan_random_model(*r).n_params) / 1e6, want_m, 1.0) << name;
  }

  // The smollm2-135m shapes with the real parameter count (134.5M with its 49152-token vocabulary).
  q->vocab_from = kVocab;
  q->weight_type = DType::Q8_0;
  RandomModelPlan plan = plan_random_model(*q);
  EXPECT_EQ(plan.n_vocab, 49152);
  EXPECT_NEAR(static_cast<double>(plan.n_params) / 1e6, 134.5, 0.1);

  RandomModelSpec s = tiny_spec(DType::Q8_0);
  const std::vector<uint8_t> a = plan_random_model(s).writer.to_bytes();
  const std::vector<uint8_t> b = plan_random_model(s).writer.to_bytes();
  EXPECT_EQ(a, b);
  s.seed = 43;
  EXPECT_NE(plan_random_model(s).writer.to_bytes(), a);
}

TEST(GenModel, BadSpecsAreErrors) {
  RandomModelSpec s = tiny_spec(DType::F16);
  s.n_kv_heads = 3;  // 4 heads
  EXPECT_THROW(plan_random_model(s), Error);
  s = tiny_spec(DType::Q3_K);  // no quantizer for it
  EXPECT_THROW(plan_random_model(s), Error);
  s = tiny_spec(DType::F16);
  s.vocab_from = "/nonexistent.gguf";
  EXPECT_THROW(plan_random_model(s), Error);
  s = tiny_spec(DType::F16);
  s.n_layers = 0;
  EXPECT_THROW(plan_random_model(s), Error);
}

TEST(GGUFWriterTest, ScalarsArraysAndCopiedValuesRoundTrip) {
  GGUFWriter w;
  w.add_u8("a.u8", 7);
  w.add_u32("a.u32", 123456);
  w.add_i32("a.i32", -5);
  w.add_u64("a.u64", 1ull << 40);
  w.add_f32("a.f32", 1.5f);
  w.add_bool("a.bool", true);
  w.add_str("a.str", "héllo");
  w.add_str_array("a.strs", {"x", "", "yz"});
  w.add_f32_array("a.f32s", {1.0f, -2.0f});
  w.add_i32_array("a.i32s", {3, -4, 5});
  EXPECT_THROW(w.add_u32("a.u32", 1), Error);
  w.add_tensor("t", DType::F32, {4, 2}, std::vector<uint8_t>(32, 0));
  EXPECT_THROW(w.add_tensor("t", DType::F32, {4}, std::vector<uint8_t>(16, 0)), Error);
  EXPECT_THROW(w.add_tensor("q", DType::Q8_0, {48}, std::vector<uint8_t>(51, 0)), Error);  // 48 % 32
  EXPECT_THROW(w.add_tensor("r", DType::F32, {4}, std::vector<uint8_t>(15, 0)), Error);    // wrong size
  const std::vector<uint8_t> bytes = w.to_bytes();
  EXPECT_EQ(bytes.size(), w.file_size());
  GGUFFile f(bytes.data(), bytes.size(), "writer");
  EXPECT_EQ(f.get_u32("a.u32"), 123456u);
  EXPECT_EQ(f.get_i32("a.i32"), -5);
  EXPECT_EQ(f.get_u64("a.u64"), 1ull << 40);
  EXPECT_FLOAT_EQ(f.get_f32("a.f32"), 1.5f);
  EXPECT_TRUE(f.get_bool("a.bool"));
  EXPECT_EQ(f.get_str("a.str"), "héllo");
  EXPECT_EQ(f.get_str_array("a.strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f.get_f32_array("a.f32s"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(f.get_i32_array("a.i32s"), (std::vector<int32_t>{3, -4, 5}));
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].ne[1], 2);

  // Copy every value into a second file: identical metadata section.
  GGUFWriter w2;
  for (const auto& [k, v] : f.metadata()) w2.add_value(k, v);
  w2.add_tensor("t", DType::F32, {4, 2}, std::vector<uint8_t>(32, 0));
  EXPECT_EQ(w2.to_bytes(), bytes);
}

// A copy of tiny-phi3 with one tensor changed: loading it must fail naming what is wrong, never crash.
namespace {
std::vector<uint8_t> phi3_variant(const std::string& drop, const std::string& add_name, const std::vector<int64_t>& ne) {
  return test::edited_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3.gguf",
                           {.drop_tensor = drop, .add_tensor = add_name, .add_ne = ne});
}

}  // namespace

TEST(GenModel, Phi3FusedTensorsAndLongRopeFactorsOfTheWrongShapeAreNamed) {
  // ffn_up must hold 2 x 160 rows (gate and up); q/k/v together (4 + 2 + 2) x 16 = 128.
  test::expect_gguf_load_error(phi3_variant("blk.1.ffn_up.weight", "blk.1.ffn_up.weight", {64, 160}), "blk.1.ffn_up.weight");
  test::expect_gguf_load_error(phi3_variant("blk.0.attn_qkv.weight", "blk.0.attn_qkv.weight", {64, 96}), "attn_qkv.weight");
  // LongRoPE factors (zeros here) must be positive, and one per rotated pair (16 / 2).
  test::expect_gguf_load_error(phi3_variant("", "rope_factors_long.weight", {8}), "factors must be positive");
  test::expect_gguf_load_error(phi3_variant("", "rope_factors_short.weight", {6}), "must be F32 [8]");
  // Without the fused q/k/v the separate ones are required.
  test::expect_gguf_load_error(phi3_variant("blk.2.attn_qkv.weight", "", {}), "blk.2.attn_q.weight");
}

// Gemma 4: sliding and full layers of their own head sizes and KV heads, the last layers on earlier layers' KV (no
// K / V tensors of their own), per-layer embeddings; and the MoE variant's experts (fused gate / up) beside the dense
// FFN. (llama.cpp 0.3.36 read such files, F32, within 1e-3 of these logits, checked by hand.)
TEST(GenModel, Gemma4FilesLoadAndGenerate) {
  TempDir dir;
  RandomModelSpec s = tiny_spec(DType::Q8_0);
  s.arch = "gemma4";
  s.n_layers = 6, s.head_dim = 64, s.head_dim_swa = 32, s.n_kv_heads = 2, s.n_kv_heads_full = 1;
  s.sliding_window = 8, s.swa_period = 3, s.n_kv_shared_layers = 3, s.n_embd_per_layer = 32;
  auto m = load_model(write_tiny(dir, s, "gemma4.gguf"));
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, "gemma4");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.head_dim_swa, 32);
  EXPECT_EQ(c.layer_kv_heads, (std::vector<int>{2, 2, 1, 2, 2, 1}));
  EXPECT_EQ(c.swa_layers, (std::vector<bool>{true, true, false, true, true, false}));
  EXPECT_EQ(c.kv_source_layer(3), 1);
  EXPECT_EQ(c.kv_source_layer(5), 2);
  EXPECT_EQ(c.n_embd_per_layer, 32);
  EXPECT_EQ(c.rope_scaling.freq_factors.size(), 32u);
  EXPECT_TRUE(m->unread_tensors.empty());
  EXPECT_FALSE(m->layers[2].wv.valid());
  EXPECT_FALSE(m->layers[4].wk.valid());
  Generator gen(*m, {.max_context = 64});
  SamplingParams sp;
  sp.max_tokens = 30;
  sp.ignore_eos = true;
  EXPECT_EQ(gen.generate(m->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);

  RandomModelSpec moe = s;
  moe.n_kv_shared_layers = 0, moe.n_embd_per_layer = 0;
  moe.n_expert = 4, moe.n_expert_used = 2, moe.n_ff_exp = 64;
  auto mm = load_model(write_tiny(dir, moe, "gemma4-moe.gguf"));
  EXPECT_TRUE(mm->config.moe_dense_branch);
  EXPECT_TRUE(mm->unread_tensors.empty());
  EXPECT_EQ(mm->layers[0].gate_exps.size(), 4u);
  Generator gen_moe(*mm, {.max_context = 64});
  EXPECT_EQ(gen_moe.generate(mm->tokenizer->encode("Hello world", true, false), sp).generated_ids.size(), 30u);

  s.n_kv_shared_layers = 2;  // layers 0-3 would end with a sliding one
  EXPECT_THROW(plan_random_model(s), Error);
  s.n_kv_shared_layers = 0;
  s.sliding_window = 0;
  EXPECT_THROW(plan_random_model(s), Error);
  s.sliding_window = 8;
  s.arch = "gemma3";  // per-layer embeddings are gemma4's
  EXPECT_THROW(plan_random_model(s), Error);
}
