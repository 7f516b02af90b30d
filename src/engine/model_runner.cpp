#include "engine/model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "core/fp16.h"
#include "core/grow_only.h"
#include "engine/kv_row_store.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/attention_sinks.h"
#include "kernels/cpu/h2o_attention.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

H2OAttentionArgs h2o_layer_args(const KVCacheView& kv, int il, const BatchSequence& s, int group) {
  const auto l = static_cast<size_t>(il);
  H2OAttentionArgs a;
  a.n_tokens = static_cast<int>(s.tokens.size());
  a.pos0 = s.pos0;
  a.block_table = s.table(group).data();
  a.block_size = kv.block_size;
  a.k_cache = kv.k_layers[l];
  a.v_cache = kv.v_layers[l];
  a.kv_type = kv.layer_types.empty() ? KVElemType::F32 : kv.layer_types[l];
  a.block_stride = kv.stride(il);
  a.slots = kv.h2o_records[l];
  a.heavy = kv.h2o.heavy;
  a.recent = kv.h2o.recent;
  return a;
}

int KVCacheView::num_groups() const {
  return layer_group.empty() ? 1 : *std::max_element(layer_group.begin(), layer_group.end()) + 1;
}

ModelRunner::ModelRunner(const Model& model, ThreadPool& pool)
    : model_(model),
      pool_(pool),
      rope_(model.config.head_dim, model.config.n_rot, model.config.rope_base, model.config.rope_style,
            model.config.rope_scaling, false),
      rope_swa_(model.config.head_dim_swa > 0 ? model.config.head_dim_swa : model.config.head_dim,
                model.config.n_rot_of_swa(), model.config.rope_base_swa, model.config.rope_style,
                model.config.rope_scaling_swa, false),
      rope_long_(model.config.head_dim, model.config.n_rot, model.config.rope_base, model.config.rope_style,
                 model.config.rope_scaling, true),
      rope_swa_long_(model.config.head_dim_swa > 0 ? model.config.head_dim_swa : model.config.head_dim,
                     model.config.n_rot_of_swa(), model.config.rope_base_swa, model.config.rope_style,
                     model.config.rope_scaling_swa, true),
      region_weights_ok_(region_weights_ok()) {
  // For A/B runs: KVSERVE_DECODE_REGION=0 sends batch-1 decode steps down the per-op path.
  if (const char* v = std::getenv("KVSERVE_DECODE_REGION"); v != nullptr && std::string_view(v) == "0")
    single_token_region_ = SingleTokenRegion::Off;
}

void ModelRunner::ensure_scratch(int64_t n) {
  const auto& c = model_.config;
  grow_to(x_, n * c.n_embd);
  grow_to(xn_, n * c.n_embd);
  grow_to(q_, n * c.max_q_dim());
  grow_to(k_, n * c.max_kv_dim());
  grow_to(v_, n * c.max_kv_dim());
  grow_to(attn_, n * c.max_q_dim());
  grow_to(gate_, n * c.max_n_ff());
  grow_to(up_, n * c.max_n_ff());
  grow_to(tmp_, n * std::max<int64_t>(c.n_embd, c.max_q_dim()));
  if (c.n_embd_per_layer > 0) {
    grow_to(ple_, n * c.n_layers * c.n_embd_per_layer);
    grow_to(ple_gate_, n * c.n_embd_per_layer);
  }
  if (c.mla()) {
    // q_ and attn_ hold each head's latent-space row (kv_lora_rank + n_rot); the raw projections have their own.
    const int64_t R = c.kv_row_dim();
    grow_to(q_, n * c.n_heads * R);
    grow_to(attn_, n * c.n_heads * R);
    grow_to(mla_q_, n * c.n_heads * c.head_dim);
    grow_to(mla_qa_, n * std::max(c.q_lora_rank, 1));
    grow_to(mla_kv_, n * R);
    grow_to(mla_v_, n * c.n_heads * c.head_dim_v);
    grow_to(tmp_, n * std::max<int64_t>(c.n_embd, c.n_heads * c.head_dim_v));
  }
  if (c.n_expert_shared > 0) {
    grow_to(gate_, n * c.shared_ffn_width());
    grow_to(up_, n * c.shared_ffn_width());
  }
}

