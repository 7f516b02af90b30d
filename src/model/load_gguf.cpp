// GGUF → Model: hyper-parameters from "<arch>.*" keys, weights as views into the mapped file, and the
// vocabulary from "tokenizer.ggml.*" with llama.cpp's defaults (llama-vocab.cpp) for absent keys.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string_view>

#include "core/error.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/mla_weights.h"
#include "model/sampling_defaults.h"
#include "model/tokenizer.h"

namespace kvserve {

namespace {

// What differs between supported architectures. Adding one (gemma, deepseek2, ...) means a row here
// plus, if its tensors or keys differ, the matching branches below and a forward builder.
struct ArchTraits {
  std::string_view name;
  RopeStyle rope_style;
  bool qkv_bias;  // attn_{q,k,v}.bias present in every layer
  bool qk_norm;   // attn_{q,k}_norm.weight present in every layer
};

constexpr ArchTraits kArchTable[] = {
    {"llama", RopeStyle::Interleaved, false, false},
    {"qwen2", RopeStyle::NeoX, true, false},
    {"qwen3", RopeStyle::NeoX, false, true},
    {"qwen3moe", RopeStyle::NeoX, false, true},
    {"qwen2moe", RopeStyle::NeoX, false, false},  // q/k/v biases where the file has them, as llama.cpp
    {"phi3", RopeStyle::NeoX, false, false},
    {"gemma", RopeStyle::NeoX, false, false},
    {"gemma2", RopeStyle::NeoX, false, false},
    {"gemma3", RopeStyle::NeoX, false, true},
    {"smollm3", RopeStyle::Interleaved, false, false},
    {"granite", RopeStyle::Interleaved, false, false},
    {"deepseek2", RopeStyle::Interleaved, false, false},
    {"mistral3", RopeStyle::Interleaved, false, false},
    {"olmo2", RopeStyle::NeoX, false, true},
    {"gpt-oss", RopeStyle::NeoX, true, false},
    {"llama4", RopeStyle::Interleaved, false, false},
    {"gemma4", RopeStyle::NeoX, false, true},
};

const ArchTraits& arch_traits(const std::string& arch, const std::string& file) {
  for (const ArchTraits& a : kArchTable)
    if (a.name == arch) return a;
  std::string known;
  for (const ArchTraits& a : kArchTable) known += (known.empty() ? "" : ", ") + std::string(a.name);
  fail("{}: unsupported architecture '{}' (supported: {})", file, arch, known);
}

int positive_int(const GGUFFile& f, const std::string& key, uint32_t v) {
  if (v == 0 || v > (1u << 30)) fail("{}: metadata '{}' = {} is out of range", f.name(), key, v);
  return static_cast<int>(v);
}

// Llama-3 RoPE frequency factor for dimension pair i (of n_rot/2), as Meta's reference computes it.
float llama3_freq_factor(const RopeScaling& s, float base, int n_rot, int i) {
  const double freq = std::pow(static_cast<double>(base), -2.0 * i / n_rot);
  const double wavelen = 2 * std::numbers::pi / freq;
  const double low_wavelen = s.original_context / s.low_freq_factor;
  const double high_wavelen = s.original_context / s.high_freq_factor;
  if (wavelen < high_wavelen) return 1.0f;
  if (wavelen > low_wavelen) return s.factor;
  if (!(s.high_freq_factor > s.low_freq_factor)) return 1.0f;
  const double smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return static_cast<float>(1.0 / ((1 - smooth) / s.factor + smooth));
}

// YaRN, with the magnitude llama.cpp's context works out (llama_context: yarn_attn_factor, which ggml's
// rope_yarn multiplies by 1 + 0.1 ln(factor) again): 1 + 0.1 ln(factor) on cos and sin for most models;
// for DeepSeek-V2 (a yarn_log_multiplier, its mscale_all_dim, stored as 0.1 x it) mscale / mscale_all_dim with
// mscale = mscale_all_dim, so 1, its attention scale taking the factor instead (read_deepseek2). Times
// rope.scaling.attn_factor when the file has one. The original context: its key, or the training context.
void read_yarn(const GGUFFile& f, const std::string& arch, ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScaling::Type::Yarn;
  if (!(s.factor >= 1) || !std::isfinite(s.factor))
    fail("{}: yarn rope scaling factor {} must be at least 1", f.name(), s.factor);
  const std::string p = arch + ".rope.scaling.";
  s.original_context = f.find_u32(p + "original_context_length")
                           ? positive_int(f, p + "original_context_length", *f.find_u32(p + "original_context_length"))
                           : c.n_ctx_train;
  const float factor = 1.0f / (1.0f / s.factor);  // as llama.cpp: 1 / freq_scale
  const auto get_mscale = [](float scale, float mscale) {
    return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f;
  };
  if (arch == "deepseek2") s.yarn_log_mul = f.find_f32(p + "yarn_log_multiplier").value_or(0.0f) / 0.1f;
  if (!std::isfinite(s.yarn_log_mul)) fail("{}: rope.scaling.yarn_log_multiplier is not a number", f.name());
  float attn = get_mscale(factor, 1.0f);
  if (s.yarn_log_mul != 0.0f) {
    const float mscale = s.yarn_log_mul != 1.0f ? s.yarn_log_mul : 1.0f;
    attn = get_mscale(factor, mscale) / get_mscale(factor, s.yarn_log_mul);
  }
  if (arch == "mistral3") {
    // Ministral 3: the multiplier is mscale_all_dim itself, mscale 1 (llama_context's general case); the ramp's
    // betas from the file.
    const float mscale_all_dim = f.find_f32(p + "yarn_log_multiplier").value_or(0.0f);
    if (!std::isfinite(mscale_all_dim)) fail("{}: rope.scaling.yarn_log_multiplier is not a number", f.name());
    if (mscale_all_dim != 0.0f) attn = get_mscale(factor, 1.0f) / get_mscale(factor, mscale_all_dim);
    s.yarn_beta_fast = f.find_f32(p + "yarn_beta_fast").value_or(s.yarn_beta_fast);
    s.yarn_beta_slow = f.find_f32(p + "yarn_beta_slow").value_or(s.yarn_beta_slow);
    if (!(s.yarn_beta_fast > s.yarn_beta_slow) || !(s.yarn_beta_slow > 0))
      fail("{}: rope.scaling yarn_beta_fast {} must exceed yarn_beta_slow {} > 0", f.name(), s.yarn_beta_fast,
           s.yarn_beta_slow);
  }
  attn *= 1.0f / (1.0f + 0.1f * std::log(factor));
  attn *= f.find_f32(p + "attn_factor").value_or(1.0f);
  if (!(attn > 0) || !std::isfinite(attn)) fail("{}: yarn attention factor {} must be positive", f.name(), attn);
  s.attn_factor = attn;
}

void read_rope_scaling(const GGUFFile& f, const std::string& arch, ModelConfig& c) {
  const std::string p = arch + ".rope.scaling.";
  RopeScaling& s = c.rope_scaling;
  const std::string type = f.find_str(p + "type").value_or("");
  if (auto factor = f.find_f32(p + "factor")) s.factor = *factor;
  if (auto v = f.find_f32(p + "low_freq_factor")) s.low_freq_factor = *v;
  if (auto v = f.find_f32(p + "high_freq_factor")) s.high_freq_factor = *v;
  if (auto v = f.find_u32(p + "original_context_length")) s.original_context = static_cast<int>(*v);

  if (type == "linear") {
    s.type = RopeScaling::Type::Linear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::Llama3;
  } else if (type == "yarn") {
    read_yarn(f, arch, c);
  } else if (type.empty() || type == "none") {
    // Older files give linear scaling as a bare scale.
    if (auto scale = f.find_f32(arch + ".rope.scale_linear"); scale && *scale != 1.0f) {
      s.type = RopeScaling::Type::Linear;
      s.factor = *scale;
    }
  } else {
    fail("{}: rope scaling type '{}' is not supported (supported: none, linear, llama3, yarn)", f.name(), type);
  }
  if (s.type == RopeScaling::Type::Linear && !(s.factor > 0))
    fail("{}: rope scaling factor {} must be positive", f.name(), s.factor);

  // llama.cpp's converter writes Llama 3.1+ scaling as a per-dimension factor tensor instead of keys.
  // The Model has no slot for that tensor, so it is recognised as llama3 scaling (factor = largest
  // entry, other parameters from the keys or Meta's defaults) and checked entry by entry.
  // Gemma 4's rope_freqs belong to its full-attention layers alone (read_gemma4).
  if (const GGUFTensorInfo* t = arch == "gemma4" ? nullptr : f.find_tensor("rope_freqs.weight")) {
    if (t->type != DType::F32 || t->ne[0] != c.n_rot / 2 || t->ne[1] * t->ne[2] * t->ne[3] != 1)
      fail("{}: tensor 'rope_freqs.weight' must be F32 [{}], found {} [{}, {}]", f.name(), c.n_rot / 2,
           dtype_name(t->type), t->ne[0], t->ne[1]);
    std::vector<float> factors(static_cast<size_t>(t->ne[0]));
    std::memcpy(factors.data(), t->data, factors.size() * sizeof(float));
    const float max_factor = factors.empty() ? 1.0f : *std::max_element(factors.begin(), factors.end());
    if (s.type != RopeScaling::Type::Llama3) {
      s.type = RopeScaling::Type::Llama3;
      s.factor = max_factor;
    }
    if (!(s.high_freq_factor >= s.low_freq_factor) || !(s.factor > 0))
      fail("{}: invalid llama3 rope scaling parameters", f.name());
    // Factors the keys' formula does not give (Llama 4 Scout's, low = high frequency factor, written without
    // keys) are taken as they are, as ggml takes them.
    for (size_t i = 0; i < factors.size(); ++i) {
      if (!(factors[i] > 0) || !std::isfinite(factors[i]))
        fail("{}: tensor 'rope_freqs.weight'[{}] = {} must be a positive number", f.name(), i, factors[i]);
      const float want = llama3_freq_factor(s, c.rope_base, c.n_rot, static_cast<int>(i));
      if (std::fabs(factors[i] - want) > 1e-3f * std::max(1.0f, want)) s.freq_factors = factors;
    }
  }
  if (s.type == RopeScaling::Type::Llama3 && !(s.high_freq_factor >= s.low_freq_factor && s.factor > 0))
    fail("{}: invalid llama3 rope scaling parameters", f.name());
}

}  // namespace

SlidingWindowLayers gguf_sliding_window_layers(const GGUFFile& f, const std::string& a, int n_layers) {
  SlidingWindowLayers swa;
  if (a == "llama4") {
    // Chunked attention on all but every 4th layer, chunks of 8192 unless the key gives others (0: none).
    const uint32_t chunk = f.find_u32(a + ".attention.sliding_window").value_or(8192);
    if (chunk == 0) return swa;
    swa.window = positive_int(f, a + ".attention.sliding_window", chunk);
    for (int l = 0; l < n_layers; ++l) swa.layers.push_back((l + 1) % 4 != 0);
    return swa;
  }
  const bool gemma2 = a == "gemma2";
  const bool gpt_oss = a == "gpt-oss";
  if (!gemma2 && a != "gemma3" && a != "gemma4" && a != "olmo2" && !gpt_oss) return swa;
  const uint32_t window = f.find_u32(a + ".attention.sliding_window").value_or(gemma2 ? 4096 : 0);
  if (window == 0) return swa;
  swa.window = positive_int(f, a + ".attention.sliding_window", window);
  const std::string pattern_key = a + ".attention.sliding_window_pattern";
  const GGUFValue* pattern = f.find(pattern_key);
  swa.layers.assign(static_cast<size_t>(n_layers), false);
  if (pattern != nullptr && pattern->is_array()) {
    const std::vector<int32_t> flags = f.get_i32_array(pattern_key);
    if (flags.size() != static_cast<size_t>(n_layers))
      fail("{}: '{}' has {} entries for {} layers", f.name(), pattern_key, flags.size(), n_layers);
    for (size_t l = 0; l < flags.size(); ++l) swa.layers[l] = flags[l] != 0;
  } else {
    if (pattern == nullptr && a == "gemma4") fail("{}: a gemma4 file needs '{}'", f.name(), pattern_key);
    const uint32_t n = pattern != nullptr ? f.get_u32(pattern_key) : gemma2 || gpt_oss ? 2 : a == "olmo2" ? 4 : 6;
    for (int l = 0; l < n_layers; ++l) swa.layers[static_cast<size_t>(l)] = n == 0 || l % n < n - 1;
  }
  return swa;
}

namespace {

// Phi-3's LongRoPE (the 128k models, Phi-3.5): per-pair factors in rope_factors_long / rope_factors_short
// (F32 [n_rot / 2]), the attention factor and the original context in keys (llama.cpp's defaults: 1, and
// the training context).
void read_longrope(const GGUFFile& f, ModelConfig& c) {
  const auto factors = [&](const char* name) {
    std::vector<float> out;
    const GGUFTensorInfo* t = f.find_tensor(name);
    if (t == nullptr) return out;
    if (t->type != DType::F32 || t->ne[0] != c.n_rot / 2 || t->ne[1] * t->ne[2] * t->ne[3] != 1)
      fail("{}: tensor '{}' must be F32 [{}], found {} [{}, {}]", f.name(), name, c.n_rot / 2, dtype_name(t->type),
           t->ne[0], t->ne[1]);
    out.resize(static_cast<size_t>(t->ne[0]));
    std::memcpy(out.data(), t->data, out.size() * sizeof(float));
    for (float v : out)
      if (!(v > 0) || !std::isfinite(v)) fail("{}: tensor '{}' holds {}; factors must be positive", f.name(), name, v);
    return out;
  };
  std::vector<float> long_f = factors("rope_factors_long.weight"), short_f = factors("rope_factors_short.weight");
  if (long_f.empty() && short_f.empty()) return;
  // llama.cpp runs without factors where the one its context asks for is missing: ones do the same.
  if (long_f.empty()) long_f.assign(short_f.size(), 1.0f);
  if (short_f.empty()) short_f.assign(long_f.size(), 1.0f);
  RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScaling::Type::None)
    fail("{}: LongRoPE factors together with rope scaling of another type", f.name());
  s.type = RopeScaling::Type::LongRope;
  s.long_factors = std::move(long_f);
  s.short_factors = std::move(short_f);
  s.attn_factor = f.find_f32(c.arch + ".rope.scaling.attn_factor").value_or(1.0f);
  if (!(s.attn_factor > 0) || !std::isfinite(s.attn_factor))
    fail("{}: rope.scaling.attn_factor {} must be positive", f.name(), s.attn_factor);
  const std::optional<uint32_t> original = f.find_u32(c.arch + ".rope.scaling.original_context_length");
  s.original_context = original ? positive_int(f, c.arch + ".rope.scaling.original_context_length", *original)
                                : c.n_ctx_train;
}

// Granite (3.x dense), as llama.cpp's llama_model_granite: embeddings times embedding_scale, each block's
// output times residual_scale before its residual add, attention scores scaled by attention.scale (not
// 1/sqrt(head_dim)), logits divided by logit_scale (required, as llama.cpp requires it). Absent optional
// keys, or 0, leave that step out.
void read_granite(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  const auto scale = [&](const std::string& key, bool required) {
    const std::optional<float> v = f.find_f32(a + "." + key);
    if (!v && required) fail("{}: required key '{}.{}' is missing", f.name(), a, key);
    if (v && (!(*v >= 0) || !std::isfinite(*v))) fail("{}: {} {} must be a non-negative number", f.name(), key, *v);
    return v.value_or(0.0f);
  };
  c.logit_scale = scale("logit_scale", true);
  if (c.logit_scale == 0.0f) fail("{}: logit_scale must not be 0", f.name());
  c.residual_scale = scale("residual_scale", false);
  if (const float e = scale("embedding_scale", false); e != 0.0f) c.embd_scale = e;
  if (const float s = scale("attention.scale", false); s != 0.0f) c.attn_scale = s;
}

// Gemma, Gemma 2 and Gemma 3, as llama.cpp's llama_model_gemma* read them: embeddings times sqrt(n_embd) and
// GeGLU; Gemma 2 and 3 add post-norms, a final logit soft-cap (Gemma 2: 30 unless the file says, Gemma 3:
// none unless it says) and local layers of `sliding_window` positions by `sliding_window_pattern` (a bool
// per layer, or n for "every n-th layer is global"). Gemma 2: window 4096 and n = 2 unless the file says,
// attention scores soft-capped (50 unless it says), local RoPE base the global one. Gemma 3: local layers
// only with a window in the file, n = 6, local RoPE base 10000, q/k norms. The norm weights in the file
// already hold HF's 1 + w (the converter adds it).
void read_gemma(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  const bool gemma2 = c.arch == "gemma2", gemma3 = c.arch == "gemma3";
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.ffn_act = FfnActivation::GeluTanh;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (!gemma2 && !gemma3 && c.arch != "gemma4") return;
  c.post_norms = true;
  // gemma_pytorch scales queries by 1/sqrt(n_embd / n_heads) for the 27B models, else 1/sqrt(head_dim).
  if (c.n_layers == (gemma2 ? 46 : 62)) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_heads));
  const auto softcap = [&](const std::string& key, float fallback) {
    const float v = f.find_f32(a + "." + key).value_or(fallback);
    if (!(v >= 0) || !std::isfinite(v)) fail("{}: {} {} must be a non-negative number", f.name(), key, v);
    return v;
  };
  c.final_logit_softcap = softcap("final_logit_softcapping", gemma2 ? 30.0f : 0.0f);
  if (gemma2) c.attn_softcap = softcap("attn_logit_softcapping", 50.0f);
  SlidingWindowLayers swa = gguf_sliding_window_layers(f, a, c.n_layers);
  if (swa.window == 0 && c.arch == "gemma4") fail("{}: a gemma4 file needs {}.attention.sliding_window", f.name(), a);
  if (swa.window == 0) return;
  c.sliding_window = swa.window;
  c.swa_layers = std::move(swa.layers);
  c.rope_base_swa = f.find_f32(a + ".rope.freq_base_swa").value_or(gemma2 ? c.rope_base : 10000.0f);
  if (gemma2) c.rope_scaling_swa = c.rope_scaling;
  if (!(c.rope_base_swa > 0)) fail("{}: rope.freq_base_swa {} must be positive", f.name(), c.rope_base_swa);
}

