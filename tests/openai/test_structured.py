"""Structured output and tool calls with real clients against a real server (SmolLM2-135M, a model
far too small to write valid JSON on its own; the engine's guided decoding makes every answer
valid): the openai SDK's `chat.completions.parse(response_format=<pydantic model>)` for two dozen
varied schemas, JSON mode, tool calls (named, required, auto) whole and streamed, tool results in
the history, LangChain's `with_structured_output` and `bind_tools`, and bad schemas answered 400
naming the field."""

from __future__ import annotations

import json
from enum import Enum
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from ..chat_history import tool_round
from .conftest import MODEL, one_server_stack

pytestmark = [pytest.mark.e2e, pytest.mark.smollm2]
GREEDY = {"temperature": 0}
MAX_TOKENS = 320


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    yield from one_server_stack(tmp_path_factory.mktemp("structured"))


# --- two dozen schemas -------------------------------------------------------------------------
Short = Field(max_length=24)  # a tiny greedy model may repeat itself inside a string: bound it


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class City(BaseModel):
    name: str = Short
    country: str = Short
    population: int = Field(ge=0, le=50_000_000)


class Person(BaseModel):
    name: str = Short
    age: int = Field(ge=0, le=130)


class Address(BaseModel):
    street: str = Short
    city: str = Short
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Employee(BaseModel):
    person: Person
    address: Address
    salary: float = Field(ge=0, le=1_000_000)


class Flag(BaseModel):
    enabled: bool


class Shirt(BaseModel):
    color: Color
    size: Literal["S", "M", "L", "XL"]


class Scores(BaseModel):
    scores: list[int] = Field(min_length=1, max_length=5)


class Tags(BaseModel):
    tags: list[str] = Field(max_length=4)


class Point(BaseModel):
    x: float = Field(ge=-10, le=10)
    y: float = Field(ge=-10, le=10)


class Polygon(BaseModel):
    points: list[Point] = Field(min_length=3, max_length=4)


class Rating(BaseModel):
    stars: int = Field(ge=1, le=5)
    comment: str = Short


class Recipe(BaseModel):
    title: str = Short
    ingredients: list[str] = Field(min_length=1, max_length=3)
    minutes: int = Field(ge=1, le=600)


class Weather(BaseModel):
    city: str = Short
    celsius: float = Field(ge=-60, le=60)
    condition: Literal["sunny", "cloudy", "rain", "snow"]


class Book(BaseModel):
    title: str = Short
    author: Person
    year: int = Field(ge=1400, le=2030)


class Library(BaseModel):
    books: list[Book] = Field(max_length=2)


class Matrix(BaseModel):
    rows: list[list[int]] = Field(max_length=3)


class Optional_(BaseModel):
    nickname: str | None = Short
    score: int | None = Field(ge=0, le=100)


class Event(BaseModel):
    name: str = Short
    date: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
    attendees: int = Field(ge=0, le=1000)


class Inventory(BaseModel):
    item: str = Short
    quantity: int = Field(ge=0, le=999)
    price: float = Field(ge=0, le=10_000)
    in_stock: bool


class Answer(BaseModel):
    answer: Literal["yes", "no", "maybe"]
    confidence: float = Field(ge=0, le=1)


class Tree(BaseModel):
    label: str = Short
    children: list[Person] = Field(max_length=2)


class Translation(BaseModel):
    source: Literal["en", "fr", "de"]
    target: Literal["en", "fr", "de"]
    text: str = Short


class Order(BaseModel):
    id: int = Field(ge=1, le=99_999)
    customer: Person
    items: list[Inventory] = Field(min_length=1, max_length=2)
    status: Literal["new", "paid", "shipped"]


class Version(BaseModel):
    major: int = Field(ge=0, le=99)
    minor: int = Field(ge=0, le=99)
    patch: int = Field(ge=0, le=99)


class Contact(BaseModel):
    email: str = Field(pattern=r"^[a-z]{1,12}@[a-z]{1,12}\.(com|org)$")
    phone: str = Field(pattern=r"^\+[0-9]{6,12}$")
    preferred: Literal["email", "phone"]


class Coordinates(BaseModel):
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)


SCHEMAS = [
    (City, "Describe Paris."),
    (Person, "Invent a person."),
    (Employee, "Invent an employee with an address."),
    (Flag, "Should the feature be enabled?"),
    (Shirt, "Pick a shirt."),
    (Scores, "Give some test scores."),
    (Tags, "Tag a blog post about cooking."),
    (Polygon, "Give a triangle."),
    (Rating, "Rate a movie you liked."),
    (Recipe, "A recipe for pancakes."),
    (Weather, "The weather in Oslo."),
    (Book, "A famous book."),
    (Library, "A small library."),
    (Matrix, "A 2x2 identity matrix."),
    (Optional_, "A player profile."),
    (Event, "A conference."),
    (Inventory, "An item in a shop."),
    (Answer, "Is the sky blue?"),
    (Tree, "A family."),
    (Translation, "Translate hello to French."),
    (Order, "An online order."),
    (Version, "A software version."),
    (Coordinates, "Where is London?"),
    (Contact, "Contact details of a support desk."),
]


