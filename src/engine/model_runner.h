#pragma once
// One forward pass over every scheduled token of every sequence in a step: the weights are read once per
// step for the whole batch (each matmul covers all tokens), attention reads each sequence's K/V through
// its block table. One builder for the llama family (llama, qwen2, qwen3) and Gemma 3, whose differences
// are ModelConfig flags (q/k norms, post-norms, GeGLU, embedding scale, sliding-window layers).
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/handoff_probe.h"
#include "core/thread_pool.h"
#include "engine/attention_split.h"
#include "engine/heavy_hitter_eviction.h"
#include "engine/step_phase_profile.h"
#include "engine/streaming_eviction.h"
#include "kernels/cpu/h2o_attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "model/model.h"

namespace kvserve {

// x[i] += y[i] * scale: a block's output into the residual stream with Granite's residual multiplier.
void add_scaled(float* x, const float* y, float scale, int64_t n);

// Where the K/V of every layer lives: block b of layer l starts at k_layers[l] + b * block_stride, laid out
// [kv_head][slot][head_dim] (see kernels/cpu/paged_attention.h).
struct KVCacheView {
  std::vector<void*> k_layers;  // elements of layer_types[l]
  std::vector<void*> v_layers;
  std::vector<KVElemType> layer_types;  // empty: every layer f32
  // Per layer, its KV-cache group (a hybrid cache: BatchSequence::group_tables); empty: every layer reads
  // BatchSequence::block_table.
  std::vector<int> layer_group;
  StreamingEviction streaming;  // what the cache keeps of the full-attention layers
  HeavyHitterEviction h2o;      // or this
  std::vector<H2OSlot*> h2o_records;  // per layer with H2O: its slot records (kernels/cpu/h2o_attention.h)
  int block_size = 16;
  int64_t block_stride = 0;
  // Per layer where they differ (Gemma 4's sliding and full layers); empty: block_stride for every layer.
  std::vector<int64_t> layer_block_strides;
  int64_t n_blocks = 0;
  int num_groups() const;
  int64_t stride(int l) const {
    return layer_block_strides.empty() ? block_stride : layer_block_strides[static_cast<size_t>(l)];
  }
};

struct BatchSequence {
  std::span<const int32_t> tokens;       // tokens of this step, at positions pos0, pos0+1, ...
  int64_t pos0 = 0;                      // tokens before them already in the cache
  std::span<const int32_t> block_table;  // covers positions [0, pos0 + tokens.size())
  std::vector<std::span<const int32_t>> group_tables;  // groups 1.. of a hybrid cache, as block_table
  std::span<const int32_t> table(int group) const { return group == 0 ? block_table : group_tables[group - 1]; }
  bool want_logits = true;               // logits of the last token of this chunk
  bool all_logits = false;               // logits of every token of this chunk (perplexity), in order
  bool long_rope = false;                // LongRoPE models: rotate with the long factors (engine/long_rope.h)
};

// H2O attention of layer il's cache for sequence s (kernels/cpu/h2o_attention.h): its blocks in `group`,
// the layer's arrays and records, the budget. The caller sets the rows (q, k, v, out), the head counts,
// head_dim, scale and softcap.
H2OAttentionArgs h2o_layer_args(const KVCacheView& kv, int il, const BatchSequence& s, int group);

class ModelRunner {
 public:
  explicit ModelRunner(const Model& model, ThreadPool& pool = ThreadPool::global());

  // Runs the step; writes n_vocab logits per sequence with want_logits (in batch order), or per token of a
  // sequence with all_logits, to `logits`. Returns the number of logit rows written.
  int forward(std::span<const BatchSequence> batch, const KVCacheView& kv, std::vector<float>& logits);

  const Model& model() const { return model_; }

