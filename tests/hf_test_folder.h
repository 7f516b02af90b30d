#pragma once
// Test helper: turns one of the golden GGUF files into a Hugging Face model folder (config.json,
// model.safetensors in HF naming and shapes, tokenizer.json), so the HF loader can be checked against
// the GGUF path and, through it, against llama.cpp's goldens. Reusable by forward/logit tests:
//
//   auto dir = kvserve::test::make_hf_folder_from_gguf(gguf_path, tmp_dir, kvserve::DType::F16);
//   auto model = kvserve::load_model(dir);
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/matmul.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/model.h"

namespace kvserve::test {

inline std::string shared_dir() { return KVSERVE_SHARED_DIR; }
inline std::string golden_model(const std::string& file) { return shared_dir() + "/golden/gguf/models/" + file; }
inline std::string hf_fixture_dir(const std::string& name) {
  return std::string(KVSERVE_SOURCE_DIR) + "/tests/data/hf/" + name;
}

// Element i of a F32/F16/BF16 tensor as float.
inline float tensor_value(const Tensor& t, int64_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data);
  if (t.type == DType::F32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t.type == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// Row order of a q/k projection: llama.cpp's converter permutes HF rows (rotate-half pairs (i, i+d/2))
// into interleaved pairs (2i, 2i+1) within each head. This maps an HF row to its GGUF row.
inline int64_t gguf_row_of_hf_row(int64_t hf_row, int64_t head_dim) {
  const int64_t head = hf_row / head_dim, r = hf_row % head_dim, half = head_dim / 2;
  return head * head_dim + 2 * (r % half) + r / half;
}

struct SafetensorsWriter {
  struct Entry {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    std::string dtype = {};  // the header's dtype where it is none of DType's (gpt-oss's U8 MXFP4 blocks)
  };
  std::vector<Entry> entries;

  // Adds `t` (GGUF dims) as an HF tensor of type `type`; rows are taken through `row_map` (HF row →
  // source row), which un-permutes q/k for llama; `offset` is added to every value (-1: Gemma's norms).
  void add(const std::string& name, const Tensor& t, DType type, int64_t rope_head_dim = 0, float offset = 0.0f) {
    Entry e{name, type, {}, {}};
    for (int i = t.n_dims - 1; i >= 0; --i) e.shape.push_back(t.ne[i]);
    const int64_t cols = t.ne[0], rows = t.rows();
    const size_t elem = type == DType::F32 ? 4 : 2;
    e.bytes.resize(static_cast<size_t>(cols * rows) * elem);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src_row = rope_head_dim ? gguf_row_of_hf_row(r, rope_head_dim) : r;
      for (int64_t c = 0; c < cols; ++c) {
        const float f = tensor_value(t, src_row * cols + c) + offset;
        uint8_t* dst = e.bytes.data() + static_cast<size_t>(r * cols + c) * elem;
        if (type == DType::F32) {
          std::memcpy(dst, &f, 4);
        } else {
          const uint16_t h = type == DType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
          std::memcpy(dst, &h, 2);
        }
      }
    }
    entries.push_back(std::move(e));
  }

  // Adds the rows of `parts` (GGUF dims, one row length) one after the other as one HF tensor: Phi-3's fused
  // qkv_proj and gate_up_proj.
  void add_fused(const std::string& name, std::initializer_list<const Tensor*> parts, DType type) {
    std::vector<uint8_t> bytes;
    int64_t rows = 0;
    for (const Tensor* t : parts) {
      add(name, *t, type);
      bytes.insert(bytes.end(), entries.back().bytes.begin(), entries.back().bytes.end());
      rows += t->rows();
      entries.pop_back();
    }
    entries.push_back({name, type, {rows, (*parts.begin())->cols()}, std::move(bytes)});
  }

  void write(const std::string& path) const {
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const Entry& e : entries) {
      header[e.name] = {{"dtype", e.dtype.empty() ? std::string(dtype_name(e.type)) : e.dtype},
                        {"shape", e.shape},
                        {"data_offsets", {offset, offset + e.bytes.size()}}};
      offset += e.bytes.size();
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 8 != 0) text += ' ';  // as safetensors pads, so tensor data is aligned
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const Entry& e : entries) out.write(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
};

// A float tensor [dims...] (safetensors order) filled by f(i) for each flat index i, stored as `type`.
template <typename F>
void add_values(SafetensorsWriter& w, const std::string& name, std::vector<int64_t> shape, F f,
                DType type = DType::F32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(i);
  Tensor t;
  t.type = DType::F32;
  t.ne = {n, 1, 1, 1};
  t.n_dims = 1;
  t.data = v.data();
  w.add(name, t, type);
  w.entries.back().shape = std::move(shape);
}

// gpt-oss's HF names for one layer's attention extras and experts (transformers' GptOssForCausalLM): the output
// bias, the sinks, the router, and gate / up fused with interleaved columns. `mxfp4`: the experts' MXFP4 blocks as
// the published checkpoints hold them (taken from the GGUF file's own blocks, nibbles reordered); else the
// dequantized [experts][in][out] matrices a folder saved by transformers holds.
inline void add_gpt_oss_layer(SafetensorsWriter& w, const ModelConfig& c, const LayerWeights& L, const std::string& p,
                              const GGUFFile& file, int l, bool mxfp4) {
  w.add(p + "self_attn.o_proj.bias", L.bo, DType::F32);
  w.add(p + "self_attn.sinks", L.attn_sinks, DType::F32);
  w.add(p + "mlp.router.weight", L.ffn_gate_inp, DType::F32);
  w.add(p + "mlp.router.bias", L.ffn_gate_inp_b, DType::F32);
  const int64_t n = c.n_expert, E = c.n_embd, F = c.n_ff_exp;
  const std::string x = p + "mlp.experts.";
  const auto bias = [](const std::vector<Tensor>& b, int64_t e, int64_t i) {
    return tensor_value(b[static_cast<size_t>(e)], i);
  };
  add_values(w, x + "gate_up_proj_bias", {n, 2 * F}, [&](int64_t i) {
    const int64_t e = i / (2 * F), j = i % (2 * F);
    return bias(j % 2 == 0 ? L.gate_exps_b : L.up_exps_b, e, j / 2);
  });
  add_values(w, x + "down_proj_bias", {n, E}, [&](int64_t i) { return bias(L.down_exps_b, i / E, i % E); });
  if (mxfp4) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    // HF rows of one projection: gate_up's row 2i is gate's row i, 2i + 1 up's; down's rows are its own.
    const auto write = [&](const std::string& stem, std::vector<const GGUFTensorInfo*> parts, int64_t rows,
                           int64_t cols) {
      const int64_t g = cols / 32, per = static_cast<int64_t>(parts.size());
      std::vector<uint8_t> blocks(static_cast<size_t>(n * rows * g * 16)), scales(static_cast<size_t>(n * rows * g));
      for (int64_t e = 0; e < n; ++e)
        for (int64_t r = 0; r < rows; ++r) {
          const GGUFTensorInfo& src = *parts[static_cast<size_t>(r % per)];
          const int64_t src_row = e * (rows / per) + r / per;
          for (int64_t b = 0; b < g; ++b) {
            const uint8_t* blk17 = src.data + (src_row * g + b) * 17;
            const auto code = [&](int k) { return k < 16 ? blk17[1 + k] & 0xF : blk17[1 + k - 16] >> 4; };
            const size_t at = static_cast<size_t>((e * rows + r) * g + b);
            scales[at] = blk17[0];
            for (int j = 0; j < 16; ++j)
              blocks[at * 16 + static_cast<size_t>(j)] = static_cast<uint8_t>(code(2 * j) | (code(2 * j + 1) << 4));
          }
        }
      w.entries.push_back({stem + "_blocks", DType::F32, {n, rows, g, 16}, std::move(blocks), "U8"});
      w.entries.push_back({stem + "_scales", DType::F32, {n, rows, g}, std::move(scales), "U8"});
    };
    write(x + "gate_up_proj",
          {file.find_tensor(blk + "ffn_gate_exps.weight"), file.find_tensor(blk + "ffn_up_exps.weight")}, 2 * F, E);
    write(x + "down_proj", {file.find_tensor(blk + "ffn_down_exps.weight")}, E, F);
    return;
  }
  // Dequantized: gate_up_proj[e][k][2i (+1)] = gate (up) row i's value k; down_proj[e][f][o] = down row o's value f.
  const auto rows_of = [&](const std::vector<Tensor>& ts) {
    std::vector<float> v;
    for (const Tensor& t : ts) {
      std::vector<float> row(static_cast<size_t>(t.cols()));
      for (int64_t r = 0; r < t.rows(); ++r) {
        dequantize_row(t.type, t.row(r), row.data(), t.cols());
        v.insert(v.end(), row.begin(), row.end());
      }
    }
    return v;
  };
  const std::vector<float> gate = rows_of(L.gate_exps), up = rows_of(L.up_exps), down = rows_of(L.down_exps);
  add_values(w, x + "gate_up_proj", {n, E, 2 * F}, [&](int64_t i) {
    const int64_t e = i / (E * 2 * F), k = i / (2 * F) % E, j = i % (2 * F);
    return (j % 2 == 0 ? gate : up)[static_cast<size_t>((e * F + j / 2) * E + k)];
  });
  add_values(w, x + "down_proj", {n, F, E}, [&](int64_t i) {
    const int64_t e = i / (F * E), f = i / E % F, o = i % E;
    return down[static_cast<size_t>((e * E + o) * F + f)];
  });
}