// Gemma 4 (llama.cpp's llama_model_gemma4), over what read_gemma sets: the full-attention layers' heads key_length wide
// with rope.dimension_count rotating by "proportional" RoPE (rope_freqs: each pair's divisor, 1e30 for the pairs that
// hold still), the sliding ones key_length_swa with rope.dimension_count_swa at rope.freq_base_swa (10000), KV heads
// and FFN widths per layer where the keys are arrays (read_config), q and k normed with weights and v without,
// attention scale 1, the last attention.shared_kv_layers layers on earlier layers' KV, per-layer embeddings of
// embedding_length_per_layer_input (0: none).
void read_gemma4(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  const std::string kl = a + ".attention.key_length_swa";
  const std::string vl = a + ".attention.value_length_swa";
  c.head_dim_swa = positive_int(f, kl, f.find_u32(kl).value_or(static_cast<uint32_t>(c.head_dim)));
  if (const auto v = f.find_u32(vl); v && static_cast<int>(*v) != c.head_dim_swa)
    fail("{}: {} {} differs from {} {}; not supported", f.name(), vl, *v, kl, c.head_dim_swa);
  const std::string rk = a + ".rope.dimension_count_swa";
  c.n_rot_swa = positive_int(f, rk, f.find_u32(rk).value_or(static_cast<uint32_t>(c.n_rot)));
  if (c.n_rot_swa % 2 != 0 || c.n_rot_swa > c.head_dim_swa)
    fail("{}: {} {} must be even and at most key_length_swa {}", f.name(), rk, c.n_rot_swa, c.head_dim_swa);
  if (c.head_dim_swa == c.head_dim && c.n_rot_swa == c.n_rot) c.head_dim_swa = c.n_rot_swa = 0;
  c.attn_scale = 1.0f;
  c.v_norm = true;
  const uint32_t shared = f.find_u32(a + ".attention.shared_kv_layers").value_or(0);
  if (shared >= static_cast<uint32_t>(c.n_layers))
    fail("{}: attention.shared_kv_layers {} leaves none of {} layers its own KV", f.name(), shared, c.n_layers);
  c.n_kv_shared_layers = static_cast<int>(shared);
  for (int l = c.n_layers - c.n_kv_shared_layers; l < c.n_layers; ++l)
    if (c.kv_source_layer(l) == l)
      fail("{}: layer {} shares the KV of an earlier {} layer (attention.shared_kv_layers {}), and there is none",
           f.name(), l, c.is_swa_layer(l) ? "sliding-window" : "full-attention", shared);
  const uint32_t ple = f.get_u32(a + ".embedding_length_per_layer_input");
  if (ple > (1u << 20)) fail("{}: embedding_length_per_layer_input {} is out of range", f.name(), ple);
  c.n_embd_per_layer = static_cast<int>(ple);
  if (const GGUFTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    if (t->type != DType::F32 || t->ne[0] != c.n_rot / 2 || t->ne[1] * t->ne[2] * t->ne[3] != 1)
      fail("{}: tensor 'rope_freqs.weight' must be F32 [{}], found {} [{}, {}]", f.name(), c.n_rot / 2,
           dtype_name(t->type), t->ne[0], t->ne[1]);
    std::vector<float> factors(static_cast<size_t>(t->ne[0]));
    std::memcpy(factors.data(), t->data, factors.size() * sizeof(float));
    for (size_t i = 0; i < factors.size(); ++i)
      if (!(factors[i] > 0) || std::isnan(factors[i]))
        fail("{}: tensor 'rope_freqs.weight'[{}] = {} must be positive", f.name(), i, factors[i]);
    c.rope_scaling.freq_factors = std::move(factors);
  }
  c.rope_scaling_swa = {};
}