  // A step of one token runs in one parallel region (single_token_step.cpp) where it can: several
  // threads, the SIMD attention worker, Q/K/V and gate/up weights that share their input's conversion.
  // Off, it takes the per-op path like any other step (the same bits: tests compare them).
  enum class SingleTokenRegion { Off, On };
  void set_single_token_region(SingleTokenRegion mode) { single_token_region_ = mode; }
  // Sets the rates (work a nanosecond, one per thread) the region's next step cuts its attention and every
  // matmul by, as if measured (tests: any cut gives the same bits).
  void set_region_rates(const std::vector<double>& rates);
  // How the region's threads share a matmul's rows. Stealing: equal shares, and a thread done with its own
  // takes chunks from the back of the others' (ThreadPool::balanced_share). Static: shares cut by the
  // measured rates, nothing taken (the claims' lines stay put). Probed (the default): Static while the
  // round trip between the first and last thread's cores, probed every kProbeEverySteps steps, is above
  // kFarRoundTripNs, else Stealing.
  enum class RegionShares { Probed, Stealing, Static };
  void set_region_shares(RegionShares shares) { region_shares_ = shares; }
  static constexpr int64_t kProbeEverySteps = 256;
  static constexpr double kFarRoundTripNs = 200;
  // The round trip the region last probed (0 before its first step with two threads or more).
  double region_round_trip_ns() const { return region_round_trip_ns_; }
  // Whether a one-token step runs as one parallel region (forward_single_token) rather than per op.
  bool single_token_region_applies() const;
  // Times the single-token region's phases (StepPhaseProfile) from now on, from zero; off, nothing is timed.
  void set_phase_profile(bool on);
  // The phases timed since set_phase_profile(true), or nullptr when off.
  const StepPhaseProfile* phase_profile() const { return phase_profile_.get(); }

 private:
  void ensure_scratch(int64_t n_tokens);
  // xn_ = rmsnorm(x_, weight) for the first n_tokens rows, on the pool when there are enough of them; with
  // `acts` (prepared for xn_), each row is converted right after it is normalized.
  void normalize_tokens(const float* weight, int64_t n_tokens, MatmulActs* acts = nullptr);
  // outputs = weights x rmsnorm(x_, norm_weight) for the first n_tokens rows (xn_ holds the normalized rows).
  void project_normalized(std::span<const MatmulOutput> outputs, const float* norm_weight, int64_t n_tokens);
  bool region_weights_ok() const;
  // The region's geometry of a kind of layer (Gemma 4: sliding or full) is its first layer's.
  int region_first_layer(bool swa) const;
  // How many of q, k, v layer l projects (the rest: none, or v is k's projection).
  size_t qkv_projections(int l) const;
  // MoE layers (moe_ffn.cpp): each token's experts and weights from the router over xn_, then x_ += the
  // weighted sum of its experts' SwiGLU outputs (xn_ = rmsnorm(x_, ffn_norm) first).
  void route_tokens(const LayerWeights& L, int64_t n_tokens);
  void moe_ffn(const LayerWeights& L, int64_t n_tokens);
  // moe_ffn's expert outputs (moe_out_, and the shared experts' in moe_shared_): one token's in two passes
  // over the pool (every gate/up, then every down), or any tokens expert by expert on their gathered rows.
  // Gemma 4 (ModelConfig::moe_dense_branch): x_ += post_norm(post_norm_1(dense FFN) + post_norm_2(experts)), the
  // router on the residual's own scaled norm.
  void moe_with_dense_branch(const LayerWeights& L, int il, int64_t n_tokens);
  void experts_one_token(const LayerWeights& L);
  void experts_by_expert(const LayerWeights& L, int64_t n_tokens);
  // x_ += the FFN of layer il: its experts (and shared experts), or the dense SwiGLU / GeGLU.
  void moe_or_dense_ffn(const LayerWeights& L, int il, int64_t n_tokens);
  // x_ += MLA attention of layer il (mla_attention.cpp): latent rows into the cache, attention in the
  // latent space with absorbed queries, values up-projected per head, the output projection.
  void mla_attention(const LayerWeights& L, std::span<const BatchSequence> batch, int64_t n_tokens,
                     const float* cos_sin, const int64_t* kv_offset, const KVCacheView& kv, int il, int group);
  // Gemma 4's per-layer embeddings (per_layer_embedding.cpp): every layer's input of each token of the step into
  // ple_ (after the embeddings are in x_), and after layer il's block x_ += its projected, gated share.
  void per_layer_inputs(std::span<const BatchSequence> batch, int64_t n_tokens);
  void add_per_layer_embedding(const LayerWeights& L, int il, int64_t n_tokens);
  // The final norm and output head over the rows that want logits; returns how many.
  int output_logits(std::span<const BatchSequence> batch, std::vector<float>& logits);
  // Granite's logit divisor, then Gemma's final logit soft-capping (no-op for other models).
  void finish_logits(float* logits, int64_t n) const;
  // Token id's embedding row (times Gemma's scale) into out[n_embd].
  void embed(int32_t id, float* out) const;
  // out = act(gate) * up over n elements: SwiGLU, or Gemma's GeGLU. out may be gate.
  void ffn_activation(const float* gate, const float* up, float* out, int64_t n) const;
  // out = gelu(gate) * up, exact or from ggml's table as the model's reference computes it (ModelConfig::gelu_exact).
  void gelu(const float* gate, const float* up, float* out, int64_t n) const;
  int forward_single_token(const BatchSequence& s, const KVCacheView& kv, std::vector<float>& logits);
  std::vector<PagedAttentionArgs> attn_args_;  // one per sequence of the step
  std::vector<H2OAttentionArgs> h2o_args_;     // the same for layers with H2O eviction

