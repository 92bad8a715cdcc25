"""Tool calling and structured output: what the engine is asked to enforce, how tools and earlier
calls reach the chat template, and how the model's output becomes OpenAI's `tool_calls`.

What a request asks for (`Reply.mode`):

- `text`: no tools (or `tool_choice: "none"`) and no response_format: the model's text.
- `json`: response_format `json_object` (guide type `json_schema` with `{"type": "object"}`: OpenAI's
  JSON mode answers an object, where upstream's `json` type allows any JSON value) or `json_schema`
  (the schema as given): the content is JSON the engine guarantees.
- `named`: `tool_choice` names a function: the output is that function's arguments, guided by its
  `parameters` schema (an object of anything when it has none); the reply is one tool call.
- `required`: the output is a JSON array of `{"name", "arguments"}` (one item when
  parallel_tool_calls is false), guided by a schema whose items are one of the tools each; the reply
  is those calls.
- `auto`: the model decides, in its own tool-call format (FORMATS): its text is scanned for calls;
  text outside them is the content. Guided by a structural tag (guide type `structural_tag`): text is
  free until the model writes the format's start marker, then it must write a call to one of the
  tools whose arguments follow that tool's schema, and the end marker.

The guided modes need the engine's `guided_decoding_guide_type` / `guided_decoding_guide` inputs
(docs/upstream-compatibility.md); a frontend in front of an ensemble without them refuses these
fields by name.

Tool-call formats (how a model writes a call and how its template shows tools): `hermes`, used by
Qwen 2.5 and Hermes 2/3, writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
(newlines around the JSON allowed). A template that does not mention `tools` (SmolLM2-135M's, which
has no tool support) gets the tools in a system message written in that format, earlier calls as
such blocks in the assistant's content and tool results as `<tool_response>` blocks; a template that
does gets them as transformers passes them (`tools=`, messages with `tool_calls` and role `tool`).
To add a format: a `ToolFormat` (its start and end markers, how one call's JSON names the function
and its arguments) in FORMATS, and the rule in `format_for` that picks it for a checkpoint."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from .errors import bad_request
from .protocol import ChatCompletionRequest, NamedToolChoice, ResponseFormatJSONSchema


@dataclass(frozen=True)
class ToolFormat:
    name: str
    start: str
    end: str

    def render_call(self, name: str, arguments: Any) -> str:
        return f"{self.start}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{self.end}"

    def structural_tag(self, tools) -> dict:
        """xgrammar's structural tag for `auto`: free text, but once the model writes the start marker,
        a call to one of the tools with arguments that follow its schema, then the end marker."""
        tags = [
            {
                "begin": f'{self.start}\n{{"name": {json.dumps(t.function.name)}, "arguments": ',
                "content": {"type": "json_schema", "json_schema": _params(t.function)},
                "end": f"}}\n{self.end}",
            }
            for t in tools
        ]
        return {
            "type": "structural_tag",
            "format": {"type": "triggered_tags", "triggers": [self.start], "tags": tags, "at_least_one": False},
        }

    def system_prompt(self, tools: list[dict]) -> str:
        listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return (
            "You may call one or more functions to assist with the user query. The functions are listed "
            f"within <tools></tools>:\n<tools>\n{listed}\n</tools>\n\nFor each function call, return a JSON "
            f"object with the function name and arguments within {self.start}{self.end} tags:\n"
            f'{self.start}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{self.end}'
        )


HERMES = ToolFormat("hermes", "<tool_call>", "</tool_call>")
FORMATS = {HERMES.name: HERMES}


def format_for(chat_template: str | None) -> ToolFormat:
    """The tool-call format of a checkpoint. Every supported model writes hermes' so far."""
    return HERMES


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


# --- what the engine enforces ----------------------------------------------------------------------
@dataclass(frozen=True)
class Guide:
    type: str  # guided_decoding_guide_type: json, json_schema
    text: str  # guided_decoding_guide
    param: str  # the OpenAI field it comes from (named in errors)


@dataclass
class Reply:
    mode: str  # text, json, named, required, auto
    guide: Guide | None = None
    function: str | None = None  # named
    tools: list[dict] = field(default_factory=list)  # as the template sees them (OpenAI's objects)


_ANY_OBJECT = {"type": "object"}


def _params(fn) -> dict:
    return fn.parameters if fn.parameters is not None else {"type": "object", "properties": {}}


