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
pool. GQA attention runs over [rows, kv heads, group, head_dim] so the cache is read once, without
the repeat that SDPA's GQA fallback would make.

The host side of a step is one copy in and one copy out, with one synchronisation: the tokens and
positions of every row go to the GPU in one pinned buffer, and the graph itself computes each row's
greedy token and its log-probability, so the host reads back two numbers per row, not the logits
(which stay on the GPU for the rows that sample or need penalties). `DecodeGraphs` also runs
eagerly (capture=False) so the same code path is unit-testable on a CPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import kernels
from .layers import decoder_layer, logits, rms_norm, rms_norm_fused, rotate


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


@dataclass(frozen=True)
class GraphOptions:
    """Variants of the captured step; the defaults are the fastest measured (docs/perf-gpu.md,
    scripts/h200/step_profile.py times each)."""

    sdpa: bool = True
    """Attention as one fused SDPA call over [rows, kv heads, group, head_dim] with a boolean mask,
    instead of written-out matmul / softmax / matmul (5 kernels a layer)."""
    fused_rope: bool = True
    """Rotate q and k together (one set of rotary kernels a layer instead of two)."""
    fused_norm: bool = True
    """RMSNorm through F.rms_norm (a fused kernel where torch has one) instead of written-out ops."""
    kernels: bool = True
    """(engine.torch.triton_kernels) The fused Triton kernels of kernels.py (residual add + RMSNorm, rotary + KV write, SiLU x up)
    where Triton runs (kernels.available: a CUDA device); the torch ops otherwise. 1.25-1.29x the engine on an
    H100 (docs/perf-gpu.md, call 17)."""
    attention_kernel: bool = True
    """With `kernels`: attention in kernels.decode_attention (each row reads only its own keys) instead of
    SDPA with a boolean mask over the kv bucket (scripts/h200/step_profile.py times both)."""
    compile: bool = False
    """torch.compile the step body (inductor fuses the norms, rotary and elementwise ops into few
    kernels) before capturing it: fewer, larger kernels per step, at a compile of about a minute.
    Off unless LLMSERVE_COMPILE=1 (engine/loader.py) while it is being measured."""


@dataclass
class DecodeResult:
    """One decode step: the greedy token and its log-probability per input row, and the logits
    (on the device, valid until the next step) for the rows that need more than argmax."""

    tokens: list[int]
    logprobs: list[float]
    _logits: torch.Tensor  # [Bb, vocab] float32, row = cache slot
    _slots: list[int]

    def logits(self, rows: list[int]) -> torch.Tensor:
        """Logits [len(rows), vocab] of the given input rows (indices into the step's inputs)."""
        idx = torch.tensor([self._slots[r] for r in rows], device=self._logits.device)
        return self._logits[idx]


