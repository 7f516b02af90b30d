#!/usr/bin/env python3
"""Builds tests/golden/h2o/stories260K.json: an independent H2O ("Heavy-Hitter Oracle", Zhang et al. 2023)
on the llama2.c stories260K model (8 query heads over 4 KV heads), which tests/test_h2o.cpp holds
kvserve's `--h2o-heavy` / `--h2o-recent` to. Run once; the output is committed.

    python3 scripts/make_h2o_golden.py   (needs numpy, and build/kvserve for the text's token ids)

The reference is written as the paper's algorithm over a list, not as kvserve's slots: per layer and KV
head, the cache is a list of (position, key, value, score); a new token joins it, attends (each query head
of the KV head) to every entry, and every entry's score grows by the attention it drew (summed over the
KV head's query heads). Before a token joins a full cache (heavy + recent entries), the entry with the
least score among those not within the `recent` latest positions leaves (the lower position on a tie).
Keys are rotated at their text positions. float64 throughout; the llama2.c forward otherwise (see
make_streaming_golden.py, whose loader this shares).

Cases (the first 512 tokens of tests/data/perplexity/story.txt: the model's context):
- text_h2o: heavy 24, recent 40 (a cache of 64 of the 512): per position the log-probability of the next
  token and the argmax, the whole logits at a few positions, and the smallest score gap between the evicted
  entry and the next candidate over all evictions (how near the decisions came to a tie).
- text_window: heavy 0, recent 64 (a sliding window).
- greedy: a prompt, then greedy tokens to 400 positions with heavy 16, recent 16.

tests/golden/h2o/tiny-deepseek2-kvb.json: DeepSeek-V2's MLA (tests/golden/arch/tiny-deepseek2-kvb.gguf, 4
heads over one cached latent row a token) with H2O 20 + 28 over 400 tokens of the same text, attention
decompressed as make_streaming_golden.py writes it; the list is per layer (one latent row serves every
head) and a score sums all the heads' weights. Without eviction it gives llama.cpp's golden for the file
(checked when this runs). Needs the gguf package too.
"""
import json
import subprocess
from pathlib import Path

import numpy as np

from make_streaming_golden import (MODEL, REPO, TEXT, TOKENIZER, DeepSeek2Streaming, check_against_llamacpp, load,
                                   load_deepseek, log_softmax, rmsnorm, rope)

OUT = REPO / "tests" / "golden" / "h2o" / "stories260K.json"
DS_OUT = REPO / "tests" / "golden" / "h2o" / "tiny-deepseek2-kvb.json"


class H2OModel:
    def __init__(self, cfg, w, heavy, recent):
        self.cfg, self.w, self.heavy, self.recent = cfg, w, heavy, recent
        # cache[layer][kv_head]: entries [position, key, value, score]
        self.cache = [[[] for _ in range(cfg["n_kv"])] for _ in range(cfg["n_layers"])]
        self.n = 0
        self.min_gap = float("inf")

    def evict(self, entries, p):
        cands = [e for e in entries if e[0] <= p - self.recent]
        cands.sort(key=lambda e: (e[3], e[0]))
        if len(cands) > 1:
            self.min_gap = min(self.min_gap, cands[1][3] - cands[0][3])
        entries.remove(cands[0])

    def step(self, token):
        c, w = self.cfg, self.w
        hs, nh, nkv = c["hs"], c["n_heads"], c["n_kv"]
        group = nh // nkv
        p = self.n
        self.n += 1
        x = w["emb"][token].copy()
        for l in range(c["n_layers"]):
            xn = rmsnorm(x, w["rms_att"][l])
            q = rope(w["wq"][l] @ xn, p, hs)
            k = rope(w["wk"][l] @ xn, p, hs)
            v = w["wv"][l] @ xn
            att = np.zeros(c["dim"])
            for kvh in range(nkv):
                entries = self.cache[l][kvh]
                if len(entries) == self.heavy + self.recent:
                    self.evict(entries, p)
                entries.append([p, k[kvh * hs:(kvh + 1) * hs], v[kvh * hs:(kvh + 1) * hs], 0.0])
                keys = np.stack([e[1] for e in entries])
                vals = np.stack([e[2] for e in entries])
                drawn = np.zeros(len(entries))
                for h in range(kvh * group, (kvh + 1) * group):
                    sc = keys @ q[h * hs:(h + 1) * hs] / np.sqrt(hs)
                    sc = np.exp(sc - sc.max())
                    sc /= sc.sum()
                    att[h * hs:(h + 1) * hs] = sc @ vals
                    drawn += sc
                for e, d in zip(entries, drawn):
                    e[3] += d
            x = x + w["wo"][l] @ att
            xn = rmsnorm(x, w["rms_ffn"][l])
            g = w["w1"][l] @ xn
            u = w["w3"][l] @ xn
            x = x + w["w2"][l] @ (g / (1.0 + np.exp(-g)) * u)
        return w["cls"] @ rmsnorm(x, w["rms_final"])


