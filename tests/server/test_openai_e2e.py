"""End-to-end tests of `kvserve serve` through the official `openai` package and raw HTTP.

The server is started by the C++ test ServerE2E.* (tests/test_server_e2e.cpp), which passes:
  KVSERVE_BASE_URL   http://127.0.0.1:PORT
  KVSERVE_API_KEY    the key the server was started with
  KVSERVE_MODEL_NAME the served model name
  KVSERVE_CONTEXT    the model's context length in tokens (default: max_model_len from /v1/models)
  KVSERVE_VOCAB      the vocabulary size (prompts are sent as token ids where lengths matter)
  KVSERVE_LOAD_REQUESTS / KVSERVE_LOAD_CONCURRENCY  size of the load test (default 500 / 32)
Everything talks to 127.0.0.1 only, and every loop is bounded.
"""
import concurrent.futures
import http.client
import json
import os
import random
import re
import socket
import time
import urllib.parse

import openai
import pytest

BASE_URL = os.environ.get("KVSERVE_BASE_URL", "")
API_KEY = os.environ.get("KVSERVE_API_KEY", "none")
MODEL = os.environ.get("KVSERVE_MODEL_NAME", "")
CONTEXT = int(os.environ.get("KVSERVE_CONTEXT", "0"))
VOCAB = int(os.environ.get("KVSERVE_VOCAB", "512"))
LOAD_REQUESTS = int(os.environ.get("KVSERVE_LOAD_REQUESTS", "500"))
LOAD_CONCURRENCY = int(os.environ.get("KVSERVE_LOAD_CONCURRENCY", "32"))

pytestmark = pytest.mark.skipif(not BASE_URL, reason="KVSERVE_BASE_URL not set (run through ServerE2E)")

# Token ids >= 3 avoid BOS/EOS/UNK of the small llama vocabularies, so id prompts are plain text.
FIRST_PLAIN_ID = 3


