#!/usr/bin/env python3
"""Builds tests/golden/perplexity/llama_cpp_0.3.36.json: llama.cpp's own llama-perplexity on
tests/data/perplexity/story.txt for a few models, the reference `kvserve perplexity` is tested against
(tests/test_perplexity.cpp). Run once; the output is committed.

    python3 scripts/make_perplexity_golden.py --llama-perplexity BIN [--smollm2 PATH]

BIN: llama-perplexity from the llama.cpp that llama-cpp-python 0.3.36 vendors (its sdist, built with CMake:
`make llama-perplexity` in its build folder). Settings: one thread, batch = context, flash attention off,
F32 K/V (the golden protocol's), so the figures are llama.cpp's reference numerics.
"""
import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TEXT = REPO / "tests" / "data" / "perplexity" / "story.txt"
OUT = REPO / "tests" / "golden" / "perplexity" / "llama_cpp_0.3.36.json"

# (model as the test finds it, context, chunks or -1 for all)
CASES = [
    ("shared:golden/gguf/models/stories260K-F32.gguf", 128, -1),
    ("shared:golden/gguf/models/stories260K-Q8_0.gguf", 128, -1),
    ("shared:golden/gguf/models/tiny-qwen2.gguf", 128, 6),
    ("repo:tests/golden/arch/tiny-gemma3.gguf", 64, 8),
]


def resolve(spec, smollm2):
    kind, rel = spec.split(":", 1)
    if kind == "shared":
        return SHARED / rel
    if kind == "repo":
        return REPO / rel
    return Path(smollm2)


def run(binary, model, ctx, chunks):
    cmd = [binary, "-m", str(model), "-f", str(TEXT), "-c", str(ctx), "-b", str(ctx), "-t", "1", "-fa", "off",
           "-ctk", "f32", "-ctv", "f32", "--chunks", str(chunks)]
    # llama.cpp logs from a thread of its own, which a pipe sometimes cuts short at exit: its output goes to
    # a file, and a run whose output lacks the chunks or the final estimate is run again.
    for _ in range(5):
        with tempfile.TemporaryFile("w+") as f:
            subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT, text=True)
            f.seek(0)
            out = f.read()
        running = [float(x) for x in re.findall(r"\[\d+\](\d+\.\d+),", out)]
        m = re.search(r"Final estimate: PPL = (\d+\.\d+) \+/- (\d+\.\d+)", out)
        if m and running and (chunks < 0 or len(running) == chunks):
            return {"running_ppl": running, "ppl": float(m.group(1)), "ppl_stderr": float(m.group(2))}
    raise RuntimeError("no perplexity in the output of: " + " ".join(cmd) + "\n" + out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-perplexity", required=True)
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf (the default model), for one more case")
    args = ap.parse_args()
    cases = list(CASES)
    if args.smollm2:
        cases.append(("default-model:SmolLM2-135M-Instruct.Q4_1.gguf", 256, 3))
    results = []
    for spec, ctx, chunks in cases:
        r = run(args.llama_perplexity, resolve(spec, args.smollm2), ctx, chunks)
        results.append({"model": spec, "n_ctx": ctx, "chunks": chunks, **r})
        print(spec, ctx, r["ppl"], r["ppl_stderr"], len(r["running_ppl"]), "chunks")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"llama_cpp": "llama-cpp-python 0.3.36 (vendored llama.cpp), llama-perplexity",
                               "text": "tests/data/perplexity/story.txt", "settings": "-t 1 -b n_ctx -fa off -ctk f32 -ctv f32",
                               "cases": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
