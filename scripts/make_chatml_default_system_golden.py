#!/usr/bin/env python3
"""Renders llama.cpp's real chat templates (models/templates/*.jinja, from the llama-cpp-python sdist that
scripts/fetch_llama_cpp_vocab.sh installs) with jinja2, as transformers' apply_chat_template does, for a
conversation of one user message, and writes tests/golden/chat_templates/chatml_default_system.json: per
ChatML template (turns '<|im_start|>role\\n...<|im_end|>\\n') that jinja2 can render here, the rendered
prompt and the system turn it opens with unasked (null when it opens with the user's turn).

  python3 scripts/make_chatml_default_system_golden.py [TEMPLATES_DIR]
"""
import json
import os
import sys
from datetime import datetime

import jinja2

from transformers_jinja import environment, templates_dir

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
templates = templates_dir()
env = environment(datetime(2026, 1, 1))

user = "Hello"
out = []
for name in sorted(os.listdir(templates)):
    if not name.endswith(".jinja"):
        continue
    src = open(os.path.join(templates, name), encoding="utf-8").read()
    if "<|im_start|>" not in src or "<|im_sep|>" in src or "<end_of_utterance>" in src:
        continue  # not ChatML as kvserve (and llama.cpp) detect it
    try:
        text = env.from_string(src).render(messages=[{"role": "user", "content": user}], add_generation_prompt=True,
                                           bos_token="", eos_token="", tools=None)
    except Exception as e:  # filters or globals this script does not provide
        print(f"skip {name}: {type(e).__name__}: {e}", file=sys.stderr)
        continue
    system = None
    head = "<|im_start|>system\n"
    if text.startswith(head):
        system = text[len(head):text.index("<|im_end|>")]
    # Only templates whose whole prompt is plain ChatML turns: what kvserve's renderer can give.
    turns = ("" if system is None else f"{head}{system}<|im_end|>\n") + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    out.append({"file": name, "rendered": text, "default_system": system, "plain_chatml": text == turns})

path = os.path.join(root, "tests", "golden", "chat_templates", "chatml_default_system.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump({"source": "jinja2 " + jinja2.__version__ + " rendering of llama.cpp 0.3.36's models/templates",
               "user": user, "templates": out}, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"{len(out)} templates -> {path}")
