"""The ensemble request and response on the wire, written once for every client: the failover
clients (failover.py, aio.py), the benchmark targets and the tests that hand-build requests.

A request is a dict of ensemble input name -> value (`ensemble_body`); that dict is already the JSON
body of HTTP `generate` / `generate_stream`. For gRPC it becomes tensors of shape [1, n]: a string
is one UTF-8 BYTES element, a list of strings (stop_words, bad_words) one row, any other value a
[1, 1] array in the dtype contract.py gives the input. `infer_inputs` builds tritonclient
InferInputs from it, `ensemble_request` the raw protobuf (no tritonclient objects: the frontend
encodes one per request and per resume).

A streamed response is read into a `Piece`: its text and its token count. Every response carries
one log-probability per token (`output_log_probs`, FP32), which is how tokens are counted exactly;
a response without it counts as one token. The gRPC readers also keep the token ids
(`output_token_ids`) and their log-probabilities, for OpenAI's `logprobs`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import serialize_byte_tensor

from ..contract import ENGINE, ENGINE_INPUTS, ENSEMBLE, ENSEMBLE_INPUTS, STOP_REQUEST, by_name

ENSEMBLE_TYPES = by_name(ENSEMBLE_INPUTS)
_ENGINE_TYPES = by_name(ENGINE_INPUTS)
STOP_SUPPORTED = "stop" in _ENGINE_TYPES
"""The token-level contract has TensorRT-LLM's `stop` input (stop a request by its id)."""
STOP_INPUTS = STOP_REQUEST
"""A stop request: `stop=true` and placeholders for the inputs the engine requires (contract.py)."""


def ensemble_body(text: str, max_tokens: int, **inputs) -> dict:
    """The request: text_input, max_tokens and any other ensemble inputs (temperature, stop_words,
    stream, apply_chat_template, ...)."""
    return {"text_input": text, "max_tokens": int(max_tokens), **inputs}


def tensors(body: dict, types: dict = ENSEMBLE_TYPES) -> Iterator[tuple[str, np.ndarray, str]]:
    """(name, array, Triton datatype) of each input of `body`, in its order."""
    for name, value in body.items():
        try:
            t = types[name]
        except KeyError:
            raise ValueError(f"{name!r} is not an input of the model (contract.py lists them)") from None
        if t.dtype == "STRING":
            values = value if isinstance(value, list) else [value]
            yield name, np.array([[v.encode("utf-8") for v in values]], dtype=np.object_), "BYTES"
        elif isinstance(value, list):  # token ids (input_ids): one row
            yield name, np.array([value], dtype=t.np_dtype), t.dtype
        else:
            yield name, np.array([[value]], dtype=t.np_dtype), t.dtype


def infer_inputs(body: dict, module=None) -> list:
    """tritonclient InferInputs of `body`; `module` is tritonclient.grpc (the default) or tritonclient.http."""
    if module is None:
        import tritonclient.grpc as module
    out = []
    for name, arr, dtype in tensors(body):
        i = module.InferInput(name, list(arr.shape), dtype)
        i.set_data_from_numpy(arr)
        out.append(i)
    return out


def _request(model: str, request_id: str, body: dict, types: dict) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, arr, dtype in tensors(body, types):
        t = req.inputs.add()
        t.name, t.datatype = name, dtype
        t.shape.extend(arr.shape)
        req.raw_input_contents.append(serialize_byte_tensor(arr).item() if dtype == "BYTES" else arr.tobytes())
    # Without this a stream whose last response carries no tensors would never say it is over.
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    return req


def ensemble_request(body: dict, request_id: str, model: str = ENSEMBLE) -> service_pb2.ModelInferRequest:
    """One ModelStreamInfer request for the ensemble."""
    return _request(model, request_id, body, ENSEMBLE_TYPES)


def token_request(body: dict, request_id: str, model: str = ENGINE) -> service_pb2.ModelInferRequest:
    """One ModelStreamInfer request for the token-level model (tensorrt_llm, or the C++ backend's
    model behind the relay): `body` maps its input names to values, input_ids a list of ids. It asks
    for the outputs read_tokens reads and no others (the log-probs only with return_log_probs)."""
    req = _request(model, request_id, body, _ENGINE_TYPES)
    for name in TOKEN_OUTPUTS if body.get("return_log_probs") else TOKEN_OUTPUTS[:2]:
        req.outputs.add().name = name
    return req


def read_tokens(resp: service_pb2.ModelInferResponse) -> tuple[list[int], list[float] | None] | None:
    """Beam 0's new tokens of one streamed token-level response and their log-probabilities (where
    sent), read from the raw bytes; None for a response without output_ids (the empty final one).
    output_ids is [1, beams, n] with sequence_length [1, beams] of it valid, as TensorRT-LLM sends."""
    raw = {o.name: resp.raw_output_contents[i] for i, o in enumerate(resp.outputs)} if resp.raw_output_contents else {}
    ids = raw.get("output_ids")
    if ids is None:
        if any(o.name == "output_ids" for o in resp.outputs):
            r = InferResult(resp)  # contents in the typed fields instead: the general path
            arr, n = r.as_numpy("output_ids"), r.as_numpy("sequence_length")
            lp = r.as_numpy("output_log_probs")
            k = int(n.reshape(-1)[0]) if n is not None else arr.shape[-1]
            return arr.reshape(-1)[:k].tolist(), (lp.reshape(-1)[:k].tolist() if lp is not None else None)
        return None
    seq = raw.get("sequence_length")
    tokens = np.frombuffer(ids, dtype="<i4")
    width = next(o.shape[-1] for o in resp.outputs if o.name == "output_ids")  # beam 0: the first row
    n = int(np.frombuffer(seq, dtype="<i4")[0]) if seq else width
    lp = raw.get("output_log_probs")
    return (
        tokens[: min(n, width)].tolist(),
        np.frombuffer(lp, dtype="<f4")[: min(n, width)].tolist() if lp is not None else None,
    )


