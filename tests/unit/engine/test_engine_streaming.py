"""Streaming from the engine: chunks concatenate to the non-streamed tokens; stream_interval batches
tokens into fewer responses."""

import torch

from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine


def _chunks(path, interval_s: float, n: int = 10) -> list[list[int]]:
    model = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(path), stream_interval_s=interval_s)
    chunks = []
    seq = Sequence(
        prompt=[1, 2, 3],
        params=SamplingParams(max_new_tokens=n, min_tokens=n),
        on_output=lambda s, tokens, lp, fin, why: chunks.append(tokens),
        streaming=True,
    )
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


def test_a_failing_callback_ends_only_its_own_request(tiny_llama):
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    good = []

    def broken(*_):
        raise RuntimeError("response sender closed")

    bad = Sequence(prompt=[1, 2], params=SamplingParams(max_new_tokens=8, min_tokens=8), on_output=broken)
    ok = Sequence(
        prompt=[1, 3],
        params=SamplingParams(max_new_tokens=8, min_tokens=8),
        on_output=lambda s, tokens, lp, fin, why: good.append((tokens, fin, why)),
    )
    engine.submit(bad)
    engine.submit(ok)
    while engine.running or engine.waiting:
        engine.step()
    assert sum(len(t) for t, _, _ in good) == 8 and good[-1][1:] == (True, "length")
    assert engine.stats.cancelled == 1 and sorted(engine.free_slots) == [0, 1]


def _run(path, params: SamplingParams, streaming: bool = True) -> tuple[list[int], str]:
    model = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(path))
    out, why = [], []
    seq = Sequence(
        prompt=[1, 2, 3],
        params=params,
        on_output=lambda s, tokens, lp, fin, reason: (out.extend(tokens), why.append(reason)),
        streaming=streaming,
    )
    engine.submit(seq)
    while engine.running or engine.waiting:
        engine.step()
    return out, why[-1].value


def test_a_stop_token_sequence_ends_the_output_and_stays_in_it(tiny_llama):
    """TensorRT-LLM's stop criterion (stop_words_match "tokens", the default): the generation ends when
    its tokens end with a stop word's ids, and those ids are the end of the output."""
    free, _ = _run(tiny_llama, SamplingParams(max_new_tokens=10, min_tokens=10))
    word = free[3:5]
    assert word[0] not in free[:3], "the tiny model's greedy tokens repeat: pick another window"
    for streaming in (True, False):
        out, why = _run(tiny_llama, SamplingParams(max_new_tokens=10, stop_sequences=[[99999], word]), streaming)
        assert out == free[:5] and why == "stop_word"
    # Only the whole sequence stops: its first token alone, followed by another, does not.
    out, why = _run(tiny_llama, SamplingParams(max_new_tokens=10, min_tokens=10, stop_sequences=[[word[0], -1]]))
    assert out == free and why == "length"
