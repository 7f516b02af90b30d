// Hugging Face folder → Model: config.json for hyper-parameters, model.safetensors (or shards) for the
// weights, tokenizer.json + tokenizer_config.json for the vocabulary.
//
// Weights stay in the mapped files: a safetensors [out, in] row-major matrix is exactly a GGUF
// tensor with ne = {in, out}. HF llama/qwen2 q_proj/k_proj rows are in rotate-half order (llama.cpp's
// converter permutes them to interleaved pairs for its "llama" RoPE); kvserve keeps them unpermuted
// and runs NeoX-style RoPE instead, which is the same computation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/fp16.h"
#include "model/gpt_oss_experts.h"
#include "model/hf_tokenizer.h"
#include "model/json_file.h"
#include "model/loaders.h"
#include "model/mla_weights.h"
#include "model/safetensors.h"
#include "model/sampling_defaults.h"

namespace kvserve {

// Tokenizer::create, or null while no tokenizer is linked in (load_model.cpp).
std::unique_ptr<Tokenizer> make_tokenizer(const Vocab& vocab);

namespace {

using json = nlohmann::json;

struct HfArch {
  const char* hf_name;  // config.json "architectures"[0]
  const char* arch;     // ModelConfig::arch (GGUF general.architecture)
  bool qkv_bias;
  bool qk_norm;
};

// clang-format off
constexpr HfArch kHfArchs[] = {
    {"LlamaForCausalLM", "llama", false, false},
    {"Qwen2ForCausalLM", "qwen2", true, false},
    {"Qwen3ForCausalLM", "qwen3", false, true},
    {"Qwen3MoeForCausalLM", "qwen3moe", false, true},
    {"Qwen2MoeForCausalLM", "qwen2moe", true, false},
    {"MistralForCausalLM", "llama", false, false},
    {"MinistralForCausalLM", "llama", false, false},
    {"Ministral3ForCausalLM", "mistral3", false, false},
    {"MixtralForCausalLM", "llama", false, false},
    {"Phi3ForCausalLM", "phi3", false, false},
    {"GemmaForCausalLM", "gemma", false, false},
    {"Gemma2ForCausalLM", "gemma2", false, false},
    {"Gemma3ForCausalLM", "gemma3", false, true},
    {"Gemma4ForCausalLM", "gemma4", false, true},
    {"SmolLM3ForCausalLM", "smollm3", false, false},
    {"GraniteForCausalLM", "granite", false, false},
    {"Llama4ForCausalLM", "llama4", false, false},
    {"DeepseekV2ForCausalLM", "deepseek2", false, false},
    {"DeepseekV3ForCausalLM", "deepseek2", false, false},
    {"Olmo2ForCausalLM", "olmo2", false, true},
    {"Olmo3ForCausalLM", "olmo2", false, true},
    {"GptOssForCausalLM", "gpt-oss", true, false},
};
// clang-format on

class ConfigReader {
 public:
  ConfigReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  int positive_int(const char* key) const {
    if (!has(key)) fail("'{}': required key '{}' is missing", path_, key);
    return positive_int_value(key, j_[key]);
  }
  int positive_int_or(const char* key, int fallback) const {
    return has(key) ? positive_int_value(key, j_[key]) : fallback;
  }
  float positive_float_or(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_number()) fail("'{}': '{}' must be a number", path_, key);
    const double v = j_[key].get<double>();
    if (!(v > 0) || !std::isfinite(v)) fail("'{}': '{}' = {} must be positive", path_, key, v);
    return static_cast<float>(v);
  }
  bool bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail("'{}': '{}' must be true or false", path_, key);
    return j_[key].get<bool>();
  }

 private:
  int positive_int_value(const char* key, const json& v) const {
    if (!v.is_number_integer()) fail("'{}': '{}' must be an integer", path_, key);
    const int64_t x = v.get<int64_t>();
    if (x <= 0 || x > (int64_t{1} << 30)) fail("'{}': '{}' = {} is out of range", path_, key, x);
    return static_cast<int>(x);
  }

  const json& j_;
  std::string path_;
};

void read_rope_scaling(const json& j, const std::string& path, ModelConfig& c) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) fail("'{}': 'rope_scaling' must be an object", path);
  const json& rs = *it;
  // transformers renamed "type" to "rope_type"; files carry either.
  std::string type = rs.value("rope_type", std::string());
  if (type.empty()) type = rs.value("type", std::string());
  RopeScaling& s = c.rope_scaling;
  auto number = [&](const char* key, double fallback) {
    if (!rs.contains(key) || rs[key].is_null()) return fallback;
    if (!rs[key].is_number()) fail("'{}': rope_scaling.{} must be a number", path, key);
    return rs[key].get<double>();
  };
  if (type == "default" || type.empty()) return;
  if (type == "linear") {
    s.type = RopeScaling::Type::Linear;
    s.factor = static_cast<float>(number("factor", 1.0));
    if (!(s.factor > 0)) fail("'{}': rope_scaling.factor {} must be positive", path, s.factor);
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::Llama3;
    s.factor = static_cast<float>(number("factor", 8.0));
    s.low_freq_factor = static_cast<float>(number("low_freq_factor", 1.0));
    s.high_freq_factor = static_cast<float>(number("high_freq_factor", 4.0));
    const double original = number("original_max_position_embeddings", 8192);
    if (!(original > 0) || original > (1 << 30)) fail("'{}': rope_scaling.original_max_position_embeddings out of range", path);
    s.original_context = static_cast<int>(original);
    // Llama 4 Scout has low_freq_factor = high_freq_factor (no band in between).
    if (!(s.factor > 0) || !(s.high_freq_factor >= s.low_freq_factor) || !(s.low_freq_factor > 0))
      fail("'{}': invalid llama3 rope_scaling parameters", path);
  } else if (type == "longrope" || type == "su") {
    // As transformers' _compute_longrope_parameters: factor = max_position_embeddings / the original one
    // (when the config gives it), the attention factor sqrt(1 + ln factor / ln original) unless given.
    s.type = RopeScaling::Type::LongRope;
    const auto factors = [&](const char* key) {
      if (!rs.contains(key) || !rs[key].is_array() || rs[key].size() != static_cast<size_t>(c.n_rot / 2))
        fail("'{}': rope_scaling.{} must list {} numbers (one per rotated pair)", path, key, c.n_rot / 2);
      std::vector<float> out;
      for (const json& v : rs[key]) {
        if (!v.is_number() || !(v.get<double>() > 0))
          fail("'{}': rope_scaling.{} must hold positive numbers", path, key);
        out.push_back(v.get<float>());
      }
      return out;
    };
    s.long_factors = factors("long_factor");
    s.short_factors = factors("short_factor");
    double original = c.n_ctx_train;
    if (j.contains("original_max_position_embeddings") && !j["original_max_position_embeddings"].is_null()) {
      if (!j["original_max_position_embeddings"].is_number_integer() ||
          j["original_max_position_embeddings"].get<int64_t>() <= 0 ||
          j["original_max_position_embeddings"].get<int64_t>() > (int64_t{1} << 30))
        fail("'{}': original_max_position_embeddings must be a positive integer", path);
      original = static_cast<double>(j["original_max_position_embeddings"].get<int64_t>());
    }
    s.original_context = static_cast<int>(original);
    const double factor = number("factor", c.n_ctx_train / original);
    const double attention = number("attention_factor", factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(original)));
    if (!(attention > 0)) fail("'{}': rope_scaling.attention_factor must be positive", path);
    s.attn_factor = static_cast<float>(attention);
  } else if (type == "yarn") {
    // As transformers' _compute_yarn_parameters: the ramp between beta_fast's and beta_slow's correction
    // dimensions in the original context, cos and sin times attention_factor (0.1 ln factor + 1 unless
    // given). Rope keeps ggml's form, whose attn_factor is that magnitude over 1 + 0.1 ln factor.
    s.type = RopeScaling::Type::Yarn;
    s.factor = static_cast<float>(number("factor", 1.0));
    if (!(s.factor >= 1) || !std::isfinite(s.factor)) fail("'{}': rope_scaling.factor {} must be at least 1", path, s.factor);
    const double original = number("original_max_position_embeddings", c.n_ctx_train);
    if (!(original > 0) || original > (1 << 30)) fail("'{}': rope_scaling.original_max_position_embeddings out of range", path);
    s.original_context = static_cast<int>(original);
    s.yarn_beta_fast = static_cast<float>(number("beta_fast", 32.0));
    s.yarn_beta_slow = static_cast<float>(number("beta_slow", 1.0));
    if (!(s.yarn_beta_fast > s.yarn_beta_slow) || !(s.yarn_beta_slow > 0))
      fail("'{}': rope_scaling beta_fast {} must exceed beta_slow {} > 0", path, s.yarn_beta_fast, s.yarn_beta_slow);
    const double grow = 1.0 + 0.1 * std::log(static_cast<double>(s.factor));
    // With both mscale and mscale_all_dim (Ministral 3, DeepSeek), their ratio of yarn_get_mscale.
    const double mscale = number("mscale", 0.0), mscale_all_dim = number("mscale_all_dim", 0.0);
    const auto get_mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
    const double magnitude =
        number("attention_factor",
               mscale != 0.0 && mscale_all_dim != 0.0 ? get_mscale(mscale) / get_mscale(mscale_all_dim) : grow);
    if (!(magnitude > 0)) fail("'{}': rope_scaling.attention_factor must be positive", path);
    s.attn_factor = static_cast<float>(magnitude / grow);
    if (rs.contains("truncate") && !rs["truncate"].is_null()) {
      if (!rs["truncate"].is_boolean()) fail("'{}': rope_scaling.truncate must be true or false", path);
      s.yarn_truncate = rs["truncate"].get<bool>();
    }
  } else {
    fail("'{}': rope_scaling type '{}' is not supported (supported: linear, llama3, longrope, yarn)", path, type);
  }
}

