#!/usr/bin/env python3
"""Builds the Hugging Face tokenizer fixtures under tests/data/hf/ (run once; the output is committed).

For each source GGUF, transformers' own GGUF -> tokenizer conversion writes tokenizer.json and
tokenizer_config.json, and the `tokenizers` library (the reference implementation kvserve must
match) encodes a fixed set of strings into reference ids, saved as reference.jsonl.

    pip install transformers tokenizers gguf sentencepiece protobuf
    python3 scripts/make_hf_fixtures.py [--smollm PATH_TO_SMOLLM2_GGUF]
"""
import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "hf"
GOLDEN_MODELS = REPO.parent / "shared" / "golden" / "gguf" / "models"

# ASCII, digits, code, whitespace runs, punctuation, accents, CJK, emoji, special-token text.
STRINGS = [
    "Once upon a time",
    "Lily and Ben",
    "The cat",
    "One day, a little girl named",
    "Hello world",
    " Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "",
    " ",
    "   ",
    "\n",
    "line one\nline two\n\nline four",
    "tabs\tand\t\ttabs",
    "mixed \t\n whitespace \n\n\n end",
    "1 2 3",
    "12345678901234567890",
    "3.14159 and 2,718 and -42",
    "Version 1.2.3-rc4 released on 2024-05-06",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "if x == 10 and y != 'abc': print(f\"{x}\")",
    "<html><body class=\"main\">Hi</body></html>",
    "I'm sure they're here, we've seen it, you'll see, she'd know",
    "DON'T SHOUT, it's RUDE",
    "Café au lait, naïve résumé, jalapeño",
    "Ünïcödé àccénts ÀÉÎÕÜ",
    "Straße und Größe",
    "Привет, мир!",
    "Γειά σου κόσμε",
    "你好，世界！",
    "日本語のテキストです。",
    "한국어 문장입니다",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦",
    "🤖",
    "a😀b",
    "!!!???...,,,;;;",
    "email@example.com https://example.com/path?q=1&r=2#frag",
    "<s> and </s> and <unk> as text",
    "<|endoftext|><|im_start|>user",
    "The quick brown fox jumps over the lazy dog.",
    "ALL CAPS WORDS and lowercase words",
    "x" * 40,
]


def read_gguf_tokenizer(gguf_path: Path):
    """(architecture, tokenizer_dict, tokenizer_config) the way transformers' get_gguf_tokenizer builds
    them, but read with the `gguf` package: transformers' own GGUF reader needs torch."""
    import gguf
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, _SPECIAL_TOKENS

    reader = gguf.GGUFReader(str(gguf_path))
    metadata = {}
    for key, field in reader.fields.items():
        value = field.contents()
        metadata[key] = value
    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer, tokenizer_config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tokenizer.get("tokenizer_type") == "llama":
        tokenizer_config.setdefault("add_bos_token", True)
    for name, key in _SPECIAL_TOKENS.items():
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        # llama.cpp writes 0xFFFFFFFF (-1 as uint32) for "no such token".
        valid = token_id is not None and token_id < len(tokenizer["tokens"])
        tokenizer_config[name] = tokenizer["tokens"][token_id] if valid else None
    return metadata["general.architecture"], tokenizer, tokenizer_config


def legacy_string_merges(tokenizer_json: dict) -> None:
    """Older tokenizer.json files (e.g. Llama 2's) spell merges as "a b" strings instead of pairs."""
    tokenizer_json["model"]["merges"] = [" ".join(pair) for pair in tokenizer_json["model"]["merges"]]


def smollm2_pre_tokenizer(tokenizer_json: dict) -> None:
    """transformers' GGUF conversion does not know llama.cpp's "smollm" pre-tokenizer and falls back
    to plain ByteLevel; SmolLM2's own tokenizer.json splits digits individually first. Restore that."""
    tokenizer_json["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }


def write_fixture(name: str, gguf_path: Path, edit=None) -> None:
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    out_dir = OUT / name
    architecture, tokenizer_dict, tokenizer_config = read_gguf_tokenizer(gguf_path)
    backend, _ = convert_gguf_tokenizer(architecture, tokenizer_dict)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **{k: v for k, v in tokenizer_config.items() if v is not None})
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(tmp) / "tokenizer_config.json", out_dir / "tokenizer_config.json")
        tokenizer_json = json.loads((Path(tmp) / "tokenizer.json").read_text(encoding="utf-8"))
    if edit:
        edit(tokenizer_json)
    # Compact, so the 49k-token SmolLM2 vocabulary stays under the 3 MB fixture budget.
    (out_dir / "tokenizer.json").write_text(
        json.dumps(tokenizer_json, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")

    reference = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    with open(out_dir / "reference.jsonl", "w", encoding="utf-8") as f:
        for text in STRINGS:
            row = {
                "text": text,
                "ids": reference.encode(text, add_special_tokens=False).ids,
                "ids_with_special": reference.encode(text, add_special_tokens=True).ids,
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    size = (out_dir / "tokenizer.json").stat().st_size
    print(f"{name}: {gguf_path} -> {out_dir} (tokenizer.json {size} bytes)")
    assert size < 3_000_000, "fixture too large to commit"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smollm", type=Path, help="SmolLM2 GGUF to take the byte-level BPE tokenizer from")
    args = parser.parse_args()
    write_fixture("stories512", GOLDEN_MODELS / "tiny-gqa.gguf", legacy_string_merges)
    if args.smollm:
        write_fixture("smollm2", args.smollm, smollm2_pre_tokenizer)


if __name__ == "__main__":
    main()
