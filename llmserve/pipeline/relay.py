"""The token relay: the `tensorrt_llm` step of the tensorrtllm layout, in front of the C++ backend model.

TensorRT-LLM's backend streams each response's new tokens and nothing else: no tokens before them
(`output_context_ids`), no per-request key. Postprocessing, called once per response as a new request,
possibly on another instance, cannot keep per-stream state, so chunks decoded alone lose characters
split across chunks and SentencePiece spaces. The relay is one request for the whole stream: it calls
the backend with streaming on, as an HTTP or gRPC client of its own server (pipeline/backend_http.py,
backend_grpc.py; not BLS: decoupled BLS deadlocks a stub whose several threads iterate it), the backend
request's id being the request's key, so a `stop` reaches it from any relay instance; and it gives the
ensemble exactly the torch engine's token-level contract:

- `output_context_ids` with each chunk (the last CONTEXT_TOKENS tokens before it), so postprocessing
  detokenizes every chunk exactly, stateless, the same way for both engines;
- stop words as token sequences (the default, upstream's way) are the backend's own: stop_words_list is
  forwarded. Matched on text (stop_words_match "text", the OpenAI frontend's choice), the relay does it
  (StopMatcher): text that may grow into a stop word is held back; on a match the stop word's tokens
  are dropped and the backend request is stopped (`stop` input, same request id);
- a non-streaming request is streamed from the backend too (so stop words end it early) and answered
  once; the prompt comes first unless exclude_input_in_output;
- log probs passed through when the backend sends them (return_log_probs), never invented; top log-probs
  (num_top_log_probs) computed from the backend's generation_logits (pipeline/top_logprobs.py).

`RelayStream` is one stream's state, Triton-free; `Relay` runs a request (a thread per request)
with the Triton utils module passed in, so the model.py adapter only hands requests over."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from ..contract import ECHO_IDS, GENERATION_LOGITS, REQUEST_KEY, STOP_WORDS_MATCH, TOP_LOG_PROBS, ErrorKind
from ..errors import RequestError, triton_error
from ..logs import request_context
from ..request.token_request import EngineRequest, parse_engine_request
from ..text.stop_words import StopMatcher
from . import top_logprobs
from .backend_grpc import Backend
from .backend_http import HttpBackend
from .cancellation import NO_REQUEST_ID, PollThrottle, key_tensor, request_key
from .options import RelayOptions
from .stream_output import TokenStream
from .triton_glue import error_response, reader, tensors

log = logging.getLogger(__name__)

# Inputs the relay does not forward: it always streams from the backend and applies
# exclude_input_in_output itself; decoder_input_ids is checked (request/token_request.py) and means "no
# decoder input" for the decoder-only models served here; our request_key, stop_words_match and echo_ids
# are not the backend's (the key is the backend request's id, and the relay echoes the prompt itself). stop_words_list goes to the backend only
# when its words match as token sequences (the relay matches text stop words itself).
NOT_FORWARDED = (
    "streaming",
    "exclude_input_in_output",
    "stop",
    "decoder_input_ids",
    REQUEST_KEY,
    STOP_WORDS_MATCH,
    ECHO_IDS,
    TOP_LOG_PROBS,
)
BACKEND_OUTPUTS = ["output_ids", "sequence_length", "cum_log_probs", "output_log_probs"]


@dataclass
class RelayStream:
    req: EngineRequest
    tokenizer: object
    skip_special_tokens: bool = True
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: tuple[list, list] = field(default_factory=lambda: ([], []))  # per generated token: top ids, log-probs
    has_logprobs: bool = False
    released: int = 0  # generated tokens handed on
    stopped: bool = False  # a stop word matched: the backend request must be stopped
    error: str | None = None  # the backend answered with an error

    def __post_init__(self):
        words = self.req.params.stop_words
        self.matcher = StopMatcher(self.tokenizer, words, self.skip_special_tokens) if words else None
        echo = self.req.prompt if self.req.echo is None else self.req.echo
        self.out = TokenStream(echo, self.req.exclude_input_in_output, self.req.params.top_logprobs)

    def push(
        self,
        tokens: list[int],
        logprobs: list[float] | None,
        top: tuple[list, list] | None = None,
        release: bool = True,
    ) -> dict[str, np.ndarray] | None:
        """One backend response. Returns the chunk to stream now (streaming requests), or None.
        `top`: each token's alternatives (ids, log-probs), when the request asked for them. With
        release False the tokens are only held (coalesced into the next chunk that is released)."""
        if self.stopped:
            return None
        if logprobs is not None:
            self.has_logprobs = True
        for i, tok in enumerate(tokens):
            self.generated.append(tok)
            self.logprobs.append(float(logprobs[i]) if logprobs is not None and i < len(logprobs) else 0.0)
            if top is not None:
                self.top[0].append(top[0][i])
                self.top[1].append(top[1][i])
            if self.matcher is not None and (keep := self.matcher.push(tok)) is not None:
                del self.generated[keep:]
                del self.logprobs[keep:]
                del self.top[0][keep:], self.top[1][keep:]
                self.stopped = True
                break
        if not self.req.streaming or not (release or self.stopped):
            return None
        safe = len(self.generated) if (self.stopped or self.matcher is None) else self.matcher.safe_tokens()
        return self._release(safe, final=False)

    def finish(self) -> dict[str, np.ndarray] | None:
        """The backend's stream ended (or was stopped): the last chunk, or the whole answer."""
        return self._release(len(self.generated), final=True)

    def _release(self, upto: int, final: bool) -> dict[str, np.ndarray] | None:
        chunk = self.out.chunk(
            self.generated[self.released : upto],
            self.logprobs[self.released : upto],
            final,
            with_logprobs=self.has_logprobs,
            top=(self.top[0][self.released : upto], self.top[1][self.released : upto]),
        )
        self.released = upto
        return chunk


