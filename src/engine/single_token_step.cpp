// ModelRunner::forward for a step of one token (batch-1 decode) on a pool of several threads: the whole
// step in one parallel region. The per-op path forks and joins the pool for every matmul and attention
// (5 a layer, 151 a SmolLM2 token), and between two of them the other threads wait while the caller
// alone normalizes, quantizes and adds the residual. Here every thread does that small serial work itself
// (on its own copies), takes its rows of each matmul, and a barrier separates the steps. The arithmetic
// is the per-op path's, operation for operation, so the logits are the same bits
// (test: SingleTokenRegionTest.LogitsAndKVMatchPerOpPathBitForBit).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <span>

#include "engine/kv_row_store.h"
#include "engine/model_runner.h"
#include "kernels/cpu/attention_sinks.h"
#include "kernels/cpu/h2o_attention.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention_impl.h"

namespace kvserve {

namespace {

// [first, last) of n items for thread ti of nt, contiguous and in order (as parallel_for_balanced's
// initial shares).
struct Share {
  int64_t first, last;
};
Share static_share(int64_t n, int ti, int nt) {
  const int64_t per = (n + nt - 1) / nt;
  return {std::min(n, ti * per), std::min(n, (ti + 1) * per)};
}

}  // namespace

void ModelRunner::set_phase_profile(bool on) {
  phase_profile_.reset();
  if (!on) return;
  phase_profile_ = std::make_unique<StepPhaseProfile>();
  phase_profile_->reset(pool_.size());
}

void ModelRunner::set_region_rates(const std::vector<double>& rates) {
  const int nt = static_cast<int>(rates.size());
  attention_split_.rates.resize(nt);
  attention_split_.rates.set_rates(rates);
  for (RateSplit& split : matmul_splits_) {
    split.resize(nt);
    split.set_rates(rates);
  }
}

bool ModelRunner::single_token_region_applies() const {
  if (single_token_region_ == SingleTokenRegion::Off || pool_.size() == 1 || detail::simd_worker_in_use() == nullptr)
    return false;
  return region_weights_ok_;
}

bool ModelRunner::region_weights_ok() const {
  // The region has neither expert routing nor latent attention: MoE and MLA steps take the per-op path.
  // Nor layers without pre-norms, or q / k norms over the whole projection (OLMo 2; each thread norms its own KV
  // head here).
  if (model_.config.moe() || model_.config.mla()) return false;
  if (!model_.config.pre_norms || model_.config.qk_norm_full) return false;
  // Nor the output projection's bias and learned sinks (gpt-oss, an MoE model anyway).
  if (model_.config.learned_sinks) return false;
  // Nor Llama 4's L2-normed q / k and chunked layers (an MoE model anyway).
  if (model_.config.qk_l2_norm || model_.config.swa_chunked) return false;
  // Gemma 4's head sizes and KV heads may differ between the two kinds of layer, one geometry per kind.
  const ModelConfig& c = model_.config;
  for (int l = 0; l < c.n_layers; ++l) {
    const int first = c.is_swa_layer(l) ? region_first_layer(true) : region_first_layer(false);
    if (c.head_dim_of(l) != c.head_dim_of(first) ||
        c.kv_heads_of(c.kv_source_layer(l)) != c.kv_heads_of(c.kv_source_layer(first)))
      return false;
  }
  for (const LayerWeights& L : model_.layers) {
    if (L.bo.valid()) return false;
    // Gemma 4's per-layer inputs and output scales act on each thread's copy of the residual (post-norms).
    if ((c.n_embd_per_layer > 0 || L.layer_output_scale.valid()) && !c.post_norms) return false;
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = model_.layers[static_cast<size_t>(l)];
    const MatmulOutput qkv[] = {{&L.wq, nullptr}, {&L.wk, nullptr}, {&L.wv, nullptr}};
    const MatmulOutput gate_up[] = {{&L.w_gate, nullptr}, {&L.w_up, nullptr}};
    if (!matmul_inputs_stackable(std::span(qkv, qkv_projections(l))) || !matmul_inputs_stackable(gate_up)) return false;
  }
  return true;
}

int ModelRunner::region_first_layer(bool swa) const {
  const ModelConfig& c = model_.config;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.is_swa_layer(l) == swa) return l;
  return 0;
}