namespace {
// RoPE and the K/V stores take about a microsecond per token (1B shapes): fewer than twice this many
// tokens are not worth waking the pool for.
constexpr int64_t kRopeGrainTokens = 8;
// An RMS norm takes about a microsecond per 2048 elements on one core (1B shapes, more with the rows in
// the other core's cache): a piece of fewer elements than this is not worth waking the pool for.
constexpr int64_t kNormGrainElems = 16384;

void add_bias(float* y, const Tensor& b, int64_t n_tokens, int64_t n) {
  if (!b.valid()) return;
  const float* bias = static_cast<const float*>(b.data);
  for (int64_t t = 0; t < n_tokens; ++t) add_inplace(y + t * n, bias, n);
}

// Learned attention sinks (gpt-oss): head h's softmax has one more term, exp(sink[h]), with no value, so its
// output is the plain attention's times sum / (sum + exp(sink)) = 1 / (1 + exp(sink - lse)), lse being the log
// of the plain softmax's denominator (with its max).
void join_learned_sinks(float* out, const float* lse, const float* sinks, int64_t n_tokens, int64_t H, int64_t D) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < H; ++h)
      scale_inplace(out + (t * H + h) * D, D, 1.0f / (1.0f + std::exp(sinks[h] - lse[t * H + h])));
}

// x += rmsnorm(y, post_norm) row by row (Gemma's post-norms); y is overwritten.
void add_post_normed(float* x, float* y, const Tensor& post_norm, int64_t n_tokens, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    rmsnorm(y + t * n, static_cast<const float*>(post_norm.data), y + t * n, static_cast<int>(n), eps);
    add_inplace(x + t * n, y + t * n, n);
  }
}
}  // namespace

void ModelRunner::embed(int32_t id, float* out) const {
  const ModelConfig& c = model_.config;
  dequantize_row(model_.tok_embd.type, model_.tok_embd.row(id), out, c.n_embd);
  if (c.embd_scale != 1.0f)
    for (int64_t i = 0; i < c.n_embd; ++i) out[i] *= c.embd_scale;
}

void ModelRunner::gelu(const float* gate, const float* up, float* out, int64_t n) const {
  if (model_.config.gelu_exact) {
    gelu_exact_mul(gate, up, out, n);
  } else {
    gelu_mul(gate, up, out, n);
  }
}

void ModelRunner::ffn_activation(const float* gate, const float* up, float* out, int64_t n) const {
  if (model_.config.ffn_act == FfnActivation::GeluTanh) {
    gelu(gate, up, out, n);
  } else if (model_.config.ffn_act == FfnActivation::SwigluOai) {
    swiglu_oai_mul(gate, up, out, n, kSwigluOaiAlpha, model_.config.swiglu_limit);
  } else {
    silu_mul(gate, up, out, n);
  }
}

void ModelRunner::finish_logits(float* logits, int64_t n) const {
  if (const float scale = model_.config.logit_scale; scale != 0.0f)
    for (int64_t i = 0; i < n; ++i) logits[i] *= 1.0f / scale;  // as llama.cpp's ggml_scale(1 / scale)
  const float cap = model_.config.final_logit_softcap;
  if (cap <= 0) return;
  // As llama.cpp: scale by 1/cap, tanh, scale by cap.
  for (int64_t i = 0; i < n; ++i) logits[i] = std::tanh(logits[i] * (1.0f / cap)) * cap;
}

void add_scaled(float* x, const float* y, float scale, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i] * scale;
}

void ModelRunner::normalize_tokens(const float* weight, int64_t n_tokens, MatmulActs* acts) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd;
  pool_.parallel_for(
      n_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          if (weight != nullptr) {
            rmsnorm(x_.data() + t * E, weight, xn_.data() + t * E, static_cast<int>(E), c.rms_eps);
          } else {  // no pre-norm (OLMo 2): the residual stream itself
            std::copy_n(x_.data() + t * E, E, xn_.data() + t * E);
          }
          if (acts != nullptr) acts->convert_token(t);
        }
      },
      std::max<int64_t>(1, kNormGrainElems / E));
}

void ModelRunner::project_normalized(std::span<const MatmulOutput> outputs, const float* norm_weight,
                                     int64_t n_tokens) {
  // Converting each row where it was just normalized spares the conversion its own pass over the rows
  // (and the pool a fork and join).
  if (!matmul_inputs_stackable(outputs)) {
    normalize_tokens(norm_weight, n_tokens);
    matmul_shared_input(outputs, xn_.data(), n_tokens, pool_);
    return;
  }
  step_acts_.prepare(outputs, xn_.data(), n_tokens);
  normalize_tokens(norm_weight, n_tokens, &step_acts_);
  matmul_converted(outputs, step_acts_, pool_);
}

