#!/usr/bin/env python3
"""Make kvserve's SmolLM2 golden files with an independent reference: llama.cpp
(through llama-cpp-python) on the default model GGUF.

Writes (into tests/golden/smollm2/ unless --out says otherwise):
  greedy.jsonl    one record per prompt: prompt ids, 32 greedy token ids and
                  the top logits of every step
  tokenize.jsonl  one record per string: the ids llama.cpp's tokenizer gives
                  and the decoded round trip
  meta.json       versions, model sha256, protocol settings

Protocol (also in tests/golden/smollm2/README.md):
  * model: SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch_default_model.sh)
  * n_ctx 512, n_batch 512, 1 thread (n_threads = n_threads_batch = 1),
    CPU only, F32 KV cache (type_k = type_v = 0 = GGML_TYPE_F32), flash
    attention off, logits_all on (the logits are read back after every decode)
  * a fresh context for each prompt
  * prompt ids: llama_tokenize(add_special=True, parse_special=<record>);
    add_special=True means BOS/EOS only where the GGUF's vocab says so
  * the whole prompt is decoded in one batch; then, for 32 steps, the next id
    is the argmax of the last position's logits (lowest id on exact ties) and is
    decoded alone (one token per llama_decode); EOS does not stop generation.
  * step_logits_top[i]: top-5 [id, logit] of the logits that chose
    generated_ids[i] (step 0 = the prompt's last position)
  * first_logits_top: top-20 of step 0
  * min_top1_top2_margin: min over the 32 steps of logit(top1) - logit(top2)
  * logits are float32 values written with the shortest repr that round-trips
    to the same float32

Usage:
  python3 scripts/make_smollm2_golden.py [--model PATH] [--out DIR] [--steps 32]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

try:
    import llama_cpp
    from llama_cpp import Llama
except ImportError:  # pragma: no cover
    sys.exit(
        "llama-cpp-python is missing: "
        "CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS=-DGGML_NATIVE=ON "
        "pip install -r scripts/requirements-dev.txt"
    )

REPO = Path(__file__).resolve().parent.parent
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGML_TYPE_F32 = 0

PROMPTS = [
    ("Once upon a time", False),
    ("The capital of France is", False),
    ("def fibonacci(n):", False),
    ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", True),
]

TOKENIZE_STRINGS = [
    "",
    " ",
    "a",
    "Hello",
    "Hello world",
    " Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm can't won't they've you'll we'd",
    "HELLO hello HeLLo",
    "12345 3.14159",
    "0 1 22 333 4444 55555 666666",
    "1,000,000 and -42 and 1e-9",
    "2024-01-15T12:34:56Z",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n-1) + fibonacci(n-2)",
    "int main(void) { printf(\"%d\\n\", x[i]); }",
    "for (auto& [k, v] : map) { std::cout << k << '=' << v; }",
    "x = {'a': 1, \"b\": [2, 3]}  # comment",
    "    four spaces",
    "a  b   c    d     e",
    "trailing spaces   ",
    "\ttab\tseparated\tvalues",
    "line1\nline2\n\nline4\n",
    "\r\nwindows\r\nlines",
    "\n\n\n",
    "mixed \t \n whitespace",
    "café naïve résumé façade",
    "Ünïcödé Ångström São Paulo",
    "Привет, мир!",
    "Γειά σου κόσμε",
    "日本語のテキスト",
    "你好，世界",
    "한국어 문장",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽",
    "👨‍👩‍👧‍👦 family",
    "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com",
    "€100 £50 ¥1000 ±0.5 °C",
    "....!!!???---___",
    "supercalifragilisticexpialidocious",
    "tokenization of unusualwordsjoinedtogether",
]

# A few extra records with special-token parsing on (flagged per record).
TOKENIZE_SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>",
    "text<|im_end|>more",
]


def f32(x) -> float:
    """Shortest decimal that round-trips to the same float32."""
    return float(str(np.float32(x)))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def default_model_path() -> Path:
    base = os.environ.get("KVSERVE_MODELS") or os.path.join(
        os.path.expanduser("~"), ".cache", "kvserve", "models"
    )
    return Path(base) / MODEL_FILE


def make_llama(model: Path) -> Llama:
    return Llama(
        model_path=str(model),
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        n_threads=1,
        n_threads_batch=1,
        n_gpu_layers=0,
        type_k=GGML_TYPE_F32,
        type_v=GGML_TYPE_F32,
        flash_attn=False,
        logits_all=True,
        seed=0,
        verbose=False,
    )


def vocab_of(llm: Llama):
    v = getattr(llm._model, "vocab", None)
    if v is None:
        v = llama_cpp.llama_model_get_vocab(llm._model.model)
    return v


def tokenize(vocab, text: str, add_special: bool, parse_special: bool) -> list[int]:
    data = text.encode("utf-8")
    cap = len(data) + 8
    buf = (llama_cpp.llama_token * cap)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:
        cap = -n
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError(f"tokenize failed for {text!r}")
    return [int(t) for t in buf[:n]]


def detokenize(vocab, ids: list[int], remove_special: bool, unparse_special: bool) -> bytes:
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 16 * len(ids)
    out = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), out, cap, remove_special, unparse_special)
    if n < 0:
        cap = -n + 1
        out = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), out, cap, remove_special, unparse_special)
        if n < 0:
            raise RuntimeError("detokenize failed")
    return out.raw[:n]


def topk(logits: np.ndarray, k: int) -> list[list]:
    # Sort by logit descending, then id ascending (stable on ties).
    order = np.lexsort((np.arange(logits.shape[0]), -logits.astype(np.float64)))[:k]
    return [[int(i), f32(logits[i])] for i in order]


def argmax_lowest(logits: np.ndarray) -> int:
    return int(np.argmax(logits))  # numpy returns the first (lowest) index on ties


def last_logits(llm: Llama) -> np.ndarray:
    return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32, copy=True)


def run_greedy(model: Path, prompt: str, parse_special: bool, steps: int) -> dict:
    llm = make_llama(model)
    try:
        vocab = vocab_of(llm)
        ids = tokenize(vocab, prompt, add_special=True, parse_special=parse_special)
        llm.reset()
        llm.eval(ids)  # whole prompt, one batch
        generated, step_top, margins = [], [], []
        first_top = None
        for step in range(steps):
            logits = last_logits(llm)
            if step == 0:
                first_top = topk(logits, 20)
            top = topk(logits, 5)
            tok = argmax_lowest(logits)
            assert tok == top[0][0]
            generated.append(tok)
            step_top.append(top)
            margins.append(float(np.float32(top[0][1]) - np.float32(top[1][1])))
            llm.eval([tok])  # one token per decode
        text = detokenize(vocab, generated, remove_special=False, unparse_special=True)
        return {
            "prompt": prompt,
            "parse_special": parse_special,
            "add_special": True,
            "prompt_ids": ids,
            "generated_ids": generated,
            "generated_text": text.decode("utf-8", errors="replace"),
            "step_logits_top": step_top,
            "first_logits_top": first_top,
            "min_top1_top2_margin": f32(min(margins)),
        }
    finally:
        llm.close() if hasattr(llm, "close") else None


def make_tokenize_records(model: Path) -> list[dict]:
    llm = make_llama(model)
    vocab = vocab_of(llm)
    recs = []
    cases = [(s, False) for s in TOKENIZE_STRINGS] + [(s, True) for s in TOKENIZE_SPECIAL]
    for text, special in cases:
        ids = tokenize(vocab, text, add_special=False, parse_special=special)
        dec = detokenize(vocab, ids, remove_special=False, unparse_special=special)
        decoded = dec.decode("utf-8", errors="replace")
        recs.append({
            "text": text,
            "add_special": False,
            "parse_special": special,
            "ids": ids,
            "decoded": decoded,
            "roundtrip": decoded == text,
        })
    if hasattr(llm, "close"):
        llm.close()
    return recs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=default_model_path())
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "golden" / "smollm2")
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()

    if not args.model.is_file():
        sys.exit(f"model not found: {args.model} (run scripts/fetch_default_model.sh)")
    args.out.mkdir(parents=True, exist_ok=True)

    llm = make_llama(args.model)
    vocab = vocab_of(llm)
    md = dict(llm.metadata)
    meta = {
        "model_file": args.model.name,
        "model_sha256": sha256_file(args.model),
        "model_size": args.model.stat().st_size,
        "llama_cpp_python_version": getattr(llama_cpp, "__version__", "unknown"),
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "n_vocab": int(llm.n_vocab()),
        "bos_id": int(llm.token_bos()),
        "eos_id": int(llm.token_eos()),
        "vocab_add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "vocab_add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        "tokenizer_model": md.get("tokenizer.ggml.model"),
        "tokenizer_pre": md.get("tokenizer.ggml.pre"),
        "general_file_type": md.get("general.file_type"),
        "protocol": {
            "n_ctx": 512, "n_batch": 512, "n_ubatch": 512, "n_threads": 1,
            "n_threads_batch": 1, "n_gpu_layers": 0, "type_k": "f32", "type_v": "f32",
            "flash_attn": False, "logits_all": True, "steps": args.steps,
            "prompt_decode": "one batch", "generation_decode": "one token per llama_decode",
            "selection": "argmax, lowest id on exact ties", "stop_on_eos": False,
            "fresh_context_per_prompt": True,
        },
    }
    if hasattr(llm, "close"):
        llm.close()

    greedy = []
    for prompt, special in PROMPTS:
        rec = run_greedy(args.model, prompt, special, args.steps)
        print(f"[greedy] {prompt!r}: {len(rec['prompt_ids'])} prompt ids, "
              f"margin {rec['min_top1_top2_margin']:.4f}, -> {rec['generated_text']!r}", file=sys.stderr)
        greedy.append(rec)
    toks = make_tokenize_records(args.model)

    def dump_jsonl(path: Path, recs: list[dict]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")

    dump_jsonl(args.out / "greedy.jsonl", greedy)
    dump_jsonl(args.out / "tokenize.jsonl", toks)
    with open(args.out / "meta.json", "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=2)
        f.write("\n")
    bad = [r["text"] for r in toks if not r["roundtrip"]]
    print(f"[tokenize] {len(toks)} strings, {len(bad)} not round-tripping: {bad!r}", file=sys.stderr)
    print(f"wrote {args.out}/greedy.jsonl, tokenize.jsonl, meta.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
