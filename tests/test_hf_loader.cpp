// Hugging Face folder loading, checked against the GGUF path on the llama.cpp golden files, plus
// tokenizer.json fixtures checked against ids from the `tokenizers` library (tests/data/hf/, made by
// scripts/make_hf_fixtures.py), and malformed-input handling of the safetensors reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generator.h"
#include "hf_test_folder.h"
#include "model/hf_tokenizer.h"
#include "model/loaders.h"
#include "model/model_cache.h"
#include "model/safetensors.h"

using namespace kvserve;
using namespace kvserve::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kvserve_hf_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Every value of `hf` equals `gguf` exactly (rows of q/k un-permuted when `head_dim` is set).
void expect_same_weights(const Tensor& hf, const Tensor& gguf, const std::string& what, int64_t head_dim = 0) {
  ASSERT_TRUE(hf.valid()) << what;
  ASSERT_EQ(hf.ne, gguf.ne) << what;
  const int64_t cols = hf.ne[0];
  for (int64_t r = 0; r < hf.rows(); ++r) {
    const int64_t gr = head_dim ? gguf_row_of_hf_row(r, head_dim) : r;
    for (int64_t c = 0; c < cols; ++c) {
      const float a = tensor_value(hf, r * cols + c), b = tensor_value(gguf, gr * cols + c);
      if (a != b) {
        ADD_FAILURE() << what << " row " << r << " col " << c << ": hf " << a << " gguf " << b;
        return;
      }
    }
  }
}

void expect_same_model(const Model& hf, const Model& gguf, DType matrix_type) {
  const ModelConfig &a = hf.config, &b = gguf.config;
  EXPECT_EQ(hf.format, "hf");
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_ff, b.n_ff);
  EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope_base, b.rope_base);
  EXPECT_EQ(a.n_rot, b.n_rot);
  EXPECT_EQ(a.rope_style, RopeStyle::NeoX);  // HF rows are rotate-half for llama and qwen2 alike
  EXPECT_EQ(a.tied_output, b.tied_output);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  // Weights are used in place with the requested type; norms/biases in F32.
  EXPECT_EQ(hf.tok_embd.type, matrix_type);
  EXPECT_EQ(hf.layers[0].wq.type, matrix_type);

  const int64_t qk_head_dim = b.rope_style == RopeStyle::Interleaved ? b.head_dim : 0;
  expect_same_weights(hf.tok_embd, gguf.tok_embd, "token_embd");
  expect_same_weights(hf.output_norm, gguf.output_norm, "output_norm");
  expect_same_weights(hf.output, gguf.output, "output");
  for (size_t l = 0; l < hf.layers.size(); ++l) {
    const LayerWeights &x = hf.layers[l], &y = gguf.layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    expect_same_weights(x.attn_norm, y.attn_norm, p + "attn_norm");
    expect_same_weights(x.wq, y.wq, p + "wq", qk_head_dim);
    expect_same_weights(x.wk, y.wk, p + "wk", qk_head_dim);
    expect_same_weights(x.wv, y.wv, p + "wv");
    expect_same_weights(x.wo, y.wo, p + "wo");
    if (b.qkv_bias) {
      expect_same_weights(x.bq, y.bq, p + "bq");
      expect_same_weights(x.bk, y.bk, p + "bk");
      expect_same_weights(x.bv, y.bv, p + "bv");
    }
    if (b.qk_norm) {
      expect_same_weights(x.q_norm, y.q_norm, p + "q_norm");
      expect_same_weights(x.k_norm, y.k_norm, p + "k_norm");
    }
    expect_same_weights(x.ffn_norm, y.ffn_norm, p + "ffn_norm");
    expect_same_weights(x.w_gate, y.w_gate, p + "w_gate");
    expect_same_weights(x.w_up, y.w_up, p + "w_up");
    expect_same_weights(x.w_down, y.w_down, p + "w_down");
  }
}

// Runs `f`, expecting an Error whose message contains every one of `needles`.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

std::vector<uint8_t> safetensors_bytes(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

void parse_buffer(const std::vector<uint8_t>& bytes) { SafetensorsFile f(bytes.data(), bytes.size(), "buf.safetensors"); }

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}
void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(); }

}  // namespace

// ---- weights: HF folder vs GGUF ----------------------------------------------------------------

TEST(HfLoader, LlamaGqaF16MatchesGguf) {
  TempDir tmp;
  const std::string gguf = golden_model("tiny-gqa.gguf");
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F16);
  // Direct call (the other tests go through load_model's format detection).
  auto hf = load_hf_model(tmp.path());
  auto ref = load_gguf_model(gguf);
  expect_same_model(*hf, *ref, DType::F16);
}

TEST(HfLoader, LlamaGqaF32MatchesGguf) {
  TempDir tmp;
  const std::string gguf = golden_model("tiny-gqa.gguf");
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F32);  // F16 → F32 is exact
  auto hf = load_model(tmp.path());
  expect_same_model(*hf, *load_gguf_model(gguf), DType::F32);
}

TEST(HfLoader, LlamaGqaBf16MatchesGguf) {
  TempDir tmp;
  const std::string gguf = golden_model("tiny-gqa-BF16.gguf");  // BF16 source, so BF16 HF is exact
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::BF16);
  auto hf = load_model(tmp.path());
  expect_same_model(*hf, *load_gguf_model(gguf), DType::BF16);
}

TEST(HfLoader, Qwen2TiedWithBiasMatchesGguf) {
  TempDir tmp;
  const std::string gguf = golden_model("tiny-qwen2.gguf");
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F16);
  auto hf = load_model(tmp.path());
  auto ref = load_gguf_model(gguf);
  EXPECT_TRUE(hf->config.tied_output);
  EXPECT_TRUE(hf->config.qkv_bias);
  EXPECT_EQ(hf->output.data, hf->tok_embd.data);
  expect_same_model(*hf, *ref, DType::F16);
}

// The first prompt of tests/golden/arch/<stem>.jsonl teacher-forced through `m`: every step's top-5 logits
// within `tol` of llama.cpp's (its golden for the GGUF file the HF folder was written from). GELU as llama.cpp computes
// it, from ggml's f16 table, for the comparison (an HF folder's Gemma computes it exactly, as transformers does).
void expect_follows_arch_golden(Model& m, const std::string& stem, float tol) {
  struct Restore {
    Model& m;
    bool exact;
    ~Restore() { m.config.gelu_exact = exact; }
  } restore{m, std::exchange(m.config.gelu_exact, false)};
  std::ifstream golden(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(golden, line)) << stem;
  const json g = json::parse(line);
  auto seq = g["prompt_ids"].get<std::vector<int32_t>>();
  const size_t n_prompt = seq.size();
  const auto ids = g["generated_ids"].get<std::vector<int32_t>>();
  seq.insert(seq.end(), ids.begin(), ids.end() - 1);
  // The goldens were made at n_ctx 512: LongRoPE models rotate as llama.cpp does at that context.
  Generator gen(m, {.max_context = 512, .rope_factors = fixed_context_rope_factors(m.config, 512)});
  const auto logits = gen.teacher_forced_logits(seq, static_cast<int>(n_prompt));
  const auto& steps = g["step_logits_top"];
  ASSERT_EQ(logits.size(), steps.size());
  for (size_t s = 0; s < steps.size(); ++s)
    for (const auto& pair : steps[s])
      ASSERT_NEAR(logits[s][pair[0].get<int>()], pair[1].get<float>(), tol) << stem << " step " << s;
}

// The tiny arch golden `stem` as an HF folder (F32), loaded, beside the GGUF file it was written from.
struct ArchHfCopy {
  explicit ArchHfCopy(const std::string& stem)
      : gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".gguf") {
    make_hf_folder_from_gguf(gguf, tmp.path(), DType::F32);
    hf = load_model(tmp.path());
    ref = load_gguf_model(gguf);
  }
  TempDir tmp;
  std::string gguf;
  std::unique_ptr<Model> hf, ref;
};

// Qwen3: the per-head q/k norms (self_attn.{q,k}_norm) and a head_dim that is not hidden_size / heads, read
// from the HF folder, give llama.cpp's logits (its golden for the same weights, tests/golden/arch).
TEST(HfLoader, Qwen3QkNormMatchesGgufAndLlamaCpp) {
  TempDir tmp;
  const std::string gguf = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-qwen3.gguf";
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F32);
  auto hf = load_model(tmp.path());
  EXPECT_EQ(hf->config.arch, "qwen3");
  EXPECT_TRUE(hf->config.qk_norm);
  EXPECT_EQ(hf->config.head_dim, 32);
  EXPECT_EQ(hf->config.n_embd, 64);
  expect_same_model(*hf, *load_gguf_model(gguf), DType::F32);

  expect_follows_arch_golden(*hf, "tiny-qwen3", 1e-4f);
}

// Gemma, Gemma 2 and Gemma 3 folders (norms stored as w for HF's 1 + w, Gemma 2/3's four norms per layer,
// the soft-caps, sliding windows by Gemma 2's fixed pattern and Gemma 3's layer_types) read into the GGUF
// file's configuration, and their teacher-forced logits follow llama.cpp's golden for the same weights.
TEST(HfLoader, GemmaFamilyMatchesGgufAndLlamaCpp) {
  for (const char* stem : {"tiny-gemma", "tiny-gemma2", "tiny-gemma3"}) {
    SCOPED_TRACE(stem);
    const ArchHfCopy copy(stem);
    const Model &hf = *copy.hf, &ref = *copy.ref;
    const ModelConfig &a = hf.config, &b = ref.config;
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.embd_scale, b.embd_scale);
    EXPECT_EQ(a.ffn_act, b.ffn_act);
    EXPECT_EQ(a.post_norms, b.post_norms);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_FLOAT_EQ(a.attn_scale, b.attn_scale);
    EXPECT_EQ(a.attn_softcap, b.attn_softcap);
    EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.swa_layers, b.swa_layers);
    EXPECT_EQ(a.rope_base_swa, b.rope_base_swa);
    EXPECT_EQ(a.tied_output, b.tied_output);
    for (size_t i = 0; i < 8; ++i)  // 1 + w restored from w to within a rounding
      EXPECT_NEAR(static_cast<const float*>(hf.layers[0].attn_norm.data)[i],
                  static_cast<const float*>(ref.layers[0].attn_norm.data)[i], 1e-6f);

    expect_follows_arch_golden(*copy.hf, stem, 1e-3f);
  }
}

// Renames every tensor of dir/model.safetensors to prefix + its name after "model." (lm_head and extras
// as given), keeping the data as it is: the header is JSON with offsets relative to the data.
void rename_safetensors(const std::string& path, const std::string& prefix, const std::string& lm_head,
                        const std::vector<std::string>& extra) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const json h = json::parse(header);
  json out = json::object();
  for (const auto& [name, v] : h.items())
    out[name.starts_with("model.") ? prefix + name.substr(6) : name == "lm_head.weight" ? lm_head : name] = v;
  // Tensors the text model does not read (a vision tower's): an alias of the first bytes.
  for (const std::string& name : extra) out[name] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  std::string text = out.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  const uint64_t m = text.size();
  o.write(reinterpret_cast<const char*>(&m), 8);
  o.write(text.data(), static_cast<std::streamsize>(text.size()));
  o.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Gemma 3 4B-27B ship as Gemma3ForConditionalGeneration: a text_config that leaves most keys to
