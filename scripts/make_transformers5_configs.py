#!/usr/bin/env python3
"""Builds tests/data/hf/transformers5/STEM.json: the config.json that transformers 5 saves for each tiny golden's
Hugging Face folder (scripts/write_hf_folder.cpp writes them in the earlier keys: rope_theta, rope_scaling,
partial_rotary_factor, rope_local_base_freq; transformers 5 moves those into `rope_parameters`). Run once; the
output is committed (made with transformers 5.25.0).

    pip install torch transformers
    g++ ... scripts/write_hf_folder.cpp -o build/write_hf_folder   (see that file)
    python3 scripts/make_transformers5_configs.py build/write_hf_folder
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from transformers import AutoConfig

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "hf" / "transformers5"
ARCH = REPO / "tests" / "golden" / "arch"
# Every tiny golden whose folder carries RoPE keys transformers 5 moves (a base, YaRN, LongRoPE, partial
# rotation, Gemma's local base) or, for Gemma 2 and 3, sliding windows beside them.
STEMS = ["tiny-qwen3", "tiny-qwen3-yarn", "tiny-gemma", "tiny-gemma2", "tiny-gemma3", "tiny-phi3",
         "tiny-phi3-longrope", "tiny-phi3-longrope-short", "tiny-phi4", "tiny-smollm3", "tiny-granite",
         "tiny-mixtral", "tiny-qwen3moe", "tiny-deepseek2", "tiny-deepseek2-yarn", "tiny-deepseek3"]
# Variants: (the golden they are written from, config edits in the earlier keys before transformers reads them).
# Gemma 3 4B-27B scale their global layers' RoPE linearly (factor 8), not the local ones'.
VARIANTS = {"tiny-gemma3-linear": ("tiny-gemma3", {"rope_scaling": {"rope_type": "linear", "factor": 8.0}})}


def main():
    writer = Path(sys.argv[1]).resolve()
    OUT.mkdir(parents=True, exist_ok=True)
    for stem in STEMS + list(VARIANTS):
        base, edits = VARIANTS.get(stem, (stem, {}))
        with tempfile.TemporaryDirectory() as tmp:
            folder, saved = Path(tmp) / "in", Path(tmp) / "out"
            subprocess.run([str(writer), str(ARCH / f"{base}.gguf"), str(folder)], check=True)
            config = json.loads((folder / "config.json").read_text())
            config.update(edits)
            (folder / "config.json").write_text(json.dumps(config))
            AutoConfig.from_pretrained(folder).save_pretrained(saved)
            config = json.loads((saved / "config.json").read_text())
            assert "rope_parameters" in config, stem
            (OUT / f"{stem}.json").write_text(json.dumps(config, indent=1) + "\n")
            print(stem, json.dumps(config["rope_parameters"]))


if __name__ == "__main__":
    main()
