#!/usr/bin/env python3
"""MXFP4 blocks as llama.cpp's gguf-py quantizes them (gguf.quants, its port of ggml's quantize_row_mxfp4_ref), for
Mxfp4.QuantizerWritesLlamaCppsBytes: tests/data/mxfp4/input.f32 (float32 values, blocks of 32 at several magnitudes,
zeros, values on the grid and halfway between two levels) and tests/data/mxfp4/gguf.bin (their 17-byte blocks).

    python3 scripts/make_mxfp4_fixture.py --llama-cpp DIR

DIR is the llama.cpp tree llama-cpp-python 0.3.36 vendors (see fetch_llama_cpp_vocab.sh); only its gguf-py is used.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "mxfp4"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(args.llama_cpp.resolve() / "gguf-py"))
    import gguf  # noqa: E402

    rng = np.random.default_rng(2026)
    parts = [rng.standard_normal(32 * 16) * s for s in (1e-30, 1e-3, 0.02, 1.0, 300.0, 1e20)]
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6] * 4, dtype=np.float64) * 2.0 ** -3
    halfway = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6] * 4, dtype=np.float64) * 2.0 ** -3
    x = np.concatenate(parts + [np.zeros(32), grid, -grid, halfway, -halfway]).astype(np.float32)
    OUT.mkdir(parents=True, exist_ok=True)
    x.tofile(OUT / "input.f32")
    q = gguf.quants.quantize(x.reshape(-1, 32), gguf.GGMLQuantizationType.MXFP4)
    (OUT / "gguf.bin").write_bytes(q.tobytes())
    print(f"{x.size // 32} blocks")


if __name__ == "__main__":
    main()
