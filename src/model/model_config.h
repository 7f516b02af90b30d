#pragma once
// Architecture hyper-parameters, filled by every loader (GGUF, llama2.c, Hugging Face). A forward
// builder reads only this and the weights, so a new model family is data plus one builder.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace kvserve {

enum class RopeStyle {
  Interleaved,  // rotate pairs (2i, 2i+1): llama.cpp's "llama", llama2.c
  NeoX,         // rotate pairs (i, i + n_rot/2): qwen2, Hugging Face llama weights
};

struct RopeScaling {
  enum class Type { None, Linear, Llama3, LongRope, Yarn } type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;
  // LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): each rotated pair's angle divided by its factor, the long
  // ones for sequences beyond original_context, else the short ones (LongRopeFactors in
  // engine/model_runner.h says how a sequence is judged); cos and sin times attn_factor either way.
  std::vector<float> long_factors, short_factors;
  // Llama 3 scaling given as per-pair factors (a GGUF's rope_freqs.weight) that the keys' formula does not give
  // (Llama 4 Scout's low_freq_factor = high_freq_factor, which the converter writes without keys): each
  // rotated pair's angle divided by its factor, as ggml does. Empty: the formula.
  std::vector<float> freq_factors;
  float attn_factor = 1.0f;
  // YaRN (DeepSeek-V2, Qwen2.5/3 long context), as ggml's rope_yarn: each pair's angle blends the
  // interpolated (angle / factor) and the original one by a ramp over the pairs between the correction
  // dimensions of beta_fast and beta_slow rotations in original_context; cos and sin times
  // attn_factor * (1 + 0.1 ln factor), attn_factor being what llama.cpp passes as ggml's (the loader works
  // it out: llama_context's yarn_attn_factor). yarn_log_mul: DeepSeek's mscale_all_dim (0: none).
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_log_mul = 0.0f;
  // The ramp's ends rounded out to whole dimensions (floor / ceil), as ggml and transformers by default do;
  // gpt-oss's HF config turns it off (rope_scaling.truncate false).
  bool yarn_truncate = true;
};

// The feed-forward's gate activation: out = act(gate) * up.
enum class FfnActivation {
  SiLU,      // SwiGLU: llama, qwen
  GeluTanh,  // GeGLU with the tanh approximation: Gemma (as llama.cpp computes it, see ops.h gelu_mul)
  // gpt-oss's clamped SwiGLU (ggml_swiglu_oai): g = min(gate, limit), u = clamp(up, -limit, limit),
  // out = g * sigmoid(alpha * g) * (u + 1), with alpha 1.702 and limit ModelConfig::swiglu_limit.
  SwigluOai,
};
inline constexpr float kSwigluOaiAlpha = 1.702f;

