"""Guided decoding through the ensemble (upstream's guided_decoding_guide_type / guided_decoding_guide):
SmolLM2-135M, far too small to produce valid JSON on its own, answers JSON that validates against the
schema, text that matches the regex and the grammar; a bad schema is a 400 naming the field; an
unguided request batched with guided ones gets its greedy answer unchanged. In the tensorrtllm layout
the relay passes the inputs to the C++ backend's model, whose stand-in enforces them with the torch
engine's code: the tiny random model's output matches the grammar there too."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

import numpy as np
import pytest
from pydantic import BaseModel, Field

from .client import generate, generate_stream, grpc_stream

pytestmark = [pytest.mark.e2e]


class City(BaseModel):
    name: str = Field(max_length=40)
    country: Literal["France", "Germany", "Italy", "Spain"]
    population_millions: float = Field(ge=0, le=50)
    landmarks: list[Annotated[str, Field(max_length=40)]] = Field(max_length=3)


def guided(prompt: str, kind: str, guide: str | None, max_tokens: int = 200) -> dict:
    body = {"text_input": prompt, "max_tokens": max_tokens, "guided_decoding_guide_type": kind}
    if guide is not None:
        body["guided_decoding_guide"] = guide
    return body


@pytest.mark.smollm2
def test_json_schema_regex_ebnf_and_json(smollm2_server):
    r = generate(smollm2_server, guided("Describe Paris as JSON.", "json_schema", json.dumps(City.model_json_schema())))
    assert r.status_code == 200, r.text
    city = City.model_validate_json(r.json()["text_output"])  # raises unless it validates
    assert city.name
    r = generate(smollm2_server, guided("What year comes after 2024?", "regex", r"[0-9]{4}", 8))
    assert re.fullmatch(r"[0-9]{4}", r.json()["text_output"]), r.text
    grammar = 'root ::= "The answer is " ("yes" | "no") "."'
    r = generate(smollm2_server, guided("Is Paris in France?", "ebnf_grammar", grammar, 16))
    assert r.json()["text_output"] in ("The answer is yes.", "The answer is no."), r.text
    r = generate(smollm2_server, guided("List three colours.", "json", None, 64))
    json.loads(r.json()["text_output"])  # any JSON value, complete


@pytest.mark.smollm2
def test_streamed_guided_output_equals_the_whole(smollm2_server):
    body = guided("Describe Rome as JSON.", "json_schema", json.dumps(City.model_json_schema()))
    whole = generate(smollm2_server, body).json()["text_output"]
    City.model_validate_json(whole)
    assert "".join(e["text_output"] for e in generate_stream(smollm2_server, body)) == whole
    extra = {k: v for k, v in body.items() if k.startswith("guided")}
    assert "".join(grpc_stream(smollm2_server, body["text_input"], body["max_tokens"], **extra)) == whole


@pytest.mark.smollm2
def test_an_unguided_request_batched_with_guided_ones_is_unaffected(smollm2_server):
    plain = {"text_input": "Write one sentence about the sea.", "max_tokens": 32}
    alone = generate(smollm2_server, plain).json()["text_output"]
    schema = json.dumps(City.model_json_schema())
    bodies = [guided(f"Describe city {i} as JSON.", "json_schema", schema) for i in range(3)] + [plain]
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: generate(smollm2_server, b), bodies))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert answers[-1].json()["text_output"] == alone
    for a in answers[:-1]:
        City.model_validate_json(a.json()["text_output"])


def test_bad_guides_are_400_naming_the_field(layout_server):
    for body, field in [
        (guided("Hi", "json_schema", '{"type": "objekt"}'), "guided_decoding_guide"),
        (guided("Hi", "regex", "(unclosed"), "guided_decoding_guide"),
        (guided("Hi", "ebnf_grammar", "root ::= missing"), "guided_decoding_guide"),
        (guided("Hi", "yaml", "a: 1"), "guided_decoding_guide_type"),
        (guided("Hi", "json_schema", None), "guided_decoding_guide"),
    ]:
        r = generate(layout_server, body)
        assert r.status_code == 400 and f"invalid {field}: " in r.json()["error"], r.text
    assert generate(layout_server, {"text_input": "Hi", "max_tokens": 4}).status_code == 200  # still serving


def test_a_random_model_follows_the_grammar_on_both_layouts(layout_server):
    """The tiny random model never writes a phone number by chance: the grammar does it, on the torch
    engine and on the stand-in behind the relay."""
    r = generate(layout_server, guided("Call me at", "regex", r"\+1 [0-9]{3}-[0-9]{4}", 24))
    assert r.status_code == 200, r.text
    assert re.fullmatch(r"\+1 [0-9]{3}-[0-9]{4}", r.json()["text_output"]), r.text
    pieces = grpc_stream(
        layout_server,
        "Yes or no?",
        8,
        guided_decoding_guide_type="ebnf_grammar",
        guided_decoding_guide='root ::= "yes" | "no"',
    )
    assert "".join(pieces) in ("yes", "no")


def test_top_log_probs_through_the_ensemble(layout_server):
    """num_top_log_probs (ours): k alternatives per generated token, greedy's first one being the token
    itself with its own log-prob. In the tensorrtllm layout the relay computes them from the backend's
    generation_logits (the spec builds the engine with gather_generation_logits)."""
    body = {"text_input": "Hello", "max_tokens": 6, "num_top_log_probs": 4, "return_log_probs": True}
    r = generate(layout_server, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert "generation_logits" not in out  # the relay's input, never handed on
    ids = np.array(out["output_token_ids"]).reshape(-1)
    top_ids = np.array(out["top_token_ids"]).reshape(-1, 4)
    top_lps = np.array(out["top_log_probs"]).reshape(-1, 4)
    lps = np.array(out["output_log_probs"]).reshape(-1)
    assert len(ids) == len(top_ids) == 6
    assert (top_ids[:, 0] == ids).all() and np.allclose(top_lps[:, 0], lps, atol=1e-5)
    assert (np.diff(top_lps, axis=1) <= 0).all()
    plain = generate(layout_server, {"text_input": "Hello", "max_tokens": 6}).json()
    assert np.array(plain["top_token_ids"]).size == 0  # not asked for: [tokens, 0]
    bad = generate(layout_server, {**body, "num_top_log_probs": 21})
    assert bad.status_code == 400 and "invalid num_top_log_probs: must be in [0, 20]" in bad.json()["error"]
    streamed = generate_stream(layout_server, body)  # the same alternatives, chunk by chunk
    assert np.array([t for e in streamed for t in np.array(e["top_token_ids"]).reshape(-1)]).tolist() == (
        top_ids.reshape(-1).tolist()
    )


# Both layouts run the same tiny checkpoint on the torch engine (the tensorrtllm layout's stand-in has it
# underneath), so greedy alternatives agree but for float noise from batching: ids exactly, log-probs to 1e-4.
TOP_LOG_PROB_TOLERANCE = 1e-4


def test_top_log_probs_agree_between_layouts(tiny_server, trtllm_server):
    """The tensorrtllm layout's top log-probs (the relay's log_softmax + top-k of the backend's
    generation_logits) are the torch layout's (the engine's own), for the same prompt, greedy."""
    body = {"text_input": "The capital of France is", "max_tokens": 8, "num_top_log_probs": 5}
    torch_out, trt_out = (generate(s, body).json() for s in (tiny_server, trtllm_server))
    assert trt_out["output_token_ids"] == torch_out["output_token_ids"]
    assert np.array(trt_out["top_token_ids"]).tolist() == np.array(torch_out["top_token_ids"]).tolist()
    np.testing.assert_allclose(
        np.array(trt_out["top_log_probs"]), np.array(torch_out["top_log_probs"]), atol=TOP_LOG_PROB_TOLERANCE
    )
