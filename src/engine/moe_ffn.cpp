// The mixture-of-experts feed-forward of a forward step (ModelRunner::moe_ffn), as llama.cpp's build_moe_ffn
// computes it for Qwen3-MoE, Mixtral, DeepSeek, gpt-oss and Llama 4: router logits, softmax over every expert
// (DeepSeek-V3: sigmoid, a selection bias, groups; gpt-oss: a bias, the softmax over the chosen; see ModelConfig), the
// n_expert_used most probable, their probabilities renormalized to sum 1 (unless the model says not: HF's
// norm_topk_prob); each chosen expert's SwiGLU on the token; the experts' outputs times their weights, added in rank
// order; the sum onto the residual stream. Llama 4: the top logits' sigmoids, each applied to the token before its
// expert.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/grow_only.h"
#include "engine/model_runner.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

namespace {
// DeepSeek's group-limited routing: the experts in n_groups equal groups, each group scored by the sum of its
// two best selection scores (V3, and llama.cpp for every deepseek2 file) or its best one (V2's HF code), every
// expert outside the n_used best groups set to -inf.
void mask_expert_groups(float* sel, int64_t n_exp, int64_t n_groups, int64_t n_used, bool by_max) {
  const int64_t per = n_exp / n_groups;
  std::vector<float> score(static_cast<size_t>(n_groups));
  for (int64_t g = 0; g < n_groups; ++g) {
    float best = -INFINITY, second = -INFINITY;
    for (int64_t e = g * per; e < (g + 1) * per; ++e) {
      if (sel[e] > best) {
        second = best;
        best = sel[e];
      } else if (sel[e] > second) {
        second = sel[e];
      }
    }
    score[static_cast<size_t>(g)] = per > 1 && !by_max ? best + second : best;
  }
  std::vector<int64_t> groups(static_cast<size_t>(n_groups));
  std::iota(groups.begin(), groups.end(), 0);
  std::partial_sort(groups.begin(), groups.begin() + n_used, groups.end(), [&](int64_t a, int64_t b) {
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)] ||
           (score[static_cast<size_t>(a)] == score[static_cast<size_t>(b)] && a < b);
  });
  std::vector<bool> keep(static_cast<size_t>(n_groups), false);
  for (int64_t i = 0; i < n_used; ++i) keep[static_cast<size_t>(groups[static_cast<size_t>(i)])] = true;
  for (int64_t e = 0; e < n_exp; ++e)
    if (!keep[static_cast<size_t>(e / per)]) sel[e] = -INFINITY;
}
}  // namespace