// transformers' defaults, and the text model's tensors under language_model.model. (as published) or
// model.language_model. (as transformers 4.52+ saves them) beside a vision tower. The text model reads
// as the same Gemma 3 and follows llama.cpp's logits.
TEST(HfLoader, Gemma3ImageTextCheckpointReadsItsTextModel) {
  const std::string gguf = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gemma3.gguf";
  auto ref = load_gguf_model(gguf);
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    SCOPED_TRACE(prefix);
    TempDir tmp;
    make_hf_folder_from_gguf(gguf, tmp.path(), DType::F32);
    const json causal = read_json(tmp / "config.json");
    json text = json::object();
    // Defaults left out: hidden_activation, attn_logit_softcapping (none). This file has its own output
    // (llama.cpp and transformers allow it): tie_word_embeddings false, lm_head beside the text model.
    for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps",
                            "rope_theta", "query_pre_attn_scalar", "sliding_window", "rope_local_base_freq",
                            "layer_types", "final_logit_softcapping", "tie_word_embeddings"})
      text[key] = causal[key];
    text["model_type"] = "gemma3_text";
    const json config = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                         {"model_type", "gemma3"},
                         {"text_config", text},
                         {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 1152}}},
                         {"mm_tokens_per_image", 256},
                         {"eos_token_id", {1, 106}}};
    write_json(tmp / "config.json", config);
    rename_safetensors(tmp / "model.safetensors", prefix,
                       prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight",
                       {"vision_tower.vision_model.embeddings.patch_embedding.weight",
                        "multi_modal_projector.mm_input_projection_weight"});
    auto hf = load_model(tmp.path());
    const ModelConfig &a = hf->config, &b = ref->config;
    EXPECT_EQ(a.arch, "gemma3");
    EXPECT_EQ(a.n_layers, b.n_layers);
    EXPECT_EQ(a.swa_layers, b.swa_layers);
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.tied_output, b.tied_output);
    EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
    EXPECT_EQ(a.attn_scale, b.attn_scale);
    EXPECT_EQ(a.embd_scale, b.embd_scale);
    EXPECT_EQ(a.rope_base, b.rope_base);
    EXPECT_EQ(a.rope_base_swa, b.rope_base_swa);
    EXPECT_EQ(a.rms_eps, b.rms_eps);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_EQ(a.post_norms, b.post_norms);
    EXPECT_EQ(a.ffn_act, b.ffn_act);
    EXPECT_EQ(a.n_vocab, b.n_vocab);
    EXPECT_EQ(a.rope_style, b.rope_style);
    EXPECT_EQ(a.head_dim, b.head_dim);
    expect_follows_arch_golden(*hf, "tiny-gemma3", 1e-3f);
  }
}

// Ministral 3 (Ministral3ForCausalLM, and inside a Mistral3ForConditionalGeneration checkpoint beside its vision
// tower): YaRN with mscale / mscale_all_dim, the ramp's betas and Llama 4's attention temperature
// (llama_4_scaling_beta over original_max_position_embeddings), read from the folder written from tiny-mistral3:
// llama.cpp's logits (transformers 5.25 gives them within 3e-5 on this folder too).
TEST(HfLoader, Ministral3MatchesGgufAndLlamaCpp) {
  const ArchHfCopy copy("tiny-mistral3");
  const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
  EXPECT_EQ(a.arch, "mistral3");
  EXPECT_EQ(a.attn_temp_scale, b.attn_temp_scale);
  EXPECT_EQ(a.attn_temp_length, b.attn_temp_length);
  EXPECT_FLOAT_EQ(a.rope_scaling.attn_factor, b.rope_scaling.attn_factor);
  EXPECT_EQ(a.rope_base, b.rope_base);
  expect_follows_arch_golden(*copy.hf, "tiny-mistral3", 1e-4f);

  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    SCOPED_TRACE(prefix);
    TempDir tmp;
    make_hf_folder_from_gguf(copy.gguf, tmp.path(), DType::F32);
    json text = read_json(tmp / "config.json");
    text.erase("architectures");
    const json config = {{"architectures", {"Mistral3ForConditionalGeneration"}},
                         {"model_type", "mistral3"},
                         {"text_config", text},
                         {"vision_config", {{"model_type", "pixtral"}, {"hidden_size", 1024}}},
                         {"image_token_index", 10}};
    write_json(tmp / "config.json", config);
    rename_safetensors(
        tmp / "model.safetensors", prefix,
        prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight",
        {"vision_tower.transformer.layers.0.attention.q_proj.weight", "multi_modal_projector.linear_1.weight"});
    auto hf = load_model(tmp.path());
    EXPECT_EQ(hf->config.arch, "mistral3");
    EXPECT_EQ(hf->config.attn_temp_length, b.attn_temp_length);
    expect_follows_arch_golden(*hf, "tiny-mistral3", 1e-4f);
  }
}

// OLMo 2 (Olmo2ForCausalLM: no input_layernorm, post_attention_layernorm and post_feedforward_layernorm after each
// block, q_norm / k_norm over the whole projection) and OLMo 3 (Olmo3ForCausalLM: its layer_types and window, RoPE
// per layer type): llama.cpp's logits (transformers 5.25 gives them within 2e-5 on these folders too).
TEST(HfLoader, Olmo2AndOlmo3MatchGgufAndLlamaCpp) {
  for (const char* stem : {"tiny-olmo2", "tiny-olmo3"}) {
    SCOPED_TRACE(stem);
    const ArchHfCopy copy(stem);
    const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
    EXPECT_FALSE(a.pre_norms);
    EXPECT_TRUE(a.qk_norm_full);
    EXPECT_TRUE(a.post_norms);
    EXPECT_FALSE(copy.hf->layers[0].attn_norm.valid());
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.swa_layers, b.swa_layers);
    EXPECT_EQ(a.rope_base_swa, b.rope_base_swa);
    expect_follows_arch_golden(*copy.hf, stem, 1e-4f);
  }
  // Olmo3Config's RoPE where config.json is silent: base 500000 for every layer; a bare rope_theta reaches only
  // the full-attention layers (transformers reads it so), the sliding ones keep 500000.
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-olmo3.gguf", tmp.path(),
                           DType::F32);
  json c = read_json(tmp / "config.json");
  c.erase("rope_parameters");
  write_json(tmp / "config.json", c);
  ModelConfig m = load_model(tmp.path())->config;
  EXPECT_EQ(m.rope_base, 500000.0f);
  EXPECT_EQ(m.rope_base_swa, 500000.0f);
  c["rope_theta"] = 20000.0;
  write_json(tmp / "config.json", c);
  m = load_model(tmp.path())->config;
  EXPECT_EQ(m.rope_base, 20000.0f);
  EXPECT_EQ(m.rope_base_swa, 500000.0f);
  c.erase("layer_types");
  write_json(tmp / "config.json", c);
  EXPECT_EQ(load_model(tmp.path())->config.swa_layers, (std::vector<bool>{true, true, true, false}));
}

// Ministral3Config's defaults where config.json is silent (RoPE: YaRN factor 16 over 16384 positions, base 1e6,
// temperature beta 0.1), Mistral 3.1's text model (model_type mistral: no temperature), and errors named.
TEST(HfLoader, Ministral3DefaultsAndErrors) {
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-mistral3.gguf", tmp.path(),
                           DType::F32);
  json good = read_json(tmp / "config.json");
  good.erase("rope_scaling");
  good.erase("rope_theta");
  write_json(tmp / "config.json", good);
  const ModelConfig c = load_model(tmp.path())->config;
  EXPECT_EQ(c.rope_base, 1e6f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(c.rope_scaling.factor, 16.0f);
  EXPECT_EQ(c.rope_scaling.original_context, 16384);
  EXPECT_FLOAT_EQ(c.rope_scaling.attn_factor * (1.0f + 0.1f * std::log(16.0f)), 1.0f);  // mscale / mscale_all_dim
  EXPECT_FLOAT_EQ(c.attn_temp_scale, 0.1f);
  EXPECT_EQ(c.attn_temp_length, 16384);
  EXPECT_TRUE(c.swa_layers.empty());

  json mistral = good;
  mistral["architectures"] = {"Mistral3ForConditionalGeneration"};
  mistral.erase("model_type");
  json text = good;
  text["model_type"] = "mistral";
  text["sliding_window"] = nullptr;
  text["rope_theta"] = 1e9;
  mistral["text_config"] = text;
  write_json(tmp / "config.json", mistral);
  const ModelConfig m = load_model(tmp.path())->config;
  EXPECT_EQ(m.arch, "llama");
  EXPECT_FALSE(m.has_attn_temperature());
  EXPECT_EQ(m.rope_base, 1e9f);

  const auto error_with = [&](const json& config, std::initializer_list<std::string> needles) {
    write_json(tmp / "config.json", config);
    expect_error([&] { load_model(tmp.path()); }, needles);
  };
  json bad = good;
  bad["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}, {"llama_4_scaling_beta", 0.1}};
  bad["max_position_embeddings"] = nullptr;
  bad["rope_parameters"]["original_max_position_embeddings"] = nullptr;
  error_with(bad, {"llama_4_scaling_beta", "original_max_position_embeddings"});
  bad["rope_parameters"]["original_max_position_embeddings"] = 16;
  bad["rope_parameters"]["llama_4_scaling_beta"] = "0.1";
  error_with(bad, {"llama_4_scaling_beta", "number"});
  mistral["text_config"]["model_type"] = "pixtral";
  error_with(mistral, {"text_config", "pixtral"});
  mistral.erase("text_config");
  error_with(mistral, {"text_config"});
}

TEST(HfLoaderGemmaErrors, ImageTextConfigErrorsAreNamed) {
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gemma3.gguf", tmp.path(),
                           DType::F32);
  write_json(tmp / "config.json", {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", 5}});
  expect_error([&] { load_model(tmp.path()); }, {"text_config"});
  write_json(tmp / "config.json", {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                   {"text_config", {{"use_bidirectional_attention", true}}}});
  expect_error([&] { load_model(tmp.path()); }, {"bidirectional"});
  // Transformers' defaults alone (a 2304-wide model) do not fit these tensors: the shape is named.
  write_json(tmp / "config.json", {{"architectures", {"Gemma3ForConditionalGeneration"}}});
  expect_error([&] { load_model(tmp.path()); }, {"embed_tokens"});
}

// SmolLM3: llama's tensors (q/k rows back in HF's rotate-half order), every 4th layer without RoPE, by
// transformers' default interval or its explicit no_rope_layers list; llama.cpp's logits either way.
TEST(HfLoader, SmolLM3NoRopeLayersMatchGgufAndLlamaCpp) {
  TempDir tmp;
  const std::string gguf = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-smollm3.gguf";
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F32);
  const std::vector<bool> want{false, false, false, true};
  {
    auto hf = load_model(tmp.path());
    EXPECT_EQ(hf->config.arch, "smollm3");
    EXPECT_EQ(hf->config.nope_layers, want);
    EXPECT_EQ(load_gguf_model(gguf)->config.nope_layers, want);
    expect_follows_arch_golden(*hf, "tiny-smollm3", 1e-4f);
  }
  json c = read_json(tmp / "config.json");
  c["no_rope_layers"] = json::array({1, 1, 1, 0});
  write_json(tmp / "config.json", c);
  expect_follows_arch_golden(*std::unique_ptr<Model>(load_model(tmp.path())), "tiny-smollm3", 1e-4f);
  c["no_rope_layers"] = json::array({1, 1, 0});
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"no_rope_layers", "4 layers"});
}

