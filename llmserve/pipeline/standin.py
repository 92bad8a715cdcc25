"""A stand-in for TensorRT-LLM's C++ Triton backend, for CI machines without a GPU.

It serves the `tensorrt_llm_cpp` model of the tensorrtllm repository layout (the config the generator
writes for the C++ backend, with `backend: "python"`) and behaves as the C++ backend does at its tensor
interface (trtllm/upstream.py, model_instance_state.cc / utils.cc of TensorRT-LLM 1.1.0):

- parameters read through the upstream table: a required key missing fails the load with the backend's
  message ("Cannot find parameter with name: <key>");
- one response per new token when streaming (never the prompt), one response with the whole output
  otherwise (the prompt first unless exclude_input_in_output);
- output_ids [1, beams, n] and sequence_length [1, beams] (n of *this* response) always;
  cum_log_probs / output_log_probs only when the request sets return_log_probs; no output_context_ids;
- stop and bad words at the token level (each word's ids as a sequence); a stop word ends the request
  with its tokens in the output;
- the `stop` input cancels every request with the same Triton request id (pipeline/cancellation.py);
- guided decoding (`guided_decoding_guide_type` / `guided_decoding_guide`) when the config sets
  `guided_decoding_backend: xgrammar` and an existing `xgrammar_tokenizer_info_path`: xgrammar's
  tokenizer info is read from that file, as the backend does, and the guide enforced by the torch
  engine's code (engine/guided.py); without them a guided request is refused;
- generation_logits only when the request sets return_generation_logits, shaped as the backend sends them
  (streaming [1, new tokens, beams, vocab] per response, else [1, beams, request_output_len, vocab] with
  the rows past the output left zero), the torch engine's own logits of each generated token; on an
  engine built without gather_generation_logits (the engine's config.json at gpt_model_path, else the
  spec's engine.tensorrtllm.gather_generation_logits, a stand-in parameter) such a request fails with
  the executor's assertion;
- the backend's checks and messages for bad input (all TRITONSERVER_ERROR_INTERNAL).

Generation itself is llmserve's torch engine (in-flight batching), so the numbers are the torch
engine's, not TensorRT-LLM's. Triton-free: the model.py adapter passes tensors in and `send` out
(triton_glue.StreamSender); `StandinStream` turns the engine's callbacks into the backend's responses.

Responses leave from send threads, never from the engine thread (`Standin.sends`, engine.torch.send_threads
of them), as the C++ backend's leave from its own response thread (model_instance_state.cc
WaitForResponse), not from the executor's step: a Python send is an IPC round trip of 110-150 us, and 128
streams sending every token synchronously from the engine thread held the step to ~38 ms (docs/perf-gpu.md).
Unlike the torch engine, nothing is coalesced while a send is backlogged: the backend answers every token
with a response of its own, and so does the stand-in. The queue holds at most two steps' responses, then the
engine thread waits: the C++ backend's sends keep up with any engine, the stand-in's (one Python stub, 6-9k
responses/s on the H200) do not, and an unbounded queue grew every stream's latency with the backlog."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..contract import GENERATION_LOGITS
from ..engine.sampling import SamplingParams, trtllm_top_k_top_p
from ..engine.sequence import Sequence
from ..errors import RequestError
from ..finish import FinishReason
from ..request.guided import Guide, read_guide
from ..request.word_lists import from_word_list
from ..text.stop_words import ends_with_any
from ..trtllm import upstream as U
from .cancellation import CancelRegistry
from .engine_service import EngineService, Send
from .options import EngineOptions
from .stream_output import token_outputs
from .triton_glue import SendQueue

STANDIN_PREFIX = U.STANDIN_PREFIX


class BackendError(RuntimeError):
    """What the C++ backend answers with TRITONSERVER_ERROR_INTERNAL."""


def assertion(expr: str) -> BackendError:
    return BackendError(f"[TensorRT-LLM][ERROR] Assertion failed: {expr}")


# --- load --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackendParams:
    exclude_input_in_output: bool
    max_beam_width: int
    gpt_model_path: str
    standin: dict[str, str]
    xgrammar_tokenizer_info_path: str = ""  # set: guided decoding is on (guided_decoding_backend xgrammar)


def read_parameters(params: dict[str, str]) -> BackendParams:
    """The C++ backend's parameter reads that decide whether it loads, and what the stand-in uses."""
    for name, p in U.PARAMETERS.items():
        if p.required and name not in params:
            raise BackendError(
                f"unexpected error when creating modelInstanceState: Cannot find parameter with name: {name}"
            )
    if "worker_path" in params:
        raise BackendError(
            "worker_path parameter is specified, but this is no longer supported. Please specify "
            "executor_worker_path instead to specify the location of the trtllmExecutorWorker "
            "executable."
        )
    if params["gpt_model_type"] not in U.PARAMETERS["gpt_model_type"].accepted:
        raise BackendError("Invalid gpt_model_type. Must be v1/inflight_batching/inflight_fused_batching.")
    backend, info = params["guided_decoding_backend"], params["xgrammar_tokenizer_info_path"]
    if backend and info and backend != "xgrammar":
        raise BackendError(
            "Guided decoding is currently supported with 'xgrammar' backend. Invalid "
            "guided_decoding_backend parameter provided."
        )

    def optional_bool(name: str) -> bool:
        try:
            return U.parse_bool(params[name])
        except (KeyError, ValueError):  # the backend warns and uses the default
            return U.parse_bool(U.PARAMETERS[name].default)

    try:
        beam = int(params.get("max_beam_width", "1"))
    except ValueError:
        beam = 1
    return BackendParams(
        exclude_input_in_output=optional_bool("exclude_input_in_output"),
        max_beam_width=beam,
        gpt_model_path=params["gpt_model_path"],
        # The backend builds its guided-decoding config only with both set (getGuidedDecodingConfigFromParams).
        xgrammar_tokenizer_info_path=info if backend and info else "",
        standin={k[len(STANDIN_PREFIX) :]: v for k, v in params.items() if k.startswith(STANDIN_PREFIX)},
    )


