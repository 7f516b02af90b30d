// Format detection, model validation and weight accounting shared by every loader.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "model/loaders.h"
#include "model/model.h"
#include "model/weight_repack.h"

namespace kvserve {

std::unique_ptr<Tokenizer> make_tokenizer(const Vocab& vocab) { return Tokenizer::create(vocab); }

bool is_gguf_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  char magic[4] = {};
  FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) return false;
  const size_t got = std::fread(magic, 1, 4, fp);
  std::fclose(fp);
  return got == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

namespace {

std::unique_ptr<Model> load_model_file(const std::string& path, const LoadOptions& opts) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot open model '{}': {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    return load_hf_model(path, opts);
  }
  if (FILE* fp = std::fopen(path.c_str(), "rb")) {
    std::fclose(fp);
  } else {
    fail("cannot open model '{}': {}", path, std::strerror(errno));
  }
  if (is_gguf_file(path)) return load_gguf_model(path, opts);
  return load_llama2c_model(path, opts);
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts) {
  std::unique_ptr<Model> m = load_model_file(path, opts);
  repack_weights_for_cpu(*m);
  return m;
}

namespace {

struct ShapeCheck {
  const Model& m;

  void check(const Tensor& t, const std::string& name, std::initializer_list<int64_t> dims, bool norm) const {
    if (!t.valid()) fail("{}: tensor '{}' is missing", m.path, name);
    std::array<int64_t, 4> want{1, 1, 1, 1};
    size_t i = 0;
    for (int64_t d : dims) want[i++] = d;
    if (t.ne != want) {
      fail("{}: tensor '{}' has shape [{}, {}, {}, {}], expected [{}, {}, {}, {}] from the model config", m.path, name,
           t.ne[0], t.ne[1], t.ne[2], t.ne[3], want[0], want[1], want[2], want[3]);
    }
    const auto info = dtype_info(static_cast<uint32_t>(t.type));
    if (!info) fail("{}: tensor '{}' has unknown type id {}", m.path, name, static_cast<uint32_t>(t.type));
    // Norm weights and biases are added/multiplied element-wise in F32.
    if (norm && t.type != DType::F32)
      fail("{}: tensor '{}' has type {}, expected F32 for a norm weight or bias", m.path, name, info->name);
    if (!info->supported)
      fail("{}: unsupported tensor type {} ({}) for '{}'", m.path, info->name, static_cast<uint32_t>(t.type), name);
    if (t.ne[0] % info->block_elems != 0)
      fail("{}: tensor '{}' of type {} has row length {}, not a multiple of its block size {}", m.path, name,
           info->name, t.ne[0], info->block_elems);
  }
};

}  // namespace