// Granite: its four multipliers from config.json (embedding, residual, attention, logits) read into the
// GGUF file's configuration; llama.cpp's logits.
TEST(HfLoader, GraniteMultipliersMatchGgufAndLlamaCpp) {
  const ArchHfCopy copy("tiny-granite");
  const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
  EXPECT_EQ(a.arch, "granite");
  EXPECT_EQ(a.embd_scale, 6.0f);
  EXPECT_EQ(a.embd_scale, b.embd_scale);
  EXPECT_EQ(a.residual_scale, b.residual_scale);
  EXPECT_EQ(a.attn_scale, b.attn_scale);
  EXPECT_EQ(a.logit_scale, b.logit_scale);
  EXPECT_TRUE(a.tied_output);
  expect_follows_arch_golden(*copy.hf, "tiny-granite", 1e-4f);
}

// Phi-3: q/k/v fused in qkv_proj and the gate's and up's rows in gate_up_proj, split into views; the weights
// equal the GGUF file's (fused the same way), and the logits llama.cpp's.
TEST(HfLoader, Phi3FusedProjectionsMatchGgufAndLlamaCpp) {
  TempDir tmp;
  const std::string gguf = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3.gguf";
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F32);
  auto hf = load_model(tmp.path());
  EXPECT_EQ(hf->config.arch, "phi3");
  expect_same_model(*hf, *load_gguf_model(gguf), DType::F32);
  expect_follows_arch_golden(*hf, "tiny-phi3", 1e-4f);
  json c = read_json(tmp / "config.json");
  c["partial_rotary_factor"] = 0.7;  // 11.2 of 16 dimensions: not a whole number of pairs
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"partial_rotary_factor", "even"});
}

// Phi-3 128k / Phi-3.5: rope_scaling "longrope" with its per-pair factors, original_max_position_embeddings
// beside max_position_embeddings, and transformers' attention factor sqrt(1 + ln 2 / ln 256): the GGUF
// file's configuration, and llama.cpp's logits with the long factors (and with the short ones). Phi-4-mini's
// shape adds partial_rotary_factor (0.75: 12 of 16 dimensions rotate) and a tied output.
TEST(HfLoader, Phi3LongRopeMatchesGgufAndLlamaCpp) {
  for (const char* stem : {"tiny-phi3-longrope", "tiny-phi3-longrope-short", "tiny-phi4"}) {
    SCOPED_TRACE(stem);
    const ArchHfCopy copy(stem);
    const Model &hf = *copy.hf, &ref = *copy.ref;
    const RopeScaling &a = hf.config.rope_scaling, &b = ref.config.rope_scaling;
    EXPECT_EQ(a.type, RopeScaling::Type::LongRope);
    EXPECT_EQ(a.long_factors, b.long_factors);
    EXPECT_EQ(a.short_factors, b.short_factors);
    EXPECT_EQ(a.original_context, b.original_context);
    EXPECT_FLOAT_EQ(a.attn_factor, b.attn_factor);
    EXPECT_EQ(hf.config.n_rot, ref.config.n_rot);
    EXPECT_EQ(hf.config.tied_output, ref.config.tied_output);
    expect_follows_arch_golden(*copy.hf, stem, 1e-4f);
  }
  // A factor list of the wrong length is named.
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3-longrope.gguf", tmp.path(),
                           DType::F32);
  json c = read_json(tmp / "config.json");
  c["rope_scaling"]["short_factor"] = json::array({1.0, 2.0});
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"short_factor", "8 numbers"});

}

// Qwen3-MoE (mlp.gate, mlp.experts.E.*_proj; num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob) and Mixtral (block_sparse_moe.gate and experts' w1/w3/w2; num_local_experts) folders written
// from the tiny MoE GGUF files: the same experts and llama.cpp's logits. transformers' norm_topk_prob = false
// (Qwen3-MoE's default) keeps the top-k probabilities as they are: far from the renormalized golden.
TEST(HfLoader, MoeFoldersMatchGgufAndLlamaCpp) {
  for (const char* stem : {"tiny-qwen3moe", "tiny-mixtral"}) {
    SCOPED_TRACE(stem);
    const ArchHfCopy copy(stem);
    const Model &hf = *copy.hf, &ref = *copy.ref;
    EXPECT_EQ(hf.config.n_expert, ref.config.n_expert);
    EXPECT_EQ(hf.config.n_expert_used, ref.config.n_expert_used);
    EXPECT_EQ(hf.config.n_ff_exp, ref.config.n_ff_exp);
    EXPECT_TRUE(hf.config.expert_weights_norm);
    expect_follows_arch_golden(*copy.hf, stem, 1e-4f);
  }
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-qwen3moe.gguf", tmp.path(),
                           DType::F32);
  json c = read_json(tmp / "config.json");
  c.erase("norm_topk_prob");
  write_json(tmp / "config.json", c);
  auto unnormalized = load_model(tmp.path());
  EXPECT_FALSE(unnormalized->config.expert_weights_norm);
  std::ifstream golden(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-qwen3moe.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(golden, line));
  const json g = json::parse(line);
  const auto ids = g["prompt_ids"].get<std::vector<int32_t>>();
  Generator gen(*unnormalized, {.max_context = 512});
  const auto logits = gen.teacher_forced_logits(ids, static_cast<int>(ids.size()));
  float worst = 0;
  const auto first = g["first_logits"].get<std::vector<float>>();
  for (size_t j = 0; j < first.size(); ++j) worst = std::max(worst, std::fabs(logits[0][j] - first[j]));
  EXPECT_GT(worst, 1e-2f);
  c["num_experts_per_tok"] = 9;
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"num_experts_per_tok 9"});
  c["num_experts_per_tok"] = 2;
  c["mlp_only_layers"] = json::array({1});
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"mlp_only_layers"});
}

// Qwen2-MoE (mlp.shared_expert and its [1, hidden] mlp.shared_expert_gate beside Qwen3-MoE's experts;
// shared_expert_intermediate_size, qkv_bias, norm_topk_prob false) written from the tiny GGUF: llama.cpp's logits.
// A window (use_sliding_window) is named.
TEST(HfLoader, Qwen2MoeFolderMatchesLlamaCpp) {
  const ArchHfCopy copy("tiny-qwen2moe");
  const ModelConfig& c = copy.hf->config;
  EXPECT_EQ(c.arch, "qwen2moe");
  EXPECT_EQ(c.n_expert_shared, 1);
  EXPECT_EQ(c.shared_ffn_width(), copy.ref->config.shared_ffn_width());
  EXPECT_FALSE(c.expert_weights_norm);
  EXPECT_TRUE(c.qkv_bias);
  expect_follows_arch_golden(*copy.hf, "tiny-qwen2moe", 1e-4f);

  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-qwen2moe.gguf", tmp.path(),
                           DType::F32);
  json cfg = read_json(tmp / "config.json");
  cfg["use_sliding_window"] = true;
  write_json(tmp / "config.json", cfg);
  expect_error([&] { load_model(tmp.path()); }, {"use_sliding_window"});
}

TEST(HfLoader, VocabMatchesGgufVocab) {
  TempDir tmp;
  const std::string gguf = golden_model("tiny-gqa.gguf");
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F16);
  auto hf = load_model(tmp.path());
  const Vocab ref = load_gguf_vocab(gguf);
  const Vocab& v = hf->vocab;
  EXPECT_EQ(v.kind, Vocab::Kind::SPM);
  EXPECT_EQ(v.tokens, ref.tokens);
  EXPECT_EQ(v.token_types, ref.token_types);
  EXPECT_EQ(v.bos_id, ref.bos_id);
  EXPECT_EQ(v.eos_id, ref.eos_id);
  EXPECT_EQ(v.unk_id, ref.unk_id);
  EXPECT_EQ(v.add_bos, ref.add_bos);
  EXPECT_EQ(v.add_eos, ref.add_eos);
  EXPECT_EQ(v.add_space_prefix, ref.add_space_prefix);
  ASSERT_EQ(v.scores.size(), v.tokens.size());
}

TEST(HfLoader, ShardedIndexLoadsSameWeights) {
  TempDir tmp;
  const std::string gguf = golden_model("tiny-gqa.gguf");
  make_hf_folder_from_gguf(gguf, tmp.path(), DType::F16);
  // Split model.safetensors into two shards by re-writing each half of the tensors.
  SafetensorsFile whole(tmp / "model.safetensors");
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  SafetensorsWriter shard[2];
  int i = 0;
  for (const auto& [name, t] : whole.tensors()) {
    const int s = (i++) % 2;
    SafetensorsWriter::Entry e{name, t.dtype == "F32" ? DType::F32 : DType::F16, t.shape,
                               std::vector<uint8_t>(t.data, t.data + t.n_bytes)};
    shard[s].entries.push_back(std::move(e));
    index["weight_map"][name] = s == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  shard[0].write(tmp / "model-00001-of-00002.safetensors");
  shard[1].write(tmp / "model-00002-of-00002.safetensors");
  fs::remove(tmp / "model.safetensors");
  write_json(tmp / "model.safetensors.index.json", index);
  auto hf = load_model(tmp.path());
  expect_same_model(*hf, *load_gguf_model(gguf), DType::F16);
}

// ---- errors: config, tensors, architecture -----------------------------------------------------

class HfLoaderErrors : public ::testing::Test {
 protected:
  void SetUp() override { make_hf_folder_from_gguf(golden_model("tiny-gqa.gguf"), tmp.path(), DType::F16); }
  void edit_config(const std::function<void(json&)>& f) {
    json c = read_json(tmp / "config.json");
    f(c);
    write_json(tmp / "config.json", c);
  }
  TempDir tmp;
};

TEST_F(HfLoaderErrors, MissingConfigKeyIsNamed) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"}) {
    make_hf_folder_from_gguf(golden_model("tiny-gqa.gguf"), tmp.path(), DType::F16);
    edit_config([&](json& c) { c.erase(key); });
    expect_error([&] { load_model(tmp.path()); }, {"config.json", key});
  }
}

TEST_F(HfLoaderErrors, UnsupportedArchitectureIsNamed) {
  edit_config([](json& c) { c["architectures"] = {"FalconForCausalLM"}; });
  expect_error([&] { load_model(tmp.path()); }, {"FalconForCausalLM"});
}

