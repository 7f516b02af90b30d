#!/usr/bin/env python3
"""Builds tests/golden/hf/VARIANT.json: transformers' logits for configurations llama.cpp does not compute. Run
once per variant; the output is committed.

- deepseek-v2-group-limited: DeepSeek-V2's group_limited_greedy routing (llama.cpp scores every deepseek2
  file's groups by their best two experts; DeepSeek-V2's modeling code by the best one). The config turned
  into DeepSeek-V2's: DeepseekV2ForCausalLM, softmax scores, topk_method group_limited_greedy (4 groups, 2
  used), no renormalization, routed_scaling_factor 1.7 (transformers ignores the folder's
  e_score_correction_bias for V2; so does kvserve).
- deepseek-v3-rope-noninterleaved: DeepSeek-V3 with rope_interleave false (q_pe/k_pe rotated in pairs
  (i, i + n_rot/2)).
- mistral-sliding-window: Mistral v0.1's sliding window on every layer (llama.cpp runs Mistral files with full
  attention), 7 positions, over tiny-gqa's weights.
- ministral-layer-types: Ministral's `layer_types` (sliding, then full), window 12, over tiny-gqa's weights.
- qwen2-sliding-window: Qwen 2's use_sliding_window: layers from max_window_layers (1) on slide over 9
  positions, over tiny-qwen2's weights (QKV biases).
- gpt-oss-untruncated-yarn: gpt-oss (GptOssForCausalLM: learned sinks, interleaved gate/up, router bias, windows
  on the even layers) with its published config's YaRN, `truncate` false (llama.cpp rounds the ramp's ends), over
  tiny-gptoss's weights; the folder holds the experts dequantized (write_hf_folder --dequantized-experts), since
  transformers' MXFP4 path on a CPU rounds them through bf16.
- gemma4-shared-kv: Gemma 4 (Gemma4ForCausalLM) as transformers computes it, with exact tanh GELU where llama.cpp's
  ggml looks GELU up in an f16 table: tiny-gemma4's weights (sliding and full layers of different head sizes and KV
  heads given by per_layer_config, KV sharing, double-wide FFNs on the shared layers, per-layer embeddings, layer
  scalars, proportional RoPE), no edits.
- gemma4-moe: the same for tiny-gemma4-moe (experts beside each dense FFN, attention_k_eq_v with global_head_dim and
  num_global_key_value_heads), no edits.
- llama4-chunked-temperature: Llama 4 (Llama4ForCausalLM) with its chunked attention and attention temperature
  where a short sequence shows them (llama.cpp fixes both at 8192 positions): attention_chunk_size 8 on the
  rotating layers, floor_scale 4 and attn_scale 0.5 on the NoPE one, over tiny-llama4's weights.

The model is the base GGUF's weights as a Hugging Face folder (scripts/write_hf_folder.cpp) with the variant's
config edits. For each golden prompt of the base, the teacher-forced sequence and the top 5 logits of every
step; the sliding-window variants add each sequence again with its first `long_prompt` tokens as the prompt,
so that a prefill spans more than the window.

    pip install torch transformers safetensors
    build/write_hf_folder BASE.gguf /tmp/folder     # BASE: the variant's "base" below (gpt-oss: add
                                                    # --dequantized-experts)
    python3 scripts/make_hf_variant_golden.py /tmp/folder VARIANT
"""
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parent.parent
SHARED_GOLDEN = REPO.parent / "shared" / "golden" / "gguf" / "golden"
ARCH_GOLDEN = REPO / "tests" / "golden" / "arch"
VARIANTS = {
    "deepseek-v2-group-limited": {
        "base": "tests/golden/arch/tiny-deepseek3.gguf", "golden": ARCH_GOLDEN / "tiny-deepseek3.jsonl",
        "edits": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                  "topk_method": "group_limited_greedy", "scoring_func": "softmax", "norm_topk_prob": False,
                  "routed_scaling_factor": 1.7}},
    "deepseek-v3-rope-noninterleaved": {
        "base": "tests/golden/arch/tiny-deepseek3.gguf", "golden": ARCH_GOLDEN / "tiny-deepseek3.jsonl",
        "edits": {"rope_interleave": False}},
    "mistral-sliding-window": {
        "base": "../shared/golden/gguf/models/tiny-gqa.gguf", "golden": SHARED_GOLDEN / "tiny-gqa.jsonl",
        "edits": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 7},
        "long_prompt": 30},
    "ministral-layer-types": {
        "base": "../shared/golden/gguf/models/tiny-gqa.gguf", "golden": SHARED_GOLDEN / "tiny-gqa.jsonl",
        "edits": {"architectures": ["MinistralForCausalLM"], "model_type": "ministral", "sliding_window": 12,
                  "layer_types": ["sliding_attention", "full_attention"]},
        "long_prompt": 30},
    "qwen2-sliding-window": {
        "base": "../shared/golden/gguf/models/tiny-qwen2.gguf", "golden": SHARED_GOLDEN / "tiny-qwen2.jsonl",
        "edits": {"use_sliding_window": True, "sliding_window": 9, "max_window_layers": 1},
        "long_prompt": 30},
    "gpt-oss-untruncated-yarn": {
        "base": "tests/golden/arch/tiny-gptoss.gguf", "golden": ARCH_GOLDEN / "tiny-gptoss.jsonl",
        "edits": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                   "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}},
        "dequantized": True, "long_prompt": 30},
    "gemma4-shared-kv": {
        "base": "tests/golden/arch/tiny-gemma4.gguf", "golden": ARCH_GOLDEN / "tiny-gemma4.jsonl",
        "edits": {}, "long_prompt": 30},
    "gemma4-moe": {
        "base": "tests/golden/arch/tiny-gemma4-moe.gguf", "golden": ARCH_GOLDEN / "tiny-gemma4-moe.jsonl",
        "edits": {}, "long_prompt": 30},
    "llama4-chunked-temperature": {
        "base": "tests/golden/arch/tiny-llama4.gguf", "golden": ARCH_GOLDEN / "tiny-llama4.jsonl",
        "edits": {"attention_chunk_size": 8, "floor_scale": 4, "attn_scale": 0.5},
        "long_prompt": 30},
}


def top5_steps(model, ids, n_prompt):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    steps = []
    for row in logits[n_prompt - 1:]:
        top = torch.topk(row, 5)
        steps.append([[int(i), float(v)] for v, i in zip(top.values, top.indices)])
    return steps


def main():
    folder, variant = Path(sys.argv[1]), sys.argv[2]
    spec = VARIANTS[variant]
    config = json.loads((folder / "config.json").read_text())
    config.update(spec["edits"])
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    # Eager attention: the reference masks every score outside the window explicitly.
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    model.eval()
    # Every weight comes from the folder: none left at its initial value, none ignored.
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    cases = []
    for line in open(spec["golden"]):
        g = json.loads(line)
        ids = g["prompt_ids"] + g["generated_ids"][:-1]
        prompts = [len(g["prompt_ids"])] + ([spec["long_prompt"]] if "long_prompt" in spec else [])
        for n_prompt in prompts:
            cases.append({"ids": ids, "n_prompt": n_prompt, "step_logits_top": top5_steps(model, ids, n_prompt)})
    out = {"base": spec["base"], "config_edits": spec["edits"], "dequantized_experts": spec.get("dequantized", False), "transformers": __import__("transformers").__version__,
           "cases": cases}
    (REPO / "tests" / "golden" / "hf" / f"{variant}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