// Gemma, Gemma 2 and Gemma 3 (text) as transformers builds them, with transformers' defaults for absent keys:
// embeddings times sqrt(hidden_size), GeGLU with the tanh GELU, queries scaled by query_pre_attn_scalar^-0.5
// (head_dim^-0.5 without it); Gemma 2/3 post-norms, logit soft-caps and sliding-window layers (`layer_types`,
// else Gemma 2 every even layer and Gemma 3 all but every sliding_window_pattern-th), the local layers'
// RoPE base rope_local_base_freq (Gemma 3) or rope_theta (Gemma 2). The output is the embedding (Gemma 3:
// unless tie_word_embeddings is false, as transformers and llama.cpp allow).
// The families whose config.json can give layers a sliding window, each read as transformers' config class and
// modeling code read it.
enum class SwaFamily { Gemma2, Gemma3, Gemma4, GptOss, Mistral, Mixtral, Ministral, Ministral3, Olmo3, Qwen2 };

// Each family's architecture and config model_type (Gemma 3's text config also "gemma3_text").
struct SwaFamilyName {
  SwaFamily family;
  const char* hf_arch;
  const char* model_type;
};
constexpr SwaFamilyName kSwaFamilies[] = {
    {SwaFamily::Gemma2, "Gemma2ForCausalLM", "gemma2"},
    {SwaFamily::Gemma3, "Gemma3ForCausalLM", "gemma3"},
    {SwaFamily::Gemma3, "Gemma3ForCausalLM", "gemma3_text"},
    {SwaFamily::Gemma4, "Gemma4ForCausalLM", "gemma4_text"},
    {SwaFamily::GptOss, "GptOssForCausalLM", "gpt_oss"},
    {SwaFamily::Mistral, "MistralForCausalLM", "mistral"},
    {SwaFamily::Mixtral, "MixtralForCausalLM", "mixtral"},
    {SwaFamily::Ministral, "MinistralForCausalLM", "ministral"},
    {SwaFamily::Ministral3, "Ministral3ForCausalLM", "ministral3"},
    {SwaFamily::Olmo3, "Olmo3ForCausalLM", "olmo3"},
    {SwaFamily::Qwen2, "Qwen2ForCausalLM", "qwen2"},
};

std::optional<SwaFamily> swa_family_of_model_type(std::string_view model_type) {
  for (const SwaFamilyName& f : kSwaFamilies)
    if (model_type == f.model_type) return f.family;
  return std::nullopt;
}

std::optional<SwaFamily> swa_family_of_arch(std::string_view hf_arch) {
  for (const SwaFamilyName& f : kSwaFamilies)
    if (hf_arch == f.hf_arch) return f.family;
  return std::nullopt;
}

// The window: `sliding_window` (null: none), by default 4096, except Mixtral's and Ministral 3's (none). Qwen 2 has
// one only with use_sliding_window true. Which layers:
// - Mistral, Mixtral and Ministral 3: every layer (their modeling code ignores `layer_types`);
// - the others: `layer_types` when given, else Gemma 2 every even layer, Gemma 3 all but every
//   sliding_window_pattern-th, OLMo 3 all but every 4th, Ministral every layer, Qwen 2 those from
//   max_window_layers (28) on.
SlidingWindowLayers read_sliding_window_layers(const json& j, const ConfigReader& r, const std::string& path,
                                               SwaFamily family, int n_layers) {
  SlidingWindowLayers swa;
  if (family == SwaFamily::Qwen2 && !r.bool_or("use_sliding_window", false)) return swa;
  const bool gemma4 = family == SwaFamily::Gemma4;
  if (j.contains("sliding_window") && j["sliding_window"].is_null()) {
    // Gemma 4's layer types also choose head sizes and RoPE; a sliding layer without a window is not read.
    if (gemma4) fail("'{}': a Gemma 4 config needs a sliding_window", path);
    return swa;
  }
  const bool no_default = family == SwaFamily::Mixtral || family == SwaFamily::Ministral3;
  swa.window = r.positive_int_or("sliding_window", no_default                    ? 0
                                                   : family == SwaFamily::GptOss ? 128
                                                   : gemma4                      ? 512
                                                                                 : 4096);
  if (swa.window == 0) return swa;
  swa.layers.assign(static_cast<size_t>(n_layers), true);
  if (family == SwaFamily::Mistral || family == SwaFamily::Mixtral || family == SwaFamily::Ministral3) return swa;
  if (r.has("layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array() || types.size() != static_cast<size_t>(n_layers))
      fail("'{}': 'layer_types' must list the {} layers", path, n_layers);
    for (size_t l = 0; l < types.size(); ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
      if (t != "sliding_attention" && t != "full_attention")
        fail("'{}': layer_types[{}] must be \"sliding_attention\" or \"full_attention\"", path, l);
      swa.layers[l] = t == "sliding_attention";
    }
    if (gemma4) swa.layers.back() = false;  // Gemma4TextConfig makes the last layer a full one, whatever it says
    return swa;
  }
  if (family == SwaFamily::Qwen2) {
    int64_t first = 28;
    if (r.has("max_window_layers")) {
      const json& v = j["max_window_layers"];
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        fail("'{}': 'max_window_layers' must be a non-negative integer", path);
      first = v.get<int64_t>();
    }
    for (int l = 0; l < n_layers && l < first; ++l) swa.layers[static_cast<size_t>(l)] = false;
  } else if (family == SwaFamily::Gemma2 || family == SwaFamily::Gemma3 || gemma4 || family == SwaFamily::Olmo3 ||
             family == SwaFamily::GptOss) {
    const int n = family == SwaFamily::Gemma2 || family == SwaFamily::GptOss ? 2
                  : family == SwaFamily::Olmo3                               ? 4
                  : gemma4                                                   ? 6
                           : r.positive_int_or("sliding_window_pattern", 6);
    for (int l = 0; l < n_layers; ++l) swa.layers[static_cast<size_t>(l)] = (l + 1) % n != 0;
    if (gemma4) swa.layers.back() = false;
  }
  return swa;
}

void read_gemma_config(const json& j, const ConfigReader& r, const std::string& path, ModelConfig& c) {
  const bool gemma2 = c.arch == "gemma2", gemma3 = c.arch == "gemma3", gemma4 = c.arch == "gemma4";
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.tied_output = (!gemma3 && !gemma4) || r.bool_or("tie_word_embeddings", true);
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    if (!r.has(key)) continue;
    if (!j[key].is_string()) fail("'{}': '{}' must be a string", path, key);
    const std::string act = j[key].get<std::string>();
    // transformers runs Gemma's "gelu" as the tanh approximation too (and warns).
    if (act != "gelu_pytorch_tanh" && act != "gelu" && act != "gelu_new")
      fail("'{}': {} '{}' is not supported for {} (gelu_pytorch_tanh)", path, key, act, c.arch);
    break;
  }
  c.ffn_act = FfnActivation::GeluTanh;
  c.gelu_exact = true;  // as transformers computes it
  c.attn_scale = 1.0f / std::sqrt(r.positive_float_or("query_pre_attn_scalar", static_cast<float>(c.head_dim)));
  if (!gemma2 && !gemma3 && !gemma4) return;
  c.post_norms = true;
  const auto cap = [&](const char* key, float fallback) {
    if (j.contains(key) && j[key].is_null()) return 0.0f;
    return r.positive_float_or(key, fallback);
  };
  c.final_logit_softcap = cap("final_logit_softcapping", gemma2 ? 30.0f : 0.0f);
  c.attn_softcap = cap("attn_logit_softcapping", gemma2 ? 50.0f : 0.0f);
  if (c.sliding_window > 0 && gemma3) {
    c.rope_base_swa = r.positive_float_or("rope_local_base_freq", 10000.0f);
    c.rope_scaling_swa = {};
  }
}

ModelConfig read_config(const json& j, const std::string& path);

