"""Sampling knobs read and range-checked once. The ensemble calls them top_k / top_p, the token-level
model runtime_top_k / runtime_top_p (upstream names); `names` maps one onto the other. The values mean
what they mean to TensorRT-LLM (see read_sampling), so both layouts sample alike."""

from __future__ import annotations

from ..engine.params import trtllm_top_k_top_p
from .reader import Reader, check, one

CLIENT_NAMES = {"top_k": "top_k", "top_p": "top_p"}
ENGINE_NAMES = {"top_k": "runtime_top_k", "top_p": "runtime_top_p"}


def read_sampling(read: Reader, names: dict[str, str], max_tokens: int, max_beam_width: int = 1) -> dict:
    top_k_name, top_p_name = names["top_k"], names["top_p"]
    temperature = one(read, "temperature", float, 0.0)
    check("temperature", temperature >= 0, f"must be >= 0, got {temperature}")
    # logits / 1e-40 overflows to inf and the sampler fails the whole decode batch: anything below
    # this is not a meaningful temperature (0 already means greedy).
    check("temperature", temperature == 0 or temperature >= 1e-5, f"must be 0 (greedy) or >= 1e-05, got {temperature}")
    # Absent knobs are TensorRT-LLM's defaults (0, 0), and its rule decides: top_k == 0 and top_p == 0
    # is greedy, so `temperature` alone does not sample (engine/sampling.py trtllm_top_k_top_p).
    top_k = one(read, top_k_name, int, 0)
    check(top_k_name, top_k >= 0, f"must be >= 0 (0 disables top-k), got {top_k}")
    top_p = one(read, top_p_name, float, 0.0)
    check(top_p_name, 0.0 <= top_p <= 1.0, f"must be in [0, 1] (0 disables top-p), got {top_p}")
    top_k, top_p = trtllm_top_k_top_p(top_k, top_p)
    rep = one(read, "repetition_penalty", float, 1.0)
    check("repetition_penalty", rep > 0, f"must be > 0, got {rep}")
    presence = one(read, "presence_penalty", float, 0.0)
    frequency = one(read, "frequency_penalty", float, 0.0)
    for name, v in (("presence_penalty", presence), ("frequency_penalty", frequency)):
        check(name, -2.0 <= v <= 2.0, f"must be in [-2, 2], got {v}")
    min_tokens = one(read, "min_tokens", int, 0)
    check("min_tokens", 0 <= min_tokens <= max_tokens, f"must be in [0, max_tokens={max_tokens}], got {min_tokens}")
    beam = one(read, "beam_width", int, 1)
    check("beam_width", 1 <= beam <= max_beam_width, f"must be in [1, {max_beam_width}] for this engine, got {beam}")
    seed = one(read, "seed", int, None)
    return dict(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        repetition_penalty=rep,
        presence_penalty=presence,
        frequency_penalty=frequency,
        min_tokens=min_tokens,
        seed=seed,
    )
