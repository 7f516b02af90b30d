"""jinja2 as transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, loopcontrols and {% generation %}; its tojson, raise_exception and strftime_now), and where
llama.cpp's real chat templates are (scripts/fetch_llama_cpp_vocab.sh installs them): what every
make_*_golden.py script of the chat templates renders with."""
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


def templates_dir():
    """The first command-line argument, else llama.cpp 0.3.36's templates in kvserve's model cache."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    models = os.environ.get("KVSERVE_MODELS", os.path.expanduser("~/.cache/kvserve/models"))
    return os.path.join(models, "llama.cpp-vocab-0.3.36", "templates")


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: marks assistant text, renders it as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment(today):
    """The environment, with strftime_now formatting `today` (a datetime)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[AssistantTracker, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: today.strftime(fmt)
    return env
