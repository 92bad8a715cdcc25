"""tools.py and the tool-call replies: the guide each tool_choice / response_format sends the engine,
tools and earlier calls in the chat template, the model's output as OpenAI's tool_calls (whole and
streamed, which agree), with the real openai SDK against a scripted ensemble."""

from __future__ import annotations

import json

import openai
import pytest

from llmserve.deploy.tritonserver import free_ports
from llmserve.openai_api.protocol import ChatCompletionRequest, parse
from llmserve.openai_api.tools import HERMES, AutoParser, reply_for, required_calls, template_turns
from llmserve.spec import ROOT, load_spec

from ...chat_history import tool_round
from .fake import FakeEnsemble, Frontend

TOKENIZER = str(load_spec(ROOT / "specs" / "default.yaml").checkpoint_path())
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}


def request(**kw) -> ChatCompletionRequest:
    return parse(ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


def test_guides():
    assert reply_for(request()).mode == "text" and reply_for(request()).guide is None
    r = reply_for(request(response_format={"type": "json_object"}))
    assert (r.mode, r.guide.type, json.loads(r.guide.text)) == ("json", "json_schema", {"type": "object"})
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = reply_for(request(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
    assert json.loads(r.guide.text) == schema and r.guide.param == "response_format.json_schema.schema"
    r = reply_for(request(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    assert r.mode == "named" and json.loads(r.guide.text) == WEATHER["function"]["parameters"]
    assert r.guide.param == "tools[0].function.parameters"
    r = reply_for(request(tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False))
    g = json.loads(r.guide.text)
    assert g["type"] == "array" and g["minItems"] == 1 and g["maxItems"] == 1
    assert [i["properties"]["name"]["const"] for i in g["items"]["anyOf"]] == ["get_weather", "get_time"]
    r = reply_for(request(tools=[WEATHER, TIME]))
    assert r.mode == "auto" and r.guide.type == "structural_tag"
    xgr = pytest.importorskip("xgrammar")
    xgr.Grammar.from_structural_tag(r.guide.text)  # what the engine compiles
    fmt = json.loads(r.guide.text)["format"]
    assert fmt["triggers"] == ["<tool_call>"] and [t["content"]["json_schema"] for t in fmt["tags"]] == [
        WEATHER["function"]["parameters"],
        {"type": "object", "properties": {}},
    ]
    assert reply_for(request(tools=[WEATHER], tool_choice="none")).mode == "text"


def test_auto_parser_holds_back_a_possible_call_and_keeps_bad_ones_as_text():
    p = AutoParser(HERMES, {"get_weather"})
    text = 'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call> done <tool'
    out, calls = "", []
    for ch in text:  # one character at a time: the worst split
        o, c = p.feed(ch)
        out, calls = out + o, calls + c
    out += p.finish()
    assert out == "Sure.  done <tool"
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (0, "get_weather", {"city": "Paris"})
    ]
    p = AutoParser(HERMES, {"get_weather"})
    bad = '<tool_call>{"name": "nope"}</tool_call>'
    assert p.feed(bad) == (bad, [])


def test_required_calls():
    calls = required_calls(
        '[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "a"}}]'
    )
    assert [(c["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "get_time", "{}"),
        (1, "get_weather", '{"city":"a"}'),
    ]
    assert calls[0]["id"].startswith("call_") and calls[0]["id"] != calls[1]["id"]
    assert required_calls('[{"name": "get_ti') is None


def test_a_template_without_tools_gets_them_in_hermes_format():
    req = parse(
        ChatCompletionRequest,
        {
            "model": "m",
            "tools": [WEATHER],
            "messages": [
                {"role": "user", "content": "weather in Paris?"},
                *tool_round("call_1", "get_weather", '{"city": "Paris"}', "sunny"),
            ],
        },
    )
    turns, tools = template_turns(req, reply_for(req), "{{ messages }}")
    assert tools is None and turns[0]["role"] == "system" and "<tools>" in turns[0]["content"]
    assert '"name": "get_weather"' in turns[0]["content"]
    assert turns[2]["content"] == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert turns[3] == {"role": "tool", "content": "<tool_response>\nsunny\n</tool_response>"}
    native, tools = template_turns(req, reply_for(req), "{% for t in tools %}{% endfor %}")
    assert tools == [WEATHER] and native[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert native[2]["tool_call_id"] == "call_1"


@pytest.fixture(scope="module")
def fe():
    with Frontend(TOKENIZER, free_ports(1)[0], FakeEnsemble()) as f:
        yield f


def both(fe, pieces, **kw):
    """(whole response, merged stream) for a scripted answer."""
    fe.fake.pieces, fe.fake.delay_s, fe.fake.error = pieces, 0.0, None
    c = openai.OpenAI(base_url=fe.url + "/v1", api_key="unused", max_retries=0)
    args = dict(model="test-model", messages=[{"role": "user", "content": "weather?"}], max_tokens=60, **kw)
    whole = c.chat.completions.create(**args)
    calls: dict[int, dict] = {}
    content, reason = None, None
    for ch in c.chat.completions.create(**args, stream=True):
        for x in ch.choices:
            if x.delta.content is not None:
                content = (content or "") + x.delta.content
            for t in x.delta.tool_calls or []:
                have = calls.setdefault(t.index, {"id": t.id, "name": t.function.name, "arguments": ""})
                have["arguments"] += t.function.arguments or ""
            reason = x.finish_reason or reason
    return whole.choices[0], (content, [calls[i] for i in sorted(calls)], reason)


def calls_of(choice):
    return [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in choice.message.tool_calls or []
    ]


def test_named_tool_call_streams_its_arguments(fe):
    choice, (content, calls, reason) = both(
        fe,
        [('{"city"', 2), (': "Paris"}', 3)],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [c] = calls_of(choice)
    assert c["name"] == "get_weather" and json.loads(c["arguments"]) == {"city": "Paris"}
    assert reason == "tool_calls" and not content
    assert [(x["name"], x["arguments"]) for x in calls] == [(c["name"], c["arguments"])]
    assert fe.fake.requests[-1]["guided_decoding_guide_type"] == "json_schema"


def test_required_and_auto_tool_calls(fe):
    answer = '[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_time", "arguments": {}}]'
    choice, (content, calls, reason) = both(fe, [(answer, 9)], tools=[WEATHER, TIME], tool_choice="required")
    assert [(c["name"], c["arguments"]) for c in calls_of(choice)] == [
        ("get_weather", '{"city":"Rome"}'),
        ("get_time", "{}"),
    ]
    assert [(c["name"], c["arguments"]) for c in calls] == [(c["name"], c["arguments"]) for c in calls_of(choice)]
    assert choice.finish_reason == reason == "tool_calls"
    said = 'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    choice, (content, calls, reason) = both(fe, [(said[:20], 4), (said[20:], 20)], tools=[WEATHER])
    assert choice.message.content == content == "Let me check. "
    assert [(c["name"], c["arguments"]) for c in calls_of(choice)] == [("get_weather", '{"city":"Oslo"}')]
    assert choice.finish_reason == reason == "tool_calls"
    assert fe.fake.requests[-1]["guided_decoding_guide_type"] == "structural_tag"
    # No call: plain text, finish_reason stop.
    choice, (content, calls, reason) = both(fe, [("It is sunny.", 4)], tools=[WEATHER])
    assert choice.message.content == content == "It is sunny." and choice.finish_reason == reason == "stop"