def reply_for(req: ChatCompletionRequest) -> Reply:
    tools = req.tools or []
    choice = req.tool_choice if req.tool_choice is not None else ("auto" if tools else "none")
    rendered = [t.model_dump(exclude_none=True, by_alias=True) for t in tools]
    if tools and choice != "none":
        if isinstance(choice, NamedToolChoice):
            fn = next(t.function for t in tools if t.function.name == choice.function.name)
            i = next(i for i, t in enumerate(tools) if t.function.name == fn.name)
            guide = Guide("json_schema", _dumps(_params(fn)), f"tools[{i}].function.parameters")
            return Reply("named", guide, fn.name, rendered)
        if choice == "required":
            items = [
                {
                    "type": "object",
                    "properties": {"name": {"const": t.function.name}, "arguments": _params(t.function)},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
                for t in tools
            ]
            schema: dict = {"type": "array", "items": {"anyOf": items} if len(items) > 1 else items[0], "minItems": 1}
            if req.parallel_tool_calls is False:
                schema["maxItems"] = 1
            return Reply("required", Guide("json_schema", _dumps(schema), "tools"), None, rendered)
        return Reply("auto", Guide("structural_tag", _dumps(HERMES.structural_tag(tools)), "tools"), None, rendered)
    rf = req.response_format
    if rf is None or rf.type == "text":
        return Reply("text")
    if isinstance(rf, ResponseFormatJSONSchema):
        schema = rf.json_schema.schema_
        if schema is None:
            schema = _ANY_OBJECT
        return Reply("json", Guide("json_schema", _dumps(schema), "response_format.json_schema.schema"))
    # json_object: OpenAI's JSON mode answers an object.
    return Reply("json", Guide("json_schema", _dumps(_ANY_OBJECT), "response_format"))


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# --- messages for the chat template ------------------------------------------------------------
def template_turns(req: ChatCompletionRequest, reply: Reply, chat_template: str) -> tuple[list[dict], list | None]:
    """The messages as the template gets them and the `tools=` argument (None: tools are in a message)."""
    native = "tools" in chat_template or "tool_calls" in chat_template
    fmt = format_for(chat_template)
    turns = []
    for m in req.messages:
        role = "system" if m.role == "developer" else m.role
        text = m.text()
        turn: dict[str, Any] = {"role": role, "content": text}
        if m.tool_calls:
            if native:
                turn["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)},
                    }
                    for c in m.tool_calls
                ]
            else:
                calls = "\n".join(
                    fmt.render_call(c.function.name, _arguments(c.function.arguments)) for c in m.tool_calls
                )
                turn["content"] = f"{text}\n{calls}" if text else calls
        if m.role == "tool":
            if native:
                turn["tool_call_id"] = m.tool_call_id
            else:
                turn["content"] = f"<tool_response>\n{text}\n</tool_response>"
        turns.append(turn)
    if not reply.tools or reply.mode == "text":
        return turns, None
    if native:
        return turns, reply.tools
    prompt = fmt.system_prompt([t["function"] for t in reply.tools])
    if turns and turns[0]["role"] == "system":
        turns[0] = {**turns[0], "content": f"{turns[0]['content']}\n\n{prompt}"}
    else:
        turns.insert(0, {"role": "system", "content": prompt})
    return turns, None


def _arguments(text: str):
    # Templates expect the arguments as an object (transformers' convention); OpenAI sends JSON text.
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- the model's output -> tool calls ----------------------------------------------------------
def call(name: str, arguments: str, index: int) -> dict:
    return {"index": index, "id": new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def required_calls(text: str) -> list[dict] | None:
    """The calls of a `required` reply (a JSON array of {name, arguments}); None if it is not one
    (a reply cut by max_tokens)."""
    try:
        items = json.loads(text)
    except ValueError:
        return None
    if not isinstance(items, list) or not all(isinstance(x, dict) and "name" in x for x in items):
        return None
    return [call(x["name"], _dumps(x.get("arguments", {})), i) for i, x in enumerate(items)]


class AutoParser:
    """Splits the model's streamed text into content and tool calls in its format: text before a
    start marker is content (held back while it could be the start of one), a complete call becomes
    a tool call. `feed` and `finish` return (content, calls) to send now, so streamed and whole replies
    come from the same code and agree."""

    def __init__(self, fmt: ToolFormat, names: set[str]):
        self.fmt, self.names = fmt, names
        self.buf = ""
        self.calls = 0

    def feed(self, text: str) -> tuple[str, list[dict]]:
        self.buf += text
        out, calls = "", []
        while True:
            i = self.buf.find(self.fmt.start)
            if i < 0:
                keep = _partial_suffix(self.buf, self.fmt.start)
                out += self.buf[: len(self.buf) - keep]
                self.buf = self.buf[len(self.buf) - keep :]
                return out, calls
            j = self.buf.find(self.fmt.end, i + len(self.fmt.start))
            if j < 0:
                out += self.buf[:i]
                self.buf = self.buf[i:]
                return out, calls
            body = self.buf[i + len(self.fmt.start) : j]
            parsed = self._parse(body)
            if parsed is None:  # not a call after all: it stays text
                out += self.buf[: j + len(self.fmt.end)]
            else:
                out += self.buf[:i]
                calls.append(call(parsed[0], parsed[1], self.calls))
                self.calls += 1
            self.buf = self.buf[j + len(self.fmt.end) :]

    def finish(self) -> str:
        """What is left: text (an unfinished call stays text)."""
        rest, self.buf = self.buf, ""
        return rest

    def _parse(self, body: str) -> tuple[str, str] | None:
        try:
            obj = json.loads(body)
        except ValueError:
            return None
        if not isinstance(obj, dict) or obj.get("name") not in self.names:
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models write the arguments as JSON text
            try:
                args = json.loads(args)
            except ValueError:
                return None
        return obj["name"], _dumps(args)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a beginning of `marker`."""
    for k in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


def check_schema(schema: Any, param: str) -> None:
    if not isinstance(schema, dict):
        raise bad_request(param, f"'{param}' must be a JSON schema object")
