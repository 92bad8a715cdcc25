"""The one encoding of ensemble requests and decoding of streamed responses (llmserve/client/wire.py):
what goes on the wire decodes back to the request, in the contract's dtypes, on every path."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor, triton_to_np_dtype

from llmserve.client import wire
from llmserve.contract import ENGINE, ENGINE_INPUTS, ENSEMBLE, ENSEMBLE_INPUTS, by_name

BODY = wire.ensemble_body(
    "北京 🌊",
    12,
    stop_words=["\n\n", "END"],
    temperature=0.5,
    top_k=3,
    seed=2**64 - 1,
    stream=True,
    apply_chat_template=False,
)


def decode(req: service_pb2.ModelInferRequest) -> dict:
    """The request's inputs back to Python values: what the server reads."""
    out = {}
    for t, raw in zip(req.inputs, req.raw_input_contents):
        if t.datatype == "BYTES":
            arr = deserialize_bytes_tensor(raw).reshape(tuple(t.shape))
            values = [v.decode() for v in arr.reshape(-1)]
            out[t.name] = values if len(values) > 1 or t.name.endswith("_words") else values[0]
        else:
            arr = np.frombuffer(raw, dtype=triton_to_np_dtype(t.datatype)).reshape(tuple(t.shape))
            out[t.name] = arr.item()
        assert list(t.shape)[0] == 1, t  # a batch of one
    return out


def test_ensemble_request_round_trip():
    req = wire.ensemble_request(BODY, "req-7")
    assert req.model_name == ENSEMBLE and req.id == "req-7"
    assert req.parameters["triton_enable_empty_final_response"].bool_param
    back = decode(req)
    assert back.pop("temperature") == pytest.approx(0.5)
    assert back == {k: v for k, v in BODY.items() if k != "temperature"}
    types = by_name(ENSEMBLE_INPUTS)
    for t in req.inputs:
        assert t.datatype == ("BYTES" if types[t.name].dtype == "STRING" else types[t.name].dtype)
    assert [list(t.shape) for t in req.inputs if t.name == "stop_words"] == [[1, 2]]


@pytest.mark.parametrize("module", [grpcclient, httpclient])
def test_infer_inputs_match_the_raw_request(module):
    inputs = wire.infer_inputs(BODY, module)
    req = wire.ensemble_request(BODY, "x")
    assert [(i.name(), i.datatype(), list(i.shape())) for i in inputs] == [
        (t.name, t.datatype, list(t.shape)) for t in req.inputs
    ]


def test_unknown_inputs_are_refused():
    with pytest.raises(ValueError, match="temprature"):
        wire.ensemble_request(wire.ensemble_body("hi", 4, temprature=0.5), "x")


def test_stop_request_carries_stop_and_the_required_inputs():
    req = wire.stop_request("req-7-2")
    assert req.model_name == ENGINE and req.id == "req-7-2"
    assert decode(req) == {"input_ids": 0, "input_lengths": 1, "request_output_len": 1, "stop": True}
    required = {t.name for t in ENGINE_INPUTS if not t.optional}
    assert required <= set(wire.STOP_INPUTS)


def response(text: str, log_probs: list[float]) -> service_pb2.ModelInferResponse:
    resp = service_pb2.ModelInferResponse(model_name="ensemble")
    t = np.array([[text.encode()]], dtype=np.object_)
    lp = np.array([[log_probs]], dtype=np.float32)
    for name, arr, dt in (("text_output", t, "BYTES"), ("output_log_probs", lp, "FP32")):
        resp.outputs.add(name=name, datatype=dt, shape=list(arr.shape))
        resp.raw_output_contents.append(serialize_byte_tensor(arr).item() if dt == "BYTES" else arr.tobytes())
    return resp


def test_read_piece_matches_tritonclient():
    """The raw-bytes reader of a streamed response agrees with tritonclient's InferResult."""
    resp = response("北京🌊 ok", [-0.5, -1.0, -0.25])
    piece = wire.read_piece(resp)
    ref = InferResult(resp)
    assert piece.text == b"".join(ref.as_numpy("text_output").reshape(-1)).decode() == "北京🌊 ok"
    assert piece.tokens == ref.as_numpy("output_log_probs").size == 3
    assert wire.result_piece(ref) == piece
    assert wire.read_piece(service_pb2.ModelInferResponse()) is None


def test_final_flag_and_sse_events():
    resp = response("x", [-1.0])
    assert not wire.is_final(resp)
    resp.parameters["triton_final_response"].bool_param = True
    assert wire.is_final(resp)
    assert wire.event_piece({"text_output": "ab", "output_log_probs": [-1.0, -2.0]}) == wire.Piece("ab", 2)
    assert wire.event_piece({"text_output": "a", "output_log_probs": -1.0}) == wire.Piece("a", 1)  # one token: bare
    assert wire.event_piece({"model_name": "ensemble"}) is None


def test_read_piece_keeps_token_ids_log_probs_and_alternatives():
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    from llmserve.client.wire import read_piece

    resp = service_pb2.ModelInferResponse()

    def add(name, arr, dtype):
        o = resp.outputs.add()
        o.name, o.datatype = name, dtype
        o.shape.extend(arr.shape)
        resp.raw_output_contents.append(serialize_byte_tensor(arr).item() if dtype == "BYTES" else arr.tobytes())

    add("text_output", np.array([b" ab"], dtype=np.object_), "BYTES")
    add("output_log_probs", np.array([[[-0.5, -0.25]]], dtype=np.float32), "FP32")
    add("output_token_ids", np.array([[[5, 6]]], dtype=np.int32), "INT32")
    add("top_token_ids", np.array([[[5, 7, 8], [6, 9, 1]]], dtype=np.int32), "INT32")  # [1, tokens, k]
    add("top_log_probs", np.array([[[-0.5, -1, -2], [-0.25, -3, -4]]], dtype=np.float32), "FP32")
    p = read_piece(resp)
    assert (p.text, p.tokens, p.ids, p.logprobs) == (" ab", 2, [5, 6], [-0.5, -0.25])
    assert p.top_ids == [[5, 7, 8], [6, 9, 1]] and p.top_logprobs == [[-0.5, -1, -2], [-0.25, -3, -4]]


def test_event_tokens_reads_scalars_lists_and_the_valid_length():
    from llmserve.client.wire import event_tokens

    assert event_tokens({"output_ids": 7, "sequence_length": 1}) == ([7], None)
    assert event_tokens({"output_ids": [5, 6, 9], "sequence_length": 2, "output_log_probs": [-0.5, -1.0, 0.0]}) == (
        [5, 6],
        [-0.5, -1.0],
    )
    assert event_tokens({"output_ids": [3, 4]}) == ([3, 4], None)
    assert event_tokens({"model_name": "tensorrt_llm_cpp"}) is None  # no tokens in it
