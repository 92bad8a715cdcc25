"""Our Llama forward and in-flight batching reproduce transformers' greedy output exactly."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from llmserve.engine.cuda_graphs import DecodeGraphs
from llmserve.engine.llama import LlamaModel
from llmserve.engine.prefill_graphs import PrefillGraphs
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine

PROMPTS = [[1, 504, 3458, 314], [1, 20, 30, 40, 50, 60, 70, 80, 90], [5], [1, 2, 3, 4, 5, 6]]


def _hf_greedy(path, prompt, n):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def _run_engine(path, arrivals, n, graphs=False, params=None):
    model = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=4, max_seq_len=64)
    if graphs:  # the CUDA-graph steps, run eagerly: padded prefill buckets; greedy tokens from the decode step
        model.graphs = DecodeGraphs(model, capture=False)
        model.prefill_graphs = PrefillGraphs(model, max_input_len=16, capture=False)
    engine = make_engine(model, load_fast(path))
    outputs = {}

    def collect(seq, tokens, logprobs, finished, reason):
        outputs.setdefault(seq.id, []).extend(tokens)

    params = params or [SamplingParams(max_new_tokens=n) for _ in PROMPTS]
    seqs = [Sequence(prompt=p, params=sp, on_output=collect) for p, sp in zip(PROMPTS, params)]
    for step in range(200):
        for i in [i for i, at in enumerate(arrivals) if at == step]:
            engine.submit(seqs[i])
        if step > max(arrivals) and not engine.running and not engine.waiting:
            break
        engine.step()
    return [outputs[s.id] for s in seqs], engine.stats


def test_prefill_logits_match_transformers(tiny_llama):
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    ours = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    prompt = torch.tensor([PROMPTS[1]])
    expected = hf(prompt).logits[0, -1]
    got = ours.forward(prompt, torch.tensor([1]), torch.arange(prompt.shape[1])[None], None, prompt.shape[1])[0]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graph-step"])
def test_inflight_batching_equals_one_at_a_time_transformers(tiny_llama, graphs):
    n = 12
    expected = [_hf_greedy(tiny_llama, p, n) for p in PROMPTS]
    # Requests join a running batch at different steps; each must still get exactly HF's tokens.
    got, stats = _run_engine(tiny_llama, arrivals=[0, 0, 3, 7], n=n, graphs=graphs)
    assert got == expected
    assert stats.max_batch_size_seen > 1 and stats.batched_steps > 0


def test_slots_are_reused_after_requests_finish(tiny_llama):
    # More requests than slots over time: finished sequences must free their slots cleanly.
    n = 5
    expected = [_hf_greedy(tiny_llama, p, n) for p in PROMPTS]
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    outputs = {}
    seqs = [
        Sequence(
            prompt=p,
            params=SamplingParams(max_new_tokens=n),
            on_output=lambda s, t, lp, f, r: outputs.setdefault(s.id, []).extend(t),
        )
        for p in PROMPTS
    ]
    for s in seqs:
        engine.submit(s)
    while engine.running or engine.waiting:
        engine.step()
    assert [outputs[s.id] for s in seqs] == expected
    assert sorted(engine.free_slots) == [0, 1]


def test_graph_step_mixes_greedy_sampled_and_min_tokens_rows_like_the_eager_path(tiny_llama):
    """Rows that need more than argmax (seeded sampling, penalties, min_tokens with an end id that
    the argmax picks) fall back to the logits; every row gets what the eager path gives it."""
    n = 10
    first = _run_engine(tiny_llama, arrivals=[0, 0, 0, 0], n=n)[0]
    eos = first[0][2]  # an end id the greedy path emits at step 3: min_tokens must mask it
    params = [
        SamplingParams(max_new_tokens=n, end_ids=(eos,), min_tokens=n),
        SamplingParams(max_new_tokens=n, temperature=0.8, seed=7),
        SamplingParams(max_new_tokens=n, repetition_penalty=1.3),
        SamplingParams(max_new_tokens=n, end_ids=(eos,)),
    ]
    eager, _ = _run_engine(tiny_llama, arrivals=[0, 1, 2, 3], n=n, params=params)
    step, _ = _run_engine(tiny_llama, arrivals=[0, 1, 2, 3], n=n, graphs=True, params=params)
    assert step == eager
    assert len(eager[0]) == n and eager[0][2] != eos  # min_tokens masked the argmax end token at step 3
