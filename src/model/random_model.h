#pragma once
// Random-weight models for benchmarks and tests (architectures llama, qwen3, qwen3moe, gemma3, gemma4, deepseek2,
// gpt-oss, llama4): the
// shapes of a real model (or any others), weights drawn from N(0, stddev) with a seed and quantized to the chosen type,
// RMS-norm weights 1, and the tokenizer metadata (and so the vocabulary size) copied from a real GGUF file.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gguf_writer.h"

namespace kvserve {

struct RandomModelSpec {
  std::string name = "kvserve-random";
  // "llama"; "qwen3" (adds per-head q/k norms); "gemma3" (q/k norms, post-norms, GeGLU, and local layers of
  // `sliding_window` positions, every 6th layer global, as llama.cpp reads a file without a pattern).
  // "qwen3moe": qwen3's attention and a mixture of n_expert experts (n_expert_used a token) of n_ff_exp.
  // "gpt-oss": biases on every projection, learned sinks, YaRN (factor 32 over 4096 positions), the sliding
  // window on the even layers, and experts as qwen3moe's with biases, their weights MXFP4 whatever weight_type.
  // "llama4": llama's attention, and every moe_layer_step-th layer n_expert experts (n_expert_used a token) of
  // n_ff_exp beside one shared expert as wide, the others a dense FFN of n_ff; chunked attention and NoPE layers as
  // llama.cpp reads a file without attention.sliding_window.
  // "gemma4": gemma3's norms and GeGLU in Gemma 4's layout: every swa_period-th layer full attention (heads of
  // head_dim, n_kv_heads_full KV heads (0: n_kv_heads), "proportional" RoPE over the first quarter, its values its
  // keys' projection), the others sliding over sliding_window positions (heads of head_dim_swa, 0: head_dim,
  // n_kv_heads); values RMS-normed, attention scale 1; the last n_kv_shared_layers layers on earlier layers' KV;
  // per-layer embeddings of n_embd_per_layer (0: none); with n_expert, experts of n_ff_exp beside every layer's dense
  // FFN.
  std::string arch = "llama";
  int sliding_window = 0;  // gemma3, gemma4 and gpt-oss only; 0 = every layer global
  int swa_period = 6;      // gemma4
  int head_dim_swa = 0;
  int n_kv_heads_full = 0;
  int n_kv_shared_layers = 0;
  int n_embd_per_layer = 0;
  int n_expert = 0;        // qwen3moe, deepseek2, gpt-oss and llama4
  int moe_layer_step = 1;  // llama4
  int n_expert_used = 0;
  int n_ff_exp = 0;
  // "deepseek2": MLA (a latent of kv_lora_rank, q through q_lora_rank when > 0, heads of qk_nope_dim +
  // qk_rope_dim keys and v_head_dim values) and, after n_dense_lead dense layers, experts beside
  // n_expert_shared shared ones; head_dim and n_kv_heads are not used.
  int kv_lora_rank = 0;
  int q_lora_rank = 0;
  int qk_nope_dim = 0;
  int qk_rope_dim = 0;
  int v_head_dim = 0;
  int n_expert_shared = 0;
  int n_dense_lead = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int n_ff = 0;
  int head_dim = 0;  // 0 = n_embd / n_heads
  int n_ctx = 2048;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  bool tied_output = true;  // no output.weight: the output projection is token_embd
  DType weight_type = DType::F16;
  std::string vocab_from;  // GGUF file whose tokenizer.* metadata is copied (vocab-only files work)
  int vocab_size = 0;      // 0 = the vocab file's; larger pads with "[PAD<i>]" unused tokens, as converters do
  uint64_t seed = 0;
  float stddev = 0.02f;

  // Throws Error naming the first bad field.
  void validate() const;
};

// Named shapes of real models: "llama-3.2-1b", "smollm2-135m", "qwen3-0.6b", "gemma-3-1b", "qwen3-30b-a3b",
// "deepseek-v2-lite", "gpt-oss-20b", "llama-4-scout".
// nullopt for an unknown name.
std::optional<RandomModelSpec> random_model_preset(const std::string& name);
std::vector<std::string> random_model_preset_names();

struct RandomModelPlan {
  GGUFWriter writer;               // metadata and tensors (data made while writing)
  std::vector<std::string> notes;  // e.g. tensors written in a fallback type
  int n_vocab = 0;
  uint64_t n_params = 0;
};

// Everything needed to write the file. Weight data is generated (deterministically for a seed, whatever
// the thread count) on ThreadPool::global() while GGUFWriter::write runs. Throws Error on a bad spec or
// an unreadable vocabulary file.
RandomModelPlan plan_random_model(const RandomModelSpec& spec);
// plan_random_model + write; returns the notes.
std::vector<std::string> write_random_model(const RandomModelSpec& spec, const std::string& path,
                                            const std::function<void(float)>& progress = {});

// The type a tensor with rows of `cols` elements gets when `wanted` does not fit (its block size does
// not divide cols): Q4_K -> Q4_0 -> Q8_0 -> F16 ... the first that fits (IQ4_XS -> IQ4_NL first).
DType fallback_weight_type(DType wanted, int64_t cols);

}  // namespace kvserve
