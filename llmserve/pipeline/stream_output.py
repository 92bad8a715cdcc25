"""Token-level responses of the `tensorrt_llm` step, packed in one place for both layouts: the torch
engine's service, the relay in front of TensorRT-LLM's backend and the backend's CI stand-in.

`token_outputs` shapes one response's tensors the way TensorRT-LLM's backend does (leading batch
dimension 1, one beam). `TokenStream` is what one request has handed on so far, and so what its next
chunk carries: the prompt first unless exclude_input_in_output, the last CONTEXT_TOKENS tokens before
the chunk (`output_context_ids`, so the stateless postprocessing detokenizes every chunk exactly) and
the running cumulative log prob."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..contract import CONTEXT_TOKENS


def token_outputs(
    ids: Sequence[int],
    logprobs: Sequence[float] | None = None,
    cum: float | None = None,
    context: Sequence[int] | None = None,
) -> dict[str, np.ndarray]:
    """output_ids [1, 1, n] and sequence_length [1, 1] always; cum_log_probs [1, 1] and output_log_probs
    [1, 1, n] with `logprobs`; output_context_ids [1, 1, k] with `context` (llmserve's token-level
    contract; the C++ backend sends none)."""
    out = {
        "output_ids": np.array(ids, dtype=np.int32).reshape(1, 1, len(ids)),
        "sequence_length": np.array([[len(ids)]], dtype=np.int32),
    }
    if logprobs is not None:
        out["cum_log_probs"] = np.array([[cum if cum is not None else sum(logprobs)]], dtype=np.float32)
        out["output_log_probs"] = np.array(logprobs, dtype=np.float32).reshape(1, 1, len(logprobs))
    if context is not None:
        out["output_context_ids"] = np.array(context, dtype=np.int32).reshape(1, 1, len(context))
    return out


class TokenStream:
    """The chunks of one request's token-level output.

    `chunk(tokens, logprobs, final)` packs the tokens generated since the last chunk. It returns None
    when there is nothing to say: no new token and no prompt to send, unless the request ends before
    any chunk went out (a stream that ends before any token still gets one, empty, chunk, so
    postprocessing answers it once)."""

    def __init__(self, prompt: Sequence[int], exclude_input_in_output: bool, top_k: int = 0):
        """top_k > 0: every chunk carries top_token_ids / top_log_probs [1, n, top_k] (prompt tokens
        sent back with the output get ids -1 and log-probs 0: no alternatives)."""
        self.top_k = top_k
        self.prompt = list(prompt)
        self.exclude_input_in_output = exclude_input_in_output
        self.sent: list[int] = []  # every token handed on, the prompt prefix included
        self.cum = 0.0  # cumulative log prob of the generated tokens handed on
        self.chunks = 0

    def chunk(
        self,
        tokens: Sequence[int],
        logprobs: Sequence[float],
        final: bool,
        with_logprobs: bool = True,
        top: tuple[list[list[int]], list[list[float]]] | None = None,
    ) -> dict[str, np.ndarray] | None:
        """`logprobs`: one per token (0.0 where unknown); `with_logprobs`: whether the log-prob tensors
        are part of the response (the relay sends them only when the backend did); `top`: each token's
        top_k alternatives (ids, log-probs), when the stream has a top_k."""
        prefix = self.prompt if (not self.sent and not self.exclude_input_in_output) else []
        if not tokens and not prefix and not (final and self.chunks == 0):
            return None
        context = self.sent[-CONTEXT_TOKENS:]
        ids = prefix + list(tokens)
        self.sent.extend(ids)
        self.cum += float(sum(logprobs))
        self.chunks += 1
        lps = [0.0] * len(prefix) + [float(x) for x in logprobs] if with_logprobs else None
        out = token_outputs(ids, lps, self.cum, context)
        if self.top_k:
            k, (top_ids, top_lps) = self.top_k, top if top is not None else ([], [])
            rows = len(prefix) + len(top_ids)
            out["top_token_ids"] = np.array([[-1] * k] * len(prefix) + top_ids, dtype=np.int32).reshape(1, rows, k)
            out["top_log_probs"] = np.array([[0.0] * k] * len(prefix) + top_lps, dtype=np.float32).reshape(1, rows, k)
        return out