// DeepSeek-V2 and V3 as their modeling code reads config.json (its defaults for absent keys). MLA: the
// latent's kv_lora_rank, q_lora_rank (null: q_proj directly), the heads' qk_nope_head_dim +
// qk_rope_head_dim keys and v_head_dim values; RoPE on pairs (2i, 2i + 1) as its q_pe/k_pe are laid out
// (V3's rope_interleave false: pairs (i, i + n_rot/2));
// YaRN's mscale / mscale_all_dim: cos and sin times their ratio, scores times yarn_get_mscale(factor,
// mscale_all_dim)^2. MoE: n_routed_experts (null: every layer dense), num_experts_per_tok,
// moe_intermediate_size, n_shared_experts, first_k_dense_replace leading dense layers, scoring_func
// (softmax, sigmoid), topk_method (greedy; group_limited_greedy: n_group groups scored by their best
// expert; noaux_tc: by their best two, with mlp.gate.e_score_correction_bias), norm_topk_prob,
// routed_scaling_factor.
void read_deepseek_config(const json& j, const ConfigReader& r, const std::string& path, ModelConfig& c) {
  c.kv_lora_rank = r.positive_int("kv_lora_rank");
  c.q_lora_rank = r.positive_int_or("q_lora_rank", 0);
  const int nope = r.positive_int("qk_nope_head_dim");
  c.n_rot = r.positive_int("qk_rope_head_dim");
  if (c.n_rot % 2 != 0) fail("'{}': qk_rope_head_dim {} must be even", path, c.n_rot);
  c.head_dim_v = r.positive_int("v_head_dim");
  if (std::max({c.kv_lora_rank, c.q_lora_rank, nope, c.n_rot, c.head_dim_v}) > (1 << 20))
    fail("'{}': MLA sizes (kv_lora_rank {}, q_lora_rank {}, qk_nope_head_dim {}, qk_rope_head_dim {}, v_head_dim {}) "
         "are out of range",
         path, c.kv_lora_rank, c.q_lora_rank, nope, c.n_rot, c.head_dim_v);
  c.head_dim = nope + c.n_rot;
  c.n_kv_heads = 1;
  // transformers' DeepSeek-V3 rotates pairs (i, i + n_rot/2) when rope_interleave is false (true by default).
  const bool interleave = !r.has("rope_interleave") || r.bool_or("rope_interleave", true);
  c.rope_style = interleave ? RopeStyle::Interleaved : RopeStyle::NeoX;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.rope_scaling.type == RopeScaling::Type::Yarn) {
    // transformers' DeepSeek YaRN: cos/sin times yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor,
    // mscale_all_dim); with mscale_all_dim, scores times yarn_get_mscale(factor, mscale_all_dim)^2.
    const json& rs = j["rope_scaling"];
    const auto number = [&](const char* key, double fallback) {
      if (!rs.contains(key) || rs[key].is_null()) return fallback;
      if (!rs[key].is_number()) fail("'{}': rope_scaling.{} must be a number", path, key);
      return rs[key].get<double>();
    };
    const double factor = c.rope_scaling.factor;
    const auto get_mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    const double mscale = number("mscale", 1.0), all = number("mscale_all_dim", 0.0);
    const double grow = 1.0 + 0.1 * std::log(factor);
    c.rope_scaling.attn_factor = static_cast<float>(get_mscale(mscale) / get_mscale(all) / grow);
    if (all != 0.0) c.attn_scale *= static_cast<float>(get_mscale(all) * get_mscale(all));
  }
  c.n_ff_exp = r.positive_int_or("moe_intermediate_size", c.n_ff);
  if (!r.has("n_routed_experts")) {
    c.n_layer_dense_lead = c.n_layers;
    return;
  }
  c.n_expert = r.positive_int("n_routed_experts");
  c.n_expert_used = r.positive_int("num_experts_per_tok");
  c.n_expert_shared = r.has("n_shared_experts") ? r.positive_int("n_shared_experts") : 0;
  if (r.has("first_k_dense_replace") && !j["first_k_dense_replace"].is_number_integer())
    fail("'{}': 'first_k_dense_replace' must be an integer", path);
  const int64_t lead = r.has("first_k_dense_replace") ? j["first_k_dense_replace"].get<int64_t>() : 0;
  if (lead < 0 || lead > c.n_layers) fail("'{}': first_k_dense_replace {} must be in [0, {}]", path, lead, c.n_layers);
  c.n_layer_dense_lead = static_cast<int>(lead);
  c.expert_weights_norm = r.bool_or("norm_topk_prob", false);
  c.expert_weights_scale = r.positive_float_or("routed_scaling_factor", 1.0f);
  const std::string scoring = j.value("scoring_func", std::string("softmax"));
  if (scoring == "sigmoid") {
    c.expert_gating = ModelConfig::ExpertGating::Sigmoid;
  } else if (scoring != "softmax") {
    fail("'{}': scoring_func '{}' is not supported (softmax, sigmoid)", path, scoring);
  }
  const std::string topk = j.value("topk_method", std::string("greedy"));
  if (topk == "group_limited_greedy" || topk == "noaux_tc") {
    c.n_expert_groups = r.positive_int_or("n_group", 1);
    c.n_group_used = r.positive_int_or("topk_group", 1);
    c.expert_group_score_max = topk == "group_limited_greedy";
    if (c.n_expert_groups > 1 && (c.n_expert % c.n_expert_groups != 0 || c.n_group_used >= c.n_expert_groups))
      fail("'{}': {} experts in n_group {} with topk_group {}: inconsistent", path, c.n_expert, c.n_expert_groups,
           c.n_group_used);
  } else if (topk != "greedy") {
    fail("'{}': topk_method '{}' is not supported (greedy, group_limited_greedy, noaux_tc)", path, topk);
  }
}

// Mistral 3 image-text checkpoints (Mistral Small 3.1 / 3.2, Ministral 3): the text model from `text_config`, a
// MistralForCausalLM or (model_type ministral3) a Ministral3ForCausalLM, as Mistral3Config reads it.
ModelConfig read_mistral3_text_config(const json& j, const std::string& path) {
  if (!j.contains("text_config") || !j["text_config"].is_object())
    fail("'{}': a Mistral3ForConditionalGeneration config needs its 'text_config' object", path);
  json t = j["text_config"];
  const json type_value = t.contains("model_type") ? t["model_type"] : json("mistral");
  const std::string type = type_value.is_string() ? type_value.get<std::string>() : "";
  if (type != "mistral" && type != "ministral3")
    fail("'{}': text_config model_type {} is not supported (mistral, ministral3)", path, type_value.dump());
  t["architectures"] = json::array({type == "mistral" ? "MistralForCausalLM" : "Ministral3ForCausalLM"});
  if (j.contains("_name_or_path")) t["_name_or_path"] = j["_name_or_path"];
  return read_config(t, path);
}

// SmolLM3's and Llama 4's layers without RoPE: `no_rope_layers` (1 where a layer rotates, 0 where it does not),
// else every no_rope_layer_interval-th layer (4), as transformers' configs build the list.
std::vector<bool> read_nope_layers(const json& j, const ConfigReader& r, const std::string& path, int n_layers) {
  std::vector<bool> nope;
  if (r.has("no_rope_layers")) {
    const json& flags = j["no_rope_layers"];
    if (!flags.is_array() || flags.size() != static_cast<size_t>(n_layers))
      fail("'{}': 'no_rope_layers' must list the {} layers", path, n_layers);
    for (const json& f : flags) {
      if (!f.is_number_integer() || (f.get<int>() != 0 && f.get<int>() != 1))
        fail("'{}': 'no_rope_layers' entries must be 0 or 1", path);
      nope.push_back(f.get<int>() == 0);
    }
  } else {
    const int n = r.positive_int_or("no_rope_layer_interval", 4);
    for (int l = 0; l < n_layers; ++l) nope.push_back((l + 1) % n == 0);
  }
  return nope;
}