def _greedy(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's outputs: logits [B, V] and, per row, its greedy token and that token's log-prob."""
    token = out.argmax(-1)
    logprob = out.gather(1, token.unsqueeze(1)).squeeze(1) - torch.logsumexp(out, dim=-1)
    return out, torch.stack((token.double(), logprob.double()))


class DecodeGraphs:
    def __init__(self, model, capture: bool = True, options: GraphOptions = GraphOptions()):
        self.m = model
        self.options = options
        dev = model.device
        n = model.max_slots
        self.scratch = model.max_seq_len  # the extra cache position no query attends to
        # Static inputs of every graph: [0] the token of each row, [1] its position.
        self.inputs = torch.zeros((2, n), dtype=torch.long, device=dev)
        self.inputs[1].fill_(self.scratch)
        pin = dev.type == "cuda"
        self.host_in = torch.zeros((2, n), dtype=torch.long, pin_memory=pin)
        self.host_out = torch.zeros(2 * n, dtype=torch.float64, pin_memory=pin)
        self.batch_buckets = batch_buckets(n)
        self.kv_buckets = kv_buckets(model.max_seq_len)
        # (B, kb) -> (graph, logits [B, V], picked [2, B]: greedy token and its log-prob per row)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.fused = options.kernels and not options.compile and kernels.available(dev) and kernels.fits(model.cfg)
        body = self._body_fused if self.fused else self._body
        self._run = torch.compile(body, dynamic=True) if options.compile else body
        self.captured = capture and dev.type == "cuda"
        if self.captured:
            self._capture_all()

    @property
    def tokens(self) -> torch.Tensor:
        return self.inputs[0]

    @property
    def positions(self) -> torch.Tensor:
        return self.inputs[1]

    # --- the step body: static shapes, reads the static input buffers ------------------------
    def _body(self, B: int, kb: int) -> tuple[torch.Tensor, torch.Tensor]:
        m, cfg, w, opt = self.m, self.m.cfg, self.m.w, self.options
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        g = nh // nkv
        tokens, positions = self.inputs[0, :B], self.inputs[1, :B]
        rows = torch.arange(B, device=tokens.device)
        x = F.embedding(tokens, w["embed_tokens.weight"])  # [B, H]
        cos, sin = m.cos[positions].unsqueeze(1), m.sin[positions].unsqueeze(1)  # [B, 1, D]
        key_pos = torch.arange(kb, device=tokens.device)
        visible = (key_pos.view(1, kb) <= positions.view(B, 1)).view(B, 1, 1, kb)
        bias = None if opt.sdpa else torch.where(visible, 0.0, float("-inf"))  # additive, 0 where visible
        scale = 1.0 / math.sqrt(hd)

        def attend(i, qkv):
            if opt.fused_rope:
                qk = rotate(qkv[:, : (nh + nkv) * hd].view(B, nh + nkv, hd), cos, sin)
                q, k = qk[:, :nh], qk[:, nh:]
            else:
                q = rotate(qkv[:, : nh * hd].view(B, nh, hd), cos, sin)
                k = rotate(qkv[:, nh * hd : (nh + nkv) * hd].view(B, nkv, hd), cos, sin)
            m.k_cache[i][rows, :, positions] = k
            m.v_cache[i][rows, :, positions] = qkv[:, (nh + nkv) * hd :].view(B, nkv, hd)
            keys = m.k_cache[i][:B, :, :kb]  # views [B, nkv, kb, hd]
            values = m.v_cache[i][:B, :, :kb]
            q = q.reshape(B, nkv, g, hd)  # the group's query heads as the "query positions" of a kv head
            if opt.sdpa:
                a = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
            else:
                scores = torch.matmul(q, keys.transpose(-1, -2)).float() * scale + bias
                a = torch.matmul(torch.softmax(scores, dim=-1).to(values.dtype), values)
            return a.reshape(B, nh * hd)  # [B, nkv, g, hd] -> [B, nh*hd]

        norm = rms_norm_fused if opt.fused_norm else rms_norm
        for i in range(cfg.num_layers):
            x = decoder_layer(x, w, i, cfg, attend, norm)
        return _greedy(logits(x, w, cfg, norm))

    def _body_fused(self, B: int, kb: int) -> tuple[torch.Tensor, torch.Tensor]:
        """_body with the kernels of kernels.py: per layer two GEMMs around attention, two around the
        MLP, and four fused kernels (attention among them, or SDPA) (the same function; float32 inside each kernel)."""
        m, cfg, w = self.m, self.m.cfg, self.m.w
        nh, nkv, hd, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
        tokens, positions = self.inputs[0, :B], self.inputs[1, :B]
        x = F.embedding(tokens, w["embed_tokens.weight"])  # [B, H], the residual stream (updated in place)
        cos, sin = m.cos[positions], m.sin[positions]  # [B, D]
        if not self.options.attention_kernel:
            visible = (torch.arange(kb, device=tokens.device).view(1, kb) <= positions.view(B, 1)).view(B, 1, 1, kb)
        h = kernels.add_rms_norm(x, None, w["layers.0.input_layernorm.weight"], eps)
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            qkv = F.linear(h, w[p + "qkv"], w.get(p + "qkv_bias"))
            q = kernels.rope_kv(qkv, cos, sin, positions, m.k_cache[i], m.v_cache[i], nh, nkv)
            if self.options.attention_kernel:
                a = kernels.decode_attention(q, m.k_cache[i], m.v_cache[i], positions, kb)
            else:
                keys, values = m.k_cache[i][:B, :, :kb], m.v_cache[i][:B, :, :kb]
                a = F.scaled_dot_product_attention(q.view(B, nkv, nh // nkv, hd), keys, values, attn_mask=visible)
            h = kernels.add_rms_norm(
                x,
                F.linear(a.reshape(B, nh * hd), w[p + "self_attn.o_proj.weight"]),
                w[p + "post_attention_layernorm.weight"],
                eps,
            )
            mlp = F.linear(kernels.silu_mul(F.linear(h, w[p + "gate_up"])), w[p + "mlp.down_proj.weight"])
            after = f"layers.{i + 1}.input_layernorm.weight" if i + 1 < cfg.num_layers else "norm.weight"
            h = kernels.add_rms_norm(x, mlp, w[after], eps)
        return _greedy(F.linear(h, w["lm_head.weight"]).float())

    @torch.inference_mode()
    def _capture_all(self) -> None:
        self.capture([(B, kb) for B in reversed(self.batch_buckets) for kb in reversed(self.kv_buckets)])

    @torch.inference_mode()
    def capture(self, shapes: list[tuple[int, int]]) -> None:
        """Capture the graphs of these (batch bucket, kv bucket) shapes, largest first (one pool)."""
        self.positions.fill_(self.scratch)  # every row writes only the scratch position
        if not hasattr(self, "pool"):
            self.pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for B, kb in shapes:
                self._run(B, kb)  # warm-up outside the graph (allocator, cuBLAS handles, compilation)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                    out, picked = self._run(B, kb)
                self.graphs[(B, kb)] = (graph, out, picked)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.captured = True

    # --- one decode step -----------------------------------------------------------------------
    @torch.inference_mode()
    def step(
        self, slots: list[int], tokens: list[int], positions: list[int], kv_len: int, overlap: Callable | None = None
    ) -> DecodeResult:
        """Rows `slots` feed `tokens` at `positions` (host lists, one entry per decoding sequence).
        `overlap`: host work run while the GPU computes the step (before the read-back waits for it)."""
        B, kb = _pick(self.batch_buckets, max(slots) + 1), _pick(self.kv_buckets, kv_len)
        host = self.host_in.numpy()
        host[0, :B] = 0
        host[1, :B] = self.scratch
        host[0, slots] = tokens
        host[1, slots] = positions
        # Safe to refill next step: that step starts after this one's read-back, which follows this copy.
        self.inputs.copy_(self.host_in, non_blocking=True)
        if self.captured:
            graph, out, picked = self.graphs[(B, kb)]
            graph.replay()
        else:
            out, picked = self._run(B, kb)
        back = self.host_out[: 2 * B]
        back.copy_(picked.view(-1), non_blocking=True)
        if overlap is not None:
            overlap()
        if self.captured:
            torch.cuda.current_stream().synchronize()  # the step's one synchronisation
        values = back.numpy()
        return DecodeResult(
            tokens=values[:B][slots].astype("int64").tolist(),
            logprobs=values[B:][slots].tolist(),
            _logits=out,
            _slots=list(slots),
        )

    def decode(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, kv_len: int) -> torch.Tensor:
        """Tensor form of step(): tokens, positions [n, 1]; slots [n] -> logits [n, vocab] float32."""
        r = self.step(slots.tolist(), tokens.view(-1).tolist(), positions.view(-1).tolist(), kv_len)
        return r.logits(list(range(len(r.tokens))))