// DeepSeek's HF names for one layer: MLA with kv_b_proj rebuilt from the file's per-head attn_k_b (transposed
// back) and attn_v_b, q_pe/k_pe rows as they are (its rope pairs are GGUF's), then a dense MLP or the routed
// and shared experts.
inline void add_deepseek_layer(SafetensorsWriter& w, const ModelConfig& c, const LayerWeights& L, const std::string& p,
                               int l, DType matrix_type) {
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank > 0) {
    w.add(a + "q_a_proj.weight", L.wq_a, matrix_type);
    w.add(a + "q_a_layernorm.weight", L.q_a_norm, DType::F32);
    w.add(a + "q_b_proj.weight", L.wq_b, matrix_type);
  } else {
    w.add(a + "q_proj.weight", L.wq, matrix_type);
  }
  w.add(a + "kv_a_proj_with_mqa.weight", L.wkv_a, matrix_type);
  w.add(a + "kv_a_layernorm.weight", L.kv_a_norm, DType::F32);
  const int64_t nope = c.qk_nope_dim(), r = c.kv_lora_rank, vd = c.head_dim_v;
  std::vector<float> kv_b(static_cast<size_t>(c.n_heads * (nope + vd) * r));
  for (int h = 0; h < c.n_heads; ++h) {
    const Tensor &kb = L.wk_b[static_cast<size_t>(h)], &vb = L.wv_b[static_cast<size_t>(h)];
    for (int64_t j = 0; j < nope; ++j)
      for (int64_t i = 0; i < r; ++i) kv_b[static_cast<size_t>((h * (nope + vd) + j) * r + i)] = tensor_value(kb, i * nope + j);
    for (int64_t j = 0; j < vd; ++j)
      for (int64_t i = 0; i < r; ++i) kv_b[static_cast<size_t>((h * (nope + vd) + nope + j) * r + i)] = tensor_value(vb, j * r + i);
  }
  Tensor kv_b_t;
  kv_b_t.type = DType::F32;
  kv_b_t.ne = {r, c.n_heads * (nope + vd), 1, 1};
  kv_b_t.n_dims = 2;
  kv_b_t.data = kv_b.data();
  w.add(a + "kv_b_proj.weight", kv_b_t, matrix_type);
  w.add(a + "o_proj.weight", L.wo, matrix_type);
  w.add(p + "post_attention_layernorm.weight", L.ffn_norm, DType::F32);
  if (!c.moe_layer(l)) {
    w.add(p + "mlp.gate_proj.weight", L.w_gate, matrix_type);
    w.add(p + "mlp.up_proj.weight", L.w_up, matrix_type);
    w.add(p + "mlp.down_proj.weight", L.w_down, matrix_type);
    return;
  }
  w.add(p + "mlp.gate.weight", L.ffn_gate_inp, matrix_type);
  if (L.exp_probs_b.valid()) w.add(p + "mlp.gate.e_score_correction_bias", L.exp_probs_b, DType::F32);
  for (int e = 0; e < c.n_expert; ++e) {
    const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
    w.add(x + "gate_proj.weight", L.gate_exps[static_cast<size_t>(e)], matrix_type);
    w.add(x + "up_proj.weight", L.up_exps[static_cast<size_t>(e)], matrix_type);
    w.add(x + "down_proj.weight", L.down_exps[static_cast<size_t>(e)], matrix_type);
  }
  w.add(p + "mlp.shared_experts.gate_proj.weight", L.ffn_gate_shexp, matrix_type);
  w.add(p + "mlp.shared_experts.up_proj.weight", L.ffn_up_shexp, matrix_type);
  w.add(p + "mlp.shared_experts.down_proj.weight", L.ffn_down_shexp, matrix_type);
}