// Mixture of experts: expert_count and expert_used_count (qwen3moe needs them; a llama file with them is
// Mixtral-style), each expert expert_feed_forward_length wide (qwen3moe; Mixtral's are feed_forward_length).
void read_experts(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  const std::optional<uint32_t> n = f.find_u32(a + ".expert_count");
  if (!n || *n == 0) {
    if (a == "qwen3moe" || a == "qwen2moe" || a == "gpt-oss" || a == "llama4")
      fail("{}: a {} file needs {}.expert_count", f.name(), a, a);
    return;
  }
  if (a != "qwen3moe" && a != "qwen2moe" && a != "llama" && a != "deepseek2" && a != "gpt-oss" && a != "llama4" &&
      a != "gemma4")
    fail(
        "{}: experts ({}.expert_count = {}) are supported for qwen3moe, qwen2moe, deepseek2, gpt-oss, llama4, gemma4 "
        "and llama (Mixtral) files, not {}",
        f.name(), a, *n, a);
  c.n_expert = positive_int(f, a + ".expert_count", *n);
  c.n_expert_used = positive_int(f, a + ".expert_used_count", f.find_u32(a + ".expert_used_count").value_or(0));
  if (c.n_expert_used > c.n_expert)
    fail("{}: expert_used_count {} exceeds expert_count {}", f.name(), c.n_expert_used, c.n_expert);
  if (a == "deepseek2" || a == "gpt-oss" || a == "llama4" || a == "gemma4") {
    c.n_ff_exp = positive_int(f, a + ".expert_feed_forward_length", f.get_u32(a + ".expert_feed_forward_length"));
    // Gemma 4 (llama.cpp's build_moe_ffn call): softmax over every expert, the chosen renormalized, GELU experts
    // beside the dense FFN.
    c.moe_dense_branch = a == "gemma4";
    return;
  }
  const bool qwen = a == "qwen3moe" || a == "qwen2moe";
  c.n_ff_exp =
      qwen
          ? positive_int(
                f, a + ".expert_feed_forward_length",
                f.find_u32(a + ".expert_feed_forward_length").value_or(static_cast<uint32_t>(c.n_ff / c.n_expert_used)))
          : c.n_ff;
  if (a == "qwen2moe") {
    // As llama.cpp's llama_model_qwen2moe: the chosen experts' softmax weights as they are, and one shared
    // expert (expert_shared_feed_forward_length wide, else feed_forward_length) behind a sigmoid gate.
    c.expert_weights_norm = false;
    c.n_expert_shared = 1;
    c.n_ff_shexp =
        positive_int(f, a + ".expert_shared_feed_forward_length",
                     f.find_u32(a + ".expert_shared_feed_forward_length").value_or(static_cast<uint32_t>(c.n_ff)));
  }
}