TEST_F(HfLoaderErrors, UnsupportedRopeScalingIsNamed) {
  edit_config([](json& c) { c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}}; });
  expect_error([&] { load_model(tmp.path()); }, {"dynamic"});
  edit_config([](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.5}}; });
  expect_error([&] { load_model(tmp.path()); }, {"factor 0.5"});
}

// DeepSeek-V2 and V3 folders (MLA with q_a/q_b or q_proj, kv_a_proj_with_mqa, kv_b_proj; dense leading layers;
// routed experts beside shared ones; V3's sigmoid router with e_score_correction_bias and groups; YaRN with
// mscale / mscale_all_dim) written from the tiny deepseek GGUF files: llama.cpp's logits for the same weights.
TEST(HfLoader, DeepseekFoldersMatchGgufAndLlamaCpp) {
  for (const char* stem : {"tiny-deepseek2", "tiny-deepseek2-kvb", "tiny-deepseek3", "tiny-deepseek2-yarn"}) {
    SCOPED_TRACE(stem);
    const ArchHfCopy copy(stem);
    const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
    EXPECT_TRUE(a.mla());
    EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
    EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.head_dim_v, b.head_dim_v);
    EXPECT_EQ(a.n_layer_dense_lead, b.n_layer_dense_lead);
    EXPECT_EQ(a.n_expert_shared, b.n_expert_shared);
    EXPECT_EQ(a.n_expert_groups > 1, b.n_expert_groups > 1);
    EXPECT_FLOAT_EQ(a.attn_scale, b.attn_scale);
    EXPECT_FLOAT_EQ(a.rope_scaling.attn_factor, b.rope_scaling.attn_factor);
    expect_follows_arch_golden(*copy.hf, stem, std::string(stem) == "tiny-deepseek2-yarn" ? 2e-4f : 1e-4f);
  }
}

// tests/golden/hf/<variant>.json (made by scripts/make_hf_variant_golden.py): transformers' logits for a tiny
// golden's weights under an edited config.json.
json hf_variant_golden(const std::string& variant) {
  return read_json(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/hf/" + variant + ".json");
}

// The variant's base GGUF written as an HF folder in `dir`, with the variant's config edits.
void write_hf_variant_folder(const json& ref, const std::string& dir) {
  const std::string base = ref["base"].get<std::string>(), shared_prefix = "../shared/golden/gguf/models/";
  make_hf_folder_from_gguf(base.starts_with(shared_prefix) ? golden_model(base.substr(shared_prefix.size()))
                                                           : std::string(KVSERVE_SOURCE_DIR) + "/" + base,
                           dir, DType::F32, !ref.value("dequantized_experts", false));
  json c = read_json(dir + "/config.json");
  for (const auto& [key, value] : ref["config_edits"].items()) c[key] = value;
  write_json(dir + "/config.json", c);
}

// Every case of the golden teacher-forced through `gen`: each step's top-5 logits within `tol` of transformers'.
// Returns the steps compared.
size_t expect_follows_hf_variant_golden(Generator& gen, const json& ref, float tol) {
  size_t steps = 0;
  for (const json& k : ref["cases"]) {
    const auto logits = gen.teacher_forced_logits(k["ids"].get<std::vector<int32_t>>(), k["n_prompt"].get<int>());
    EXPECT_EQ(logits.size(), k["step_logits_top"].size());
    if (logits.size() != k["step_logits_top"].size()) return steps;
    for (size_t s = 0; s < logits.size(); ++s, ++steps)
      for (const json& pair : k["step_logits_top"][s]) {
        EXPECT_NEAR(logits[s][pair[0].get<int>()], pair[1].get<float>(), tol)
            << "prompt of " << k["n_prompt"] << ", step " << s;
        if (std::fabs(logits[s][pair[0].get<int>()] - pair[1].get<float>()) > tol) return steps;
      }
  }
  return steps;
}

// Every step of the golden, followed as expect_follows_hf_variant_golden does, on a hybrid cache (windowed layers'
// blocks released behind their window) and on one that keeps every position. Returns the golden's step count.
size_t expect_follows_on_both_caches(const Model& m, const json& ref, float tol) {
  size_t want_steps = 0;
  for (const json& k : ref["cases"]) want_steps += k["step_logits_top"].size();
  for (const bool hybrid : {true, false}) {
    SCOPED_TRACE(hybrid ? "hybrid cache" : "full cache");
    GeneratorOptions o{.block_size = 4, .max_context = 512};
    o.hybrid_kv_cache = hybrid;
    Generator gen(m, o);
    EXPECT_EQ(gen.kv_cache().groups.hybrid(), hybrid && m.config.sliding_window > 0);
    EXPECT_EQ(expect_follows_hf_variant_golden(gen, ref, tol), want_steps);
  }
  return want_steps;
}

// The worst miss of `gen`'s teacher-forced logits against one case of a variant golden, over all its steps.
float worst_case_miss(Generator& gen, const json& k) {
  const auto logits = gen.teacher_forced_logits(k["ids"].get<std::vector<int32_t>>(), k["n_prompt"].get<int>());
  float worst = 0;
  for (size_t s = 0; s < logits.size(); ++s)
    for (const json& pair : k["step_logits_top"][s])
      worst = std::max(worst, std::fabs(logits[s][pair[0].get<int>()] - pair[1].get<float>()));
  return worst;
}

// DeepSeek configurations llama.cpp does not compute, against transformers' logits for tiny-deepseek3's weights
// under edited configs: DeepSeek-V2's group_limited_greedy routing (groups scored by their best expert; by their
// best two, as llama.cpp, missed by 2.4, tried), and DeepSeek-V3 with rope_interleave false (its rope pairs
// (i, i + n_rot/2)).
TEST(HfLoader, DeepseekConfigsLlamaCppLacksMatchTransformers) {
  for (const char* variant : {"deepseek-v2-group-limited", "deepseek-v3-rope-noninterleaved"}) {
    SCOPED_TRACE(variant);
    const json ref = hf_variant_golden(variant);
    TempDir tmp;
    write_hf_variant_folder(ref, tmp.path());
    auto m = load_model(tmp.path());
    if (std::string(variant) == "deepseek-v2-group-limited") {
      EXPECT_TRUE(m->config.expert_group_score_max);
      EXPECT_FALSE(m->layers[1].exp_probs_b.valid());  // V2 has no selection bias, whatever the folder holds
    } else {
      EXPECT_EQ(m->config.rope_style, RopeStyle::NeoX);
    }
    Generator gen(*m, {.max_context = 512});
    EXPECT_EQ(expect_follows_hf_variant_golden(gen, ref, 1e-4f), 4u * 48u);
  }
}

// Sliding windows llama.cpp does not run (it gives Mistral files full attention and reads no window from Qwen 2
// files), against transformers' logits: Mistral's window on every layer, Ministral's `layer_types`, Qwen 2's
// use_sliding_window from max_window_layers on. Each golden prompt twice: as llama.cpp's golden prompted it, and
// with 30 tokens of prompt, so that a prefill spans the window. The hybrid cache (its windowed layers' blocks
// released as the window passes them) and a cache that keeps every position follow them alike.
TEST(HfLoader, SlidingWindowConfigsMatchTransformers) {
  struct Variant {
    const char* name;
    int window;
    std::vector<bool> layers;
  };
  for (const Variant& v :
       {Variant{"mistral-sliding-window", 7, {true, true}}, Variant{"ministral-layer-types", 12, {true, false}},
        Variant{"qwen2-sliding-window", 9, {false, true}}}) {
    SCOPED_TRACE(v.name);
    const json ref = hf_variant_golden(v.name);
    TempDir tmp;
    write_hf_variant_folder(ref, tmp.path());
    auto m = load_model(tmp.path());
    EXPECT_EQ(m->config.sliding_window, v.window);
    EXPECT_EQ(m->config.swa_layers, v.layers);
    EXPECT_EQ(m->config.rope_base_swa, m->config.rope_base);
    EXPECT_EQ(expect_follows_on_both_caches(*m, ref, 1e-4f), 3u * 48u + 2u * 23u + 22u);
  }
}

// Llama 4 as its Hugging Face checkpoints hold it (Llama4ForCausalLM; Llama4ForConditionalGeneration's text_config
// and language_model. prefix): the experts' fused gate_up_proj / down_proj, feed_forward names, interleaved
// q / k rows, no_rope_layers, Scout's Llama 3 scaling (low = high frequency factor). With llama.cpp's chunk and
// floor scale (8192) it gives llama.cpp's logits; with a chunk of 8 and a floor scale of 4, transformers'
// (tests/golden/hf/llama4-chunked-temperature.json), prompts of 5-6 and of 30 tokens, on a hybrid cache (the
// chunked layers' blocks released behind their window) and a full one. Chunking and the temperature each matter.
TEST(HfLoader, Llama4MatchesLlamaCppAndTransformers) {
  {
    const ArchHfCopy copy("tiny-llama4");
    const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
    EXPECT_EQ(a.arch, "llama4");
    EXPECT_EQ(a.rope_style, RopeStyle::Interleaved);
    EXPECT_EQ(a.expert_gating, ModelConfig::ExpertGating::SigmoidChosen);
    EXPECT_TRUE(a.expert_weight_before_ffn);
    EXPECT_EQ(a.moe_layer_step, b.moe_layer_step);
    EXPECT_EQ(a.n_ff, b.n_ff);
    EXPECT_EQ(a.n_ff_exp, b.n_ff_exp);
    EXPECT_EQ(a.swa_layers, b.swa_layers);
    EXPECT_EQ(a.nope_layers, b.nope_layers);
    EXPECT_EQ(a.sliding_window, 8192);
    EXPECT_TRUE(a.swa_chunked && a.qk_l2_norm && a.attn_temp_nope_only);
    EXPECT_EQ(a.attn_temp_length, b.attn_temp_length);
    EXPECT_FLOAT_EQ(a.attn_temp_offset, 1.0f);
    EXPECT_EQ(a.rope_scaling.type, RopeScaling::Type::Llama3);
    EXPECT_FLOAT_EQ(a.rope_scaling.low_freq_factor, a.rope_scaling.high_freq_factor);
    expect_follows_arch_golden(*copy.hf, "tiny-llama4", 1e-4f);
    EXPECT_EQ(copy.hf->layers[1].gate_exps[0].type, DType::F32);
    // A BF16 checkpoint (Meta's): the fused experts transposed in BF16, bit for bit what the folder holds.
    {
      TempDir bf16;
      make_hf_folder_from_gguf(copy.gguf, bf16.path(), DType::BF16);
      auto m = load_model(bf16.path());
      ASSERT_EQ(m->layers[1].up_exps[2].type, DType::BF16);
      const SafetensorsFile st(bf16 / "model.safetensors");
      const SafetensorsTensor* found = st.find("model.layers.1.feed_forward.experts.gate_up_proj");
      ASSERT_NE(found, nullptr);
      const SafetensorsTensor& gu = *found;
      ASSERT_EQ(gu.dtype, "BF16");
      const int64_t E = a.n_embd, F = a.n_ff_exp;
      const auto* up2 = static_cast<const uint16_t*>(m->layers[1].up_exps[2].data);
      const auto* fused = reinterpret_cast<const uint16_t*>(gu.data);
      for (int64_t j = 0; j < F; ++j)
        for (int64_t k = 0; k < E; ++k) ASSERT_EQ(up2[j * E + k], fused[(2 * E + k) * 2 * F + F + j]) << j << " " << k;
      Generator gen(*m, {.max_context = 64});
      SamplingParams sp;
      sp.max_tokens = 8;
      sp.ignore_eos = true;
      EXPECT_EQ(gen.generate({1, 403, 407}, sp).generated_ids.size(), 8u);
    }
    // The image-text checkpoint's layout: text_config, weights under language_model.
    const json c = read_json(copy.tmp / "config.json");
    write_json(copy.tmp / "config.json",
               {{"architectures", {"Llama4ForConditionalGeneration"}}, {"model_type", "llama4"}, {"text_config", c}});
    expect_follows_arch_golden(*load_model(copy.tmp.path()), "tiny-llama4", 1e-4f);
    json bad = c;
    bad["moe_layers"] = json::array({0, 1});
    write_json(copy.tmp / "config.json", bad);
    expect_error([&] { load_model(copy.tmp.path()); }, {"moe_layers", "interleave_moe_layer_step"});
    bad = c;
    bad["layer_types"] = json::array({"sliding_attention", "full_attention", "full_attention", "full_attention"});
    write_json(copy.tmp / "config.json", bad);
    expect_error([&] { load_model(copy.tmp.path()); }, {"layer_types", "sliding_attention"});
  }
  const json ref = hf_variant_golden("llama4-chunked-temperature");
  TempDir tmp;
  write_hf_variant_folder(ref, tmp.path());
  auto m = load_model(tmp.path());
  EXPECT_EQ(m->config.sliding_window, 8);
  EXPECT_EQ(m->config.attn_temp_length, 4);
  EXPECT_FLOAT_EQ(m->config.attn_temp_scale, 0.5f);
  EXPECT_GT(expect_follows_on_both_caches(*m, ref, 1e-4f), 4u * 48u);  // and the 30-token prompts' steps
  // The worst miss over the steps after the first golden's 30-token prompt.
  const auto miss_after_long_prompt = [&] {
    Generator gen(*m, {.max_context = 512});
    return worst_case_miss(gen, ref["cases"][1]);
  };
  EXPECT_LE(miss_after_long_prompt(), 1e-4f);
  const ModelConfig saved = m->config;
  m->config.swa_chunked = false;  // a sliding window of 8 instead
  EXPECT_GT(miss_after_long_prompt(), 1e-2f);
  m->config = saved;
  m->config.attn_temp_offset = 0.0f;  // Ministral 3's floor(p / length)
  EXPECT_GT(miss_after_long_prompt(), 1e-2f);
  m->config = saved;
  m->config.attn_temp_scale = 0.0f;
  EXPECT_GT(miss_after_long_prompt(), 1e-2f);
  m->config = saved;
  EXPECT_LE(miss_after_long_prompt(), 1e-4f);
}

// gpt-oss as its Hugging Face checkpoints hold it (GptOssForCausalLM): with MXFP4 expert blocks (published
// checkpoints) it gives llama.cpp's logits for the same blocks; with the experts dequantized and the published
// config's untruncated YaRN, transformers' (tests/golden/hf/gpt-oss-untruncated-yarn.json), on a hybrid cache and a
// full one, within 3e-4 (its logits reach 13: float rounding of the two sums' orders). Untruncated YaRN matters:
// the ramp's ends rounded as llama.cpp rounds them miss transformers by more than 0.1.
TEST(HfLoader, GptOssMatchesLlamaCppAndTransformers) {
  {
    const ArchHfCopy copy("tiny-gptoss");
    const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
    EXPECT_TRUE(a.learned_sinks);
    EXPECT_EQ(a.expert_gating, ModelConfig::ExpertGating::SoftmaxWeight);
    EXPECT_EQ(a.ffn_act, FfnActivation::SwigluOai);
    EXPECT_EQ(a.swa_layers, b.swa_layers);
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.rope_scaling_swa.type, RopeScaling::Type::Yarn);
    EXPECT_TRUE(a.rope_scaling.yarn_truncate);
    // The checkpoint's blocks and scales become the GGUF's MXFP4 blocks byte for byte.
    using Experts = std::vector<Tensor> LayerWeights::*;
    for (const Experts exps : {&LayerWeights::gate_exps, &LayerWeights::up_exps, &LayerWeights::down_exps}) {
      const Tensor& h = (copy.hf->layers[1].*exps)[3];
      const Tensor& r = (copy.ref->layers[1].*exps)[3];
      ASSERT_EQ(h.type, DType::MXFP4);
      ASSERT_EQ(r.type, DType::MXFP4);
      ASSERT_EQ(h.ne, r.ne);
      EXPECT_EQ(std::memcmp(h.data, r.data, row_bytes(DType::MXFP4, h.cols()) * static_cast<size_t>(h.rows())), 0);
    }
    expect_follows_arch_golden(*copy.hf, "tiny-gptoss", 1e-4f);
    // Blocks that do not fit the config are named.
    json c = read_json(copy.tmp / "config.json");
    c["intermediate_size"] = 32;
    write_json(copy.tmp / "config.json", c);
    expect_error([&] { load_model(copy.tmp.path()); }, {"gate_up_proj_blocks", "expected U8 [4, 64, 2, 16]"});
  }
  const json ref = hf_variant_golden("gpt-oss-untruncated-yarn");
  ASSERT_TRUE(ref["dequantized_experts"].get<bool>());
  TempDir tmp;
  write_hf_variant_folder(ref, tmp.path());
  auto m = load_model(tmp.path());
  EXPECT_FALSE(m->config.rope_scaling.yarn_truncate);
  EXPECT_FALSE(m->config.rope_scaling_swa.yarn_truncate);
  EXPECT_EQ(m->layers[0].gate_exps[0].type, DType::F32);
  EXPECT_GT(expect_follows_on_both_caches(*m, ref, 3e-4f), 4u * 48u);
  m->config.rope_scaling.yarn_truncate = m->config.rope_scaling_swa.yarn_truncate = true;
  Generator truncated(*m, {.max_context = 512});
  EXPECT_GT(worst_case_miss(truncated, ref["cases"][0]), 0.1f);
}