class DeepSeek2H2O(DeepSeek2Streaming):
    """tiny-deepseek2-kvb with H2O: one list a layer (MLA caches one latent row a token for every head), an
    entry's score summed over all the heads; attention decompressed per head as make_streaming_golden.py
    writes it, the rope keys rotated at their text positions."""

    def __init__(self, w, n_layers, heavy, recent):
        super().__init__(w, n_layers, 0, 1 << 30)
        self.heavy, self.recent = heavy, recent
        self.cache = [[] for _ in range(n_layers)]  # entries [position, c, rotated k_pe, score]
        self.min_gap = float("inf")

    def step(self, token):
        w, H, NOPE, ROT, VD, LR = self.w, self.H, self.NOPE, self.ROT, self.VD, self.LR
        p = self.n
        self.n += 1
        x = w["token_embd.weight"][token].copy()
        for l in range(self.n_layers):
            b = f"blk.{l}."
            xn = self.rms(x, w[b + "attn_norm.weight"])
            q = (w[b + "attn_q.weight"] @ xn).reshape(H, NOPE + ROT)
            kva = w[b + "attn_kv_a_mqa.weight"] @ xn
            entries = self.cache[l]
            if len(entries) == self.heavy + self.recent:
                H2OModel.evict(self, entries, p)
            entries.append([p, self.rms(kva[:LR], w[b + "attn_kv_a_norm.weight"]), self.rope(kva[LR:], p), 0.0])
            kvb = w[b + "attn_kv_b.weight"].reshape(H, NOPE + VD, LR)
            C = np.stack([e[1] for e in entries])
            kpe = np.stack([e[2] for e in entries])
            att = np.zeros(H * VD)
            drawn = np.zeros(len(entries))
            for h in range(H):
                k = np.concatenate([C @ kvb[h, :NOPE].T, kpe], axis=1)
                qh = np.concatenate([q[h, :NOPE], self.rope(q[h, NOPE:], p)])
                sc = k @ qh / np.sqrt(NOPE + ROT)
                sc = np.exp(sc - sc.max())
                sc /= sc.sum()
                att[h * VD:(h + 1) * VD] = sc @ (C @ kvb[h, NOPE:].T)
                drawn += sc
            for e, d in zip(entries, drawn):
                e[3] += d
            x = x + w[b + "attn_output.weight"] @ att
            x = x + self.ffn(l, self.rms(x, w[b + "ffn_norm.weight"]))
        return w["output.weight"] @ self.rms(x, w["output_norm.weight"])


def deepseek_golden(ids):
    w, n_layers = load_deepseek()
    check_against_llamacpp(DeepSeek2H2O(w, n_layers, 0, 1 << 20))  # a budget past the text: no eviction
    heavy, recent = 20, 28
    m = DeepSeek2H2O(w, n_layers, heavy, recent)
    logprobs, argmax = [], []
    for i, t in enumerate(ids[:-1]):
        z = m.step(t)
        logprobs.append(float(log_softmax(z)[ids[i + 1]]))
        argmax.append(int(np.argmax(z)))
    return {"model": "tiny-deepseek2-kvb", "reference": "scripts/make_h2o_golden.py (numpy float64, decompressed "
            "MLA, one entry list a layer)", "text_ids": ids,
            "text_h2o": {"heavy": heavy, "recent": recent, "next_token_logprobs": logprobs, "argmax": argmax,
                         "min_eviction_gap": gap(m)}}


def gap(m):
    """The smallest score gap of any eviction with two candidates, or None (no such eviction)."""
    return None if m.min_gap == float("inf") else m.min_gap


def text_case(cfg, w, ids, heavy, recent, full_at):
    m = H2OModel(cfg, w, heavy, recent)
    logprobs, argmax, full = [], [], {}
    for i, t in enumerate(ids[:-1]):
        z = m.step(t)
        logprobs.append(float(log_softmax(z)[ids[i + 1]]))
        argmax.append(int(np.argmax(z)))
        if i in full_at:
            full[str(i)] = [float(v) for v in z]
    return {"heavy": heavy, "recent": recent, "next_token_logprobs": logprobs, "argmax": argmax,
            "logits_at": full, "perplexity": float(np.exp(-np.mean(logprobs))), "min_eviction_gap": gap(m)}


def greedy_case(cfg, w, prompt, heavy, recent, total):
    m = H2OModel(cfg, w, heavy, recent)
    z = None
    for t in prompt:
        z = m.step(t)
    out, margins = [], []
    while len(prompt) + len(out) < total:
        top = np.argsort(z)[::-1]
        margins.append(float(z[top[0]] - z[top[1]]))
        out.append(int(top[0]))
        z = m.step(out[-1])
    return {"heavy": heavy, "recent": recent, "prompt_ids": prompt, "generated_ids": out,
            "min_top1_top2_margin": min(margins), "min_eviction_gap": gap(m)}


def main():
    cfg, w = load(MODEL)
    ids = json.loads(subprocess.run([str(REPO / "build" / "kvserve"), "tokenize", "-m", str(MODEL), "--tokenizer",
                                     str(TOKENIZER)], input=TEXT.read_bytes(), capture_output=True,
                                    check=True).stdout)
    ids = ids[:cfg["seq_len"]]
    full_at = {40, 63, 64, 300, len(ids) - 2}
    out = {
        "model": "stories260K (llama2.c)",
        "reference": "scripts/make_h2o_golden.py: numpy float64, H2O over per-(layer, KV head) entry lists",
        "text_ids": ids,
        "text_h2o": text_case(cfg, w, ids, 24, 40, full_at),
        "text_window": text_case(cfg, w, ids, 0, 64, full_at),
        "text_full": text_case(cfg, w, ids, 0, len(ids), full_at),
        "greedy": greedy_case(cfg, w, ids[:24], 16, 16, 400),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out) + "\n")
    for k in ("text_h2o", "text_window", "text_full"):
        print(k, "perplexity", out[k]["perplexity"], "min eviction gap", out[k]["min_eviction_gap"])
    print("greedy min margin", out["greedy"]["min_top1_top2_margin"], "gap", out["greedy"]["min_eviction_gap"])
    ds = deepseek_golden(ids[:400])
    DS_OUT.write_text(json.dumps(ds) + "\n")
    print("deepseek2 H2O min eviction gap", ds["text_h2o"]["min_eviction_gap"])


if __name__ == "__main__":
    main()