// DeepSeek-V2 / V3 (llama.cpp's llama_model_deepseek2). Attention is MLA: the latent's rank, q's optional
// low rank, the heads' key and value sizes (key/value_length_mla in current files, whose key/value_length
// describe the latent cache; key/value_length themselves in older ones with one attn_kv_b), the rope key's
// n_rot. The MoE keys as llama.cpp reads them: leading dense layers, shared experts, the router's gating
// (1 softmax, 2 sigmoid; absent: softmax), groups, weight scale, renormalization (absent: off).
void read_deepseek2(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  const auto u32 = [&](const std::string& key, uint32_t fallback) { return f.find_u32(a + "." + key).value_or(fallback); };
  c.kv_lora_rank = positive_int(f, a + ".attention.kv_lora_rank", f.get_u32(a + ".attention.kv_lora_rank"));
  const uint32_t q_rank = u32("attention.q_lora_rank", 0);
  c.q_lora_rank = q_rank == 0 ? 0 : positive_int(f, a + ".attention.q_lora_rank", q_rank);
  const bool split = f.find_u32(a + ".attention.key_length_mla").has_value();
  const std::string k_key = split ? "attention.key_length_mla" : "attention.key_length";
  const std::string v_key = split ? "attention.value_length_mla" : "attention.value_length";
  c.head_dim = positive_int(f, a + "." + k_key, f.get_u32(a + "." + k_key));
  c.head_dim_v = positive_int(f, a + "." + v_key, f.get_u32(a + "." + v_key));
  c.n_rot = positive_int(f, a + ".rope.dimension_count", f.get_u32(a + ".rope.dimension_count"));
  if (c.n_rot % 2 != 0 || c.n_rot >= c.head_dim)
    fail("{}: rope.dimension_count {} must be even and below the key head size {}", f.name(), c.n_rot, c.head_dim);
  if (std::max({c.kv_lora_rank, c.q_lora_rank, c.head_dim, c.head_dim_v}) > (1 << 20))
    fail("{}: MLA sizes (kv_lora_rank {}, q_lora_rank {}, heads {} / {}) are out of range", f.name(), c.kv_lora_rank,
         c.q_lora_rank, c.head_dim, c.head_dim_v);
  c.n_kv_heads = 1;  // one latent row per token, whatever an older file's head_count_kv says
  c.n_layer_dense_lead = static_cast<int>(u32("leading_dense_block_count", 0));
  if (c.n_layer_dense_lead > c.n_layers)
    fail("{}: leading_dense_block_count {} exceeds block_count {}", f.name(), c.n_layer_dense_lead, c.n_layers);
  c.n_expert_shared = static_cast<int>(u32("expert_shared_count", 0));
  if (c.n_expert_shared > 64) fail("{}: expert_shared_count {} is out of range", f.name(), c.n_expert_shared);
  c.expert_weights_scale = f.find_f32(a + ".expert_weights_scale").value_or(0.0f);
  if (!(c.expert_weights_scale >= 0) || !std::isfinite(c.expert_weights_scale))
    fail("{}: expert_weights_scale {} must be a non-negative number", f.name(), c.expert_weights_scale);
  c.expert_weights_norm = f.find_bool(a + ".expert_weights_norm").value_or(false);
  switch (u32("expert_gating_func", 0)) {
    case 0:
    case 1: c.expert_gating = ModelConfig::ExpertGating::Softmax; break;
    case 2: c.expert_gating = ModelConfig::ExpertGating::Sigmoid; break;
    default: fail("{}: expert_gating_func {} is not supported (1 softmax, 2 sigmoid)", f.name(), u32("expert_gating_func", 0));
  }
  c.n_expert_groups = static_cast<int>(u32("expert_group_count", 0));
  c.n_group_used = static_cast<int>(u32("expert_group_used_count", 0));
  if (c.n_expert_groups > 1) {
    if (c.n_expert % c.n_expert_groups != 0 || c.n_group_used <= 0 || c.n_group_used >= c.n_expert_groups ||
        c.n_expert_used > c.n_group_used * (c.n_expert / c.n_expert_groups))
      fail("{}: {} experts in {} groups, {} groups used, {} experts used: inconsistent", f.name(), c.n_expert,
           c.n_expert_groups, c.n_group_used, c.n_expert_used);
  }
}

// Ministral 3's attention temperature (llama.cpp's mistral3: attention.temperature_scale, its length the YaRN
// original context, else the training context).
void read_attn_temperature(const GGUFFile& f, ModelConfig& c) {
  const float scale = f.find_f32(c.arch + ".attention.temperature_scale").value_or(0.0f);
  if (!std::isfinite(scale)) fail("{}: attention.temperature_scale is not a number", f.name());
  if (scale == 0.0f) return;
  c.attn_temp_scale = scale;
  const std::string key = c.arch + ".rope.scaling.original_context_length";
  c.attn_temp_length = f.find_u32(key) ? positive_int(f, key, *f.find_u32(key)) : c.n_ctx_train;
}

// OLMo 2 and 3 (llama.cpp's olmo2): post-norms only, q / k normed over the whole projection; OLMo 3's sliding
// window on all but every 4th layer, those layers rotating at rope.freq_base_swa (else the base) unscaled.
void read_olmo2(const GGUFFile& f, ModelConfig& c) {
  c.pre_norms = false;
  c.post_norms = true;
  c.qk_norm_full = true;
  SlidingWindowLayers swa = gguf_sliding_window_layers(f, c.arch, c.n_layers);
  if (swa.window == 0) return;
  c.sliding_window = swa.window;
  c.swa_layers = std::move(swa.layers);
  c.rope_base_swa = f.find_f32(c.arch + ".rope.freq_base_swa").value_or(c.rope_base);
  c.rope_scaling_swa = {};
}

// gpt-oss (llama.cpp's llama_model_openai_moe): learned attention sinks, biases on every projection, a router
// with a bias whose top experts' own logits are softmaxed, the clamped SwiGLU, and a sliding window on every
// other layer (the even ones), which rotate at rope.freq_base_swa (else the base) scaled as the full ones.
void read_gpt_oss(const GGUFFile& f, ModelConfig& c) {
  c.learned_sinks = true;
  c.expert_gating = ModelConfig::ExpertGating::SoftmaxWeight;
  c.expert_weights_norm = false;
  c.ffn_act = FfnActivation::SwigluOai;
  SlidingWindowLayers swa = gguf_sliding_window_layers(f, c.arch, c.n_layers);
  if (swa.window == 0) return;
  c.sliding_window = swa.window;
  c.swa_layers = std::move(swa.layers);
  c.rope_base_swa = f.find_f32(c.arch + ".rope.freq_base_swa").value_or(c.rope_base);
  c.rope_scaling_swa = c.rope_scaling;
  if (!(c.rope_base_swa > 0)) fail("{}: rope.freq_base_swa {} must be positive", f.name(), c.rope_base_swa);
}

