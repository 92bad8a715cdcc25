"""Decode steps as CUDA graphs over the slot-based static KV cache.

A decode step on a GPU is a few hundred small kernels (16 layers x ~12): launched one by one from
Python it is bound by launch overhead, not by reading the weights. A CUDA graph replays the whole
step with one launch, but needs static shapes and addresses. The static KV cache gives both:

* rows are cache slots: a step runs rows 0..Bb-1 where Bb is the smallest batch bucket above the
  highest slot in use (the engine hands out the lowest free slot first, so slots stay compact),
  and attention reads `k_cache[layer][:Bb, :, :kb]` as a view: no gather copy of the cache;
* rows not decoding this step (free slots, or slots prefilled in this very step) feed position
  `max_seq_len`, a scratch position one past the end of every slot that no query ever attends to,
  so their writes touch nothing real;
* keys are cut at `kb`, the smallest kv-length bucket at or above the longest row (a mask hides
  each row's future and padding), so short sequences do not pay for the longest possible one.

One graph is captured per (batch bucket, kv bucket) up front, largest first, sharing one memory
pool. Attention is written out (GQA as a batched matmul over [rows, kv heads, group, ...]) so the
cache is read once, without the repeat that SDPA's GQA fallback would make. `DecodeGraphs` also
runs eagerly (capture=False) so the same code path is unit-testable on a CPU."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .layers import decoder_layer, logits, rotate


def batch_buckets(max_slots: int) -> list[int]:
    sizes = {b for b in (1, 2, 4, 8) if b < max_slots}
    sizes |= set(range(16, max_slots, 16)) | {max_slots}
    return sorted(sizes)


def kv_buckets(max_seq_len: int) -> list[int]:
    sizes, b = {max_seq_len}, 128
    while b < max_seq_len:
        sizes.add(b)
        b *= 2
    return sorted(sizes)


def _pick(buckets: list[int], n: int) -> int:
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")


class DecodeGraphs:
    def __init__(self, model, capture: bool = True):
        self.m = model
        dev = model.device
        self.scratch = model.max_seq_len  # the extra cache position no query attends to
        self.tokens = torch.zeros(model.max_slots, dtype=torch.long, device=dev)
        self.positions = torch.full((model.max_slots,), self.scratch, dtype=torch.long, device=dev)
        self.batch_buckets = batch_buckets(model.max_slots)
        self.kv_buckets = kv_buckets(model.max_seq_len)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.captured = capture and dev.type == "cuda"
        if self.captured:
            self._capture_all()

    # --- the step body: static shapes, reads the static input buffers ------------------------
    def _body(self, B: int, kb: int) -> torch.Tensor:
        m, cfg, w = self.m, self.m.cfg, self.m.w
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        g = nh // nkv
        tokens, positions = self.tokens[:B], self.positions[:B]
        rows = torch.arange(B, device=tokens.device)
        x = F.embedding(tokens, w["embed_tokens.weight"])  # [B, H]
        cos, sin = m.cos[positions].unsqueeze(1), m.sin[positions].unsqueeze(1)  # [B, 1, D]
        key_pos = torch.arange(kb, device=tokens.device)
        # [B, 1, 1, kb]: additive mask, 0 where visible
        bias = torch.where(key_pos.view(1, kb) <= positions.view(B, 1), 0.0, float("-inf")).view(B, 1, 1, kb)
        scale = 1.0 / math.sqrt(hd)

        def attend(i, q, k, v):
            q = rotate(q.view(B, nh, hd), cos, sin)
            k = rotate(k.view(B, nkv, hd), cos, sin)
            m.k_cache[i][rows, :, positions] = k
            m.v_cache[i][rows, :, positions] = v.view(B, nkv, hd)
            keys = m.k_cache[i][:B, :, :kb]  # views [B, nkv, kb, hd]
            values = m.v_cache[i][:B, :, :kb]
            scores = torch.matmul(q.view(B, nkv, g, hd), keys.transpose(-1, -2)).float() * scale + bias
            probs = torch.softmax(scores, dim=-1).to(values.dtype)
            return torch.matmul(probs, values).reshape(B, nh * hd)  # [B, nkv, g, hd] -> [B, nh*hd]

        for i in range(cfg.num_layers):
            x = decoder_layer(x, w, i, cfg, attend)
        return logits(x, w, cfg)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        self.positions.fill_(self.scratch)  # every row writes only the scratch position
        self.pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for B in reversed(self.batch_buckets):
                for kb in reversed(self.kv_buckets):
                    self._body(B, kb)  # warm-up outside the graph (allocator, cuBLAS handles)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                        out = self._body(B, kb)
                    self.graphs[(B, kb)] = (graph, out)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()

    # --- one decode step -----------------------------------------------------------------------
    def decode(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, kv_len: int) -> torch.Tensor:
        """tokens, positions: [n, 1]; slots: [n] -> logits [n, vocab] float32 (rows in the given order)."""
        top = int(slots.max()) + 1
        B, kb = _pick(self.batch_buckets, top), _pick(self.kv_buckets, kv_len)
        self.positions[:B].fill_(self.scratch)
        self.tokens[slots] = tokens.view(-1)
        self.positions[slots] = positions.view(-1)
        if self.captured:
            graph, out = self.graphs[(B, kb)]
            graph.replay()
        else:
            out = self._body(B, kb)
        return out[slots]
