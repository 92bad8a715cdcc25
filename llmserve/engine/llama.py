"""A Llama-family decoder (Llama, SmolLM, Mistral, Qwen2) over a slot-based static KV cache.

Why our own forward instead of `AutoModelForCausalLM.forward`: in-flight batching needs rows at
different positions in one decode step, each writing its KV into its own cache slot. Hugging Face's
caches either pad every row to the same position (static batching) or, in its continuous-batching
manager, measured 18-23 tokens/s on our 2-core CPU against 52 for a static batch (issue #2). A
fixed [slots, heads, max_seq, head_dim] cache with per-row positions is what lets a request join a
running batch at no cost, and it keeps shapes static for CUDA graphs. Weights load straight from
the Hugging Face safetensors checkpoint; outputs match transformers' greedy output (tests/unit)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

from .layers import decoder_layer, logits, rotate

SUPPORTED = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_checkpoint(cls, path: Path) -> LlamaConfig:
        c = json.loads((Path(path) / "config.json").read_text())
        arch = (c.get("architectures") or ["?"])[0]
        if arch not in SUPPORTED:
            raise ValueError(f"the torch engine supports {sorted(SUPPORTED)}, not {arch} ({path}/config.json)")
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        if rope.get("rope_type", "default") not in ("default", None):
            raise ValueError(f"rope_type {rope.get('rope_type')!r} is not supported by the torch engine")
        eos = c.get("eos_token_id")
        heads = c["num_attention_heads"]
        return cls(
            vocab_size=c["vocab_size"],
            hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"],
            num_layers=c["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=c.get("num_key_value_heads", heads),
            head_dim=c.get("head_dim") or c["hidden_size"] // heads,
            rms_norm_eps=c.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", c.get("rope_theta", 10000.0)),
            max_position_embeddings=c.get("max_position_embeddings", 4096),
            tie_word_embeddings=c.get("tie_word_embeddings", False),
            attention_bias=c.get("attention_bias", arch == "Qwen2ForCausalLM"),
            eos_token_ids=tuple(eos if isinstance(eos, list) else [eos] if eos is not None else []),
        )


class LlamaModel:
    """Weights as plain tensors; no nn.Module machinery is needed for inference."""

    def __init__(self, path: Path, device: torch.device, dtype: torch.dtype, max_slots: int, max_seq_len: int):
        self.cfg = cfg = LlamaConfig.from_checkpoint(path)
        if max_seq_len > cfg.max_position_embeddings:
            raise ValueError(
                f"max_input_len + max_output_len = {max_seq_len} exceeds the model's "
                f"max_position_embeddings ({cfg.max_position_embeddings})"
            )
        self.device, self.dtype = device, dtype
        self.max_slots, self.max_seq_len = max_slots, max_seq_len
        self.w = self._load(Path(path))
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
        # One position past the end: the scratch position of CUDA-graph decode steps (cuda_graphs.py).
        freqs = torch.outer(torch.arange(max_seq_len + 1, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(device, dtype)  # [max_seq, D]
        self.sin = emb.sin().to(device, dtype)
        shape = (cfg.num_layers, max_slots, cfg.num_kv_heads, max_seq_len + 1, cfg.head_dim)
        self.k_cache = torch.zeros(shape, device=device, dtype=dtype)
        self.v_cache = torch.zeros(shape, device=device, dtype=dtype)
        # Decode steps and prefills replay CUDA graphs when whoever builds the model attaches them
        # (engine/loader.py: a cuda_graphs.DecodeGraphs and a prefill_graphs.PrefillGraphs).
        self.graphs = None
        self.prefill_graphs = None

    def kv_cache_bytes(self) -> int:
        return 2 * self.k_cache.numel() * self.k_cache.element_size()

    def _load(self, path: Path) -> dict[str, torch.Tensor]:
        w = {}
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors in {path}")
        for f in files:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    w[name.removeprefix("model.")] = st.get_tensor(name).to(self.device, self.dtype)
        if "lm_head.weight" not in w:
            w["lm_head.weight"] = w["embed_tokens.weight"]
        # Fuse q/k/v and gate/up: one matmul each instead of three/two per layer and step.
        for i in range(self.cfg.num_layers):
            p = f"layers.{i}."
            w[p + "qkv"] = torch.cat([w.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            if self.cfg.attention_bias:
                w[p + "qkv_bias"] = torch.cat([w.pop(p + f"self_attn.{n}_proj.bias") for n in "qkv"])
            w[p + "gate_up"] = torch.cat([w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
        return w

    @torch.inference_mode()
    def forward(
        self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, last: torch.Tensor | None, kv_len: int
    ) -> torch.Tensor:
        """One forward pass over rows that live in cache `slots`.

        tokens, positions: [B, S] (prefill: S = longest new prompt, right-padded; decode: S = 1)
        slots: [B]; last: [B] index of the position whose logits to return (None: the only one)
        kv_len: keys 0..kv_len-1 are attended (>= every row's position + 1)
        returns logits [B, vocab] (float32)"""
        if tokens.shape[1] == 1 and last is None and self.graphs is not None:
            return self.graphs.decode(tokens, slots, positions, kv_len)
        return self.forward_eager(tokens, slots, positions, last, kv_len)

    @torch.inference_mode()
    def forward_eager(
        self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, last: torch.Tensor | None, kv_len: int
    ) -> torch.Tensor:
        """forward() without graphs (prefill graphs capture this; prefill_graphs.py)."""
        cfg, w = self.cfg, self.w
        B, S = tokens.shape
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        x = F.embedding(tokens, w["embed_tokens.weight"])
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # [B,1,S,D]
        # Key j is visible to a query at position p iff j <= p (causal; covers right padding too).
        key_pos = torch.arange(kv_len, device=tokens.device)
        mask = key_pos.view(1, 1, 1, kv_len) <= positions.view(B, 1, S, 1)
        rows = slots.view(B, 1).expand(B, S)

        def attend(i, qkv):
            q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
            q = rotate(q.view(B, S, nh, hd).transpose(1, 2), cos, sin)
            k = rotate(k.view(B, S, nkv, hd).transpose(1, 2), cos, sin)
            v = v.view(B, S, nkv, hd).transpose(1, 2)
            # Scatter this step's keys/values into each row's slot at its positions.
            self.k_cache[i][rows, :, positions] = k.transpose(1, 2)
            self.v_cache[i][rows, :, positions] = v.transpose(1, 2)
            keys = self.k_cache[i][slots, :, :kv_len]
            values = self.v_cache[i][slots, :, :kv_len]
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=nh != nkv)
            return a.transpose(1, 2).reshape(B, S, nh * hd)

        for i in range(cfg.num_layers):
            x = decoder_layer(x, w, i, cfg, attend)
        x = x[torch.arange(B, device=x.device), last] if last is not None else x[:, -1]
        return logits(x, w, cfg)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("engine.torch.device is 'cuda' but no CUDA device is visible")
    return torch.device(name)


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)