// Llama 4 (llama.cpp's llama_model_llama4). Every interleave_moe_layer_step-th layer has experts (sigmoid of the
// top logit, applied to the token before the expert) and one shared expert as wide; the others a dense FFN.
// The rotating layers L2-norm q and k (unless 128 experts: Maverick). attention.sliding_window 0 (what the converter
// writes when every layer is full attention): every layer rotates, nothing is chunked. Otherwise every 4th layer is
// a full-attention NoPE layer with the attention temperature (floor scale 8192, scale 0.1) and the others attend
// in chunks of 8192 (or the key's value where a file gives one; llama.cpp fixes 8192).
void read_llama4(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  c.expert_gating = ModelConfig::ExpertGating::SigmoidChosen;
  c.expert_weight_before_ffn = true;
  c.expert_weights_norm = false;
  c.n_expert_shared = 1;
  c.moe_layer_step =
      positive_int(f, a + ".interleave_moe_layer_step", f.find_u32(a + ".interleave_moe_layer_step").value_or(1));
  c.qk_l2_norm = c.n_expert != 128;  // on the rotating layers: all of them when nothing is chunked
  SlidingWindowLayers chunked = gguf_sliding_window_layers(f, a, c.n_layers);
  if (chunked.window == 0) return;
  c.sliding_window = chunked.window;
  c.swa_chunked = true;
  c.swa_layers = std::move(chunked.layers);
  for (int l = 0; l < c.n_layers; ++l) c.nope_layers.push_back((l + 1) % 4 == 0);
  c.rope_base_swa = f.find_f32(a + ".rope.freq_base_swa").value_or(c.rope_base);
  if (!(c.rope_base_swa > 0)) fail("{}: rope.freq_base_swa {} must be positive", f.name(), c.rope_base_swa);
  c.rope_scaling_swa = c.rope_scaling;
  c.attn_temp_scale = 0.1f;
  c.attn_temp_length = 8192;
  c.attn_temp_offset = 1.0f;
  c.attn_temp_nope_only = true;
}

// A key llama.cpp reads with get_key_or_arr (head_count_kv, feed_forward_length): one value per layer where the file
// gives an array (each positive), else empty (the scalar, read by the caller).
std::vector<int> per_layer_ints(const GGUFFile& f, const std::string& key, int n_layers) {
  const GGUFValue* v = f.find(key);
  if (v == nullptr || !v->is_array()) return {};
  const std::vector<int32_t> values = f.get_i32_array(key);
  if (values.size() != static_cast<size_t>(n_layers))
    fail("{}: '{}' has {} entries for {} layers", f.name(), key, values.size(), n_layers);
  std::vector<int> out;
  for (int32_t x : values) out.push_back(positive_int(f, key, static_cast<uint32_t>(std::max(x, 0))));
  return out;
}

// The scalar of a per-layer key (its first value; 0 where the file has a scalar) and, where the layers differ, the
// per-layer values kept in `layers`.
int split_per_layer(std::vector<int> values, std::vector<int>& layers) {
  if (values.empty()) return 0;
  if (std::any_of(values.begin(), values.end(), [&](int x) { return x != values.front(); })) layers = values;
  return values.front();
}

ModelConfig read_config(const GGUFFile& f) {
  ModelConfig c;
  c.arch = f.get_str("general.architecture");
  const ArchTraits& traits = arch_traits(c.arch, f.name());
  c.name = f.find_str("general.name").value_or("");
  const std::string& a = c.arch;
  c.n_embd = positive_int(f, a + ".embedding_length", f.get_u32(a + ".embedding_length"));
  c.n_layers = positive_int(f, a + ".block_count", f.get_u32(a + ".block_count"));
  c.n_heads = positive_int(f, a + ".attention.head_count", f.get_u32(a + ".attention.head_count"));
  c.n_kv_heads = split_per_layer(per_layer_ints(f, a + ".attention.head_count_kv", c.n_layers), c.layer_kv_heads);
  if (c.n_kv_heads == 0)
    c.n_kv_heads = positive_int(f, a + ".attention.head_count_kv",
                                f.find_u32(a + ".attention.head_count_kv").value_or(static_cast<uint32_t>(c.n_heads)));
  c.n_ff = split_per_layer(per_layer_ints(f, a + ".feed_forward_length", c.n_layers), c.layer_n_ff);
  if (c.n_ff == 0) c.n_ff = positive_int(f, a + ".feed_forward_length", f.get_u32(a + ".feed_forward_length"));
  c.n_ctx_train = positive_int(f, a + ".context_length", f.get_u32(a + ".context_length"));
  c.rms_eps = f.get_f32(a + ".attention.layer_norm_rms_epsilon");
  c.rope_base = f.find_f32(a + ".rope.freq_base").value_or(10000.0f);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: head_count {} is not a multiple of head_count_kv {}", f.name(), c.n_heads, c.n_kv_heads);
  if (c.arch == "deepseek2") {
    // read_deepseek2 sets the heads' sizes below.
  } else if (auto kl = f.find_u32(a + ".attention.key_length")) {
    c.head_dim = positive_int(f, a + ".attention.key_length", *kl);
    if (auto vl = f.find_u32(a + ".attention.value_length"); vl && *vl != *kl)
      fail("{}: attention.value_length {} differs from key_length {}; not supported", f.name(), *vl, *kl);
  } else {
    if (c.n_embd % c.n_heads != 0)
      fail("{}: embedding_length {} is not a multiple of head_count {}", f.name(), c.n_embd, c.n_heads);
    c.head_dim = c.n_embd / c.n_heads;
  }
  if (c.arch == "deepseek2") {
    read_experts(f, c);
    read_deepseek2(f, c);
  } else {
    c.n_rot = positive_int(f, a + ".rope.dimension_count",
                           f.find_u32(a + ".rope.dimension_count").value_or(static_cast<uint32_t>(c.head_dim)));
  }
  // Partial RoPE (Phi-4-mini: 96 of 128): the first n_rot dimensions of each head rotate, the rest pass.
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    fail("{}: rope.dimension_count {} must be even and at most head_dim {}", f.name(), c.n_rot, c.head_dim);
  if (!(c.rms_eps > 0) || !(c.rope_base > 0))
    fail("{}: rms epsilon {} and rope base {} must be positive", f.name(), c.rms_eps, c.rope_base);
  c.rope_style = traits.rope_style;
  c.qkv_bias = traits.qkv_bias;
  c.qk_norm = traits.qk_norm;
  read_rope_scaling(f, a, c);
  if (c.arch == "deepseek2") c.attn_scale = deepseek2_attn_scale(c);
  if (c.arch.starts_with("gemma")) read_gemma(f, c);
  // Phi-3's sliding window is in its files but llama.cpp runs every layer in full (its PR 13676); so do we.
  if (c.arch == "phi3") read_longrope(f, c);
  if (c.arch == "granite") read_granite(f, c);
  if (c.arch == "mistral3") read_attn_temperature(f, c);
  if (c.arch == "olmo2") read_olmo2(f, c);
  if (c.arch != "deepseek2") read_experts(f, c);
  if (c.arch == "gpt-oss") read_gpt_oss(f, c);
  if (c.arch == "llama4") read_llama4(f, c);
  if (c.arch == "gemma4") read_gemma4(f, c);
  // SmolLM3: every 4th layer without RoPE, as llama.cpp fixes it (n_no_rope_layer_step = 4).
  if (c.arch == "smollm3")
    for (int l = 0; l < c.n_layers; ++l) c.nope_layers.push_back((l + 1) % 4 == 0);
  return c;
}

