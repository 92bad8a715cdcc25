"""Where a first token waits inside the engine: its queue time (arrival -> first step) and its time to
first token (arrival -> first token sampled), per request and summed in EngineStats for the metrics."""

import time

import torch

from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine

AGO_S = 100.0  # arrivals planted this far in the past: the sums below must include them


def test_queue_and_first_token_times_are_counted_from_arrival(tiny_llama):
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    arrival = time.monotonic() - AGO_S
    seqs = [
        Sequence(
            prompt=[1, 2, 3],
            params=SamplingParams(max_new_tokens=4, min_tokens=4),
            on_output=lambda *a: None,
            arrival=arrival,
        )
        for _ in range(3)
    ]
    for s in seqs:
        engine.submit(s)
    engine.step()
    st = engine.stats
    # Two slots: two requests in the first step, each with its first token; the third still waits.
    assert (st.admitted, st.first_tokens) == (2, 2)
    assert seqs[2].admitted_at is None and seqs[2].first_token_at is None
    while engine.running or engine.waiting:
        engine.step()
    assert (st.admitted, st.first_tokens) == (3, 3)
    for s in seqs:
        assert s.arrival < s.admitted_at <= s.first_token_at
    # The third was admitted only when a slot came free, after the others had finished.
    assert seqs[2].admitted_at > max(seqs[0].first_token_at, seqs[1].first_token_at)
    assert st.queue_seconds == sum(s.admitted_at - s.arrival for s in seqs)
    assert st.first_token_seconds == sum(s.first_token_at - s.arrival for s in seqs)
    assert st.first_token_seconds > st.queue_seconds >= 3 * AGO_S


def test_a_request_ended_by_its_first_token_is_counted_once(tiny_llama):
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    seq = Sequence(prompt=[1, 2, 3], params=SamplingParams(max_new_tokens=1), on_output=lambda *a: None)
    engine.submit(seq)
    while engine.running or engine.waiting:
        engine.step()
    assert (engine.stats.admitted, engine.stats.first_tokens) == (1, 1)
    assert seq.first_token_at is not None