@pytest.fixture(scope="module", autouse=True)
def context_length():
    """The served context, from /v1/models (vLLM's max_model_len) unless the environment gives it."""
    global CONTEXT
    if not CONTEXT:
        _, _, body = raw_request("GET", "/v1/models")
        CONTEXT = json.loads(body)["data"][0]["max_model_len"]
    return CONTEXT


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def raw_request(method, path, body=None, headers=None, auth=True, timeout=60):
    """One HTTP request on a fresh loopback connection; returns (status, headers, body bytes)."""
    url = urllib.parse.urlparse(BASE_URL)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    if auth:
        h["Authorization"] = "Bearer " + API_KEY
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    conn.request(method, path, body=body, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def metrics():
    status, _, body = raw_request("GET", "/metrics", auth=False)
    assert status == 200
    values = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def block_map():
    status, _, body = raw_request("GET", "/v1/kv/blocks")
    assert status == 200
    return json.loads(body)


def wait_idle(limit_s=60):
    """Waits until the engine has no running or waiting requests."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        m = metrics()
        if m["kvserve_requests_running"] == 0 and m["kvserve_requests_waiting"] == 0:
            return m
        time.sleep(0.1)
    pytest.fail("the engine did not become idle")


def random_ids(rng, n):
    return [rng.randrange(FIRST_PLAIN_ID, VOCAB) for _ in range(n)]


# --- the OpenAI SDK against the server ---------------------------------------------------------------


def test_models_and_health(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    status, _, body = raw_request("GET", "/health", auth=False)
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_completion_non_streaming(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0)
    assert r.id.startswith("cmpl-")
    assert r.object == "text_completion"
    assert r.model == MODEL
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert isinstance(c.text, str)
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_completion_streaming_matches_non_streaming(client):
    kwargs = dict(model=MODEL, prompt="The cat", max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    whole = client.completions.create(**kwargs)
    stream = client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        assert chunk.object == "text_completion"
        text += chunk.choices[0].text
        finish = chunk.choices[0].finish_reason or finish
    assert text == whole.choices[0].text
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 16


def test_chat_non_streaming_and_streaming(client):
    messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me about Lily."}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0)
    assert whole.object == "chat.completion"
    assert whole.id.startswith("chatcmpl-")
    msg = whole.choices[0].message
    assert msg.role == "assistant"
    assert isinstance(msg.content, str)
    assert whole.usage.completion_tokens > 0

    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


FORECAST = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8, "pattern": "^[A-Z][a-z]*$"},
                   "days": {"type": "integer", "minimum": 1, "maximum": 14}, "metric": {"type": "boolean"}},
    "required": ["city", "days"],
}


def check_forecast(value):
    """`value` is valid for FORECAST (written out: no jsonschema package needed)."""
    assert isinstance(value, dict)
    assert set(value) <= {"city", "days", "metric"} and {"city", "days"} <= set(value)
    assert isinstance(value["city"], str) and len(value["city"]) <= 8 and re.fullmatch("[A-Z][a-z]*", value["city"])
    assert isinstance(value["days"], int) and not isinstance(value["days"], bool) and 1 <= value["days"] <= 14
    assert isinstance(value.get("metric", True), bool)


def test_structured_output(client):
    """response_format json_schema and json_object: a random model's reply is still the schema's JSON."""
    messages = [{"role": "user", "content": "The forecast, as JSON."}]
    for stream in (False, True):
        args = dict(model=MODEL, messages=messages, max_tokens=400, temperature=0,
                    response_format={"type": "json_schema", "json_schema": {"name": "forecast", "schema": FORECAST}})
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **args))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            assert finish == ["stop"]
        else:
            r = client.chat.completions.create(**args)
            assert r.choices[0].finish_reason == "stop"
            text = r.choices[0].message.content
        check_forecast(json.loads(text))
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=60, temperature=0.8, seed=1,
                                       response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    # A schema the grammar cannot enforce is a 400 naming the keyword.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "not": {"const": 3}}}})
    assert "'not'" in str(e.value)


def test_pydantic_models_through_the_sdk(client):
    """The SDK's own structured output: a pydantic model's strict schema (a discriminated union, bounds,
    multiples, a set of literals, a pattern, date and uuid formats) goes out as response_format, and pydantic validates what comes
    back."""
    import datetime
    import uuid
    from typing import Literal, Union

    from pydantic import BaseModel, Field

    class Circle(BaseModel):
        kind: Literal["circle"]
        radius: int = Field(ge=1, le=9)

    class Square(BaseModel):
        kind: Literal["square"]
        side: float = Field(gt=0, le=2.5)

    class Drawing(BaseModel):
        title: str = Field(pattern=r"^[A-Z][a-z]{1,6}$")
        when: datetime.date
        shapes: list[Union[Circle, Square]] = Field(max_length=3)
        id: uuid.UUID
        copies: int = Field(multiple_of=5, ge=0, le=95)
        palette: set[Literal["red", "green", "blue"]]
        scale: float = Field(multiple_of=0.25, ge=0.5, le=4)

    messages = [{"role": "user", "content": "Draw something."}]
    for seed, temperature in ((0, 0.0), (1, 1.0), (2, 1.0)):
        r = client.chat.completions.parse(model=MODEL, messages=messages, max_tokens=440, temperature=temperature,
                                          seed=seed, response_format=Drawing)
        drawing = r.choices[0].message.parsed
        assert isinstance(drawing, Drawing), r.choices[0].message.content
        palette = json.loads(r.choices[0].message.content)["palette"]
        assert len(palette) == len(set(palette)), palette  # pydantic's set would hide a repeat
        assert all(isinstance(s, (Circle, Square)) for s in drawing.shapes)


def test_guided_choice_on_completions(client):
    """vLLM's guided_choice, on the completions endpoint: the text is one of the choices."""
    for seed in range(3):
        r = client.completions.create(model=MODEL, prompt="Yes or no?", max_tokens=10, temperature=1.0, seed=seed,
                                      extra_body={"guided_choice": ["yes", "no", "not sure"]})
        assert r.choices[0].text in ("yes", "no", "not sure")
        assert r.choices[0].finish_reason == "stop"


def test_guided_regex(client):
    """vLLM's guided_regex: the whole text matches; a pattern it cannot compile is a 400 naming the field."""
    for seed in range(3):
        r = client.completions.create(model=MODEL, prompt="A code:", max_tokens=20, temperature=1.0, seed=seed,
                                      extra_body={"guided_regex": "[A-Z]{2}-\\d{3}( ok)?"})
        assert re.fullmatch("[A-Z]{2}-\\d{3}( ok)?", r.choices[0].text), r.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=5, extra_body={"guided_regex": "(?=a)"})
    assert "guided_regex" in str(e.value) and "lookaround" in str(e.value)


