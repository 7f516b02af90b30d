#!/usr/bin/env python3
"""Renders every chat template kvserve's Jinja renderer is tested on with jinja2, in the environment
transformers' apply_chat_template uses (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, {% generation %}, its tojson, raise_exception, strftime_now at 05 Dec 2026), into
tests/golden/chat_templates/jinja2_render.json: llama.cpp 0.3.36's models/templates/*.jinja (fetched by
scripts/fetch_llama_cpp_vocab.sh) and the templates of tests/golden/chat_templates/llama_cpp_0.3.36.json,
each for the conversations below. A render jinja2 refuses is recorded as an error.

  python3 scripts/make_jinja_golden.py [TEMPLATES_DIR]
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
default_dir = os.path.join(os.environ.get("KVSERVE_MODELS", os.path.expanduser("~/.cache/kvserve/models")),
                           "llama.cpp-vocab-0.3.36", "templates")
templates = sys.argv[1] if len(sys.argv) > 1 else default_dir
today = datetime(2026, 12, 5)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: marks assistant text, renders it as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                   extensions=[AssistantTracker, "jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: today.strftime(fmt)

weather_tool = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}
# (messages, add_generation_prompt, tools)
conversations = [
    ([{"role": "user", "content": "Hello"}], True, None),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}], True, None),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Joke?"}],
     True, None),
    ([{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Joke?"}], True, None),
    ([{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello!"}], False, None),
    ([{"role": "user", "content": "  spaced\n text  "}, {"role": "assistant", "content": "   I am an assistant   "},
      {"role": "user", "content": "Ünïcödé 'q' \"dq\" <tag> {{ not a tag }} \\ end"}], True, None),
    ([{"role": "user", "content": "Weather in Paris?"}], True, [weather_tool]),
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1"}], True, [weather_tool]),
]


def render(src):
    out = []
    for messages, add_generation_prompt, tools in conversations:
        try:
            t = env.from_string(src)
            out.append(t.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                bos_token="<s>", eos_token="</s>"))
        except Exception as e:  # noqa: BLE001 - any refusal is recorded
            out.append({"error": type(e).__name__})
    return out


cases = []
for name in sorted(os.listdir(templates)):
    if name.endswith(".jinja"):
        cases.append({"name": name, "file": name,
                      "rendered": render(open(os.path.join(templates, name), encoding="utf-8").read())})
fixture = json.load(open(os.path.join(root, "tests", "golden", "chat_templates", "llama_cpp_0.3.36.json"),
                         encoding="utf-8"))
for i, case in enumerate(fixture["cases"]):
    cases.append({"name": case["name"], "fixture_index": i, "rendered": render(case["template"])})

path = os.path.join(root, "tests", "golden", "chat_templates", "jinja2_render.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump({"source": "jinja2 " + jinja2.__version__ + " (transformers' environment) rendering llama.cpp 0.3.36's "
                         "models/templates and the templates of llama_cpp_0.3.36.json",
               "bos_token": "<s>", "eos_token": "</s>", "today": today.strftime("%d %b %Y"),
               "conversations": [{"messages": m, "add_generation_prompt": g, "tools": t} for m, g, t in conversations],
               "cases": cases}, f, ensure_ascii=False, indent=1)
    f.write("\n")
n_err = sum(1 for c in cases for r in c["rendered"] if isinstance(r, dict))
print(f"{len(cases)} templates x {len(conversations)} conversations ({n_err} refused) -> {path}")