int ModelRunner::forward(std::span<const BatchSequence> batch, const KVCacheView& kv, std::vector<float>& logits) {
  const ModelConfig& c = model_.config;
  const int n_groups = kv.num_groups();
  if (!kv.layer_group.empty() && static_cast<int>(kv.layer_group.size()) != c.n_layers)
    fail("forward: the cache groups {} layers, the model has {}", kv.layer_group.size(), c.n_layers);
  int64_t n_tokens = 0;
  for (const auto& s : batch) {
    if (s.tokens.empty()) fail("forward: a sequence in the batch has no tokens");
    const int64_t end = s.pos0 + static_cast<int64_t>(s.tokens.size());
    if (static_cast<int64_t>(s.group_tables.size()) != n_groups - 1)
      fail("forward: a sequence brings {} block tables, the cache has {} groups", s.group_tables.size() + 1, n_groups);
    for (int g = 0; g < n_groups; ++g)
      if (static_cast<int64_t>(s.table(g).size()) * kv.block_size < end)
        fail("forward: block table covers {} positions, sequence needs {}", s.table(g).size() * kv.block_size, end);
    for (int32_t id : s.tokens)
      if (id < 0 || id >= c.n_vocab) fail("forward: token id {} outside vocabulary of {}", id, c.n_vocab);
    n_tokens += static_cast<int64_t>(s.tokens.size());
  }
  if (n_tokens == 0) return 0;
  ensure_scratch(n_tokens);
  if (n_tokens == 1 && single_token_region_applies() && !batch[0].all_logits)
    return forward_single_token(batch[0], kv, logits);

  const int64_t E = c.n_embd, H = c.n_heads;
  const int64_t RD = c.kv_row_dim();  // values per cached row (head_dim, or MLA's latent + rope key)

  // Embeddings.
  {
    int64_t t = 0;
    for (const auto& s : batch)
      for (int32_t id : s.tokens) {
        embed(id, x_.data() + t * E);
        ++t;
      }
  }

  if (c.n_embd_per_layer > 0) per_layer_inputs(batch, n_tokens);

  // A position's rotation angles are the same in every layer and for q and k.
  const int64_t n_rot = rope_.n_rot(), n_rot_swa = rope_swa_.n_rot();
  rope_cos_sin_.resize(static_cast<size_t>(n_tokens * n_rot));
  const bool has_swa = !c.swa_layers.empty();
  if (has_swa) rope_swa_cos_sin_.resize(static_cast<size_t>(n_tokens * n_rot_swa));
  const StreamingEviction& stream = kv.streaming;
  const bool has_sinks = stream.on() && stream.sinks > 0;
  if (has_sinks) {
    rope_sink_cos_sin_.resize(static_cast<size_t>(n_tokens * n_rot));
    q_sink_.resize(static_cast<size_t>(n_tokens * c.max_q_dim()));
  }
  if (has_sinks || c.learned_sinks) attn_lse_.resize(static_cast<size_t>(n_tokens * H));
  kv_offset_.resize(static_cast<size_t>(n_groups * n_tokens));
  // Layers whose rows differ from the cache's first (Gemma 4) place them by block and slot themselves.
  const bool layer_offsets = !c.uniform_layers() || !kv.layer_block_strides.empty();
  if (layer_offsets) {
    kv_block_.resize(static_cast<size_t>(n_groups * n_tokens));
    kv_slot_.resize(static_cast<size_t>(n_tokens));
    layer_kv_offset_.resize(static_cast<size_t>(n_tokens));
  }
  const bool temperature = c.has_attn_temperature();
  if (temperature) q_temperature_.resize(static_cast<size_t>(n_tokens));
  {
    int64_t t = 0;
    for (const auto& s : batch) {
      const Rope& rope = s.long_rope ? rope_long_ : rope_;
      const Rope& rope_swa = s.long_rope ? rope_swa_long_ : rope_swa_;
      for (size_t i = 0; i < s.tokens.size(); ++i, ++t) {
        const int64_t pos = s.pos0 + static_cast<int64_t>(i);
        rope.angles(pos, rope_cos_sin_.data() + t * n_rot);
        if (has_swa) rope_swa.angles(pos, rope_swa_cos_sin_.data() + t * n_rot_swa);
        if (temperature) q_temperature_[t] = c.attn_temperature(pos);
        if (has_sinks)
          rope.angles(sink_query_position(pos, stream.sinks, stream.window), rope_sink_cos_sin_.data() + t * n_rot);
        for (int g = 0; g < n_groups; ++g) {
          kv_offset_[g * n_tokens + t] = s.table(g)[pos / kv.block_size] * kv.block_stride + pos % kv.block_size * RD;
          if (layer_offsets) kv_block_[g * n_tokens + t] = s.table(g)[pos / kv.block_size];
        }
        if (layer_offsets) kv_slot_[t] = pos % kv.block_size;
      }
    }
  }

  for (int il = 0; il < c.n_layers; ++il) {
    const LayerWeights& L = model_.layers[il];
    const bool swa = c.is_swa_layer(il);
    // Gemma 4: the heads' size and KV heads of the layer (a layer on another's KV: of its source, the same kind).
    const int kv_src = c.kv_source_layer(il);
    const bool own_kv = kv_src == il;
    const int64_t D = c.head_dim_of(il), KVH = c.kv_heads_of(kv_src);
    const int64_t QD = H * D, KD = KVH * D;
    const float attn_scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
    const int group = kv.layer_group.empty() ? 0 : kv.layer_group[il];
    const int64_t* kv_offset = kv_offset_.data() + group * n_tokens;
    if (layer_offsets && !c.mla()) {
      const int64_t stride = kv.stride(il);
      for (int64_t t = 0; t < n_tokens; ++t)
        layer_kv_offset_[t] = kv_block_[group * n_tokens + t] * stride + kv_slot_[t] * D;
      kv_offset = layer_kv_offset_.data();
    }
    const Rope& rope = swa ? rope_swa_ : rope_;
    const int64_t layer_n_rot = swa ? n_rot_swa : n_rot;
    const float* cos_sin = swa ? rope_swa_cos_sin_.data() : rope_cos_sin_.data();
    const bool rotates = c.uses_rope(il);
    const bool temperature_here = temperature && c.attn_temperature_on(il);
    const bool l2_norm_here = c.qk_l2_norm && rotates;
    // A streaming cache windows the full-attention layers; those also attend to the sinks.
    const int64_t window = swa ? c.sliding_window : stream.window;
    const bool sinks_here = has_sinks && !swa;
    H2OSlot* h2o_records = kv.h2o_records.empty() ? nullptr : kv.h2o_records[static_cast<size_t>(il)];
    void* kl = kv.k_layers[il];
    void* vl = kv.v_layers[il];
    const KVElemType kv_type = kv.layer_types.empty() ? KVElemType::F32 : kv.layer_types[il];
    if (c.mla()) {
      mla_attention(L, batch, n_tokens, cos_sin, kv_offset, kv, il, group);
      moe_or_dense_ffn(L, il, n_tokens);
      continue;
    }
    // Gemma 4: a layer on another's KV projects only q; one without attn_v takes its keys' projection as values.
    const MatmulOutput qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
    const size_t n_proj = !own_kv ? 1 : L.wv.valid() ? 3 : 2;
    project_normalized(std::span(qkv, n_proj), static_cast<const float*>(L.attn_norm.data), n_tokens);
    if (own_kv && !L.wv.valid()) std::copy_n(k_.data(), n_tokens * KD, v_.data());
    add_bias(q_.data(), L.bq, n_tokens, QD);
    add_bias(k_.data(), L.bk, n_tokens, KD);
    add_bias(v_.data(), L.bv, n_tokens, KD);

    // Per-head q/k norms (Qwen3) and RoPE, then K/V into their cache slots.
    const KVRotation rot = kv_rotation(kv_type, static_cast<int>(D));
    // Tokens are independent here (distinct cache slots), so prefill spreads them over the pool.
    pool_.parallel_for(
        n_tokens,
        [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            if (c.qk_norm) {
              // Per head (Qwen3), or over the whole projection as one (OLMo 2).
              const int qh = c.qk_norm_full ? 1 : static_cast<int>(H), kh = c.qk_norm_full ? 1 : static_cast<int>(KVH);
              rmsnorm_heads(q_.data() + t * QD, static_cast<const float*>(L.q_norm.data), qh, static_cast<int>(QD / qh),
                            c.rms_eps);
              if (own_kv)
                rmsnorm_heads(k_.data() + t * KD, static_cast<const float*>(L.k_norm.data), kh,
                              static_cast<int>(KD / kh), c.rms_eps);
            }
            if (c.v_norm && own_kv)
              rmsnorm_heads(v_.data() + t * KD, nullptr, static_cast<int>(KVH), static_cast<int>(D), c.rms_eps);
            if (l2_norm_here) {
              // Llama 4 norms after RoPE; a rotation keeps each head's length, so before it is the same (and the
              // sinks' copy of q below gets it too).
              rmsnorm_heads(q_.data() + t * QD, nullptr, static_cast<int>(H), static_cast<int>(D), c.rms_eps);
              rmsnorm_heads(k_.data() + t * KD, nullptr, static_cast<int>(KVH), static_cast<int>(D), c.rms_eps);
            }
            if (temperature_here) scale_inplace(q_.data() + t * QD, QD, q_temperature_[t]);
            float* q_sink = sinks_here ? q_sink_.data() + t * QD : nullptr;
            if (q_sink != nullptr) {
              std::copy(q_.data() + t * QD, q_.data() + (t + 1) * QD, q_sink);
              if (rotates) rope.rotate(q_sink, static_cast<int>(H), rope_sink_cos_sin_.data() + t * n_rot);
              if (rot.any()) hadamard_rotate(q_sink, QD, rot.k_block);
            }
            if (rotates) {
              rope.rotate(q_.data() + t * QD, static_cast<int>(H), cos_sin + t * layer_n_rot);
              if (own_kv) rope.rotate(k_.data() + t * KD, static_cast<int>(KVH), cos_sin + t * layer_n_rot);
            }
            if (rot.any()) {
              hadamard_rotate(q_.data() + t * QD, QD, rot.k_block);
              if (own_kv) {
                hadamard_rotate(k_.data() + t * KD, KD, rot.k_block);
                hadamard_rotate(v_.data() + t * KD, KD, rot.v_block);
              }
            }
            // H2O's attention stores each row where its eviction puts it.
            for (int64_t h = 0; h < KVH && h2o_records == nullptr && own_kv; ++h) {
              const int64_t off = kv_offset[t] + h * kv.block_size * D;
              store_kv_row(kv_type, k_.data() + t * KD + h * D, D, kl, off);
              store_kv_row(kv_type, v_.data() + t * KD + h * D, D, vl, off);
            }
          }
        },
        kRopeGrainTokens);

    if (h2o_records != nullptr) {
      h2o_args_.clear();
      int64_t t = 0;
      for (const auto& s : batch) {
        H2OAttentionArgs& a = h2o_args_.emplace_back(h2o_layer_args(kv, il, s, group));
        a.q = q_.data() + t * QD;
        a.k = k_.data() + t * KD;
        a.v = v_.data() + t * KD;
        a.out = attn_.data() + t * QD;
        a.n_heads = static_cast<int>(H);
        a.n_kv_heads = static_cast<int>(KVH);
        a.head_dim = static_cast<int>(D);
        a.scale = attn_scale;
        a.softcap = c.attn_softcap;
        t += static_cast<int64_t>(s.tokens.size());
      }
      h2o_attention_batch(h2o_args_, pool_);
    }
    // Attention: each sequence reads only its own blocks; all of them share one parallel pass.
    attn_args_.clear();
    int64_t t = 0;
    for (const auto& s : batch) {
      PagedAttentionArgs& a = attn_args_.emplace_back();
      a.q = q_.data() + t * QD;
      a.out = attn_.data() + t * QD;
      a.n_tokens = static_cast<int>(s.tokens.size());
      a.n_heads = static_cast<int>(H);
      a.n_kv_heads = static_cast<int>(KVH);
      a.head_dim = static_cast<int>(D);
      a.block_table = s.table(group).data();
      a.block_size = kv.block_size;
      a.pos0 = s.pos0;
      a.k_cache = kl;
      a.v_cache = vl;
      a.kv_type = kv_type;
      a.block_stride = kv.stride(il);
      a.scale = attn_scale;
      a.window = window;
      a.chunk = swa && c.swa_chunked ? c.sliding_window : 0;
      a.softcap = c.attn_softcap;
      if (sinks_here || c.learned_sinks) a.lse = attn_lse_.data() + t * H;
      t += static_cast<int64_t>(s.tokens.size());
    }
    if (h2o_records == nullptr) paged_attention_batch(attn_args_, pool_);
    if (sinks_here)
      for (const PagedAttentionArgs& a : attn_args_)
        merge_attention_sinks(a, q_sink_.data() + (a.q - q_.data()), stream.sinks, pool_);
    if (c.learned_sinks)
      join_learned_sinks(attn_.data(), attn_lse_.data(), static_cast<const float*>(L.attn_sinks.data), n_tokens, H, D);
    // The output mixes rotated V rows: rotate it back.
    if (rot.any()) hadamard_rotate(attn_.data(), n_tokens * QD, rot.v_block);

    if (c.post_norms) {
      matmul(L.wo, attn_.data(), n_tokens, tmp_.data(), pool_);
      add_post_normed(x_.data(), tmp_.data(), L.attn_post_norm, n_tokens, E, c.rms_eps);
    } else if (L.bo.valid()) {
      // gpt-oss: the bias onto the projection, then the sum onto the residual stream (llama.cpp's order).
      matmul(L.wo, attn_.data(), n_tokens, tmp_.data(), pool_);
      add_bias(tmp_.data(), L.bo, n_tokens, E);
      add_inplace(x_.data(), tmp_.data(), n_tokens * E);
    } else if (c.residual_scale != 0.0f) {
      matmul(L.wo, attn_.data(), n_tokens, tmp_.data(), pool_);
      add_scaled(x_.data(), tmp_.data(), c.residual_scale, n_tokens * E);
    } else {
      matmul_add(L.wo, attn_.data(), n_tokens, x_.data(), tmp_.data(), pool_);
    }

    moe_or_dense_ffn(L, il, n_tokens);
    if (c.n_embd_per_layer > 0) add_per_layer_embedding(L, il, n_tokens);
    if (L.layer_output_scale.valid())
      scale_inplace(x_.data(), n_tokens * E, *static_cast<const float*>(L.layer_output_scale.data));
  }
  return output_logits(batch, logits);
}

