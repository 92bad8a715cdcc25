"""A request's sampling parameters and TensorRT-LLM's top-k / top-p rule, without torch: the request
readers (request/) and the tensorrtllm layout's relay import them, and the relay's stub has no use for
torch (it need not even be installed there)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    max_new_tokens: int
    end_ids: tuple[int, ...] = ()
    temperature: float = 0.0  # 0: greedy (the default, like TensorRT-LLM with no sampling knobs set)
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    seed: int | None = None
    stop_words: list[str] = field(default_factory=list)  # matched on the text (text/stop_words.py)
    stop_sequences: list[list[int]] = field(default_factory=list)  # matched as token sequences (upstream's way)
    bad_words: list[list[int]] = field(default_factory=list)
    # guided decoding: the xgrammar CompiledGrammar the output must match (engine/guided.py), or None
    grammar: object | None = None
    # the k most likely tokens (ids, log-probs) to report at each generated position (contract.TOP_LOG_PROBS)
    top_logprobs: int = 0
    # each generated token's raw logits row (the model's, before any mask or penalty): the tensorrtllm
    # layout's stand-in answers TensorRT-LLM's generation_logits from it (pipeline/standin.py)
    return_logits: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def plain(self) -> bool:
        """Nothing but argmax or plain sampling, plus at most the min_tokens end-token mask, is
        needed (the batched fast path)."""
        return (
            self.repetition_penalty == 1.0
            and self.presence_penalty == 0.0
            and self.frequency_penalty == 0.0
            and not self.bad_words
        )


def trtllm_top_k_top_p(top_k: int, top_p: float) -> tuple[int, float]:
    """TensorRT-LLM's sampling rule for runtime_top_k / runtime_top_p (both default to 0 there:
    DefaultDecodingParams::getTopK / getTopP), as its sampling layers' setup applies it: k == 0 and
    p == 0 is greedy (k becomes 1), k > 0 and p == 0 is top-k alone (p becomes 1), k == 0 and p > 0 is
    top-p alone. So `temperature` alone, with neither knob, is greedy. Returns the explicit (top_k,
    top_p) this engine uses (top_k 0: no cut, top_p 1: no cut)."""
    if top_k == 0 and top_p == 0.0:
        return 1, 1.0
    return top_k, (1.0 if top_p == 0.0 else top_p)
