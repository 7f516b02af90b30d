#!/usr/bin/env python3
"""llama.cpp's chat templates as a JSON fixture for tests/test_chat_template.cpp.

Two references, both from llama.cpp 0.3.36 (as llama-cpp-python 0.3.36 vendors it):
- "cases": llama.cpp's tests/test-chat-template.cpp renders one conversation with ~35 real Jinja chat
  templates through its built-in (non-Jinja) llama_chat_apply_template and compares each with an
  expected string. This script parses that file (from the sdist) for name, template and expected output.
- "builtin": every built-in template, by name, rendered by llama.cpp's own llama_chat_apply_template
  (called through ctypes in libllama.so) on a few conversations, with and without the generation prompt.
- "jinja_files": each real template of llama.cpp's models/templates/*.jinja, as llama_chat_apply_template
  detects and renders it (null: llama.cpp has no built-in family for it). The templates themselves are
  not copied here: scripts/fetch_llama_cpp_vocab.sh installs them beside the vocabularies.

Writes tests/golden/chat_templates/llama_cpp_0.3.36.json.

Usage: scripts/make_chat_template_fixture.py --libllama path/to/libllama.so --llama-cpp DIR
libllama.so: from `pip install -r scripts/requirements-dev.txt` (llama_cpp/lib/ in site-packages) or a
llama.cpp 0.3.36 build. DIR: vendor/llama.cpp of the extracted llama-cpp-python 0.3.36 sdist
(`pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`).
"""
import argparse
import ctypes
import json
import os
import re
import sys

VERSION = "0.3.36"
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "chat_templates",
                   f"llama_cpp_{VERSION}.json")

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "0": "\0"}


CONVERSATIONS = [
    # llama.cpp's own test conversation.
    ([["system", "You are a helpful assistant"], ["user", "Hello"], ["assistant", "Hi there"], ["user", "Who are you"],
      ["assistant", "   I am an assistant   "], ["user", "Another question"]], True),
    ([["system", "You are a helpful assistant"], ["user", "Hello"], ["assistant", "Hi there"], ["user", "Who are you"],
      ["assistant", "   I am an assistant   "], ["user", "Another question"]], False),
    ([["user", "Hi"]], True),
    ([["user", "Hello"], ["assistant", "Hi there"], ["user", "Bye"]], True),
    ([["system", " Be brief. "], ["user", " Hi "]], True),
    ([["system", "Be brief."], ["user", "Hi"], ["assistant", "Hello!"]], False),
]


class Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


def load(libllama):
    lib = ctypes.CDLL(libllama)
    lib.llama_chat_builtin_templates.restype = ctypes.c_int32
    lib.llama_chat_builtin_templates.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]
    lib.llama_chat_apply_template.restype = ctypes.c_int32
    lib.llama_chat_apply_template.argtypes = [ctypes.c_char_p, ctypes.POINTER(Message), ctypes.c_size_t,
                                              ctypes.c_bool, ctypes.c_char_p, ctypes.c_int32]
    return lib


def render(lib, template, conversation, add_generation_prompt):
    """llama.cpp's built-in rendering of `template` (a name or Jinja source); None when it has none."""
    msgs = (Message * len(conversation))(*[Message(r.encode(), c.encode()) for r, c in conversation])
    buf = ctypes.create_string_buffer(1 << 16)
    size = lib.llama_chat_apply_template(template.encode(), msgs, len(conversation), add_generation_prompt, buf,
                                         1 << 16)
    if size > (1 << 16):
        sys.exit(f"llama_chat_apply_template: {size} bytes do not fit")
    return None if size < 0 else buf.raw[:size].decode("utf-8")


def builtin_outputs(lib):
    n = lib.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * n)()
    lib.llama_chat_builtin_templates(names, n)
    out = []
    for name in (names[i].decode() for i in range(n)):
        for conversation, add_generation_prompt in CONVERSATIONS:
            expected = render(lib, name, conversation, add_generation_prompt)
            if expected is None:
                sys.exit(f"llama_chat_apply_template({name}) failed")
            out.append({"name": name, "conversation": conversation, "add_generation_prompt": add_generation_prompt,
                        "expected": expected})
    return out


def jinja_file_outputs(lib, templates_dir):
    out = []
    for name in sorted(os.listdir(templates_dir)):
        if not name.endswith(".jinja"):
            continue
        template = open(os.path.join(templates_dir, name), encoding="utf-8").read()
        conversation, add_generation_prompt = CONVERSATIONS[0]
        out.append({"file": name, "expected": render(lib, template, conversation, add_generation_prompt)})
    return out


def tokens(src):
    """Yields ('comment', text), ('string', value), ('{' | '}' | ',', None) and ('other', text)."""
    i = 0
    while i < len(src):
        c = src[i]
        if src.startswith("/*", i):
            end = src.index("*/", i)
            yield "comment", src[i + 2:end].strip()
            i = end + 2
        elif src.startswith("//", i):
            i = src.index("\n", i)
        elif c == '"' or src.startswith('u8"', i):
            i = src.index('"', i) + 1
            value = []
            while src[i] != '"':
                if src[i] == "\\":
                    value.append(ESCAPES[src[i + 1]])
                    i += 2
                else:
                    value.append(src[i])
                    i += 1
            yield "string", "".join(value)
            i += 1
        elif c in "{},":
            yield c, None
            i += 1
        elif c.isspace():
            i += 1
        else:
            m = re.match(r"[A-Za-z0-9_]+", src[i:])
            text = m.group(0) if m else c
            yield "other", text
            i += len(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--libllama", required=True)
    parser.add_argument("--llama-cpp", required=True)
    args = parser.parse_args()
    src = open(os.path.join(args.llama_cpp, "tests", "test-chat-template.cpp"), encoding="utf-8").read()
    lib = load(args.libllama)
    start = src.index("std::vector<TestCase> test_cases {")
    end = src.index("};", start)
    body = src[start + len("std::vector<TestCase> test_cases {"):end]
    cases = []
    depth = 0
    current = None
    field = None
    for kind, value in tokens(body):
        if kind == "{":
            depth += 1
            if depth == 1:
                current = {}
            continue
        if kind == "}":
            depth -= 1
            if depth == 0:
                cases.append(current)
            continue
        if depth != 1:
            if depth > 1 and field == "extra_conversation":
                current["extra_conversation"] = True
            continue
        if kind == "comment" and value.startswith("."):
            field = value[1:].rstrip("=").strip()
        elif kind == "string":
            # Adjacent literals concatenate, as in C++.
            current[field] = current.get(field, "") + value
    out = [{"name": c["name"], "template": c["template_str"], "expected": c["expected_output"]}
           for c in cases if not c.get("extra_conversation")]
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"source": f"llama.cpp as vendored by llama-cpp-python {VERSION}, tests/test-chat-template.cpp "
                             "(MIT license); the conversation and add_generation_prompt=true are that test's",
                   "conversation": [["system", "You are a helpful assistant"], ["user", "Hello"],
                                    ["assistant", "Hi there"], ["user", "Who are you"],
                                    ["assistant", "   I am an assistant   "], ["user", "Another question"]],
                   "cases": out, "builtin": builtin_outputs(lib),
                   "jinja_files": jinja_file_outputs(lib, os.path.join(args.llama_cpp, "models", "templates"))}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases -> {OUT} ({len(cases) - len(out)} with extra messages left out)")


if __name__ == "__main__":
    main()