// The worst difference between two models' teacher-forced logits over a tiny golden's first sequence.
float worst_logit_difference(const Model& a, const Model& b, const std::string& stem) {
  std::ifstream golden(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + stem + ".jsonl");
  std::string line;
  std::getline(golden, line);
  const json g = json::parse(line);
  auto seq = g["prompt_ids"].get<std::vector<int32_t>>();
  const int n_prompt = static_cast<int>(seq.size());
  for (const int32_t id : g["generated_ids"]) seq.push_back(id);
  Generator ga(a, {.max_context = 512}), gb(b, {.max_context = 512});
  const auto x = ga.teacher_forced_logits(seq, n_prompt), y = gb.teacher_forced_logits(seq, n_prompt);
  float worst = x.size() == y.size() ? 0.0f : INFINITY;
  for (size_t s = 0; s < x.size() && s < y.size(); ++s)
    for (size_t i = 0; i < x[s].size(); ++i) worst = std::max(worst, std::fabs(x[s][i] - y[s][i]));
  return worst;
}

// Gemma 4 as its Hugging Face checkpoints hold it (Gemma4ForCausalLM; Gemma4ForConditionalGeneration's text_config and
// model.language_model. prefix beside its vision and audio towers): norms of w (not 1 + w); the full layers' head
// sizes and KV heads from per_layer_config (as transformers 5 saves it; tiny-gemma4) or global_head_dim and
// num_global_key_value_heads with attention_k_eq_v (tiny-gemma4-moe: no v_proj on its full layers); proportional RoPE
// from rope_parameters; KV sharing; double-wide FFNs on the shared layers; per-layer embeddings; layer_scalar; the
// router and the fused experts. Read into the GGUF file's configuration, they give its logits, and transformers' for
// the same weights (tests/golden/hf/gemma4-*.json, prompts of 4-5 and of 30 tokens over a window of 8) within 1e-4 on
// a hybrid cache and a full one. llama.cpp's goldens are 5e-3 away, as for the GGUF files (ggml's f16 GELU table).
TEST(HfLoader, Gemma4MatchesGgufAndTransformers) {
  const std::pair<std::string, std::string> files[] = {{"tiny-gemma4", "gemma4-shared-kv"},
                                                       {"tiny-gemma4-moe", "gemma4-moe"}};
  for (const auto& [stem, variant] : files) {
    SCOPED_TRACE(stem);
    const ArchHfCopy copy(stem);
    const ModelConfig &a = copy.hf->config, &b = copy.ref->config;
    EXPECT_EQ(a.arch, "gemma4");
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.head_dim_swa, b.head_dim_swa);
    EXPECT_EQ(a.n_rot, b.n_rot);
    EXPECT_EQ(a.n_rot_swa, b.n_rot_swa);
    EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
    EXPECT_EQ(a.layer_kv_heads, b.layer_kv_heads);
    EXPECT_EQ(a.n_ff, b.n_ff);
    EXPECT_EQ(a.layer_n_ff, b.layer_n_ff);
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.swa_layers, b.swa_layers);
    EXPECT_EQ(a.rope_base, b.rope_base);
    EXPECT_EQ(a.rope_base_swa, b.rope_base_swa);
    EXPECT_EQ(a.rope_scaling.freq_factors, b.rope_scaling.freq_factors);
    EXPECT_TRUE(a.rope_scaling_swa.freq_factors.empty());
    EXPECT_EQ(a.n_kv_shared_layers, b.n_kv_shared_layers);
    EXPECT_TRUE(a.v_norm && a.qk_norm && a.post_norms);
    EXPECT_EQ(a.attn_scale, 1.0f);
    EXPECT_EQ(a.attn_softcap, 0.0f);
    EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
    EXPECT_EQ(a.embd_scale, b.embd_scale);
    EXPECT_EQ(a.tied_output, b.tied_output);
    EXPECT_EQ(a.n_embd_per_layer, b.n_embd_per_layer);
    EXPECT_EQ(a.moe_dense_branch, b.moe_dense_branch);
    EXPECT_EQ(a.n_expert, b.n_expert);
    EXPECT_EQ(a.n_expert_used, b.n_expert_used);
    EXPECT_EQ(a.n_ff_exp, b.n_ff_exp);
    EXPECT_EQ(a.expert_gating, b.expert_gating);
    EXPECT_EQ(a.expert_weights_norm, b.expert_weights_norm);
    // tiny-gemma4's layer 3 lacks attn_v; without attention_k_eq_v its folder holds the keys' projection as v_proj.
    EXPECT_EQ(copy.hf->layers[3].wv.valid(), stem == "tiny-gemma4");
    EXPECT_FALSE(copy.hf->layers[static_cast<size_t>(a.n_layers - 1)].wk.valid() && a.n_kv_shared_layers > 0);
    // GELU as transformers computes it; with it, the GGUF file gives the same logits.
    EXPECT_TRUE(a.gelu_exact);
    EXPECT_FALSE(b.gelu_exact);
    copy.ref->config.gelu_exact = true;
    EXPECT_LE(worst_logit_difference(*copy.hf, *copy.ref, stem), 1e-5f);
    expect_follows_arch_golden(*copy.hf, stem, 5e-3f);
    const json ref = hf_variant_golden(variant);
    EXPECT_EQ(ref["base"], "tests/golden/arch/" + stem + ".gguf");
    EXPECT_TRUE(ref["config_edits"].empty());  // the folder as written: copy.hf
    EXPECT_GT(expect_follows_on_both_caches(*copy.hf, ref, 1e-4f), 4u * 48u);
    // ggml's f16 GELU table instead misses transformers by more.
    copy.hf->config.gelu_exact = false;
    Generator table(*copy.hf, {.max_context = 512});
    EXPECT_GT(worst_case_miss(table, ref["cases"][0]), 2e-4f);
  }

  // The image-text checkpoint's layout: text_config, the text model under model.language_model.
  const ArchHfCopy copy("tiny-gemma4-moe");
  const json causal = read_json(copy.tmp / "config.json");
  json text = causal;
  text.erase("architectures");
  text["model_type"] = "gemma4_text";
  write_json(copy.tmp / "config.json", {{"architectures", {"Gemma4ForConditionalGeneration"}},
                                        {"model_type", "gemma4"},
                                        {"text_config", text},
                                        {"vision_config", {{"model_type", "gemma4_vision"}}},
                                        {"audio_config", {{"model_type", "gemma4_audio"}}}});
  rename_safetensors(copy.tmp / "model.safetensors", "model.language_model.", "lm_head.weight",
                     {"model.vision_tower.encoder.layers.0.mlp.gate_proj.linear.weight",
                      "model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight"});
  auto image_text = load_model(copy.tmp.path());
  EXPECT_EQ(image_text->config.arch, "gemma4");
  copy.ref->config.gelu_exact = true;
  EXPECT_LE(worst_logit_difference(*image_text, *copy.ref, "tiny-gemma4-moe"), 1e-5f);
}