def backend_tokens(output_ids: np.ndarray, sequence_length: np.ndarray) -> list[int]:
    """Beam 0 of one backend response: output_ids [1, beams, n], sequence_length [1, beams]."""
    n = int(np.asarray(sequence_length).reshape(-1)[0])
    return [int(t) for t in np.asarray(output_ids).reshape(-1)[:n]]


class FinalResponse:
    """A response sender for non-decoupled execution: keeps the final response of one request."""

    def __init__(self, pb):
        self.pb, self.last, self.response = pb, None, None

    def send(self, response=None, flags=0):
        if response is not None:
            self.last = response
        if flags & self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.response = self.last or self.pb.InferenceResponse(output_tensors=[])


# A backend response that took longer than this to come had to be waited for (the stream's buffer was
# empty); a faster one was already buffered (see Relay._pump).
WAITED_S = 0.0005


class Relay:
    """The tensorrt_llm model of the tensorrtllm layout. Each request is served start to end on a
    thread of its own: it iterates the backend's streamed responses and sends what its RelayStream
    returns, at most one chunk per `stream_interval_ms` (the responses in between are coalesced), each
    send synchronous on the request's own thread (no queue that could grow). The backend request's id
    is the request's key (the id a `stop` names), so a `stop` that lands on any relay instance reaches
    it: the relay forwards it to the backend by the same id. `pb`: triton_python_backend_utils."""

    def __init__(
        self,
        pb,
        opts: RelayOptions,
        tokenizer,
        decoupled: bool,
        clock=time.monotonic,
        sleep=time.sleep,
        backend: Backend | None = None,
    ):
        self.pb, self.opts, self.tok, self.decoupled, self.clock = pb, opts, tokenizer, decoupled, clock
        self.sleep = sleep
        # this server's own endpoint (backend_grpc, backend_http: not BLS)
        self.backend = backend or (HttpBackend() if opts.backend_transport == "http" else Backend())
        self.target = opts.target_model
        self.vocab = top_logprobs.model_vocab_size(opts.tokenizer_dir)  # cuts generation_logits' padding
        self.interval_s = opts.stream_interval_ms / 1000

    def execute(self, requests):
        """Decoupled: hand each request to its thread and return None. Otherwise (serving.streaming:
        false): wait for every request of the batch and return their final responses."""
        if self.decoupled:
            for request in requests:
                threading.Thread(target=self.serve, args=(request, request.get_response_sender()), daemon=True).start()
            return None
        senders = [FinalResponse(self.pb) for _ in requests]
        threads = [threading.Thread(target=self.serve, args=(r, s)) for r, s in zip(requests, senders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [s.response for s in senders]

    def serve(self, request, sender) -> None:
        pb, final = self.pb, self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        read = reader(request)
        outer = request.request_id()
        stop = read("stop")
        if stop is not None and bool(stop.reshape(-1)[0]):
            return self._forward_stop(outer, sender)
        try:
            outer = request_key(read, outer)  # the id a `stop` names: the ensemble's key, else the request id
            echo = {REQUEST_KEY: key_tensor(outer)} if read(REQUEST_KEY) is not None else {}
            req = parse_engine_request(
                read,
                vocab_size=self.tok.get_vocab_size(),
                default_end_ids=(),
                max_input_len=self.opts.max_input_len,
                max_output_len=self.opts.max_output_len,
                exclude_default=self.opts.exclude_input_in_output,
                decode_word=lambda ids: self.tok.decode(ids, skip_special_tokens=False),
            )
            # Top log-probs come from generation_logits: refused (not ignored) on an engine without them.
            top_logprobs.check_enabled(req.params.top_logprobs, self.opts.gather_generation_logits)
        except RequestError as e:
            return sender.send(error_response(pb, e), flags=final)
        if not self.decoupled:
            req.streaming = False  # one answer per request (serving.streaming: false)
        # The key itself, so that a `stop` for it reaches the backend from whichever relay instance it
        # lands on; without a key no `stop` can name the request, and a unique id serves.
        inner_id = outer or f"relay-{uuid.uuid4().hex}"
        with request_context(outer or None):
            try:
                self._relay(request, req, inner_id, sender, echo)
            except Exception as e:  # the backend call or a send failed: never leave the client waiting
                log.exception("relay request %s failed", inner_id)
                with contextlib.suppress(Exception):  # (fails if the final response went out already)
                    sender.send(
                        pb.InferenceResponse(error=triton_error(pb, f"relay: {e}", ErrorKind.INTERNAL)), flags=final
                    )

    def _relay(self, request, req: EngineRequest, inner_id: str, sender, echo: dict) -> None:
        """echo: tensors sent back with every chunk (the request_key, for postprocessing's stop)."""
        pb, final = self.pb, self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        # Only the outputs the client asked for: an unrequested tensor handed to a decoupled sender
        # kills a Python 3.12 stub (triton_glue.tensors).
        wanted = set(request.requested_output_names())
        skip = NOT_FORWARDED if req.params.stop_sequences else (*NOT_FORWARDED, "stop_words_list")
        inputs = [(t.name(), t.as_numpy()) for t in request.inputs() if t.name() not in skip]
        inputs.append(("streaming", np.array([[True]], dtype=np.bool_)))
        k = req.params.top_logprobs
        if top_logprobs.return_generation_logits(k):
            inputs.append((top_logprobs.RETURN_GENERATION_LOGITS, np.array([[True]], dtype=np.bool_)))
        stream = RelayStream(req, self.tok, self.opts.skip_special_tokens)
        # The client went away: only seen when the relay is the top-level request (a direct gRPC client
        # of tensorrt_llm); through the ensemble, postprocessing's stop arrives instead.
        polls = PollThrottle.from_ms(self.opts.cancellation_check_period_ms, clock=self.clock)
        polls.start()
        responses = self.backend.stream(
            self.target, inputs, BACKEND_OUTPUTS + top_logprobs.backend_outputs(k), inner_id
        )
        try:
            self._pump(responses, stream, sender, polls, inner_id, wanted, echo, k)
        finally:
            # At once, also when a send failed: a stream left open holds its request in Triton.
            responses.close()
        if stream.error is not None:
            return sender.send(self._error(stream.error), flags=final)
        chunk = stream.finish()
        # The relay's line per request (Triton's verbose level, as the torch engine's): the backend's id.
        log.debug(
            "finished: %d prompt + %d generated tokens%s, backend request %s",
            len(req.prompt),
            len(stream.generated),
            " (stop word)" if stream.stopped else "",
            inner_id,
        )
        if chunk is None:
            return sender.send(flags=final)
        sender.send(pb.InferenceResponse(output_tensors=tensors(pb, {**chunk, **echo}, wanted)), flags=final)

    def _pump(
        self, responses, stream: RelayStream, sender, polls: PollThrottle, inner_id: str, wanted, echo, k: int
    ) -> None:
        """Reads the backend's responses to its final one (a stopped stream too: the stop's answer is
        read, not sent) and streams the chunks: at most one per interval.

        With an interval the thread sleeps after each send until the next chunk is due, then reads what
        the backend sent meanwhile (already buffered by grpc: returned at once) and sends when a response
        had to be waited for: one wake-up per chunk, not per token."""
        pb, interval, clock, sent_at, stopping = self.pb, self.interval_s, self.clock, None, False
        asked = clock()
        for response in responses:
            now = clock()
            waited, asked = now - asked >= WAITED_S, now
            if stopping:
                continue  # stopped: the backend's remaining responses (its final one) are read, not sent
            if response.has_error():
                stream.error, stopping = response.error().message(), True
                continue
            ids = pb.get_output_tensor_by_name(response, "output_ids")
            if ids is None:
                continue  # the backend's empty final response
            lengths = pb.get_output_tensor_by_name(response, "sequence_length").as_numpy()
            lp = pb.get_output_tensor_by_name(response, "output_log_probs")
            tokens = backend_tokens(ids.as_numpy(), lengths)
            top = None
            if k:
                logits = pb.get_output_tensor_by_name(response, GENERATION_LOGITS)
                top = top_logprobs.top_from_logits(
                    None if logits is None else logits.as_numpy(), len(tokens), k, self.vocab
                )
            due = not interval or sent_at is None or (waited and now - sent_at >= interval)
            lps = None if lp is None else lp.as_numpy().reshape(-1)[: len(tokens)].tolist()
            chunk = stream.push(tokens, lps, top, release=due)
            if chunk is not None:
                sender.send(pb.InferenceResponse(output_tensors=tensors(pb, {**chunk, **echo}, wanted)))
                sent_at = now
            if stream.stopped or (hasattr(sender, "is_cancelled") and polls.due() and sender.is_cancelled()):
                self._stop(inner_id)
                stopping = True
            elif interval and chunk is not None and (rest := sent_at + interval - clock()) > 0:
                self.sleep(rest)  # what comes meanwhile waits in the iterator's buffer
            asked = clock()

    def _stop(self, request_id: str) -> bool:
        """Upstream's stop-by-id to the backend. Never raises: a stop that fails leaves the generation
        to end by itself."""
        try:
            ok = self.backend.stop(self.target, request_id)
            if not ok:
                log.warning("stop %r on %s was answered with an error", request_id, self.target)
            return ok
        except Exception as e:
            log.warning("stop %r on %s failed: %s", request_id, self.target, e)
            return False

    def _error(self, message: str):
        """A backend error, as it comes back in the stream (its message only): its code restored from its kind
        (errors.classify: a client error INVALID_ARG, busy / unavailable / timeout UNAVAILABLE, a cancel
        CANCELLED)."""
        return self.pb.InferenceResponse(error=triton_error(self.pb, message))

    def _forward_stop(self, outer: str, sender) -> None:
        """A `stop` for a request id: forwarded to the backend by the same id (the backend requests are
        keyed by it), whichever relay instance serves the generation."""
        pb, final = self.pb, self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not outer:
            return sender.send(pb.InferenceResponse(error=pb.TritonError(NO_REQUEST_ID)), flags=final)
        self._stop(outer)
        sender.send(flags=final)