# --- requests ----------------------------------------------------------------------------------------

Reader = Callable[[str], "np.ndarray | None"]


@dataclass
class BackendRequest:
    prompt: list[int]
    max_new_tokens: int
    streaming: bool
    exclude_input_in_output: bool
    return_log_probs: bool
    params: SamplingParams
    stop_words: list[list[int]]
    guide: Guide | None = None
    return_generation_logits: bool = False


def _scalar(read: Reader, name: str):
    arr = read(name)
    if arr is None:
        return None
    if arr.size != 1:
        raise BackendError(f"Invalid size for tensor {name}")
    return arr.reshape(-1)[0]


def _word_list(read: Reader, name: str) -> list[list[int]]:
    arr = read(name)
    if arr is None:
        return []
    try:
        return [w for w in from_word_list(arr) if w]
    except ValueError as e:
        raise BackendError(f"Sparse list is malformed: {e}") from None


def parse_request(
    read: Reader,
    *,
    decoupled: bool,
    exclude_default: bool,
    max_input_len: int,
    max_seq_len: int,
    vocab_size: int,
    max_beam_width: int,
    default_end_ids: tuple[int, ...],
) -> BackendRequest:
    """utils.cc createRequestsFromInputTensors + the executor's checks (samplingConfig.cpp,
    LlmRequest::validate), in their order and with their messages."""
    streaming = bool(_scalar(read, "streaming") or False)
    ids = read("input_ids")
    if ids is None:
        raise BackendError("input_ids or encoder_input_features is not present in the request.")
    if ids.ndim == 2 and ids.shape[0] > 1 and not decoupled:
        raise BackendError("Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy")
    if ids.ndim == 2 and ids.shape[0] > 1:  # ours: the backend splits the batch into requests
        raise BackendError("the stand-in serves one sequence per request (batch size 1)")
    if streaming and not decoupled:
        raise BackendError("Streaming is only supported if model is deployed using decoupled mode.")
    prompt = [int(t) for t in ids.reshape(-1)]
    max_new = _scalar(read, "request_output_len")
    if max_new is None:
        raise BackendError("request_output_len is not present in the request")
    exclude = _scalar(read, "exclude_input_in_output")
    exclude = exclude_default if exclude is None else bool(exclude)

    beam = _scalar(read, "beam_width")
    beam = 1 if beam is None else int(beam)
    if not 0 < beam <= 1024:
        raise assertion(
            "beamWidth > 0 && beamWidth <= static_cast<SizeType32 const>(tensorrt_llm::kernels::kMaxBeamWidth)"
        )
    if beam > 1:  # ours: the stand-in has no beam search (the spec's max_beam_width is 1)
        raise BackendError(f"the stand-in serves beam width 1 only, got {beam} (max_beam_width {max_beam_width})")
    top_k = _scalar(read, "runtime_top_k")
    if top_k is not None and int(top_k) < 0:
        raise assertion("topK.value() >= 0")
    top_p = _scalar(read, "runtime_top_p")
    top_p = None if top_p is None or float(top_p) <= 0 else float(top_p)  # <= 0 means unset (utils.cc)
    if top_p is not None and top_p > 1:
        raise assertion("topP.value() <= 1.f")
    temperature = _scalar(read, "temperature")
    if temperature is not None and float(temperature) < 0:
        raise assertion("temperature.value() >= 0.f")
    min_tokens = _scalar(read, "min_tokens")
    if min_tokens is not None and int(min_tokens) < 0:
        raise assertion("minTokens.value() >= 0")
    rep = _scalar(read, "repetition_penalty")
    if rep is not None and float(rep) <= 0:
        raise assertion("repetitionpenalty.value() > 0.f")
    end_id = _scalar(read, "end_id")
    if end_id is not None and not -1 <= int(end_id) < vocab_size:
        raise BackendError(f"EndId ({int(end_id)}) is not within acceptable range [-1, {vocab_size}).")
    if len(prompt) > max_input_len:
        raise BackendError(
            f"Prompt length ({len(prompt)}) exceeds maximum input length ({max_input_len}). Set log "
            "level to info and check TRTGptModel logs for how maximum input length is set"
        )
    max_new = min(int(max_new), max_seq_len - len(prompt))  # the executor clamps, with a warning
    seed = _scalar(read, "seed")
    try:
        guide = read_guide(read)
    except RequestError as e:  # the executor refuses these too; its exact wording is not known here
        raise BackendError(f"Invalid guided decoding parameters: {e}") from None
    # The sampling layers' rule (unset = 0): top_k == 0 and top_p == 0 is greedy, top_k alone is top-k.
    top_k, top_p = trtllm_top_k_top_p(int(top_k or 0), top_p or 0.0)
    params = SamplingParams(
        top_k=top_k,
        top_p=top_p,
        max_new_tokens=max_new,
        end_ids=(int(end_id),) if end_id is not None and int(end_id) >= 0 else default_end_ids,
        temperature=float(temperature) if temperature is not None else 0.0,
        repetition_penalty=float(rep) if rep is not None else 1.0,
        presence_penalty=float(_scalar(read, "presence_penalty") or 0.0),
        frequency_penalty=float(_scalar(read, "frequency_penalty") or 0.0),
        min_tokens=int(min_tokens or 0),
        seed=int(seed) if seed is not None else None,
        bad_words=_word_list(read, "bad_words_list"),
    )
    return BackendRequest(
        prompt=prompt,
        max_new_tokens=max_new,
        streaming=streaming,
        exclude_input_in_output=exclude,
        return_log_probs=bool(_scalar(read, "return_log_probs") or False),
        params=params,
        stop_words=_word_list(read, "stop_words_list"),
        guide=guide,
        return_generation_logits=bool(_scalar(read, "return_generation_logits") or False),
    )


