"""Hypothesis fuzz over the ensemble's gRPC inputs: unary ModelInfer on ensemble_unary and
streaming on ensemble. Wrong dtypes and shapes, batch-dimension mismatches, raw tensor bytes that do
not match the shape, invalid UTF-8 in BYTES, extreme numbers, NaN/inf, unknown inputs.

Every answer must be a result or a clean client error (INVALID_ARGUMENT and friends), never
INTERNAL/UNKNOWN from our code, never a hang; the server stays ready; valid requests sent alongside
keep succeeding."""

from __future__ import annotations

import queue
import struct

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from llmserve.contract import ENSEMBLE, ENSEMBLE_INPUTS, UNARY_SUFFIX

from ..durations import examples, fuzz_derandomize
from .fuzz_lib import (
    Alongside,
    Tally,
    classify_error,
    is_ready,
    log_size,
    server_log_tail,
)

pytestmark = pytest.mark.e2e
EXAMPLES = examples("fuzz_grpc_examples")  # tests/durations.py
TIMEOUT_S = 60

# gRPC status -> the HTTP status Triton would use, so one classifier serves both frontends.
GRPC_TO_HTTP = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "INTERNAL": 500,
    "UNKNOWN": 500,
    "DEADLINE_EXCEEDED": 504,
}
DTYPES = {
    "BYTES": np.object_,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP32": np.float32,
    "FP64": np.float64,
    "BOOL": np.bool_,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "FP16": np.float16,
    "UINT8": np.uint8,
}
DECLARED = {t.name: ("BYTES" if t.dtype == "STRING" else t.dtype) for t in ENSEMBLE_INPUTS}

INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x28\x8c\x28", b"\x80abc", b"ok\xfe"]
byte_strings = st.one_of(
    st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=30),
    st.sampled_from(INVALID_UTF8 + [b"", b"\x00", b"\x1b[31m\x07", "日本🙂".encode()]),
)


def values(dtype: str, n: int):
    if dtype == "BYTES":
        return st.lists(byte_strings, min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.object_))
    np_t = DTYPES[dtype]
    if dtype == "BOOL":
        elems = st.booleans()
    elif dtype.startswith("FP"):
        elems = st.floats(allow_nan=True, allow_infinity=True, width=16 if dtype == "FP16" else 64).map(
            lambda x: float(np.array(x).astype(np_t)) if np.isfinite(x) and abs(x) < np.finfo(np_t).max else x
        )
    else:
        info = np.iinfo(np_t)
        elems = st.one_of(st.integers(info.min, info.max), st.integers(-3, 3), st.sampled_from([info.min, info.max]))
    return st.lists(elems, min_size=n, max_size=n).map(lambda v: np.array(v).astype(np_t).reshape(n))


SHAPES = [[1, 1]] * 6 + [[1], [2, 1], [1, 2], [1, 0], [0, 1], [1, 1, 1], [3, 4], [], [1, 300]]


@st.composite
def tensor(draw, name: str):
    declared = DECLARED.get(name, "BYTES")
    dtype = declared if draw(st.integers(0, 4)) else draw(st.sampled_from(list(DTYPES)))
    if name in ("stop_words", "bad_words") and draw(st.booleans()):
        shape = [1, draw(st.sampled_from([0, 1, 5, 300, 3000]))]
    else:
        shape = draw(st.sampled_from(SHAPES))
    n = int(np.prod(shape)) if shape else 1
    data = draw(values(dtype, n)).reshape(shape)
    raw = None
    if draw(st.integers(0, 9)) == 0:  # raw bytes that disagree with the shape / BYTES framing
        raw = draw(
            st.one_of(
                st.binary(max_size=24), st.just(struct.pack("<I", 2**31) + b"x"), st.just(struct.pack("<I", 5) + b"ab")
            )
        )
    return name, dtype, shape, data, raw


@st.composite
def hostile_request(draw):
    names = [
        n
        for n in DECLARED
        if n in ("text_input", "max_tokens") and draw(st.integers(0, 9)) or draw(st.integers(0, 4)) == 0
    ]
    if draw(st.integers(0, 9)) == 0:
        names.append(draw(st.sampled_from(["unknown_input", "input_ids", "streaming", "TEXT_INPUT"])))
    return [draw(tensor(n)) for n in dict.fromkeys(names)]


