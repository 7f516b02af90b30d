#!/usr/bin/env python3
"""Builds tests/golden/arch/: tiny random-weight GGUF files of architectures that ../shared/golden lacks,
and llama.cpp's greedy ids and logits for each (the protocol of ../shared/golden/gguf/README.md). Run once;
the output is committed. The vocabulary is stories260K's (512 SentencePiece tokens), copied from
../shared/golden/gguf/models/stories260K-F32.gguf, so the prompts are the shared set's.

    python3 scripts/make_arch_goldens.py --llama-cpp DIR

DIR is the llama.cpp that llama-cpp-python 0.3.36 vendors (its sdist, see fetch_llama_cpp_vocab.sh), built
with CMake into DIR/build (libllama.so in DIR/build/bin). Needs numpy; gguf-py is taken from DIR.
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "golden" / "arch"
VOCAB_FROM = REPO.parent / "shared" / "golden" / "gguf" / "models" / "stories260K-F32.gguf"
PROMPTS = ["Once upon a time", "Lily and Ben", "The cat", "One day, a little girl named"]
N_STEPS = 48


def copy_vocab(gguf, writer):
    r = gguf.GGUFReader(VOCAB_FROM)
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]) for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    return len(tokens)


def begin(gguf, path, arch, shape, rope_base, name=None):
    """A writer with the hyper-parameters every tiny model sets, in one order (the files' key order)."""
    E, L, H, KVH, D, F = shape
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name or path.stem)
    w.add_context_length(512)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(rope_base)
    return w


class Draws:
    """Weights from one seeded stream: matrices N(0, scale^2 / cols) (numpy [rows][cols] is ggml's
    ne = {cols, rows}), norm weights 1 + spread * N(0, 1) (Gemma's files hold 1 + w too)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def mat(self, rows, cols, scale=1.0):
        return (self.rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    def norm(self, n, spread):
        return (1.0 + spread * self.rng.standard_normal(n)).astype(np.float32)

    def embedding(self, n_vocab, E, spread):
        return (self.rng.standard_normal((n_vocab, E)) * spread).astype(np.float32)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_qwen3_attention(w, r, p, shape):
    """Qwen3's attention of one block: q/k/v, per-head q and k norms (spread widely so that each head's norm
    weights, not one shared scale, shape the scores), the output projection."""
    E, L, H, KVH, D, F = shape
    w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
    w.add_tensor(p + "attn_q.weight", r.mat(H * D, E))
    w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E))
    w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
    w.add_tensor(p + "attn_q_norm.weight", r.norm(D, 0.5))
    w.add_tensor(p + "attn_k_norm.weight", r.norm(D, 0.5))
    w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))


def add_llama_attention(w, r, p, shape, pre_norm=True):
    """Llama's attention of one block: separate q/k/v (q and k drawn twice as wide, so positions matter)."""
    E, L, H, KVH, D, F = shape
    if pre_norm:
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
    w.add_tensor(p + "attn_q.weight", r.mat(H * D, E, 2.0))
    w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E, 2.0))
    w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
    w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))


