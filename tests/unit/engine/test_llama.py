"""Our Llama forward and in-flight batching reproduce transformers' greedy output exactly."""

import torch
from transformers import AutoModelForCausalLM

from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine

PROMPTS = [[1, 504, 3458, 314], [1, 20, 30, 40, 50, 60, 70, 80, 90], [5], [1, 2, 3, 4, 5, 6]]


def _hf_greedy(path, prompt, n):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


def _run_engine(path, arrivals, n):
    model = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=4, max_seq_len=64)
    engine = make_engine(model, load_fast(path))
    outputs = {}

    def collect(seq, tokens, logprobs, finished, reason):
        outputs.setdefault(seq.id, []).extend(tokens)

    seqs = [Sequence(prompt=p, params=SamplingParams(max_new_tokens=n), on_output=collect) for p in PROMPTS]
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


def test_inflight_batching_equals_one_at_a_time_transformers(tiny_llama):
    n = 12
    expected = [_hf_greedy(tiny_llama, p, n) for p in PROMPTS]
    # Requests join a running batch at different steps; each must still get exactly HF's tokens.
    got, stats = _run_engine(tiny_llama, arrivals=[0, 0, 3, 7], n=n)
    assert got == expected
    assert stats.max_batch_size_seen > 1 and stats.batched_steps > 0


def test_slots_are_reused_after_requests_finish(tiny_llama):
    # More requests than slots over time: finished sequences must free their slots cleanly.
    n = 5
    expected = [_hf_greedy(tiny_llama, p, n) for p in PROMPTS]
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    outputs = {}
    seqs = [Sequence(prompt=p, params=SamplingParams(max_new_tokens=n),
                     on_output=lambda s, t, lp, f, r: outputs.setdefault(s.id, []).extend(t)) for p in PROMPTS]
    for s in seqs:
        engine.submit(s)
    while engine.running or engine.waiting:
        engine.step()
    assert [outputs[s.id] for s in seqs] == expected
    assert sorted(engine.free_slots) == [0, 1]