void ModelRunner::route_tokens(const LayerWeights& L, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t n_exp = c.n_expert, k = c.n_expert_used;
  moe_logits_.resize(static_cast<size_t>(n_tokens * n_exp));
  matmul(L.ffn_gate_inp, xn_.data(), n_tokens, moe_logits_.data(), pool_);
  moe_choice_.resize(static_cast<size_t>(n_tokens * k));
  moe_weight_.resize(static_cast<size_t>(n_tokens * k));
  std::vector<int32_t> order(static_cast<size_t>(n_exp));
  moe_select_.resize(static_cast<size_t>(n_exp));
  const bool biased = L.exp_probs_b.valid();
  const auto* bias = static_cast<const float*>(L.exp_probs_b.data);
  const int64_t n_groups = c.n_expert_groups > 1 ? c.n_expert_groups : 0;
  const bool softmax_chosen = c.expert_gating == ModelConfig::ExpertGating::SoftmaxWeight;
  const bool sigmoid_chosen = c.expert_gating == ModelConfig::ExpertGating::SigmoidChosen;
  const auto* router_bias = static_cast<const float*>(L.ffn_gate_inp_b.data);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* p = moe_logits_.data() + t * n_exp;
    if (router_bias != nullptr) add_inplace(p, router_bias, n_exp);
    if (softmax_chosen || sigmoid_chosen) {
      // gpt-oss: the scores are the logits; the chosen ones' weights are softmaxed below. Llama 4: the chosen
      // ones' weights are their logits' sigmoids (a sigmoid of saturated logits would tie them).
    } else if (c.expert_gating == ModelConfig::ExpertGating::Sigmoid) {
      for (int64_t e = 0; e < n_exp; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    } else {
      // Softmax as ggml_soft_max: exp(x - max) in float, summed in double, times 1 / sum in float.
      const float mx = *std::max_element(p, p + n_exp);
      double sum = 0;
      for (int64_t e = 0; e < n_exp; ++e) sum += (p[e] = std::exp(p[e] - mx));
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t e = 0; e < n_exp; ++e) p[e] *= inv;
    }
    // Experts are chosen by their scores plus the selection bias (DeepSeek-V3); their weights are the scores.
    float* sel = moe_select_.data();
    for (int64_t e = 0; e < n_exp; ++e) sel[e] = biased ? p[e] + bias[e] : p[e];
    if (n_groups > 0) mask_expert_groups(sel, n_exp, n_groups, c.n_group_used, c.expert_group_score_max);
    // The k best, in descending order (ties: the lower index first).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return sel[a] > sel[b] || (sel[a] == sel[b] && a < b); });
    if (softmax_chosen) {
      // As ggml_soft_max over the k chosen logits, in rank order (the max taken first, the sum in double).
      float mx = -INFINITY;
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, p[order[static_cast<size_t>(j)]]);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = order[static_cast<size_t>(j)];
        moe_choice_[static_cast<size_t>(t * k + j)] = e;
        sum += (moe_weight_[static_cast<size_t>(t * k + j)] = std::exp(p[e] - mx));
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < k; ++j) moe_weight_[static_cast<size_t>(t * k + j)] *= inv;
      continue;
    }
    float wsum = 0;
    for (int64_t j = 0; j < k; ++j) wsum += p[order[static_cast<size_t>(j)]];
    // As llama.cpp: the sum clamped to f16's smallest normal, then each weight divided by it (or, without
    // renormalization, the probabilities themselves); then DeepSeek's scale.
    wsum = c.expert_weights_norm ? std::max(wsum, 6.103515625e-5f) : 1.0f;
    const float scale = c.expert_weights_scale;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      moe_choice_[static_cast<size_t>(t * k + j)] = e;
      const float pe = sigmoid_chosen ? 1.0f / (1.0f + std::exp(-p[e])) : p[e];
      float w = c.expert_weights_norm ? pe / wsum : pe;
      if (scale != 0.0f && scale != 1.0f) w *= scale;
      moe_weight_[static_cast<size_t>(t * k + j)] = w;
    }
  }
}

void ModelRunner::moe_ffn(const LayerWeights& L, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, k = c.n_expert_used;
  normalize_tokens(static_cast<const float*>(L.ffn_norm.data), n_tokens);
  route_tokens(L, n_tokens);
  const bool shared = c.n_expert_shared > 0;
  const bool gated = L.ffn_gate_inp_shexp.valid();
  const auto* gate_row = static_cast<const float*>(L.ffn_gate_inp_shexp.data);
  moe_out_.resize(static_cast<size_t>(n_tokens * k * E));
  grow_to(moe_shared_, n_tokens * E);
  if (n_tokens == 1) {
    experts_one_token(L);
  } else {
    experts_by_expert(L, n_tokens);
  }
  // Per token: (w_0 * out_0) + (w_1 * out_1) + ..., each product rounded, summed in rank order, plus the shared
  // experts' output, then onto x.
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* x = x_.data() + t * E;
    float* acc = tmp_.data();
    for (int64_t j = 0; j < k; ++j) {
      // Llama 4's weights went into the experts' projections (experts_one_token, experts_by_expert).
      const float w = c.expert_weight_before_ffn ? 1.0f : moe_weight_[static_cast<size_t>(t * k + j)];
      const float* o = moe_out_.data() + (t * k + j) * E;
      for (int64_t d = 0; d < E; ++d) acc[d] = j == 0 ? o[d] * w : acc[d] + o[d] * w;
    }
    const float* s = moe_shared_.data() + t * E;
    if (shared && gated) {
      // Qwen2-MoE: the shared expert's output times the sigmoid of its gate's logit, rounded, then added.
      const float g = 1.0f / (1.0f + std::exp(-vec_dot_f32_f32(E, gate_row, xn_.data() + t * E)));
      for (int64_t d = 0; d < E; ++d) acc[d] += s[d] * g;
    } else if (shared) {
      for (int64_t d = 0; d < E; ++d) acc[d] += s[d];
    }
    for (int64_t d = 0; d < E; ++d) x[d] = acc[d] + x[d];
  }
}