size_t ModelRunner::qkv_projections(int l) const {
  const ModelConfig& c = model_.config;
  // Gemma 4: a layer on another's KV projects only q; one without attn_v takes its keys' projection as values.
  if (!c.has_own_kv(l)) return 1;
  return model_.layers[static_cast<size_t>(l)].wv.valid() ? 3 : 2;
}

int ModelRunner::forward_single_token(const BatchSequence& s, const KVCacheView& kv, std::vector<float>& logits) {
  const ModelConfig& c = model_.config;
  const int nt = pool_.size();
  const int64_t E = c.n_embd, H = c.n_heads;
  // Each kind of layer's heads (Gemma 4's sliding and full layers differ; elsewhere both are the model's).
  struct Geometry {
    int64_t D, KVH;
  };
  const auto geometry_of = [&](int l) { return Geometry{c.head_dim_of(l), c.kv_heads_of(c.kv_source_layer(l))}; };
  const Geometry full = geometry_of(region_first_layer(false)), local = geometry_of(region_first_layer(true));
  const int64_t D = full.D, KVH = full.KVH;
  const detail::SimdWorker& attn_worker = *detail::simd_worker_in_use();

  embed(s.tokens[0], x_.data());
  if (c.n_embd_per_layer > 0) per_layer_inputs({&s, 1}, 1);
  const int64_t pos = s.pos0;
  const int64_t n_rot = rope_.n_rot();
  rope_cos_sin_.resize(static_cast<size_t>(n_rot));
  (s.long_rope ? rope_long_ : rope_).angles(pos, rope_cos_sin_.data());
  const bool has_swa = !c.swa_layers.empty();
  if (has_swa) {
    rope_swa_cos_sin_.resize(static_cast<size_t>(rope_swa_.n_rot()));
    (s.long_rope ? rope_swa_long_ : rope_swa_).angles(pos, rope_swa_cos_sin_.data());
  }
  // A streaming cache windows the full-attention layers, and their sinks take a query rotated at its cache
  // position (kernels/cpu/attention_sinks.h).
  const StreamingEviction& stream = kv.streaming;
  const bool has_sinks = stream.on() && stream.sinks > 0;
  if (has_sinks) {
    rope_sink_cos_sin_.resize(static_cast<size_t>(n_rot));
    (s.long_rope ? rope_long_ : rope_)
        .angles(sink_query_position(pos, stream.sinks, stream.window), rope_sink_cos_sin_.data());
    attn_lse_.resize(static_cast<size_t>(H));
  }
  // The new token's block in each group (one group unless the cache is hybrid); a layer places its K/V rows in it by
  // its own stride and head size.
  const int n_groups = kv.num_groups();
  kv_block_.resize(static_cast<size_t>(n_groups));
  for (int g = 0; g < n_groups; ++g) kv_block_[static_cast<size_t>(g)] = s.table(g)[pos / kv.block_size];

  // Attention units: (partition, KV head), split by their cost in positions with each thread's part following the rate
  // it attended at in the steps before (AttentionSplit), so each thread's share is one region of the cache. (SmolLM2
  // decode, one process alternating equal and measured parts every 4 steps: 0.968-1.002x the step time over 9 runs,
  // median 0.993; the 1-2 % of a step that one thread waited for the other at the barrier after attention, when their
  // cores ran at different speeds. Taking units from each other's shares as they finish instead, 1.008-1.024x: the
  // extra walks' cold starts cost more than the waits.) A thread walks its share in as few calls as it can, each over a
  // run of partitions with the same heads, block by block with those heads inside: the cache in address order, and the
  // K rows of the next partition streaming in while it finishes one (a call per partition started each one from
  // memory). SmolLM2 decode ~1.03x over one call per KV head (KV-head-major units); 1B-shaped within noise. The thread
  // whose share holds a KV head's newest partition writes that head's new K/V row before reading it, so no barrier
  // separates the K/V store from attention.
  PagedAttentionArgs base;
  base.n_tokens = 1;
  base.n_heads = static_cast<int>(H);
  base.n_kv_heads = static_cast<int>(KVH);
  base.head_dim = static_cast<int>(D);
  base.block_table = s.block_table.data();
  base.block_size = kv.block_size;
  base.pos0 = pos;
  base.block_stride = kv.block_stride;
  base.scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  base.out = attn_.data();
  base.softcap = c.attn_softcap;
  const int64_t n_parts = detail::partition_count(base, 0);
  const int64_t part_slots = detail::partition_blocks(kv.block_size) * kv.block_size;
  // The full-attention layers' units: under a streaming window only those it reaches, as the sliding-window
  // layers' below.
  PagedAttentionArgs full_base = base;
  full_base.window = stream.window;
  const int64_t full_first_pos = detail::first_attended(full_base, 0);
  const int64_t full_first_unit = full_first_pos / part_slots * KVH;
  const AttentionSplit::Units units{n_parts, KVH, pos + 1, part_slots, full_first_pos};
  if (attention_split_.rates.threads() != nt) attention_split_.rates.resize(nt);
  for (RateSplit& split : matmul_splits_)
    if (split.threads() != nt) split.resize(nt);
  attention_split_.split(units, unit_first_);
  for (int64_t& u : unit_first_) u = std::max(u, full_first_unit);
  // Sliding-window layers (Gemma 3's local ones) split only the units their window reaches: those before
  // it cost nothing, and no thread takes them (the merge starts at the window's partition).
  PagedAttentionArgs swa_base = base;
  swa_base.window = c.sliding_window;
  swa_base.n_kv_heads = static_cast<int>(local.KVH);
  swa_base.head_dim = static_cast<int>(local.D);
  swa_base.scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(local.D));
  const int64_t swa_first_pos = has_swa ? detail::first_attended(swa_base, 0) : 0;
  const int64_t swa_first_unit = swa_first_pos / part_slots * local.KVH;
  const AttentionSplit::Units swa_units{n_parts, local.KVH, pos + 1, part_slots, swa_first_pos};
  if (has_swa) {
    attention_split_.split(swa_units, unit_first_swa_);
    for (int64_t& u : unit_first_swa_) u = std::max(u, swa_first_unit);
  }
  // The step's attention time per thread goes to the split's rates from one kind of layer: the sliding-window
  // ones where the model has them (most of Gemma 3's), else all.
  const AttentionSplit::Units& timed_units = has_swa ? swa_units : units;
  const std::vector<int64_t>& timed_first = has_swa ? unit_first_swa_ : unit_first_;
  const auto owner_of = [](const std::vector<int64_t>& first, int64_t u) {
    return static_cast<int>(std::upper_bound(first.begin(), first.end(), u) - first.begin()) - 1;
  };
  const size_t unit_floats_full = detail::partition_partial_floats(base);
  const size_t unit_floats_swa = has_swa ? detail::partition_partial_floats(swa_base) : 0;
  partials_.resize(static_cast<size_t>(n_parts) * std::max(static_cast<size_t>(KVH) * unit_floats_full,
                                                           static_cast<size_t>(local.KVH) * unit_floats_swa));

  thread_scratch_.resize(static_cast<size_t>(nt));
  for (ThreadScratch& ts : thread_scratch_) {
    ts.xn.resize(static_cast<size_t>(E));
    ts.x.resize(c.post_norms ? static_cast<size_t>(E) : 0);
    ts.q.resize(static_cast<size_t>(c.max_q_dim()));
    ts.q_sink.resize(has_sinks ? static_cast<size_t>(c.max_q_dim()) : 0);
    // The FFN's activations, and Gemma 4's gated per-layer input after them.
    ts.ffn.resize(static_cast<size_t>(std::max(c.max_n_ff(), c.n_embd_per_layer)));
  }
  const bool want_logits = s.want_logits;
  if (want_logits) logits.resize(static_cast<size_t>(c.n_vocab));

  StepPhaseProfile* profile = phase_profile_.get();
  if (profile != nullptr && profile->threads() != nt) profile->reset(nt);
  // Where the threads' cores sit (a VM's vCPUs move between CCDs while it runs), probed every so often: 4
  // batches of 8 exchanges between the first and last thread, ~13 us every 256 steps on far cores.
  constexpr int kProbeRoundTrips = 8, kProbeBatches = 4;
  const bool probe = region_shares_ == RegionShares::Probed && region_steps_++ % kProbeEverySteps == 0;
  if (probe && handoff_probe_ == nullptr) handoff_probe_ = std::make_unique<HandoffProbe>();
  const bool static_shares = region_shares_ == RegionShares::Static ||
                             (region_shares_ == RegionShares::Probed && region_round_trip_ns_ > kFarRoundTripNs);
  pool_.run([&](int ti, int) {
    ThreadScratch& ts = thread_scratch_[static_cast<size_t>(ti)];
    if (probe) {
      // Thread 0 is the caller's: the result is read after the job.
      const double ns = handoff_probe_->run(ti, 0, nt - 1, kProbeRoundTrips, kProbeBatches);
      if (ti == 0) region_round_trip_ns_ = ns;
    }
    StepPhaseProfile::Clock clock(profile, ti);
    // The barrier that ends phase p, with the phase's work and this thread's wait timed when profiling.
    const auto end_phase = [&](StepPhase p) {
      clock.work_done(p);
      pool_.barrier(ti);
      clock.wait_done(p);
    };
    // This thread's time in attention over the step's (timed) layers, for the next step's split.
    std::chrono::steady_clock::duration attending{};
    // Each matmul's rows (RegionShares). Static on far cores: with the two vCPUs on two CCDs (round trip ~400
    // ns) the claims' lines moving between the cores cost more than the tails they evened out (SmolLM2 decode
    // after 512 positions, alternating runs: equal static shares 1.044x and 1.061x over 6 and 8 rounds), while
    // on one CCD (~80 ns) taking chunks stays ahead (static 0.98-0.99x over 8 rounds). The static parts are
    // per phase, since one core can be the slower in one and not in another. Stealing keeps its order: the
    // reversal below measured 0.985x on one CCD (2 rounds), so it was left out there. Matmuls of more than
    // kStaticShareMaxBytes steal on far cores too: the claims' fixed cost is small against their time, and a
    // share fixed for the whole matmul cannot follow a host that slows one core mid-step (1B-shaped Q4_0, whose
    // smallest matmul is 2.4 MB, split placement with a noisy neighbour: static 0.94x, 8 rounds).
    constexpr double kStaticShareMaxBytes = 2.0 * 1024 * 1024;
    std::array<double, kStepPhases> matmul_ns{}, matmul_bytes{};
    const auto matmul_share = [&](StepPhase phase, int64_t rows, int64_t chunk, size_t row_bytes, auto&& multiply) {
      if (!static_shares || static_cast<double>(rows) * static_cast<double>(row_bytes) > kStaticShareMaxBytes) {
        pool_.balanced_share(ti, rows, multiply, chunk);
        return;
      }
      // The weights lie in the order the step reads them (model/weight_repack.cpp), so with the threads' order
      // reversed in wo and down the thread whose share ended a matrix starts the next one where its stream (and
      // the core's prefetcher) already is: qkv's last thread goes on into wo, wo's first into gate/up... (split
      // placement, alternating runs: 1.018x over 10 rounds and again over 4; qkv 195 -> 177 us a step).
      const bool reversed = phase == StepPhase::Wo || phase == StepPhase::Down;
      const RateSplit::Range r =
          matmul_splits_[static_cast<size_t>(phase)].range((rows + chunk - 1) / chunk, ti, reversed);
      const int64_t b = r.first * chunk, e = std::min(rows, r.last * chunk);
      if (b >= e) return;
      const auto start = std::chrono::steady_clock::now();
      multiply(b, e);
      matmul_ns[static_cast<size_t>(phase)] +=
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
      matmul_bytes[static_cast<size_t>(phase)] += static_cast<double>(e - b) * static_cast<double>(row_bytes);
    };
    // The residual stream. With post-norms (Gemma) each thread keeps its own copy: a projection's output must
    // be whole before its norm, so every thread normalizes all of it and adds it to its copy, the same
    // operations in the same order on every thread (the per-op path's too), and no second barrier is needed.
    float* x = c.post_norms ? ts.x.data() : x_.data();
    if (c.post_norms) std::copy_n(x_.data(), E, x);
    // x += w * in (or x += post_norm(w * in)): each thread adds the rows it computed, then a barrier.
    const auto add_projection_to_residual = [&](const Tensor& w, const float* in, int64_t n_in, const Tensor& post,
                                                StepPhase phase) {
      ts.acts.convert(w.type, in, n_in, 1);
      matmul_share(phase, w.rows(), matmul_balance_chunk_rows(w, 1), w.row_size(), [&](int64_t b, int64_t e) {
        matmul_rows(w, ts.acts, tmp_.data(), b, e);
        if (c.post_norms) return;
        if (c.residual_scale != 0.0f)
          add_scaled(x_.data() + b, tmp_.data() + b, c.residual_scale, e - b);
        else
          add_inplace(x_.data() + b, tmp_.data() + b, e - b);
      });
      end_phase(phase);
      if (c.post_norms) {
        rmsnorm(tmp_.data(), static_cast<const float*>(post.data), ts.xn.data(), static_cast<int>(E), c.rms_eps);
        add_inplace(x, ts.xn.data(), E);
      }
    };
    // The norm weights (2 KiB at SmolLM2 shapes) are read once a token, and the weights streamed between
    // two reads push them out of every cache: asked for one phase ahead, each norm took ~0.5 instead of
    // ~1-1.5 us (per-phase rdtsc, SmolLM2; ~1 % of the step).
    const auto norm_ahead = [&](const Tensor& norm) {
      prefetch_for_read(norm.data, static_cast<size_t>(E) * sizeof(float));
    };
    norm_ahead(model_.layers[0].attn_norm);
    for (int il = 0; il < c.n_layers; ++il) {
      const LayerWeights& L = model_.layers[il];
      void* kl = kv.k_layers[il];
      void* vl = kv.v_layers[il];
      const KVElemType kv_type = kv.layer_types.empty() ? KVElemType::F32 : kv.layer_types[il];
      const KVRotation rot = kv_rotation(kv_type, static_cast<int>(D));
      const bool swa = c.is_swa_layer(il);
      const Geometry& geometry = swa ? local : full;
      const int64_t D = geometry.D, KVH = geometry.KVH, QD = H * D, F = c.n_ff_of(il);
      const size_t unit_floats = swa ? unit_floats_swa : unit_floats_full;
      const bool own_kv = c.has_own_kv(il);
      const int group = kv.layer_group.empty() ? 0 : kv.layer_group[static_cast<size_t>(il)];
      const int64_t kv_offset = kv_block_[static_cast<size_t>(group)] * kv.stride(il) + pos % kv.block_size * D;
      const std::vector<int64_t>& first_unit = swa ? unit_first_swa_ : unit_first_;
      const Share my_units{first_unit[static_cast<size_t>(ti)], first_unit[static_cast<size_t>(ti) + 1]};
      const Rope& rope = swa ? rope_swa_ : rope_;
      const float* cos_sin = swa ? rope_swa_cos_sin_.data() : rope_cos_sin_.data();

      rmsnorm(x, static_cast<const float*>(L.attn_norm.data), ts.xn.data(), static_cast<int>(E), c.rms_eps);
      const MatmulOutput qkv_all[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
      const size_t n_proj = qkv_projections(il);
      const std::span<const MatmulOutput> qkv(qkv_all, n_proj);
      ts.acts.convert(qkv, ts.xn.data(), 1);
      // H2O's layers: each KV head's row goes where its eviction puts it, and the head is attended by the
      // thread that owns it (kernels/cpu/h2o_attention.h), from its kept slots.
      H2OSlot* h2o_records = kv.h2o_records.empty() ? nullptr : kv.h2o_records[static_cast<size_t>(il)];
      // The new K/V rows' lines, owned ahead of their stores after the projection: the thread storing
      // them otherwise waits on memory there while the other waits for it at the next barrier.
      for (int64_t h = 0; h < KVH && h2o_records == nullptr && own_kv; ++h) {
        if (owner_of(first_unit, (n_parts - 1) * KVH + h) != ti) continue;
        const int64_t off = kv_offset + h * kv.block_size * D;
        prefetch_for_write(kv_row_address(kv_type, kl, off), kv_row_bytes(kv_type, D));
        prefetch_for_write(kv_row_address(kv_type, vl, off), kv_row_bytes(kv_type, D));
      }
      const Tensor* biases[] = {&L.bq, &L.bk, &L.bv};
      int64_t qkv_rows = 0;
      for (const MatmulOutput& o : qkv) qkv_rows += o.w->rows();
      matmul_share(StepPhase::Qkv, qkv_rows, matmul_balance_chunk_rows(qkv, 1), L.wq.row_size(),
                   [&](int64_t b, int64_t e) {
                     matmul_rows_stacked(qkv, ts.acts, b, e);
                     // Biases (qwen2) on the rows just computed, as forward's add_bias adds them.
                     int64_t offset = 0;
                     for (size_t i = 0; i < n_proj; ++i) {
                       const int64_t rows = qkv[i].w->rows();
                       const int64_t rb = std::max(b, offset) - offset, re = std::min(e, offset + rows) - offset;
                       if (biases[i]->valid() && rb < re)
                         add_inplace(qkv[i].y + rb, static_cast<const float*>(biases[i]->data) + rb, re - rb);
                       offset += rows;
                     }
                   });
      end_phase(StepPhase::Qkv);

      // RoPE: every thread rotates its own copy of q; a KV head's k is rotated and stored with its v by
      // the thread that reads the newest partition.
      std::copy_n(q_.data(), QD, ts.q.data());
      if (c.qk_norm)
        rmsnorm_heads(ts.q.data(), static_cast<const float*>(L.q_norm.data), static_cast<int>(H), static_cast<int>(D),
                      c.rms_eps);
      if (c.attn_temperature_on(il)) scale_inplace(ts.q.data(), QD, c.attn_temperature(pos));
      const bool rotates = c.uses_rope(il);
      const bool sinks_here = has_sinks && !swa;
      if (sinks_here) {
        std::copy_n(ts.q.data(), QD, ts.q_sink.data());
        if (rotates) rope.rotate(ts.q_sink.data(), static_cast<int>(H), rope_sink_cos_sin_.data());
        if (rot.any()) hadamard_rotate(ts.q_sink.data(), QD, rot.k_block);
      }
      if (rotates) rope.rotate(ts.q.data(), static_cast<int>(H), cos_sin);
      if (rot.any()) hadamard_rotate(ts.q.data(), QD, rot.k_block);
      // KV head h's new K row normed and rotated (and its V row too under a quantized cache's rotation; Gemma 4: V
      // the keys' projection where the layer has no attn_v, normed without a weight).
      const auto prepare_kv_row = [&](int64_t h) {
        float* kh = k_.data() + h * D;
        float* vh = v_.data() + h * D;
        if (n_proj == 2) std::copy_n(kh, D, vh);
        if (c.qk_norm) rmsnorm_heads(kh, static_cast<const float*>(L.k_norm.data), 1, static_cast<int>(D), c.rms_eps);
        if (c.v_norm) rmsnorm_heads(vh, nullptr, 1, static_cast<int>(D), c.rms_eps);
        if (rotates) rope.rotate(kh, 1, cos_sin);
        if (rot.any()) {
          hadamard_rotate(kh, D, rot.k_block);
          hadamard_rotate(vh, D, rot.v_block);
        }
        return kh;
      };
      if (h2o_records != nullptr) {
        H2OAttentionArgs a = h2o_layer_args(kv, il, s, group);
        a.q = ts.q.data();
        a.k = k_.data();
        a.v = v_.data();
        a.out = attn_.data();
        a.n_heads = static_cast<int>(H);
        a.n_kv_heads = static_cast<int>(KVH);
        a.head_dim = static_cast<int>(D);
        a.scale = (swa ? swa_base : base).scale;
        a.softcap = c.attn_softcap;
        const Share heads = static_share(KVH, ti, nt);
        for (int64_t h = heads.first; h < heads.last; ++h) {
          prepare_kv_row(h);
          h2o_attention_head(a, static_cast<int>(h));
          if (rot.any()) hadamard_rotate(attn_.data() + h * (H / KVH) * D, (H / KVH) * D, rot.v_block);
        }
        norm_ahead(L.ffn_norm);
        end_phase(StepPhase::Attention);
        add_projection_to_residual(L.wo, attn_.data(), QD, L.attn_post_norm, StepPhase::Wo);
      }
      for (int64_t h = 0; h < KVH && h2o_records == nullptr && own_kv; ++h) {
        if (owner_of(first_unit, (n_parts - 1) * KVH + h) != ti) continue;
        float* kh = prepare_kv_row(h);
        const int64_t off = kv_offset + h * kv.block_size * D;
        store_kv_row(kv_type, kh, D, kl, off);
        store_kv_row(kv_type, v_.data() + h * D, D, vl, off);
      }
      if (h2o_records == nullptr) {
        PagedAttentionArgs a = swa ? swa_base : base;
        a.block_table = s.table(group).data();
        a.block_stride = kv.stride(il);
        a.q = ts.q.data();
        a.k_cache = kl;
        a.v_cache = vl;
        a.kv_type = kv_type;
        a.window = swa ? c.sliding_window : stream.window;
        norm_ahead(L.ffn_norm);
        // This thread's units into partials_ ([kv head][partition][group][head_dim + 2]).
        const auto attend_start = std::chrono::steady_clock::now();
        detail::attend_decode_units(attn_worker, a, my_units.first, my_units.last, partials_.data());
        if (swa == has_swa) attending += std::chrono::steady_clock::now() - attend_start;
        end_phase(StepPhase::Attention);
        // This thread's KV heads into attn_, then a barrier. Every thread merging every head into its own copy
        // instead (no barrier, but each reads all the partials, half of them written by the other core)
        // measured slower: SmolLM2 decode after 512 positions, alternating runs, the split merge 1.017-1.022x
        // with the two vCPUs on two CCDs (14 rounds), 1.004x on one (8 rounds; 1.011x after 128 positions).
        if (sinks_here) a.lse = attn_lse_.data();
        const Share heads = static_share(KVH, ti, nt);
        for (int64_t h = heads.first; h < heads.last; ++h) {
          attn_worker.merge(a, 0, static_cast<int>(h),
                            partials_.data() + static_cast<size_t>(h * n_parts) * unit_floats);
          if (sinks_here) fold_attention_sinks(a, ts.q_sink.data(), stream.sinks, 0, static_cast<int>(h));
          // This KV head's query heads mix rotated V rows: rotated back.
          if (rot.any()) hadamard_rotate(a.out + h * (H / KVH) * D, (H / KVH) * D, rot.v_block);
      }
      end_phase(StepPhase::Merge);
      add_projection_to_residual(L.wo, attn_.data(), QD, L.attn_post_norm, StepPhase::Wo);
      }

      // Feed-forward (SwiGLU, or GeGLU).
      rmsnorm(x, static_cast<const float*>(L.ffn_norm.data), ts.xn.data(), static_cast<int>(E), c.rms_eps);
      const MatmulOutput gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
      ts.acts.convert(gate_up, ts.xn.data(), 1);
      matmul_share(StepPhase::GateUp, L.w_gate.rows() + L.w_up.rows(), matmul_balance_chunk_rows(gate_up, 1),
                   L.w_gate.row_size(), [&](int64_t b, int64_t e) { matmul_rows_stacked(gate_up, ts.acts, b, e); });
      end_phase(StepPhase::GateUp);
      ffn_activation(gate_.data(), up_.data(), ts.ffn.data(), F);
      norm_ahead(il + 1 < c.n_layers ? model_.layers[il + 1].attn_norm : model_.output_norm);
      add_projection_to_residual(L.w_down, ts.ffn.data(), F, L.ffn_post_norm, StepPhase::Down);
      if (c.n_embd_per_layer > 0) {
        // Gemma 4: x += post_norm(proj(gelu(inp_gate x) * the layer's input)), as add_per_layer_embedding.
        const int64_t P = c.n_embd_per_layer;
        const Tensor& gate = L.ple_inp_gate;
        ts.acts.convert(gate.type, x, E, 1);
        matmul_share(StepPhase::Down, P, matmul_balance_chunk_rows(gate, 1), gate.row_size(),
                     [&](int64_t b, int64_t e) { matmul_rows(gate, ts.acts, ple_gate_.data(), b, e); });
        end_phase(StepPhase::Down);
        gelu(ple_gate_.data(), ple_.data() + il * P, ts.ffn.data(), P);
        add_projection_to_residual(L.ple_proj, ts.ffn.data(), P, L.ple_post_norm, StepPhase::Down);
      }
      if (L.layer_output_scale.valid()) scale_inplace(x, E, *static_cast<const float*>(L.layer_output_scale.data));
    }
    attention_split_.rates.record(ti,
                                  static_cast<double>(timed_units.cost(timed_first[static_cast<size_t>(ti)],
                                                                       timed_first[static_cast<size_t>(ti) + 1])),
                                  std::chrono::duration<double, std::nano>(attending).count());
    const auto record_matmuls = [&] {
      for (size_t p = 0; p < matmul_splits_.size(); ++p) matmul_splits_[p].record(ti, matmul_bytes[p], matmul_ns[p]);
    };
    if (!want_logits) {
      record_matmuls();
      return;
    }
    rmsnorm(x, static_cast<const float*>(model_.output_norm.data), ts.xn.data(), static_cast<int>(E), c.rms_eps);
    ts.acts.convert(model_.output.type, ts.xn.data(), E, 1);
    matmul_share(StepPhase::Head, model_.output.rows(), matmul_balance_chunk_rows(model_.output, 1),
                 model_.output.row_size(), [&](int64_t b, int64_t e) {
                   matmul_rows(model_.output, ts.acts, logits.data(), b, e);
                   finish_logits(logits.data() + b, e - b);
                 });
    clock.work_done(StepPhase::Head);
    record_matmuls();
  });
  if (probe) handoff_probe_->finish(kProbeRoundTrips, kProbeBatches);
  attention_split_.rates.update();
  for (RateSplit& split : matmul_splits_) split.update();
  if (profile != nullptr) {
    // What each phase read: its weights, and for attention the K and V rows of the positions it attended.
    std::array<double, kStepPhases> bytes{};
    const auto at = [&](StepPhase p) -> double& { return bytes[static_cast<size_t>(p)]; };
    for (int il = 0; il < c.n_layers; ++il) {
      const LayerWeights& L = model_.layers[il];
      at(StepPhase::Qkv) += static_cast<double>(L.wq.bytes() + L.wk.bytes() + L.wv.bytes());
      at(StepPhase::Wo) += static_cast<double>(L.wo.bytes());
      at(StepPhase::GateUp) += static_cast<double>(L.w_gate.bytes() + L.w_up.bytes());
      at(StepPhase::Down) += static_cast<double>(L.w_down.bytes());
      int64_t attended = pos + 1 - (c.is_swa_layer(il) ? swa_first_pos : full_first_pos);
      if (!kv.h2o_records.empty() && kv.h2o_records[static_cast<size_t>(il)] != nullptr) {
        const int group = kv.layer_group.empty() ? 0 : kv.layer_group[static_cast<size_t>(il)];
        const H2OAttentionArgs h = h2o_layer_args(kv, il, s, group);
        attended = std::min(pos + 1, h.heavy + h.recent);
      }
      const KVElemType kv_type = kv.layer_types.empty() ? KVElemType::F32 : kv.layer_types[il];
      const Geometry g = geometry_of(il);
      at(StepPhase::Attention) +=
          static_cast<double>(attended * g.KVH * 2) * static_cast<double>(kv_row_bytes(kv_type, g.D));
    }
    if (want_logits) at(StepPhase::Head) += static_cast<double>(model_.output.bytes());
    profile->add_step(bytes);
  }
  return want_logits ? 1 : 0;
}

}  // namespace kvserve
