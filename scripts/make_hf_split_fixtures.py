#!/usr/bin/env python3
"""Builds tests/data/hf/splits/NAME.jsonl: the `tokenizers` library's ids for byte-level BPE tokenizer.json files
whose Split regex is one that llama.cpp knows by another name (tekken: Mistral Nemo / Small 3 / Ministral; gpt-4o:
o200k, Llama 4, gpt-oss; llama3 with ignore_merges off). Run once; the output is committed.

Each tokenizer.json is the SmolLM2 fixture (tests/data/hf/smollm2) with its pre_tokenizer replaced by
Sequence[Split(regex, Isolated), ByteLevel(use_regex false)] and its model's ignore_merges set, as
tests/test_hf_loader.cpp (HfTokenizer.SplitRegexesMatchTokenizersLibrary) rebuilds it. The first line holds the
regex and ignore_merges; each further line a text and its ids.

    pip install tokenizers
    python3 scripts/make_hf_split_fixtures.py
"""
import json
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from make_hf_fixtures import STRINGS  # noqa: E402

OUT = REPO / "tests" / "data" / "hf" / "splits"
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLITS = {"tekken": (TEKKEN, True), "gpt-4o": (GPT4O, False), "llama3-merges": (LLAMA3, False)}
# Where the splits differ from one another: case changes inside words, contractions in capitals, digit runs,
# slashes after punctuation.
EXTRA = ["HelloWorld CamelCaseWord iPhone XMLHttpRequest ABCdef", "I'M HERE, YOU'RE NOT, she'S", "1234567 and 12",
         "a/b/c ../path/ !?/\n", "naïveÉcole ÀBC àbc", "don't won't I'd they'll we've"]


def main():
    base = json.loads((REPO / "tests" / "data" / "hf" / "smollm2" / "tokenizer.json").read_text(encoding="utf-8"))
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (regex, ignore_merges) in SPLITS.items():
        t = dict(base)
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        t["model"] = dict(base["model"], ignore_merges=ignore_merges)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tokenizer.json"
            path.write_text(json.dumps(t, ensure_ascii=False), encoding="utf-8")
            tok = Tokenizer.from_file(str(path))
        with open(OUT / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.write(json.dumps({"regex": regex, "ignore_merges": ignore_merges}) + "\n")
            for text in STRINGS + EXTRA:
                row = {"text": text, "ids": tok.encode(text, add_special_tokens=False).ids,
                       "ids_with_special": tok.encode(text, add_special_tokens=True).ids}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(name, len(STRINGS + EXTRA))


if __name__ == "__main__":
    main()
