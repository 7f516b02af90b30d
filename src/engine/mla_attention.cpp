// DeepSeek-V2's multi-head latent attention in a forward step (ModelRunner::mla_attention), as llama.cpp's
// deepseek2 graph computes it with the absorption of its MLA path (and vLLM's MLA decode):
//
//   q      = wq x, or wq_b rmsnorm(wq_a x)               per head: [q_nope (head_dim - n_rot) | q_pe (n_rot)]
//   kv     = wkv_a x                                     [c (kv_lora_rank) | k_pe (n_rot)], one per token
//   row    = [rmsnorm(c, kv_a_norm) | rope(k_pe)]        the only thing cached: kv_lora_rank + n_rot values
//   q_lat  = [wk_b[h] q_nope | rope(q_pe)]               per head, in the row's space
//   o_lat  = softmax(q_lat . row_j * scale) row_j         over the sequence's rows, per head
//   o      = wv_b[h] o_lat[:kv_lora_rank]                per head, head_dim_v values
//   x     += wo o
//
// q_lat . row_j equals the decompressed q . k_j (k_j's nope part is wk_b[h]^T c_j), so the cache holds one
// row of kv_lora_rank + n_rot values per token and layer, the textbook MLA figure, and attention is the
// paged kernel's MQA with that row as key and as value: the value's last n_rot outputs (the weighted rope
// keys) are computed and dropped, 11% of the value work at DeepSeek-V2's sizes for no second kernel.
#include <algorithm>
#include <cmath>

#include "core/grow_only.h"
#include "engine/kv_row_store.h"
#include "engine/model_runner.h"
#include "kernels/cpu/attention_sinks.h"
#include "kernels/cpu/h2o_attention.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/ops.h"

