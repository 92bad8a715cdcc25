"""Per-request sampling: penalties, bad words, min_tokens, greedy / temperature / top-k / top-p,
with a per-request generator so a seeded request samples the same tokens whatever it is batched with."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .params import SamplingParams, trtllm_top_k_top_p  # noqa: F401  (the engine samples with them)


def _penalize(logits: torch.Tensor, p: SamplingParams, prompt: list[int], generated: list[int]) -> None:
    """In place on one row [V]."""
    dev = logits.device
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt) | set(generated)), device=dev, dtype=torch.long)
        vals = logits[seen]
        logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if generated and (p.presence_penalty or p.frequency_penalty):
        ids, counts = torch.tensor(generated, device=dev).unique(return_counts=True)
        logits[ids] -= p.presence_penalty + p.frequency_penalty * counts.to(logits.dtype)
    for word in p.bad_words:
        prefix = word[:-1]
        if not prefix or generated[len(generated) - len(prefix) :] == prefix:
            logits[word[-1]] = float("-inf")


def _sample_row(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator | None) -> int:
    logits = logits / p.temperature
    if p.top_k > 0 and p.top_k < logits.shape[-1]:
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if p.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= p.top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=gen))


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    prompts: list[list[int]],
    generated: list[list[int]],
    generators: list[torch.Generator | None],
    constrain: Callable[[torch.Tensor], None] | None = None,
) -> tuple[list[int], list[float]]:
    """logits: [B, V] float32 -> (token per row, log-probability of that token under the model).
    constrain: masks the logits in place before anything else (guided decoding: engine/guided.Masker);
    the log-probs stay the model's own (before the mask, the penalties and the temperature), as
    OpenAI's and TensorRT-LLM's are."""
    logprobs_all = torch.log_softmax(logits, dim=-1)
    if constrain is not None:
        logits = logits.clone()  # the caller's logits may be a graph's output buffer
        constrain(logits)
    # min_tokens: forbid the end tokens of rows still short of it, in one indexed write for the batch.
    rows = [(i, e) for i, p in enumerate(params) if p.end_ids and len(generated[i]) < p.min_tokens for e in p.end_ids]
    if rows:
        r, c = zip(*rows)
        logits = logits.clone()
        logits[torch.tensor(r, device=logits.device), torch.tensor(c, device=logits.device)] = float("-inf")
    if all(p.greedy and p.plain for p in params):
        tokens = logits.argmax(-1)
        lp = logprobs_all.gather(1, tokens.unsqueeze(1)).squeeze(1)
        return tokens.tolist(), lp.tolist()
    out = []
    for i, p in enumerate(params):
        row = logits[i].clone()
        if not p.plain:
            _penalize(row, p, prompts[i], generated[i])
        out.append(int(row.argmax()) if p.greedy else _sample_row(row, p, generators[i]))
    idx = torch.tensor(out, device=logits.device)
    lp = logprobs_all.gather(1, idx.unsqueeze(1)).squeeze(1)
    return out, lp.tolist()