// Llama 4's HF names for one layer's feed-forward (transformers' Llama4TextMoe / Llama4TextMLP): on an expert
// layer the router, the experts' gate and up fused as [experts][hidden][2 * width] (gate's columns first) and
// down as [experts][width][hidden] (both x @ W), and the shared expert; else a dense SwiGLU.
inline void add_llama4_feed_forward(SafetensorsWriter& w, const ModelConfig& c, const LayerWeights& L,
                                    const std::string& ff, int l, DType matrix_type) {
  if (!c.moe_layer(l)) {
    w.add(ff + "gate_proj.weight", L.w_gate, matrix_type);
    w.add(ff + "up_proj.weight", L.w_up, matrix_type);
    w.add(ff + "down_proj.weight", L.w_down, matrix_type);
    return;
  }
  const int64_t n = c.n_expert, E = c.n_embd, F = c.n_ff_exp;
  w.add(ff + "router.weight", L.ffn_gate_inp, matrix_type);
  add_values(
      w, ff + "experts.gate_up_proj", {n, E, 2 * F},
      [&](int64_t i) {
        const int64_t e = i / (E * 2 * F), k = i / (2 * F) % E, j = i % (2 * F);
        const Tensor& t = (j < F ? L.gate_exps : L.up_exps)[static_cast<size_t>(e)];
        return tensor_value(t, (j % F) * E + k);
      },
      matrix_type);
  add_values(
      w, ff + "experts.down_proj", {n, F, E},
      [&](int64_t i) {
        const int64_t e = i / (F * E), f = i / E % F, d = i % E;
        return tensor_value(L.down_exps[static_cast<size_t>(e)], d * F + f);
      },
      matrix_type);
  w.add(ff + "shared_expert.gate_proj.weight", L.ffn_gate_shexp, matrix_type);
  w.add(ff + "shared_expert.up_proj.weight", L.ffn_up_shexp, matrix_type);
  w.add(ff + "shared_expert.down_proj.weight", L.ffn_down_shexp, matrix_type);
}

