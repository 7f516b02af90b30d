#!/usr/bin/env python3
"""Renders llama.cpp's copies of IBM's Granite chat templates (models/templates/ibm-granite-*, installed by
scripts/fetch_llama_cpp_vocab.sh) with jinja2, as transformers' apply_chat_template does (strftime_now gives
05 Dec 2026), for four conversations, into tests/golden/chat_templates/granite_default_system.json. Granite 3.3
and 4.0 open a conversation without a system message with one of their own.

  python3 scripts/make_granite_default_system_golden.py [TEMPLATES_DIR]
"""
import json
import os
from datetime import datetime

import jinja2

from transformers_jinja import environment, templates_dir

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
templates = templates_dir()
today = datetime(2026, 12, 5)
env = environment(today)

conversations = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Joke?"}],
    [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": "Joke?"}],
]
out = []
for name in sorted(os.listdir(templates)):
    if not name.startswith("ibm-granite-") or not name.endswith(".jinja"):
        continue
    src = open(os.path.join(templates, name), encoding="utf-8").read()
    t = env.from_string(src)
    out.append({"file": name, "rendered": [t.render(messages=c, add_generation_prompt=True, bos_token="", eos_token="",
                                                    tools=None, documents=None, controls={}, thinking=False)
                                           for c in conversations]})

path = os.path.join(root, "tests", "golden", "chat_templates", "granite_default_system.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump({"source": "jinja2 " + jinja2.__version__ + " rendering of llama.cpp 0.3.36's models/templates",
               "today": today.strftime("%d %b %Y"), "conversations": conversations, "templates": out},
              f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"{len(out)} templates -> {path}")
