#!/usr/bin/env python3
"""Builds tests/golden/quant/: ../shared/golden/gguf/models/tiny-gqa.gguf (F16 weights) quantized by
llama.cpp itself to the weight types the shared set lacks (Q5_0, Q5_1, IQ4_NL, IQ4_XS, and the Q2_K and Q3_K_M mixes,
which put Q3_K, Q4_K, Q5_K and Q6_K beside them; the i-quant mixes IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_M, IQ3_XXS
and IQ3_M, which hold IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S), and llama.cpp's greedy ids and
logits for each file by the protocol of ../shared/golden/gguf/README.md. Run once; the output is committed.
The types llama.cpp quantizes only with an importance matrix get one of ones (--uniform-imatrix).

    python3 scripts/make_quant_goldens.py --llama-cpp DIR

DIR is the llama.cpp that llama-cpp-python 0.3.36 vendors, built with CMake into DIR/build (libllama.so
in DIR/build/bin), as for scripts/make_arch_goldens.py.
"""
import argparse
import subprocess
import tempfile
from pathlib import Path

from make_arch_goldens import N_STEPS, PROMPTS, build_against_llama_cpp

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "golden" / "quant"
SOURCE = REPO.parent / "shared" / "golden" / "gguf" / "models" / "tiny-gqa.gguf"
# Output stem -> llama_ftype (llama.h).
FTYPES = {"tiny-gqa-Q5_0": 8, "tiny-gqa-Q5_1": 9, "tiny-gqa-Q2_K": 10, "tiny-gqa-Q3_K_M": 12, "tiny-gqa-IQ4_NL": 25,
          "tiny-gqa-IQ4_XS": 30, "tiny-gqa-IQ2_XXS": 19, "tiny-gqa-IQ2_XS": 20, "tiny-gqa-IQ3_XXS": 23,
          "tiny-gqa-IQ1_S": 24, "tiny-gqa-IQ3_M": 27, "tiny-gqa-IQ2_M": 29, "tiny-gqa-IQ1_M": 31}
# The file types whose tensors llama.cpp refuses to quantize without an importance matrix.
NEEDS_IMATRIX = {19, 20, 23, 24, 29, 31}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp source folder, built into build/")
    ap.add_argument("--only", nargs="*", help="model stems to rebuild (default: all)")
    args = ap.parse_args()
    lcpp = args.llama_cpp.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        golden = Path(tmp) / "llama_cpp_golden"
        quantize = Path(tmp) / "llama_cpp_quantize"
        build_against_llama_cpp(golden, REPO / "scripts" / "llama_cpp_golden.cpp", lcpp)
        build_against_llama_cpp(quantize, REPO / "scripts" / "llama_cpp_quantize.cpp", lcpp)
        OUT.mkdir(parents=True, exist_ok=True)
        for stem, ftype in FTYPES.items():
            if args.only and stem not in args.only:
                continue
            model = OUT / f"{stem}.gguf"
            imatrix = ["--uniform-imatrix"] if ftype in NEEDS_IMATRIX else []
            subprocess.run([str(quantize), str(SOURCE), str(model), str(ftype), *imatrix], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(OUT / f"{stem}.jsonl", "w") as out:
                subprocess.run([str(golden), str(model), str(N_STEPS), *PROMPTS], stdout=out, check=True)
            print(f"{stem}: {model.stat().st_size} bytes")


if __name__ == "__main__":
    main()
