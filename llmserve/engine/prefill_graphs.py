"""Prefill as CUDA graphs: the prompts admitted in one step, padded to a (prompts, length) bucket.

An eager prefill is ~900 small operations (16 layers x ~55) dispatched one by one from Python: on the
H200 it took 17 ms whether it carried 1 or 16 prompts of 128 tokens (docs/perf-gpu.md), every one of
them host time that no decode step can use, and more inside Triton where other threads want the GIL.
Replaying a graph costs one launch. The graph runs the eager forward (llama.py) on static buffers:

* prompts are right-padded to the length bucket L; padding tokens, and the rows that pad the batch to
  the prompt bucket n, feed the scratch position `max_seq_len` (as padded decode rows do), so their
  keys and values land where no query ever looks, and their logits are ignored;
* the logits of each row's last real token come back; sampling stays with the engine.

Shapes beyond the largest bucket (more prompt tokens than MAX_TOKENS) run eagerly."""

from __future__ import annotations

import torch

MAX_TOKENS = 4096  # prompts x length of the largest captured bucket (the default prefill budget is 2048)


def prompt_buckets(max_slots: int) -> list[int]:
    return [n for n in (1, 2, 4, 8, 16, 32) if n <= max_slots] or [1]


def length_buckets(max_input_len: int) -> list[int]:
    sizes, b = {max_input_len}, 16
    while b < max_input_len:
        sizes.add(b)
        b *= 2
    return sorted(sizes)


class PrefillGraphs:
    def __init__(self, model, max_input_len: int, capture: bool = True):
        self.m = model
        dev = model.device
        self.scratch = model.max_seq_len
        self.shapes = [
            (n, L)
            for L in length_buckets(max_input_len)
            for n in prompt_buckets(model.max_slots)
            if n == 1 or n * L <= MAX_TOKENS
        ]
        n_max, l_max = max(n for n, _ in self.shapes), max(L for _, L in self.shapes)
        # Static inputs: tokens and positions [n_max, l_max], the cache slot and last real index per row.
        self.tokens = torch.zeros((n_max, l_max), dtype=torch.long, device=dev)
        self.positions = torch.full((n_max, l_max), self.scratch, dtype=torch.long, device=dev)
        self.slots = torch.zeros(n_max, dtype=torch.long, device=dev)
        self.last = torch.zeros(n_max, dtype=torch.long, device=dev)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.captured = capture and dev.type == "cuda"
        if self.captured:
            self._capture_all()

    def _body(self, n: int, L: int) -> torch.Tensor:
        return self.m.forward_eager(self.tokens[:n, :L], self.slots[:n], self.positions[:n, :L], self.last[:n], L)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for n, L in sorted(self.shapes, key=lambda s: -s[0] * s[1]):  # largest first: one pool
                self._body(n, L)  # warm-up outside the graph
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                    out = self._body(n, L)
                self.graphs[(n, L)] = (graph, out)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()

    def bucket(self, n: int, width: int) -> tuple[int, int] | None:
        fits = [(bn, bl) for bn, bl in self.shapes if bn >= n and bl >= width]
        return min(fits, key=lambda s: s[0] * s[1]) if fits else None

    @torch.inference_mode()
    def run(self, prompts: list[list[int]], slots: list[int]) -> torch.Tensor | None:
        """Logits [len(prompts), vocab] of each prompt's last token, its keys and values written into
        its slot; None when no bucket holds this batch (the caller prefills eagerly)."""
        n, width = len(prompts), max(len(p) for p in prompts)
        shape = self.bucket(n, width)
        if shape is None:
            return None
        bn, bl = shape
        tokens = torch.zeros((bn, bl), dtype=torch.long)
        positions = torch.full((bn, bl), self.scratch, dtype=torch.long)
        for i, p in enumerate(prompts):
            tokens[i, : len(p)] = torch.tensor(p)
            positions[i, : len(p)] = torch.arange(len(p))
        pad_slot = slots[0]  # padding rows write only its scratch position
        self.tokens[:bn, :bl].copy_(tokens)
        self.positions[:bn, :bl].copy_(positions)
        self.slots[:bn].copy_(torch.tensor(slots + [pad_slot] * (bn - n)))
        self.last[:bn].copy_(torch.tensor([len(p) - 1 for p in prompts] + [0] * (bn - n)))
        if self.captured:
            graph, out = self.graphs[shape]
            graph.replay()
        else:
            out = self._body(bn, bl)
        return out[:n]