Tensor make_tensor(const GGUFFile& f, const std::string& name, bool required = true) {
  const GGUFTensorInfo* t = f.find_tensor(name);
  if (!t) {
    if (required) fail("{}: required tensor '{}' is missing", f.name(), name);
    return {};
  }
  const DTypeInfo info = dtype_info(t->type);
  if (!info.supported) fail("{}: unsupported tensor type {} ({}) for '{}'", f.name(), info.name, t->type_id, name);
  Tensor out;
  out.name = name;
  out.type = t->type;
  out.ne = t->ne;
  out.n_dims = t->n_dims;
  out.data = t->data;
  return out;
}

// ggml's shape equality: the dimensions past a tensor's last are 1, so {n, 1} matches a file's [n] or [n, 1]
// (gguf-py keeps a single expert's trailing 1; a writer may drop it).
bool shape_is(const Tensor& t, const std::array<int64_t, 4>& ne) { return t.ne == ne; }

// A stacked expert tensor ([n_expert][rows][cols], ggml's ne {cols, rows, n_expert}) as one view per expert.
std::vector<Tensor> expert_views(const GGUFFile& f, const std::string& name, const ModelConfig& c, int64_t cols,
                                 int64_t rows) {
  const Tensor t = make_tensor(f, name);
  if (!shape_is(t, {cols, rows, c.n_expert, 1}))
    fail("{}: tensor '{}' has shape [{}, {}, {}], expected [{}, {}, {}] (cols, rows, experts)", f.name(), name, t.ne[0],
         t.ne[1], t.ne[2], cols, rows, c.n_expert);
  std::vector<Tensor> views;
  for (int e = 0; e < c.n_expert; ++e) views.push_back(row_range(t, e * rows, rows, name + "[" + std::to_string(e) + "]"));
  return views;
}

// A stacked expert bias ([n_expert][n], ggml's ne {n, n_expert}) as one view per expert.
std::vector<Tensor> expert_bias_views(const GGUFFile& f, const std::string& name, const ModelConfig& c, int64_t n) {
  const Tensor t = make_tensor(f, name);
  if (!shape_is(t, {n, c.n_expert, 1, 1}))
    fail("{}: tensor '{}' has shape [{}, {}], expected [{}, {}] (values, experts)", f.name(), name, t.ne[0], t.ne[1], n,
         c.n_expert);
  std::vector<Tensor> views;
  for (int e = 0; e < c.n_expert; ++e) views.push_back(row_range(t, e, 1, name + "[" + std::to_string(e) + "]"));
  return views;
}

void load_experts(const GGUFFile& f, const std::string& p, const ModelConfig& c, LayerWeights& L) {
  L.ffn_gate_inp = make_tensor(f, p + "ffn_gate_inp.weight");
  if (c.moe_dense_branch && f.find_tensor(p + "ffn_gate_up_exps.weight") != nullptr) {
    // Gemma 4's fused gate and up: each expert's gate rows, then its up rows.
    const std::vector<Tensor> fused =
        expert_views(f, p + "ffn_gate_up_exps.weight", c, c.n_embd, 2 * int64_t{c.n_ff_exp});
    for (int e = 0; e < c.n_expert; ++e) {
      const std::string name = p + "ffn_gate_up_exps.weight[" + std::to_string(e) + "]";
      L.gate_exps.push_back(row_range(fused[static_cast<size_t>(e)], 0, c.n_ff_exp, name + ".gate"));
      L.up_exps.push_back(row_range(fused[static_cast<size_t>(e)], c.n_ff_exp, c.n_ff_exp, name + ".up"));
    }
  } else {
    L.gate_exps = expert_views(f, p + "ffn_gate_exps.weight", c, c.n_embd, c.n_ff_exp);
    L.up_exps = expert_views(f, p + "ffn_up_exps.weight", c, c.n_embd, c.n_ff_exp);
  }
  L.down_exps = expert_views(f, p + "ffn_down_exps.weight", c, c.n_ff_exp, c.n_embd);
  if (c.moe_dense_branch) {
    L.ffn_gate_inp_scale = make_tensor(f, p + "ffn_gate_inp.scale");
    L.down_exps_scale = make_tensor(f, p + "ffn_down_exps.scale", false);
    L.ffn_post_norm_1 = make_tensor(f, p + "post_ffw_norm_1.weight");
    L.ffn_pre_norm_2 = make_tensor(f, p + "pre_ffw_norm_2.weight");
    L.ffn_post_norm_2 = make_tensor(f, p + "post_ffw_norm_2.weight");
    L.w_gate = make_tensor(f, p + "ffn_gate.weight");
    L.w_up = make_tensor(f, p + "ffn_up.weight");
    L.w_down = make_tensor(f, p + "ffn_down.weight");
  }
  if (c.arch != "gpt-oss") return;
  L.ffn_gate_inp_b = make_tensor(f, p + "ffn_gate_inp.bias");
  L.gate_exps_b = expert_bias_views(f, p + "ffn_gate_exps.bias", c, c.n_ff_exp);
  L.up_exps_b = expert_bias_views(f, p + "ffn_up_exps.bias", c, c.n_ff_exp);
  L.down_exps_b = expert_bias_views(f, p + "ffn_down_exps.bias", c, c.n_embd);
}

// A stacked per-head tensor ([n_heads][rows][cols], ggml's ne {cols, rows, n_heads}) as one view per head.
std::vector<Tensor> head_views(const GGUFFile& f, const std::string& name, int n_heads, int64_t cols, int64_t rows) {
  const Tensor t = make_tensor(f, name);
  if (!shape_is(t, {cols, rows, n_heads, 1}))
    fail("{}: tensor '{}' has shape [{}, {}, {}], expected [{}, {}, {}] (cols, rows, heads)", f.name(), name, t.ne[0],
         t.ne[1], t.ne[2], cols, rows, n_heads);
  std::vector<Tensor> views;
  for (int h = 0; h < n_heads; ++h) views.push_back(row_range(t, h * rows, rows, name + "[" + std::to_string(h) + "]"));
  return views;
}

// DeepSeek-V2's attention of one layer (MLA). An older file's attn_kv_b becomes what current files hold
// (split_kv_b).
void load_mla_attention(const GGUFFile& f, const std::string& p, const ModelConfig& c, LayerWeights& L,
                        std::vector<std::shared_ptr<const void>>& owned) {
  if (c.q_lora_rank > 0) {
    L.wq_a = make_tensor(f, p + "attn_q_a.weight");
    L.q_a_norm = make_tensor(f, p + "attn_q_a_norm.weight");
    L.wq_b = make_tensor(f, p + "attn_q_b.weight");
  } else {
    L.wq = make_tensor(f, p + "attn_q.weight");
  }
  L.wkv_a = make_tensor(f, p + "attn_kv_a_mqa.weight");
  L.kv_a_norm = make_tensor(f, p + "attn_kv_a_norm.weight");
  L.wo = make_tensor(f, p + "attn_output.weight");
  const int64_t nope = c.qk_nope_dim(), r = c.kv_lora_rank, vd = c.head_dim_v;
  if (f.find_tensor(p + "attn_k_b.weight") != nullptr) {
    L.wk_b = head_views(f, p + "attn_k_b.weight", c.n_heads, nope, r);
    L.wv_b = head_views(f, p + "attn_v_b.weight", c.n_heads, r, vd);
    return;
  }
  split_kv_b(make_tensor(f, p + "attn_kv_b.weight"), c, f.name(), p + "attn_kv_b.weight", L, owned);
}

constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",         "<|end_of_text|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};

}  // namespace

bool is_end_of_turn_text(const std::string& text) {
  return std::find(std::begin(kEndOfTurnTexts), std::end(kEndOfTurnTexts), text) != std::end(kEndOfTurnTexts);
}