// Llama 4's chunked layers: none where attention_chunk_size is null; else chunks of it (8192 by default) on the
// layers that rotate, or on those `layer_types` calls chunked_attention.
SlidingWindowLayers llama4_chunked_layers(const json& j, const ConfigReader& r, const std::string& path, int n_layers) {
  SlidingWindowLayers swa;
  if (j.contains("attention_chunk_size") && j["attention_chunk_size"].is_null()) return swa;
  swa.window = r.positive_int_or("attention_chunk_size", 8192);
  for (const bool nope : read_nope_layers(j, r, path, n_layers)) swa.layers.push_back(!nope);
  if (r.has("layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array() || types.size() != static_cast<size_t>(n_layers))
      fail("'{}': 'layer_types' must list the {} layers", path, n_layers);
    for (size_t l = 0; l < types.size(); ++l) {
      if (types[l] != "chunked_attention" && types[l] != "full_attention")
        fail("'{}': layer_types entry {} is not supported (chunked_attention, full_attention)", path, types[l].dump());
      swa.layers[l] = types[l] == "chunked_attention";
    }
  }
  return swa;
}

// An image-text checkpoint's text model only (Llama 4 Scout / Maverick, Gemma 4; their vision and audio towers are
// not read): its `text_config`, read as a `text_arch` config.
ModelConfig read_text_config_as(const json& j, const std::string& path, const char* image_text_arch,
                                const char* text_arch) {
  if (!j.contains("text_config") || !j["text_config"].is_object())
    fail("'{}': a {} config needs its 'text_config' object", path, image_text_arch);
  json t = j["text_config"];
  t["architectures"] = json::array({text_arch});
  if (j.contains("_name_or_path")) t["_name_or_path"] = j["_name_or_path"];
  return read_config(t, path);
}

// Llama 4 (transformers' Llama4TextConfig and its defaults): intermediate_size is the experts' width and
// intermediate_size_mlp the dense layers'; every interleave_moe_layer_step-th layer (moe_layers) has experts and
// one shared expert, routed by the sigmoid of the top logits applied to the token; `no_rope_layers` (1: the layer
// rotates; else every no_rope_layer_interval-th does not) with q / k L2-normed on the rotating ones (use_qk_norm),
// which attend in chunks of attention_chunk_size (null: not) and the others with the attention temperature
// (attn_temperature_tuning: floor_scale, attn_scale). Its RoPE is over pairs (2i, 2i + 1) and its checkpoints'
// q / k rows are not permuted.
void read_llama4_config(const json& j, const ConfigReader& r, const std::string& path, ModelConfig& c) {
  c.rope_style = RopeStyle::Interleaved;
  c.n_ff_exp = r.positive_int("intermediate_size");
  c.n_ff = r.positive_int_or("intermediate_size_mlp", 16384);
  c.n_expert = r.positive_int_or("num_local_experts", 16);
  c.n_expert_used = r.positive_int_or("num_experts_per_tok", 1);
  c.n_expert_shared = 1;
  c.expert_gating = ModelConfig::ExpertGating::SigmoidChosen;
  c.expert_weight_before_ffn = true;
  c.expert_weights_norm = false;
  if (r.bool_or("attention_bias", false)) fail("'{}': Llama 4 with attention biases is not supported", path);
  if (j.value("hidden_act", std::string("silu")) != "silu")
    fail("'{}': Llama 4 with hidden_act {} is not supported (silu)", path, j["hidden_act"].dump());
  c.moe_layer_step = r.positive_int_or("interleave_moe_layer_step", 1);
  if (r.has("moe_layers")) {
    // Only the lists the step gives (transformers' default) map onto moe_layer_step.
    const json& layers = j["moe_layers"];
    std::vector<int> want;
    for (int l = c.moe_layer_step - 1; l < c.n_layers; l += c.moe_layer_step) want.push_back(l);
    if (!layers.is_array() || layers != json(want))
      fail("'{}': moe_layers {} is not every interleave_moe_layer_step ({})-th layer; not supported", path,
           layers.dump(), c.moe_layer_step);
  }
  c.nope_layers = read_nope_layers(j, r, path, c.n_layers);
  c.qk_l2_norm = r.bool_or("use_qk_norm", true);
  SlidingWindowLayers chunked = llama4_chunked_layers(j, r, path, c.n_layers);
  if (chunked.window > 0) {
    c.sliding_window = chunked.window;
    c.swa_chunked = true;
    c.swa_layers = std::move(chunked.layers);
    c.rope_base_swa = c.rope_base;
    c.rope_scaling_swa = c.rope_scaling;
  }
  if (r.bool_or("attn_temperature_tuning", true)) {
    c.attn_temp_length = r.positive_int_or("floor_scale", 8192);
    c.attn_temp_scale = r.positive_float_or("attn_scale", 0.1f);
    c.attn_temp_offset = 1.0f;
    c.attn_temp_nope_only = true;
  }
}

// Gemma 3 4B-27B (image-text checkpoints): the text model only, from `text_config` over transformers'
// Gemma3TextConfig defaults (the published configs give little more than the sizes and the window).
ModelConfig read_gemma3_text_config(const json& j, const std::string& path) {
  json t = {{"vocab_size", 262208},
            {"hidden_size", 2304},
            {"intermediate_size", 9216},
            {"num_hidden_layers", 26},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-6},
            {"tie_word_embeddings", true},
            {"rope_theta", 1000000.0},
            {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},
            {"rope_local_base_freq", 10000.0}};
  if (j.contains("text_config")) {
    if (!j["text_config"].is_object()) fail("'{}': 'text_config' must be an object", path);
    for (const auto& [key, value] : j["text_config"].items()) t[key] = value;
  }
  if (t.value("use_bidirectional_attention", false))
    fail("'{}': bidirectional attention (an embedding model) is not supported", path);
  t["architectures"] = json::array({"Gemma3ForCausalLM"});
  if (j.contains("_name_or_path")) t["_name_or_path"] = j["_name_or_path"];
  return read_config(t, path);
}

// Gemma4TextConfig's defaults for the keys a config leaves out (global_head_dim: what its __post_init__ takes).
void add_gemma4_defaults(json& j) {
  static const json defaults = {{"vocab_size", 262144},
                                {"hidden_size", 2304},
                                {"intermediate_size", 9216},
                                {"num_hidden_layers", 30},
                                {"num_attention_heads", 8},
                                {"num_key_value_heads", 4},
                                {"head_dim", 256},
                                {"global_head_dim", 512},
                                {"max_position_embeddings", 131072},
                                {"rms_norm_eps", 1e-6},
                                {"tie_word_embeddings", true},
                                {"sliding_window", 512},
                                {"vocab_size_per_layer_input", 262144},
                                {"hidden_size_per_layer_input", 256}};
  for (const auto& [key, value] : defaults.items())
    if (!j.contains(key)) j[key] = value;
}

// One layer type's RoPE from Gemma 4's rope_parameters (transformers' defaults where the config gives none): its base,
// and for the full layers "proportional" RoPE: the first int(partial_rotary_factor * head_dim / 2) pairs of a head
// rotate at base^(-2i / head_dim) over `factor`, the others not at all (as llama.cpp's converter writes it: factors of
// 1e30 on the held pairs, the ggml form kvserve's RoPE takes).
struct Gemma4Rope {
  float base = 0;
  std::vector<float> freq_factors;
};
Gemma4Rope read_gemma4_rope(const json& j, const std::string& path, bool full, int head_dim) {
  const char* type_key = full ? "full_attention" : "sliding_attention";
  json p = full ? json{{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}
                : json{{"rope_type", "default"}, {"rope_theta", 10000.0}};
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const json& rp = j["rope_parameters"];
    if (!rp.is_object() || !rp.contains(type_key) || !rp[type_key].is_object())
      fail("'{}': rope_parameters needs an object for '{}'", path, type_key);
    p = rp[type_key];
  }
  const auto number = [&](const char* key, double fallback) {
    if (!p.contains(key) || p[key].is_null()) return fallback;
    if (!p[key].is_number() || !(p[key].get<double>() > 0) || !std::isfinite(p[key].get<double>()))
      fail("'{}': rope_parameters.{}.{} must be a positive number", path, type_key, key);
    return p[key].get<double>();
  };
  const std::string type = p.value("rope_type", std::string("default"));
  Gemma4Rope rope;
  rope.base = static_cast<float>(number("rope_theta", full ? 1000000.0 : 10000.0));
  if (type == "default") return rope;  // every pair rotates (transformers ignores partial_rotary_factor here)
  if (type != "proportional" || !full)
    fail("'{}': rope_parameters.{} of type '{}' is not supported (default{})", path, type_key, type,
         full ? ", proportional" : "");
  const double partial = number("partial_rotary_factor", 1.0), factor = number("factor", 1.0);
  if (partial > 1.0) fail("'{}': rope_parameters.{}.partial_rotary_factor {} exceeds 1", path, type_key, partial);
  const int rotated = static_cast<int>(std::floor(partial * head_dim / 2));
  rope.freq_factors.assign(static_cast<size_t>(head_dim / 2), 1e30f);
  std::fill_n(rope.freq_factors.begin(), rotated, static_cast<float>(factor));
  return rope;
}