void ModelRunner::moe_or_dense_ffn(const LayerWeights& L, int il, int64_t n_tokens) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd;
  if (c.moe_layer(il)) {
    if (c.moe_dense_branch) {
      moe_with_dense_branch(L, il, n_tokens);
    } else {
      moe_ffn(L, n_tokens);
    }
    return;
  }
  // Feed-forward (SwiGLU, or GeGLU).
  const MatmulOutput gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
  project_normalized(gate_up, static_cast<const float*>(L.ffn_norm.data), n_tokens);
  // Elementwise (results do not depend on the split), token by token so that each thread converts the
  // rows it just wrote for the down projection.
  const int64_t F = c.n_ff_of(il);
  step_acts_.prepare(L.w_down.type, gate_.data(), F, n_tokens);
  pool_.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      ffn_activation(gate_.data() + t * F, up_.data() + t * F, gate_.data() + t * F, F);
      step_acts_.convert_token(t);
    }
  });
  if (c.post_norms) {
    const MatmulOutput down[] = {{&L.w_down, tmp_.data()}};
    matmul_converted(down, step_acts_, pool_);
    add_post_normed(x_.data(), tmp_.data(), L.ffn_post_norm, n_tokens, E, c.rms_eps);
  } else if (c.residual_scale != 0.0f) {
    const MatmulOutput down[] = {{&L.w_down, tmp_.data()}};
    matmul_converted(down, step_acts_, pool_);
    add_scaled(x_.data(), tmp_.data(), c.residual_scale, n_tokens * E);
  } else {
    matmul_add_converted(L.w_down, step_acts_, x_.data(), tmp_.data(), pool_);
  }
}

int ModelRunner::output_logits(std::span<const BatchSequence> batch, std::vector<float>& logits) {
  const ModelConfig& c = model_.config;
  const int64_t E = c.n_embd;
  // Output head only for the rows that need logits.
  int n_out = 0;
  {
    int64_t t = 0;
    for (const auto& s : batch) {
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      for (int64_t i = s.all_logits ? 0 : n - 1; i < n && (s.want_logits || s.all_logits); ++i) {
        rmsnorm(x_.data() + (t + i) * E, static_cast<const float*>(model_.output_norm.data), xn_.data() + n_out * E,
                E, c.rms_eps);
        ++n_out;
      }
      t += n;
    }
  }
  if (n_out == 0) return 0;
  logits.resize(static_cast<size_t>(n_out) * c.n_vocab);
  matmul(model_.output, xn_.data(), n_out, logits.data(), pool_);
  finish_logits(logits.data(), static_cast<int64_t>(n_out) * c.n_vocab);
  return n_out;
}

}  // namespace kvserve