def tiny_qwen3(gguf, path, seed, shape=(64, 3, 4, 2, 32, 192), rope_base=1e6, yarn=None):
    """Qwen3: per-head RMSNorm of q and k (attn_q_norm / attn_k_norm) before NeoX RoPE, head_dim * heads
    (128) unlike n_embd (64), no biases. The output head is its own tensor: tied to a large embedding,
    greedy decoding only repeats the last token. With `yarn` (factor, original context): YaRN, Qwen2.5/3's
    long-context setting (per-pair blends of interpolated and original angles, cos and sin times
    1 + 0.1 ln(factor))."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape
    w = begin(gguf, path, "qwen3", shape, rope_base)
    if yarn:
        add_yarn(gguf, w, *yarn)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        add_qwen3_attention(w, r, p, shape)
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_gemma3(gguf, path, seed):
    """Gemma 3: embeddings times sqrt(n_embd), per-head q/k norms, post-norms of the attention and FFN outputs,
    GeGLU, an output head of its own (tied, greedy decoding only repeats the last token). Sliding-window
    layers by llama.cpp's default pattern (every 6th layer global: here
    layers 0-4 local with a window of 8 positions and RoPE base 10000, layer 5 global at 1e6), so the
    prompts and 48 steps run well past the window. 4 query heads on 1 KV head (as Gemma 3 1B), head_dim 32
    * 4 = 128 unlike n_embd 64. A final logit soft-cap (Gemma 2's; llama.cpp applies it to Gemma 3 when set)."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 6, 4, 1, 32, 192
    w = begin(gguf, path, "gemma3", shape, 1e6)
    w.add_sliding_window(8)
    w.add_final_logit_softcapping(10.0)
    n_vocab = copy_vocab(gguf, w)
    w.add_add_space_prefix(True)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 0.5))
    for i in range(L):
        p = f"blk.{i}."
        add_qwen3_attention(w, r, p, shape)
        w.add_tensor(p + "post_attention_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", r.mat(F, E, 2.0))
        w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F))
        w.add_tensor(p + "post_ffw_norm.weight", r.norm(E, 0.3))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_gemma12(gguf, path, seed, arch):
    """Gemma (1): embeddings times sqrt(n_embd), GeGLU, 4 query heads on 1 KV head, head_dim 32 * 4 unlike
    n_embd 64, the output tied to the embeddings (llama.cpp reads no output.weight for Gemma 1 and 2; a small
    embedding and strong layers keep greedy decoding from only repeating the last token). Gemma 2 adds
    post-norms, an attention logit soft-cap (3 here, so that it bites) and the final one (llama.cpp's
    default 30, the file gives none), and local layers by llama.cpp's default pattern (every 2nd layer
    global: layers 0 and 2 local) with a window of 8 positions and the global RoPE base."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 4, 4, 1, 32, 192
    # Embedding spread: the largest (tried 0.02-0.2) at which greedy decoding moves on from the last token.
    embd, out = (0.1 if arch == "gemma" else 0.03), 3.0
    w = begin(gguf, path, arch, shape, 10000.0)
    if arch == "gemma2":
        w.add_sliding_window(8)
        w.add_attn_logit_softcapping(3.0)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, embd))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "attn_q.weight", r.mat(H * D, E, 2.0))
        w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E, 2.0))
        w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * D, out))
        if arch == "gemma2":
            w.add_tensor(p + "post_attention_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", r.mat(F, E, 2.0))
        w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F, out))
        if arch == "gemma2":
            w.add_tensor(p + "post_ffw_norm.weight", r.norm(E, 0.3))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    finish(w)


def add_phi3_blocks(w, r, shape):
    """Phi-3's blocks: q/k/v fused in attn_qkv, the gate's and up's rows in ffn_up (the gate's first)."""
    E, L, H, KVH, D, F = shape
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "attn_qkv.weight", r.mat((H + 2 * KVH) * D, E, 2.0))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_up.weight", r.mat(2 * F, E, 2.0))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F))


def tiny_phi3(gguf, path, seed):
    """Phi-3: q, k and v fused into attn_qkv, the gate's and up projection's rows fused into ffn_up (2 x n_ff
    rows, the gate's first), NeoX RoPE, 4 query heads on 2 KV heads. A sliding window in the file, which
    llama.cpp ignores for Phi-3 (so every layer here attends to the whole context)."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 3, 4, 2, 16, 160
    # Not named "phi3": llama.cpp gives a vocabulary of a model so named Phi-3's special-token attributes,
    # which need tokens stories260K's vocabulary does not have.
    w = begin(gguf, path, "phi3", shape, 10000.0, name="tiny-fused")
    w.add_rope_dimension_count(D)
    w.add_sliding_window(8)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    add_phi3_blocks(w, r, shape)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_phi3_longrope(gguf, path, seed, original_ctx, n_rot=16, tied=False):
    """Phi-3 with LongRoPE (the 128k models, Phi-3.5): per-pair factors in rope_factors_long/short, the
    attention factor sqrt(1 + ln(512 / original) / ln(original)) as the converter writes it, and the original
    context. llama.cpp takes the long factors when its context (512 here) exceeds the original context: with
    256 the golden exercises the long ones, with 512 the short ones. With n_rot < 16 and tied, Phi-4-mini's
    shape: partial RoPE (the first n_rot dimensions of each head) and the output tied to the embedding."""
    import math
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 2, 4, 2, 16, 128
    w = begin(gguf, path, "phi3", shape, 10000.0, name="tiny-fused")
    w.add_rope_dimension_count(n_rot)
    scale = 512 / original_ctx
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original_ctx)) if scale > 1 else 1.0)
    w.add_rope_scaling_orig_ctx_len(original_ctx)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    # Long factors stretch the low frequencies far (as the real ones do, up to ~60), short ones a little.
    w.add_tensor("rope_factors_long.weight", np.geomspace(1.0, 40.0, n_rot // 2).astype(np.float32))
    w.add_tensor("rope_factors_short.weight", (1.0 + 0.5 * r.rng.random(n_rot // 2)).astype(np.float32))
    add_phi3_blocks(w, r, shape)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    if not tied:
        w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def add_llama_blocks(w, r, shape, down_scale=1.0):
    """Llama's blocks: separate q/k/v (q and k drawn twice as wide, so positions matter), SwiGLU."""
    E, L, H, KVH, D, F = shape
    for i in range(L):
        p = f"blk.{i}."
        add_llama_attention(w, r, p, shape)
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F, down_scale))


def tiny_granite(gguf, path, seed):
    """Granite 3.x (dense): llama's blocks with its four multipliers: embeddings times embedding_scale, each
    block's output times residual_scale before the residual add, scores times attention.scale instead of
    1/sqrt(head_dim), logits divided by logit_scale. The output is tied to the embedding, as Granite's is."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 3, 4, 2, 16, 128
    w = begin(gguf, path, "granite", shape, 10000.0)
    w.add_embedding_scale(6.0)
    w.add_residual_scale(0.8)
    w.add_attention_scale(0.5)
    w.add_logit_scale(0.25)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 0.05))
    add_llama_blocks(w, r, shape, down_scale=3.0)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    finish(w)


def tiny_smollm3(gguf, path, seed):
    """SmolLM3: llama's blocks (q/k rows in GGUF's interleaved RoPE order), but every 4th layer's q and k get
    no RoPE at all (llama.cpp's n_no_rope_layer_step = 4): with 4 layers, the last one."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 4, 4, 2, 16, 128
    w = begin(gguf, path, "smollm3", shape, 10000.0)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    add_llama_blocks(w, r, shape)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def begin_moe(gguf, path, arch, shape, rope_base, n_expert, n_used, F_exp):
    """begin(), then the mixture's keys: n_expert experts of F_exp, n_used per token."""
    w = begin(gguf, path, arch, shape, rope_base)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(F_exp)
    return w


def add_moe_ffn(w, r, p, E, n_expert, F_exp):
    """A mixture-of-experts FFN: the router (drawn wide, so tokens pick different experts) and the experts'
    stacked gate / up / down, numpy [expert][rows][cols] (ggml's ne {cols, rows, expert})."""
    w.add_tensor(p + "ffn_gate_inp.weight", r.mat(n_expert, E, 4.0))
    w.add_tensor(p + "ffn_gate_exps.weight", np.stack([r.mat(F_exp, E) for _ in range(n_expert)]))
    w.add_tensor(p + "ffn_up_exps.weight", np.stack([r.mat(F_exp, E) for _ in range(n_expert)]))
    w.add_tensor(p + "ffn_down_exps.weight", np.stack([r.mat(E, F_exp) for _ in range(n_expert)]))


def tiny_qwen3moe(gguf, path, seed):
    """Qwen3-MoE: Qwen3's attention (q/k norms, NeoX RoPE) and a mixture of 4 experts, 2 per token, each 48
    wide (expert_feed_forward_length; feed_forward_length is the dense width the file also states)."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 2, 4, 2, 32, 192
    n_expert, n_used, F_exp = 4, 2, 48
    w = begin_moe(gguf, path, "qwen3moe", shape, 1e6, n_expert, n_used, F_exp)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        add_qwen3_attention(w, r, p, shape)
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        add_moe_ffn(w, r, p, E, n_expert, F_exp)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_qwen2moe(gguf, path, seed):
    """Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (q/k/v biases, NeoX RoPE), 4 experts of 32,
    2 per token, their softmax weights not renormalized, and a shared expert of 80
    (expert_shared_feed_forward_length) scaled by the sigmoid of its own gate (ffn_gate_inp_shexp, drawn wide
    so that the gate moves between tokens)."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 2, 4, 2, 16, 96
    n_expert, n_used, F_exp, F_sh = 4, 2, 32, 80
    w = begin_moe(gguf, path, "qwen2moe", shape, 1e6, n_expert, n_used, F_exp)
    w.add_expert_shared_feed_forward_length(F_sh)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "attn_q.weight", r.mat(H * D, E, 2.0))
        w.add_tensor(p + "attn_q.bias", (0.5 * r.rng.standard_normal(H * D)).astype(np.float32))
        w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E, 2.0))
        w.add_tensor(p + "attn_k.bias", (0.5 * r.rng.standard_normal(KVH * D)).astype(np.float32))
        w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
        w.add_tensor(p + "attn_v.bias", (0.5 * r.rng.standard_normal(KVH * D)).astype(np.float32))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        add_moe_ffn(w, r, p, E, n_expert, F_exp)
        w.add_tensor(p + "ffn_gate_inp_shexp.weight", r.mat(1, E, 4.0).reshape(E))
        w.add_tensor(p + "ffn_gate_shexp.weight", r.mat(F_sh, E))
        w.add_tensor(p + "ffn_up_shexp.weight", r.mat(F_sh, E))
        w.add_tensor(p + "ffn_down_shexp.weight", r.mat(E, F_sh))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_mixtral(gguf, path, seed):
    """Mixtral: a llama file with expert_count: llama's attention, 4 experts of feed_forward_length (48), 2 per
    token."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 2, 4, 2, 16, 48
    n_expert, n_used = 4, 2
    w = begin(gguf, path, "llama", shape, 10000.0)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        add_llama_attention(w, r, p, shape)
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        add_moe_ffn(w, r, p, E, n_expert, F)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def add_yarn(gguf, w, factor, original_ctx, log_mul=None):
    """YaRN rope scaling as the converters write it (DeepSeek's mscale_all_dim as 0.1 x it in yarn_log_mul)."""
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(factor)
    w.add_rope_scaling_orig_ctx_len(original_ctx)
    if log_mul is not None:
        w.add_rope_scaling_yarn_log_mul(log_mul)


def tiny_mistral3(gguf, path, seed):
    """Ministral 3 (llama.cpp's mistral3): llama's blocks, YaRN with Ministral 3's keys (the log multiplier is its
    mscale_all_dim, 1; the ramp's betas), and Llama 4's attention temperature: q times 1 + 0.4 ln(1 + floor(pos /
    16)), 16 being the YaRN original context (Ministral 3: 0.1 over 16384), so the golden's positions take three
    temperatures."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 2, 4, 2, 16, 128
    w = begin(gguf, path, "mistral3", shape, 1000000.0)
    add_yarn(gguf, w, 4.0, 16, log_mul=1.0)
    w.add_rope_scaling_yarn_beta_fast(32.0)
    w.add_rope_scaling_yarn_beta_slow(1.0)
    w.add_attn_temperature_scale(0.4)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    add_llama_blocks(w, r, shape)
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_olmo2(gguf, path, seed, window=None):
    """OLMo 2 (llama.cpp's olmo2): no norm before the attention or the FFN, their outputs normed before each
    residual add (post_attention_norm, post_ffw_norm), q and k RMS-normed over the whole projection (every head at
    once: attn_q_norm [H*D], attn_k_norm [KVH*D]), NeoX RoPE. With `window`, OLMo 3: all but every 4th layer slide
    over that many positions."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 4 if window else 2, 4, 2, 16, 128
    w = begin(gguf, path, "olmo2", shape, 10000.0)
    if window:
        w.add_sliding_window(window)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        add_llama_attention(w, r, p, shape, pre_norm=False)
        w.add_tensor(p + "attn_q_norm.weight", r.norm(H * D, 0.3))
        w.add_tensor(p + "attn_k_norm.weight", r.norm(KVH * D, 0.3))
        w.add_tensor(p + "post_attention_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "ffn_gate.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F))
        w.add_tensor(p + "post_ffw_norm.weight", r.norm(E, 0.3))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_gptoss(gguf, path, seed):
    """gpt-oss (llama.cpp's openai_moe): biases on q/k/v/o, a learned sink logit per head (attn_sinks), a sliding
    window of 8 on the even layers, YaRN on every layer, the FFN's norm named post_attention_norm, a router with a
    bias whose top-2 logits are softmaxed, experts with biases and the clamped SwiGLU (alpha 1.702, limit 7), their
    weights MXFP4 as the real files hold them. Sinks, biases and router are drawn wide so each matters."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 4, 4, 2, 16, 64
    n_expert, n_used, F_exp = 4, 2, 64
    w = begin(gguf, path, "gpt-oss", shape, 150000.0)
    add_yarn(gguf, w, 4.0, 64)
    w.add_sliding_window(8)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(F_exp)
    n_vocab = copy_vocab(gguf, w)

    def mxfp4(a):
        return gguf.quants.quantize(a, gguf.GGMLQuantizationType.MXFP4)

    def bias(n, spread):
        return (spread * r.rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "attn_q.weight", r.mat(H * D, E, 2.0))
        w.add_tensor(p + "attn_q.bias", bias(H * D, 0.5))
        w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E, 2.0))
        w.add_tensor(p + "attn_k.bias", bias(KVH * D, 0.5))
        w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
        w.add_tensor(p + "attn_v.bias", bias(KVH * D, 0.5))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))
        w.add_tensor(p + "attn_output.bias", bias(E, 0.5))
        w.add_tensor(p + "attn_sinks.weight", bias(H, 2.0))
        w.add_tensor(p + "post_attention_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate_inp.weight", r.mat(n_expert, E, 4.0))
        w.add_tensor(p + "ffn_gate_inp.bias", bias(n_expert, 1.0))
        w.add_tensor(p + "ffn_gate_exps.weight", mxfp4(np.stack([r.mat(F_exp, E, 4.0) for _ in range(n_expert)])),
                     raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        w.add_tensor(p + "ffn_gate_exps.bias", np.stack([bias(F_exp, 1.0) for _ in range(n_expert)]))
        w.add_tensor(p + "ffn_up_exps.weight", mxfp4(np.stack([r.mat(F_exp, E, 4.0) for _ in range(n_expert)])),
                     raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        w.add_tensor(p + "ffn_up_exps.bias", np.stack([bias(F_exp, 1.0) for _ in range(n_expert)]))
        w.add_tensor(p + "ffn_down_exps.weight", mxfp4(np.stack([r.mat(E, F_exp) for _ in range(n_expert)])),
                     raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        w.add_tensor(p + "ffn_down_exps.bias", np.stack([bias(E, 0.5) for _ in range(n_expert)]))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_deepseek2(gguf, path, seed, variant):
    """DeepSeek-V2 / V3 (llama.cpp's deepseek2): multi-head latent attention and a mixture of experts with a
    shared expert after one dense layer. Per token, kv_a projects to a latent of kv_lora_rank (RMS-normed
    by attn_kv_a_norm) and a rope key of n_rot shared by every head; q comes from attn_q or, with a
    q_lora_rank, attn_q_a -> attn_q_a_norm -> attn_q_b, each head nope + rope wide. Interleaved RoPE.

    variant "mla": the converter's current layout, attn_k_b ([head][kv_lora_rank][nope], the key
      up-projection transposed for absorption) and attn_v_b, key/value_length of the latent cache and
      key/value_length_mla of the heads; softmax routing, weights not renormalized, times 2.
    variant "kvb": older files, one attn_kv_b (per head nope key rows then v value rows), the heads'
      own key/value_length, no q_lora_rank (DeepSeek-V2-Lite's q); softmax routing, no scale.
    variant "v3": DeepSeek-V3's router: sigmoid scores plus a selection bias (exp_probs_b), the top 2 of
      4 expert groups (each scored by its best two), weights renormalized, times 2.5.
    variant "yarn": "mla" with DeepSeek-V2's YaRN (factor 40 over an original context of 64, mscale_all_dim
      0.707: the attention scale times mscale^2, cos and sin unscaled)."""
    r = Draws(seed)
    E, L, H, F = 64, 3, 4, 96
    nope, rope, v_dim = 16, 8, 16
    kv_rank = 56 if variant == "v3" else 24  # V3: rows of 64, which quantized caches store rotated
    q_rank = 0 if variant == "kvb" else 32
    n_expert, n_used, F_exp = (12, 3, 32) if variant == "v3" else (4, 2, 32)
    w = gguf.GGUFWriter(str(path), "deepseek2")
    w.add_name(path.stem)
    w.add_context_length(512)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    if variant == "kvb":
        w.add_head_count_kv(H)
        w.add_key_length(nope + rope)
        w.add_value_length(v_dim)
    else:
        w.add_head_count_kv(1)
        w.add_key_length(kv_rank + rope)
        w.add_value_length(kv_rank)
        w.add_key_length_mla(nope + rope)
        w.add_value_length_mla(v_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(rope)
    if variant == "yarn":
        add_yarn(gguf, w, 40.0, 64, 0.1 * 0.707)
    w.add_leading_dense_block_count(1)
    w.add_q_lora_rank(q_rank)
    w.add_kv_lora_rank(kv_rank)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(F_exp)
    w.add_expert_shared_count(1)
    if variant in ("mla", "yarn"):
        w.add_expert_weights_scale(2.0)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    elif variant == "v3":
        w.add_expert_weights_scale(2.5)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(4)
        w.add_expert_group_used_count(2)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        if q_rank:
            w.add_tensor(p + "attn_q_a.weight", r.mat(q_rank, E))
            w.add_tensor(p + "attn_q_a_norm.weight", r.norm(q_rank, 0.1))
            w.add_tensor(p + "attn_q_b.weight", r.mat(H * (nope + rope), q_rank, 2.0))
        else:
            w.add_tensor(p + "attn_q.weight", r.mat(H * (nope + rope), E, 2.0))
        w.add_tensor(p + "attn_kv_a_mqa.weight", r.mat(kv_rank + rope, E, 2.0))
        w.add_tensor(p + "attn_kv_a_norm.weight", r.norm(kv_rank, 0.1))
        kv_b = r.mat(H * (nope + v_dim), kv_rank, 2.0).reshape(H, nope + v_dim, kv_rank)
        if variant == "kvb":
            w.add_tensor(p + "attn_kv_b.weight", kv_b.reshape(H * (nope + v_dim), kv_rank))
        else:
            w.add_tensor(p + "attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1)))
            w.add_tensor(p + "attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:, :]))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * v_dim))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        if i == 0:
            w.add_tensor(p + "ffn_gate.weight", r.mat(F, E))
            w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
            w.add_tensor(p + "ffn_down.weight", r.mat(E, F))
            continue
        add_moe_ffn(w, r, p, E, n_expert, F_exp)
        if variant == "v3":
            w.add_tensor(p + "exp_probs_b.bias", (0.5 * r.rng.standard_normal(n_expert)).astype(np.float32))
        w.add_tensor(p + "ffn_gate_shexp.weight", r.mat(F_exp, E))
        w.add_tensor(p + "ffn_up_shexp.weight", r.mat(F_exp, E))
        w.add_tensor(p + "ffn_down_shexp.weight", r.mat(E, F_exp))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_llama4(gguf, path, seed):
    """Llama 4 (llama.cpp's llama4; Scout's layout at 4 layers): interleaved RoPE without the q/k permutation, every
    2nd layer (interleave_moe_layer_step) a mixture of 4 experts of 48, 2 per token, their weights the sigmoids of
    the chosen logits applied to the token before each expert, plus one shared expert of 48; the others a dense
    SwiGLU of 96. Layers 0-2 rotate and L2-norm q and k after RoPE (chunked attention, 8192 in llama.cpp); layer 3
    is a NoPE layer (the attention temperature's floor scale is 8192 too, so neither shows in 58 positions: the
    variant golden llama4-chunked-temperature does). Llama 3 rope scaling as Scout's (low_freq_factor =
    high_freq_factor, written only as rope_freqs), over an original context of 32 here."""
    r = Draws(seed)
    E, L, H, KVH, D, F = shape = 64, 4, 4, 2, 16, 96
    n_expert, n_used, F_exp = 4, 2, 48
    rope_base = 500000.0
    w = begin_moe(gguf, path, "llama4", shape, rope_base, n_expert, n_used, F_exp)
    w.add_interleave_moe_layer_step(2)
    n_vocab = copy_vocab(gguf, w)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 1.0))
    freqs = rope_base ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    wavelen = 2 * np.pi / freqs
    w.add_tensor("rope_freqs.weight", np.where(wavelen > 32.0, 16.0, 1.0).astype(np.float32))
    for i in range(L):
        p = f"blk.{i}."
        add_llama_attention(w, r, p, shape)
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        if (i + 1) % 2 == 0:
            add_moe_ffn(w, r, p, E, n_expert, F_exp)
            w.add_tensor(p + "ffn_gate_shexp.weight", r.mat(F_exp, E))
            w.add_tensor(p + "ffn_up_shexp.weight", r.mat(F_exp, E))
            w.add_tensor(p + "ffn_down_shexp.weight", r.mat(E, F_exp))
        else:
            w.add_tensor(p + "ffn_gate.weight", r.mat(F, E))
            w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
            w.add_tensor(p + "ffn_down.weight", r.mat(E, F))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def begin_gemma4(gguf, path, shape, swa, n_ff, n_kv_shared, per_layer):
    """A gemma4 writer with the keys both tiny Gemma 4 files set, in the converter's order: heads and their sizes per
    layer kind (the sliding layers' on swa[i]), RoPE bases 1e6 (full) and 10000 (sliding) over whole heads, a window of
    8, the final soft-cap."""
    E, L, H, (D_swa, KVH_swa), (D_full, KVH_full) = shape
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_name(path.stem)
    w.add_context_length(512)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(H)
    w.add_head_count_kv([KVH_swa if s else KVH_full for s in swa])
    w.add_key_length(D_full)
    w.add_value_length(D_full)
    w.add_key_length_swa(D_swa)
    w.add_value_length_swa(D_swa)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(10000.0)
    w.add_rope_dimension_count(D_full)
    w.add_rope_dimension_count_swa(D_swa)
    w.add_sliding_window(8)
    w.add_sliding_window_pattern(swa)
    w.add_shared_kv_layers(n_kv_shared)
    w.add_embedding_length_per_layer_input(per_layer)
    w.add_final_logit_softcapping(10.0)
    return w


def add_proportional_rope(w, D_full):
    """Gemma 4's full layers: the first quarter of the pairs rotate, the others are held by factors of 1e30."""
    n_rot_pairs = D_full // 8
    w.add_tensor("rope_freqs.weight", np.array([1.0] * n_rot_pairs + [1e30] * (D_full // 2 - n_rot_pairs), np.float32))


def tiny_gemma4(gguf, path, seed):
    """Gemma 4 (llama.cpp's gemma4; E2B's layout at 6 layers): sliding layers (0, 2, 4: window 8, RoPE base 10000
    over all 16 dims of their heads, 4 KV heads of 16) and full ones (1, 3, 5: 1 KV head of 32, "proportional" RoPE at
    base 1e6, the first quarter of the pairs rotating, the rest held by rope_freqs factors of 1e30), q/k normed with
    weights, v normed without, attention scale 1. Layer 3 has no attn_v (its values are its keys' projection,
    attention_k_eq_v); layers 4 and 5 share the KV of the last earlier layer of their kind (2 and 3) and have FFNs
    twice as wide. Per-layer embeddings of 8 (their token rows, the model projection and its norm, each layer's gate,
    projection and post-norm), a scalar per layer on its output, GeGLU, post-norms, a final logit soft-cap."""
    r = Draws(seed)
    E, L, H = 64, 6, 4
    D_swa, KVH_swa, D_full, KVH_full, P = 16, 4, 32, 1, 8
    swa = [i % 2 == 0 for i in range(L)]
    n_ff = [96, 96, 96, 96, 192, 192]
    w = begin_gemma4(gguf, path, (E, L, H, (D_swa, KVH_swa), (D_full, KVH_full)), swa, n_ff, 2, P)
    n_vocab = copy_vocab(gguf, w)
    w.add_add_space_prefix(True)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 0.5))
    w.add_tensor("per_layer_token_embd.weight", r.embedding(n_vocab, L * P, 0.5))
    w.add_tensor("per_layer_model_proj.weight", r.mat(L * P, E, 2.0))
    w.add_tensor("per_layer_proj_norm.weight", r.norm(P, 0.3))
    add_proportional_rope(w, D_full)
    for i in range(L):
        p = f"blk.{i}."
        D, KVH = (D_swa, KVH_swa) if swa[i] else (D_full, KVH_full)
        shared = i >= 4
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "attn_q.weight", r.mat(H * D, E))
        w.add_tensor(p + "attn_q_norm.weight", r.norm(D, 0.5))
        if not shared:
            w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E))
            if i != 3:
                w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
            w.add_tensor(p + "attn_k_norm.weight", r.norm(D, 0.5))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))
        w.add_tensor(p + "post_attention_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", r.mat(n_ff[i], E, 2.0))
        w.add_tensor(p + "ffn_up.weight", r.mat(n_ff[i], E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, n_ff[i]))
        w.add_tensor(p + "post_ffw_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "inp_gate.weight", r.mat(P, E, 2.0))
        w.add_tensor(p + "proj.weight", r.mat(E, P))
        w.add_tensor(p + "post_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "layer_output_scale.weight", np.array([0.5 + 0.25 * i], np.float32))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


def tiny_gemma4_moe(gguf, path, seed):
    """Gemma 4's mixture of experts (26B-A4B's layout at 4 layers, no shared KV or per-layer embeddings): every layer a
    dense GeGLU of 96 (its own post-norm) beside 4 GELU experts of 32, 2 per token (their own pre- and post-norms),
    the two summed and post-normed again. The router reads the residual RMS-normed without a weight, over sqrt(n_embd),
    times a per-dimension scale (ffn_gate_inp.scale); softmax over all, the top 2 renormalized; each expert's output
    times its own scale (ffn_down_exps.scale). Layers 0 and 1 fuse the experts' gate and up (ffn_gate_up_exps), 2 and 3
    keep them apart. Attention as tiny-gemma4's (no attn_v on the full layers)."""
    r = Draws(seed)
    E, L, H = 64, 4, 4
    D_swa, KVH_swa, D_full, KVH_full = 16, 4, 32, 1
    n_expert, n_used, F_exp, F = 4, 2, 32, 96
    swa = [i % 2 == 0 for i in range(L)]
    w = begin_gemma4(gguf, path, (E, L, H, (D_swa, KVH_swa), (D_full, KVH_full)), swa, F, 0, 0)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(F_exp)
    n_vocab = copy_vocab(gguf, w)
    w.add_add_space_prefix(True)
    w.add_tensor("token_embd.weight", r.embedding(n_vocab, E, 0.5))
    add_proportional_rope(w, D_full)
    for i in range(L):
        p = f"blk.{i}."
        D, KVH = (D_swa, KVH_swa) if swa[i] else (D_full, KVH_full)
        w.add_tensor(p + "attn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "attn_q.weight", r.mat(H * D, E))
        w.add_tensor(p + "attn_q_norm.weight", r.norm(D, 0.5))
        w.add_tensor(p + "attn_k.weight", r.mat(KVH * D, E))
        if swa[i]:
            w.add_tensor(p + "attn_v.weight", r.mat(KVH * D, E))
        w.add_tensor(p + "attn_k_norm.weight", r.norm(D, 0.5))
        w.add_tensor(p + "attn_output.weight", r.mat(E, H * D))
        w.add_tensor(p + "post_attention_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "ffn_norm.weight", r.norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", r.mat(F, E, 2.0))
        w.add_tensor(p + "ffn_up.weight", r.mat(F, E))
        w.add_tensor(p + "ffn_down.weight", r.mat(E, F))
        w.add_tensor(p + "post_ffw_norm_1.weight", r.norm(E, 0.3))
        w.add_tensor(p + "ffn_gate_inp.weight", r.mat(n_expert, E, 4.0))
        w.add_tensor(p + "ffn_gate_inp.scale", r.norm(E, 0.5))
        w.add_tensor(p + "pre_ffw_norm_2.weight", r.norm(E, 0.1))
        gate = np.stack([r.mat(F_exp, E, 2.0) for _ in range(n_expert)])
        up = np.stack([r.mat(F_exp, E) for _ in range(n_expert)])
        if i < 2:
            w.add_tensor(p + "ffn_gate_up_exps.weight", np.concatenate([gate, up], axis=1))
        else:
            w.add_tensor(p + "ffn_gate_exps.weight", gate)
            w.add_tensor(p + "ffn_up_exps.weight", up)
        w.add_tensor(p + "ffn_down_exps.weight", np.stack([r.mat(E, F_exp) for _ in range(n_expert)]))
        w.add_tensor(p + "ffn_down_exps.scale", (0.5 + r.rng.random(n_expert)).astype(np.float32))
        w.add_tensor(p + "post_ffw_norm_2.weight", r.norm(E, 0.3))
        w.add_tensor(p + "post_ffw_norm.weight", r.norm(E, 0.3))
        w.add_tensor(p + "layer_output_scale.weight", np.array([0.5 + 0.25 * i], np.float32))
    w.add_tensor("output_norm.weight", r.norm(E, 0.1))
    w.add_tensor("output.weight", r.mat(n_vocab, E, 4.0))
    finish(w)


MODELS = {
    "tiny-qwen3": (tiny_qwen3, 3001),
    "tiny-gemma3": (tiny_gemma3, 3002),
    "tiny-gemma": (lambda g, p, s: tiny_gemma12(g, p, s, "gemma"), 3003),
    "tiny-gemma2": (lambda g, p, s: tiny_gemma12(g, p, s, "gemma2"), 3004),
    "tiny-phi3": (tiny_phi3, 3005),
    "tiny-phi3-longrope": (lambda g, p, s: tiny_phi3_longrope(g, p, s, 256), 3006),
    "tiny-phi3-longrope-short": (lambda g, p, s: tiny_phi3_longrope(g, p, s, 512), 3007),
    "tiny-phi4": (lambda g, p, s: tiny_phi3_longrope(g, p, s, 256, n_rot=12, tied=True), 3008),
    "tiny-smollm3": (tiny_smollm3, 3009),
    "tiny-granite": (tiny_granite, 3010),
    "tiny-qwen3moe": (tiny_qwen3moe, 3011),
    "tiny-mixtral": (tiny_mixtral, 3012),
    "tiny-deepseek2": (lambda g, p, s: tiny_deepseek2(g, p, s, "mla"), 3013),
    "tiny-deepseek2-kvb": (lambda g, p, s: tiny_deepseek2(g, p, s, "kvb"), 3014),
    "tiny-deepseek3": (lambda g, p, s: tiny_deepseek2(g, p, s, "v3"), 3015),
    "tiny-deepseek2-yarn": (lambda g, p, s: tiny_deepseek2(g, p, s, "yarn"), 3016),
    "tiny-qwen3-yarn": (lambda g, p, s: tiny_qwen3(g, p, s, (64, 2, 4, 2, 32, 128), 10000.0, (4.0, 64)), 3017),
    "tiny-mistral3": (tiny_mistral3, 3018),
    "tiny-olmo2": (tiny_olmo2, 3019),
    "tiny-olmo3": (lambda g, p, s: tiny_olmo2(g, p, s, window=8), 3020),
    "tiny-gptoss": (tiny_gptoss, 3021),
    "tiny-qwen2moe": (tiny_qwen2moe, 3022),
    "tiny-llama4": (tiny_llama4, 3023),
    "tiny-gemma4": (tiny_gemma4, 3024),
    "tiny-gemma4-moe": (tiny_gemma4_moe, 3025),
}


def build_against_llama_cpp(tool, source, lcpp):
    """Compiles one C++ file against the llama.cpp tree lcpp (built into lcpp/build) into `tool`."""
    bindir = lcpp / "build" / "bin"
    subprocess.run(["g++", "-std=c++17", "-O2", f"-I{lcpp}/include", f"-I{lcpp}/ggml/include", str(source),
                    f"-L{bindir}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bindir}", "-o", str(tool)],
                   check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp source folder, built into build/")
    ap.add_argument("--only", nargs="*", help="model stems to rebuild (default: all)")
    args = ap.parse_args()
    lcpp = args.llama_cpp.resolve()
    sys.path.insert(0, str(lcpp / "gguf-py"))
    import gguf  # noqa: E402  (from the llama.cpp tree given)

    with tempfile.TemporaryDirectory() as tmp:
        tool = Path(tmp) / "llama_cpp_golden"
        build_against_llama_cpp(tool, REPO / "scripts" / "llama_cpp_golden.cpp", lcpp)
        OUT.mkdir(parents=True, exist_ok=True)
        for stem, (build, seed) in MODELS.items():
            if args.only and stem not in args.only:
                continue
            model = OUT / f"{stem}.gguf"
            build(gguf, model, seed)
            with open(OUT / f"{stem}.jsonl", "w") as out:
                subprocess.run([str(tool), str(model), str(N_STEPS), *PROMPTS], stdout=out, check=True)
            print(f"{stem}: {model.stat().st_size} bytes")


if __name__ == "__main__":
    main()