NESTED_LISTS_GBNF = r"""
root  ::= list
list  ::= "[" elem ( "," elem ){1,3} "]"
elem  ::= inner | num
inner ::= "[" ( num ( "," num ){0,3} )? "]"
num   ::= "0" | [1-9] [0-9]{0,2}
"""


def nested_lists(text):
    """Whether text is what NESTED_LISTS_GBNF describes, read by Python's own JSON parser."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    def ok(v, depth):
        if isinstance(v, int) and not isinstance(v, bool):
            return 0 <= v <= 999 and depth > 0
        return (isinstance(v, list) and depth < 2 and len(v) <= 4 and (depth > 0 or len(v) >= 2)
                and all(ok(x, depth + 1) for x in v))
    return ok(value, 0) and json.dumps(value, separators=(",", ":")) == text


def test_gbnf_grammar(client):
    """A GBNF grammar, as llama-server's `grammar` and vLLM's guided_grammar take it: the whole reply is one of
    its texts (recursion and counted repetitions included); a grammar it refuses is a 400 naming the field."""
    for seed in range(3):
        r = client.completions.create(model=MODEL, prompt="Numbers:", max_tokens=200, temperature=1.0, seed=seed,
                                      extra_body={"grammar": NESTED_LISTS_GBNF})
        assert r.choices[0].finish_reason == "stop" and nested_lists(r.choices[0].text), r.choices[0].text
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Numbers?"}],
                                       max_tokens=200, temperature=1.0, seed=7,
                                       extra_body={"guided_grammar": NESTED_LISTS_GBNF})
    assert nested_lists(r.choices[0].message.content), r.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=5,
                                  extra_body={"grammar": "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""})
    assert "grammar" in str(e.value) and "left recursion" in str(e.value)


def test_forced_tool_call(client):
    """tool_choice naming a function: the reply is that call (hermes format), as the SDK parses tool calls."""
    tools = [{"type": "function", "function": {"name": "get_forecast", "parameters": FORECAST}},
             {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    args = dict(model=MODEL, messages=messages, max_tokens=400, temperature=0, tools=tools,
                tool_choice={"type": "function", "function": {"name": "get_forecast"}})
    r = client.chat.completions.create(**args)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_forecast" and call.id.startswith("call_")
    check_forecast(json.loads(call.function.arguments))

    chunks = list(client.chat.completions.create(stream=True, **args))
    deltas = [tc for c in chunks if c.choices and c.choices[0].delta.tool_calls for tc in c.choices[0].delta.tool_calls]
    assert [d.index for d in deltas] == [0]
    assert deltas[0].function.name == "get_forecast"
    assert json.loads(deltas[0].function.arguments) == json.loads(call.function.arguments)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]

    # The call and its result go back in the conversation; "required" picks among the tools.
    follow = messages + [choice.message.model_dump(exclude_none=True),
                         {"role": "tool", "tool_call_id": call.id, "content": "{\"temp\": 3}"}]
    r = client.chat.completions.create(model=MODEL, messages=follow, max_tokens=400, temperature=0, tools=tools,
                                       tool_choice="required")
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls[0].function.name in ("get_forecast", "get_time")


def test_list_of_prompts(client):
    # As LangChain's OpenAI LLM sends them: each prompt's greedy text is what it gets alone, choice i * n + j.
    prompts = ["Once upon a time", "The cat", "Lily and Ben"]
    kwargs = dict(model=MODEL, max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    alone = [client.completions.create(prompt=p, **kwargs) for p in prompts]
    r = client.completions.create(prompt=prompts, n=2, **kwargs)
    assert [c.index for c in r.choices] == list(range(6))
    assert [c.text for c in r.choices] == [a.choices[0].text for a in alone for _ in range(2)]
    assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert r.usage.completion_tokens == 60
    texts = {}
    for chunk in client.completions.create(prompt=prompts, stream=True, **kwargs):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {i: a.choices[0].text for i, a in enumerate(alone)}


def test_echo_scores_a_continuation_as_generation_did(client):
    # lm-evaluation-harness's loglikelihood: the prompt and continuation echoed with logprobs, max_tokens 1.
    # The continuation's logprobs, teacher-forced in the prompt, are the ones its greedy generation reported.
    # Tokens travel as ids (vLLM's return_tokens_as_token_ids), so the continuation is the tokens generated.
    prompt = [1] + [FIRST_PLAIN_ID + (37 * i) % (VOCAB - FIRST_PLAIN_ID) for i in range(1, 12)]
    ids = {"return_tokens_as_token_ids": True}
    gen = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, logprobs=2,
                                    extra_body={"ignore_eos": True, **ids})
    cont = [int(t.removeprefix("token_id:")) for t in gen.choices[0].logprobs.tokens]
    assert len(cont) == 8
    scored = client.completions.create(model=MODEL, prompt=prompt + cont, max_tokens=1, temperature=0, logprobs=2,
                                       echo=True, extra_body=ids)
    c = scored.choices[0]
    lp = c.logprobs
    n = len(prompt)
    assert scored.usage.prompt_tokens == n + 8
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n + 9
    assert lp.tokens[:n + 8] == ["token_id:%d" % t for t in prompt + cont]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for got, want in zip(lp.token_logprobs[n:n + 8], gen.choices[0].logprobs.token_logprobs):
        assert abs(got - want) < 1e-3, (got, want)
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(top) == 2 for top in lp.top_logprobs[1:])
    # The streamed form: the first chunk leads with the prompt and its logprobs.
    text, lps = "", []
    for chunk in client.completions.create(model=MODEL, prompt=prompt + cont, max_tokens=1, temperature=0,
                                           logprobs=2, echo=True, stream=True):
        for ch in chunk.choices:
            text += ch.text
            if ch.logprobs is not None:
                lps += ch.logprobs.token_logprobs
    assert text == c.text
    assert lps[0] is None and lps[1:] == pytest.approx(lp.token_logprobs[1:], abs=1e-5)
    # max_tokens 0: the prompt alone, scored the same.
    only = client.completions.create(model=MODEL, prompt=prompt + cont, max_tokens=0, logprobs=2, echo=True,
                                     extra_body=ids)
    assert only.usage.completion_tokens == 0
    assert only.choices[0].logprobs.tokens == lp.tokens[:n + 8]
    assert only.choices[0].logprobs.token_logprobs[1:] == pytest.approx(lp.token_logprobs[1:n + 8], abs=1e-5)
    # vLLM's prompt_logprobs: the same figures, each prompt token keyed by its id, with its rank.
    full = prompt + cont
    pl = client.completions.create(model=MODEL, prompt=full, max_tokens=1, temperature=0,
                                   extra_body={"prompt_logprobs": 2}).model_dump()["choices"][0]["prompt_logprobs"]
    assert len(pl) == n + 8 and pl[0] is None
    for p in range(1, n + 8):
        entry = pl[p][str(full[p])]
        assert entry["logprob"] == pytest.approx(lp.token_logprobs[p], abs=1e-5)
        assert entry["rank"] >= 1 and (entry["rank"] == 1) == (entry["logprob"] >= max(
            e["logprob"] for e in pl[p].values()))
        assert 1 <= len(pl[p]) <= 3
    # Without logprobs: the prompt's text, then the reply.
    words = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0)
    echoed = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0,
                                       echo=True)
    assert echoed.choices[0].text == "Once upon a time" + words.choices[0].text


def test_n_two(client):
    r = client.completions.create(model=MODEL, prompt="Lily and Ben", max_tokens=8, temperature=0.9, seed=3, n=2,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 16
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, n=2,
                                          temperature=0)
    assert sorted(c.index for c in chat.choices) == [0, 1]
    # Greedy choices are the same sequence.
    assert chat.choices[0].message.content == chat.choices[1].message.content
    streamed = client.completions.create(model=MODEL, prompt="Lily and Ben", max_tokens=6, temperature=0, n=2, stream=True,
                                         extra_body={"ignore_eos": True})
    texts = {0: "", 1: ""}
    for chunk in streamed:
        for c in chunk.choices:
            texts[c.index] += c.text
    assert texts[0] == texts[1] and texts[0] != ""


def test_stop_strings(client):
    base = dict(model=MODEL, prompt="One day, a little girl named", max_tokens=40, temperature=0,
                extra_body={"ignore_eos": True})
    full = client.completions.create(**base).choices[0].text
    assert len(full) > 12, full
    stop = full[8:11]
    expected = full[: full.find(stop)]
    r = client.completions.create(stop=[stop, "\u2603never\u2603"], **base)
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].stop_reason == stop  # vLLM's field: the stop string that matched
    # Streaming holds back text that may start a stop string, and never shows the stop string.
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=stop, stream=True, **base) if c.choices)
    assert streamed == expected


def test_stop_token_ids_and_min_tokens(client):
    # Token 300 forced by logit_bias: stop_token_ids ends the reply on it at once (its text left out, vLLM's
    # stop_reason the id); min_tokens holds it back for that many tokens; the end of generation is null.
    base = dict(model=MODEL, prompt="The cat", max_tokens=12, temperature=0, logit_bias={"300": 100})
    r = client.completions.create(extra_body={"stop_token_ids": [300]}, **base)
    assert (r.choices[0].finish_reason, r.choices[0].stop_reason, r.usage.completion_tokens) == ("stop", 300, 1)
    assert r.choices[0].text == ""
    r = client.completions.create(extra_body={"stop_token_ids": [300], "min_tokens": 3}, **base)
    assert (r.choices[0].finish_reason, r.choices[0].stop_reason, r.usage.completion_tokens) == ("stop", 300, 4)
    chunks = list(client.completions.create(extra_body={"stop_token_ids": [300], "min_tokens": 3}, stream=True, **base))
    ends = [(c.choices[0].finish_reason, c.choices[0].stop_reason) for c in chunks if c.choices and c.choices[0].finish_reason]
    assert ends == [("stop", 300)]
    r = client.completions.create(model=MODEL, prompt="The cat", max_tokens=3, temperature=0)
    assert r.choices[0].stop_reason is None
    with pytest.raises(openai.BadRequestError):
        client.completions.create(extra_body={"min_tokens": 13}, **base)


def test_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="The cat", max_tokens=6, temperature=0, logprobs=3,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    # The text is the tokens' pieces, each at its offset; the first keeps its space after the prompt.
    assert "".join(lp.tokens) == r.choices[0].text
    for offset, token in zip(lp.text_offset, lp.tokens):
        assert r.choices[0].text[offset:].startswith(token), (offset, token, r.choices[0].text)
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 1e-6
        assert 1 <= len(top) <= 3
        assert chosen >= max(top.values()) - 1e-4  # greedy picks the most likely token

    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=5,
                                          temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    for t in content:
        assert t.logprob <= 1e-6
        assert len(t.top_logprobs) == 2
        assert isinstance(t.bytes, list) and t.bytes


def test_logit_bias(client):
    rng = random.Random(77)
    prompt = random_ids(rng, 8)
    base = dict(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, logprobs=1, extra_body={"ignore_eos": True})
    plain = client.completions.create(**base).choices[0]
    # +100 on one token makes greedy pick it at every step. From the vocabulary's last quarter: merged
    # tokens, not byte-fallback ones whose text alone may be an incomplete UTF-8 sequence.
    forced_id = rng.randrange(max(FIRST_PLAIN_ID, VOCAB * 3 // 4), VOCAB)
    forced = client.completions.create(logit_bias={str(forced_id): 100}, **base).choices[0]
    assert len(forced.logprobs.tokens) == 6
    assert len(set(forced.logprobs.tokens)) == 1, forced.logprobs.tokens
    if len(set(plain.logprobs.tokens)) > 1:
        assert forced.text != plain.text
    # -100 on that token, with sampling: never drawn.
    banned = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=1, seed=5, logprobs=1,
                                       logit_bias={str(forced_id): -100}, extra_body={"ignore_eos": True}).choices[0]
    forced_text = forced.logprobs.tokens[0]
    if forced_text.strip(" \ufffd"):
        assert forced_text not in banned.logprobs.tokens
    for bias in ({str(VOCAB): 1}, {"x": 1}, {"5": 101}):
        status, _, body = raw_request("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "logit_bias": bias})
        assert status == 400, (bias, body)
        assert json.loads(body)["error"]["param"] == "logit_bias"


def test_tokenize_counts_as_the_completion_does(client):
    prompt = "Once upon a time, a cat"
    status, _, body = raw_request("POST", "/tokenize", {"model": MODEL, "prompt": prompt})
    assert status == 200, body
    t = json.loads(body)
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == CONTEXT
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == t["count"]
    status, _, body = raw_request("POST", "/detokenize", {"tokens": t["tokens"]})
    assert status == 200, body
    assert json.loads(body)["prompt"] == prompt
    status, _, body = raw_request("POST", "/detokenize", {"tokens": [VOCAB]})
    assert status == 400 and json.loads(body)["error"]["param"] == "tokens"


# --- prefix reuse, visible from outside ---------------------------------------------------------------


def test_prefix_reuse_and_salt_isolation(client):
    rng = random.Random(1234)
    prefix = random_ids(rng, 200)
    first, second = prefix + random_ids(rng, 10), prefix + random_ids(rng, 10)
    run = f"{time.time_ns()}"

    def complete(prompt, salt):
        return client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0,
                                         extra_body={"ignore_eos": True, "cache_salt": salt})

    warm = complete(first, "a-" + run)
    assert warm.usage.prompt_tokens == 210
    # Under another salt nothing is shared: the reference output, computed without the cache.
    cold = complete(second, "b-" + run)
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    hit = complete(second, "a-" + run)
    assert hit.usage.prompt_tokens_details.cached_tokens >= 192
    assert hit.choices[0].text == cold.choices[0].text
    assert hit.usage.completion_tokens == cold.usage.completion_tokens == 12


# --- bad requests -------------------------------------------------------------------------------------


def expect_error(status, body, code):
    assert status == code, body
    err = json.loads(body)["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert "type" in err and "param" in err and "code" in err


def test_bad_requests_get_4xx_and_serving_continues(client):
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body="{\"prompt\": ")), 400)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x", "max_tokens": "5"})), 400)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x", "max_tokens": -1})), 400)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x", "temperature": 5})), 400)
    expect_error(*_status_body(raw_request("POST", "/v1/chat/completions", body={"messages": "hi"})), 400)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x", "n": 0})), 400)
    huge = [FIRST_PLAIN_ID] * (CONTEXT + 10)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": huge, "max_tokens": 1})), 400)
    fits_alone = [FIRST_PLAIN_ID] * (CONTEXT - 4)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": fits_alone, "max_tokens": 100})), 400)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x", "model": "no-such-model"})), 404)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x"}, auth=False)), 401)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body={"prompt": "x"},
                                           headers={"Authorization": "Bearer wrong"}, auth=False)), 401)
    expect_error(*_status_body(raw_request("GET", "/v1/no-such-route")), 404)
    expect_error(*_status_body(raw_request("POST", "/v1/completions", body=" " * (20 << 20))), 413)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=-3)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=3)
    # Still serving.
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0)
    assert r.usage.completion_tokens > 0


def _status_body(result):
    status, _, body = result
    return status, body


# --- observability ------------------------------------------------------------------------------------


def test_metrics_and_block_map_and_page():
    m = metrics()
    for name in ["kvserve_kv_cache_usage_ratio", 'kvserve_kv_blocks{state="free"}', 'kvserve_kv_blocks{state="used"}',
                 'kvserve_kv_blocks{state="cached"}', "kvserve_prefix_cache_queries_total",
                 "kvserve_prefix_cache_hits_total", "kvserve_preemptions_total", "kvserve_requests_running",
                 "kvserve_requests_waiting", "kvserve_prompt_tokens_total", "kvserve_generation_tokens_total",
                 "kvserve_time_to_first_token_seconds_count", "kvserve_time_per_output_token_seconds_count",
                 "kvserve_e2e_request_latency_seconds_count", 'kvserve_e2e_request_latency_seconds_bucket{le="+Inf"}']:
        assert name in m, name
    assert m["kvserve_e2e_request_latency_seconds_count"] > 0
    assert m["kvserve_prefix_cache_hits_total"] > 0  # the prefix test hit
    blocks = block_map()
    assert len(blocks["owner"]) == len(blocks["shared"]) == blocks["num_blocks"]
    status, headers, page = raw_request("GET", "/", auth=False)
    assert status == 200 and b"kv-canvas" in page and b"/v1/chat/completions" in page


# --- load: concurrency, preemption, disconnects -------------------------------------------------------


def stream_then_hang_up(body, chunks_before_close):
    """Starts a streaming completion, reads a few SSE events, then drops the connection."""
    url = urllib.parse.urlparse(BASE_URL)
    payload = json.dumps(dict(body, stream=True)).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload
    with socket.create_connection((url.hostname, url.port), timeout=60) as s:
        s.sendall(request)
        got = b""
        while got.count(b"data: {") < chunks_before_close:
            data = s.recv(4096)
            if not data:
                break
            got += data
    return got


def test_load_with_preemption_and_disconnects(client):
    rng = random.Random(99)
    # A pool of request shapes, each run alone first: its greedy output is the reference.
    shapes = []
    for i in range(48):
        prompt = random_ids(rng, rng.randint(4, min(300, CONTEXT // 2)))
        shapes.append({"prompt": prompt, "max_tokens": rng.randint(1, 48)})
    reference = []
    for shape in shapes:
        r = client.completions.create(model=MODEL, prompt=shape["prompt"], max_tokens=shape["max_tokens"], temperature=0,
                                      extra_body={"ignore_eos": True, "cache_salt": "solo"})
        reference.append((r.choices[0].text, r.usage.completion_tokens))
    preemptions_before = metrics()["kvserve_preemptions_total"]

    plan = []  # (shape index, mode): mode is "plain", "stream" or "hang-up"
    for _ in range(LOAD_REQUESTS):
        mode = rng.choices(["plain", "stream", "hang-up"], weights=[45, 45, 10])[0]
        plan.append((rng.randrange(len(shapes)), mode))

    def run(item):
        idx, mode = item
        shape = shapes[idx]
        body = {"model": MODEL, "prompt": shape["prompt"], "max_tokens": shape["max_tokens"], "temperature": 0,
                "ignore_eos": True}
        if mode == "hang-up":
            stream_then_hang_up(dict(body, max_tokens=48), chunks_before_close=2)
            return idx, mode, None, None
        if mode == "plain":
            r = client.completions.create(model=MODEL, prompt=shape["prompt"], max_tokens=shape["max_tokens"],
                                          temperature=0, extra_body={"ignore_eos": True})
            return idx, mode, r.choices[0].text, r.usage.completion_tokens
        text, usage = "", None
        for chunk in client.completions.create(model=MODEL, prompt=shape["prompt"], max_tokens=shape["max_tokens"],
                                               temperature=0, stream=True, stream_options={"include_usage": True},
                                               extra_body={"ignore_eos": True}):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.text
        return idx, mode, text, usage.completion_tokens

    started = time.monotonic()
    mismatches = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=LOAD_CONCURRENCY) as pool:
        for idx, mode, text, n_tokens in pool.map(run, plan, timeout=600):
            if mode != "hang-up" and (text, n_tokens) != reference[idx]:
                mismatches.append((idx, mode, text, n_tokens, reference[idx]))
    elapsed = time.monotonic() - started
    print(f"load: {LOAD_REQUESTS} requests at concurrency {LOAD_CONCURRENCY} in {elapsed:.1f}s")
    assert not mismatches, f"{len(mismatches)} outputs differ from their solo runs, first: {mismatches[0]}"

    m = wait_idle()
    print(f"preemptions during load: {m['kvserve_preemptions_total'] - preemptions_before:.0f}")
    assert m["kvserve_preemptions_total"] > preemptions_before, "the KV budget did not force any preemption"
    assert m["kvserve_prefix_cache_evictions_total"] > 0, "a full pool under load must evict cached prefixes"
    blocks = block_map()
    assert blocks["used_blocks"] == 0
    assert all(owner in (-1, -2) for owner in blocks["owner"]), "blocks still owned after every request ended"
    assert m['kvserve_kv_blocks{state="used"}'] == 0


def test_256_concurrent_streaming_connections():
    """256 clients hold a streaming connection open at once (more than --max-num-seqs: the rest wait in
    the queue with their connection open); every one gets its tokens and [DONE]."""
    n_clients = 256
    barrier = __import__("threading").Barrier(n_clients)

    def one(i):
        url = urllib.parse.urlparse(BASE_URL)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
        body = json.dumps({"model": MODEL, "prompt": [FIRST_PLAIN_ID + i % 50, FIRST_PLAIN_ID + 7], "max_tokens": 8,
                           "temperature": 0, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}})
        barrier.wait(timeout=120)  # every connection is opened before any is read
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
        resp = conn.getresponse()
        data = resp.read().decode()
        conn.close()
        return resp.status, data

    with concurrent.futures.ThreadPoolExecutor(max_workers=n_clients) as pool:
        results = list(pool.map(one, range(n_clients), timeout=600))
    for status, data in results:
        assert status == 200, data
        assert data.rstrip().endswith("data: [DONE]"), data[-200:]
        assert '"completion_tokens":8' in data, data[-300:]
    wait_idle()
    assert block_map()["used_blocks"] == 0
