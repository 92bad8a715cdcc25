"""Hypothesis fuzz over the token-level edge: `tensorrt_llm` (gRPC streaming) and its unary twin
`tensorrt_llm_unary` (gRPC ModelInfer and HTTP /infer), the inputs a token-speaking client sends
(input_ids, input_lengths, request_output_len, sampling knobs, stop_words_list / bad_words_list in
TensorRT-LLM's [2, L] format, `stop`). Hostile word lists: ids out of range (-1, 2**31-1), offsets
that do not increase, huge lists. Same rules as the ensemble fuzz: a result or a clean client error,
never a crash of our code or a hang, the server stays ready, valid requests alongside keep working."""

from __future__ import annotations

import json
import queue

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from llmserve.contract import ENGINE, ENGINE_INPUTS, UNARY_SUFFIX
from llmserve.request.word_lists import MAX_WORD_TOKENS, MAX_WORDS

from ..durations import examples
from .fuzz_lib import Alongside, Tally, classify_error, classify_http, is_ready
from .test_fuzz_grpc import DTYPES, FUZZ, SHAPES, build, classify_grpc_error, values

pytestmark = pytest.mark.e2e
EXAMPLES = examples("fuzz_token_examples")  # tests/durations.py
TIMEOUT_S = 60
# contract dtypes are config names (STRING); on the wire a string tensor is BYTES
DECLARED = {t.name: "BYTES" if t.dtype == "STRING" else t.dtype for t in ENGINE_INPUTS}
VOCAB = 49152  # SmolLM2's tokenizer (the tiny spec borrows it)
FIELDS_OUT = "output_ids"


def word_list(ids: list[int], offsets: list[int]) -> np.ndarray:
    width = max(len(ids), len(offsets), 1)
    out = np.full((1, 2, width), -1, dtype=np.int32)
    out[0, 0, :] = 0
    out[0, 0, : len(ids)] = ids
    out[0, 1, : len(offsets)] = offsets
    return out


@st.composite
def hostile_word_list(draw):
    kind = draw(st.sampled_from(["ids out of range", "offsets", "too many", "too long", "wrong shape", "random"]))
    if kind == "ids out of range":
        bad = draw(st.sampled_from([-1, -(2**31), VOCAB, 2**31 - 1]))
        arr = word_list([5, bad, 7], [1, 3])
    elif kind == "offsets":
        arr = word_list([5, 6, 7], draw(st.sampled_from([[3, 1], [0], [5], [2, 2], [1, 9999]])))
    elif kind == "too many":
        n = MAX_WORDS + draw(st.integers(1, 500))
        arr = word_list([5] * n, list(range(1, n + 1)))
    elif kind == "too long":
        n = MAX_WORD_TOKENS + draw(st.integers(1, 3000))
        arr = word_list([5] * n, [n])
    elif kind == "wrong shape":
        arr = np.zeros(draw(st.sampled_from([(1, 3, 2), (1, 1, 4), (1, 2), (2, 2, 2)])), dtype=np.int32)
    else:
        n = draw(st.integers(0, 8))
        arr = draw(values("INT32", 2 * n)).reshape(1, 2, n) if n else np.zeros((1, 2, 0), dtype=np.int32)
    return arr


@st.composite
def tensor(draw, name: str):
    declared = DECLARED.get(name, "INT32")
    if name in ("stop_words_list", "bad_words_list") and draw(st.integers(0, 3)):
        data = draw(hostile_word_list())
        return name, "INT32", list(data.shape), data, None
    dtype = declared if draw(st.integers(0, 4)) else draw(st.sampled_from(list(DTYPES)))
    shape = draw(st.sampled_from(SHAPES + [[1, 5], [1, 2000]] if name == "input_ids" else SHAPES))
    n = int(np.prod(shape)) if shape else 1
    return name, dtype, shape, draw(values(dtype, n)).reshape(shape), None


@st.composite
def hostile_request(draw):
    core = ("input_ids", "input_lengths", "request_output_len")
    names = [n for n in DECLARED if (n in core and draw(st.integers(0, 9))) or draw(st.integers(0, 5)) == 0]
    if draw(st.integers(0, 4)) == 0:
        names += ["stop_words_list", "bad_words_list"]
    return [draw(tensor(n)) for n in dict.fromkeys(names)]


def _scalar(name, dtype, value):
    np_t = {"INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_, "UINT64": np.uint64}[dtype]
    return name, dtype, [1, 1], np.array([[value]], dtype=np_t), None


@st.composite
def valid_request(draw):
    ids = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8))
    req = [
        ("input_ids", "INT32", [1, len(ids)], np.array([ids], dtype=np.int32), None),
        _scalar("input_lengths", "INT32", len(ids)),
        _scalar("request_output_len", "INT32", draw(st.integers(1, 3))),
    ]
    if draw(st.booleans()):
        words = draw(st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=3), min_size=1, max_size=3))
        flat = [t for w in words for t in w]
        arr = word_list(flat, np.cumsum([len(w) for w in words]).tolist())
        req.append(("stop_words_list", "INT32", list(arr.shape), arr, None))
    if draw(st.booleans()):
        req.append(_scalar("temperature", "FP32", draw(st.one_of(st.just(0.0), st.floats(0.125, 2, width=32)))))
    return req