class StandinStream:
    """One request's responses, as the C++ backend sends them: one per new token when streaming (the
    last carries FINAL, or an empty final follows when the stream ends without a new token), else one
    with the whole output. Stop words end the request with their tokens in the output. `cancel()` is the
    `stop` input (or a stop word): the engine frees the slot at its next step and the request ends with
    what it has (an empty final when streaming), not with a CANCELLED error."""

    def __init__(self, req: BackendRequest, send: Send, on_done: Callable[[], object] = lambda: None):
        self.req, self.send, self.on_done = req, send, on_done
        self.lock = threading.Lock()
        self.done = self.stopped = False
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.cum = 0.0
        self.seq: Sequence | None = None  # the engine's sequence: its gen_logits (return_generation_logits)

    def cancel(self) -> None:
        self.stopped = True

    def on_output(
        self, seq: Sequence, tokens: list[int], logprobs: list[float], finished: bool, reason: FinishReason | None
    ) -> None:
        with self.lock:
            if self.done:
                return
            if reason is FinishReason.CANCELLED and not self.stopped:
                return self._finish(None, FinishReason.CANCELLED, "Request was cancelled")
            if reason in (FinishReason.ERROR, FinishReason.TIMEOUT):  # the backend answers INTERNAL
                return self._finish(
                    None,
                    FinishReason.ERROR,
                    f"Executor failed process requestId {seq.id} due to "
                    f"the following error: {seq.error or reason.value}",
                )
            want = self.req.return_log_probs
            self.seq = seq
            for i, (tok, lp) in enumerate(zip(tokens, logprobs)):
                row = len(self.tokens)  # this token's index in seq.generated (the engine matches no stop words)
                self.tokens.append(tok)
                self.logprobs.append(lp)
                self.cum += lp
                hit = ends_with_any(self.tokens, self.req.stop_words)
                if self.req.streaming:
                    out = token_outputs([tok], [lp] if want else None, self.cum)
                    if self.req.return_generation_logits:  # [1, new tokens, beams, vocab]
                        logits = seq.gen_logits[row]
                        seq.gen_logits[row] = None  # sent: a long stream keeps no vocab-sized rows
                        out[GENERATION_LOGITS] = logits.astype(np.float32).reshape(1, 1, 1, -1)
                    if hit or (finished and i == len(tokens) - 1):
                        if hit:
                            self.cancel()
                        return self._finish(out)
                    self.send(out, False, None, None)
                elif hit:
                    self.cancel()
                    return self._finish(self._whole())
            if finished:
                # Streaming: ended on the end token (or was stopped) with no new token to carry the
                # flag: an empty final response, as the backend sends.
                return self._finish(None if self.req.streaming else self._whole())

    def _whole(self) -> dict[str, np.ndarray]:
        prefix = [] if self.req.exclude_input_in_output else self.req.prompt
        lps = [0.0] * len(prefix) + self.logprobs
        out = token_outputs(prefix + self.tokens, lps if self.req.return_log_probs else None, self.cum)
        if self.req.return_generation_logits:
            out[GENERATION_LOGITS] = self._all_logits()
        return out

    def _all_logits(self) -> np.ndarray:
        """Non-streaming generation_logits: [1, beams, request_output_len, vocab], as the executor's
        buffer for the whole request; rows past the generated tokens stay zero (the executor never
        writes them)."""
        rows = [r for r in (self.seq.gen_logits if self.seq is not None else []) if r is not None]
        vocab = rows[0].shape[-1] if rows else 0
        out = np.zeros((1, 1, self.req.max_new_tokens, vocab), dtype=np.float32)
        for i, r in enumerate(rows[: len(self.tokens)]):
            out[0, 0, i] = r
        return out

    def _finish(self, outputs, failure: FinishReason | None = None, message: str | None = None) -> None:
        self.done = True
        self.on_done()
        self.send(outputs, True, failure, message)


