#!/usr/bin/env python3
"""Builds tests/data/wpm/bert_bge_reference.jsonl (run once; the output is committed).

Hugging Face's `tokenizers` (BertWordPieceTokenizer: the BERT normalizer, pre-tokenizer and WordPiece
model that produced llama.cpp's ggml-vocab-bert-bge.gguf.out) encodes a fixed set of strings plus
seeded random Unicode strings with the vocabulary of ../shared/models/vocab/ggml-vocab-bert-bge.gguf,
written back as a vocab.txt ("▁word" -> "word", "piece" -> "##piece"). kvserve's WPM tokenizer must
give the same ids (tests/test_tokenizer.cpp).

    pip install tokenizers gguf
    python3 scripts/make_wpm_fixture.py
"""
import json
import random
import tempfile
from pathlib import Path

import gguf
from tokenizers import BertWordPieceTokenizer

REPO = Path(__file__).resolve().parent.parent
VOCAB_GGUF = REPO.parent / "shared" / "models" / "vocab" / "ggml-vocab-bert-bge.gguf"
OUT = REPO / "tests" / "data" / "wpm" / "bert_bge_reference.jsonl"

STRINGS = [
    "Hello world", " Hello, World! ", "Führer und naïve café, 3.14! 你好 don't",
    "Ångström façade résumé Ελληνικά Ünïcödé", "The quick (brown) fox—jumps; over: the \"lazy\" dog…",
    "email: a.b@c.com #hashtag $100 50% a+b=c <tag> x^2 `code` |pipe| ~tilde", "日本語のテキスト、カタカナ。",
    "Привет, мир!", "ĳ ﬁ ﬂ Œuvre", "tab\there\nnew\r\nline\u00a0nbsp\u2003em", "zero\u200bwidth soft\u00adhyphen",
    "vertical\x0btab form\x0cfeed next\x85line", "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Straße GROSS İstanbul", "emoji 🦙🚀 done", "co-operate re-enter U.S.A. e.g. i.e.", "한국어 텍스트",
    "ÀÁÂÃÄÅ àáâãäå ÇçÑñ", "e\u0301clair combining\u0308 marks", "Ǆemal ǅ ǆ ÿ Ÿ", "Ⅻ ① ½ ² x²",
    "עברית العربية हिन्दी ไทย", "a\ufffdc\u0007d", "[CLS] [SEP] [MASK] stay text without parse_special",
    "", "   ", "\n\n",
]

# Ranges the random strings draw from: ASCII, Latin with accents, combining marks, Greek, Cyrillic,
# general punctuation, kana, CJK, Hangul syllables and jamo, half/full-width forms, emoji, C0
# controls, presentation forms, Arabic, Devanagari, Thai, letterlike symbols, private use, plane 2.
POOLS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x2000, 0x206F),
         (0x3000, 0x30FF), (0x4E00, 0x4E80), (0xAC00, 0xAC40), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F),
         (0x1, 0x1F), (0xFB00, 0xFB4F), (0x1E00, 0x1EFF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F),
         (0x1100, 0x11FF), (0x2100, 0x24FF), (0xE000, 0xE010), (0x20000, 0x20010)]


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = "".join(chr(rng.randint(*rng.choice(POOLS))) for _ in range(rng.randint(1, 24)))
        out.append(s)
    return out


def main():
    reader = gguf.GGUFReader(str(VOCAB_GGUF))
    tokens_field = reader.fields["tokenizer.ggml.tokens"]
    types_field = reader.fields["tokenizer.ggml.token_type"]
    tokens = [bytes(tokens_field.parts[i]).decode() for i in tokens_field.data]
    types = [int(types_field.parts[i][0]) for i in types_field.data]
    lines = []
    for text, kind in zip(tokens, types):
        if kind == 1:  # normal: GGUF marks word starts with "▁"; vocab.txt marks continuations with "##"
            lines.append(text[1:] if text.startswith("\u2581") else "##" + text)
        else:
            lines.append(text)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        vocab_txt = f.name
    tok = BertWordPieceTokenizer(vocab_txt, lowercase=True, strip_accents=True, clean_text=True,
                                 handle_chinese_chars=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as out:
        for text in STRINGS + random_strings(300, seed=1):
            ids = tok.encode(text, add_special_tokens=False).ids
            out.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=True) + "\n")
    Path(vocab_txt).unlink()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
