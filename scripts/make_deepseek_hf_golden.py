#!/usr/bin/env python3
"""Builds tests/golden/hf/deepseek-*.json: transformers' logits for DeepSeek configurations llama.cpp does not
compute. Run once per variant; the output is committed.

- deepseek-v2-group-limited: DeepSeek-V2's group_limited_greedy routing (llama.cpp scores every deepseek2
  file's groups by their best two experts; DeepSeek-V2's modeling code by the best one). The config turned
  into DeepSeek-V2's: DeepseekV2ForCausalLM, softmax scores, topk_method group_limited_greedy (4 groups, 2
  used), no renormalization, routed_scaling_factor 1.7 (transformers ignores the folder's
  e_score_correction_bias for V2; so does kvserve).
- deepseek-v3-rope-noninterleaved: DeepSeek-V3 with rope_interleave false (q_pe/k_pe rotated in pairs
  (i, i + n_rot/2)).

The model is tiny-deepseek3's weights as a Hugging Face folder (scripts/write_hf_folder.cpp) with the variant's
config edits. For each golden prompt of tiny-deepseek3, the teacher-forced sequence and the top 5 logits of
every step.

    pip install torch transformers safetensors
    build/write_hf_folder tests/golden/arch/tiny-deepseek3.gguf /tmp/folder
    python3 scripts/make_deepseek_hf_golden.py /tmp/folder VARIANT
"""
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {
    "deepseek-v2-group-limited": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                                  "topk_method": "group_limited_greedy", "scoring_func": "softmax",
                                  "norm_topk_prob": False, "routed_scaling_factor": 1.7},
    "deepseek-v3-rope-noninterleaved": {"rope_interleave": False},
}


def main():
    folder, variant = Path(sys.argv[1]), sys.argv[2]
    edits = VARIANTS[variant]
    config = json.loads((folder / "config.json").read_text())
    config.update(edits)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    cases = []
    for line in open(REPO / "tests" / "golden" / "arch" / "tiny-deepseek3.jsonl"):
        g = json.loads(line)
        ids = g["prompt_ids"] + g["generated_ids"][:-1]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        n_prompt = len(g["prompt_ids"])
        steps = []
        for row in logits[n_prompt - 1:]:
            top = torch.topk(row, 5)
            steps.append([[int(i), float(v)] for v, i in zip(top.values, top.indices)])
        cases.append({"ids": ids, "n_prompt": n_prompt, "step_logits_top": steps})
    out = {"config_edits": edits, "transformers": __import__("transformers").__version__, "cases": cases}
    (REPO / "tests" / "golden" / "hf" / f"{variant}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