// Gemma 4 configs the reader refuses, each by name, and what transformers changes without refusing: it makes the
// last layer a full one whatever layer_types says.
TEST(HfLoader, Gemma4ConfigErrorsAreNamed) {
  const ArchHfCopy copy("tiny-gemma4");
  const json good = read_json(copy.tmp / "config.json");
  const auto with = [&](const std::function<void(json&)>& edit) {
    json c = good;
    edit(c);
    write_json(copy.tmp / "config.json", c);
  };
  with([](json& c) { c["layer_types"][5] = "sliding_attention"; });
  EXPECT_FALSE(load_model(copy.tmp.path())->config.is_swa_layer(5));
  const std::pair<std::function<void(json&)>, std::vector<std::string>> cases[] = {
      {[](json& c) { c["per_layer_config"]["3"]["head_dim"] = 64; },
       {"layer 3 has head_dim 64", "one size per layer type"}},
      {[](json& c) {
         c["per_layer_config"]["9"] = {{"head_dim", 32}};
       },
       {"per_layer_config key '9'"}},
      {[](json& c) { c["per_layer_config"]["1"]["sliding_window"] = 4; },
       {"per_layer_config['1'].sliding_window", "not supported"}},
      {[](json& c) { c["per_layer_config"]["1"]["num_key_value_heads"] = 3; },
       {"layer 1", "multiple of its 3 KV heads"}},
      {[](json& c) { c["rope_parameters"]["sliding_attention"]["rope_type"] = "proportional"; },
       {"rope_parameters.sliding_attention", "proportional", "not supported"}},
      {[](json& c) { c["rope_parameters"].erase("full_attention"); }, {"rope_parameters", "full_attention"}},
      {[](json& c) { c["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 2.0; },
       {"partial_rotary_factor 2 exceeds 1"}},
      {[](json& c) { c["num_kv_shared_layers"] = 5; }, {"layer 1 shares the KV", "full-attention", "there is none"}},
      {[](json& c) { c["num_kv_shared_layers"] = 6; }, {"num_kv_shared_layers 6"}},
      {[](json& c) { c["use_bidirectional_attention"] = "all"; }, {"bidirectional"}},
      {[](json& c) { c["sliding_window"] = nullptr; }, {"needs a sliding_window"}},
      {[](json& c) { c["vocab_size_per_layer_input"] = 256; }, {"vocab_size_per_layer_input 256"}},
      {[](json& c) { c["enable_moe_block"] = true; }, {"num_experts"}},
  };
  for (const auto& [edit, needles] : cases) {
    with(edit);
    expect_error([&] { load_model(copy.tmp.path()); }, needles);
  }
}

void expect_same_rope(const RopeScaling& a, const RopeScaling& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_FLOAT_EQ(a.factor, b.factor);
  EXPECT_EQ(a.original_context, b.original_context);
  EXPECT_FLOAT_EQ(a.attn_factor, b.attn_factor);
  EXPECT_EQ(a.long_factors, b.long_factors);
  EXPECT_EQ(a.short_factors, b.short_factors);
  EXPECT_FLOAT_EQ(a.yarn_beta_fast, b.yarn_beta_fast);
  EXPECT_FLOAT_EQ(a.yarn_beta_slow, b.yarn_beta_slow);
}

// transformers 5 saves RoPE as `rope_parameters` (tests/data/hf/transformers5/, what it saved for each tiny
// golden's folder: scripts/make_transformers5_configs.py): the same configuration as the earlier keys give, and
// llama.cpp's logits. Without reading them, a folder saved by transformers 5 ran at rope_theta 10000 whatever
// its base.
TEST(HfLoader, Transformers5RopeParametersReadAsTheEarlierKeys) {
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/tests/data/hf/transformers5/";
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string stem = entry.path().stem().string();
    SCOPED_TRACE(stem);
    ++n;
    const bool linear = stem == "tiny-gemma3-linear";
    const std::string base = linear ? "tiny-gemma3" : stem;
    TempDir tmp;
    make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/" + base + ".gguf", tmp.path(),
                             DType::F32);
    if (linear) {
      json c = read_json(tmp / "config.json");
      c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
      write_json(tmp / "config.json", c);
    }
    const ModelConfig earlier = load_model(tmp.path())->config;
    const json saved = read_json(entry.path().string());
    ASSERT_TRUE(saved.contains("rope_parameters"));
    ASSERT_FALSE(saved.contains("rope_theta"));
    write_json(tmp / "config.json", saved);
    auto m = load_model(tmp.path());
    const ModelConfig& c = m->config;
    EXPECT_EQ(c.rope_base, earlier.rope_base);
    EXPECT_EQ(c.n_rot, earlier.n_rot);
    expect_same_rope(c.rope_scaling, earlier.rope_scaling);
    EXPECT_EQ(c.rope_base_swa, earlier.rope_base_swa);
    expect_same_rope(c.rope_scaling_swa, earlier.rope_scaling_swa);
    EXPECT_EQ(c.sliding_window, earlier.sliding_window);
    EXPECT_EQ(c.swa_layers, earlier.swa_layers);
    EXPECT_FLOAT_EQ(c.attn_scale, earlier.attn_scale);
    if (linear) {
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
      EXPECT_EQ(c.rope_scaling_swa.type, RopeScaling::Type::None);  // the local layers are not scaled
      EXPECT_EQ(c.rope_base_swa, 10000.0f);
    } else {
      expect_follows_arch_golden(*m, stem, stem == "tiny-deepseek2-yarn" ? 2e-4f : 1e-3f);
    }
  }
  EXPECT_EQ(n, 17u);
}

// generation_config.json beside the weights: the model's recommended sampling (SamplingDefaults.* has the rules).
TEST(HfLoader, GenerationConfigGivesSamplingDefaults) {
  TempDir tmp;
  make_hf_folder_from_gguf(golden_model("tiny-gqa.gguf"), tmp.path(), DType::F32);
  EXPECT_TRUE(load_model(tmp.path())->sampling_defaults.empty());
  write_json(tmp / "generation_config.json", {{"temperature", 0.6}, {"top_p", 0.95}, {"top_k", 20}});
  const SamplingDefaults d = load_model(tmp.path())->sampling_defaults;
  EXPECT_EQ(d.describe(), "temperature 0.6, top_p 0.95, top_k 20");
  write_json(tmp / "generation_config.json", {{"top_p", 2}});
  expect_error([&] { load_model(tmp.path()); }, {"generation_config.json", "top_p"});
}

TEST(HfLoader, RopeParametersErrorsAreNamed) {
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-qwen3.gguf", tmp.path(),
                           DType::F32);
  json good = read_json(tmp / "config.json");
  good.erase("rope_theta");
  good.erase("rope_scaling");
  const auto with = [&](const json& rp, std::initializer_list<std::string> needles) {
    json c = good;
    c["rope_parameters"] = rp;
    write_json(tmp / "config.json", c);
    expect_error([&] { load_model(tmp.path()); }, needles);
  };
  with(json::array({1}), {"rope_parameters", "object"});
  with({{"rope_theta", 1e6}, {"rope_type", 3}}, {"rope_type", "string"});
  with({{"rope_theta", 1e6}, {"rope_type", "dynamic"}, {"factor", 2.0}}, {"dynamic"});
  with({{"rope_theta", -1.0}}, {"rope_theta"});
  with({{"full_attention", {{"rope_theta", 1e6}}}, {"chunked_attention", {{"rope_theta", 1e4}}}},
       {"chunked_attention"});
  with({{"full_attention", {{"rope_theta", 1e6}}},
        {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "linear"}, {"factor", 2.0}}}},
       {"sliding_attention", "linear"});
}

