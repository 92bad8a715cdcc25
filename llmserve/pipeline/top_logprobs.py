"""Top log-probs (`num_top_log_probs`) in the tensorrtllm layout, computed by the relay.

TensorRT-LLM's C++ backend has no top-k log-probs output, but it returns each generated token's logits
(`generation_logits`) when a request sets `return_generation_logits` and the engine was built with
`--gather_generation_logits` (engine.tensorrtllm.gather_generation_logits). The relay asks for them only
for a request with num_top_log_probs > 0, turns each token's logits row into its k most likely tokens
(log_softmax, then top-k: the torch engine's rule, engine/engine.py _top_log_probs, so both layouts answer
the same top_token_ids / top_log_probs from the model's own distribution, before penalties, temperature
and any grammar mask) and never hands the logits on. On an engine built without the flag the request is
refused (400 naming num_top_log_probs, saying how to enable it) before anything reaches the backend.

numpy only: the relay's Python stub may have no torch."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from ..contract import GENERATION_LOGITS, TOP_LOG_PROBS
from ..request.reader import check

log = logging.getLogger(__name__)

RETURN_GENERATION_LOGITS = "return_generation_logits"
NOT_BUILT = (
    "needs an engine that returns generation logits in the tensorrtllm layout (TensorRT-LLM's backend "
    "has no top log-probs of its own): set engine.tensorrtllm.gather_generation_logits: true in the spec, "
    "rebuild the engine (scripts/build_engine.py --force: trtllm-build --gather_generation_logits) and "
    "regenerate the model repository"
)


def check_enabled(k: int, gathers_generation_logits: bool) -> None:
    """A request for k > 0 alternatives on an engine without generation logits: RequestError (400)."""
    check(TOP_LOG_PROBS, not k or gathers_generation_logits, NOT_BUILT)


def backend_outputs(k: int) -> list[str]:
    """The backend outputs to request besides the tokens: the logits only when top log-probs are wanted."""
    return [GENERATION_LOGITS] if k else []


def return_generation_logits(k: int) -> bool:
    """Whether the backend request sets return_generation_logits (the relay adds that input)."""
    return k > 0


def model_vocab_size(checkpoint_dir: str) -> int | None:
    """The model's vocabulary (config.json vocab_size): TensorRT-LLM pads the logits to a multiple of
    tp_size, and the padding columns (zero weights) are no tokens. None when unknown (no cut)."""
    try:
        return int(json.loads((Path(checkpoint_dir) / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


BLOCK = 64  # _top_ids: vocabulary entries per block


def _top_ids(x: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest of x (1-D), unordered. np.argpartition over a whole vocabulary costs about
    0.5 ms (49,152 entries, 2-core CPU, 2026-12-02); taking the k blocks of BLOCK entries with the largest
    maxima first and partitioning only those is exact (a top-k entry's block has a maximum at least as large
    as it, and fewer than k other blocks can have a larger one) and some 10x cheaper."""
    n = x.size
    if n <= 4 * BLOCK * k:
        return np.argpartition(-x, k - 1)[:k]
    pad = (-n) % BLOCK
    blocks = (np.concatenate([x, np.full(pad, -np.inf, x.dtype)]) if pad else x).reshape(-1, BLOCK)
    best = np.argpartition(-blocks.max(axis=1), k - 1)[:k]
    cand = (best[:, None] * BLOCK + np.arange(BLOCK)).reshape(-1)
    cand = cand[cand < n]
    return cand[np.argpartition(-x[cand], k - 1)[:k]]


def log_softmax_top_k(rows: np.ndarray, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """rows [tokens, vocab] of logits -> each row's k most likely ids and their log-probabilities,
    most likely first (ties: the lower id first)."""
    x = np.asarray(rows, dtype=np.float32)
    if x.shape[0] == 0:
        return [], []
    k = min(k, x.shape[1])
    ids, values = [], []
    for row in x:
        m = float(row.max())
        lse = m + float(np.log(np.exp(row - m).sum(dtype=np.float64)))  # summed in float64: no lost digits
        cand = _top_ids(row, k)
        cand = cand[np.lexsort((cand, -row[cand]))]  # by logit descending, then id
        ids.append([int(i) for i in cand])
        values.append([float(np.float32(float(row[i]) - lse)) for i in cand])
    return ids, values


def top_from_logits(
    logits: np.ndarray | None, n_tokens: int, k: int, vocab: int | None
) -> tuple[list[list[int]], list[list[float]]]:
    """One streaming backend response's generation_logits ([1, new tokens, beams, vocab padded]) -> the
    top-k of its n_tokens tokens (beam 0), the padding columns cut. Missing rows (the backend sent fewer
    than tokens: never expected) are ids -1, log-probs 0, and logged."""
    ids: list[list[int]] = []
    lps: list[list[float]] = []
    if logits is not None and logits.size:
        a = np.asarray(logits)
        rows = a.reshape(-1, a.shape[-1]) if a.ndim < 4 else a[0, :, 0, :]
        if vocab is not None:
            rows = rows[:, :vocab]
        ids, lps = log_softmax_top_k(rows[:n_tokens], k)
    if len(ids) < n_tokens:
        log.warning("generation_logits: %d rows for %d tokens; the rest get no alternatives", len(ids), n_tokens)
        ids += [[-1] * k for _ in range(n_tokens - len(ids))]
        lps += [[0.0] * k for _ in range(n_tokens - len(lps))]
    return ids, lps
