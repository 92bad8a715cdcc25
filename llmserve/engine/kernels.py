"""Fused Triton kernels for the CUDA-graph decode step (cuda_graphs.py, GraphOptions.kernels).

Why: a captured decode step of a 1B model on an H200 spent 2.3 ms on the GPU where reading the
weights takes 0.6 ms (docs/perf-gpu.md): the rest was ~30 small kernels a layer, each a few
microseconds. Three kernels replace most of them:

* `add_rms_norm`: the residual add and the next RMSNorm in one pass over the row (was an add, two
  casts, the norm and the weight multiply);
* `rope_kv`: rotary embedding of q and k, and the k/v writes into the slot cache, in one kernel
  (was a negate, a concat, two multiplies, an add and two index_put per layer);
* `silu_mul`: SiLU(gate) * up (was two kernels);
* `decode_attention`: one query per row against its own keys only (SDPA took a boolean mask over the
  whole kv bucket, turned it into a float bias every layer: 22 % of the step, plus a `where` and two
  fills a layer, on an H100 in docs/perf-gpu.md, call 21).

The GEMMs stay with cuBLAS. Each kernel computes in float32 and rounds once
to the activation dtype, where the torch ops round after every op: the outputs agree to bf16
rounding, not bit for bit (tests/unit/engine/test_kernels.py checks them against the torch ops,
on a CPU through Triton's interpreter).

`available()` says whether Triton can run here (a CUDA device, or TRITON_INTERPRET=1 for tests)."""

from __future__ import annotations

import functools
import importlib.util
import os

import torch


def available(device: torch.device) -> bool:
    if importlib.util.find_spec("triton") is None:  # the CPU images: the decode step keeps the torch ops
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def fits(cfg) -> bool:
    """Whether the kernels serve this model: rope_kv works on whole heads, a power-of-two head_dim."""
    hd = cfg.head_dim
    return hd >= 16 and hd & (hd - 1) == 0


@functools.cache
def _kernels():
    return importlib.import_module(".triton_kernels", __package__)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x += delta (in place, when given), then return RMSNorm(x) * w. x, delta: contiguous [rows, n]."""
    rows, n = x.shape
    h = torch.empty_like(x)
    d = delta if delta is not None else x
    k = _kernels()
    k.add_rms_norm[(rows,)](x, d, w, h, n, eps, HAS_D=delta is not None, BLOCK=k.triton.next_power_of_2(n))
    return h


def rope_kv(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    nh: int,
    nkv: int,
) -> torch.Tensor:
    """Rotate q and k of each row of qkv [B, (nh + 2 nkv) hd] by its cos/sin [B, hd]; write k and v
    into k_cache/v_cache [slots, nkv, positions, hd] at (row, head, positions[row]); return q [B, nh, hd]."""
    B = qkv.shape[0]
    hd = cos.shape[-1]
    if qkv.stride(1) != 1 or cos.stride(0) != hd or k_cache.stride(2) != hd or k_cache.stride(3) != 1:
        raise ValueError("rope_kv needs rows of qkv, cos/sin and the cache's positions laid out contiguously")
    if k_cache.stride() != v_cache.stride():
        raise ValueError("rope_kv needs the k and v caches laid out alike")
    q = torch.empty((B, nh, hd), dtype=qkv.dtype, device=qkv.device)
    _kernels().rope_kv[(B, nh + nkv)](
        qkv,
        cos,
        sin,
        positions,
        q,
        k_cache,
        v_cache,
        qkv.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        NH=nh,
        NKV=nkv,
        HD=hd,
    )
    return q


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up of gate_up [rows, 2 n] (gate first, as the fused weight is laid out)."""
    rows, two_n = gate_up.shape
    n = two_n // 2
    out = torch.empty((rows, n), dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    k = _kernels()
    k.silu_mul[(rows, k.triton.cdiv(n, block))](gate_up, out, n, BLOCK=block)
    return out


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    positions: torch.Tensor,
    kb: int,
    block_n: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Attention of one query per row: q [B, nh, hd] (row r is cache slot r) against the keys and values
    of k_cache/v_cache [slots, nkv, positions, hd] at positions 0..min(positions[r], kb - 1); grouped
    query heads share their kv head (head h reads kv head h // (nh // nkv)). Returns [B, nh, hd].
    block_n (keys per block) and num_warps: the tile, timed against others by scripts/h200/step_profile.py."""
    B, nh, hd = q.shape
    nkv = k_cache.shape[1]
    if q.stride(2) != 1 or q.stride(1) != hd or k_cache.stride(2) != hd or k_cache.stride(3) != 1:
        raise ValueError("decode_attention needs q's heads and the cache's positions laid out contiguously")
    if k_cache.stride() != v_cache.stride() or nh % nkv:
        raise ValueError("decode_attention needs the k and v caches laid out alike and nh a multiple of nkv")
    out = torch.empty_like(q)
    k = _kernels()
    g_pad = max(16, k.triton.next_power_of_2(nh // nkv))
    scale_log2 = 1.4426950408889634 / hd**0.5  # softmax by exp2: 1/sqrt(hd) times log2(e)
    k.decode_attention[(B, nkv)](
        q,
        k_cache,
        v_cache,
        positions,
        out,
        kb,
        scale_log2,
        k_cache.stride(0),
        k_cache.stride(1),
        NH=nh,
        NKV=nkv,
        HD=hd,
        G_PAD=g_pad,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return out