@st.composite
def valid_request(draw):
    prompt = draw(
        st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "Zs"]), min_size=1, max_size=20).filter(
            lambda s: s.strip()
        )
    )
    req = [
        ("text_input", "BYTES", [1, 1], np.array([[prompt.encode()]], dtype=np.object_), None),
        ("max_tokens", "INT32", [1, 1], np.array([[draw(st.integers(1, 2))]], dtype=np.int32), None),
    ]
    if draw(st.booleans()):
        temperature = draw(st.one_of(st.just(0.0), st.floats(0.125, 2, width=32)))  # (0, 1e-5) is rejected
        req.append(("temperature", "FP32", [1, 1], np.array([[temperature]], dtype=np.float32), None))
    if draw(st.booleans()):
        words = draw(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=4))
        req.append(
            ("stop_words", "BYTES", [1, len(words)], np.array([[w.encode() for w in words]], dtype=np.object_), None)
        )
    if draw(st.booleans()):
        req.append(("seed", "UINT64", [1, 1], np.array([[draw(st.integers(0, 2**64 - 1))]], dtype=np.uint64), None))
    return req


def build(spec) -> list:
    inputs = []
    for name, dtype, shape, data, raw in spec:
        inp = grpcclient.InferInput(name, list(shape), dtype)
        inp.set_data_from_numpy(data)
        if raw is not None:
            inp._raw_content = raw  # bytes that do not match the shape: the server must refuse them
        inputs.append(inp)
    return inputs


def classify_grpc_error(e: InferenceServerException) -> tuple[str, str]:
    code = (e.status() or "").replace("StatusCode.", "")
    return classify_error(GRPC_TO_HTTP.get(code, 500), f"{e.message()}")


def unary(client, spec) -> tuple[str, str]:
    try:
        result = client.infer(ENSEMBLE + UNARY_SUFFIX, build(spec), client_timeout=TIMEOUT_S)
    except InferenceServerException as e:
        if "Deadline Exceeded" in str(e) or (e.status() or "").endswith("DEADLINE_EXCEEDED"):
            return "timeout", str(e)
        return classify_grpc_error(e)
    out = result.as_numpy("text_output")
    return ("ok", "") if out is not None else ("bad_answer", "no text_output")


class Stream:
    """One gRPC stream for many sequential requests; each waits for its final response."""

    def __init__(self, url: str):
        self.client = grpcclient.InferenceServerClient(url)
        self.q: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.q.put((result, error)))
        self.n = 0

    def send(self, spec) -> tuple[str, str]:
        self.n += 1
        self.client.async_stream_infer(ENSEMBLE, build(spec), request_id=str(self.n), enable_empty_final_response=True)
        texts = 0
        while True:
            try:
                result, error = self.q.get(timeout=TIMEOUT_S)
            except queue.Empty:
                return "timeout", f"no final response in {TIMEOUT_S} s"
            if error is not None:
                msg = error.message() if isinstance(error, InferenceServerException) else str(error)
                # Stream errors carry no status code: classify by message (ours name the field).
                cat, detail = classify_error(400, msg)
                return (
                    (cat, detail)
                    if cat in ("invalid_ours", "invalid_triton", "server_error_ours")
                    else ("server_error_ours", f"unexpected stream error: {msg}")
                )
            response = result.get_response()
            if result.as_numpy("text_output") is not None:
                texts += 1
            if response.parameters["triton_final_response"].bool_param:
                return ("ok", "") if texts else ("error_under_200", "stream finished without any text_output")

    def close(self):
        self.client.stop_stream()
        self.client.close()


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=fuzz_derandomize(),
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)


def _run(fuzz_target, emit, title, send):
    tally = Tally()
    start = log_size(fuzz_target.log)

    @FUZZ
    @given(spec=st.one_of(hostile_request(), hostile_request(), valid_request()))
    def run(spec):
        cat, msg = send(spec)
        tally.add(cat, [(n, d, s, r) for n, d, s, _, r in spec], msg)
        if tally.total % 25 == 0 and not is_ready(fuzz_target.http):
            tally.add("not_ready", spec, "server not ready after this case")

    with Alongside(fuzz_target.http) as alongside:
        run()
    emit(tally.report(f"{title} (valid alongside: {alongside.ok} ok, {len(alongside.errors)} failed)"))
    log = "\n".join(
        line
        for line in server_log_tail(fuzz_target.log, start, 20000).splitlines()
        if "Traceback" in line or "Error" in line
    )[:3000]
    assert not tally.failures, f"{tally.failures[:5]}\nserver log:\n{log}"
    assert not alongside.errors, alongside.errors[:5]
    assert is_ready(fuzz_target.http)
    assert tally.total >= EXAMPLES // 2  # most cases ran (hypothesis may stop a little short)


def test_grpc_unary_hostile_inputs(fuzz_target, emit):
    client = grpcclient.InferenceServerClient(fuzz_target.grpc)
    try:
        _run(fuzz_target, emit, "gRPC unary fuzz (ensemble_unary)", lambda spec: unary(client, spec))
    finally:
        client.close()


def test_grpc_stream_hostile_inputs(fuzz_target, emit):
    stream = Stream(fuzz_target.grpc)
    try:
        _run(fuzz_target, emit, "gRPC streaming fuzz (ensemble)", stream.send)
    finally:
        stream.close()