void mark_end_of_turn_tokens(Vocab& v) {
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const bool end_of_turn = is_end_of_turn_text(v.tokens[i]);
    if (end_of_turn && v.eot_id < 0) v.eot_id = static_cast<int32_t>(i);
    if (end_of_turn || is_end_of_generation_text(v.tokens[i])) v.token_types[i] = TokenType::Control;
  }
  // gpt-oss's harmony format (o200k_harmony), as llama.cpp's loader: its channel tokens are printed, and "<|end|>",
  // which ends a message (the analysis) but not the answer, is printed too and does not end generation
  // (harmony_end_is_message_end).
  const bool harmony = harmony_end_is_message_end(v.tokens);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t == "<|channel|>" || t == "<|message|>" || t == "<|start|>" || t == "<|constrain|>" ||
        (harmony && t == "<|end|>"))
      v.token_types[i] = TokenType::UserDefined;
  }
  if (harmony && v.eot_id >= 0 && v.tokens[static_cast<size_t>(v.eot_id)] == "<|end|>") v.eot_id = -1;
}

namespace {

// llama.cpp's per-model special-token attributes (llama_vocab::impl::load, "set attributes by model name"):
// a model named Phi-3 strips the whitespace after each special token but <unk>, <s> and <|endoftext|>;
// Jina v2 / v3 and Nomic BERT MoE strip it before <mask>, ModernBERT before [MASK].
void set_strip_attributes(const GGUFFile& f, Vocab& v) {
  std::string name = f.find_str("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const std::string pre = f.find_str("tokenizer.ggml.pre").value_or("");
  const std::string arch = f.find_str("general.architecture").value_or("");
  const auto contains = [](const std::string& s, std::initializer_list<std::string_view> any) {
    return std::any_of(any.begin(), any.end(), [&](std::string_view x) { return s.find(x) != std::string::npos; });
  };
  const auto set = [&](std::string_view text, uint8_t bit, bool on) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), text);
    if (it == v.tokens.end()) return;
    if (v.strip.empty()) v.strip.assign(v.tokens.size(), 0);
    uint8_t& s = v.strip[static_cast<size_t>(it - v.tokens.begin())];
    s = on ? (s | bit) : (s & ~bit);
  };
  if (contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) || contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", Vocab::kStripLeft, true);
  } else if (contains(name, {"phi-3", "phi3"})) {
    v.strip.assign(v.tokens.size(), 0);
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const TokenType t = v.token_types[i];
      if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) v.strip[i] = Vocab::kStripRight;
    }
    set("</s>", Vocab::kStripRight, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set(text, Vocab::kStripRight, false);
  } else if (contains(name, {"modern-bert"})) {
    set("[MASK]", Vocab::kStripLeft, true);
  }
}

}  // namespace

