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
from datetime import datetime

import jinja2

from transformers_jinja import environment, templates_dir

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
templates = templates_dir()
today = datetime(2026, 12, 5)
env = environment(today)

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

# The language's corners one by one, each rendered with snippet_vars.
snippet_vars = {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                         {"role": "user", "content": "c"}]}
snippet_sources = [
    "a  {% if true %}\n  b\n  {% endif %}\nc",
    "x {%- if true -%}  y  {%- endif -%} z",
    "  {%+ if true %}x{% endif +%}\ny",
    "p\n  {# note #}\nq {#- trimmed -#}  r",
    "{% raw %}{{ not rendered }}{% endraw %}!",
    "line\r\nwindows\n",
    "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, \"it's\"] }}",
    "{{ 1e16 }} {{ 0.1 + 0.2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1e-5 }} {{ 3.0 }}",
    "{{ '  x y  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a b  c '.split() }}|{{ 'abc'.upper() }}|"
    "{{ 'Hello'[1:3] }}|{{ 'h\u00e9llo'[::-1] }}|{{ 'x'.startswith(('a', 'x')) }}|{{ 'a-b-c'.rsplit('-', 1) }}|"
    "{{ '{} {name}'.format(1, name='n') }}|{{ 'ab' * 3 }}|{{ 'abcabc'.replace('b', 'X', 1) }}|"
    "{{ 'hello world'.title() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'abc'.find('c') }}|{{ 'a\nb'.splitlines() }}",
    "{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'a']|unique|list }}|{{ [1, 2, 3]|join('-') }}|{{ 'abc'|length }}|"
    "{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ x|default('u') }}|{{ [1, 2]|first }}{{ [1, 2]|last }}|"
    "{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'a': 1}|items|list }}|{{ 'a\nb\n'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|"
    "{{ '<a&b>'|e }}|{{ 3.7|int }}|{{ '42'|int + 1 }}|{{ 'x'|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|"
    "{{ [1, 2, 3]|sum }}|{{ [1, 5, 3]|max }}|{{ 'AbC'|lower }}|{{ 'ab'|capitalize }}|{{ [1, 2, 3]|reverse|list }}|"
    "{{ ' x '|trim }}|{{ 'a b c'|wordcount }}|{{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}|{{ 'ab'|list }}",
    "{{ {'a': [1, 2.5, none, true], 'b': '\u00e9\"\\n'}|tojson }}|{{ {'a': 1, 'b': [1]}|tojson(indent=2) }}|"
    "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ [] |tojson }}|{{ 'x'|tojson }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|"
    "{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}|{{ [1, 2, 3, 4]|select('odd')|list }}|"
    "{{ ['a', 'b']|map('upper')|list }}|{% if msgs|selectattr('role', 'eq', 'nobody') %}generator-true{% endif %}|"
    "{{ msgs|map(attribute='missing', default='-')|join }}",
    "{% for x in [1, 2, 3] if x != 2 %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% else %}none"
    "{% endfor %}|{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}|"
    "{% for x in [] %}x{% else %}empty{% endfor %}|"
    "{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}"
    "{% endfor %}|{% for x in 'ab' %}{{ loop.cycle('o', 'e') }}{{ loop.previtem }}{{ loop.revindex0 }}{% endfor %}|"
    "{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index0 }}{{ a }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% set y = 1 %}{% for x in [1, 2] %}{% if loop.first %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}{{ y }}|"
    "{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}|"
    "{% if true %}{% set z = 'if-scope' %}{% endif %}{{ z }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "{% macro m(a, b='B') %}<{{ a }}{{ b }}{{ g }}>{% endmacro %}{% set g = '!' %}{{ m(1) }}{{ m(2, b='c') }}"
    "{{ m(b=3, a=4) }}{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}",
    "{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(2, 3) }}{{ m(b='x', a='y') }}",
    "{{ ' a b  c  '.split(none, 1) }}{{ ' a b  c  '.rsplit(none, 1) }}{{ 'a b c'.split(None, 0) }}"
    "{{ '  '.split() }}{{ ' x\\ty\\n'.rsplit() }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'a,b,c'.split(',', -1) }}",
    "{% set t %}  hi  {% endset %}[{{ t }}]|{% set u | upper %}abc{% endset %}{{ u }}|"
    "{% filter upper %}xyz{% endfilter %}",
    "{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is boolean }}{{ x is defined }}"
    "{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 4 is divisibleby 2 }}"
    "{{ 3 is odd }}{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 2 is not in [1] }}{{ 'abc' is lower }}"
    "{{ 1 is eq 1 }}{{ 'x' is not none }}{{ none is defined }}",
    "{{ 'y' if 0 else 'n' }}|{{ 'y' if 1 }}|{{ 0 or 'b' }}|{{ 1 and 'c' }}|{{ not none }}|{{ (1, 2) }}|"
    "{{ [1, 2, 3][-1] }}|{{ [1, 2, 3][1:] }}|{{ [1, 2, 3][::-1] }}|{{ {'a': 1}.get('b', 'z') }}|{{ {'a': 1}['a'] }}|"
    "{{ 'x' ~ 1 ~ none }}|{{ [1] + [2] }}|{{ [1, 2, 3][5] }}|{{ {'a': 1}.b }}|{{ none.x }}|{{ -2 ** 2 }}|{{ -(2)|abs }}|{{ (1,) }}|{{ () }}",
    "{{ strftime_now('%Y-%m-%d %A %b %d') }}",
    "{{ '<b>'|safe + '<i>' }}|{{ ('<' ~ 'x')|e }}|{{ '<x>'|safe }}",
    "{{ x.y }}",
    "{{ none + 1 }}",
    "{{ [].append(1) }}",
    "{{ raise_exception('boom') }}",
    "{% for %}",
    "{{ msgs|map(attribute='role')|tojson }}",
    "{{ msgs|selectattr('role')|length }}",
    "{{ 1 / 0 }}",
    "{% if %}",
    "{{ 'a' < 1 }}",
    "{% endfor %}",
    "{{ x( }}",
    "{% if true %}unclosed",
    "{{ 'unclosed }}",
    "{{ x }",
    "{{ undefined_fn() }}",
    "{{ 'a\\012b|\\0|\\101\\1010|\\7|\\x41\\u00e9\\U0001F600|\\q|\\8|\\\\' }}",
    "{{ 'a\\x4' }}",
]
snippets = []
for src in snippet_sources:
    try:
        rendered = env.from_string(src).render(**snippet_vars)
    except Exception as e:  # noqa: BLE001
        rendered = {"error": type(e).__name__}
    snippets.append({"source": src, "rendered": rendered})