void ModelRunner::moe_with_dense_branch(const LayerWeights& L, int il, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, k = c.n_expert_used, F = c.n_ff_of(il);
  const float eps = c.rms_eps;
  // The dense branch, post-normed, into moe_shared_.
  grow_to(moe_shared_, n_tokens * E);
  const MatmulOutput gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
  project_normalized(gate_up, static_cast<const float*>(L.ffn_norm.data), n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t)
    ffn_activation(gate_.data() + t * F, up_.data() + t * F, gate_.data() + t * F, F);
  matmul(L.w_down, gate_.data(), n_tokens, moe_shared_.data(), pool_);
  const auto* post_1 = static_cast<const float*>(L.ffn_post_norm_1.data);
  for (int64_t t = 0; t < n_tokens; ++t)
    rmsnorm(moe_shared_.data() + t * E, post_1, moe_shared_.data() + t * E, static_cast<int>(E), eps);
  // The router's input: the residual RMS-normed without a weight, over sqrt(n_embd), times its scale per dimension.
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(E));
  const auto* router_scale = static_cast<const float*>(L.ffn_gate_inp_scale.data);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* r = xn_.data() + t * E;
    std::copy_n(x_.data() + t * E, E, r);
    rmsnorm_heads(r, nullptr, 1, static_cast<int>(E), eps);
    for (int64_t d = 0; d < E; ++d) r[d] = r[d] * inv_sqrt * router_scale[d];
  }
  route_tokens(L, n_tokens);
  // The experts on the residual normed by their own weights.
  normalize_tokens(static_cast<const float*>(L.ffn_pre_norm_2.data), n_tokens);
  moe_out_.resize(static_cast<size_t>(n_tokens * k * E));
  if (n_tokens == 1) {
    experts_one_token(L);
  } else {
    experts_by_expert(L, n_tokens);
  }
  const auto* expert_scale = static_cast<const float*>(L.down_exps_scale.data);
  const auto* post_2 = static_cast<const float*>(L.ffn_post_norm_2.data);
  const auto* post = static_cast<const float*>(L.ffn_post_norm.data);
  for (int64_t t = 0; t < n_tokens; ++t) {
    // Each expert's output times its scale, then its weight, summed in rank order; post-normed; plus the dense
    // branch; post-normed again onto x.
    float* acc = tmp_.data();
    for (int64_t j = 0; j < k; ++j) {
      const size_t slot = static_cast<size_t>(t * k + j);
      const float w = moe_weight_[slot];
      const float se = expert_scale != nullptr ? expert_scale[moe_choice_[slot]] : 1.0f;
      const float* o = moe_out_.data() + static_cast<int64_t>(slot) * E;
      for (int64_t d = 0; d < E; ++d) {
        const float v = o[d] * se;
        acc[d] = j == 0 ? v * w : acc[d] + v * w;
      }
    }
    rmsnorm(acc, post_2, acc, static_cast<int>(E), eps);
    add_inplace(acc, moe_shared_.data() + t * E, E);
    rmsnorm(acc, post, acc, static_cast<int>(E), eps);
    add_inplace(x_.data() + t * E, acc, E);
  }
}