Vocab vocab_from_gguf(const GGUFFile& f) {
  Vocab v;
  const std::string model = f.get_str("tokenizer.ggml.model");
  v.pre = f.find_str("tokenizer.ggml.pre").value_or("default");
  // Per-type defaults, as llama.cpp's llama_vocab::impl::load sets them before reading the keys.
  if (model == "llama") {
    v.kind = Vocab::Kind::SPM;
    v.bos_id = 1, v.eos_id = 2, v.unk_id = 0, v.pad_id = -1;
    v.add_bos = true, v.add_eos = false, v.add_space_prefix = true;
  } else if (model == "gpt2") {
    v.kind = Vocab::Kind::BPE;
    v.bos_id = 11, v.eos_id = 11, v.unk_id = -1, v.pad_id = -1;
    v.add_space_prefix = false, v.add_eos = false;
    // Only these pre-tokenizers turn BOS on by default; the add_bos_token key overrides either way.
    const std::string& p = v.pre;
    v.add_bos = p == "llama3" || p == "llama-v3" || p == "llama-bpe" || p == "falcon3" || p == "tekken" ||
                p == "chameleon";
    if (p == "chatglm-bpe" || p == "glm4") v.bos_id = -1;
  } else if (model == "gemma4") {
    // BPE with SentencePiece-style text (spaces as U+2581, byte tokens); llama.cpp names its pre-tokenizer
    // after the model whatever the file says, and has no default special ids for it.
    v.kind = Vocab::Kind::BPE;
    v.pre = "gemma4";
    v.bos_id = -1, v.eos_id = -1, v.unk_id = -1, v.pad_id = -1;
    v.add_space_prefix = false, v.add_eos = false, v.add_bos = false;
  } else if (model == "bert") {
    v.kind = Vocab::Kind::WPM;
    v.bos_id = 101, v.eos_id = -1, v.unk_id = 100, v.pad_id = 0, v.sep_id = 102;
    v.add_bos = true, v.add_eos = false, v.add_sep = true, v.add_space_prefix = false;
  } else {
    fail("{}: unsupported tokenizer model '{}' (supported: llama, gpt2, gemma4, bert)", f.name(), model);
  }

  v.tokens = f.get_str_array("tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", f.name());
  if (n > static_cast<size_t>(INT32_MAX)) fail("{}: too many tokens ({})", f.name(), n);
  for (size_t i = 0; i < n; ++i)
    if (v.tokens[i].empty()) v.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp does

  if (auto scores = f.find_f32_array("tokenizer.ggml.scores")) {
    if (scores->size() != n)
      fail("{}: tokenizer.ggml.scores has {} entries, tokenizer.ggml.tokens has {}", f.name(), scores->size(), n);
    v.scores = std::move(*scores);
  } else {
    v.scores.assign(n, 0.0f);
  }
  v.token_types.assign(n, TokenType::Normal);
  if (auto types = f.find_i32_array("tokenizer.ggml.token_type")) {
    if (types->size() != n)
      fail("{}: tokenizer.ggml.token_type has {} entries, tokenizer.ggml.tokens has {}", f.name(), types->size(),
           n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = (*types)[i];
      v.token_types[i] = (t >= 1 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Undefined;
    }
  }
  if (v.kind == Vocab::Kind::BPE) {
    v.merges = f.get_str_array("tokenizer.ggml.merges");
  } else if (auto merges = f.find_str_array("tokenizer.ggml.merges")) {
    v.merges = std::move(*merges);
  }

  // Special ids: an out-of-range id keeps the default, as llama.cpp does (it only warns).
  auto special = [&](const char* key, int32_t& id) {
    if (auto x = f.find_u32(key); x && *x < n) id = static_cast<int32_t>(*x);
  };
  special("tokenizer.ggml.bos_token_id", v.bos_id);
  special("tokenizer.ggml.eos_token_id", v.eos_id);
  special("tokenizer.ggml.eot_token_id", v.eot_id);
  special("tokenizer.ggml.unknown_token_id", v.unk_id);
  special("tokenizer.ggml.padding_token_id", v.pad_id);
  special("tokenizer.ggml.seperator_token_id", v.sep_id);  // sic: llama.cpp's key
  if (auto b = f.find_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_sep_token")) v.add_sep = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;
  // llama.cpp turns BOS on for Gemma 4 whatever the file says (its PR 21500).
  if (v.kind == Vocab::Kind::BPE && (v.pre == "gemma4" || v.pre == "granite-embed-multi-311m")) v.add_bos = true;
  v.chat_template = f.find_str("tokenizer.chat_template").value_or("");

  mark_end_of_turn_tokens(v);
  set_strip_attributes(f, v);
  return v;
}

Vocab load_gguf_vocab(const std::string& path) {
  GGUFFile f(path);
  return vocab_from_gguf(f);
}

std::unique_ptr<Model> load_gguf_model(std::shared_ptr<const GGUFFile> file, const LoadOptions& opts) {
  const GGUFFile& f = *file;
  if (opts.progress) opts.progress(0.0f);
  auto m = std::make_unique<Model>();
  m->path = f.name();
  m->format = "gguf";
  m->config = read_config(f);
  m->vocab = vocab_from_gguf(f);
  m->sampling_defaults = sampling_defaults_from_gguf(f);
  ModelConfig& c = m->config;
  c.n_vocab = static_cast<int>(m->vocab.tokens.size());

  m->tok_embd = make_tensor(f, "token_embd.weight");
  m->output_norm = make_tensor(f, "output_norm.weight");
  m->output = make_tensor(f, "output.weight", /*required=*/false);
  // Gemma and Gemma 2 always project with the embeddings; llama.cpp refuses such a file with its own head.
  if ((c.arch == "gemma" || c.arch == "gemma2") && m->output.valid())
    fail("{}: a {} model's output is its token_embd.weight, but the file also has 'output.weight'", f.name(), c.arch);
  if (!m->output.valid()) {
    c.tied_output = true;
    m->output = m->tok_embd;
  }
  if (c.n_embd_per_layer > 0) {
    m->per_layer_token_embd = make_tensor(f, "per_layer_token_embd.weight");
    m->per_layer_model_proj = make_tensor(f, "per_layer_model_proj.weight");
    m->per_layer_proj_norm = make_tensor(f, "per_layer_proj_norm.weight");
  }
  if (c.mla() && c.n_expert == 0 && c.n_layer_dense_lead < c.n_layers)
    fail("{}: {} of {} layers are MoE layers (leading_dense_block_count {}) but the file has no expert_count",
         f.name(), c.n_layers - c.n_layer_dense_lead, c.n_layers, c.n_layer_dense_lead);
  // Each layer has at least 6 tensors (Phi-3 fuses q/k/v and gate/up); checking first keeps an absurd
  // block_count from allocating.
  if (static_cast<size_t>(c.n_layers) > f.tensors().size() / 6)
    fail("{}: {}.block_count = {} but the file has only {} tensors", f.name(), c.arch, c.n_layers,
         f.tensors().size());
  m->layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = m->layers[static_cast<size_t>(l)];
    L.attn_norm = make_tensor(f, p + "attn_norm.weight", c.pre_norms);
    // gpt-oss's norm before the FFN is named as a post-attention norm.
    L.ffn_norm =
        make_tensor(f, p + (c.arch == "gpt-oss" ? "post_attention_norm.weight" : "ffn_norm.weight"), c.pre_norms);
    if (c.mla()) {
      load_mla_attention(f, p, c, L, m->storage);
      if (c.moe_layer(l)) {
        load_experts(f, p, c, L);
        L.exp_probs_b = make_tensor(f, p + "exp_probs_b.bias", false);
        if (c.n_expert_shared > 0) {
          L.ffn_gate_shexp = make_tensor(f, p + "ffn_gate_shexp.weight");
          L.ffn_up_shexp = make_tensor(f, p + "ffn_up_shexp.weight");
          L.ffn_down_shexp = make_tensor(f, p + "ffn_down_shexp.weight");
        }
      } else {
        L.w_gate = make_tensor(f, p + "ffn_gate.weight");
        L.w_up = make_tensor(f, p + "ffn_up.weight");
        L.w_down = make_tensor(f, p + "ffn_down.weight");
      }
      if (opts.progress) opts.progress(0.9f * static_cast<float>(l + 1) / static_cast<float>(c.n_layers));
      continue;
    }
    const int64_t q_rows = int64_t{c.n_heads} * c.head_dim_of(l),
                  kv_rows = int64_t{c.kv_heads_of(l)} * c.head_dim_of(l);
    const bool own_kv = c.has_own_kv(l);
    if (const Tensor qkv = make_tensor(f, p + "attn_qkv.weight", false); qkv.valid()) {
      // Phi-3 fuses q, k and v into one projection (rows in that order).
      if (qkv.n_dims != 2 || qkv.ne[1] != q_rows + 2 * kv_rows)
        fail("{}: tensor '{}attn_qkv.weight' has {} rows, expected {} (q {} + k {} + v {})", f.name(), p, qkv.ne[1],
             q_rows + 2 * kv_rows, q_rows, kv_rows, kv_rows);
      L.wq = row_range(qkv, 0, q_rows, p + "attn_q.weight");
      L.wk = row_range(qkv, q_rows, kv_rows, p + "attn_k.weight");
      L.wv = row_range(qkv, q_rows + kv_rows, kv_rows, p + "attn_v.weight");
    } else {
      L.wq = make_tensor(f, p + "attn_q.weight");
      // Gemma 4: a layer on another's KV has neither; one without attn_v uses its keys' projection as values.
      L.wk = make_tensor(f, p + "attn_k.weight", own_kv);
      L.wv = make_tensor(f, p + "attn_v.weight", own_kv && !c.v_norm);
    }
    L.wo = make_tensor(f, p + "attn_output.weight");
    L.bq = make_tensor(f, p + "attn_q.bias", c.qkv_bias);
    L.bk = make_tensor(f, p + "attn_k.bias", c.qkv_bias);
    L.bv = make_tensor(f, p + "attn_v.bias", c.qkv_bias);
    if (c.arch == "gpt-oss") L.bo = make_tensor(f, p + "attn_output.bias");
    if (c.learned_sinks) L.attn_sinks = make_tensor(f, p + "attn_sinks.weight");
    if (c.qk_norm) {
      L.q_norm = make_tensor(f, p + "attn_q_norm.weight");
      L.k_norm = make_tensor(f, p + "attn_k_norm.weight", own_kv);
    }
    if (c.n_embd_per_layer > 0) {
      L.ple_inp_gate = make_tensor(f, p + "inp_gate.weight");
      L.ple_proj = make_tensor(f, p + "proj.weight");
      L.ple_post_norm = make_tensor(f, p + "post_norm.weight");
    }
    if (c.arch == "gemma4") L.layer_output_scale = make_tensor(f, p + "layer_output_scale.weight", false);
    if (c.post_norms) {
      L.attn_post_norm = make_tensor(f, p + "post_attention_norm.weight");
      L.ffn_post_norm = make_tensor(f, p + "post_ffw_norm.weight");
    }
    if (c.moe_layer(l)) {
      load_experts(f, p, c, L);
      if (c.arch == "qwen2moe" || c.arch == "llama4") {
        if (c.arch == "qwen2moe") L.ffn_gate_inp_shexp = make_tensor(f, p + "ffn_gate_inp_shexp.weight");
        L.ffn_gate_shexp = make_tensor(f, p + "ffn_gate_shexp.weight");
        L.ffn_up_shexp = make_tensor(f, p + "ffn_up_shexp.weight");
        L.ffn_down_shexp = make_tensor(f, p + "ffn_down_shexp.weight");
      }
    } else if (c.arch == "phi3") {
      // Phi-3's ffn_up holds the gate's rows, then the up projection's (llama.cpp's fused SwiGLU).
      const Tensor up = make_tensor(f, p + "ffn_up.weight");
      if (up.n_dims != 2 || up.ne[1] != 2 * int64_t{c.n_ff})
        fail("{}: tensor '{}ffn_up.weight' has {} rows, expected 2 x feed_forward_length = {}", f.name(), p, up.ne[1],
             2 * int64_t{c.n_ff});
      L.w_gate = row_range(up, 0, c.n_ff, p + "ffn_gate.weight");
      L.w_up = row_range(up, c.n_ff, c.n_ff, p + "ffn_up.weight");
    } else {
      L.w_gate = make_tensor(f, p + "ffn_gate.weight");
      L.w_up = make_tensor(f, p + "ffn_up.weight");
    }
    if (!c.moe_layer(l)) L.w_down = make_tensor(f, p + "ffn_down.weight");
    if (opts.progress) opts.progress(0.9f * static_cast<float>(l + 1) / static_cast<float>(c.n_layers));
  }
  // A llama file may carry biases too (some converters emit them); use them when all three exist.
  if (!c.qkv_bias && !m->layers.empty() && m->layers[0].bq.valid() && m->layers[0].bk.valid() &&
      m->layers[0].bv.valid())
    c.qkv_bias = true;

  m->unread_tensors = f.tensors_not_found();
  m->storage.push_back(file);
  validate_model(*m);
  m->tokenizer = Tokenizer::create(m->vocab);
  if (opts.progress) opts.progress(1.0f);
  return m;
}

std::unique_ptr<Model> load_gguf_model(const std::string& path, const LoadOptions& opts) {
  auto m = load_gguf_model(std::shared_ptr<const GGUFFile>(open_gguf_with_shards(path)), opts);
  m->path = path;
  return m;
}

}  // namespace kvserve
