#!/usr/bin/env python3
"""Builds tests/golden/tokenizer/special_tokens_llama_cpp_0.3.36.json: llama.cpp's tokenization, with
special tokens parsed, of chat-like strings for vocabularies whose special tokens strip whitespace
(llama.cpp's LSTRIP / RSTRIP attributes: Phi-3's strip to the right) and one that strips none. Run once;
the output is committed. The vocabularies are llama.cpp's test files (scripts/fetch_llama_cpp_vocab.sh).

    python3 scripts/make_special_token_fixture.py --llama-cpp DIR [--vocab-dir DIR]
"""
import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "golden" / "tokenizer" / "special_tokens_llama_cpp_0.3.36.json"
VOCABS = ["ggml-vocab-phi-3.gguf", "ggml-vocab-llama-spm.gguf"]
STRINGS = [
    "<|user|>\nHello there<|end|>\n<|assistant|>\n",
    "<|system|>  You are helpful.<|end|>\n<|user|>\n\n  Hi!<|end|>\n<|assistant|>",
    "text before <|user|> text after",
    "<s> leading space after BOS </s> trailing\t\n",
    "<|endoftext|> after end of text",
    "<unk>  after unk",
    "no special tokens at all\n",
    "<|end|>\t\r\n \nnext",
    "   <|assistant|>",
]


def escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, type=Path)
    ap.add_argument("--vocab-dir", type=Path,
                    default=Path(os.environ.get("KVSERVE_MODELS", Path.home() / ".cache/kvserve/models"))
                    / "llama.cpp-vocab-0.3.36")
    args = ap.parse_args()
    lcpp = args.llama_cpp.resolve()
    bindir = lcpp / "build" / "bin"
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        tool = Path(tmp) / "tok"
        subprocess.run(["g++", "-std=c++17", "-O2", f"-I{lcpp}/include", f"-I{lcpp}/ggml/include",
                        str(REPO / "scripts" / "llama_cpp_tokenize.cpp"), f"-L{bindir}", "-lllama", "-lggml",
                        "-lggml-base", f"-Wl,-rpath,{bindir}", "-o", str(tool)], check=True)
        for vocab in VOCABS:
            for add_special in (0, 1):
                out = subprocess.run([str(tool), str(args.vocab_dir / vocab), str(add_special), "1"], check=True,
                                     input="".join(escape(s) + "\n" for s in STRINGS), stdout=subprocess.PIPE,
                                     text=True).stdout.splitlines()
                for s, ids in zip(STRINGS, out):
                    cases.append({"vocab": vocab, "add_special": bool(add_special), "text": s, "ids": json.loads(ids)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"llama_cpp": "llama-cpp-python 0.3.36 (vendored llama.cpp), llama_tokenize with "
                               "parse_special", "cases": cases}, indent=1, ensure_ascii=False) + "\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
