"""A model that computes nothing: each step waits a set time and yields fixed tokens, so a benchmark
measures the serving layers' own ceiling with the engine out of the picture (issue 17).

It stands in for LlamaModel under the same Engine (admission, per-sequence accept, streaming interval,
cancellation: all real), with a decode step of `step_ms` wall time, the GIL released meanwhile as a GPU
step's wait for the device releases it. Prefill costs the same step. Tokens are ordinary vocabulary ids
(never the checkpoint's end ids), different per position, so detokenization downstream does real work.
Only the checkpoint's config.json is read: no weights, no device.

Chosen by the environment variable NULL_STEP_ENV (engine/loader.py), for benchmarks only: the spec
has no knob for it, since no deployment serves it."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .cuda_graphs import DecodeResult
from .llama import LlamaConfig

NULL_STEP_ENV = "LLMSERVE_NULL_STEP_MS"
FIRST_ID = 1000  # above the special tokens of the usual tokenizers


class NullModel:
    def __init__(self, path: str | Path, step_ms: float, max_slots: int, max_seq_len: int):
        self.cfg = LlamaConfig.from_checkpoint(Path(path))
        self.device, self.dtype = torch.device("cpu"), torch.float32
        self.max_slots, self.max_seq_len = max_slots, max_seq_len
        self.step_s = step_ms / 1000
        span = max(1, self.cfg.vocab_size - FIRST_ID)
        ends = set(self.cfg.eos_token_ids)
        self._ids = [t for t in range(FIRST_ID, FIRST_ID + min(span, 4096)) if t not in ends] or [0]
        self.graphs = _NullDecode(self)
        self.prefill_graphs = _NullPrefill(self)

    def token(self, slot: int, position: int) -> int:
        return self._ids[(slot * 31 + position) % len(self._ids)]

    def kv_cache_bytes(self) -> int:
        return 0

    def forward(self, *args, **kwargs):  # the engine only calls it when the graph objects decline
        raise RuntimeError("NullModel: decode and prefill go through its graph objects")


class _NullDecode:
    def __init__(self, model: NullModel):
        self.m = model

    def step(
        self, slots: list[int], tokens: list[int], positions: list[int], kv_len: int, overlap=None
    ) -> DecodeResult:
        if overlap is not None:  # as the graphs do: host work while the "GPU" step runs
            overlap()
        time.sleep(self.m.step_s)
        return _NullResult(
            tokens=[self.m.token(s, p + 1) for s, p in zip(slots, positions)],
            logprobs=[0.0] * len(slots),
            _logits=torch.zeros((0, 0)),
            _slots=list(slots),
            vocab_size=self.m.cfg.vocab_size,
        )


class _NullResult(DecodeResult):
    """Rows that need more than argmax (sampling knobs, min_tokens) get one-hot logits of their token."""

    def __init__(self, *, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size

    def logits(self, rows: list[int]) -> torch.Tensor:
        return _one_hot([self.tokens[r] for r in rows], self.vocab_size)


class _NullPrefill:
    """Prefill answers with logits (the engine samples the first token from them): one-hot rows, so
    greedy sampling picks the null token; [n, vocab] only for the prompts admitted in this step."""

    def __init__(self, model: NullModel):
        self.m = model

    def run(self, prompts: list[list[int]], slots: list[int]) -> torch.Tensor:
        time.sleep(self.m.step_s)
        return _one_hot([self.m.token(s, len(p)) for p, s in zip(prompts, slots)], self.m.cfg.vocab_size)


def _one_hot(tokens: list[int], vocab_size: int) -> torch.Tensor:
    logits = torch.zeros((len(tokens), vocab_size))
    logits[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 1.0
    return logits