def grpc_unary(client, spec) -> tuple[str, str]:
    try:
        result = client.infer(ENGINE + UNARY_SUFFIX, build(spec), client_timeout=TIMEOUT_S)
    except InferenceServerException as e:
        if (e.status() or "").endswith("DEADLINE_EXCEEDED"):
            return "timeout", str(e)
        return classify_grpc_error(e)
    return ("ok", "") if result.as_numpy(FIELDS_OUT) is not None else ("bad_answer", "no output_ids")


def http_infer(session, http, spec) -> tuple[str, str]:
    inputs = []
    for name, dtype, shape, data, _ in spec:
        if dtype == "BYTES":
            flat = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in data.reshape(-1)]
        else:
            flat = (
                [x if np.isfinite(x) else 0 for x in data.reshape(-1).tolist()]
                if dtype.startswith("FP")
                else data.reshape(-1).tolist()
            )
        inputs.append({"name": name, "shape": shape, "datatype": dtype, "data": flat})
    try:
        r = session.post(
            f"http://{http}/v2/models/{ENGINE}{UNARY_SUFFIX}/infer",
            data=json.dumps({"inputs": inputs}),
            timeout=TIMEOUT_S,
        )
    except requests.Timeout as e:
        return "timeout", str(e)
    if r.status_code == 200:
        outs = {o["name"] for o in r.json().get("outputs", [])}
        return ("ok", "") if FIELDS_OUT in outs else ("bad_answer", r.text[:200])
    if r.status_code == 503:
        return "busy", r.text[:200]
    cat, msg = classify_http(r.status_code, r.content)
    return cat, msg


class Stream:
    def __init__(self, url: str):
        self.client = grpcclient.InferenceServerClient(url)
        self.q: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.q.put((result, error)))
        self.n = 0

    def send(self, spec) -> tuple[str, str]:
        self.n += 1
        self.client.async_stream_infer(
            ENGINE, build(spec), request_id=f"fuzz-{self.n}", enable_empty_final_response=True
        )
        got = 0
        while True:
            try:
                result, error = self.q.get(timeout=TIMEOUT_S)
            except queue.Empty:
                return "timeout", f"no final response in {TIMEOUT_S} s"
            if error is not None:
                msg = error.message() if isinstance(error, InferenceServerException) else str(error)
                cat, detail = classify_error(400, msg)
                return (
                    (cat, detail)
                    if cat in ("invalid_ours", "invalid_triton", "server_error_ours")
                    else ("server_error_ours", f"unexpected stream error: {msg}")
                )
            got += result.as_numpy(FIELDS_OUT) is not None
            if result.get_response().parameters["triton_final_response"].bool_param:
                return ("ok", "") if got else ("ok_stop", "")  # a `stop` request ends with an empty final

    def close(self):
        self.client.stop_stream()
        self.client.close()


def _run(fuzz_target, emit, title, send):
    tally = Tally()

    @FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
    @given(spec=st.one_of(hostile_request(), hostile_request(), valid_request()))
    def run(spec):
        cat, msg = send(spec)
        tally.add(cat, [(n, d, s, r) for n, d, s, _, r in spec], msg)
        if tally.total % 25 == 0 and not is_ready(fuzz_target.http):
            tally.add("not_ready", spec, "server not ready after this case")

    with Alongside(fuzz_target.http) as alongside:
        run()
    emit(
        tally.report(f"{title} (valid ensemble requests alongside: {alongside.ok} ok, {len(alongside.errors)} failed)")
    )
    assert not tally.failures, tally.failures[:5]
    assert not alongside.errors, alongside.errors[:5]
    assert is_ready(fuzz_target.http)


def test_token_level_grpc_stream_hostile_inputs(fuzz_target, emit):
    stream = Stream(fuzz_target.grpc)
    try:
        _run(fuzz_target, emit, "gRPC streaming fuzz (tensorrt_llm)", stream.send)
    finally:
        stream.close()


def test_token_level_grpc_unary_hostile_inputs(fuzz_target, emit):
    client = grpcclient.InferenceServerClient(fuzz_target.grpc)
    try:
        _run(fuzz_target, emit, "gRPC unary fuzz (tensorrt_llm_unary)", lambda spec: grpc_unary(client, spec))
    finally:
        client.close()


def test_token_level_http_infer_hostile_inputs(fuzz_target, emit):
    session = requests.Session()
    _run(
        fuzz_target,
        emit,
        "HTTP /infer fuzz (tensorrt_llm_unary)",
        lambda spec: http_infer(session, fuzz_target.http, spec),
    )
