"""Streaming from the engine: chunks concatenate to the non-streamed tokens; stream_interval batches
tokens into fewer responses."""

import torch

from llmserve.engine.engine import Engine, Sequence
from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.tokenizer import load_fast


def _chunks(path, interval_s: float, n: int = 10) -> list[list[int]]:
    model = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = Engine(model, load_fast(path), stream_interval_s=interval_s)
    chunks = []
    seq = Sequence(prompt=[1, 2, 3], params=SamplingParams(max_new_tokens=n, min_tokens=n),
                   on_output=lambda s, tokens, lp, fin, why: chunks.append(tokens), streaming=True)
    engine.submit(seq)
    while engine.running or engine.waiting:
        engine.step()
    return chunks


def test_every_token_by_default_and_coalesced_with_an_interval(tiny_llama):
    every = _chunks(tiny_llama, 0.0)
    assert [len(c) for c in every] == [1] * 10
    coalesced = _chunks(tiny_llama, 3600.0)
    # The first token goes out at once (time to first token), the rest together at the end.
    assert [len(c) for c in coalesced] == [1, 9]
    assert sum(coalesced, []) == sum(every, [])