namespace {
void check_ffn(const ShapeCheck& s, const ModelConfig& c, const LayerWeights& L, const std::string& p, int l,
               const std::string& path) {
  if (c.moe_layer(l)) {
    if (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert || c.n_ff_exp <= 0)
      fail("{}: invalid experts ({} of {} used, width {})", path, c.n_expert_used, c.n_expert, c.n_ff_exp);
    s.check(L.ffn_gate_inp, p + "ffn_gate_inp.weight", {c.n_embd, c.n_expert}, false);
    if (static_cast<int>(L.gate_exps.size()) != c.n_expert || static_cast<int>(L.up_exps.size()) != c.n_expert ||
        static_cast<int>(L.down_exps.size()) != c.n_expert)
      fail("{}: layer {} has {} / {} / {} experts' gate / up / down, the config says {}", path, l,
           L.gate_exps.size(), L.up_exps.size(), L.down_exps.size(), c.n_expert);
    for (int e = 0; e < c.n_expert; ++e) {
      const size_t i = static_cast<size_t>(e);
      s.check(L.gate_exps[i], L.gate_exps[i].name, {c.n_embd, c.n_ff_exp}, false);
      s.check(L.up_exps[i], L.up_exps[i].name, {c.n_embd, c.n_ff_exp}, false);
      s.check(L.down_exps[i], L.down_exps[i].name, {c.n_ff_exp, c.n_embd}, false);
    }
    if (L.exp_probs_b.valid()) s.check(L.exp_probs_b, p + "exp_probs_b.bias", {c.n_expert}, true);
    if (L.ffn_gate_inp_b.valid()) s.check(L.ffn_gate_inp_b, p + "ffn_gate_inp.bias", {c.n_expert}, true);
    // Expert biases: all three or none.
    for (const auto* v : {&L.gate_exps_b, &L.up_exps_b, &L.down_exps_b})
      if (!v->empty() && static_cast<int>(v->size()) != c.n_expert)
        fail("{}: layer {} has {} expert biases, the config says {} experts", path, l, v->size(), c.n_expert);
    for (size_t i = 0; i < L.gate_exps_b.size(); ++i) {
      s.check(L.gate_exps_b[i], L.gate_exps_b[i].name, {c.n_ff_exp}, true);
      s.check(L.up_exps_b[i], L.up_exps_b[i].name, {c.n_ff_exp}, true);
      s.check(L.down_exps_b[i], L.down_exps_b[i].name, {c.n_embd}, true);
    }
    if (c.n_expert_shared > 0) {
      const int64_t w = c.shared_ffn_width();
      s.check(L.ffn_gate_shexp, p + "ffn_gate_shexp.weight", {c.n_embd, w}, false);
      s.check(L.ffn_up_shexp, p + "ffn_up_shexp.weight", {c.n_embd, w}, false);
      s.check(L.ffn_down_shexp, p + "ffn_down_shexp.weight", {w, c.n_embd}, false);
    }
    if (L.ffn_gate_inp_shexp.valid()) {
      if (c.n_expert_shared == 0) fail("{}: layer {} has a shared expert's gate but no shared expert", path, l);
      s.check(L.ffn_gate_inp_shexp, p + "ffn_gate_inp_shexp.weight", {c.n_embd}, true);
    }
    if (!c.moe_dense_branch) return;
    s.check(L.ffn_gate_inp_scale, p + "ffn_gate_inp.scale", {c.n_embd}, true);
    if (L.down_exps_scale.valid()) s.check(L.down_exps_scale, p + "ffn_down_exps.scale", {c.n_expert}, true);
    s.check(L.ffn_post_norm_1, p + "post_ffw_norm_1.weight", {c.n_embd}, true);
    s.check(L.ffn_pre_norm_2, p + "pre_ffw_norm_2.weight", {c.n_embd}, true);
    s.check(L.ffn_post_norm_2, p + "post_ffw_norm_2.weight", {c.n_embd}, true);
  }
  const int64_t n_ff = c.n_ff_of(l);
  s.check(L.w_gate, p + "ffn_gate.weight", {c.n_embd, n_ff}, false);
  s.check(L.w_up, p + "ffn_up.weight", {c.n_embd, n_ff}, false);
  s.check(L.w_down, p + "ffn_down.weight", {n_ff, c.n_embd}, false);
}

void check_mla_layer(const ShapeCheck& s, const ModelConfig& c, const LayerWeights& L, const std::string& p,
                     const std::string& path) {
  if (c.head_dim_v <= 0 || c.n_rot >= c.head_dim || c.n_kv_heads != 1)
    fail("{}: invalid MLA shape (key head {}, value head {}, rope {}, kv heads {})", path, c.head_dim, c.head_dim_v,
         c.n_rot, c.n_kv_heads);
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim, r = c.kv_lora_rank;
  if (c.q_lora_rank > 0) {
    s.check(L.wq_a, p + "attn_q_a.weight", {c.n_embd, c.q_lora_rank}, false);
    s.check(L.q_a_norm, p + "attn_q_a_norm.weight", {c.q_lora_rank}, true);
    s.check(L.wq_b, p + "attn_q_b.weight", {c.q_lora_rank, q_dim}, false);
  } else {
    s.check(L.wq, p + "attn_q.weight", {c.n_embd, q_dim}, false);
  }
  s.check(L.wkv_a, p + "attn_kv_a_mqa.weight", {c.n_embd, r + c.n_rot}, false);
  s.check(L.kv_a_norm, p + "attn_kv_a_norm.weight", {r}, true);
  if (static_cast<int>(L.wk_b.size()) != c.n_heads || static_cast<int>(L.wv_b.size()) != c.n_heads)
    fail("{}: layer {}attn_k_b / attn_v_b hold {} / {} heads, the config says {}", path, p, L.wk_b.size(),
         L.wv_b.size(), c.n_heads);
  for (int h = 0; h < c.n_heads; ++h) {
    s.check(L.wk_b[static_cast<size_t>(h)], L.wk_b[static_cast<size_t>(h)].name, {c.qk_nope_dim(), r}, false);
    s.check(L.wv_b[static_cast<size_t>(h)], L.wv_b[static_cast<size_t>(h)].name, {r, c.head_dim_v}, false);
  }
  s.check(L.wo, p + "attn_output.weight", {int64_t{c.n_heads} * c.head_dim_v, c.n_embd}, false);
  s.check(L.ffn_norm, p + "ffn_norm.weight", {c.n_embd}, true);
}

// Per-layer head sizes, KV heads, FFN widths and KV sharing (Gemma 4) as the forward pass and the cache need them.
void check_layer_geometry(const ModelConfig& c, const std::string& path) {
  if (c.head_dim_swa < 0 || c.n_rot_swa < 0 || c.n_rot_of_swa() > c.max_head_dim() || c.n_rot_of_swa() % 2 != 0 ||
      (c.head_dim_swa > 0 && c.n_rot_of_swa() > c.head_dim_swa))
    fail("{}: sliding layers' head size {} and rotary dims {} are invalid", path, c.head_dim_swa, c.n_rot_swa);
  for (const auto* v : {&c.layer_kv_heads, &c.layer_n_ff})
    if (!v->empty() && static_cast<int>(v->size()) != c.n_layers)
      fail("{}: {} per-layer values for {} layers", path, v->size(), c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const int kvh = c.kv_heads_of(l);
    if (kvh <= 0 || c.n_heads % kvh != 0)
      fail("{}: layer {}: {} heads is not a multiple of {} kv heads", path, l, c.n_heads, kvh);
    if (c.n_ff_of(l) <= 0) fail("{}: layer {}: feed-forward width {} must be positive", path, l, c.n_ff_of(l));
  }
  if (c.n_kv_shared_layers < 0 || c.n_kv_shared_layers >= c.n_layers)
    fail("{}: {} KV-sharing layers of {}: at least the first must have its own", path, c.n_kv_shared_layers,
         c.n_layers);
  for (int l = c.n_layers - c.n_kv_shared_layers; l < c.n_layers; ++l)
    if (c.kv_source_layer(l) == l)
      fail("{}: layer {} shares the KV of an earlier {} layer, and there is none", path, l,
           c.is_swa_layer(l) ? "sliding-window" : "full-attention");
  if (c.n_embd_per_layer < 0 || c.n_embd_per_layer > (1 << 20))
    fail("{}: per-layer embedding length {} is out of range", path, c.n_embd_per_layer);
}

}  // namespace

