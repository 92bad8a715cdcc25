import torch

from llmserve.engine.sampling import SamplingParams, sample


def _logits(seed=0, rows=3, vocab=50):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g)


def test_greedy_is_argmax():
    logits = _logits()
    tokens, logprobs = sample(logits, [SamplingParams(max_new_tokens=1)] * 3, [[]] * 3, [[]] * 3, [None] * 3)
    assert tokens == logits.argmax(-1).tolist()
    assert all(lp <= 0 for lp in logprobs)


def test_seeded_sampling_does_not_depend_on_batch_neighbours():
    p = SamplingParams(max_new_tokens=1, temperature=1.0, top_p=0.9)
    logits = _logits()
    alone = sample(logits[:1], [p], [[]], [[]], [torch.Generator().manual_seed(7)])[0][0]
    greedy = SamplingParams(max_new_tokens=1)
    batched = sample(logits, [p, greedy, greedy], [[]] * 3, [[]] * 3, [torch.Generator().manual_seed(7), None, None])[
        0
    ][0]
    assert alone == batched


def test_top_k_one_and_penalties():
    logits = _logits(rows=1)
    best = int(logits[0].argmax())
    assert sample(
        logits,
        [SamplingParams(max_new_tokens=1, temperature=1.0, top_k=1)],
        [[]],
        [[]],
        [torch.Generator().manual_seed(0)],
    )[0] == [best]
    banned = SamplingParams(max_new_tokens=1, bad_words=[[best]])
    assert sample(logits, [banned], [[]], [[]], [None])[0] != [best]
    no_eos = SamplingParams(max_new_tokens=5, end_ids=(best,), min_tokens=2)
    assert sample(logits, [no_eos], [[]], [[]], [None])[0] != [best]


def test_top_p_keeps_only_the_nucleus():
    logits = torch.tensor([[10.0, 9.0, -10.0, -10.0]])
    p = SamplingParams(max_new_tokens=1, temperature=1.0, top_p=0.5)
    draws = {sample(logits, [p], [[]], [[]], [torch.Generator().manual_seed(s)])[0][0] for s in range(50)}
    assert draws == {0}