namespace kvserve {

namespace {
constexpr int64_t kMlaGrainTokens = 8;  // as the other per-token stages: fewer are not worth the pool

// out_h = w[h] x_h for every head h, where x_h is [n_tokens][in_dim] at in + h * n_tokens * in_dim (out the
// same with out_dim): the heads spread over the pool in one pass, each head's product on one thread (the
// bits of matmul(w[h], ...)), instead of a fork and join per head.
void per_head_matmul(const std::vector<Tensor>& w, const float* in, int64_t in_dim, float* out, int64_t out_dim,
                     int64_t n_tokens, ThreadPool& pool) {
  pool.parallel_for(static_cast<int64_t>(w.size()), [&](int64_t h0, int64_t h1) {
    MatmulActs acts;
    for (int64_t h = h0; h < h1; ++h) {
      const Tensor& wh = w[static_cast<size_t>(h)];
      acts.convert(wh.type, in + h * n_tokens * in_dim, in_dim, n_tokens);
      matmul_rows(wh, acts, out + h * n_tokens * out_dim, 0, wh.rows());
    }
  });
}
}  // namespace

void ModelRunner::mla_attention(const LayerWeights& L, std::span<const BatchSequence> batch, int64_t n_tokens,
                                const float* cos_sin, const int64_t* kv_offset, const KVCacheView& kv, int il,
                                int group) {
  const ModelConfig& c = model_.config;
  const int64_t H = c.n_heads, D = c.head_dim, nope = c.qk_nope_dim(), n_rot = c.n_rot;
  const int64_t r = c.kv_lora_rank, R = c.kv_row_dim(), V = c.head_dim_v;
  const auto* attn_norm = static_cast<const float*>(L.attn_norm.data);

  // Projections of the normed input: q (or its low-rank stage) and the latent with the rope key.
  if (c.q_lora_rank > 0) {
    const MatmulOutput first[] = {{&L.wq_a, mla_qa_.data()}, {&L.wkv_a, mla_kv_.data()}};
    project_normalized(first, attn_norm, n_tokens);
    const int64_t QR = c.q_lora_rank;
    for (int64_t t = 0; t < n_tokens; ++t)
      rmsnorm(mla_qa_.data() + t * QR, static_cast<const float*>(L.q_a_norm.data), mla_qa_.data() + t * QR,
              static_cast<int>(QR), c.rms_eps);
    matmul(L.wq_b, mla_qa_.data(), n_tokens, mla_q_.data(), pool_);
  } else {
    const MatmulOutput first[] = {{&L.wq, mla_q_.data()}, {&L.wkv_a, mla_kv_.data()}};
    project_normalized(first, attn_norm, n_tokens);
  }

  void* cache = kv.k_layers[il];
  const KVElemType kv_type = kv.layer_types.empty() ? KVElemType::F32 : kv.layer_types[il];
  // Quantized rows are stored under a Hadamard rotation (kv_elem.h); the row is key and value at once, so
  // q and the output turn with the key's block.
  const int rot_block = kv_rotation(kv_type, static_cast<int>(R)).k_block;
  // A streaming cache: the window on every layer, and the sinks' query, whose q_pe turns at the cache
  // position (kernels/cpu/attention_sinks.h); its latent part is q's.
  const StreamingEviction& stream = kv.streaming;
  const bool sinks = stream.on() && stream.sinks > 0;
  if (sinks) grow_to(q_sink_, n_tokens * H * R);
  // H2O: each token's row goes where its eviction puts it (kernels/cpu/h2o_attention.h), one record a
  // row for all the heads, which attend to the same kept rows.
  H2OSlot* h2o_records = kv.h2o_records.empty() ? nullptr : kv.h2o_records[static_cast<size_t>(il)];

  // Per token: the cached row (normed latent, rotated rope key) and each head's rotated q_pe behind its
  // latent part.
  pool_.parallel_for(
      n_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* row = mla_kv_.data() + t * R;
          rmsnorm(row, static_cast<const float*>(L.kv_a_norm.data), row, static_cast<int>(r), c.rms_eps);
          rope_.rotate(row + r, 1, cos_sin + t * n_rot);
          if (rot_block > 0) hadamard_rotate(row, R, rot_block);
          if (h2o_records == nullptr) store_kv_row(kv_type, row, R, cache, kv_offset[t]);
          for (int64_t h = 0; h < H; ++h) {
            float* q_pe = mla_q_.data() + (t * H + h) * D + nope;
            if (sinks) {
              float* q_pe_sink = q_sink_.data() + (t * H + h) * R + r;
              std::copy_n(q_pe, n_rot, q_pe_sink);
              rope_.rotate(q_pe_sink, 1, rope_sink_cos_sin_.data() + t * n_rot);
            }
            rope_.rotate(q_pe, 1, cos_sin + t * n_rot);
            std::copy_n(q_pe, n_rot, q_.data() + (t * H + h) * R + r);
          }
        }
      },
      kMlaGrainTokens);

  // Absorption: each head's q_nope through its key up-projection, into the latent part of its q row.
  grow_to(mla_head_in_, H * n_tokens * std::max(nope, r));
  grow_to(mla_head_out_, H * n_tokens * std::max(r, V));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(mla_q_.data() + (t * H + h) * D, nope, mla_head_in_.data() + (h * n_tokens + t) * nope);
  per_head_matmul(L.wk_b, mla_head_in_.data(), nope, mla_head_out_.data(), r, n_tokens, pool_);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(mla_head_out_.data() + (h * n_tokens + t) * r, r, q_.data() + (t * H + h) * R);
  if (sinks)
    for (int64_t row = 0; row < n_tokens * H; ++row) std::copy_n(q_.data() + row * R, r, q_sink_.data() + row * R);
  if (rot_block > 0) {
    hadamard_rotate(q_.data(), n_tokens * H * R, rot_block);
    if (sinks) hadamard_rotate(q_sink_.data(), n_tokens * H * R, rot_block);
  }

  const float scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  if (h2o_records != nullptr) {
    h2o_args_.clear();
    int64_t t = 0;
    for (const auto& s : batch) {
      H2OAttentionArgs& a = h2o_args_.emplace_back(h2o_layer_args(kv, il, s, group));
      a.q = q_.data() + t * H * R;
      a.k = mla_kv_.data() + t * R;  // the row is key and value
      a.v = a.k;
      a.v_cache = cache;
      a.out = attn_.data() + t * H * R;
      a.n_heads = static_cast<int>(H);
      a.n_kv_heads = 1;
      a.head_dim = static_cast<int>(R);
      a.scale = scale;
      t += static_cast<int64_t>(s.tokens.size());
    }
    h2o_attention_batch(h2o_args_, pool_);
  }
  // Attention: every head against the sequence's rows, one "KV head" whose row is key and value.
  attn_args_.clear();
  int64_t t0 = 0;
  for (const auto& s : batch) {
    PagedAttentionArgs& a = attn_args_.emplace_back();
    a.q = q_.data() + t0 * H * R;
    a.out = attn_.data() + t0 * H * R;
    a.n_tokens = static_cast<int>(s.tokens.size());
    a.n_heads = static_cast<int>(H);
    a.n_kv_heads = 1;
    a.head_dim = static_cast<int>(R);
    a.block_table = s.table(group).data();
    a.block_size = kv.block_size;
    a.pos0 = s.pos0;
    a.k_cache = cache;
    a.v_cache = cache;
    a.kv_type = kv_type;
    a.block_stride = kv.block_stride;
    a.scale = scale;
    a.window = stream.window;
    if (sinks) a.lse = attn_lse_.data() + t0 * H;
    t0 += static_cast<int64_t>(s.tokens.size());
  }
  if (h2o_records == nullptr) paged_attention_batch(attn_args_, pool_);
  if (sinks)
    for (const PagedAttentionArgs& a : attn_args_)
      merge_attention_sinks(a, q_sink_.data() + (a.q - q_.data()), stream.sinks, pool_);
  if (rot_block > 0) hadamard_rotate(attn_.data(), n_tokens * H * R, rot_block);

  // Values: each head's latent output through its value up-projection, then the output projection.
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(attn_.data() + (t * H + h) * R, r, mla_head_in_.data() + (h * n_tokens + t) * r);
  per_head_matmul(L.wv_b, mla_head_in_.data(), r, mla_head_out_.data(), V, n_tokens, pool_);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(mla_head_out_.data() + (h * n_tokens + t) * V, V, mla_v_.data() + (t * H + h) * V);
  matmul_add(L.wo, mla_v_.data(), n_tokens, x_.data(), tmp_.data(), pool_);
}

}  // namespace kvserve
