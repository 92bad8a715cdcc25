"""Every tensor that crosses a model boundary, named once. The generator, the model.py adapters, the
clients and the tests all read these lists; a tensor keeps its name at every hop except where the
upstream-compatible client names differ from TensorRT-LLM's token-level names (ENSEMBLE_TO_ENGINE)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # Triton type without the TYPE_ prefix: STRING, INT32, FP32, BOOL, UINT64
    dims: tuple[int, ...]
    optional: bool = True
    reshape_scalar: bool = False  # [1] per item presented to the model as a scalar, as upstream does
    ragged: bool = False  # allow_ragged_batch: requests of different lengths may share a batch

    @property
    def np_dtype(self):
        return NP_DTYPES[self.dtype]


NP_DTYPES = {"STRING": np.object_, "INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_, "UINT64": np.uint64}


def _scalars(dtype: str, *names: str, reshape: bool = False) -> list[Tensor]:
    return [Tensor(n, dtype, (1,), reshape_scalar=reshape) for n in names]


# Client-facing sampling knobs, upstream names (ensemble side).
SAMPLING_FP32 = ("temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
SAMPLING_INT32 = ("top_k", "min_tokens", "beam_width")

# Upstream's guided decoding (json, json_schema, regex, ebnf_grammar, structural_tag + the guide), on the
# ensemble and on tensorrt_llm alike: the ensemble passes the client's tensors straight to the engine.
GUIDED_INPUTS = [Tensor("guided_decoding_guide_type", "STRING", (1,)), Tensor("guided_decoding_guide", "STRING", (1,))]
# TensorRT-LLM's GuidedDecodingParams::GuideType values, as requests name them ("json" takes no guide).
GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar", "structural_tag")
MAX_GUIDE_CHARS = 65536  # a longer schema or grammar is refused before it is parsed

# Ours, additive (TensorRT-LLM has no such outputs): `num_top_log_probs` (0..MAX_TOP_LOG_PROBS, default
# 0) asks for the k most likely tokens at each generated position, from the same distribution as
# output_log_probs (the model's own: before penalties, temperature and any grammar mask), as OpenAI's
# `top_logprobs`. Answered per response as [tokens, k] (with the batch dimension [1, tokens, k]);
# the ensemble always answers them, [tokens, 0] when none were asked for. In the tensorrtllm layout the
# relay computes them from the backend's generation_logits (GENERATION_LOGITS below) when the engine was
# built to return them (engine.tensorrtllm.gather_generation_logits), and refuses them by name otherwise.
TOP_LOG_PROBS = "num_top_log_probs"
MAX_TOP_LOG_PROBS = 20
TOP_OUTPUTS = [Tensor("top_token_ids", "INT32", (-1, -1)), Tensor("top_log_probs", "FP32", (-1, -1))]
TOP_NAMES = tuple(t.name for t in TOP_OUTPUTS)

# Ours, an input of the ensemble and of tensorrt_llm: how stop words match. "tokens" (absent: the
# default) is upstream's way, each word's ids (tokenized alone) matched against the end of the generated
# token sequence, the word's tokens kept in the output; "text" matches each word on the generated text
# (a word inside a longer word stops too, and the stop word is cut from the output), which the OpenAI
# frontend selects for OpenAI's `stop` semantics (request/reader.stop_words_match reads it).
STOP_WORDS_MATCH = "stop_words_match"
STOP_MATCH_TOKENS, STOP_MATCH_TEXT = "tokens", "text"

# --- ensemble (what clients send and receive) --------------------------------------------------
ENSEMBLE_INPUTS: list[Tensor] = [
    # Required, but declared optional: Triton 2.51's generate endpoint answers a request missing a
    # required input with HTTP 200 and an error body; preprocessing rejects it with a 400 instead.
    Tensor("text_input", "STRING", (1,)),
    Tensor("max_tokens", "INT32", (1,)),
    Tensor("stop_words", "STRING", (-1,)),
    Tensor("bad_words", "STRING", (-1,)),
    *_scalars("BOOL", "stream", "exclude_input_in_output", "return_log_probs", "apply_chat_template"),
    *_scalars("INT32", "end_id", "pad_id", *SAMPLING_INT32),
    *_scalars("FP32", *SAMPLING_FP32),
    Tensor("seed", "UINT64", (1,)),
    *GUIDED_INPUTS,
    Tensor(STOP_WORDS_MATCH, "STRING", (1,)),  # ours: see STOP_WORDS_MATCH
    Tensor(TOP_LOG_PROBS, "INT32", (1,)),  # ours: see TOP_LOG_PROBS
]
ENSEMBLE_OUTPUTS: list[Tensor] = [
    Tensor("text_output", "STRING", (-1,)),
    Tensor("cum_log_probs", "FP32", (-1,)),
    Tensor("output_log_probs", "FP32", (-1, -1)),
    # Ours, additive: the token ids text_output was decoded from ([beam, tokens], one per log prob), so
    # a client can tell which token each log probability belongs to (the OpenAI frontend's `logprobs`).
    Tensor("output_token_ids", "INT32", (-1, -1)),
    *TOP_OUTPUTS,  # ours: see TOP_LOG_PROBS
]

# --- tensorrt_llm (token level; identical for the torch and the TensorRT-LLM engine) ------------
REQUEST_KEY = "request_key"  # ours: the id a `stop` names (see ENGINE_INPUTS)
ECHO_IDS = "echo_ids"  # ours: what stands for the prompt in the output (see ENGINE_INPUTS)
ENGINE_INPUTS: list[Tensor] = [
    Tensor("input_ids", "INT32", (-1,), optional=False, ragged=True),
    Tensor("input_lengths", "INT32", (1,), optional=False, reshape_scalar=True),
    Tensor("request_output_len", "INT32", (1,), optional=False, reshape_scalar=True),
    *_scalars("INT32", "end_id", "pad_id", "beam_width", "runtime_top_k", "min_tokens", reshape=True),
    *_scalars(
        "FP32",
        "temperature",
        "runtime_top_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        reshape=True,
    ),
    Tensor("seed", "UINT64", (1,), reshape_scalar=True),
    *_scalars("BOOL", "streaming", "exclude_input_in_output", "return_log_probs", reshape=True),
    Tensor("stop_words_list", "INT32", (2, -1), ragged=True),  # row 0: concatenated ids, row 1: end offsets (-1 pad)
    Tensor("bad_words_list", "INT32", (2, -1), ragged=True),
    # Upstream's cancel-by-id: a request with stop=true cancels the requests with its request id
    # (postprocessing sends one when its step sees the ensemble request cancelled).
    Tensor("stop", "BOOL", (1,), reshape_scalar=True),
    # Upstream's preprocessing answers one pad token for a decoder-only model and its end_to_end_test.py
    # sends it back: accepted as "no decoder input", anything longer refused (no encoder-decoder models).
    Tensor("decoder_input_ids", "INT32", (-1,), ragged=True),
    *GUIDED_INPUTS,
    # Ours, additive: the id a `stop` names to cancel this request, when it is not the Triton request
    # id. Preprocessing sends the client's request id, or mints one when the client set none, so that
    # every ensemble request can be cancelled; the engine echoes it (an output of the same name) to
    # postprocessing, whose step sees the cancel (pipeline/cancellation.py).
    Tensor(REQUEST_KEY, "STRING", (1,)),
    Tensor(STOP_WORDS_MATCH, "STRING", (1,)),  # ours: how stop_words_list matches (see STOP_WORDS_MATCH)
    # Ours, additive: the tokens output in place of input_ids when the input is not excluded. Preprocessing
    # sends the client's text_input tokenized without the chat template when it applied one, so
    # exclude_input_in_output false echoes the prompt as the client sent it (as upstream, which has no
    # template); absent, input_ids are echoed.
    Tensor(ECHO_IDS, "INT32", (-1,), ragged=True),
    Tensor(TOP_LOG_PROBS, "INT32", (1,), reshape_scalar=True),  # ours: see TOP_LOG_PROBS
]
# Upstream's cancel-by-id request to the token-level model: `stop` true plus placeholders for the inputs
# every request must carry (ignored: a stop generates nothing). Sent by postprocessing and the relay over
# BLS and by clients over gRPC; each encodes these values in the dtype ENGINE_INPUTS gives.
STOP_REQUEST = {"input_ids": 0, "input_lengths": 1, "request_output_len": 1, "stop": True}

ENGINE_OUTPUTS: list[Tensor] = [
    Tensor("output_ids", "INT32", (-1, -1)),  # [beam, tokens]
    Tensor("sequence_length", "INT32", (-1,)),  # [beam]
    Tensor("cum_log_probs", "FP32", (-1,)),
    Tensor("output_log_probs", "FP32", (-1, -1)),
    # Ours, additive (the C++ backend does not produce it; in the tensorrtllm layout the relay in
    # front of it does): in streaming, up to CONTEXT_TOKENS tokens of this request's output that
    # precede output_ids, so postprocessing can detokenize each chunk exactly without keeping
    # per-request state (see llmserve/text/detokenize.py).
    Tensor("output_context_ids", "INT32", (-1, -1)),
    # Ours, additive: the request_key input, echoed with every response that carries tokens (only when
    # the request had one), so the postprocessing step that sees the cancel can name the generation.
    Tensor(REQUEST_KEY, "STRING", (1,)),
    *TOP_OUTPUTS,  # ours, when the request asked for some (see TOP_LOG_PROBS)
]
CONTEXT_TOKENS = 8

# --- tensorrtllm layout: the relay (tensorrt_llm) in front of the C++ backend model ------------
RELAY_INPUTS: list[Tensor] = ENGINE_INPUTS
# decoder_input_ids is declared, never forwarded (the relay checks it); request_key, stop_words_match,
# echo_ids and num_top_log_probs are ours, not the backend's (the relay applies or refuses them).
# The relay computes top log-probs from the backend's generation_logits (return_generation_logits, on an
# engine built with gather_generation_logits: pipeline/top_logprobs.py); neither is the relay's own
# input or output, so clients of tensorrt_llm never see the logits.
GENERATION_LOGITS = "generation_logits"
BACKEND_INPUTS: list[Tensor] = [
    t for t in ENGINE_INPUTS if t.name not in (REQUEST_KEY, STOP_WORDS_MATCH, ECHO_IDS, TOP_LOG_PROBS)
] + [Tensor("return_generation_logits", "BOOL", (1,), reshape_scalar=True)]
BACKEND_OUTPUTS: list[Tensor] = [
    t for t in ENGINE_OUTPUTS if t.name not in ("output_context_ids", REQUEST_KEY, *TOP_NAMES)
] + [Tensor(GENERATION_LOGITS, "FP32", (-1, -1, -1))]

# --- preprocessing: validates every client input once, emits the token-level request -----------
PREPROCESSING_INPUTS: list[Tensor] = ENSEMBLE_INPUTS
PREPROCESSING_OUTPUTS: list[Tensor] = [
    Tensor("input_ids", "INT32", (-1,)),
    Tensor("input_lengths", "INT32", (1,)),
    Tensor("request_output_len", "INT32", (1,)),
    Tensor("out_end_id", "INT32", (1,)),
    Tensor("out_pad_id", "INT32", (1,)),
    Tensor("streaming", "BOOL", (1,)),
    Tensor("stop_words_list", "INT32", (2, -1)),
    Tensor("bad_words_list", "INT32", (2, -1)),
    Tensor(REQUEST_KEY, "STRING", (1,)),
    Tensor(ECHO_IDS, "INT32", (-1,)),
]

# Upstream's names on preprocessing, for clients that call the model itself (NVIDIA's end_to_end_test.py).
# Declared in its config besides ours; the ensemble wires only ours. A request that sends QUERY is read
# under these names and answered under upstream's output names.
UPSTREAM_PREPROCESSING_NAMES = {
    "QUERY": "text_input",
    "REQUEST_OUTPUT_LEN": "max_tokens",
    "BAD_WORDS_DICT": "bad_words",
    "STOP_WORDS_DICT": "stop_words",
    "END_ID": "end_id",
    "PAD_ID": "pad_id",
}
PREPROCESSING_UPSTREAM_INPUTS: list[Tensor] = [
    Tensor("QUERY", "STRING", (1,)),
    Tensor("REQUEST_OUTPUT_LEN", "INT32", (1,)),
    Tensor("BAD_WORDS_DICT", "STRING", (-1,)),
    Tensor("STOP_WORDS_DICT", "STRING", (-1,)),
    Tensor("END_ID", "INT32", (1,)),
    Tensor("PAD_ID", "INT32", (1,)),
]
# our output -> upstream's; DECODER_INPUT_ID / REQUEST_DECODER_INPUT_LEN are what upstream's preprocessing
# answers for a decoder-only model (one pad token), which tensorrt_llm takes back as "no decoder input".
UPSTREAM_PREPROCESSING_OUTPUT_NAMES = {
    "input_ids": "INPUT_ID",
    "input_lengths": "REQUEST_INPUT_LEN",
    "request_output_len": "REQUEST_OUTPUT_LEN",
    "out_end_id": "OUT_END_ID",
    "out_pad_id": "OUT_PAD_ID",
    "stop_words_list": "STOP_WORDS_IDS",
    "bad_words_list": "BAD_WORDS_IDS",
}
PREPROCESSING_UPSTREAM_OUTPUTS: list[Tensor] = [
    Tensor("INPUT_ID", "INT32", (-1,)),
    Tensor("REQUEST_INPUT_LEN", "INT32", (1,)),
    Tensor("REQUEST_OUTPUT_LEN", "INT32", (-1,)),
    Tensor("DECODER_INPUT_ID", "INT32", (-1,)),
    Tensor("REQUEST_DECODER_INPUT_LEN", "INT32", (1,)),
    Tensor("BAD_WORDS_IDS", "INT32", (2, -1)),
    Tensor("STOP_WORDS_IDS", "INT32", (2, -1)),
    Tensor("OUT_END_ID", "INT32", (1,)),
    Tensor("OUT_PAD_ID", "INT32", (1,)),
]

# --- postprocessing: exact (incremental) detokenization ----------------------------------------
POSTPROCESSING_INPUTS: list[Tensor] = [
    Tensor("output_ids", "INT32", (-1, -1)),  # required, or TOKENS_BATCH (upstream's name) instead
    Tensor("sequence_length", "INT32", (-1,)),  # required, or SEQUENCE_LENGTH instead
    # Only tensors that come from tensorrt_llm: Triton refuses an ensemble step that mixes inputs
    # from a decoupled model with inputs from another model.
    Tensor("output_context_ids", "INT32", (-1, -1)),
    # Sent by TensorRT-LLM only when the request sets return_log_probs. Postprocessing always answers
    # them (zeros, one per token, when absent) so the ensemble's outputs never depend on whether an
    # engine sent an optional tensor.
    Tensor("cum_log_probs", "FP32", (-1,)),
    Tensor("output_log_probs", "FP32", (-1, -1)),
    Tensor(REQUEST_KEY, "STRING", (1,)),  # the engine's echo: a cancelled step's `stop` names it
    *TOP_OUTPUTS,  # only when the request asked for some (num_top_log_probs)
]
POSTPROCESSING_OUTPUTS: list[Tensor] = [
    Tensor("text_output", "STRING", (-1,)),
    Tensor("cum_log_probs", "FP32", (-1,)),
    Tensor("output_log_probs", "FP32", (-1, -1)),
    Tensor("output_token_ids", "INT32", (-1, -1)),  # output_ids as decoded (see ENSEMBLE_OUTPUTS)
    *TOP_OUTPUTS,
]
# Upstream's names on postprocessing (NVIDIA's end_to_end_test.py): TOKENS_BATCH / SEQUENCE_LENGTH in,
# OUTPUT out, declared besides ours (so output_ids / sequence_length are optional in the config; the
# model requires one pair or the other).
UPSTREAM_POSTPROCESSING_NAMES = {"TOKENS_BATCH": "output_ids", "SEQUENCE_LENGTH": "sequence_length"}
POSTPROCESSING_UPSTREAM_INPUTS: list[Tensor] = [
    Tensor("TOKENS_BATCH", "INT32", (-1, -1)),
    Tensor("SEQUENCE_LENGTH", "INT32", (-1,)),
]
POSTPROCESSING_UPSTREAM_OUTPUTS: list[Tensor] = [Tensor("OUTPUT", "STRING", (-1,))]
# Inside the ensemble the engine's log probs are their own tensors (postprocessing's are the outputs).
# The echoed request_key likewise (preprocessing's is the engine's input).
ENGINE_TENSOR_IN_ENSEMBLE = {
    "cum_log_probs": "engine_cum_log_probs",
    "output_log_probs": "engine_output_log_probs",
    REQUEST_KEY: "engine_request_key",
    **{name: f"engine_{name}" for name in TOP_NAMES},
}

# Ensemble tensor -> tensorrt_llm input, where names differ (upstream client names on the left).
ENSEMBLE_TO_ENGINE = {
    "top_k": "runtime_top_k",
    "top_p": "runtime_top_p",
    "out_end_id": "end_id",
    "out_pad_id": "pad_id",
}

# Model names in the repository.
PREPROCESSING, ENGINE, POSTPROCESSING, ENSEMBLE = "preprocessing", "tensorrt_llm", "postprocessing", "ensemble"
BACKEND = "tensorrt_llm_cpp"  # tensorrtllm layout: the C++ TensorRT-LLM backend model behind the relay
UNARY_SUFFIX = "_unary"


def by_name(tensors: list[Tensor]) -> dict[str, Tensor]:
    return {t.name: t for t in tensors}


# --- the error vocabulary: what an error means, carried across hops by its message ---------------
# Errors cross BLS, the ensemble and HTTP as messages (Triton 2.51 hands a BLS caller every error as
# INTERNAL, and its generate endpoint answers every model error with 400), so the message itself is
# the wire contract, like a tensor name: these markers are written here once, errors.classify() is the
# only reader, and the HAProxy config renders its retry rule from them. Renaming one is a contract change.
class ErrorKind(str, Enum):
    INVALID_ARGUMENT = "invalid_argument"  # the client's fault; names the field. Never retried.
    BUSY = "busy"  # no room now (a full queue): another server may have some
    UNAVAILABLE = "unavailable"  # this server cannot serve (engine failed, stub dead, shutting down)
    TIMEOUT = "timeout"  # serving.request_timeout_s ran out: retrying would double the wait
    CANCELLED = "cancelled"  # the client (or a stop request) ended it
    INTERNAL = "internal"  # anything else: a bug, logged where it happened


# Message prefixes our own code writes: "<prefix>: <detail>" (RequestError: "invalid <field>: <problem>").
BUSY_PREFIX = "server busy"
UNAVAILABLE_PREFIX = "engine unavailable"
TIMEOUT_PREFIX = "timeout"
CANCELLED_MESSAGE = "cancelled"
# Substrings of Triton's own messages with the same meaning.
TRITON_QUEUE_FULL = "Exceeds maximum queue size"  # dynamic batcher's max_queue_size
TRITON_STUB_DEAD = "is not healthy"  # "Stub process '<model>' is not healthy."
# Triton's own input validation (core's infer_request.cc). A client hitting a model directly gets
# INVALID_ARG for these; over BLS (the unary twins) the code is lost, so the message must say it.
TRITON_INVALID_INPUT = (
    "missing required input",
    "unexpected inference input",
    "unexpected shape for input",
    "input byte size mismatch",
    "data-type is '",
)

# kind -> substrings that mark it anywhere in a message (a model or the ensemble may prefix its name).
ERROR_MARKERS: dict[ErrorKind, tuple[str, ...]] = {
    ErrorKind.BUSY: (f"{BUSY_PREFIX}:", TRITON_QUEUE_FULL),
    ErrorKind.UNAVAILABLE: (f"{UNAVAILABLE_PREFIX}:", TRITON_STUB_DEAD),
    ErrorKind.TIMEOUT: (f"{TIMEOUT_PREFIX}: ",),
    ErrorKind.INVALID_ARGUMENT: TRITON_INVALID_INPUT,  # ours are "invalid <field>: " (errors.RequestError)
}