def _flat(value) -> list:
    return value if isinstance(value, list) else [value]


def event_tokens(event: dict) -> tuple[list[int], list[float] | None] | None:
    """The tokens of one server-sent event of the token-level model's HTTP generate_stream, and their
    log-probabilities (where sent); None for an event without output_ids. JSON carries a one-element
    tensor as a bare number and a larger one as a flat list: beam 0 first, sequence_length of it valid."""
    ids = event.get("output_ids")
    if ids is None:
        return None
    ids = _flat(ids)
    n = _flat(event["sequence_length"])[0] if "sequence_length" in event else len(ids)
    lp = event.get("output_log_probs")
    return ids[:n], (_flat(lp)[:n] if lp is not None else None)


def stop_request(request_id: str, model: str = ENGINE) -> service_pb2.ModelInferRequest:
    """TensorRT-LLM's stop-by-id, sent to the token-level model: the engine cancels the request with
    this id (Triton 2.51's ensemble cancellation does not reach a running step)."""
    return _request(model, request_id, STOP_INPUTS, _ENGINE_TYPES)


TOKEN_OUTPUTS = ("output_ids", "sequence_length", "output_log_probs")
TOP_IDS, TOP_LOG_PROBS = "top_token_ids", "top_log_probs"
"""The ensemble's alternatives per token (when the request asks for them: num_top_log_probs)."""


@dataclass
class Piece:
    """One streamed response: its text and how many tokens produced it (with their ids and
    log-probabilities where the response has them)."""

    text: str
    tokens: int
    ids: list[int] | None = None
    logprobs: list[float] | None = None
    top_ids: list[list[int]] | None = None  # per token, its most likely alternatives (when asked)
    top_logprobs: list[list[float]] | None = None


def is_final(resp: service_pb2.ModelInferResponse) -> bool:
    """The last response of a decoupled stream (flagged by triton_enable_empty_final_response)."""
    final = resp.parameters.get("triton_final_response")
    return final is not None and final.bool_param


def read_piece(resp: service_pb2.ModelInferResponse) -> Piece | None:
    """The Piece of one streamed response (None if it has no text_output), read from the raw bytes
    (no numpy: this runs for every response of every stream). A BYTES element is a 4-byte
    little-endian length and the bytes."""
    raw = {o.name: resp.raw_output_contents[i] for i, o in enumerate(resp.outputs)} if resp.raw_output_contents else {}
    if "text_output" not in raw:
        if not any(o.name == "text_output" for o in resp.outputs):
            return None
        return result_piece(InferResult(resp))  # contents in the typed fields instead: the general path
    buf, parts, i = raw["text_output"], [], 0
    while i + 4 <= len(buf):
        n = int.from_bytes(buf[i : i + 4], "little")
        parts.append(buf[i + 4 : i + 4 + n])
        i += 4 + n
    lp, ids = raw.get("output_log_probs"), raw.get("output_token_ids")
    piece = Piece(
        b"".join(parts).decode("utf-8"),
        len(lp) // 4 if lp is not None else 1,
        np.frombuffer(ids, dtype="<i4").tolist() if ids is not None else None,
        np.frombuffer(lp, dtype="<f4").tolist() if lp is not None else None,
    )
    if TOP_IDS in raw and TOP_LOG_PROBS in raw:  # [.., tokens, k]: k alternatives per token
        k = next(o.shape[-1] for o in resp.outputs if o.name == TOP_IDS)
        if k:
            piece.top_ids = np.frombuffer(raw[TOP_IDS], dtype="<i4").reshape(-1, k).tolist()
            piece.top_logprobs = np.frombuffer(raw[TOP_LOG_PROBS], dtype="<f4").reshape(-1, k).tolist()
    return piece


def result_piece(result) -> Piece | None:
    """The Piece of a tritonclient InferResult (None if it has no text_output)."""
    text = result.as_numpy("text_output")
    if text is None:
        return None
    lp, ids = result.as_numpy("output_log_probs"), result.as_numpy("output_token_ids")
    return Piece(
        b"".join(text.reshape(-1)).decode("utf-8"),
        int(lp.size) if lp is not None else 1,
        ids.reshape(-1).tolist() if ids is not None else None,
        lp.reshape(-1).tolist() if lp is not None else None,
    )


def event_piece(event: dict) -> Piece | None:
    """The Piece of one server-sent event of HTTP generate_stream (None if it has no text_output).
    Its output_log_probs is a list, or a bare number for one token."""
    if "text_output" not in event:
        return None
    lp = event.get("output_log_probs")
    return Piece(event["text_output"], len(lp) if isinstance(lp, list) else 1)
