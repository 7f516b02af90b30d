#pragma once
// A loaded model: hyper-parameters, weight views, vocabulary and tokenizer. Weights point into memory
// owned by `storage` (mmap'd files or converted buffers) and live as long as the Model.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"
#include "model/sampling_defaults.h"
#include "model/tokenizer.h"
#include "model/vocab.h"

namespace kvserve {

struct LayerWeights {
  Tensor attn_norm;
  Tensor wq, wk, wv, wo;
  Tensor bq, bk, bv;      // optional biases (Qwen2)
  Tensor bo;              // the output projection's bias (gpt-oss)
  Tensor attn_sinks;      // [n_heads] F32 sink logits (ModelConfig::learned_sinks)
  Tensor q_norm, k_norm;  // per-head RMSNorm weights, [head_dim] (Qwen3)
  Tensor attn_post_norm, ffn_post_norm;  // Gemma 2/3: norms of the attention and FFN outputs
  Tensor ffn_norm;
  Tensor w_gate, w_up, w_down;
  // MoE (ModelConfig::moe()): the router [n_expert rows x n_embd] and each expert's projections, views of the
  // file's stacked [n_expert][rows][cols] tensors.
  Tensor ffn_gate_inp;
  std::vector<Tensor> gate_exps, up_exps, down_exps;
  Tensor exp_probs_b;                                   // DeepSeek-V3: the router's selection bias
  // gpt-oss: the router's bias [n_expert], added to its logits; each expert's projection biases (views of the
  // file's [n_expert][rows] tensors).
  Tensor ffn_gate_inp_b;
  std::vector<Tensor> gate_exps_b, up_exps_b, down_exps_b;
  Tensor ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;  // DeepSeek, Qwen2-MoE: the shared experts' SwiGLU
  Tensor ffn_gate_inp_shexp;  // Qwen2-MoE: F32 [n_embd]; the shared expert's output times sigmoid(row . token)
  // MLA (ModelConfig::mla()): q directly (wq) or through wq_a, q_a_norm, wq_b; wkv_a to the latent and the
  // rope key, kv_a_norm on the latent; per head, wk_b [kv_lora_rank rows x nope] (the key up-projection,
  // transposed: it absorbs q's nope part into the latent space) and wv_b [head_dim_v rows x kv_lora_rank].
  Tensor wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm;
  std::vector<Tensor> wk_b, wv_b;
  // Gemma 4's per-layer embedding (ModelConfig::n_embd_per_layer): after the block, x += post_norm(proj(gelu(inp_gate
  // x) * the layer's per-layer input)); then x times layer_output_scale (a scalar; absent: 1).
  Tensor ple_inp_gate, ple_proj, ple_post_norm;
  Tensor layer_output_scale;
  // Gemma 4's mixture of experts (ModelConfig::moe_dense_branch): the router's per-dimension input scale [n_embd],
  // each expert's output scale [n_expert] (optional), and the branches' own norms.
  Tensor ffn_gate_inp_scale, down_exps_scale;
  Tensor ffn_post_norm_1, ffn_pre_norm_2, ffn_post_norm_2;
};

struct Model {
  std::string path;    // what the user passed
  std::string format;  // "gguf", "llama2c", "hf"
  ModelConfig config;
  Vocab vocab;
  SamplingDefaults sampling_defaults;  // what the model file recommends for parameters a request leaves out
  // A GGUF file's tensors the loader did not read (llama.cpp refuses such a file; the CLI warns): weights of
  // a variant this engine does not compute, whose output would then differ from the model's.
  std::vector<std::string> unread_tensors;
  Tensor tok_embd;
  Tensor output_norm;
  Tensor output;  // == tok_embd when config.tied_output
  std::vector<LayerWeights> layers;
  // Gemma 4's per-layer inputs: each token's row of n_layers * n_embd_per_layer values, the projection of the scaled
  // embedding to as many, and the norm of each layer's share of it.
  Tensor per_layer_token_embd, per_layer_model_proj, per_layer_proj_norm;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::shared_ptr<const void>> storage;

  // Total bytes of weights read per decoded token (for bandwidth figures).
  size_t weight_bytes() const;
};

struct LoadOptions {
  std::string tokenizer_path;  // llama2.c: tokenizer.bin when not beside the checkpoint
  // Called with fraction in [0, 1] while loading (for a progress bar); may be empty.
  std::function<void(float)> progress;
};

// Detects the format: a directory is a Hugging Face folder, a file starting with "GGUF" is GGUF, any
// other file is a llama2.c checkpoint. Throws Error naming the file and the problem.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts = {});

// Checks shapes and types of every weight against config; throws Error naming the tensor.
void validate_model(const Model& m);

}  // namespace kvserve
