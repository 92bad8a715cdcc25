"""The pieces of a Llama-family decoder layer, written once and shared by the eager forward
(llama.py) and the CUDA-graph decode step (cuda_graphs.py), which differ only in attention."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dtype)


def rms_norm_fused(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """rms_norm through torch's F.rms_norm (one kernel where torch has a fused one, else the same ops)."""
    return w * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


Norm = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on the last dimension (rotate-half convention, as transformers' Llama);
    cos/sin broadcast against x (e.g. x [B, H, S, D] with cos [B, 1, S, D])."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# attend(layer, qkv) -> attention output [..., num_heads * head_dim]. qkv is the raw fused projection
# [..., (num_heads + 2 * num_kv_heads) * head_dim] (q, then k, then v); the callee splits and rotates
# it, writes k/v into the cache and attends.
Attend = Callable[[int, torch.Tensor], torch.Tensor]


def decoder_layer(
    x: torch.Tensor, w: dict[str, torch.Tensor], i: int, cfg, attend: Attend, norm: Norm = rms_norm
) -> torch.Tensor:
    """One pre-norm decoder layer over hidden states x [..., hidden] with fused qkv and gate/up weights."""
    p = f"layers.{i}."
    h = norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
    qkv = F.linear(h, w[p + "qkv"], w.get(p + "qkv_bias"))
    x = x + F.linear(attend(i, qkv), w[p + "self_attn.o_proj.weight"])
    h = norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
    gate, up = F.linear(h, w[p + "gate_up"]).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])


def logits(x: torch.Tensor, w: dict[str, torch.Tensor], cfg, norm: Norm = rms_norm) -> torch.Tensor:
    """Final norm and LM head -> float32 logits."""
    return F.linear(norm(x, w["norm.weight"], cfg.rms_norm_eps), w["lm_head.weight"]).float()
