"""What the tensorrt_llm (torch) model.py runs: builds the engine from the config parameters and
turns engine callbacks into token-level output tensors (stream_output.TokenStream). Triton-free:
the adapter passes `send`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..contract import CANCELLED_MESSAGE, TIMEOUT_PREFIX
from ..engine import guided
from ..engine.llama import pick_device
from ..engine.sequence import Sequence
from ..errors import RequestError
from ..finish import FinishReason
from ..request.guided import GUIDE, Guide
from ..request.reader import Reader
from ..request.token_request import EngineRequest, parse_engine_request
from ..text.tokenizer import load_fast
from .cancellation import CancelRegistry
from .engine_build import build_engine
from .engine_process import EngineProcess
from .options import EngineOptions, parse_bool
from .stream_output import TokenStream

# send(outputs or None, final, finish reason when the request failed or None, message or None)
Send = Callable[["dict[str, np.ndarray] | None", bool, "FinishReason | None", "str | None"], None]


def separate_process(opts: EngineOptions) -> bool:
    """engine.torch.engine_process: "auto" runs the engine in a process of its own when its model runs
    on a GPU (engine.torch.device cuda, or auto with one visible)."""
    if opts.engine_process == "auto":
        return pick_device(opts.device).type == "cuda"
    return parse_bool(opts.engine_process)


class EngineService:
    def __init__(self, opts: EngineOptions, tokenizer_info_path: str | None = None):
        """The engine runs on a thread of this process, or with engine_process in a process of its own
        (pipeline/engine_process.py); either way it is built by engine_build.build_engine, where
        tokenizer_info_path (the stand-in's xgrammar tokenizer info) is explained."""
        self.opts = opts
        if separate_process(opts):
            self.engine = EngineProcess(opts, tokenizer_info_path)
            self.cfg, self.grammars = self.engine.cfg, None  # guides are compiled in the engine's process
            self.tokenizer = load_fast(opts.checkpoint_dir)
        else:
            built = build_engine(opts, tokenizer_info_path)
            self.engine, self.cfg, self.grammars = built.engine, built.cfg, built.grammars
            self.tokenizer = built.engine.tokenizer
        self.engine.start()
        # request id -> marks on its running requests: a `stop` request ends them as upstream's backend
        # does, with a normal final response holding what they have, not with a CANCELLED error.
        self.stops = CancelRegistry()

    def parse(self, read: Reader) -> EngineRequest:
        req = parse_engine_request(
            read,
            vocab_size=self.cfg.vocab_size,
            default_end_ids=self.cfg.eos_token_ids,
            max_input_len=self.opts.max_input_len,
            max_output_len=self.opts.max_output_len,
            exclude_default=self.opts.exclude_input_in_output,
            decode_word=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=False),
        )
        if req.guide is not None:
            req.params.grammar = self.compile(req.guide)
        return req

    def compile(self, guide: Guide):
        """The guide compiled against this engine's vocabulary (cached per type and guide). On the
        request's thread, before it is submitted: a bad guide never takes an engine slot."""
        try:
            if self.grammars is None:
                return self.engine.compile(guide.type, guide.guide)
            return self.grammars.compile(guide.type, guide.guide)
        except guided.GuideError as e:
            raise RequestError(GUIDE, str(e)) from None

    def submit(
        self,
        req: EngineRequest,
        send: Send,
        is_cancelled: Callable[[], bool],
        key: str = "",
        backlogged: Callable[[], bool] | None = None,
        echo: dict[str, np.ndarray] | None = None,
        refuse: Callable[[Exception], None] | None = None,
    ) -> Sequence:
        """key: the request's key (the Triton request id, or the ensemble's request_key:
        pipeline/cancellation.request_key), which a later `stop` request names to cancel this one.
        echo: tensors sent back with every response that carries tokens (the request_key, so the
        postprocessing step that sees a cancel can name the generation).
        backlogged: True while an earlier response of this request still waits to be sent; streamed
        tokens are then held back and travel with the next response (coalescing by load: one
        response per stream per send, however fast the engine steps).
        refuse: answers the request when the engine refuses it after this returned (an engine in a process
        of its own does not wait for its child's answer: engine_process.py), with the exception submit
        would otherwise have raised; None: a final error response through `send`."""
        top_k = req.params.top_logprobs
        stream = TokenStream(req.prompt if req.echo is None else req.echo, req.exclude_input_in_output, top_k)
        # streamed tokens not yet sent (backlog): ids, log-probs, top ids, top log-probs
        held: tuple[list, list, list, list] = ([], [], [], [])
        stopped = []  # non-empty once a `stop` request named this one

        def mark_stopped():
            stopped.append(True)

        def refused(e: Exception) -> None:
            self.stops.remove(key, mark_stopped)
            if refuse is not None:
                refuse(e)
            else:
                send(None, True, FinishReason.ERROR, f"{e}")

        def on_output(
            seq: Sequence, tokens: list[int], logprobs: list[float], finished: bool, reason: FinishReason | None
        ):
            if finished:
                self.stops.remove(key, mark_stopped)
            if reason is FinishReason.CANCELLED and stopped:
                # The engine hands a cancelled sequence nothing more (keep = emitted); a stopped one
                # ends with the tokens it generated and has not sent yet, as a normal final response.
                tokens, logprobs = seq.generated[seq.emitted :], seq.logprobs[seq.emitted :]
            elif reason is FinishReason.CANCELLED:
                return send(None, True, reason, CANCELLED_MESSAGE)
            if reason is FinishReason.TIMEOUT:
                return send(
                    None,
                    True,
                    reason,
                    f"{TIMEOUT_PREFIX}: request exceeded serving.request_timeout_s "
                    f"({self.opts.request_timeout_s:g} s) and was cancelled",
                )
            if reason is FinishReason.ERROR:
                return send(None, True, reason, f"error: {seq.error}")
            # `tokens` are always seq.generated[seq.emitted:], and so are their alternatives.
            top_ids = seq.top_ids[seq.emitted : seq.emitted + len(tokens)] if top_k else []
            top_lps = seq.top_lps[seq.emitted : seq.emitted + len(tokens)] if top_k else []
            if held[0]:
                tokens, logprobs = held[0] + tokens, held[1] + logprobs
                top_ids, top_lps = held[2] + top_ids, held[3] + top_lps
                for h in held:
                    h.clear()
            if not finished and tokens and backlogged is not None and backlogged():
                for h, new in zip(held, (tokens, logprobs, top_ids, top_lps)):
                    h.extend(new)
                return None
            # Log-prob tensors only when asked, as TensorRT-LLM's backend does: two tensors fewer per
            # response is a third less of the stub's per-response work (pb.Tensor construction held its
            # GIL more than the engine thread did on the H200, docs/perf-gpu.md).
            outputs = stream.chunk(
                tokens,
                logprobs,
                finished,
                with_logprobs=req.return_log_probs,
                top=(top_ids, top_lps) if top_k else None,
            )
            if outputs is None:  # nothing new: close the stream if it ended
                return send(None, True, None, None) if finished else None
            send({**outputs, **echo} if echo else outputs, finished, None, None)

        seq = Sequence(
            prompt=req.prompt,
            params=req.params,
            on_output=on_output,
            is_cancelled=is_cancelled,
            streaming=req.streaming,
            key=key,
            on_refused=refused,
        )
        self.stops.add(key, mark_stopped)
        try:
            self.engine.submit(seq)
        except Exception:
            self.stops.remove(key, mark_stopped)
            raise
        return seq

    def stop(self, key: str) -> bool:
        """A `stop` request: cancel the requests with this id (True if one was here). They end with a
        normal final response (the tokens so far), as in TensorRT-LLM's backend."""
        self.stops.stop(key)
        return self.engine.cancel(key)

    def shutdown(self) -> None:
        self.engine.shutdown()
