"""The error vocabulary (contract.py) and its one classifier (errors.classify): every hop that reads an
error message agrees with it, and no other module matches error messages on its own."""

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmserve import contract
from llmserve.contract import ErrorKind
from llmserve.deploy.haproxy import Backend, render
from llmserve.errors import (
    RETRY_ELSEWHERE,
    TRITON_CODE,
    EngineBusy,
    EngineUnavailable,
    RequestError,
    classify,
    kind_of,
    retry_elsewhere_markers,
    triton_error,
)
from llmserve.spec import ROOT, load_spec

# Messages as they reach a client or a BLS caller (models and the ensemble prefix their own words).
SEEN = {
    ErrorKind.BUSY: [
        "in ensemble 'ensemble', " + str(EngineBusy("4 requests already wait for the engine")),
        "[request id: 7] Exceeds maximum queue size",
    ],
    ErrorKind.UNAVAILABLE: [
        str(EngineUnavailable("3 engine steps failed in a row")),
        "tensorrt_llm: " + str(EngineUnavailable("the server is shutting down")),
        "Stub process 'tensorrt_llm_0_0' is not healthy.",
    ],
    ErrorKind.TIMEOUT: ["timeout: request exceeded serving.request_timeout_s (3 s) and was cancelled"],
    ErrorKind.INVALID_ARGUMENT: [
        str(RequestError("max_tokens", "must be in [1, 256], got 400")),
        "in ensemble 'ensemble', invalid stop_words_list: token ids must lie in [0, 49152)",
        # Triton's own input checks, as a unary twin gets them back over BLS (INTERNAL there)
        "tensorrt_llm: [request id: <id_unknown>] expected 3 inputs but got 2 inputs for model 'tensorrt_llm'. "
        "Got input(s) ['request_output_len','input_lengths'], but missing required input(s) ['input_ids']. "
        "Please provide all required input(s).",
        "unexpected inference input 'foo' for model 'tensorrt_llm'",
        "inference input 'seed' data-type is 'FP32', but model 'tensorrt_llm' expects 'UINT64'",
    ],
    ErrorKind.CANCELLED: ["cancelled", "Request was cancelled", "tensorrt_llm: cancelled "],
    ErrorKind.INTERNAL: ["error: CUDA out of memory", "Failed to process the request(s) for model 'x'"],
}


@pytest.mark.parametrize("kind", list(SEEN))
def test_every_message_seen_on_the_wire_classifies_to_its_kind(kind):
    for message in SEEN[kind]:
        assert classify(message) is kind, message


def test_exceptions_raised_here_have_their_kind_without_reading_the_message():
    assert kind_of(RequestError("seed", "must be >= 0")) is ErrorKind.INVALID_ARGUMENT
    assert kind_of(EngineBusy("full")) is ErrorKind.BUSY
    assert kind_of(EngineUnavailable("down")) is ErrorKind.UNAVAILABLE
    assert kind_of(RuntimeError("boom")) is ErrorKind.INTERNAL


def test_unary_twins_answer_each_kind_with_its_triton_code():
    codes = {name: name for name in set(TRITON_CODE.values())}
    pb = SimpleNamespace(
        TritonError=type("TritonError", (), {**codes, "__init__": lambda s, m, c: setattr(s, "code", c)})
    )
    for kind, messages in SEEN.items():
        for message in messages:
            assert triton_error(pb, message).code == TRITON_CODE[kind], message
    assert {TRITON_CODE[k] for k in (ErrorKind.BUSY, ErrorKind.UNAVAILABLE, ErrorKind.TIMEOUT)} == {"UNAVAILABLE"}


def test_haproxy_retries_exactly_the_retry_elsewhere_kinds():
    spec = load_spec(ROOT / "specs" / "default.yaml")
    cfg = render(spec, [Backend("t0", "127.0.0.1", 8000, 8001)], label="test")
    rules = [ln for ln in cfg.splitlines() if "set-status 503" in ln]
    assert rules, "no busy-retry rule rendered"
    for rule in rules:
        markers = tuple(re.findall(r'"([^"]+)"', rule))
        assert markers == retry_elsewhere_markers()
    for kind in ErrorKind:  # every message of a retryable kind hits the rule, no other message does
        for message in SEEN[kind]:
            hit = any(m in message for m in retry_elsewhere_markers())
            assert hit == (kind in RETRY_ELSEWHERE), message


def _string_constants(tree: ast.AST):
    """String literals that are code, not documentation (docstrings and attribute docstrings are skipped)."""
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node


def test_no_module_but_the_vocabulary_spells_an_error_marker():
    """A second copy of a marker (a list entry, a message prefix) is how classifications drift: they are
    written in contract.py only."""
    markers = [m for ms in contract.ERROR_MARKERS.values() for m in ms] + [
        contract.BUSY_PREFIX,
        contract.UNAVAILABLE_PREFIX,
    ]
    package = Path(contract.__file__).parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path.name in ("contract.py", "errors.py"):
            continue
        for node in _string_constants(ast.parse(path.read_text())):
            offenders += [
                f"{path.relative_to(package)}:{node.lineno}: {m!r}"
                for m in markers
                if node.value == m or node.value.startswith(m)
            ]
    assert not offenders, "error markers outside contract.py:\n" + "\n".join(offenders)