// Gemma 4 (transformers' Gemma4TextConfig and modeling_gemma4) over what read_gemma_config sets: norms that multiply by
// their weights (not 1 + w), attention scale 1, v RMS-normed without a weight; the full layers' heads
// global_head_dim wide with num_global_key_value_heads of them (only with attention_k_eq_v, whose full layers take
// their keys' projection as values), the sliding ones head_dim and num_key_value_heads, unless `per_layer_config`
// (as transformers 5 saves it) overrides a layer's; the last num_kv_shared_layers layers on the KV of the last earlier
// layer of their type, with FFNs twice as wide under use_double_wide_mlp; per-layer embeddings of
// hidden_size_per_layer_input; with enable_moe_block, num_experts experts of moe_intermediate_size beside each dense
// FFN, top_k_experts of them chosen.
void read_gemma4_config(const json& j, const ConfigReader& r, const std::string& path, ModelConfig& c) {
  if (j.contains("use_bidirectional_attention") && j["use_bidirectional_attention"] == "all")
    fail("'{}': bidirectional attention (an embedding model) is not supported", path);
  if (r.bool_or("attention_bias", false)) fail("'{}': Gemma 4 with attention biases is not supported", path);
  c.attn_scale = 1.0f;
  c.v_norm = true;
  c.attn_softcap = 0.0f;
  const bool k_eq_v = r.bool_or("attention_k_eq_v", false);
  const int L = c.n_layers;
  std::vector<int> dims(static_cast<size_t>(L), c.head_dim), kv_heads(static_cast<size_t>(L), c.n_kv_heads);
  if (!r.has("per_layer_config")) {
    const int global_dim = r.positive_int("global_head_dim");
    const int global_kv =
        k_eq_v && r.has("num_global_key_value_heads") ? r.positive_int("num_global_key_value_heads") : c.n_kv_heads;
    for (int l = 0; l < L; ++l)
      if (!c.is_swa_layer(l)) {
        dims[static_cast<size_t>(l)] = global_dim;
        kv_heads[static_cast<size_t>(l)] = global_kv;
      }
  } else {
    const json& plc = j["per_layer_config"];
    if (!plc.is_object()) fail("'{}': 'per_layer_config' must be an object of layer indices", path);
    for (const auto& [key, overrides] : plc.items()) {
      int l = -1;
      if (!key.empty() && key.size() < 8 &&
          std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        l = std::stoi(key);
      if (l < 0 || l >= L) fail("'{}': per_layer_config key '{}' is not a layer index below {}", path, key, L);
      if (!overrides.is_object()) fail("'{}': per_layer_config['{}'] must be an object", path, key);
      for (const auto& [name, value] : overrides.items()) {
        if (name != "head_dim" && name != "num_key_value_heads")
          fail("'{}': per_layer_config['{}'].{} is not supported (head_dim, num_key_value_heads)", path, key, name);
        if (!value.is_number_integer() || value.get<int64_t>() <= 0 || value.get<int64_t>() > (1 << 20))
          fail("'{}': per_layer_config['{}'].{} must be a positive integer", path, key, name);
        (name == "head_dim" ? dims : kv_heads)[static_cast<size_t>(l)] = value.get<int>();
      }
    }
  }
  // One head size per layer type, as llama.cpp's gemma4 and kvserve's cache hold them.
  int full_dim = 0, swa_dim = 0;
  for (int l = 0; l < L; ++l) {
    int& want = c.is_swa_layer(l) ? swa_dim : full_dim;
    const int d = dims[static_cast<size_t>(l)];
    if (want != 0 && want != d)
      fail("'{}': layer {} has head_dim {} where other {} layers have {}; one size per layer type is supported", path,
           l, d, c.is_swa_layer(l) ? "sliding-window" : "full-attention", want);
    want = d;
    if (d % 2 != 0) fail("'{}': layer {} has head_dim {}; RoPE needs an even size", path, l, d);
    if (c.n_heads % kv_heads[static_cast<size_t>(l)] != 0)
      fail("'{}': layer {}: num_attention_heads {} is not a multiple of its {} KV heads", path, l, c.n_heads,
           kv_heads[static_cast<size_t>(l)]);
  }
  // transformers forces the last layer to full attention, so a full layer always exists.
  c.head_dim = c.n_rot = full_dim;
  c.head_dim_swa = c.n_rot_swa = swa_dim != 0 && swa_dim != full_dim ? swa_dim : 0;
  c.n_kv_heads = kv_heads.front();
  c.layer_kv_heads.clear();
  if (std::any_of(kv_heads.begin(), kv_heads.end(), [&](int h) { return h != c.n_kv_heads; }))
    c.layer_kv_heads = kv_heads;

  const Gemma4Rope full = read_gemma4_rope(j, path, true, full_dim);
  c.rope_base = full.base;
  c.rope_scaling = {};
  c.rope_scaling.freq_factors = full.freq_factors;
  if (c.sliding_window > 0) {
    c.rope_base_swa = read_gemma4_rope(j, path, false, swa_dim).base;
    c.rope_scaling_swa = {};
  }

  if (r.has("num_kv_shared_layers") && !j["num_kv_shared_layers"].is_number_integer())
    fail("'{}': 'num_kv_shared_layers' must be an integer", path);
  const int64_t shared = r.has("num_kv_shared_layers") ? j["num_kv_shared_layers"].get<int64_t>() : 0;
  if (shared < 0 || shared >= L)
    fail("'{}': num_kv_shared_layers {} must leave some of the {} layers their own KV", path, shared, L);
  c.n_kv_shared_layers = static_cast<int>(shared);
  for (int l = L - c.n_kv_shared_layers; l < L; ++l)
    if (c.kv_source_layer(l) == l)
      fail("'{}': layer {} shares the KV of an earlier {} layer (num_kv_shared_layers {}), and there is none", path, l,
           c.is_swa_layer(l) ? "sliding-window" : "full-attention", shared);
  if (r.bool_or("use_double_wide_mlp", false) && shared > 0) {
    c.layer_n_ff.assign(static_cast<size_t>(L), c.n_ff);
    for (int l = L - c.n_kv_shared_layers; l < L; ++l) c.layer_n_ff[static_cast<size_t>(l)] = 2 * c.n_ff;
  }

  const bool ple = r.has("hidden_size_per_layer_input") && j["hidden_size_per_layer_input"] != 0;
  c.n_embd_per_layer = ple ? r.positive_int("hidden_size_per_layer_input") : 0;
  if (ple && r.positive_int("vocab_size_per_layer_input") != r.positive_int("vocab_size"))
    fail("'{}': vocab_size_per_layer_input {} differs from vocab_size {}; not supported", path,
         j["vocab_size_per_layer_input"].dump(), j["vocab_size"].dump());

  if (r.bool_or("enable_moe_block", false)) {
    c.n_expert = r.positive_int("num_experts");
    c.n_expert_used = r.positive_int("top_k_experts");
    c.n_ff_exp = r.positive_int("moe_intermediate_size");
    c.moe_dense_branch = true;
  }
}

// transformers 5 saves RoPE as `rope_parameters` (rope_theta, rope_type and the scaling keys in one object; Gemma 3:
// one object per layer type) where earlier versions wrote rope_theta, rope_scaling, partial_rotary_factor and
// rope_local_base_freq beside the other keys. The config in the earlier keys, which the readers below take:
// rope_parameters wins where both are given, as transformers' standardize_rope_params reads them.
json with_earlier_rope_keys(const json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("rope_parameters") || j["rope_parameters"].is_null()) return j;
  const json& rp = j["rope_parameters"];
  if (!rp.is_object()) fail("'{}': 'rope_parameters' must be an object", path);
  json out = j;
  out.erase("rope_parameters");
  const auto type_of = [&](const json& p, const char* where) {
    if (!p.is_object()) fail("'{}': rope_parameters{} must be an object", path, where);
    const json& t = p.contains("rope_type") ? p["rope_type"] : p.contains("type") ? p["type"] : json("default");
    if (!t.is_string()) fail("'{}': rope_parameters{}.rope_type must be a string", path, where);
    return t.get<std::string>();
  };
  const auto take = [&](const json& p, const char* where) {
    if (p.contains("rope_theta")) out["rope_theta"] = p["rope_theta"];
    if (p.contains("partial_rotary_factor")) out["partial_rotary_factor"] = p["partial_rotary_factor"];
    const std::string type = type_of(p, where);
    if (type == "default") {
      out.erase("rope_scaling");
      return;
    }
    out["rope_scaling"] = p;
    // LongRoPE's pretraining context: the top-level key first (Phi-3 keeps it there), as transformers.
    if (type == "longrope" && !out.contains("original_max_position_embeddings") &&
        p.contains("original_max_position_embeddings"))
      out["original_max_position_embeddings"] = p["original_max_position_embeddings"];
  };
  if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
    if (rp.contains("full_attention")) take(rp["full_attention"], ".full_attention");
    if (rp.contains("sliding_attention") && !rp["sliding_attention"].is_null()) {
      const json& local = rp["sliding_attention"];
      if (type_of(local, ".sliding_attention") != "default")
        fail(
            "'{}': rope_parameters.sliding_attention of type '{}': the sliding-window layers rotate without scaling "
            "here",
            path, type_of(local, ".sliding_attention"));
      if (local.contains("rope_theta")) out["rope_local_base_freq"] = local["rope_theta"];
    }
    for (const auto& [key, value] : rp.items())
      if (key != "full_attention" && key != "sliding_attention")
        fail("'{}': rope_parameters for layer type '{}' are not supported (full_attention, sliding_attention)", path,
             key);
  } else {
    take(rp, "");
  }
  return out;
}

// The other names transformers' config classes take for a key (their attribute_map): transformers 5 saves
// Qwen3-MoE's num_experts as num_local_experts, for one. The readers below take the first name.
struct KeyAlias {
  const char* hf_arch;
  const char* key;
  const char* alias;
};
constexpr KeyAlias kKeyAliases[] = {
    {"Qwen3MoeForCausalLM", "num_experts", "num_local_experts"},
    {"Qwen2MoeForCausalLM", "num_experts", "num_local_experts"},
    {"MixtralForCausalLM", "num_local_experts", "num_experts"},
    {"DeepseekV2ForCausalLM", "n_routed_experts", "num_experts"},
    {"DeepseekV3ForCausalLM", "n_routed_experts", "num_local_experts"},
};

// Ministral3Config's RoPE when config.json gives none.
const json& ministral3_default_rope() {
  static const json rope = {{"rope_type", "yarn"},
                            {"rope_theta", 1000000.0},
                            {"factor", 16.0},
                            {"original_max_position_embeddings", 16384},
                            {"beta_fast", 32.0},
                            {"beta_slow", 1.0},
                            {"mscale_all_dim", 1.0},
                            {"mscale", 1.0},
                            {"llama_4_scaling_beta", 0.1}};
  return rope;
}

// Ministral 3: Llama 4's attention temperature, its length the YaRN original context (transformers'
// get_llama_4_attn_scale); no llama_4_scaling_beta: none.
void read_ministral3_temperature(const json& j, const std::string& path, ModelConfig& c) {
  const json rs = j.contains("rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"] : json::object();
  if (!rs.contains("llama_4_scaling_beta") || rs["llama_4_scaling_beta"].is_null()) return;
  const json& beta = rs["llama_4_scaling_beta"];
  if (!beta.is_number() || !std::isfinite(beta.get<double>()))
    fail("'{}': rope_parameters.llama_4_scaling_beta must be a number", path);
  c.attn_temp_scale = beta.get<float>();
  if (c.attn_temp_scale == 0.0f) return;
  const json length = rs.value("original_max_position_embeddings", json());
  if (!length.is_number_integer() || length.get<int64_t>() <= 0 || length.get<int64_t>() > (int64_t{1} << 30))
    fail("'{}': llama_4_scaling_beta needs rope_parameters.original_max_position_embeddings, a positive integer", path);
  c.attn_temp_length = length.get<int64_t>();
}