# chat_template_kwargs a request may bring: (template file, conversation index, kwargs).
kwargs_cases = []
for name, conv, kwargs in [("Qwen-Qwen3-0.6B.jinja", 3, {"enable_thinking": False}),
                           ("Qwen3.5-4B.jinja", 0, {"enable_thinking": False}),
                           ("ibm-granite-granite-3.3-2B-Instruct.jinja", 0, {"thinking": True}),
                           ("HuggingFaceTB-SmolLM3-3B.jinja", 0, {"enable_thinking": False})]:
    messages, add_generation_prompt, tools = conversations[conv]
    src = open(os.path.join(templates, name), encoding="utf-8").read()
    rendered = env.from_string(src).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                           tools=tools, bos_token="<s>", eos_token="</s>", **kwargs)
    kwargs_cases.append({"file": name, "conversation": conv, "kwargs": kwargs, "rendered": rendered})

path = os.path.join(root, "tests", "golden", "chat_templates", "jinja2_render.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump({"source": "jinja2 " + jinja2.__version__ + " (transformers' environment) rendering llama.cpp 0.3.36's "
                         "models/templates and the templates of llama_cpp_0.3.36.json",
               "bos_token": "<s>", "eos_token": "</s>", "today": today.strftime("%d %b %Y"),
               "conversations": [{"messages": m, "add_generation_prompt": g, "tools": t} for m, g, t in conversations],
               "cases": cases, "snippet_vars": snippet_vars, "snippets": snippets,
               "kwargs_cases": kwargs_cases}, f, ensure_ascii=False, indent=1)
    f.write("\n")
n_err = sum(1 for c in cases for r in c["rendered"] if isinstance(r, dict))
print(f"{len(cases)} templates x {len(conversations)} conversations ({n_err} refused) -> {path}")