void validate_model(const Model& m) {
  const ModelConfig& c = m.config;
  if (c.n_embd <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.n_ff <= 0 ||
      c.n_vocab <= 0)
    fail("{}: invalid model config (n_embd {}, layers {}, heads {}, kv heads {}, head_dim {}, n_ff {}, vocab {})",
         m.path, c.n_embd, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_vocab);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: {} heads is not a multiple of {} kv heads", m.path, c.n_heads, c.n_kv_heads);
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    fail("{}: rotary dims {} invalid for head_dim {}", m.path, c.n_rot, c.head_dim);
  if (static_cast<int>(m.vocab.tokens.size()) != c.n_vocab)
    fail("{}: vocabulary has {} tokens but the config says {}", m.path, m.vocab.tokens.size(), c.n_vocab);
  if (static_cast<int>(m.layers.size()) != c.n_layers)
    fail("{}: {} layers loaded but the config says {}", m.path, m.layers.size(), c.n_layers);

  check_layer_geometry(c, m.path);

  const ShapeCheck s{m};
  s.check(m.tok_embd, "token_embd.weight", {c.n_embd, c.n_vocab}, false);
  if (c.n_embd_per_layer > 0) {
    const int64_t P = c.n_embd_per_layer, all = P * c.n_layers;
    s.check(m.per_layer_token_embd, "per_layer_token_embd.weight", {all, c.n_vocab}, false);
    s.check(m.per_layer_model_proj, "per_layer_model_proj.weight", {c.n_embd, all}, false);
    s.check(m.per_layer_proj_norm, "per_layer_proj_norm.weight", {P}, true);
  }
  s.check(m.output_norm, "output_norm.weight", {c.n_embd}, true);
  s.check(m.output, c.tied_output ? "token_embd.weight (tied output)" : "output.weight", {c.n_embd, c.n_vocab}, false);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    if (c.pre_norms) s.check(L.attn_norm, p + "attn_norm.weight", {c.n_embd}, true);
    if (c.mla()) {
      check_mla_layer(s, c, L, p, m.path);
      check_ffn(s, c, L, p, l, m.path);
      continue;
    }
    const int64_t D = c.head_dim_of(l);
    const int64_t q_dim = int64_t{c.n_heads} * D;
    const int64_t kv_dim = int64_t{c.kv_heads_of(l)} * D;
    const bool own_kv = c.has_own_kv(l);
    s.check(L.wq, p + "attn_q.weight", {c.n_embd, q_dim}, false);
    // Gemma 4: a layer sharing another's cache projects no K or V; one without attn_v takes K's projection as V.
    if (own_kv) s.check(L.wk, p + "attn_k.weight", {c.n_embd, kv_dim}, false);
    if (own_kv && (L.wv.valid() || !c.v_norm)) s.check(L.wv, p + "attn_v.weight", {c.n_embd, kv_dim}, false);
    s.check(L.wo, p + "attn_output.weight", {q_dim, c.n_embd}, false);
    if (c.qkv_bias) {
      s.check(L.bq, p + "attn_q.bias", {q_dim}, true);
      s.check(L.bk, p + "attn_k.bias", {kv_dim}, true);
      s.check(L.bv, p + "attn_v.bias", {kv_dim}, true);
    }
    if (c.qk_norm) {
      s.check(L.q_norm, p + "attn_q_norm.weight", {c.qk_norm_full ? q_dim : D}, true);
      if (own_kv) s.check(L.k_norm, p + "attn_k_norm.weight", {c.qk_norm_full ? kv_dim : D}, true);
    }
    if (L.bo.valid()) s.check(L.bo, p + "attn_output.bias", {c.n_embd}, true);
    if (c.learned_sinks) s.check(L.attn_sinks, p + "attn_sinks.weight", {c.n_heads}, true);
    if (c.post_norms) {
      s.check(L.attn_post_norm, p + "post_attention_norm.weight", {c.n_embd}, true);
      s.check(L.ffn_post_norm, p + "post_ffw_norm.weight", {c.n_embd}, true);
    }
    if (c.pre_norms) s.check(L.ffn_norm, p + "ffn_norm.weight", {c.n_embd}, true);
    check_ffn(s, c, L, p, l, m.path);
    if (c.n_embd_per_layer > 0) {
      s.check(L.ple_inp_gate, p + "inp_gate.weight", {c.n_embd, c.n_embd_per_layer}, false);
      s.check(L.ple_proj, p + "proj.weight", {c.n_embd_per_layer, c.n_embd}, false);
      s.check(L.ple_post_norm, p + "post_norm.weight", {c.n_embd}, true);
    }
    if (L.layer_output_scale.valid()) s.check(L.layer_output_scale, p + "layer_output_scale.weight", {1}, true);
  }
}

