"""The token relay: the `tensorrt_llm` step of the tensorrtllm layout, in front of the C++ backend model.

TensorRT-LLM's backend streams each response's new tokens and nothing else: no tokens before them
(`output_context_ids`), no per-request key. Postprocessing, called once per response as a new request,
possibly on another instance, cannot keep per-stream state, so chunks decoded alone lose characters
split across chunks and SentencePiece spaces. The relay is one request for the whole stream: it calls
the backend over BLS with streaming on and a unique request id, and gives the ensemble exactly the
torch engine's token-level contract:

- `output_context_ids` with each chunk (the last CONTEXT_TOKENS tokens before it), so postprocessing
  detokenizes every chunk exactly, stateless, the same way for both engines;
- stop words matched on text (StopMatcher), not on isolated tokens: text that may grow into a stop word
  is held back; on a match the stop word's tokens are dropped and the backend request is stopped
  (`stop` input, same request id);
- a non-streaming request is streamed from the backend too (so stop words end it early) and answered
  once; the prompt comes first unless exclude_input_in_output;
- log probs passed through when the backend sends them (return_log_probs), never invented.

Triton-free: the model.py adapter feeds backend responses in and sends what `RelayStream` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..contract import BACKEND, CONTEXT_TOKENS
from .options import ModelParams
from ..text.stop_words import StopMatcher

if TYPE_CHECKING:  # the generator imports RelayOptions without torch
    from ..request.token_request import EngineRequest


@dataclass(frozen=True)
class RelayOptions(ModelParams):
    target_model: str
    tokenizer_dir: str
    skip_special_tokens: bool
    max_input_len: int
    max_output_len: int
    exclude_input_in_output: bool

    @classmethod
    def from_spec(cls, spec, tokenizer_dir: str) -> "RelayOptions":
        return cls(target_model=BACKEND, tokenizer_dir=tokenizer_dir,
                   skip_special_tokens=spec.tokenizer.skip_special_tokens, max_input_len=spec.engine.max_input_len,
                   max_output_len=spec.engine.max_output_len,
                   exclude_input_in_output=spec.serving.exclude_input_in_output)

# Inputs the relay does not forward: it always streams from the backend, matches stop words itself
# and applies exclude_input_in_output itself.
NOT_FORWARDED = ("streaming", "stop_words_list", "exclude_input_in_output", "stop")


@dataclass
class RelayStream:
    req: "EngineRequest"
    tokenizer: object
    skip_special_tokens: bool = True
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    has_logprobs: bool = False
    released: int = 0  # generated tokens handed on
    sent: list[int] = field(default_factory=list)  # every token handed on (prompt prefix included)
    cum: float = 0.0
    stopped: bool = False  # a stop word matched: the backend request must be stopped
    chunks: int = 0

    def __post_init__(self):
        words = self.req.params.stop_words
        self.matcher = StopMatcher(self.tokenizer, words, self.skip_special_tokens) if words else None

    def push(self, tokens: list[int], logprobs: list[float] | None) -> dict[str, np.ndarray] | None:
        """One backend response. Returns the chunk to stream now (streaming requests), or None."""
        if self.stopped:
            return None
        if logprobs is not None:
            self.has_logprobs = True
        for i, tok in enumerate(tokens):
            self.generated.append(tok)
            self.logprobs.append(float(logprobs[i]) if logprobs is not None and i < len(logprobs) else 0.0)
            if self.matcher is not None and (keep := self.matcher.push(tok)) is not None:
                del self.generated[keep:]
                del self.logprobs[keep:]
                self.stopped = True
                break
        if not self.req.streaming:
            return None
        safe = len(self.generated) if (self.stopped or self.matcher is None) else self.matcher.safe_tokens()
        return self._release(safe, final=False)

    def finish(self) -> dict[str, np.ndarray] | None:
        """The backend's stream ended (or was stopped): the last chunk, or the whole answer."""
        return self._release(len(self.generated), final=True)

    def _release(self, upto: int, final: bool) -> dict[str, np.ndarray] | None:
        new = self.generated[self.released:upto]
        lps = self.logprobs[self.released:upto]
        prefix = self.req.prompt if (not self.sent and not self.req.exclude_input_in_output) else []
        if not new and not prefix and not (final and self.chunks == 0):
            return None  # nothing to say (a stream that ends before any token still gets one, empty, chunk)
        context = self.sent[-CONTEXT_TOKENS:]
        ids = prefix + new
        self.sent.extend(ids)
        self.released = upto
        self.cum += sum(lps)
        self.chunks += 1
        out = {"output_ids": np.array(ids, dtype=np.int32).reshape(1, 1, len(ids)),
               "sequence_length": np.array([[len(ids)]], dtype=np.int32),
               "output_context_ids": np.array(context, dtype=np.int32).reshape(1, 1, len(context))}
        if self.has_logprobs:
            out["cum_log_probs"] = np.array([[self.cum]], dtype=np.float32)
            all_lps = [0.0] * len(prefix) + lps
            out["output_log_probs"] = np.array(all_lps, dtype=np.float32).reshape(1, 1, len(all_lps))
        return out


def backend_tokens(output_ids: np.ndarray, sequence_length: np.ndarray) -> list[int]:
    """Beam 0 of one backend response: output_ids [1, beams, n], sequence_length [1, beams]."""
    n = int(np.asarray(sequence_length).reshape(-1)[0])
    return [int(t) for t in np.asarray(output_ids).reshape(-1)[:n]]