void ModelRunner::experts_one_token(const LayerWeights& L) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, F = c.n_ff_exp, k = c.n_expert_used;
  const int64_t FS = c.shared_ffn_width();
  const int64_t n_proj = k + (FS > 0 ? 1 : 0);
  grow_to(moe_gate_, k * F + FS);
  grow_to(moe_up_, k * F + FS);
  // Every chosen expert's gate and up, and the shared experts', read the one normed row: one conversion and
  // one pass over the pool for all of them.
  std::vector<MatmulOutput> gate_up;
  for (int64_t j = 0; j < k; ++j) {
    const size_t e = static_cast<size_t>(moe_choice_[static_cast<size_t>(j)]);
    gate_up.push_back({&L.gate_exps[e], moe_gate_.data() + j * F});
    gate_up.push_back({&L.up_exps[e], moe_up_.data() + j * F});
  }
  if (FS > 0) {
    gate_up.push_back({&L.ffn_gate_shexp, moe_gate_.data() + k * F});
    gate_up.push_back({&L.ffn_up_shexp, moe_up_.data() + k * F});
  }
  matmul_shared_input(gate_up, xn_.data(), 1, pool_);
  const bool biased = !L.gate_exps_b.empty();
  if (biased)
    for (int64_t j = 0; j < k; ++j) {
      const size_t e = static_cast<size_t>(moe_choice_[static_cast<size_t>(j)]);
      add_inplace(moe_gate_.data() + j * F, static_cast<const float*>(L.gate_exps_b[e].data), F);
      add_inplace(moe_up_.data() + j * F, static_cast<const float*>(L.up_exps_b[e].data), F);
    }
  if (c.expert_weight_before_ffn)
    for (int64_t j = 0; j < k; ++j) {
      const float w = moe_weight_[static_cast<size_t>(j)];
      scale_inplace(moe_gate_.data() + j * F, F, w);
      scale_inplace(moe_up_.data() + j * F, F, w);
    }
  ffn_activation(moe_gate_.data(), moe_up_.data(), moe_gate_.data(), k * F + FS);
  // The down projections, each from its own activations: (projection, part) items over the pool, every
  // projection cut into as many parts as threads at its balancing chunks (the bits of matmul()).
  const auto down = [&](int64_t p) -> const Tensor& {
    return p < k ? L.down_exps[static_cast<size_t>(moe_choice_[static_cast<size_t>(p)])] : L.ffn_down_shexp;
  };
  const int64_t parts = pool_.size();
  pool_.parallel_for(n_proj * parts, [&](int64_t i0, int64_t i1) {
    MatmulActs acts;
    int64_t converted = -1;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t p = i / parts, part = i % parts;
      const Tensor& w = down(p);
      const int64_t rows = w.rows(), chunk = std::max<int64_t>(1, matmul_balance_chunk_rows(w, 1));
      const auto bound = [&](int64_t q) { return std::min(rows, (rows * q / parts + chunk - 1) / chunk * chunk); };
      const int64_t r0 = bound(part), r1 = bound(part + 1);
      if (r0 >= r1) continue;
      if (converted != p) {
        acts.convert(w.type, moe_gate_.data() + p * F, w.cols(), 1);
        converted = p;
      }
      matmul_rows(w, acts, p < k ? moe_out_.data() + p * E : moe_shared_.data(), r0, r1);
    }
  }, 1);
  if (biased)
    for (int64_t j = 0; j < k; ++j) {
      const size_t e = static_cast<size_t>(moe_choice_[static_cast<size_t>(j)]);
      add_inplace(moe_out_.data() + j * E, static_cast<const float*>(L.down_exps_b[e].data), E);
    }
}

void ModelRunner::experts_by_expert(const LayerWeights& L, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd, F = c.n_ff_exp, k = c.n_expert_used;
  // Each expert runs once on every (token, rank) routed to it: its rows gathered, projected as a batch.
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
    const bool biased = !L.gate_exps_b.empty();
    for (int64_t i = 0; i < n; ++i) {
      if (c.expert_weight_before_ffn) {
        // Llama 4: the expert sees the token times its weight; its projections are linear (no bias), so the
        // weight scales their outputs instead (one product, as the single-token path takes it).
        const float w = moe_weight_[static_cast<size_t>(slots[static_cast<size_t>(i)])];
        scale_inplace(moe_gate_.data() + i * F, F, w);
        scale_inplace(moe_up_.data() + i * F, F, w);
      }
      if (biased) {
        add_inplace(moe_gate_.data() + i * F, static_cast<const float*>(L.gate_exps_b[ei].data), F);
        add_inplace(moe_up_.data() + i * F, static_cast<const float*>(L.up_exps_b[ei].data), F);
      }
      ffn_activation(moe_gate_.data() + i * F, moe_up_.data() + i * F, moe_gate_.data() + i * F, F);
    }
    matmul(L.down_exps[ei], moe_gate_.data(), n, moe_down_.data(), pool_);
    if (biased)
      for (int64_t i = 0; i < n; ++i)
        add_inplace(moe_down_.data() + i * E, static_cast<const float*>(L.down_exps_b[ei].data), E);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(moe_down_.data() + i * E, E, moe_out_.data() + slots[static_cast<size_t>(i)] * E);
  }
  // DeepSeek's and Qwen2-MoE's shared experts: one SwiGLU on every token, its output added to the routed ones' sum.
  if (c.n_expert_shared > 0) {
    const int64_t FS = c.shared_ffn_width();
    const MatmulOutput gate_up[] = {{&L.ffn_gate_shexp, gate_.data()}, {&L.ffn_up_shexp, up_.data()}};
    matmul_shared_input(gate_up, xn_.data(), n_tokens, pool_);
    for (int64_t t = 0; t < n_tokens; ++t)
      ffn_activation(gate_.data() + t * FS, up_.data() + t * FS, gate_.data() + t * FS, FS);
    matmul(L.ffn_down_shexp, gate_.data(), n_tokens, moe_shared_.data(), pool_);
  }
}

}  // namespace kvserve
