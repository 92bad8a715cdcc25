"""A request inside the engine (Sequence), the callback it reports through, and the engine's counters."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..finish import FinishReason
from ..text.stop_words import StopMatcher
from .sampling import SamplingParams

# (sequence, new token ids, their log-probs, finished, finish reason or None; seq.error says what failed)
OutputCallback = Callable[["Sequence", list[int], list[float], bool, "FinishReason | None"], None]


@dataclass(eq=False)
class Sequence:
    prompt: list[int]
    params: SamplingParams
    on_output: OutputCallback
    is_cancelled: Callable[[], bool] = lambda: False
    streaming: bool = True
    key: str = ""  # the Triton request id: a `stop` request with the same id cancels it
    id: int = field(default_factory=itertools.count().__next__)
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    slot: int = -1
    emitted: int = 0  # tokens of `generated` already handed to on_output
    keep: int | None = None  # set when a stop word ends the sequence: tokens to output
    finish_reason: FinishReason | None = None
    broken: bool = False  # its callback failed: the engine drops it at the next step
    client_gone: bool = False  # is_cancelled() said so (the engine's poller thread): dropped at the next step
    error: str | None = None  # what failed, when finish_reason is ERROR
    stop: StopMatcher | None = None
    generator: torch.Generator | None = None
    matcher: object | None = None  # guided decoding: its xgrammar GrammarMatcher (engine/guided.py)
    # params.top_logprobs > 0: per generated token, its position's most likely (ids, log-probs)
    top_ids: list[list[int]] = field(default_factory=list)
    top_lps: list[list[float]] = field(default_factory=list)
    pending_top: tuple[list[int], list[float]] | None = None  # the step's, until its token is accepted
    # params.return_logits: per generated token, its position's logits row (float32 numpy, on the host)
    gen_logits: list = field(default_factory=list)
    pending_logits: object | None = None  # the step's, until its token is accepted
    arrival: float = field(default_factory=time.monotonic)  # at the engine model (set by the stub: engine_process)
    admitted_at: float | None = None  # monotonic time of its first engine step
    first_token_at: float | None = None  # monotonic time its first token was sampled (end token included)
    deadline: float = float("inf")  # monotonic time after which the request is cancelled
    last_emit_at: float = float("-inf")
    # A refusal that comes after submit() returned: an engine in another process (pipeline/engine_process.py)
    # accepts a request without waiting for the child's answer and calls this with EngineBusy /
    # EngineUnavailable / the child's error if it refuses. None: only an immediate refusal (a raise).
    on_refused: Callable[[Exception], None] | None = None

    @property
    def position(self) -> int:  # position of the next token to feed
        return len(self.prompt) + len(self.generated) - 1


@dataclass
class EngineStats:
    running: int = 0
    waiting: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    finished: int = 0
    cancelled: int = 0
    timed_out: int = 0
    rejected: int = 0
    step_failures: int = 0  # engine steps that raised (their requests failed)
    last_batch_size: int = 0
    max_batch_size_seen: int = 0
    batched_steps: int = 0  # decode steps that carried more than one sequence
    kv_cache_used_tokens: int = 0
    kv_cache_capacity_tokens: int = 0
    # Where a request's first token waits, summed over requests (mean = sum / count): arrival at the engine
    # model -> its first engine step (queue), and arrival -> its first token sampled (time to first token).
    # Arrival is the stub's clock (CLOCK_MONOTONIC, one for every process), so an engine in a process of its
    # own counts the hop to it as queue time.
    admitted: int = 0
    queue_seconds: float = 0.0
    first_tokens: int = 0
    first_token_seconds: float = 0.0
