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


if __name__ == "__main__":
    main()