struct ModelConfig {
  std::string arch = "llama";  // GGUF general.architecture
  std::string name;            // human-readable model name
  int n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_ff = 0;
  // Mixture of experts (Qwen3-MoE, Mixtral): each layer's FFN is n_expert SwiGLU experts of width n_ff_exp,
  // of which a router picks n_expert_used per token (softmax over all, the top ones, their weights
  // renormalized to sum 1, as llama.cpp's build_moe_ffn for these models). n_expert 0: a dense FFN of n_ff.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  bool expert_weights_norm = true;  // the chosen experts' weights renormalized (HF Qwen3-MoE: norm_topk_prob)
  // DeepSeek-V2/V3's router (llama.cpp's build_moe_ffn): sigmoid scores instead of softmax (the selection
  // biased by the layer's exp_probs_b, the weights not), experts chosen only from the n_group_used best of
  // n_expert_groups groups (each scored by the sum of its best two), the weights times expert_weights_scale
  // (0: none). The first n_layer_dense_lead layers have a dense FFN of n_ff; every MoE layer adds
  // n_expert_shared always-on experts (one SwiGLU n_expert_shared * n_ff_exp wide).
  // gpt-oss (SoftmaxWeight): the top experts by raw logit (plus the router's bias), their weights the softmax
  // of their own logits only.
  // Llama 4 (SigmoidChosen): the top experts by raw logit, each weighted by its logit's sigmoid, the weight
  // applied to the token before the expert's SwiGLU (expert_weight_before_ffn; llama.cpp's weight_before_ffn)
  // instead of to its output.
  enum class ExpertGating { Softmax, Sigmoid, SoftmaxWeight, SigmoidChosen } expert_gating = ExpertGating::Softmax;
  bool expert_weight_before_ffn = false;
  float expert_weights_scale = 0.0f;
  int n_expert_groups = 0;
  int n_group_used = 0;
  bool expert_group_score_max = false;  // groups scored by their best expert (DeepSeek-V2's HF code)
  int n_layer_dense_lead = 0;
  int n_expert_shared = 0;
  // The shared experts' SwiGLU width where it is not n_expert_shared * n_ff_exp (Qwen2-MoE's one shared expert,
  // expert_shared_feed_forward_length wide, its output scaled by the sigmoid of the layer's ffn_gate_inp_shexp
  // row times the token).
  int n_ff_shexp = 0;
  int64_t shared_ffn_width() const { return n_ff_shexp > 0 ? n_ff_shexp : int64_t{n_ff_exp} * n_expert_shared; }
  bool moe() const { return n_expert > 0; }
  // Llama 4 Maverick interleaves: every moe_layer_step-th layer (l + 1 a multiple of it) has experts, the others
  // a dense FFN of n_ff.
  int moe_layer_step = 1;
  bool moe_layer(int l) const {
    return n_expert > 0 && l >= n_layer_dense_lead && (moe_layer_step <= 1 || (l + 1) % moe_layer_step == 0);
  }
  // DeepSeek-V2 multi-head latent attention (kv_lora_rank > 0). Each head's key is head_dim = nope + n_rot
  // wide (qk_nope_head_dim + qk_rope_head_dim), its value head_dim_v; n_kv_heads is 1. The cache keeps,
  // per token and layer, only the RMS-normed latent (kv_lora_rank) and the rotated rope key (n_rot), one
  // row of kv_lora_rank + n_rot: attention runs in the latent space with the key up-projection absorbed
  // into q (as llama.cpp and vLLM's MLA decode), the row as key and its first kv_lora_rank values as value.
  // q_lora_rank > 0: q through a low-rank projection (attn_q_a, its norm, attn_q_b).
  int kv_lora_rank = 0;
  int q_lora_rank = 0;
  int head_dim_v = 0;
  bool mla() const { return kv_lora_rank > 0; }
  int qk_nope_dim() const { return head_dim - n_rot; }
  // Values per cached row: a KV head's K (or V) row, or MLA's latent + rope key.
  int kv_row_dim() const { return mla() ? kv_lora_rank + n_rot : head_dim; }
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int n_rot = 0;  // rotated dims per head: the first n_rot (Phi-4-mini: 96 of 128), MLA's last n_rot
  RopeStyle rope_style = RopeStyle::Interleaved;
  RopeScaling rope_scaling;
  bool tied_output = false;  // output projection is token_embd
  bool qkv_bias = false;
  bool qk_norm = false;  // q and k RMS-normalized per head before RoPE (Qwen3, Gemma 3)
  // Llama 4 (Scout; not the 128-expert Maverick): on the layers that rotate, q and k RMS-normalized per head with
  // no weight after RoPE (Llama4TextL2Norm).
  bool qk_l2_norm = false;
  // Gemma: token embeddings times embd_scale (sqrt(n_embd)); GeGLU; Gemma 2 and 3: each block's output
  // RMS-normalized (attn_post_norm, ffn_post_norm) before its residual add.
  float embd_scale = 1.0f;
  bool post_norms = false;
  // OLMo 2: no norm before the attention or the FFN (their outputs only, post_norms), and q / k normed over
  // their whole projections (every head at once, qk_norm_full) instead of per head.
  bool pre_norms = true;
  bool qk_norm_full = false;
  FfnActivation ffn_act = FfnActivation::SiLU;
  // GeluTanh computed in float for each value (transformers, the reference for Hugging Face folders) instead of
  // looked up in ggml's table of f16 values (llama.cpp, the reference for GGUF files): the two differ by up to ~1e-3
  // relative, which a golden at 1e-4 sees.
  bool gelu_exact = false;
  float swiglu_limit = 7.0f;  // SwigluOai's clamp (llama.cpp fixes it at 7; HF gpt-oss's swiglu_limit)
  float attn_scale = 0.0f;  // scale of q.k; 0: 1/sqrt(head_dim)
  // Sliding-window layers (Gemma 2 and 3's local layers): layer l attends to the last `sliding_window`
  // positions where swa_layers[l], with RoPE base rope_base_swa and no context scaling.
  // swa_chunked (Llama 4's chunked attention, llama.cpp's LLAMA_SWA_TYPE_CHUNKED): those layers attend instead
  // within their position's chunk, [p - p % sliding_window, p] (never more than the window reaches back, so
  // their cache is a window's).
  int sliding_window = 0;
  bool swa_chunked = false;
  std::vector<bool> swa_layers;  // empty: none
  float rope_base_swa = 10000.0f;
  RopeScaling rope_scaling_swa;  // none, but Gemma 2's local layers scale as its global ones
  float final_logit_softcap = 0.0f;  // > 0: logits = cap * tanh(logits / cap)
  // Granite: each block's output times residual_scale before its residual add, logits divided by
  // logit_scale (0: neither).
  float residual_scale = 0.0f;
  float logit_scale = 0.0f;
  float attn_softcap = 0.0f;         // > 0: attention scores soft-capped so (Gemma 2)
  // gpt-oss: each query head has a learned sink logit (LayerWeights::attn_sinks) that joins its softmax's
  // denominator and adds no value, so a head can attend to nothing.
  bool learned_sinks = false;
  // Llama 4's attention temperature: q at position p times 1 + attn_temp_scale * ln(1 + floor((p +
  // attn_temp_offset) / attn_temp_length)). Llama 4 itself: scale 0.1, length 8192 (floor_scale), offset 1, on its
  // NoPE layers only (attn_temp_nope_only). Ministral 3 (llama_4_scaling_beta; llama.cpp's
  // attention.temperature_scale over the YaRN original context): offset 0, every layer. Scale 0: none.
  float attn_temp_scale = 0.0f;
  int64_t attn_temp_length = 0;
  float attn_temp_offset = 0.0f;
  bool attn_temp_nope_only = false;