// Gemma 4's HF names for one layer's extras (transformers' Gemma4TextDecoderLayer): the per-layer input's gate,
// projection and norm, layer_scalar, and with experts the router (proj, scale, per_expert_scale), the experts' fused
// gate_up_proj [experts][2 * width][hidden] and down_proj [experts][hidden][width], and the three norms around them.
inline void add_gemma4_layer_extras(SafetensorsWriter& w, const ModelConfig& c, const LayerWeights& L,
                                    const std::string& p, DType matrix_type) {
  if (c.n_embd_per_layer > 0) {
    w.add(p + "per_layer_input_gate.weight", L.ple_inp_gate, matrix_type);
    w.add(p + "per_layer_projection.weight", L.ple_proj, matrix_type);
    w.add(p + "post_per_layer_input_norm.weight", L.ple_post_norm, DType::F32);
  }
  add_values(w, p + "layer_scalar", {1},
             [&](int64_t) { return L.layer_output_scale.valid() ? tensor_value(L.layer_output_scale, 0) : 1.0f; });
  if (!c.moe_dense_branch) return;
  const int64_t n = c.n_expert, E = c.n_embd, F = c.n_ff_exp;
  w.add(p + "router.proj.weight", L.ffn_gate_inp, matrix_type);
  w.add(p + "router.scale", L.ffn_gate_inp_scale, DType::F32);
  add_values(w, p + "router.per_expert_scale", {n},
             [&](int64_t e) { return L.down_exps_scale.valid() ? tensor_value(L.down_exps_scale, e) : 1.0f; });
  add_values(
      w, p + "experts.gate_up_proj", {n, 2 * F, E},
      [&](int64_t i) {
        const int64_t e = i / (2 * F * E), r = i / E % (2 * F), k = i % E;
        const Tensor& t = (r < F ? L.gate_exps : L.up_exps)[static_cast<size_t>(e)];
        return tensor_value(t, (r % F) * E + k);
      },
      matrix_type);
  add_values(
      w, p + "experts.down_proj", {n, E, F},
      [&](int64_t i) { return tensor_value(L.down_exps[static_cast<size_t>(i / (E * F))], i % (E * F)); }, matrix_type);
  w.add(p + "post_feedforward_layernorm_1.weight", L.ffn_post_norm_1, DType::F32);
  w.add(p + "pre_feedforward_layernorm_2.weight", L.ffn_pre_norm_2, DType::F32);
  w.add(p + "post_feedforward_layernorm_2.weight", L.ffn_post_norm_2, DType::F32);
}

// Gemma 4's config.json keys (Gemma4TextConfig): the sliding layers' head size and KV heads as the base, the full
// layers' as global_head_dim and num_global_key_value_heads (with attention_k_eq_v) or per_layer_config (as
// transformers 5 saves it), RoPE per layer type (proportional on the full ones: rope_freqs' rotating pairs), KV
// sharing, double-wide FFNs, per-layer embeddings, experts.
inline void add_gemma4_config(nlohmann::json& config, const ModelConfig& c, bool values_are_keys) {
  int first_swa = -1, first_full = -1;
  for (int l = c.n_layers - 1; l >= 0; --l) (c.is_swa_layer(l) ? first_swa : first_full) = l;
  const int base_kv = first_swa >= 0 ? c.kv_heads_of(first_swa) : c.n_kv_heads;
  config["architectures"] = {"Gemma4ForCausalLM"};
  config["model_type"] = "gemma4_text";
  for (const char* key :
       {"query_pre_attn_scalar", "attn_logit_softcapping", "rope_theta", "rope_scaling", "rope_local_base_freq"})
    config.erase(key);
  config["head_dim"] = c.head_dim_of(first_swa >= 0 ? first_swa : 0);
  config["num_key_value_heads"] = base_kv;
  const int first_shared = c.n_layers - c.n_kv_shared_layers;
  config["intermediate_size"] = c.n_ff_of(0);
  const bool double_wide = !c.layer_n_ff.empty();
  for (int l = 0; l < c.n_layers; ++l)
    if (c.n_ff_of(l) != c.n_ff_of(0) * (double_wide && l >= first_shared ? 2 : 1))
      throw std::runtime_error("gemma4 test folder: FFN widths HF's use_double_wide_mlp cannot give");
  config["use_double_wide_mlp"] = double_wide;
  config["num_kv_shared_layers"] = c.n_kv_shared_layers;
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < c.n_layers; ++l) types.push_back(c.is_swa_layer(l) ? "sliding_attention" : "full_attention");
  config["layer_types"] = types;
  config["sliding_window"] = c.sliding_window;
  const std::vector<float>& f = c.rope_scaling.freq_factors;
  const auto rotated = static_cast<int>(std::count(f.begin(), f.end(), 1.0f));
  nlohmann::json full = {{"rope_type", "default"}, {"rope_theta", c.rope_base}};
  if (!f.empty())
    full = {{"rope_type", "proportional"},
            {"partial_rotary_factor", 2.0 * rotated / c.head_dim},
            {"rope_theta", c.rope_base}};
  config["rope_parameters"] = {{"full_attention", full},
                               {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_base_swa}}}};
  config["attention_k_eq_v"] = values_are_keys;
  if (values_are_keys) {
    config["global_head_dim"] = c.head_dim;
    config["num_global_key_value_heads"] = c.kv_heads_of(first_full);
  } else {
    nlohmann::json per_layer = nlohmann::json::object();
    for (int l = 0; l < c.n_layers; ++l)
      if (!c.is_swa_layer(l))
        per_layer[std::to_string(l)] = {{"head_dim", c.head_dim}, {"num_key_value_heads", c.kv_heads_of(l)}};
    config["per_layer_config"] = per_layer;
  }
  config["hidden_size_per_layer_input"] = c.n_embd_per_layer;
  config["vocab_size_per_layer_input"] = c.n_vocab;
  config["enable_moe_block"] = c.moe_dense_branch;
  if (c.moe_dense_branch) {
    config["num_experts"] = c.n_expert;
    config["top_k_experts"] = c.n_expert_used;
    config["moe_intermediate_size"] = c.n_ff_exp;
  }
}