// Which layers slide, and over how many positions, as transformers' config classes read config.json.
TEST(HfLoader, SlidingWindowDefaultsFollowTransformers) {
  TempDir tmp;
  make_hf_folder_from_gguf(golden_model("tiny-gqa.gguf"), tmp.path(), DType::F32);
  const json good = read_json(tmp / "config.json");
  const auto config_with = [&](const json& edits) {
    json c = good;
    for (const auto& [key, value] : edits.items()) c[key] = value;
    write_json(tmp / "config.json", c);
    return load_model(tmp.path())->config;
  };
  const json mistral = {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}};
  const ModelConfig absent = config_with(mistral);  // MistralConfig's default window
  EXPECT_EQ(absent.sliding_window, 4096);
  EXPECT_EQ(absent.swa_layers, (std::vector<bool>{true, true}));
  json edits = mistral;
  edits["sliding_window"] = nullptr;  // Mistral v0.2 on: full attention
  EXPECT_TRUE(config_with(edits).swa_layers.empty());
  edits["sliding_window"] = 5;
  edits["layer_types"] = {"full_attention", "full_attention"};  // MistralForCausalLM slides every layer anyway
  EXPECT_EQ(config_with(edits).swa_layers, (std::vector<bool>{true, true}));
  // MixtralConfig's default: none (the folder has no experts to load; kv-calc reads configs so).
  EXPECT_EQ(hf_sliding_window_layers(good, "mixtral", 2, "config.json").window, 0);
  EXPECT_EQ(hf_sliding_window_layers(json{{"sliding_window", 5}}, "mixtral", 2, "config.json").layers,
            (std::vector<bool>{true, true}));
  // Qwen 2: a window only with use_sliding_window, on the layers from max_window_layers (28) on.
  const auto qwen2 = [](const json& c) { return hf_sliding_window_layers(c, "qwen2", 3, "config.json"); };
  EXPECT_EQ(qwen2(json{{"sliding_window", 5}}).window, 0);
  EXPECT_EQ(qwen2(json{{"sliding_window", 5}, {"use_sliding_window", true}}).layers,
            (std::vector<bool>{false, false, false}));
  EXPECT_EQ(qwen2(json{{"use_sliding_window", true}, {"max_window_layers", 1}}).window, 4096);
  EXPECT_EQ(qwen2(json{{"use_sliding_window", true}, {"max_window_layers", 1}}).layers,
            (std::vector<bool>{false, true, true}));
  EXPECT_EQ(qwen2(json{{"use_sliding_window", true}, {"max_window_layers", 0}}).layers,
            (std::vector<bool>{true, true, true}));
  edits = {{"architectures", {"MinistralForCausalLM"}}, {"model_type", "ministral"}};
  const ModelConfig ministral = config_with(edits);
  EXPECT_EQ(ministral.sliding_window, 4096);
  EXPECT_EQ(ministral.swa_layers, (std::vector<bool>{true, true}));

  const auto error_with = [&](const json& e, std::initializer_list<std::string> needles) {
    json c = good;
    for (const auto& [key, value] : e.items()) c[key] = value;
    write_json(tmp / "config.json", c);
    expect_error([&] { load_model(tmp.path()); }, needles);
  };
  error_with({{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 0}}, {"sliding_window", "out of range"});
  error_with({{"architectures", {"MistralForCausalLM"}}, {"sliding_window", "4096"}}, {"sliding_window", "integer"});
  expect_error([&] { qwen2(json{{"use_sliding_window", true}, {"max_window_layers", -1}}); }, {"max_window_layers"});
  error_with({{"architectures", {"MinistralForCausalLM"}}, {"layer_types", {"sliding_attention"}}},
             {"layer_types", "2 layers"});
}

TEST(HfLoader, DeepseekConfigErrorsAreNamed) {
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-deepseek3.gguf", tmp.path(),
                           DType::F32);
  const json good = read_json(tmp / "config.json");
  const auto with = [&](const char* key, const json& value, std::initializer_list<std::string> needles) {
    json c = good;
    c[key] = value;
    write_json(tmp / "config.json", c);
    expect_error([&] { load_model(tmp.path()); }, needles);
  };
  with("scoring_func", "sqrtsoftplus", {"scoring_func", "sqrtsoftplus"});
  with("topk_method", "random", {"topk_method", "random"});
  with("topk_group", 4, {"topk_group 4"});
  with("first_k_dense_replace", 7, {"first_k_dense_replace 7"});
  with("qk_rope_head_dim", 7, {"qk_rope_head_dim 7"});
  with("v_head_dim", 24, {"kv_b_proj"});  // the tensor's rows no longer match
}

// YaRN (Qwen2.5/3's long-context rope_scaling: factor, original_max_position_embeddings, transformers'
// attention factor 0.1 ln factor + 1 by default): the GGUF file's configuration and llama.cpp's logits.
TEST(HfLoader, YarnRopeScalingMatchesGgufAndLlamaCpp) {
  const ArchHfCopy copy("tiny-qwen3-yarn");
  const RopeScaling &a = copy.hf->config.rope_scaling, &b = copy.ref->config.rope_scaling;
  EXPECT_EQ(a.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(a.factor, 4.0f);
  EXPECT_EQ(a.original_context, b.original_context);
  EXPECT_FLOAT_EQ(a.attn_factor, b.attn_factor);
  expect_follows_arch_golden(*copy.hf, "tiny-qwen3-yarn", 1e-4f);
}

// A Gemma 3 folder whose config asks for what kvserve does not run, or lists its layers wrong.
TEST(HfLoaderGemmaErrors, BadActivationAndLayerTypesAreNamed) {
  TempDir tmp;
  make_hf_folder_from_gguf(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gemma3.gguf", tmp.path(),
                           DType::F32);
  const json good = read_json(tmp / "config.json");
  json c = good;
  c["hidden_activation"] = "relu";
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"hidden_activation", "relu"});
  c = good;
  c["layer_types"] = json::array({"sliding_attention"});
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"layer_types", "6 layers"});
  c = good;
  c["layer_types"][2] = "chunked_attention";
  write_json(tmp / "config.json", c);
  expect_error([&] { load_model(tmp.path()); }, {"layer_types[2]"});
  c = good;
  c["sliding_window"] = nullptr;  // no local layers at all
  write_json(tmp / "config.json", c);
  EXPECT_EQ(load_model(tmp.path())->config.sliding_window, 0);
}

TEST_F(HfLoaderErrors, RopeScalingIsRead) {
  edit_config([](json& c) {
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 256}};
  });
  auto m = load_model(tmp.path());
  EXPECT_EQ(m->config.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_EQ(m->config.rope_scaling.factor, 8.0f);
  EXPECT_EQ(m->config.rope_scaling.original_context, 256);
  edit_config([](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; });
  m = load_model(tmp.path());
  EXPECT_EQ(m->config.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_EQ(m->config.rope_scaling.factor, 2.0f);
}

TEST_F(HfLoaderErrors, MissingTensorIsNamed) {
  SafetensorsFile whole(tmp / "model.safetensors");
  SafetensorsWriter w;
  for (const auto& [name, t] : whole.tensors()) {
    if (name == "model.layers.1.mlp.up_proj.weight") continue;
    w.entries.push_back({name, t.dtype == "F32" ? DType::F32 : DType::F16, t.shape,
                         std::vector<uint8_t>(t.data, t.data + t.n_bytes)});
  }
  w.write(tmp / "model.safetensors.new");
  fs::rename(tmp / "model.safetensors.new", tmp / "model.safetensors");
  expect_error([&] { load_model(tmp.path()); }, {"model.layers.1.mlp.up_proj.weight"});
}

TEST_F(HfLoaderErrors, MissingLmHeadWithoutTieIsNamed) {
  SafetensorsFile whole(tmp / "model.safetensors");
  SafetensorsWriter w;
  for (const auto& [name, t] : whole.tensors())
    if (name != "lm_head.weight")
      w.entries.push_back({name, t.dtype == "F32" ? DType::F32 : DType::F16, t.shape,
                           std::vector<uint8_t>(t.data, t.data + t.n_bytes)});
  w.write(tmp / "model.safetensors.new");
  fs::rename(tmp / "model.safetensors.new", tmp / "model.safetensors");
  expect_error([&] { load_model(tmp.path()); }, {"lm_head.weight"});
}

TEST_F(HfLoaderErrors, WrongShapeIsNamed) {
  edit_config([](json& c) { c["intermediate_size"] = 512; });
  expect_error([&] { load_model(tmp.path()); }, {"ffn_gate"});
}

TEST_F(HfLoaderErrors, TruncatedWeightsFileIsNamed) {
  const auto size = fs::file_size(tmp / "model.safetensors");
  fs::resize_file(tmp / "model.safetensors", size - 1000);
  expect_error([&] { load_model(tmp.path()); }, {"model.safetensors", "out of range"});
}

TEST_F(HfLoaderErrors, MissingTokenizerJson) {
  fs::remove(tmp / "tokenizer.json");
  expect_error([&] { load_model(tmp.path()); }, {"tokenizer.json"});
}

// ---- safetensors reader on malformed bytes -----------------------------------------------------

TEST(Safetensors, ParsesTensorsAndIgnoresMetadata) {
  std::vector<uint8_t> data(4 * 6 + 2 * 3);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]}})";
  auto bytes = safetensors_bytes(header, data);
  SafetensorsFile f(bytes.data(), bytes.size(), "buf");
  EXPECT_EQ(f.tensors().size(), 2u);
  Tensor a = f.tensor("a");
  EXPECT_EQ(a.type, DType::F32);
  EXPECT_EQ(a.n_dims, 2);
  EXPECT_EQ(a.ne[0], 3);  // contiguous dim first, as GGUF
  EXPECT_EQ(a.ne[1], 2);
  EXPECT_EQ(static_cast<const uint8_t*>(a.data), bytes.data() + 8 + header.size());
  EXPECT_EQ(f.tensor("b").type, DType::BF16);
}

TEST(Safetensors, TruncatedHeaderLength) {
  const std::vector<uint8_t> bytes = {1, 2, 3};
  expect_error([&] { parse_buffer(bytes); }, {"buf.safetensors", "too short"});
}

TEST(Safetensors, HeaderLengthPastEof) {
  auto bytes = safetensors_bytes("{}");
  bytes[0] = 200;
  expect_error([&] { parse_buffer(bytes); }, {"buf.safetensors", "past the end"});
  bytes[0] = 0xff, bytes[7] = 0xff;  // huge length must not overflow the check
  expect_error([&] { parse_buffer(bytes); }, {"past the end"});
}

TEST(Safetensors, BadHeaderJson) {
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"a": {"dtype": )")); }, {"buf.safetensors", "JSON"});
  expect_error([&] { parse_buffer(safetensors_bytes("[1,2]")); }, {"not a JSON object"});
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"a": 3})")); }, {"'a'"});
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"a": {"dtype":"F32","shape":[1]}})")); },
               {"'a'", "data_offsets"});
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"a": {"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})")); },
               {"'a'", "shape"});
}

TEST(Safetensors, OffsetsOutOfRange) {
  const std::vector<uint8_t> data(8);
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data)); },
               {"'w'", "out of range"});
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", data)); },
               {"'w'", "out of range"});
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,4]}})", data)); },
               {"'w'"});
  // Size that disagrees with dtype × shape, and a shape whose element count overflows.
  expect_error([&] { parse_buffer(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)); },
               {"'w'", "need"});
  expect_error([&] {
    parse_buffer(safetensors_bytes(
        R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})", data));
  }, {"'w'", "overflow"});
}

TEST(Safetensors, UnsupportedDtypeNamesTensorAndDtype) {
  const std::vector<uint8_t> data(16);
  auto bytes = safetensors_bytes(R"({"position_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data);
  SafetensorsFile f(bytes.data(), bytes.size(), "buf");
  expect_error([&] { f.tensor("position_ids"); }, {"position_ids", "I64"});
  expect_error([&] { f.tensor("nope"); }, {"nope", "not found"});
}

// ---- tokenizer.json → Vocab → Tokenizer vs the `tokenizers` library ---------------------------

