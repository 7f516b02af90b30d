#include "model/random_model.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numbers>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quantize.h"
#include "model/gguf.h"

namespace kvserve {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills x with n draws of N(0, stddev), from a stream that depends only on (seed, tensor, row).
void normal_row(uint64_t seed, uint64_t tensor, int64_t row, float stddev, float* x, int64_t n) {
  uint64_t state = seed * 0x100000001B3ull ^ (tensor << 40) ^ static_cast<uint64_t>(row);
  splitmix64(state);
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  for (int64_t i = 0; i < n; i += 2) {
    // Box-Muller on two uniforms in (0, 1].
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    x[i] = static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < n) x[i + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
  }
}

// general.file_type values (llama_ftype) for an all-`t` file.
uint32_t file_type_of(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q4_K: return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S
    case DType::Q5_K: return 16;  // LLAMA_FTYPE_MOSTLY_Q5_K_S
    case DType::Q6_K: return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    case DType::IQ4_NL: return 25;  // LLAMA_FTYPE_MOSTLY_IQ4_NL
    case DType::IQ4_XS: return 30;  // LLAMA_FTYPE_MOSTLY_IQ4_XS
    case DType::BF16: return 32;
    case DType::MXFP4:
      return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    default: return 0;
  }
}

bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

}  // namespace