// Writes an HF folder for `gguf_path` into `dir` with 2-D weights stored as `matrix_type` (norms and
// biases F32, as HF F32 checkpoints have them; pass F16/BF16 only where the GGUF holds exactly that
// type or F16→F32 for exactness). llama q/k rows are permuted back to HF's rotate-half order; qwen2 and
// qwen3 GGUF rows are already in that order. The tokenizer is the stories512 fixture (the vocabulary of
// every tiny-* golden file).
inline std::string make_hf_folder_from_gguf(const std::string& gguf_path, const std::string& dir, DType matrix_type,
                                            bool mxfp4_experts = true) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  auto g = load_gguf_model(gguf_path);
  const GGUFFile file(gguf_path);
  const ModelConfig& c = g->config;
  // Llama 4's checkpoints keep GGUF's interleaved q / k rows (its RoPE rotates pairs (2i, 2i + 1)).
  const bool permute_qk = c.rope_style == RopeStyle::Interleaved && c.arch != "llama4";

  SafetensorsWriter w;
  // Gemma's HF norms hold w where its GGUF holds 1 + w (Gemma 4's hold w in both).
  const bool gemma = c.arch.starts_with("gemma"), gemma4 = c.arch == "gemma4";
  const auto add_norm = [&](const std::string& name, const Tensor& t) {
    w.add(name, t, DType::F32, 0, gemma && !gemma4 ? -1.0f : 0.0f);
  };
  // Gemma 4's attention_k_eq_v: no full layer with its own KV has attn_v. Without it, a full layer lacking attn_v
  // gets its keys' projection as v_proj, the same values.
  bool values_are_keys = gemma4;
  for (int l = 0; l < c.n_layers; ++l)
    if (gemma4 && !c.is_swa_layer(l) && c.has_own_kv(l) && g->layers[static_cast<size_t>(l)].wv.valid())
      values_are_keys = false;
  w.add("model.embed_tokens.weight", g->tok_embd, matrix_type);
  if (c.n_embd_per_layer > 0) {
    w.add("model.embed_tokens_per_layer.weight", g->per_layer_token_embd, matrix_type);
    w.add("model.per_layer_model_projection.weight", g->per_layer_model_proj, matrix_type);
    add_norm("model.per_layer_projection_norm.weight", g->per_layer_proj_norm);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = g->layers[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (c.pre_norms) add_norm(p + "input_layernorm.weight", L.attn_norm);
    if (c.mla()) {
      add_deepseek_layer(w, c, L, p, l, matrix_type);
      continue;
    }
    if (c.arch == "phi3") {
      w.add_fused(p + "self_attn.qkv_proj.weight", {&L.wq, &L.wk, &L.wv}, matrix_type);
    } else if (gemma4) {  // layers on another's KV have neither k_proj nor v_proj
      w.add(p + "self_attn.q_proj.weight", L.wq, matrix_type);
      if (c.has_own_kv(l)) w.add(p + "self_attn.k_proj.weight", L.wk, matrix_type);
      if (c.has_own_kv(l) && !(values_are_keys && !c.is_swa_layer(l)))
        w.add(p + "self_attn.v_proj.weight", L.wv.valid() ? L.wv : L.wk, matrix_type);
    } else {
      w.add(p + "self_attn.q_proj.weight", L.wq, matrix_type, permute_qk ? c.head_dim : 0);
      w.add(p + "self_attn.k_proj.weight", L.wk, matrix_type, permute_qk ? c.head_dim : 0);
      w.add(p + "self_attn.v_proj.weight", L.wv, matrix_type);
    }
    w.add(p + "self_attn.o_proj.weight", L.wo, matrix_type);
    if (c.qkv_bias) {
      w.add(p + "self_attn.q_proj.bias", L.bq, DType::F32);
      w.add(p + "self_attn.k_proj.bias", L.bk, DType::F32);
      w.add(p + "self_attn.v_proj.bias", L.bv, DType::F32);
    }
    if (c.qk_norm) {
      add_norm(p + "self_attn.q_norm.weight", L.q_norm);
      if (L.k_norm.valid()) add_norm(p + "self_attn.k_norm.weight", L.k_norm);
    }
    if (c.post_norms) {
      add_norm(p + "post_attention_layernorm.weight", L.attn_post_norm);
      if (c.pre_norms) add_norm(p + "pre_feedforward_layernorm.weight", L.ffn_norm);
      add_norm(p + "post_feedforward_layernorm.weight", L.ffn_post_norm);
    } else {
      add_norm(p + "post_attention_layernorm.weight", L.ffn_norm);
    }
    if (c.arch == "gpt-oss") {
      add_gpt_oss_layer(w, c, L, p, file, l, mxfp4_experts);
      continue;
    }
    if (gemma4) add_gemma4_layer_extras(w, c, L, p, matrix_type);
    if (c.arch == "llama4") {
      add_llama4_feed_forward(w, c, L, p + "feed_forward.", l, matrix_type);
      continue;
    }
    if (c.moe() && !gemma4) {
      // Qwen3-MoE's names, or Mixtral's (a llama file with experts).
      const bool mixtral = c.arch == "llama";
      const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
      w.add(moe + "gate.weight", L.ffn_gate_inp, matrix_type);
      for (int e = 0; e < c.n_expert; ++e) {
        const std::string x = moe + "experts." + std::to_string(e) + ".";
        const size_t i = static_cast<size_t>(e);
        w.add(x + (mixtral ? "w1.weight" : "gate_proj.weight"), L.gate_exps[i], matrix_type);
        w.add(x + (mixtral ? "w3.weight" : "up_proj.weight"), L.up_exps[i], matrix_type);
        w.add(x + (mixtral ? "w2.weight" : "down_proj.weight"), L.down_exps[i], matrix_type);
      }
      if (c.arch == "qwen2moe") {  // Qwen2-MoE's shared expert, and its gate as the [1, hidden] linear it is
        w.add(moe + "shared_expert.gate_proj.weight", L.ffn_gate_shexp, matrix_type);
        w.add(moe + "shared_expert.up_proj.weight", L.ffn_up_shexp, matrix_type);
        w.add(moe + "shared_expert.down_proj.weight", L.ffn_down_shexp, matrix_type);
        const auto* gate = static_cast<const float*>(L.ffn_gate_inp_shexp.data);
        add_values(w, moe + "shared_expert_gate.weight", {1, c.n_embd}, [&](int64_t i) { return gate[i]; });
      }
      continue;
    }
    if (c.arch == "phi3") {
      w.add_fused(p + "mlp.gate_up_proj.weight", {&L.w_gate, &L.w_up}, matrix_type);
    } else {
      w.add(p + "mlp.gate_proj.weight", L.w_gate, matrix_type);
      w.add(p + "mlp.up_proj.weight", L.w_up, matrix_type);
    }
    w.add(p + "mlp.down_proj.weight", L.w_down, matrix_type);
  }
  add_norm("model.norm.weight", g->output_norm);
  if (!c.tied_output) w.add("lm_head.weight", g->output, matrix_type);
  w.write((fs::path(dir) / "model.safetensors").string());

  nlohmann::json config = {
      {"architectures",
       {c.arch == "qwen2"       ? "Qwen2ForCausalLM"
        : c.arch == "qwen3"     ? "Qwen3ForCausalLM"
        : c.arch == "qwen3moe"  ? "Qwen3MoeForCausalLM"
        : c.arch == "qwen2moe"  ? "Qwen2MoeForCausalLM"
        : c.arch == "deepseek2" ? (c.expert_gating == ModelConfig::ExpertGating::Sigmoid ? "DeepseekV3ForCausalLM"
                                                                                         : "DeepseekV2ForCausalLM")
        : c.arch == "gpt-oss"   ? "GptOssForCausalLM"
        : c.arch == "llama4"    ? "Llama4ForCausalLM"
        : c.moe()               ? "MixtralForCausalLM"
        : c.arch == "gemma"     ? "GemmaForCausalLM"
        : c.arch == "gemma2"    ? "Gemma2ForCausalLM"
        : c.arch == "gemma3"    ? "Gemma3ForCausalLM"
        : c.arch == "phi3"      ? "Phi3ForCausalLM"
        : c.arch == "smollm3"   ? "SmolLM3ForCausalLM"
        : c.arch == "granite"   ? "GraniteForCausalLM"
        : c.arch == "mistral3"  ? "Ministral3ForCausalLM"
        : c.arch == "olmo2"     ? (c.sliding_window > 0 ? "Olmo3ForCausalLM" : "Olmo2ForCausalLM")
                                : "LlamaForCausalLM"}},
      // transformers' name for the model type (GGUF's qwen3moe is its qwen3_moe, gemma3 its gemma3_text (the text
      // model); a llama with experts, mixtral).
      {"model_type", c.arch == "qwen3moe"                        ? "qwen3_moe"
                     : c.arch == "qwen2moe"                      ? "qwen2_moe"
                     : c.arch == "gemma3"                        ? "gemma3_text"
                     : c.arch == "mistral3"                      ? "ministral3"
                     : c.arch == "olmo2" && c.sliding_window > 0 ? "olmo3"
                     : c.arch == "llama" && c.moe()              ? "mixtral"
                     : c.arch == "gpt-oss"                       ? "gpt_oss"
                     : c.arch == "llama4"                        ? "llama4_text"
                                                                 : c.arch},
      {"hidden_size", c.n_embd},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"intermediate_size", c.n_ff},
      {"max_position_embeddings", c.n_ctx_train},
      {"rms_norm_eps", c.rms_eps},
      {"rope_theta", c.rope_base},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", c.tied_output},
      {"vocab_size", c.n_vocab},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", matrix_type == DType::F32   ? "float32"
                      : matrix_type == DType::F16 ? "float16"
                                                  : "bfloat16"},
  };
  if (c.arch == "granite") {
    config["embedding_multiplier"] = c.embd_scale;
    config["residual_multiplier"] = c.residual_scale;
    config["attention_multiplier"] = c.attn_scale;
    config["logits_scaling"] = c.logit_scale;
  }
  if (c.arch == "qwen3moe" || c.arch == "qwen2moe") {
    config["num_experts"] = c.n_expert;
    config["num_experts_per_tok"] = c.n_expert_used;
    config["moe_intermediate_size"] = c.n_ff_exp;
    config["norm_topk_prob"] = c.expert_weights_norm;
    if (c.arch == "qwen2moe") {
      config["shared_expert_intermediate_size"] = c.shared_ffn_width();
      config["qkv_bias"] = c.qkv_bias;
      config["use_sliding_window"] = false;
    }
  } else if (c.moe() && !c.mla()) {
    config["num_local_experts"] = c.n_expert;
    config["num_experts_per_tok"] = c.n_expert_used;
    config["intermediate_size"] = c.n_ff_exp;
  }
  if (c.arch == "gpt-oss") {  // as gpt-oss's published config
    config["num_local_experts"] = c.n_expert;
    config["num_experts_per_tok"] = c.n_expert_used;
    config["intermediate_size"] = c.n_ff_exp;
    config["attention_bias"] = true;
    config["swiglu_limit"] = c.swiglu_limit;
    config["sliding_window"] = c.sliding_window;
    nlohmann::json types = nlohmann::json::array();
    for (int l = 0; l < c.n_layers; ++l) types.push_back(c.is_swa_layer(l) ? "sliding_attention" : "full_attention");
    config["layer_types"] = types;
    if (mxfp4_experts) config["quantization_config"] = {{"quant_method", "mxfp4"}};
  }
  if (c.arch == "llama4") {  // as Llama4TextConfig names it
    config["intermediate_size"] = c.n_ff_exp;
    config["intermediate_size_mlp"] = c.n_ff;
    config["interleave_moe_layer_step"] = c.moe_layer_step;
    config["use_qk_norm"] = c.qk_l2_norm;
    nlohmann::json rotates = nlohmann::json::array();
    for (int l = 0; l < c.n_layers; ++l) rotates.push_back(c.uses_rope(l) ? 1 : 0);
    config["no_rope_layers"] = rotates;
    config["attention_chunk_size"] = c.swa_chunked ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
    config["attn_temperature_tuning"] = c.has_attn_temperature();
    if (c.has_attn_temperature()) {
      config["floor_scale"] = c.attn_temp_length;
      config["attn_scale"] = c.attn_temp_scale;
    }
    // Scout's Llama 3 scaling (low_freq_factor = high_freq_factor: a pair is scaled by the factor where its
    // wavelength exceeds the original context), recovered from the file's per-pair factors.
    const std::vector<float>& f = c.rope_scaling.freq_factors;
    if (!f.empty()) {
      size_t first = 0;
      while (first < f.size() && f[first] == 1.0f) ++first;
      if (first == 0 || first == f.size()) throw std::runtime_error("llama4 test folder: unexpected rope_freqs");
      const auto wavelen = [&](size_t i) {
        return 2 * M_PI / std::pow(static_cast<double>(c.rope_base), -2.0 * static_cast<double>(i) / c.n_rot);
      };
      config["rope_scaling"] = {{"rope_type", "llama3"},
                                {"factor", f[first]},
                                {"low_freq_factor", 1.0},
                                {"high_freq_factor", 1.0},
                                {"original_max_position_embeddings", static_cast<int64_t>(wavelen(first))}};
      if (std::floor(wavelen(first)) <= wavelen(first - 1) || std::floor(wavelen(first)) == wavelen(first))
        throw std::runtime_error("llama4 test folder: rope_freqs give no whole original context");
    }
  }
  if (c.mla()) {  // as DeepSeek's published configs
    const bool v3 = c.expert_gating == ModelConfig::ExpertGating::Sigmoid;
    config["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
    config["num_key_value_heads"] = c.n_heads;
    config["kv_lora_rank"] = c.kv_lora_rank;
    config["q_lora_rank"] = c.q_lora_rank > 0 ? nlohmann::json(c.q_lora_rank) : nlohmann::json(nullptr);
    config["qk_nope_head_dim"] = c.qk_nope_dim();
    config["qk_rope_head_dim"] = c.n_rot;
    config["v_head_dim"] = c.head_dim_v;
    config.erase("head_dim");
    config["n_routed_experts"] = c.n_expert;
    config["num_experts_per_tok"] = c.n_expert_used;
    config["moe_intermediate_size"] = c.n_ff_exp;
    config["n_shared_experts"] = c.n_expert_shared;
    config["first_k_dense_replace"] = c.n_layer_dense_lead;
    config["routed_scaling_factor"] = c.expert_weights_scale > 0 ? c.expert_weights_scale : 1.0f;
    config["norm_topk_prob"] = c.expert_weights_norm;
    config["scoring_func"] = c.expert_gating == ModelConfig::ExpertGating::Sigmoid ? "sigmoid" : "softmax";
    config["topk_method"] = c.n_expert_groups > 1 ? "noaux_tc" : "greedy";
    if (c.n_expert_groups > 1) {
      config["n_group"] = c.n_expert_groups;
      config["topk_group"] = c.n_group_used;
    }
  }
  if (c.n_rot != c.head_dim && !c.mla()) config["partial_rotary_factor"] = static_cast<double>(c.n_rot) / c.head_dim;
  if (c.rope_scaling.type == RopeScaling::Type::LongRope) {
    // As Phi-3 128k configs: the factors, and the original context beside max_position_embeddings (the
    // attention factor follows from the two, as transformers computes it).
    config["rope_scaling"] = {{"type", "longrope"},
                              {"long_factor", c.rope_scaling.long_factors},
                              {"short_factor", c.rope_scaling.short_factors}};
    config["original_max_position_embeddings"] = c.rope_scaling.original_context;
  }
  if (c.rope_scaling.type == RopeScaling::Type::Yarn) {
    config["rope_scaling"] = {{"rope_type", "yarn"},
                              {"factor", c.rope_scaling.factor},
                              {"original_max_position_embeddings", c.rope_scaling.original_context}};
    if (c.rope_scaling.yarn_log_mul != 0.0f) {  // DeepSeek's mscale = mscale_all_dim
      config["rope_scaling"]["mscale"] = c.rope_scaling.yarn_log_mul;
      config["rope_scaling"]["mscale_all_dim"] = c.rope_scaling.yarn_log_mul;
    }
    if (c.arch == "gpt-oss") {
      config["rope_scaling"]["beta_fast"] = c.rope_scaling.yarn_beta_fast;
      config["rope_scaling"]["beta_slow"] = c.rope_scaling.yarn_beta_slow;
      config["rope_scaling"]["truncate"] = c.rope_scaling.yarn_truncate;
    }
    if (c.arch == "mistral3") {  // as Ministral 3's configs: mscale and mscale_all_dim 1, the temperature's beta
      config["rope_scaling"]["mscale"] = 1.0;
      config["rope_scaling"]["mscale_all_dim"] = 1.0;
      config["rope_scaling"]["beta_fast"] = c.rope_scaling.yarn_beta_fast;
      config["rope_scaling"]["beta_slow"] = c.rope_scaling.yarn_beta_slow;
      if (c.has_attn_temperature()) {
        config["rope_scaling"]["llama_4_scaling_beta"] = c.attn_temp_scale;
        config["rope_scaling"]["original_max_position_embeddings"] = c.attn_temp_length;
      }
    }
  }
  if (c.arch == "olmo2" && c.sliding_window > 0) {  // OLMo 3: its window, one type per layer, RoPE per type
    config["sliding_window"] = c.sliding_window;
    config.erase("rope_theta");
    config.erase("rope_scaling");
    config["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_base}}},
                                 {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_base_swa}}}};
    nlohmann::json types = nlohmann::json::array();
    for (int l = 0; l < c.n_layers; ++l) types.push_back(c.is_swa_layer(l) ? "sliding_attention" : "full_attention");
    config["layer_types"] = types;
  }
  if (gemma) {
    config["hidden_activation"] = "gelu_pytorch_tanh";
    config["query_pre_attn_scalar"] = c.head_dim;
    if (c.post_norms) {
      config["final_logit_softcapping"] = c.final_logit_softcap > 0 ? nlohmann::json(c.final_logit_softcap) : nullptr;
      config["attn_logit_softcapping"] = c.attn_softcap > 0 ? nlohmann::json(c.attn_softcap) : nullptr;
      config["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
      if (c.arch == "gemma3") config["rope_local_base_freq"] = c.rope_base_swa;
      // Gemma 3 as newer transformers write it (one type per layer); Gemma 2 by its fixed every-other pattern.
      if (c.arch == "gemma3" && c.sliding_window > 0) {
        nlohmann::json types = nlohmann::json::array();
        for (int l = 0; l < c.n_layers; ++l) types.push_back(c.is_swa_layer(l) ? "sliding_attention" : "full_attention");
        config["layer_types"] = types;
      }
    }
  }
  if (gemma4) add_gemma4_config(config, c, values_are_keys);
  std::ofstream(fs::path(dir) / "config.json") << config.dump(2);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(hf_fixture_dir("stories512")) / f, fs::path(dir) / f,
                  fs::copy_options::overwrite_existing);
  return dir;
}

}  // namespace kvserve::test