def gathers_generation_logits(backend: BackendParams) -> bool:
    """Whether the engine was built with gather_generation_logits, as TensorRT-LLM reads it from the
    engine's config.json (build_config); without a built engine (CI), the spec's value that the
    generator passes as a stand-in parameter."""
    config = Path(backend.gpt_model_path) / "config.json"
    if config.is_file():
        return bool(json.loads(config.read_text()).get("build_config", {}).get("gather_generation_logits"))
    return U.parse_bool(backend.standin.get("gather_generation_logits", "false"))


class Standin:
    """The stand-in model: loads as the C++ backend would (`params`: its config parameters), serves
    requests on llmserve's torch engine, and cancels by Triton request id."""

    def __init__(self, params: dict[str, str], resolve: Callable[[str], str], decoupled: bool):
        self.backend = read_parameters(params)  # fails the load as the C++ backend would
        self.decoupled = decoupled
        self.gathers_generation_logits = gathers_generation_logits(self.backend)
        info = self.backend.xgrammar_tokenizer_info_path
        if info and not Path(info).is_file():  # the backend checks the path it is given exists
            raise BackendError(f"Tokenizer info file {info} does not exist")
        # The same guided decoding as the torch engine (engine/guided.py), on the tokenizer info the
        # C++ backend reads from the file the build wrote.
        # The engine on this stub's thread, whatever engine.torch.engine_process says: the bounded send
        # queue below blocks whoever hands it a response, and with the engine in a process of its own that
        # is the thread that also reads the engine's answers to new requests, so every new request waited
        # behind the backlog (TTFT 0.78-2.2 s instead of 0.1 s on the H200, docs/perf-gpu.md).
        opts = replace(EngineOptions.from_params(self.backend.standin, resolve), engine_process="false")
        self.service = EngineService(opts, info or None)
        self.engine = self.service.engine
        self.active = CancelRegistry()
        # The backend's response thread: the adapter's StreamSenders queue their responses here, at most
        # two steps' worth (a response per slot per step) before the engine thread waits for the sends.
        opts = self.service.opts
        self.sends = SendQueue(opts.send_threads, max_pending=2 * opts.max_batch_size)

    def parse(self, read: Reader) -> BackendRequest:
        opts, model = self.service.opts, self.service.cfg
        req = parse_request(
            read,
            decoupled=self.decoupled,
            exclude_default=self.backend.exclude_input_in_output,
            max_input_len=opts.max_input_len,
            max_seq_len=opts.max_input_len + opts.max_output_len,
            vocab_size=model.vocab_size,
            max_beam_width=self.backend.max_beam_width,
            default_end_ids=tuple(model.eos_token_ids),
        )
        if req.return_generation_logits:
            if not self.gathers_generation_logits:  # the executor's check when it schedules the request
                raise BackendError(U.GATHER_GENERATION_LOGITS_ERROR)
            req.params.return_logits = True
        if req.guide is not None:
            if not self.backend.xgrammar_tokenizer_info_path:  # ours: the executor's wording is not known
                raise BackendError(
                    "guided decoding is not configured (guided_decoding_backend and xgrammar_tokenizer_info_path)"
                )
            try:
                req.params.grammar = self.service.compile(req.guide)
            except RequestError as e:
                raise BackendError(f"Invalid guided decoding parameters: {e}") from None
        return req

    def stop(self, triton_id: str) -> None:
        """`stop` = true: cancel every request with this id; an unknown id is not an error (it may
        have finished already), a missing one is (the backend's message)."""
        self.active.stop(triton_id)

    def submit(self, req: BackendRequest, send: Send, is_cancelled: Callable[[], bool], triton_id: str) -> None:
        stream = StandinStream(req, send, on_done=lambda: self.active.remove(triton_id, stream.cancel))
        self.active.add(triton_id, stream.cancel)
        try:
            # Always streamed inside: stop words are matched token by token, as the executor does. The
            # engine throttles is_cancelled() itself (one poll of every request per period).
            self.engine.submit(
                Sequence(
                    prompt=req.prompt,
                    params=req.params,
                    on_output=stream.on_output,
                    streaming=True,
                    is_cancelled=lambda: stream.stopped or is_cancelled(),
                )
            )
        except Exception:  # refused (a full queue): it never runs, so it must not stay registered
            self.active.remove(triton_id, stream.cancel)
            raise

    def shutdown(self) -> None:
        self.service.shutdown()
        self.sends.close()  # what the engine's last callbacks queued goes out first