size_t Model::weight_bytes() const {
  auto bytes = [](const Tensor& t) { return t.valid() ? t.bytes() : size_t{0}; };
  // Every layer weight and the output projection are read in full per token; the embedding only for
  // one row (also when tied: the output matmul already counts the whole matrix).
  size_t total = bytes(output_norm) + bytes(output) + (tok_embd.valid() ? tok_embd.row_size() : 0);
  total += bytes(per_layer_model_proj) + bytes(per_layer_proj_norm) +
           (per_layer_token_embd.valid() ? per_layer_token_embd.row_size() : 0);
  for (const LayerWeights& L : layers) {
    for (const Tensor* t : {&L.attn_norm,
                            &L.wq,
                            &L.wk,
                            &L.wv,
                            &L.wo,
                            &L.bq,
                            &L.bk,
                            &L.bv,
                            &L.q_norm,
                            &L.k_norm,
                            &L.attn_post_norm,
                            &L.ffn_norm,
                            &L.w_gate,
                            &L.w_up,
                            &L.w_down,
                            &L.ffn_post_norm,
                            &L.wq_a,
                            &L.q_a_norm,
                            &L.wq_b,
                            &L.wkv_a,
                            &L.kv_a_norm,
                            &L.exp_probs_b,
                            &L.bo,
                            &L.attn_sinks,
                            &L.ffn_gate_inp_b,
                            &L.ffn_gate_shexp,
                            &L.ffn_up_shexp,
                            &L.ffn_down_shexp,
                            &L.ple_inp_gate,
                            &L.ple_proj,
                            &L.ple_post_norm,
                            &L.layer_output_scale})
      total += bytes(*t);
    for (const auto* v : {&L.wk_b, &L.wv_b})
      for (const Tensor& t : *v) total += bytes(t);
    // MoE: the router, and the experts a token runs (n_expert_used of n_expert, on average).
    total += bytes(L.ffn_gate_inp);
    size_t experts = 0;
    for (const auto* v : {&L.gate_exps, &L.up_exps, &L.down_exps, &L.gate_exps_b, &L.up_exps_b, &L.down_exps_b})
      for (const Tensor& t : *v) experts += bytes(t);
    if (!L.gate_exps.empty())
      total += experts / L.gate_exps.size() * static_cast<size_t>(config.n_expert_used);
  }
  return total;
}

}  // namespace kvserve
