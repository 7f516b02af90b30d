#!/usr/bin/env python3
"""Builds tests/golden/streaming/stories260K.json: an independent StreamingLLM (attention sinks + a
window of recent tokens) on the llama2.c stories260K model, which tests/test_streaming.cpp holds
kvserve's `--attention-sinks` / `--streaming-window` to. Run once; the output is committed.

    python3 scripts/make_streaming_golden.py   (needs numpy)

The reference is written the way the StreamingLLM paper describes the cache (Xiao et al. 2023, sec. 3.2),
not the way kvserve computes it: keys are kept before RoPE; at every token the cache is cut to the first
`sinks` tokens plus the last `window` ones (the new token included), the kept tokens get the positions
0, 1, ... in cache order, and keys and query are rotated at those positions. kvserve instead keeps keys
rotated at their text positions and rotates a second query for the sinks only; the two agree exactly in
exact arithmetic (RoPE scores depend on position differences), so the fixture checks that reasoning too.
float64 throughout; the llama2.c forward otherwise (run.c: RMSNorm eps 1e-5, interleaved RoPE pairs,
SwiGLU, shared classifier).

Cases:
- text_*: the first tokens of tests/data/perplexity/story.txt (ids from `kvserve tokenize`, stored in the
  file) run as one sequence, past the model's 512-token context; per position the log-probability of the
  next token and the argmax, and the whole logits at a few positions. One with sinks, one window-only.
- greedy: a prompt, then greedy tokens (BOS not a stop) to 700 positions, with sinks.

DeepSeek-V2 (tests/golden/arch/tiny-deepseek2-kvb.gguf, 512-token context): attention as the model card
writes it, decompressed (each head's key [W_UK c | rope(k_pe)] and value W_UV c from the cached latent c
and the shared rope key), where kvserve absorbs W_UK into the query and caches one latent row; the MoE
(softmax router, top 2 of 4, one shared expert, a dense first layer) as llama.cpp runs it. Without
eviction it gives llama.cpp's logits for the file's golden within 1e-5 and the same greedy tokens
(checked when this runs). Case: text_sinks over 700 tokens of the same text.
"""
import json
import struct
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
MODEL = SHARED / "models" / "stories260K" / "stories260K.bin"
TOKENIZER = SHARED / "models" / "stories260K" / "tok512.bin"
TEXT = REPO / "tests" / "data" / "perplexity" / "story.txt"
OUT = REPO / "tests" / "golden" / "streaming" / "stories260K.json"
DS_MODEL = REPO / "tests" / "golden" / "arch" / "tiny-deepseek2-kvb.gguf"
DS_OUT = REPO / "tests" / "golden" / "streaming" / "tiny-deepseek2-kvb.json"