void RandomModelSpec::validate() const {
  auto positive = [](int v, const char* what) {
    if (v <= 0) fail("random model: {} must be positive, got {}", what, v);
  };
  positive(n_embd, "hidden size");
  positive(n_layers, "layer count");
  positive(n_heads, "head count");
  positive(n_kv_heads, "KV head count");
  positive(n_ff, "FFN size");
  positive(n_ctx, "context length");
  if (n_heads % n_kv_heads != 0) fail("random model: {} heads is not a multiple of {} KV heads", n_heads, n_kv_heads);
  if (head_dim == 0 && n_embd % n_heads != 0)
    fail("random model: hidden size {} is not a multiple of {} heads (give a head dim)", n_embd, n_heads);
  if (head_dim < 0 || (head_dim == 0 ? n_embd / n_heads : head_dim) % 2 != 0)
    fail("random model: head dim must be even and positive");
  if (!can_quantize(weight_type)) fail("random model: weight type {} is not supported", dtype_name(weight_type));
  if (vocab_from.empty()) fail("random model: no vocabulary file given");
  if (vocab_size < 0) fail("random model: vocab size {} is negative", vocab_size);
  if (!(stddev > 0) || !(rms_eps > 0) || !(rope_base > 0)) fail("random model: stddev, rms eps and rope base must be positive");
  if (arch != "llama" && arch != "qwen3" && arch != "qwen3moe" && arch != "gemma3" && arch != "gemma4" &&
      arch != "deepseek2" && arch != "gpt-oss" && arch != "llama4")
    fail(
        "random model: architecture '{}' is not one of llama, qwen3, qwen3moe, gemma3, gemma4, deepseek2, gpt-oss, "
        "llama4",
        arch);
  if (arch == "gemma4") {
    if (sliding_window <= 0 || swa_period < 2)
      fail("random model: gemma4 needs a sliding window ({}) and a full layer every 2 or more layers ({})",
           sliding_window, swa_period);
    if (head_dim_swa < 0 || head_dim_swa % 2 != 0 || n_kv_heads_full < 0 ||
        (n_kv_heads_full > 0 && n_heads % n_kv_heads_full != 0))
      fail("random model: gemma4's sliding head size {} must be even, its full layers' {} KV heads divide {} heads",
           head_dim_swa, n_kv_heads_full, n_heads);
    // The layers with their own KV end with a full one, as in Gemma 4's files (llama.cpp reads a shared layer's KV
    // from the last layer, or the one before it, that has its own).
    if (n_embd_per_layer < 0 || n_kv_shared_layers < 0 || n_kv_shared_layers > n_layers - swa_period ||
        (n_layers - n_kv_shared_layers) % swa_period != 0)
      fail(
          "random model: gemma4's {} per-layer embedding values and {} shared layers are out of range (the layers "
          "before the shared ones must end with a full-attention layer: a multiple of {})",
          n_embd_per_layer, n_kv_shared_layers, swa_period);
    if (n_expert > 0 && (n_expert_used <= 0 || n_expert_used > n_expert || n_ff_exp <= 0))
      fail("random model: gemma4's experts: {} of {} used, width {}", n_expert_used, n_expert, n_ff_exp);
  } else if (head_dim_swa != 0 || n_kv_heads_full != 0 || n_kv_shared_layers != 0 || n_embd_per_layer != 0) {
    fail("random model: sliding head sizes, full layers' KV heads, shared KV and per-layer embeddings are for gemma4");
  }
  if (moe_layer_step <= 0 || (moe_layer_step != 1 && arch != "llama4"))
    fail("random model: an MoE layer step ({}) is for llama4 only and must be positive", moe_layer_step);
  if (arch == "deepseek2") {
    if (kv_lora_rank <= 0 || qk_nope_dim <= 0 || qk_rope_dim <= 0 || qk_rope_dim % 2 != 0 || v_head_dim <= 0 ||
        q_lora_rank < 0)
      fail("random model: deepseek2 needs a positive kv_lora_rank ({}), nope ({}), even rope ({}) and value ({}) "
           "head sizes",
           kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim);
    if (n_dense_lead < 0 || n_dense_lead > n_layers || n_expert_shared < 0)
      fail("random model: {} dense lead layers of {}, {} shared experts", n_dense_lead, n_layers, n_expert_shared);
    if (n_dense_lead < n_layers && (n_expert <= 0 || n_expert_used <= 0 || n_expert_used > n_expert || n_ff_exp <= 0))
      fail("random model: deepseek2's expert layers need experts (got {} of {} used, width {})", n_expert_used,
           n_expert, n_ff_exp);
  }
  if ((arch == "qwen3moe" || arch == "gpt-oss" || arch == "llama4") &&
      (n_expert <= 0 || n_expert_used <= 0 || n_expert_used > n_expert || n_ff_exp <= 0))
    fail("random model: {} needs experts (got {} of {} used, width {})", arch, n_expert_used, n_expert, n_ff_exp);
  if (arch == "gpt-oss" && (n_embd % 32 != 0 || n_ff_exp % 32 != 0))
    fail("random model: gpt-oss's MXFP4 experts need a hidden size ({}) and expert width ({}) of whole 32-blocks",
         n_embd, n_ff_exp);
  if (sliding_window < 0 || (sliding_window > 0 && arch != "gemma3" && arch != "gemma4" && arch != "gpt-oss"))
    fail("random model: a sliding window ({}) is for gemma3, gemma4 and gpt-oss only and must not be negative",
         sliding_window);
}