@pytest.mark.parametrize("model,prompt", SCHEMAS, ids=[m.__name__ for m, _ in SCHEMAS])
def test_parse_returns_a_valid_object(stack, model, prompt):
    c = stack.client()
    r = c.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": f"{prompt} Answer in JSON."}],
        response_format=model,
        max_tokens=MAX_TOKENS,
        **GREEDY,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(choice.message.parsed, model)
    # The SDK's strict schema: exactly the model's fields.
    assert set(json.loads(choice.message.content)) == set(model.model_fields)


def test_json_mode_and_streamed_equals_whole(stack):
    c = stack.client()
    kw = dict(
        model=MODEL,
        # Free JSON has no bounds: a prompt the tiny model answers briefly (a cat's description runs on).
        messages=[{"role": "user", "content": "Give the name and age of a person as JSON."}],
        response_format={"type": "json_object"},
        max_tokens=MAX_TOKENS,
        **GREEDY,
    )
    whole = c.chat.completions.create(**kw)
    assert whole.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(whole.choices[0].message.content), dict)
    chunks = list(c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.encode() == whole.choices[0].message.content.encode()
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 24},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "maxLength": 24}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def streamed_calls(stream) -> tuple[list[dict], str | None]:
    calls: dict[int, dict] = {}
    reason = None
    for ch in stream:
        for x in ch.choices:
            for t in x.delta.tool_calls or []:
                c = calls.setdefault(t.index, {"id": t.id, "name": t.function.name, "arguments": ""})
                c["arguments"] += t.function.arguments or ""
            reason = x.finish_reason or reason
    return [calls[i] for i in sorted(calls)], reason


@pytest.mark.parametrize(
    "tool_choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_forced_tool_calls_whole_and_streamed(stack, tool_choice):
    c = stack.client()
    kw = dict(
        model=MODEL, messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=tool_choice, max_tokens=MAX_TOKENS
    )
    whole = c.chat.completions.create(**kw, **GREEDY)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert calls and all(t.type == "function" and t.id.startswith("call_") for t in calls)
    for t in calls:
        args = json.loads(t.function.arguments)
        if t.function.name == "get_weather":
            assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
        else:
            assert t.function.name == "get_time" and set(args) == {"timezone"}
    if isinstance(tool_choice, dict):
        assert [t.function.name for t in calls] == ["get_weather"]
    got, reason = streamed_calls(c.chat.completions.create(**kw, stream=True, **GREEDY))
    assert reason == "tool_calls"
    assert [(g["name"], g["arguments"]) for g in got] == [(t.function.name, t.function.arguments) for t in calls]


def test_tool_results_in_the_history(stack):
    c = stack.client()
    history = ASK + tool_round(
        "call_1", "get_weather", '{"city": "Paris", "unit": "celsius"}', '{"celsius": 21, "condition": "sunny"}'
    )
    r = c.chat.completions.create(
        model=MODEL, messages=history, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=40, **GREEDY
    )
    assert r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content
    assert r.usage.prompt_tokens > 0


def test_auto_tool_choice_answers_text_or_calls(stack):
    c = stack.client()
    r = c.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER_TOOL], max_tokens=60, **GREEDY)
    choice = r.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        json.loads(choice.message.tool_calls[0].function.arguments)
    else:
        assert choice.message.content and choice.finish_reason in ("stop", "length")


@pytest.mark.parametrize(
    "body,param",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
            "response_format.json_schema.schema",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objectt"}}}],
                "tool_choice": "required",
            },
            "tools",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objectt"}}}],
                "tool_choice": {"type": "function", "function": {"name": "f"}},
            },
            "tools[0].function.parameters",
        ),
    ],
)
def test_bad_schemas_name_the_field(stack, body, param):
    c = stack.client()
    kw = {"model": MODEL, "messages": ASK, "max_tokens": 8, **body}
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(**kw)
    assert e.value.body["param"] == param, e.value.body


# --- LangChain -----------------------------------------------------------------------------------
def chat_model(stack):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(
        model=MODEL, base_url=stack.base_url, api_key="unused", temperature=0, max_tokens=MAX_TOKENS, max_retries=0
    )


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(stack, method):
    llm = chat_model(stack).with_structured_output(Weather, method=method)
    assert isinstance(llm.invoke("The weather in Oslo."), Weather)


def test_langchain_bind_tools_with_tool_choice(stack):
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """Current weather in a city."""
        return "sunny"

    @tool
    def get_time(timezone: str) -> str:
        """Current time in a timezone."""
        return "noon"

    llm = chat_model(stack)
    msg = llm.bind_tools([get_weather, get_time], tool_choice="get_weather").invoke("Weather in Paris?")
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
    assert set(msg.tool_calls[0]["args"]) == {"city", "unit"}
    msg = llm.bind_tools([get_weather, get_time], tool_choice="any").invoke("What time is it in Tokyo?")
    assert msg.tool_calls and {c["name"] for c in msg.tool_calls} <= {"get_weather", "get_time"}
    # The call's result back in the history, through the chat template.
    from langchain_core.messages import HumanMessage, ToolMessage

    call = msg.tool_calls[0]
    answer = llm.invoke([HumanMessage("What time is it in Tokyo?"), msg, ToolMessage("noon", tool_call_id=call["id"])])
    assert isinstance(answer.content, str)