namespace {

// Texts where HF's Metaspace pre-tokenizer and llama.cpp's SPM tokenizer (which kvserve follows)
// legitimately differ: Metaspace skips the "▁" prefix when the text already starts with a space and adds
// none after a special token; llama.cpp always adds it. Vocab cannot express Metaspace's rule, so these
// are left out for SPM fixtures (a tokenizer-side option would be needed to match them).
bool spm_prefix_divergence(const std::string& text) {
  return (!text.empty() && text[0] == ' ') || text.find("<s>") != std::string::npos;
}

void expect_reference_ids(const std::string& fixture, Vocab::Kind kind, const std::string& pre) {
  const std::string dir = hf_fixture_dir(fixture);
  Vocab v = vocab_from_tokenizer_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  EXPECT_EQ(v.kind, kind);
  EXPECT_EQ(v.pre, pre);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::create(v);
  } catch (const Error& e) {
    FAIL() << e.what();
  }
  std::ifstream in(dir + "/reference.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    const std::string text = row["text"];
    if (kind == Vocab::Kind::SPM && spm_prefix_divergence(text)) continue;
    // `tokenizers` matches added-token text inside the input, so parse_special is on.
    EXPECT_EQ(tok->encode(text, /*add_special=*/true, /*parse_special=*/true),
              row["ids_with_special"].get<std::vector<int32_t>>())
        << fixture << ": " << text;
    EXPECT_EQ(tok->encode(text, /*add_special=*/false, /*parse_special=*/true), row["ids"].get<std::vector<int32_t>>())
        << fixture << ": " << text;
    ++n;
  }
  EXPECT_GE(n, kind == Vocab::Kind::SPM ? 35 : 40);
}

}  // namespace

TEST(HfTokenizer, Stories512MatchesTokenizersLibrary) {
  expect_reference_ids("stories512", Vocab::Kind::SPM, "default");
}

TEST(HfTokenizer, SmolLM2MatchesTokenizersLibrary) {
  expect_reference_ids("smollm2", Vocab::Kind::BPE, "smollm");
}

TEST(HfTokenizer, SmolLM2VocabMatchesGguf) {
  const std::string gguf = model_cache_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << "no " << gguf;
  const std::string dir = hf_fixture_dir("smollm2");
  const Vocab v = vocab_from_tokenizer_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  const Vocab ref = load_gguf_vocab(gguf);
  EXPECT_EQ(v.tokens, ref.tokens);
  EXPECT_EQ(v.merges, ref.merges);
  EXPECT_EQ(v.pre, ref.pre);
  EXPECT_EQ(v.bos_id, ref.bos_id);
  EXPECT_EQ(v.eos_id, ref.eos_id);
  EXPECT_EQ(v.eot_id, ref.eot_id);
}

TEST(HfTokenizer, StoriesPromptIdsMatchLlamaCppGolden) {
  // The golden prompt ids come from llama.cpp's tokenizer on the same vocabulary.
  const std::string dir = hf_fixture_dir("stories512");
  auto tok = Tokenizer::create(vocab_from_tokenizer_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json"));
  std::ifstream in(shared_dir() + "/golden/gguf/golden/tiny-gqa.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    EXPECT_EQ(tok->encode(row["prompt"].get<std::string>(), true, false),
              row["prompt_ids"].get<std::vector<int32_t>>());
    ++n;
  }
  EXPECT_GT(n, 0);
}

// An added token with lstrip / rstrip swallows the whitespace on that side of it when special tokens are
// parsed, as the tokenizers library matches such a token together with its whitespace.
TEST(HfTokenizer, AddedTokensStripTheirWhitespace) {
  TempDir tmp;
  json t = read_json(hf_fixture_dir("stories512") + "/tokenizer.json");
  const int64_t id = static_cast<int64_t>(t["model"]["vocab"].size()) + 7;
  t["added_tokens"].push_back({{"id", id}, {"content", "<|user|>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}});
  t["added_tokens"].push_back({{"id", id + 1}, {"content", "<|end|>"}, {"special", true}});
  write_json(tmp / "tokenizer.json", t);
  auto tok = Tokenizer::create(vocab_from_tokenizer_json(tmp / "tokenizer.json", ""));
  const auto ids = [&](const std::string& text) { return tok->encode(text, false, true); };
  EXPECT_EQ(ids("Once upon \t <|user|>\n  a time"), ids("Once upon<|user|>a time"));
  EXPECT_NE(ids("Once upon <|end|> a time"), ids("Once upon<|end|>a time"));  // no strip: spaces stay
  const std::vector<int32_t> xy = ids("x <|user|> y");
  EXPECT_EQ(std::count(xy.begin(), xy.end(), static_cast<int32_t>(id)), 1);
}

// A folder's eos_token_id lists end generation, each id (Llama 3.1 names three), from config.json and from
// generation_config.json (a number or a list), as transformers' generate() and vLLM stop; ids past the
// vocabulary are passed over, a value that is not an id is named.
TEST(HfTokenizer, EosTokenIdListsEndGeneration) {
  TempDir tmp;
  const std::string src = hf_fixture_dir("stories512");
  fs::copy_file(src + "/tokenizer.json", tmp / "tokenizer.json");
  const auto load = [&] {
    return Tokenizer::create(vocab_from_tokenizer_json(tmp / "tokenizer.json", "", tmp / "config.json"));
  };
  write_json(tmp / "config.json", {{"eos_token_id", 2}});
  const std::vector<int32_t> plain = load()->eog_ids();
  EXPECT_EQ(plain, std::vector<int32_t>{2});
  write_json(tmp / "config.json", {{"eos_token_id", {2, 100, 100000}}});
  write_json(tmp / "generation_config.json", {{"eos_token_id", 7}});
  auto tok = load();
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->eog_ids(), (std::vector<int32_t>{2, 7, 100}));
  EXPECT_TRUE(tok->is_eog(100));
  EXPECT_TRUE(tok->is_eog(7));
  EXPECT_FALSE(tok->is_eog(8));
  write_json(tmp / "generation_config.json", {{"eos_token_id", {9, 11}}});
  EXPECT_EQ(load()->eog_ids(), (std::vector<int32_t>{2, 9, 11, 100}));
  write_json(tmp / "generation_config.json", {{"eos_token_id", {9, "x"}}});
  expect_error(load, {"generation_config.json", "eos_token_id"});
  write_json(tmp / "generation_config.json", {{"eos_token_id", nullptr}});
  write_json(tmp / "config.json", {{"eos_token_id", -3}});
  expect_error(load, {"config.json", "eos_token_id"});
}

TEST(HfTokenizer, UnsupportedModelTypeIsNamed) {
  TempDir tmp;
  write_json(tmp / "tokenizer.json", {{"model", {{"type", "Unigram"}, {"vocab", json::array()}}}});
  expect_error([&] { vocab_from_tokenizer_json(tmp / "tokenizer.json", ""); }, {"tokenizer.json", "Unigram"});
}

// Split regexes llama.cpp knows by other names (tekken: Mistral Nemo / Small 3 / Ministral; gpt-4o: o200k, Llama 4,
// gpt-oss), and a Llama 3 split whose file turns ignore_merges off: the SmolLM2 fixture's vocabulary under each,
// against the `tokenizers` library's ids (tests/data/hf/splits, scripts/make_hf_split_fixtures.py).
TEST(HfTokenizer, SplitRegexesMatchTokenizersLibrary) {
  const std::string base = hf_fixture_dir("smollm2");
  const std::pair<const char*, const char*> fixtures[] = {
      {"tekken", "tekken"}, {"gpt-4o", "gpt-4o"}, {"llama3-merges", "llama-bpe"}};
  for (const auto& [name, pre] : fixtures) {
    SCOPED_TRACE(name);
    std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/hf/splits/" + name + ".jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    const json head = json::parse(line);
    json t = read_json(base + "/tokenizer.json");
    t["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", head["regex"]}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    t["model"]["ignore_merges"] = head["ignore_merges"];
    TempDir tmp;
    write_json(tmp / "tokenizer.json", t);
    const Vocab v = vocab_from_tokenizer_json(tmp / "tokenizer.json", base + "/tokenizer_config.json");
    EXPECT_EQ(v.pre, pre);
    EXPECT_EQ(v.ignore_merges, std::optional<bool>(head["ignore_merges"].get<bool>()));
    const auto tok = Tokenizer::create(v);
    int n = 0;
    while (std::getline(in, line)) {
      const json row = json::parse(line);
      const std::string text = row["text"];
      EXPECT_EQ(tok->encode(text, true, true), row["ids_with_special"].get<std::vector<int32_t>>()) << text;
      EXPECT_EQ(tok->encode(text, false, true), row["ids"].get<std::vector<int32_t>>()) << text;
      ++n;
    }
    EXPECT_EQ(n, 50);
  }
}

// ignore_merges as the file says it, whatever the split implies: a word that is a token but that the merges do not
// reach ("abc": only a+b merges) is that token with it on, and the merges' pieces with it off (the BPE model of
// the tokenizers library, either way).
TEST(HfTokenizer, IgnoreMergesFollowsTheFile) {
  TempDir tmp;
  for (const bool ignore : {true, false}) {
    SCOPED_TRACE(ignore);
    json t = {
        {"model",
         {{"type", "BPE"},
          {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}}},
          {"merges", json::array({json::array({"a", "b"})})},
          {"ignore_merges", ignore}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"use_regex", false}}}}}}};
    write_json(tmp / "tokenizer.json", t);
    const auto tok = Tokenizer::create(vocab_from_tokenizer_json(tmp / "tokenizer.json", ""));
    const std::vector<int32_t> want = ignore ? std::vector<int32_t>{4} : std::vector<int32_t>{3, 2};
    EXPECT_EQ(tok->encode("abc", false, false), want);
  }
}

TEST(HfTokenizer, UnknownSplitRegexIsRefused) {
  TempDir tmp;
  json t = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", "[a-z]+"}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"use_regex", false}}}}}}};
  write_json(tmp / "tokenizer.json", t);
  expect_error([&] { vocab_from_tokenizer_json(tmp / "tokenizer.json", ""); }, {"tokenizer.json", "[a-z]+"});
}

TEST(HfTokenizer, RecognizesLlama3AndQwenSplits) {
  TempDir tmp;
  const std::pair<const char*, const char*> cases[] = {
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "llama-bpe"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen2"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen35"},
  };
  for (const auto& [regex, pre] : cases) {
    json t = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", json::array({json::array({"a", "b"})})}}},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                  {{"type", "ByteLevel"}, {"use_regex", false}}}}}},
              {"added_tokens", {{{"id", 3}, {"content", "<|im_end|>"}, {"special", true}},
                                {{"id", 4}, {"content", "<think>"}, {"special", false}}}}};
    write_json(tmp / "tokenizer.json", t);
    const Vocab v = vocab_from_tokenizer_json(tmp / "tokenizer.json", "");
    EXPECT_EQ(v.kind, Vocab::Kind::BPE);
    EXPECT_EQ(v.pre, pre);
    EXPECT_EQ(v.merges, std::vector<std::string>{"a b"});
    ASSERT_EQ(v.tokens.size(), 5u);
    EXPECT_EQ(v.token_types[3], TokenType::Control);
    EXPECT_EQ(v.token_types[4], TokenType::UserDefined);
    EXPECT_EQ(v.eot_id, 3);
  }
}