def load(path):
    raw = path.read_bytes()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    f = np.frombuffer(raw[28:], dtype=np.float32).astype(np.float64)
    hs = dim // n_heads
    kv_dim = n_kv * hs
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = f[off:off + n].reshape(shape)
        off += n
        return a

    w = {}
    w["emb"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, dim, dim)
    w["wk"] = take(n_layers, kv_dim, dim)
    w["wv"] = take(n_layers, kv_dim, dim)
    w["wo"] = take(n_layers, dim, dim)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, hs // 2)
    take(seq_len, hs // 2)
    w["cls"] = w["emb"] if shared else take(vocab, dim)
    cfg = dict(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, hs=hs, vocab=vocab, seq_len=seq_len)
    return cfg, w


def rmsnorm(x, g):
    return x / np.sqrt(np.mean(x * x) + 1e-5) * g


def rope(v, pos, hs):
    """Rotates every head of v (flat, heads of hs) at position pos: pairs (i, i+1), llama2.c's."""
    out = v.copy()
    i = np.arange(0, v.shape[0], 2)
    freq = 1.0 / np.power(10000.0, (i % hs) / hs)
    ang = pos * freq
    c, s = np.cos(ang), np.sin(ang)
    out[i] = v[i] * c - v[i + 1] * s
    out[i + 1] = v[i] * s + v[i + 1] * c
    return out


class StreamingModel:
    def __init__(self, cfg, w, sinks, window):
        self.cfg, self.w, self.sinks, self.window = cfg, w, sinks, window
        self.kept = []  # text indices of the cached tokens, in order
        self.k = [[] for _ in range(cfg["n_layers"])]  # pre-RoPE keys, parallel to kept
        self.v = [[] for _ in range(cfg["n_layers"])]
        self.n = 0

    def step(self, token):
        c, w = self.cfg, self.w
        hs, nh, nkv = c["hs"], c["n_heads"], c["n_kv"]
        p = self.n
        self.n += 1
        # The cache after this token joins: the first `sinks` tokens and the last `window` ones.
        keep = [j for j, idx in enumerate(self.kept) if idx < self.sinks or idx > p - self.window]
        self.kept = [self.kept[j] for j in keep] + [p]
        x = w["emb"][token].copy()
        for l in range(c["n_layers"]):
            xn = rmsnorm(x, w["rms_att"][l])
            q = w["wq"][l] @ xn
            k = w["wk"][l] @ xn
            v = w["wv"][l] @ xn
            self.k[l] = [self.k[l][j] for j in keep] + [k]
            self.v[l] = [self.v[l][j] for j in keep] + [v]
            n = len(self.kept)
            keys = np.stack([rope(self.k[l][j], j, hs) for j in range(n)])  # positions in the cache
            vals = np.stack(self.v[l])
            qr = rope(q, n - 1, hs)
            att = np.zeros(c["dim"])
            for h in range(nh):
                kvh = h // (nh // nkv)
                sc = keys[:, kvh * hs:(kvh + 1) * hs] @ qr[h * hs:(h + 1) * hs] / np.sqrt(hs)
                sc = np.exp(sc - sc.max())
                sc /= sc.sum()
                att[h * hs:(h + 1) * hs] = sc @ vals[:, kvh * hs:(kvh + 1) * hs]
            x = x + w["wo"][l] @ att
            xn = rmsnorm(x, w["rms_ffn"][l])
            g = w["w1"][l] @ xn
            u = w["w3"][l] @ xn
            x = x + w["w2"][l] @ (g / (1.0 + np.exp(-g)) * u)
        return w["cls"] @ rmsnorm(x, w["rms_final"])


def log_softmax(z):
    m = z.max()
    return z - m - np.log(np.sum(np.exp(z - m)))


def text_case(cfg, w, ids, sinks, window, full_at):
    m = StreamingModel(cfg, w, sinks, window)
    logprobs, argmax, full = [], [], {}
    for i, t in enumerate(ids[:-1]):
        z = m.step(t)
        logprobs.append(float(log_softmax(z)[ids[i + 1]]))
        argmax.append(int(np.argmax(z)))
        if i in full_at:
            full[str(i)] = [float(v) for v in z]
    nll = -float(np.mean(logprobs))
    return {"sinks": sinks, "window": window, "next_token_logprobs": logprobs, "argmax": argmax,
            "logits_at": full, "perplexity": float(np.exp(nll))}


def greedy_case(cfg, w, prompt, sinks, window, total):
    m = StreamingModel(cfg, w, sinks, window)
    z = None
    for t in prompt:
        z = m.step(t)
    out, margins = [], []
    while len(prompt) + len(out) < total:
        top = np.argsort(z)[::-1]
        margins.append(float(z[top[0]] - z[top[1]]))
        nxt = int(top[0])
        out.append(nxt)
        z = m.step(nxt)
    return {"sinks": sinks, "window": window, "prompt_ids": prompt, "generated_ids": out,
            "min_top1_top2_margin": min(margins)}


class DeepSeek2Streaming:
    """tiny-deepseek2-kvb (older attn_kv_b layout, no q low rank) with the same eviction as StreamingModel."""
    H, NOPE, ROT, VD, LR, EPS = 4, 16, 8, 16, 24, 1e-6

    def __init__(self, w, n_layers, sinks, window):
        self.w, self.n_layers, self.sinks, self.window = w, n_layers, sinks, window
        self.kept, self.n = [], 0
        self.c = [[] for _ in range(n_layers)]    # normed latents
        self.kpe = [[] for _ in range(n_layers)]  # rope keys before RoPE

    def rms(self, x, g):
        return x / np.sqrt(np.mean(x * x) + self.EPS) * g

    def rope(self, v, pos):
        out = v.copy()
        i = np.arange(0, self.ROT, 2)
        th = pos * np.power(10000.0, -i / self.ROT)
        c, s = np.cos(th), np.sin(th)
        out[i] = v[i] * c - v[i + 1] * s
        out[i + 1] = v[i] * s + v[i + 1] * c
        return out

    def ffn(self, l, x):
        w, p = self.w, f"blk.{l}."
        silu = lambda v: v / (1.0 + np.exp(-v))
        if p + "ffn_gate_inp.weight" not in w:
            return w[p + "ffn_down.weight"] @ (silu(w[p + "ffn_gate.weight"] @ x) * (w[p + "ffn_up.weight"] @ x))
        lg = w[p + "ffn_gate_inp.weight"] @ x
        pr = np.exp(lg - lg.max())
        pr /= pr.sum()
        out = np.zeros_like(x)
        for e in np.argsort(-pr)[:2]:
            out += pr[e] * (w[p + "ffn_down_exps.weight"][e] @ (silu(w[p + "ffn_gate_exps.weight"][e] @ x) *
                                                                (w[p + "ffn_up_exps.weight"][e] @ x)))
        return out + w[p + "ffn_down_shexp.weight"] @ (silu(w[p + "ffn_gate_shexp.weight"] @ x) *
                                                       (w[p + "ffn_up_shexp.weight"] @ x))

    def step(self, token):
        w, H, NOPE, ROT, VD, LR = self.w, self.H, self.NOPE, self.ROT, self.VD, self.LR
        p = self.n
        self.n += 1
        keep = [j for j, idx in enumerate(self.kept) if idx < self.sinks or idx > p - self.window]
        self.kept = [self.kept[j] for j in keep] + [p]
        n = len(self.kept)
        x = w["token_embd.weight"][token].copy()
        for l in range(self.n_layers):
            b = f"blk.{l}."
            xn = self.rms(x, w[b + "attn_norm.weight"])
            q = (w[b + "attn_q.weight"] @ xn).reshape(H, NOPE + ROT)
            kva = w[b + "attn_kv_a_mqa.weight"] @ xn
            self.c[l] = [self.c[l][j] for j in keep] + [self.rms(kva[:LR], w[b + "attn_kv_a_norm.weight"])]
            self.kpe[l] = [self.kpe[l][j] for j in keep] + [kva[LR:]]
            kvb = w[b + "attn_kv_b.weight"].reshape(H, NOPE + VD, LR)
            C = np.stack(self.c[l])
            kpe = np.stack([self.rope(self.kpe[l][j], j) for j in range(n)])  # positions in the cache
            att = np.zeros(H * VD)
            for h in range(H):
                k = np.concatenate([C @ kvb[h, :NOPE].T, kpe], axis=1)
                qh = np.concatenate([q[h, :NOPE], self.rope(q[h, NOPE:], n - 1)])
                sc = k @ qh / np.sqrt(NOPE + ROT)
                sc = np.exp(sc - sc.max())
                sc /= sc.sum()
                att[h * VD:(h + 1) * VD] = sc @ (C @ kvb[h, NOPE:].T)
            x = x + w[b + "attn_output.weight"] @ att
            x = x + self.ffn(l, self.rms(x, w[b + "ffn_norm.weight"]))
        return w["output.weight"] @ self.rms(x, w["output_norm.weight"])


def load_deepseek():
    """tiny-deepseek2-kvb's tensors in float64, and its layer count."""
    import gguf

    reader = gguf.GGUFReader(str(DS_MODEL))
    w = {t.name: np.array(t.data, dtype=np.float64) for t in reader.tensors}
    return w, 1 + max(int(k.split(".")[1]) for k in w if k.startswith("blk."))


def check_against_llamacpp(m):
    """m, a reference model without eviction, gives llama.cpp's golden for the file (first logits, greedy)."""
    g = json.loads((DS_MODEL.parent / "tiny-deepseek2-kvb.jsonl").read_text().splitlines()[0])
    for t in g["prompt_ids"]:
        z = m.step(t)
    err = float(np.abs(z - np.array(g["first_logits"])).max())
    greedy = []
    for _ in g["generated_ids"]:
        greedy.append(int(np.argmax(z)))
        z = m.step(greedy[-1])
    assert err < 1e-4 and greedy == g["generated_ids"], (err, greedy)
    print("deepseek2 reference against llama.cpp: first logits within", err, "greedy equal")


def deepseek_golden(ids):
    w, n_layers = load_deepseek()
    check_against_llamacpp(DeepSeek2Streaming(w, n_layers, 0, 1 << 30))
    sinks, window = 4, 48
    m = DeepSeek2Streaming(w, n_layers, sinks, window)
    logprobs, argmax = [], []
    for i, t in enumerate(ids[:-1]):
        z = m.step(t)
        logprobs.append(float(log_softmax(z)[ids[i + 1]]))
        argmax.append(int(np.argmax(z)))
    return {"model": "tiny-deepseek2-kvb", "reference": "scripts/make_streaming_golden.py (numpy float64, "
            "decompressed MLA, positions within the cache)", "text_ids": ids,
            "text_sinks": {"sinks": sinks, "window": window, "next_token_logprobs": logprobs, "argmax": argmax}}


def main():
    cfg, w = load(MODEL)
    ids = json.loads(subprocess.run([str(REPO / "build" / "kvserve"), "tokenize", "-m", str(MODEL), "--tokenizer",
                                     str(TOKENIZER)], input=TEXT.read_bytes(), capture_output=True,
                                    check=True).stdout)
    ids = ids[:1100]
    full_at = {40, 300, 517, 800, 1098}
    out = {
        "model": "stories260K (llama2.c)",
        "reference": "scripts/make_streaming_golden.py: numpy float64, pre-RoPE keys, positions within the cache",
        "text_ids": ids,
        "text_sinks": text_case(cfg, w, ids, 4, 100, full_at),
        "text_window_only": text_case(cfg, w, ids, 0, 100, full_at),
        "greedy": greedy_case(cfg, w, ids[:24], 4, 64, 700),
    }
    # For the note: the full context (no eviction; positions past 512 are beyond the model's training).
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out) + "\n")
    for k in ("text_sinks", "text_window_only"):
        print(k, "perplexity", out[k]["perplexity"])
    print("greedy min margin", out["greedy"]["min_top1_top2_margin"])
    DS_OUT.write_text(json.dumps(deepseek_golden(ids[:700])) + "\n")


if __name__ == "__main__":
    main()