  const Model& model_;
  ThreadPool& pool_;
  Rope rope_;
  Rope rope_swa_;  // sliding-window layers' RoPE (Gemma 3: base 10000, no context scaling)
  Rope rope_long_, rope_swa_long_;  // the same with LongRoPE's long factors (BatchSequence::long_rope)
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, tmp_;
  std::vector<float> rope_cos_sin_;  // per token of the batch: its position's RoPE cos/sin, shared by all layers
  std::vector<float> rope_swa_cos_sin_;  // the same for the sliding-window layers (when the model has them)
  // Attention sinks (KVCacheView::streaming): per token, the angles of its query for the sinks, the query
  // rows rotated with them, and the window's softmax log-sums the sinks are folded into.
  std::vector<float> rope_sink_cos_sin_, q_sink_, attn_lse_;
  std::vector<int64_t> kv_offset_;   // per group and token of the batch: element offset of its K/V slot (head 0)
  // Where layers' rows differ (Gemma 4): per group and token its block, per token its slot, and the offsets of the
  // layer at hand.
  std::vector<int64_t> kv_block_, kv_slot_, layer_kv_offset_;
  // Gemma 4: per token, n_layers inputs of n_embd_per_layer ([token][layer][value]); one layer's gate rows.
  std::vector<float> ple_, ple_gate_, ple_row_;  // ple_row_: one token's per_layer_token_embd row
  std::vector<float> q_temperature_;  // per token of the batch: its position's attention temperature (Ministral 3)
  // The batch's activations for the next matmul, converted by the thread that wrote each row (the norms
  // before Q/K/V and gate/up, SiLU before the down projection).
  MatmulActs step_acts_;
  // MoE: router probabilities [token][expert], each token's chosen experts and weights [token][rank], each
  // (token, rank)'s expert output, and one expert's gathered rows and their projections.
  std::vector<float> moe_logits_, moe_weight_, moe_out_, moe_in_, moe_gate_, moe_up_, moe_down_;
  std::vector<int32_t> moe_choice_;
  std::vector<float> moe_select_;  // the router's selection scores of one token (with bias, groups masked)
  std::vector<float> moe_shared_;  // the shared experts' output [token][n_embd]
  // MLA: q's projection [token][head][head_dim], its low-rank stage, the latent + rope key rows, the values
  // [token][head][head_dim_v], one head's gathered rows and their projection.
  std::vector<float> mla_q_, mla_qa_, mla_kv_, mla_v_, mla_head_in_, mla_head_out_;

  // The single-token region's state: each thread's own copies of what the per-op path computes once on
  // the calling thread, and the attention partitions' partials.
  struct ThreadScratch {
    std::vector<float> xn, q, ffn;
    std::vector<float> q_sink;  // attention sinks: the sinks' query
    std::vector<float> x;  // the residual stream, with post-norms (each thread's own copy)
    MatmulActs acts;
  };
  SingleTokenRegion single_token_region_ = SingleTokenRegion::On;
  bool region_weights_ok_ = false;
  std::vector<ThreadScratch> thread_scratch_;
  std::vector<float> partials_;
  std::unique_ptr<StepPhaseProfile> phase_profile_;
  std::vector<int64_t> unit_first_;      // first attention unit of each thread's share
  std::vector<int64_t> unit_first_swa_;  // the same in the sliding-window layers
  AttentionSplit attention_split_;
  // Each thread's rows of the region's matmuls, one split per phase (those of other phases unused).
  std::array<RateSplit, kStepPhases> matmul_splits_;
  RegionShares region_shares_ = RegionShares::Probed;
  std::unique_ptr<HandoffProbe> handoff_probe_;  // its line not movable
  int64_t region_steps_ = 0;
  double region_round_trip_ns_ = 0;
};

}  // namespace kvserve