ModelConfig read_config(const json& raw, const std::string& path) {
  if (!raw.is_object()) fail("'{}': not a JSON object", path);
  std::string hf_arch;
  if (raw.contains("architectures") && raw["architectures"].is_array() && !raw["architectures"].empty() &&
      raw["architectures"][0].is_string())
    hf_arch = raw["architectures"][0].get<std::string>();
  else
    fail("'{}': required key 'architectures' is missing", path);
  json j = raw;
  if (hf_arch == "Ministral3ForCausalLM" && !j.contains("rope_parameters") && !j.contains("rope_scaling") &&
      !j.contains("rope_theta"))
    j["rope_parameters"] = ministral3_default_rope();
  if (hf_arch == "GptOssForCausalLM" && !j.contains("rope_parameters") && !j.contains("rope_scaling"))
    j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 32.0},    {"beta_fast", 32.0},
                            {"beta_slow", 1.0},    {"truncate", false}, {"original_max_position_embeddings", 4096}};
  // Gemma 4 keeps RoPE per layer type in rope_parameters, proportional on the full layers (read_gemma4_config).
  if (hf_arch == "Gemma4ForCausalLM")
    add_gemma4_defaults(j);
  else
    j = with_earlier_rope_keys(j, path);
  for (const KeyAlias& a : kKeyAliases)
    if (hf_arch == a.hf_arch && !j.contains(a.key) && j.contains(a.alias)) j[a.key] = j[a.alias];
  const ConfigReader r(j, path);
  if (hf_arch == "Gemma3ForConditionalGeneration") return read_gemma3_text_config(j, path);
  if (hf_arch == "Gemma4ForConditionalGeneration")
    return read_text_config_as(j, path, "Gemma4ForConditionalGeneration", "Gemma4ForCausalLM");
  if (hf_arch == "Mistral3ForConditionalGeneration") return read_mistral3_text_config(j, path);
  if (hf_arch == "Llama4ForConditionalGeneration")
    return read_text_config_as(j, path, "Llama4ForConditionalGeneration", "Llama4ForCausalLM");
  const HfArch* arch = nullptr;
  for (const HfArch& a : kHfArchs)
    if (hf_arch == a.hf_name) arch = &a;
  if (!arch) {
    std::string known;
    for (const HfArch& a : kHfArchs) known += (known.empty() ? "" : ", ") + std::string(a.hf_name);
    known +=
        ", Gemma3ForConditionalGeneration, Gemma4ForConditionalGeneration, Mistral3ForConditionalGeneration and "
        "Llama4ForConditionalGeneration (their "
        "text models)";
    fail("'{}': architecture '{}' is not supported (supported: {})", path, hf_arch, known);
  }

  ModelConfig c;
  c.arch = arch->arch;
  c.name = j.value("_name_or_path", std::string());
  c.n_embd = r.positive_int("hidden_size");
  c.n_layers = r.positive_int("num_hidden_layers");
  c.n_heads = r.positive_int("num_attention_heads");
  c.n_kv_heads = r.positive_int_or("num_key_value_heads", c.n_heads);
  c.n_ff = r.positive_int("intermediate_size");
  c.n_ctx_train = r.positive_int_or("max_position_embeddings", 2048);
  c.rms_eps = r.positive_float_or("rms_norm_eps", 1e-6f);
  c.rope_base =
      r.positive_float_or("rope_theta", hf_arch == "Olmo3ForCausalLM" || hf_arch == "Llama4ForCausalLM" ? 500000.0f
                                        : hf_arch == "GptOssForCausalLM"                                ? 150000.0f
                                                                                                        : 10000.0f);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("'{}': num_attention_heads {} is not a multiple of num_key_value_heads {}", path, c.n_heads, c.n_kv_heads);
  if (r.has("head_dim")) {
    c.head_dim = r.positive_int("head_dim");
  } else {
    if (c.n_embd % c.n_heads != 0)
      fail("'{}': hidden_size {} is not a multiple of num_attention_heads {}", path, c.n_embd, c.n_heads);
    c.head_dim = c.n_embd / c.n_heads;
  }
  if (c.head_dim % 2 != 0) fail("'{}': head_dim {} must be even for RoPE", path, c.head_dim);
  c.n_rot = c.head_dim;
  c.rope_style = RopeStyle::NeoX;
  c.qkv_bias = arch->qkv_bias;
  c.qk_norm = arch->qk_norm;
  c.tied_output = r.bool_or("tie_word_embeddings", false);
  if (r.has("vocab_size")) c.n_vocab = r.positive_int("vocab_size");
  if (r.has("partial_rotary_factor")) {
    // Phi-4-mini (0.75): the first int(head_dim * factor) dimensions of each head rotate, as transformers
    // and llama.cpp's converter count them.
    const double factor = r.positive_float_or("partial_rotary_factor", 1.0f);
    if (!j["partial_rotary_factor"].is_number() || j["partial_rotary_factor"].get<double>() > 1.0)
      fail("'{}': partial_rotary_factor {} must be in (0, 1]", path, j["partial_rotary_factor"].dump());
    c.n_rot = static_cast<int>(c.head_dim * j["partial_rotary_factor"].get<double>());
    if (c.n_rot <= 0 || c.n_rot % 2 != 0)
      fail("'{}': partial_rotary_factor {} gives {} rotated dimensions of {}; an even count is needed", path,
           factor, c.n_rot, c.head_dim);
  }
  read_rope_scaling(j, path, c);
  if (const std::optional<SwaFamily> family = swa_family_of_arch(hf_arch)) {
    SlidingWindowLayers swa = read_sliding_window_layers(j, r, path, *family, c.n_layers);
    if (swa.window > 0 && std::find(swa.layers.begin(), swa.layers.end(), true) != swa.layers.end()) {
      c.sliding_window = swa.window;
      c.swa_layers = std::move(swa.layers);
      c.rope_base_swa = c.rope_base;  // the local layers rotate as the global ones (Gemma 3: see below)
      c.rope_scaling_swa = c.rope_scaling;
      if (*family == SwaFamily::Olmo3) {
        // Their own base (rope_parameters.sliding_attention), unscaled; without one, Olmo3Config's default
        // 500000 (it takes rope_theta for the full layers only).
        c.rope_base_swa = r.positive_float_or("rope_local_base_freq", 500000.0f);
        c.rope_scaling_swa = {};
      }
    }
  }
  if (c.arch.starts_with("gemma")) read_gemma_config(j, r, path, c);
  if (c.arch == "gemma4") read_gemma4_config(j, r, path, c);
  if (c.arch == "mistral3") read_ministral3_temperature(j, path, c);
  if (c.arch == "olmo2") {  // OLMo 2 / 3: post-norms only, q / k normed over the whole projection
    c.pre_norms = false;
    c.post_norms = true;
    c.qk_norm_full = true;
  }
  if (c.arch == "granite") {
    // transformers' GraniteConfig multipliers (its defaults: 1, 1, 1, 1); as the GGUF converter maps them.
    c.embd_scale = r.positive_float_or("embedding_multiplier", 1.0f);
    c.residual_scale = r.positive_float_or("residual_multiplier", 1.0f);
    c.attn_scale = r.positive_float_or("attention_multiplier", 1.0f);
    c.logit_scale = r.positive_float_or("logits_scaling", 1.0f);
  }
  if (hf_arch == "Qwen3MoeForCausalLM" || hf_arch == "Qwen2MoeForCausalLM") {
    // transformers' Qwen3MoeConfig: norm_topk_prob defaults to false (Qwen3-30B-A3B's config sets true).
    // Qwen2MoeConfig adds one shared expert behind a sigmoid gate, and q/k/v biases (qkv_bias, default true).
    if (hf_arch == "Qwen2MoeForCausalLM") {
      c.n_expert_shared = 1;
      c.n_ff_shexp = r.positive_int("shared_expert_intermediate_size");
      c.qkv_bias = r.bool_or("qkv_bias", true);
      if (r.bool_or("use_sliding_window", false))
        fail("'{}': Qwen2-MoE with use_sliding_window is not supported (llama.cpp ignores it too)", path);
    }
    c.n_expert = r.positive_int("num_experts");
    c.n_expert_used = r.positive_int("num_experts_per_tok");
    c.n_ff_exp = r.positive_int("moe_intermediate_size");
    c.expert_weights_norm = r.bool_or("norm_topk_prob", false);
    if (r.positive_int_or("decoder_sparse_step", 1) != 1 ||
        (r.has("mlp_only_layers") && (!j["mlp_only_layers"].is_array() || !j["mlp_only_layers"].empty())))
      fail("'{}': dense layers among the expert layers (decoder_sparse_step, mlp_only_layers) are not supported", path);
  }
  if (hf_arch == "MixtralForCausalLM") {  // experts of intermediate_size, their top-k renormalized
    c.n_expert = r.positive_int("num_local_experts");
    c.n_expert_used = r.positive_int("num_experts_per_tok");
    c.n_ff_exp = c.n_ff;
  }
  if (hf_arch == "GptOssForCausalLM") {
    // transformers' GptOssConfig and modeling: every layer's experts intermediate_size wide, the router's top
    // logits softmaxed, learned sinks, biases on the attention's projections, the clamped SwiGLU.
    c.n_expert = r.positive_int("num_local_experts");
    c.n_expert_used = r.positive_int_or("num_experts_per_tok", 4);
    c.n_ff_exp = c.n_ff;
    c.expert_gating = ModelConfig::ExpertGating::SoftmaxWeight;
    c.expert_weights_norm = false;
    c.learned_sinks = true;
    c.ffn_act = FfnActivation::SwigluOai;
    c.swiglu_limit = r.positive_float_or("swiglu_limit", 7.0f);
    if (!r.bool_or("attention_bias", true)) fail("'{}': gpt-oss without attention biases is not supported", path);
  }
  if (c.arch == "deepseek2") read_deepseek_config(j, r, path, c);
  if (c.arch == "llama4") read_llama4_config(j, r, path, c);
  if (c.n_expert_used > c.n_expert)
    fail("'{}': num_experts_per_tok {} exceeds the {} experts", path, c.n_expert_used, c.n_expert);
  if (c.arch == "smollm3") c.nope_layers = read_nope_layers(j, r, path, c.n_layers);
  return c;
}