  // Layers whose q and k get no RoPE (SmolLM3: every 4th); empty: every layer rotates.
  std::vector<bool> nope_layers;

  bool uses_rope(int l) const {
    return static_cast<size_t>(l) >= nope_layers.size() || !nope_layers[static_cast<size_t>(l)];
  }
  bool has_attn_temperature() const { return attn_temp_scale != 0.0f && attn_temp_length > 0; }
  bool attn_temperature_on(int l) const { return has_attn_temperature() && (!attn_temp_nope_only || !uses_rope(l)); }
  float attn_temperature(int64_t pos) const {
    if (!has_attn_temperature()) return 1.0f;
    // The quotient in float, as llama.cpp and transformers take it.
    const float steps = std::floor((static_cast<float>(pos) + attn_temp_offset) / static_cast<float>(attn_temp_length));
    return static_cast<float>(std::log(static_cast<double>(steps) + 1.0) * attn_temp_scale + 1.0);
  }
  bool is_swa_layer(int l) const {
    return sliding_window > 0 && static_cast<size_t>(l) < swa_layers.size() && swa_layers[static_cast<size_t>(l)];
  }

  // Gemma 4: the sliding-window layers' heads are head_dim_swa wide with n_rot_swa rotating (0: head_dim, n_rot, as
  // every other model), the full ones head_dim; KV heads per layer (empty: n_kv_heads everywhere); FFN widths per
  // layer (empty: n_ff everywhere).
  int head_dim_swa = 0;
  int n_rot_swa = 0;
  std::vector<int> layer_kv_heads;
  std::vector<int> layer_n_ff;
  int head_dim_of(int l) const { return head_dim_swa > 0 && is_swa_layer(l) ? head_dim_swa : head_dim; }
  int n_rot_of_swa() const { return n_rot_swa > 0 ? n_rot_swa : n_rot; }
  int kv_heads_of(int l) const { return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[static_cast<size_t>(l)]; }
  int n_ff_of(int l) const { return layer_n_ff.empty() ? n_ff : layer_n_ff[static_cast<size_t>(l)]; }
  // Every layer's attention the same shape, and every FFN as wide (what the single-token region assumes).
  bool uniform_layers() const { return head_dim_swa == 0 && layer_kv_heads.empty() && layer_n_ff.empty(); }
  // The widest per-layer figures: scratch sizes.
  int max_head_dim() const { return std::max(head_dim, head_dim_swa); }
  int64_t max_q_dim() const { return int64_t{n_heads} * max_head_dim(); }
  int64_t max_kv_dim() const {
    int64_t m = int64_t{n_kv_heads} * head_dim;
    for (int l = 0; l < n_layers; ++l) m = std::max(m, int64_t{kv_heads_of(l)} * head_dim_of(l));
    return m;
  }
  int max_n_ff() const {
    int m = n_ff;
    for (int f : layer_n_ff) m = std::max(m, f);
    return m;
  }

  // Gemma 4's KV sharing: the last n_kv_shared_layers layers compute no K or V and attend to the cache of the last
  // earlier layer of their kind (sliding or full), which holds the same positions.
  int n_kv_shared_layers = 0;
  int kv_source_layer(int l) const {
    const int first_shared = n_layers - n_kv_shared_layers;
    if (n_kv_shared_layers <= 0 || l < first_shared) return l;
    for (int s = first_shared - 1; s >= 0; --s)
      if (is_swa_layer(s) == is_swa_layer(l)) return s;
    return l;  // refused by the loaders: no earlier layer of its kind
  }
  bool has_own_kv(int l) const { return kv_source_layer(l) == l; }
  // Gemma 4: v RMS-normed per head without a weight.
  bool v_norm = false;
  // Gemma 4's mixture of experts (26B-A4B): a dense FFN of n_ff_of(l) (ffn_norm, ffn_post_norm_1) beside the experts
  // (ffn_pre_norm_2, ffn_post_norm_2), the two summed and post-normed (ffn_post_norm); the router reads the residual
  // RMS-normed without a weight, over sqrt(n_embd), times a per-dimension scale; each expert's output times its own
  // scale.
  bool moe_dense_branch = false;
  // Gemma 4's per-layer embeddings: n_embd_per_layer values per layer and token (0: none), from the token's row of
  // per_layer_token_embd and a projection of its embedding, gating a projection added after each layer.
  int n_embd_per_layer = 0;
};

}  // namespace kvserve
