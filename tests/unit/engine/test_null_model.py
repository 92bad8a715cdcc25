"""The null model (benchmarks of the serving layers without compute): the real engine serves exact
lengths from it, streamed or not, greedy or sampled, and the loader picks it from the environment."""

import pytest

from llmserve.engine.loader import load_model
from llmserve.engine.null_model import NULL_STEP_ENV, NullModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine


def _run(path, params: SamplingParams, streaming: bool, n_requests: int = 3) -> list[list[list[int]]]:
    model = NullModel(path, step_ms=0.0, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(path), stream_interval_s=0.0)
    outs = [[] for _ in range(n_requests)]
    for i in range(n_requests):  # more requests than slots: admission in flight
        engine.submit(
            Sequence(
                prompt=[1, 2, 3 + i],
                params=params,
                streaming=streaming,
                on_output=lambda s, tokens, lp, fin, why, i=i: outs[i].append(tokens),
            )
        )
    while engine.running or engine.waiting:
        engine.step()
    return outs


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=7, min_tokens=7),
        SamplingParams(max_new_tokens=7, temperature=0.8, seed=1, repetition_penalty=1.1),
    ],
)
def test_exact_lengths_streamed_one_token_per_step(tiny_llama, params):
    model = NullModel(tiny_llama, step_ms=0.0, max_slots=2, max_seq_len=64)
    for chunks in _run(tiny_llama, params, streaming=True):
        assert [len(c) for c in chunks] == [1] * 7
        tokens = sum(chunks, [])
        assert all(t >= 1000 and t not in model.cfg.eos_token_ids for t in tokens)
        assert len(set(tokens)) > 1  # different tokens, so detokenization downstream does work


def test_not_streamed_one_answer(tiny_llama):
    for chunks in _run(tiny_llama, SamplingParams(max_new_tokens=5, min_tokens=5), streaming=False):
        assert [len(c) for c in chunks] == [5]


def test_loader_picks_it_from_the_environment(tiny_llama, monkeypatch):
    monkeypatch.setenv(NULL_STEP_ENV, "0.5")
    model = load_model(tiny_llama, device="cpu", dtype="float32", max_slots=2, max_seq_len=64, cuda_graphs=True)
    assert isinstance(model, NullModel) and model.step_s == 0.0005