// Owned F32 copy of a tensor (norm weights and biases are used element-wise in F32).
Tensor to_f32(const Tensor& t, Model& m) {
  auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(t.elements()));
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < buf->size(); ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    (*buf)[i] = t.type == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
  Tensor out = t;
  out.type = DType::F32;
  out.data = buf->data();
  m.storage.push_back(buf);
  return out;
}

// safetensors does not align tensor data; kernels read elements directly, so a misaligned tensor is
// copied into an aligned buffer (a well-formed file never needs this: its header is padded to 8).
Tensor aligned(const Tensor& t, Model& m) {
  const size_t align = t.type == DType::F32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(t.data) % align == 0) return t;
  auto buf = std::shared_ptr<uint8_t[]>(new (std::align_val_t{64}) uint8_t[t.bytes()],
                                        [](uint8_t* p) { ::operator delete[](p, std::align_val_t{64}); });
  std::memcpy(buf.get(), t.data, t.bytes());
  Tensor out = t;
  out.data = buf.get();
  m.storage.push_back(buf);
  return out;
}

}  // namespace

ModelConfig hf_model_config(const json& config, const std::string& path) { return read_config(config, path); }

SlidingWindowLayers hf_sliding_window_layers(const json& config, const std::string& model_type, int n_layers,
                                             const std::string& path) {
  if (model_type == "llama4_text" || model_type == "llama4")
    return llama4_chunked_layers(config, ConfigReader(config, path), path, n_layers);
  const std::optional<SwaFamily> family = swa_family_of_model_type(model_type);
  if (!family) return {};
  return read_sliding_window_layers(config, ConfigReader(config, path), path, *family, n_layers);
}

