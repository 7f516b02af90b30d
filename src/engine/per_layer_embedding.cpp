// Gemma 4's per-layer embeddings, as llama.cpp's llama_model_gemma4 (project_per_layer_inputs and the block's end)
// and transformers' Gemma4TextModel compute them.
#include <cmath>

#include "engine/model_runner.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

void ModelRunner::per_layer_inputs(std::span<const BatchSequence> batch, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, P = c.n_embd_per_layer, LP = int64_t{c.n_layers} * P;
  // The projection of each token's scaled embedding (x_ holds it), over sqrt(n_embd), RMS-normed per layer's share...
  matmul(model_.per_layer_model_proj, x_.data(), n_tokens, ple_.data(), pool_);
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(E));
  const float token_scale = std::sqrt(static_cast<float>(P));
  const float sum_scale = 1.0f / std::sqrt(2.0f);
  const auto* norm = static_cast<const float*>(model_.per_layer_proj_norm.data);
  std::vector<float>& row = ple_row_;
  row.resize(static_cast<size_t>(LP));
  int64_t t = 0;
  for (const BatchSequence& s : batch)
    for (const int32_t id : s.tokens) {
      float* in = ple_.data() + t * LP;
      scale_inplace(in, LP, proj_scale);
      for (int l = 0; l < c.n_layers; ++l) rmsnorm(in + l * P, norm, in + l * P, static_cast<int>(P), c.rms_eps);
      // ...plus the token's own row times sqrt(n_embd_per_layer), the sum over sqrt(2).
      dequantize_row(model_.per_layer_token_embd.type, model_.per_layer_token_embd.row(id), row.data(), LP);
      for (int64_t i = 0; i < LP; ++i) in[i] = (in[i] + row[static_cast<size_t>(i)] * token_scale) * sum_scale;
      ++t;
    }
}

void ModelRunner::add_per_layer_embedding(const LayerWeights& L, int il, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, P = c.n_embd_per_layer, LP = int64_t{c.n_layers} * P;
  // x += post_norm(proj(gelu(inp_gate x) * the layer's input)).
  matmul(L.ple_inp_gate, x_.data(), n_tokens, ple_gate_.data(), pool_);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* g = ple_gate_.data() + t * P;
    gelu(g, ple_.data() + t * LP + il * P, g, P);
  }
  matmul(L.ple_proj, ple_gate_.data(), n_tokens, tmp_.data(), pool_);
  const auto* post_norm = static_cast<const float*>(L.ple_post_norm.data);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* y = tmp_.data() + t * E;
    rmsnorm(y, post_norm, y, static_cast<int>(E), c.rms_eps);
    add_inplace(x_.data() + t * E, y, E);
  }
}

}  // namespace kvserve