std::optional<RandomModelSpec> random_model_preset(const std::string& name) {
  RandomModelSpec s;
  if (name == "llama-3.2-1b") {
    s.name = "Llama-3.2-1B (random weights)";
    s.n_embd = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8, s.n_ff = 8192;
    s.n_ctx = 8192, s.rms_eps = 1e-5f, s.rope_base = 500000.0f, s.tied_output = true;
    s.vocab_size = 128256;
    return s;
  }
  if (name == "qwen3-0.6b") {
    s.name = "Qwen3-0.6B (random weights)";
    s.arch = "qwen3";
    s.n_embd = 1024, s.n_layers = 28, s.n_heads = 16, s.n_kv_heads = 8, s.head_dim = 128, s.n_ff = 3072;
    s.n_ctx = 40960, s.rms_eps = 1e-6f, s.rope_base = 1000000.0f, s.tied_output = true;
    s.vocab_size = 151936;
    return s;
  }
  if (name == "gemma-3-1b") {
    s.name = "Gemma-3-1B (random weights)";
    s.arch = "gemma3";
    s.n_embd = 1152, s.n_layers = 26, s.n_heads = 4, s.n_kv_heads = 1, s.head_dim = 256, s.n_ff = 6912;
    s.n_ctx = 32768, s.rms_eps = 1e-6f, s.rope_base = 1000000.0f, s.tied_output = true, s.sliding_window = 512;
    s.vocab_size = 262144;
    return s;
  }
  if (name == "qwen3-30b-a3b") {
    s.name = "Qwen3-30B-A3B (random weights)";
    s.arch = "qwen3moe";
    s.n_embd = 2048, s.n_layers = 48, s.n_heads = 32, s.n_kv_heads = 4, s.head_dim = 128, s.n_ff = 6144;
    s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768;
    s.n_ctx = 40960, s.rms_eps = 1e-6f, s.rope_base = 1000000.0f, s.tied_output = false;
    s.vocab_size = 151936;
    return s;
  }
  if (name == "deepseek-v2-lite") {
    s.name = "DeepSeek-V2-Lite (random weights)";
    s.arch = "deepseek2";
    s.n_embd = 2048, s.n_layers = 27, s.n_heads = 16, s.n_kv_heads = 1, s.n_ff = 10944;
    s.kv_lora_rank = 512, s.q_lora_rank = 0, s.qk_nope_dim = 128, s.qk_rope_dim = 64, s.v_head_dim = 128;
    s.n_expert = 64, s.n_expert_used = 6, s.n_ff_exp = 1408, s.n_expert_shared = 2, s.n_dense_lead = 1;
    s.n_ctx = 4096, s.rms_eps = 1e-6f, s.rope_base = 10000.0f, s.tied_output = false;
    s.vocab_size = 102400;
    return s;
  }
  if (name == "gpt-oss-20b") {  // its config.json: 20.9B parameters, 3.6B active
    s.name = "gpt-oss-20b (random weights)";
    s.arch = "gpt-oss";
    s.n_embd = 2880, s.n_layers = 24, s.n_heads = 64, s.n_kv_heads = 8, s.head_dim = 64, s.n_ff = 2880;
    s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 2880, s.sliding_window = 128;
    s.n_ctx = 131072, s.rms_eps = 1e-5f, s.rope_base = 150000.0f, s.tied_output = false;
    s.vocab_size = 201088;
    return s;
  }
  if (name == "llama-4-scout") {  // Llama-4-Scout-17B-16E's text model: 107.8B parameters, 17B active
    s.name = "Llama-4-Scout-17B-16E (random weights)";
    s.arch = "llama4";
    s.n_embd = 5120, s.n_layers = 48, s.n_heads = 40, s.n_kv_heads = 8, s.head_dim = 128, s.n_ff = 16384;
    s.n_expert = 16, s.n_expert_used = 1, s.n_ff_exp = 8192, s.moe_layer_step = 1;
    s.n_ctx = 262144, s.rms_eps = 1e-5f, s.rope_base = 500000.0f, s.tied_output = false;
    s.vocab_size = 202048;
    return s;
  }
  if (name == "smollm2-135m") {
    s.name = "SmolLM2-135M (random weights)";
    s.n_embd = 576, s.n_layers = 30, s.n_heads = 9, s.n_kv_heads = 3, s.n_ff = 1536;
    s.n_ctx = 8192, s.rms_eps = 1e-5f, s.rope_base = 100000.0f, s.tied_output = true;
    s.vocab_size = 49152;
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> random_model_preset_names() {
  return {"llama-3.2-1b",  "smollm2-135m",     "qwen3-0.6b",  "gemma-3-1b",
          "qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b", "llama-4-scout"};
}

DType fallback_weight_type(DType wanted, int64_t cols) {
  // IQ4_XS falls back to IQ4_NL, as llama.cpp's quantize tool does.
  const DType chain[] = {wanted, wanted == DType::IQ4_XS ? DType::IQ4_NL : DType::Q4_0, DType::Q4_0, DType::Q8_0,
                         DType::F16};
  for (DType t : chain)
    if (cols % dtype_info(t).block_elems == 0) return t;
  return DType::F16;
}

RandomModelPlan plan_random_model(const RandomModelSpec& spec) {
  spec.validate();
  RandomModelPlan plan;
  GGUFWriter& w = plan.writer;
  const int head_dim = spec.head_dim > 0 ? spec.head_dim : spec.n_embd / spec.n_heads;

  // The vocabulary: every tokenizer.* key, padded when a larger vocab size is asked for.
  auto vocab = std::make_shared<GGUFFile>(spec.vocab_from);
  const GGUFValue* tokens = vocab->find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->elem_type != GGUFType::STRING || tokens->strings.empty())
    fail("{}: no tokenizer.ggml.tokens array: not a vocabulary file", spec.vocab_from);
  const int n_file = static_cast<int>(tokens->strings.size());
  const int n_vocab = spec.vocab_size > 0 ? spec.vocab_size : n_file;
  if (n_vocab < n_file)
    fail("vocab size {} is smaller than the {} tokens of {}", n_vocab, n_file, spec.vocab_from);
  plan.n_vocab = n_vocab;

  const std::string a = spec.arch + ".";
  w.add_str("general.architecture", spec.arch);
  w.add_str("general.name", spec.name);
  w.add_str("general.description", "random weights N(0, " + std::to_string(spec.stddev) + "), seed " +
                                         std::to_string(spec.seed) + ", written by kvserve gen-model");
  w.add_u32("general.file_type", file_type_of(spec.weight_type));
  if (is_quantized(spec.weight_type)) w.add_u32("general.quantization_version", 2);
  w.add_u32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
  w.add_u32(a + "context_length", static_cast<uint32_t>(spec.n_ctx));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(spec.n_embd));
  w.add_u32(a + "block_count", static_cast<uint32_t>(spec.n_layers));
  w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(spec.n_ff));
  const bool mla = spec.arch == "deepseek2";
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(mla ? spec.qk_rope_dim : head_dim));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(spec.n_heads));
  if (spec.arch != "gemma4") w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(mla ? 1 : spec.n_kv_heads));
  if (mla) {  // as llama.cpp's converter writes DeepSeek-V2
    w.add_u32(a + "attention.key_length", static_cast<uint32_t>(spec.kv_lora_rank + spec.qk_rope_dim));
    w.add_u32(a + "attention.value_length", static_cast<uint32_t>(spec.kv_lora_rank));
    w.add_u32(a + "attention.key_length_mla", static_cast<uint32_t>(spec.qk_nope_dim + spec.qk_rope_dim));
    w.add_u32(a + "attention.value_length_mla", static_cast<uint32_t>(spec.v_head_dim));
    w.add_u32(a + "attention.q_lora_rank", static_cast<uint32_t>(spec.q_lora_rank));
    w.add_u32(a + "attention.kv_lora_rank", static_cast<uint32_t>(spec.kv_lora_rank));
    w.add_u32(a + "leading_dense_block_count", static_cast<uint32_t>(spec.n_dense_lead));
    w.add_u32(a + "expert_count", static_cast<uint32_t>(spec.n_expert));
    w.add_u32(a + "expert_used_count", static_cast<uint32_t>(spec.n_expert_used));
    w.add_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(spec.n_ff_exp));
    w.add_u32(a + "expert_shared_count", static_cast<uint32_t>(spec.n_expert_shared));
    w.add_f32(a + "expert_weights_scale", 1.0f);
    w.add_u32(a + "expert_gating_func", 1);  // softmax
  } else if (head_dim * spec.n_heads != spec.n_embd && spec.arch != "gemma4") {
    w.add_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.add_u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  w.add_f32(a + "attention.layer_norm_rms_epsilon", spec.rms_eps);
  w.add_f32(a + "rope.freq_base", spec.rope_base);
  if (spec.sliding_window > 0) w.add_u32(a + "attention.sliding_window", static_cast<uint32_t>(spec.sliding_window));
  if (spec.arch == "gpt-oss") {  // YaRN as OpenAI's config.json sets it, on every layer
    w.add_str(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", 32.0f);
    w.add_u32(a + "rope.scaling.original_context_length", 4096);
  }
  if (spec.arch == "llama4") w.add_u32(a + "interleave_moe_layer_step", static_cast<uint32_t>(spec.moe_layer_step));
  const bool gemma4 = spec.arch == "gemma4";
  const int head_dim_swa = spec.head_dim_swa > 0 ? spec.head_dim_swa : head_dim;
  const int kv_heads_full = spec.n_kv_heads_full > 0 ? spec.n_kv_heads_full : spec.n_kv_heads;
  const auto swa_layer = [&](int l) { return (l + 1) % spec.swa_period != 0; };
  if (gemma4) {  // as llama.cpp's converter writes Gemma 4
    std::vector<int32_t> pattern, kv_heads;
    for (int l = 0; l < spec.n_layers; ++l) {
      pattern.push_back(swa_layer(l) ? 1 : 0);
      kv_heads.push_back(swa_layer(l) ? spec.n_kv_heads : kv_heads_full);
    }
    w.add_i32_array(a + "attention.sliding_window_pattern", pattern);
    w.add_i32_array(a + "attention.head_count_kv", kv_heads);
    w.add_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.add_u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
    w.add_u32(a + "attention.key_length_swa", static_cast<uint32_t>(head_dim_swa));
    w.add_u32(a + "attention.value_length_swa", static_cast<uint32_t>(head_dim_swa));
    w.add_u32(a + "rope.dimension_count_swa", static_cast<uint32_t>(head_dim_swa));
    w.add_f32(a + "rope.freq_base_swa", 10000.0f);
    w.add_u32(a + "attention.shared_kv_layers", static_cast<uint32_t>(spec.n_kv_shared_layers));
    w.add_u32(a + "embedding_length_per_layer_input", static_cast<uint32_t>(spec.n_embd_per_layer));
    w.add_f32(a + "final_logit_softcapping", 30.0f);
  }
  if (spec.arch == "qwen3moe" || spec.arch == "gpt-oss" || spec.arch == "llama4" || (gemma4 && spec.n_expert > 0)) {
    w.add_u32(a + "expert_count", static_cast<uint32_t>(spec.n_expert));
    w.add_u32(a + "expert_used_count", static_cast<uint32_t>(spec.n_expert_used));
    w.add_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(spec.n_ff_exp));
  }

  const int n_pad = n_vocab - n_file;
  for (const auto& [key, value] : vocab->metadata()) {
    if (!key.starts_with("tokenizer.")) continue;
    if (n_pad > 0 && key == "tokenizer.ggml.tokens") {
      std::vector<std::string> t = value.strings;
      for (int i = n_file; i < n_vocab; ++i) t.push_back("[PAD" + std::to_string(i) + "]");
      w.add_str_array(key, t);
    } else if (n_pad > 0 && key == "tokenizer.ggml.scores") {
      std::vector<float> s = vocab->get_f32_array(key);
      s.resize(static_cast<size_t>(n_vocab), -1000.0f);
      w.add_f32_array(key, s);
    } else if (n_pad > 0 && key == "tokenizer.ggml.token_type") {
      std::vector<int32_t> t = vocab->get_i32_array(key);
      t.resize(static_cast<size_t>(n_vocab), 5);  // LLAMA_TOKEN_TYPE_UNUSED
      w.add_i32_array(key, t);
    } else {
      w.add_value(key, value);
    }
  }

  // Tensors. Each gets its own random stream; norms are ones.
  std::map<std::string, std::string> fallbacks;  // tensor kind -> note
  uint64_t tensor_index = 0;
  // A weight of `rows` rows of `cols` (times `stack` for an expert tensor: [stack][rows][cols] in the file).
  auto weight = [&](const std::string& name, int64_t cols, int64_t rows, int64_t stack = 1,
                    std::optional<DType> wanted = std::nullopt) {
    const DType want = wanted.value_or(spec.weight_type);
    const DType type = fallback_weight_type(want, cols);
    if (type != want) {
      const size_t dot = name.find('.', name.find('.') + 1);
      const std::string kind = name.starts_with("blk.") ? "blk.*" + name.substr(dot) : name;
      fallbacks[kind] = fmt::format("{}: rows of {} are not a multiple of {}'s block size, written as {}", kind, cols,
                                    dtype_name(want), dtype_name(type));
    }
    const uint64_t index = tensor_index++;
    const uint64_t seed = spec.seed;
    const float stddev = spec.stddev;
    const size_t row_size = row_bytes(type, cols);
    plan.n_params += static_cast<uint64_t>(cols * rows * stack);
    const std::vector<int64_t> ne = stack > 1 ? std::vector<int64_t>{cols, rows, stack} : std::vector<int64_t>{cols, rows};
    w.add_tensor(name, type, ne, [=](uint8_t* dst) {
      ThreadPool::global().parallel_for(rows * stack, [&](int64_t r0, int64_t r1) {
        std::vector<float> x(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          normal_row(seed, index, r, stddev, x.data(), cols);
          quantize_row(type, x.data(), dst + static_cast<size_t>(r) * row_size, cols);
        }
      }, 16);
    });
  };
  auto norm = [&](const std::string& name, int64_t n = 0) {
    if (n == 0) n = spec.n_embd;
    ++tensor_index;
    plan.n_params += static_cast<uint64_t>(n);
    std::vector<uint8_t> ones(static_cast<size_t>(n) * sizeof(float));
    const float one = 1.0f;
    for (size_t i = 0; i < ones.size(); i += sizeof(float)) std::memcpy(ones.data() + i, &one, sizeof(float));
    w.add_tensor(name, DType::F32, {n}, std::move(ones));
  };
  // A bias (F32, N(0, stddev)): `cols` values, times `rows` for an expert tensor's [expert][cols].
  // rows 0: a vector; else a {cols, rows} matrix, one bias per expert (also with a single expert).
  auto bias = [&](const std::string& name, int64_t cols, int64_t rows = 0) {
    const uint64_t index = tensor_index++;
    const int64_t n_rows = std::max<int64_t>(rows, 1);
    plan.n_params += static_cast<uint64_t>(cols * n_rows);
    std::vector<uint8_t> data(static_cast<size_t>(cols * n_rows) * sizeof(float));
    for (int64_t r = 0; r < n_rows; ++r)
      normal_row(spec.seed, index, r, spec.stddev, reinterpret_cast<float*>(data.data()) + r * cols, cols);
    w.add_tensor(name, DType::F32, rows > 0 ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols},
                 std::move(data));
  };
  const bool gpt_oss = spec.arch == "gpt-oss";
  const bool llama4 = spec.arch == "llama4";
  const bool qk_norm = spec.arch != "llama" && !mla && !gpt_oss && !llama4, post_norms = spec.arch == "gemma3";
  const bool moe = spec.arch == "qwen3moe";

  const int64_t q_dim = static_cast<int64_t>(spec.n_heads) * head_dim;
  const int64_t kv_dim = static_cast<int64_t>(spec.n_kv_heads) * head_dim;
  weight("token_embd.weight", spec.n_embd, n_vocab);
  norm("output_norm.weight");
  if (!spec.tied_output) weight("output.weight", spec.n_embd, n_vocab);
  if (gemma4) {
    // Proportional RoPE on the full layers: the first quarter of the pairs rotate, the rest are held by 1e30.
    std::vector<uint8_t> factors(static_cast<size_t>(head_dim / 2) * sizeof(float));
    for (int i = 0; i < head_dim / 2; ++i) {
      const float f = i < head_dim / 8 ? 1.0f : 1e30f;
      std::memcpy(factors.data() + static_cast<size_t>(i) * sizeof(float), &f, sizeof(float));
    }
    w.add_tensor("rope_freqs.weight", DType::F32, {head_dim / 2}, std::move(factors));
    if (spec.n_embd_per_layer > 0) {
      const int64_t all = int64_t{spec.n_embd_per_layer} * spec.n_layers;
      weight("per_layer_token_embd.weight", all, n_vocab);
      weight("per_layer_model_proj.weight", spec.n_embd, all);
      norm("per_layer_proj_norm.weight", spec.n_embd_per_layer);
    }
  }
  for (int l = 0; l < spec.n_layers && gemma4; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool swa = swa_layer(l), own_kv = l < spec.n_layers - spec.n_kv_shared_layers;
    const int64_t D = swa ? head_dim_swa : head_dim, KV = int64_t{swa ? spec.n_kv_heads : kv_heads_full} * D;
    norm(p + "attn_norm.weight");
    weight(p + "attn_q.weight", spec.n_embd, spec.n_heads * D);
    norm(p + "attn_q_norm.weight", D);
    if (own_kv) {
      weight(p + "attn_k.weight", spec.n_embd, KV);
      if (swa) weight(p + "attn_v.weight", spec.n_embd, KV);
      norm(p + "attn_k_norm.weight", D);
    }
    weight(p + "attn_output.weight", spec.n_heads * D, spec.n_embd);
    norm(p + "post_attention_norm.weight");
    norm(p + "ffn_norm.weight");
    weight(p + "ffn_gate.weight", spec.n_embd, spec.n_ff);
    weight(p + "ffn_up.weight", spec.n_embd, spec.n_ff);
    weight(p + "ffn_down.weight", spec.n_ff, spec.n_embd);
    norm(p + "post_ffw_norm.weight");
    if (spec.n_expert > 0) {
      norm(p + "post_ffw_norm_1.weight");
      weight(p + "ffn_gate_inp.weight", spec.n_embd, spec.n_expert);
      norm(p + "ffn_gate_inp.scale");
      norm(p + "pre_ffw_norm_2.weight");
      weight(p + "ffn_gate_up_exps.weight", spec.n_embd, 2 * int64_t{spec.n_ff_exp}, spec.n_expert);
      weight(p + "ffn_down_exps.weight", spec.n_ff_exp, spec.n_embd, spec.n_expert);
      norm(p + "ffn_down_exps.scale", spec.n_expert);
      norm(p + "post_ffw_norm_2.weight");
    }
    if (spec.n_embd_per_layer > 0) {
      weight(p + "inp_gate.weight", spec.n_embd, spec.n_embd_per_layer);
      weight(p + "proj.weight", spec.n_embd_per_layer, spec.n_embd);
      norm(p + "post_norm.weight");
    }
    norm(p + "layer_output_scale.weight", 1);
  }
  for (int l = 0; l < spec.n_layers && !gemma4; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight");
    if (mla) {
      const int64_t H = spec.n_heads, r = spec.kv_lora_rank, qk = spec.qk_nope_dim + spec.qk_rope_dim;
      if (spec.q_lora_rank > 0) {
        weight(p + "attn_q_a.weight", spec.n_embd, spec.q_lora_rank);
        norm(p + "attn_q_a_norm.weight", spec.q_lora_rank);
        weight(p + "attn_q_b.weight", spec.q_lora_rank, H * qk);
      } else {
        weight(p + "attn_q.weight", spec.n_embd, H * qk);
      }
      weight(p + "attn_kv_a_mqa.weight", spec.n_embd, r + spec.qk_rope_dim);
      norm(p + "attn_kv_a_norm.weight", r);
      weight(p + "attn_k_b.weight", spec.qk_nope_dim, r, H);
      weight(p + "attn_v_b.weight", r, spec.v_head_dim, H);
      weight(p + "attn_output.weight", H * spec.v_head_dim, spec.n_embd);
      norm(p + "ffn_norm.weight");
      if (l < spec.n_dense_lead) {
        weight(p + "ffn_gate.weight", spec.n_embd, spec.n_ff);
        weight(p + "ffn_up.weight", spec.n_embd, spec.n_ff);
        weight(p + "ffn_down.weight", spec.n_ff, spec.n_embd);
        continue;
      }
      weight(p + "ffn_gate_inp.weight", spec.n_embd, spec.n_expert);
      weight(p + "ffn_gate_exps.weight", spec.n_embd, spec.n_ff_exp, spec.n_expert);
      weight(p + "ffn_up_exps.weight", spec.n_embd, spec.n_ff_exp, spec.n_expert);
      weight(p + "ffn_down_exps.weight", spec.n_ff_exp, spec.n_embd, spec.n_expert);
      if (spec.n_expert_shared > 0) {
        const int64_t fs = int64_t{spec.n_ff_exp} * spec.n_expert_shared;
        weight(p + "ffn_gate_shexp.weight", spec.n_embd, fs);
        weight(p + "ffn_up_shexp.weight", spec.n_embd, fs);
        weight(p + "ffn_down_shexp.weight", fs, spec.n_embd);
      }
      continue;
    }
    weight(p + "attn_q.weight", spec.n_embd, q_dim);
    weight(p + "attn_k.weight", spec.n_embd, kv_dim);
    weight(p + "attn_v.weight", spec.n_embd, kv_dim);
    weight(p + "attn_output.weight", q_dim, spec.n_embd);
    if (gpt_oss) {  // llama.cpp's openai_moe: biases everywhere, sinks, experts in MXFP4 as the real files
      bias(p + "attn_q.bias", q_dim);
      bias(p + "attn_k.bias", kv_dim);
      bias(p + "attn_v.bias", kv_dim);
      bias(p + "attn_output.bias", spec.n_embd);
      bias(p + "attn_sinks.weight", spec.n_heads);
      norm(p + "post_attention_norm.weight");
      weight(p + "ffn_gate_inp.weight", spec.n_embd, spec.n_expert);
      bias(p + "ffn_gate_inp.bias", spec.n_expert);
      for (const char* proj : {"gate", "up"}) {
        weight(p + "ffn_" + proj + "_exps.weight", spec.n_embd, spec.n_ff_exp, spec.n_expert, DType::MXFP4);
        bias(p + "ffn_" + proj + "_exps.bias", spec.n_ff_exp, spec.n_expert);
      }
      weight(p + "ffn_down_exps.weight", spec.n_ff_exp, spec.n_embd, spec.n_expert, DType::MXFP4);
      bias(p + "ffn_down_exps.bias", spec.n_embd, spec.n_expert);
      continue;
    }
    if (qk_norm) {
      norm(p + "attn_q_norm.weight", head_dim);
      norm(p + "attn_k_norm.weight", head_dim);
    }
    if (post_norms) norm(p + "post_attention_norm.weight");
    norm(p + "ffn_norm.weight");
    if (moe || (llama4 && (l + 1) % spec.moe_layer_step == 0)) {
      weight(p + "ffn_gate_inp.weight", spec.n_embd, spec.n_expert);
      weight(p + "ffn_gate_exps.weight", spec.n_embd, spec.n_ff_exp, spec.n_expert);
      weight(p + "ffn_up_exps.weight", spec.n_embd, spec.n_ff_exp, spec.n_expert);
      weight(p + "ffn_down_exps.weight", spec.n_ff_exp, spec.n_embd, spec.n_expert);
      if (llama4) {  // the shared expert, as wide as each routed one
        weight(p + "ffn_gate_shexp.weight", spec.n_embd, spec.n_ff_exp);
        weight(p + "ffn_up_shexp.weight", spec.n_embd, spec.n_ff_exp);
        weight(p + "ffn_down_shexp.weight", spec.n_ff_exp, spec.n_embd);
      }
      continue;
    }
    weight(p + "ffn_gate.weight", spec.n_embd, spec.n_ff);
    weight(p + "ffn_up.weight", spec.n_embd, spec.n_ff);
    weight(p + "ffn_down.weight", spec.n_ff, spec.n_embd);
    if (post_norms) norm(p + "post_ffw_norm.weight");
  }
  for (auto& [kind, note] : fallbacks) plan.notes.push_back(note);
  return plan;
}

std::vector<std::string> write_random_model(const RandomModelSpec& spec, const std::string& path,
                                            const std::function<void(float)>& progress) {
  RandomModelPlan plan = plan_random_model(spec);
  plan.writer.write(path, progress);
  return plan.notes;
}

}  // namespace kvserve