std::unique_ptr<Model> load_hf_model(const std::string& dir, const LoadOptions& opts) {
  namespace fs = std::filesystem;
  if (opts.progress) opts.progress(0.0f);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string tokenizer_path = (fs::path(dir) / "tokenizer.json").string();
  const std::string tokenizer_config_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) fail("'{}': no config.json; not a Hugging Face model folder", dir);
  if (!fs::is_regular_file(tokenizer_path, ec))
    fail("'{}': no tokenizer.json (only Hugging Face 'fast' tokenizer files are supported)", dir);

  auto m = std::make_unique<Model>();
  m->path = dir;
  m->format = "hf";
  const json config_json = read_json_file(config_path);
  m->config = read_config(config_json, config_path);
  ModelConfig& c = m->config;
  const bool noaux_tc = c.arch == "deepseek2" && c.moe() && config_json.value("topk_method", "") == "noaux_tc";
  m->vocab = vocab_from_tokenizer_json(tokenizer_path, tokenizer_config_path, config_path);
  m->sampling_defaults = sampling_defaults_from_generation_config((fs::path(dir) / "generation_config.json").string());

  auto weights = std::make_shared<SafetensorsModel>(dir);
  m->storage.push_back(weights);

  auto matrix = [&](const std::string& name) { return aligned(weights->tensor(name), *m); };
  auto vector_f32 = [&](const std::string& name) {
    Tensor t = weights->tensor(name);
    return t.type == DType::F32 ? aligned(t, *m) : to_f32(t, *m);
  };

  // Image-text checkpoints keep the text model under language_model.model. (as published) or
  // model.language_model. (as transformers saves it since 4.52); their vision tower is not read.
  std::string prefix = "model.", head = "lm_head.weight";
  if (!weights->has("model.embed_tokens.weight")) {
    if (weights->has("language_model.model.embed_tokens.weight")) {
      prefix = "language_model.model.";
      head = "language_model.lm_head.weight";
    } else if (weights->has("model.language_model.embed_tokens.weight")) {
      prefix = "model.language_model.";
    }
  }
  m->tok_embd = matrix(prefix + "embed_tokens.weight");
  // The embedding decides the vocabulary size: HF checkpoints often pad it past the tokenizer (Qwen2:
  // 151936 rows for 151665 tokens); the extra ids become unused tokens, as in llama.cpp's converter.
  const int64_t embd_rows = m->tok_embd.ne[1];
  if (m->tok_embd.n_dims != 2 || embd_rows <= 0 || embd_rows > INT32_MAX)
    fail("'{}': tensor '{}embed_tokens.weight' must be 2-D [vocab, hidden]", dir, prefix);
  if (c.n_vocab != 0 && c.n_vocab != embd_rows)
    fail("'{}': vocab_size {} differs from the {} rows of '{}embed_tokens.weight'", config_path, c.n_vocab,
         embd_rows, prefix);
  c.n_vocab = static_cast<int>(embd_rows);
  Vocab& v = m->vocab;
  if (v.tokens.size() > static_cast<size_t>(c.n_vocab))
    fail("'{}': tokenizer.json has {} tokens but the model has only {} embedding rows", dir, v.tokens.size(),
         c.n_vocab);
  while (v.tokens.size() < static_cast<size_t>(c.n_vocab)) {
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.token_types.push_back(TokenType::Unused);
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }

  // Gemma's RMSNorm (before Gemma 4's) multiplies by 1 + w (llama.cpp's converter stores that sum; so do we, once,
  // here).
  const bool gemma = c.arch.starts_with("gemma");
  const bool one_plus_w = gemma && c.arch != "gemma4";
  auto norm = [&](const std::string& name) {
    if (!one_plus_w) return vector_f32(name);
    Tensor t = weights->tensor(name);
    auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(t.elements()));
    const uint8_t* src = static_cast<const uint8_t*>(t.data);
    for (size_t i = 0; i < buf->size(); ++i) {
      float f;
      if (t.type == DType::F32) {
        std::memcpy(&f, src + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        f = t.type == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      }
      (*buf)[i] = f + 1.0f;
    }
    t.type = DType::F32;
    t.data = buf->data();
    m->storage.push_back(buf);
    return t;
  };

  m->output_norm = norm(prefix + "norm.weight");
  if ((!gemma || !c.tied_output) && weights->has(head)) {
    m->output = matrix(head);
    c.tied_output = false;
  } else if (c.tied_output) {
    m->output = m->tok_embd;
  } else {
    fail("'{}': tensor '{}' is missing and config.json does not set tie_word_embeddings", dir, head);
  }

  if (c.n_embd_per_layer > 0) {  // Gemma 4's per-layer embeddings
    m->per_layer_token_embd = matrix(prefix + "embed_tokens_per_layer.weight");
    m->per_layer_model_proj = matrix(prefix + "per_layer_model_projection.weight");
    m->per_layer_proj_norm = norm(prefix + "per_layer_projection_norm.weight");
  }
  // Gemma 4 with attention_k_eq_v: its full layers have no v_proj (their values are their keys' projection).
  const json& text_config = config_json.contains("text_config") ? config_json["text_config"] : config_json;
  const bool values_are_keys = c.arch == "gemma4" && text_config.value("attention_k_eq_v", false);

  m->layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    LayerWeights& L = m->layers[static_cast<size_t>(l)];
    if (c.pre_norms) L.attn_norm = norm(p + "input_layernorm.weight");
    if (c.mla()) {  // DeepSeek: MLA, then a dense MLP or routed and shared experts
      const std::string a = p + "self_attn.";
      if (c.q_lora_rank > 0) {
        L.wq_a = matrix(a + "q_a_proj.weight");
        L.q_a_norm = vector_f32(a + "q_a_layernorm.weight");
        L.wq_b = matrix(a + "q_b_proj.weight");
      } else {
        L.wq = matrix(a + "q_proj.weight");
      }
      L.wkv_a = matrix(a + "kv_a_proj_with_mqa.weight");
      L.kv_a_norm = vector_f32(a + "kv_a_layernorm.weight");
      split_kv_b(matrix(a + "kv_b_proj.weight"), c, dir, a + "kv_b_proj.weight", L, m->storage);
      L.wo = matrix(a + "o_proj.weight");
      L.ffn_norm = norm(p + "post_attention_layernorm.weight");
      if (c.moe_layer(l)) {
        L.ffn_gate_inp = matrix(p + "mlp.gate.weight");
        // Only noaux_tc routing reads the selection bias (transformers' DeepSeek-V2 ignores one in the file).
        if (noaux_tc) L.exp_probs_b = vector_f32(p + "mlp.gate.e_score_correction_bias");
        for (int e = 0; e < c.n_expert; ++e) {
          const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
          L.gate_exps.push_back(matrix(x + "gate_proj.weight"));
          L.up_exps.push_back(matrix(x + "up_proj.weight"));
          L.down_exps.push_back(matrix(x + "down_proj.weight"));
        }
        if (c.n_expert_shared > 0) {
          L.ffn_gate_shexp = matrix(p + "mlp.shared_experts.gate_proj.weight");
          L.ffn_up_shexp = matrix(p + "mlp.shared_experts.up_proj.weight");
          L.ffn_down_shexp = matrix(p + "mlp.shared_experts.down_proj.weight");
        }
      } else {
        L.w_gate = matrix(p + "mlp.gate_proj.weight");
        L.w_up = matrix(p + "mlp.up_proj.weight");
        L.w_down = matrix(p + "mlp.down_proj.weight");
      }
      if (opts.progress) opts.progress(0.9f * static_cast<float>(l + 1) / static_cast<float>(c.n_layers));
      continue;
    }
    const int64_t q_rows = int64_t{c.n_heads} * c.head_dim, kv_rows = int64_t{c.n_kv_heads} * c.head_dim;
    if (c.arch == "phi3") {  // q, k and v fused (rows in that order), as in its GGUF files
      const Tensor qkv = matrix(p + "self_attn.qkv_proj.weight");
      if (qkv.n_dims != 2 || qkv.ne[1] != q_rows + 2 * kv_rows)
        fail("'{}': tensor '{}self_attn.qkv_proj.weight' has {} rows, expected {}", dir, p, qkv.ne[1],
             q_rows + 2 * kv_rows);
      L.wq = row_range(qkv, 0, q_rows, p + "self_attn.q_proj.weight");
      L.wk = row_range(qkv, q_rows, kv_rows, p + "self_attn.k_proj.weight");
      L.wv = row_range(qkv, q_rows + kv_rows, kv_rows, p + "self_attn.v_proj.weight");
    } else {
      // Gemma 4's layers on another layer's KV have neither k_proj nor v_proj (checkpoints may hold them unused).
      const bool own_kv = c.has_own_kv(l);
      L.wq = matrix(p + "self_attn.q_proj.weight");
      if (own_kv) L.wk = matrix(p + "self_attn.k_proj.weight");
      if (own_kv && !(values_are_keys && !c.is_swa_layer(l))) L.wv = matrix(p + "self_attn.v_proj.weight");
    }
    L.wo = matrix(p + "self_attn.o_proj.weight");
    if (c.qkv_bias) {
      L.bq = vector_f32(p + "self_attn.q_proj.bias");
      L.bk = vector_f32(p + "self_attn.k_proj.bias");
      L.bv = vector_f32(p + "self_attn.v_proj.bias");
    }
    if (c.arch == "gpt-oss") {
      L.bo = vector_f32(p + "self_attn.o_proj.bias");
      L.attn_sinks = vector_f32(p + "self_attn.sinks");
    }
    if (c.qk_norm) {
      L.q_norm = norm(p + "self_attn.q_norm.weight");
      if (c.has_own_kv(l)) L.k_norm = norm(p + "self_attn.k_norm.weight");
    }
    if (c.n_embd_per_layer > 0) {
      L.ple_inp_gate = matrix(p + "per_layer_input_gate.weight");
      L.ple_proj = matrix(p + "per_layer_projection.weight");
      L.ple_post_norm = norm(p + "post_per_layer_input_norm.weight");
    }
    if (c.arch == "gemma4" && weights->has(p + "layer_scalar")) L.layer_output_scale = vector_f32(p + "layer_scalar");
    if (c.post_norms) {  // Gemma 2/3, OLMo 2: the post-attention norm is the attention's output norm
      L.attn_post_norm = norm(p + "post_attention_layernorm.weight");
      if (c.pre_norms) L.ffn_norm = norm(p + "pre_feedforward_layernorm.weight");
      L.ffn_post_norm = norm(p + "post_feedforward_layernorm.weight");
    } else {
      L.ffn_norm = norm(p + "post_attention_layernorm.weight");
    }
    // Llama 4 names its FFN feed_forward.
    const std::string mlp = p + (c.arch == "llama4" ? "feed_forward." : "mlp.");
    if (c.arch == "llama4" && c.moe_layer(l)) {
      load_llama4_experts(*weights, mlp, c, L, *m);
      L.ffn_gate_shexp = matrix(mlp + "shared_expert.gate_proj.weight");
      L.ffn_up_shexp = matrix(mlp + "shared_expert.up_proj.weight");
      L.ffn_down_shexp = matrix(mlp + "shared_expert.down_proj.weight");
    } else if (c.arch == "gpt-oss") {
      load_gpt_oss_experts(*weights, p + "mlp.", c, L, *m);
    } else if (c.moe_dense_branch) {  // Gemma 4: the router and experts beside the dense FFN, each with its norms
      load_gemma4_experts(*weights, p, c, L, *m);
      L.ffn_post_norm_1 = norm(p + "post_feedforward_layernorm_1.weight");
      L.ffn_pre_norm_2 = norm(p + "pre_feedforward_layernorm_2.weight");
      L.ffn_post_norm_2 = norm(p + "post_feedforward_layernorm_2.weight");
      L.w_gate = matrix(mlp + "gate_proj.weight");
      L.w_up = matrix(mlp + "up_proj.weight");
      L.w_down = matrix(mlp + "down_proj.weight");
    } else if (c.moe() && c.arch != "llama4") {
      // Qwen3-MoE: mlp.gate and mlp.experts.E.{gate,up,down}_proj; Mixtral: block_sparse_moe.gate and its
      // experts' w1 (gate), w3 (up), w2 (down).
      const bool mixtral = c.arch == "llama";
      const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
      L.ffn_gate_inp = matrix(moe + "gate.weight");
      for (int e = 0; e < c.n_expert; ++e) {
        const std::string x = moe + "experts." + std::to_string(e) + ".";
        L.gate_exps.push_back(matrix(x + (mixtral ? "w1.weight" : "gate_proj.weight")));
        L.up_exps.push_back(matrix(x + (mixtral ? "w3.weight" : "up_proj.weight")));
        L.down_exps.push_back(matrix(x + (mixtral ? "w2.weight" : "down_proj.weight")));
      }
      if (c.arch == "qwen2moe") {  // mlp.shared_expert and its gate, a [1, hidden] linear
        L.ffn_gate_shexp = matrix(moe + "shared_expert.gate_proj.weight");
        L.ffn_up_shexp = matrix(moe + "shared_expert.up_proj.weight");
        L.ffn_down_shexp = matrix(moe + "shared_expert.down_proj.weight");
        L.ffn_gate_inp_shexp = vector_f32(moe + "shared_expert_gate.weight");
        if (L.ffn_gate_inp_shexp.elements() != c.n_embd)
          fail("'{}': tensor '{}shared_expert_gate.weight' has {} values, expected hidden_size = {}", dir, moe,
               L.ffn_gate_inp_shexp.elements(), c.n_embd);
        L.ffn_gate_inp_shexp.n_dims = 1;
        L.ffn_gate_inp_shexp.ne = {c.n_embd, 1, 1, 1};
      }
    } else if (c.arch == "phi3") {  // the gate's rows, then up's
      const Tensor gate_up = matrix(p + "mlp.gate_up_proj.weight");
      if (gate_up.n_dims != 2 || gate_up.ne[1] != 2 * int64_t{c.n_ff})
        fail("'{}': tensor '{}mlp.gate_up_proj.weight' has {} rows, expected 2 x intermediate_size = {}", dir, p,
             gate_up.ne[1], 2 * int64_t{c.n_ff});
      L.w_gate = row_range(gate_up, 0, c.n_ff, p + "mlp.gate_proj.weight");
      L.w_up = row_range(gate_up, c.n_ff, c.n_ff, p + "mlp.up_proj.weight");
    } else {
      L.w_gate = matrix(mlp + "gate_proj.weight");
      L.w_up = matrix(mlp + "up_proj.weight");
    }
    if (!c.moe_layer(l) && !c.moe_dense_branch) L.w_down = matrix(mlp + "down_proj.weight");
    if (opts.progress) opts.progress(0.9f * static_cast<float>(l + 1) / static_cast<float>(c.n_layers));
  }
  // A llama checkpoint with attention_bias=true carries q/k/v biases too; use them when present.
  if (!c.qkv_bias && weights->has(prefix + "layers.0.self_attn.q_proj.bias")) {
    c.qkv_bias = true;
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string p = prefix + "layers." + std::to_string(l) + ".";
      LayerWeights& L = m->layers[static_cast<size_t>(l)];
      L.bq = vector_f32(p + "self_attn.q_proj.bias");
      L.bk = vector_f32(p + "self_attn.k_proj.bias");
      L.bv = vector_f32(p + "self_attn.v_proj.bias");
    }
  }

  validate_model(*m);
  m->tokenizer = make_tokenizer(m->vocab);
  if (opts.progress) opts.progress(1.0f);
  return m;
}

}  // namespace kvserve
