// The mixture-of-experts feed-forward of a forward step (ModelRunner::moe_ffn), as llama.cpp's build_moe_ffn
// computes it for Qwen3-MoE and Mixtral: router logits, softmax over every expert, the n_expert_used most
// probable, their probabilities renormalized to sum 1 (unless the model says not: HF's norm_topk_prob);
// each chosen expert's SwiGLU on the token; the
// experts' outputs times their weights, added in rank order; the sum onto the residual stream.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/grow_only.h"
#include "engine/model_runner.h"
#include "kernels/cpu/ops.h"

namespace kvserve {

void ModelRunner::route_tokens(const LayerWeights& L, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t n_exp = c.n_expert, k = c.n_expert_used;
  moe_logits_.resize(static_cast<size_t>(n_tokens * n_exp));
  matmul(L.ffn_gate_inp, xn_.data(), n_tokens, moe_logits_.data(), pool_);
  moe_choice_.resize(static_cast<size_t>(n_tokens * k));
  moe_weight_.resize(static_cast<size_t>(n_tokens * k));
  std::vector<int32_t> order(static_cast<size_t>(n_exp));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* p = moe_logits_.data() + t * n_exp;
    // Softmax as ggml_soft_max: exp(x - max) in float, summed in double, times 1 / sum in float.
    const float mx = *std::max_element(p, p + n_exp);
    double sum = 0;
    for (int64_t e = 0; e < n_exp; ++e) sum += (p[e] = std::exp(p[e] - mx));
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < n_exp; ++e) p[e] *= inv;
    // The k most probable, in descending order (ties: the lower index first).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float wsum = 0;
    for (int64_t j = 0; j < k; ++j) wsum += p[order[static_cast<size_t>(j)]];
    // As llama.cpp: the sum clamped to f16's smallest normal, then each weight divided by it (or, without
    // renormalization, the probabilities themselves).
    wsum = c.expert_weights_norm ? std::max(wsum, 6.103515625e-5f) : 1.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      moe_choice_[static_cast<size_t>(t * k + j)] = e;
      moe_weight_[static_cast<size_t>(t * k + j)] = p[e] / wsum;
    }
  }
}

void ModelRunner::moe_ffn(const LayerWeights& L, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, F = c.n_ff_exp, k = c.n_expert_used;
  normalize_tokens(static_cast<const float*>(L.ffn_norm.data), n_tokens);
  route_tokens(L, n_tokens);
  // Each expert runs once on every (token, rank) routed to it: its rows gathered, projected as a batch.
  moe_out_.resize(static_cast<size_t>(n_tokens * k * E));
  std::vector<int64_t> slots;
  for (int e = 0; e < c.n_expert; ++e) {
    slots.clear();
    for (int64_t s = 0; s < n_tokens * k; ++s)
      if (moe_choice_[static_cast<size_t>(s)] == e) slots.push_back(s);
    if (slots.empty()) continue;
    const auto n = static_cast<int64_t>(slots.size());
    grow_to(moe_in_, n * E);
    grow_to(moe_gate_, n * F);
    grow_to(moe_up_, n * F);
    grow_to(moe_down_, n * E);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(xn_.data() + slots[static_cast<size_t>(i)] / k * E, E, moe_in_.data() + i * E);
    const size_t ei = static_cast<size_t>(e);
    const MatmulOutput gate_up[] = {{&L.gate_exps[ei], moe_gate_.data()}, {&L.up_exps[ei], moe_up_.data()}};
    matmul_shared_input(gate_up, moe_in_.data(), n, pool_);
    for (int64_t i = 0; i < n; ++i)
      ffn_activation(moe_gate_.data() + i * F, moe_up_.data() + i * F, moe_gate_.data() + i * F, F);
    matmul(L.down_exps[ei], moe_gate_.data(), n, moe_down_.data(), pool_);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(moe_down_.data() + i * E, E, moe_out_.data() + slots[static_cast<size_t>(i)] * E);
  }
  // Per token: (w_0 * out_0) + (w_1 * out_1) + ..., each product rounded, summed in rank order, then onto x.
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* x = x_.data() + t * E;
    float* acc = tmp_.data();
    for (int64_t j = 0; j < k; ++j) {
      const float w = moe_weight_[static_cast<size_t>(t * k + j)];
      const float* o = moe_out_.data() + (t * k + j) * E;
      for (int64_t d = 0; d < E; ++d) acc[d] = j == 0 ? o[d] * w : acc[d] + o[d] * w;
    }
    for (int64_t d = 0; d < E; ++d) x[d] = acc[d] + x[d];
  }
}

}  // namespace kvserve
