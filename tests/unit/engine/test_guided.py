"""engine/guided.py and its use in the engine: grammars compiled once per (type, guide) and evicted
least recently used first; the mask touches only guided rows; a guided sequence's output matches its
grammar even from a random model (which would never produce it by chance), ends with the end token
only when the grammar is complete, and an unguided sequence batched with it is unchanged."""

import re

import pytest
import torch
from transformers import AutoTokenizer

from llmserve.engine import guided
from llmserve.engine.llama import LlamaModel
from llmserve.engine.null_model import NullModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.finish import FinishReason
from llmserve.text import xgrammar_info
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine


@pytest.fixture(scope="module")
def hf_tok(tiny_llama):
    return AutoTokenizer.from_pretrained(tiny_llama, local_files_only=True)


@pytest.fixture(scope="module")
def info(hf_tok):
    return guided.tokenizer_info_from_hf(hf_tok, len(hf_tok), [hf_tok.eos_token_id])


def test_compiled_grammars_are_cached_per_type_and_guide_lru(info):
    cache = guided.GrammarCache(info, capacity=2)
    a = cache.compile("regex", "[0-9]+")
    assert cache.compile("regex", "[0-9]+") is a and (cache.hits, cache.misses) == (1, 1)
    cache.compile("ebnf_grammar", "root ::= [0-9]+")  # same language, other type: its own entry
    cache.compile("regex", "[0-9]+")  # a is now the most recent
    cache.compile("json", "")  # evicts the ebnf entry, the least recently used
    assert cache.compile("regex", "[0-9]+") is a
    assert cache.misses == 3
    cache.compile("ebnf_grammar", "root ::= [0-9]+")
    assert cache.misses == 4


def test_the_mask_touches_only_guided_rows(info, hf_tok):
    cache = guided.GrammarCache(info)
    m = guided.matcher(cache.compile("regex", "[0-9]+"), [hf_tok.eos_token_id])
    assert guided.masker([None, None]) is None  # an unguided step does no grammar work
    logits = torch.randn(3, len(hf_tok))
    before = logits.clone()
    guided.masker([None, m, None])(logits)
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert allowed and all(re.fullmatch(r"[0-9]+", hf_tok.decode([t])) for t in allowed)
    assert hf_tok.eos_token_id not in allowed  # nothing matched yet: the grammar is not complete
    assert m.accept_token(hf_tok.convert_tokens_to_ids("7"))
    logits = torch.zeros(1, len(hf_tok))
    guided.masker([m])(logits)
    assert torch.isfinite(logits[0, hf_tok.eos_token_id])  # complete: the end token is allowed now


def test_the_batched_fill_and_accept_equal_the_row_by_row_ones(info, hf_tok):
    """From BATCH_MIN_ROWS guided rows on, xgrammar's batched matcher does the work: same masks, same verdicts."""
    compiled = guided.GrammarCache(info).compile("regex", "[0-9]+-[a-z]+")
    n = guided.BATCH_MIN_ROWS + 1
    batched, looped = ([guided.matcher(compiled, [hf_tok.eos_token_id]) for _ in range(n)] for _ in range(2))
    digit, dash = hf_tok.convert_tokens_to_ids("7"), hf_tok.convert_tokens_to_ids("-")
    tokens = [digit if i % 2 else dash for i in range(n)]  # a dash first breaks the grammar
    assert guided.accept(batched, tokens) == [m.accept_token(t) for m, t in zip(looped, tokens)]
    rows = [None, *batched]  # row 0 unguided
    a, b = torch.zeros(n + 1, len(hf_tok)), torch.zeros(n + 1, len(hf_tok))
    guided.masker(rows)(a)
    for i, m in enumerate(looped, start=1):
        guided.masker([m]).subset([0])(b[i : i + 1])
    assert torch.equal(torch.isfinite(a), torch.isfinite(b))


def test_bad_guides_raise_guide_error(info):
    cache = guided.GrammarCache(info)
    with pytest.raises(guided.GuideError, match="not a valid regex"):
        cache.compile("regex", "(")
    with pytest.raises(guided.GuideError, match="must be one of"):
        cache.compile("xml", "<a/>")


def test_the_tokenizer_info_file_gives_the_same_masks(tmp_path, hf_tok, info):
    path = xgrammar_info.write(hf_tok, tmp_path / xgrammar_info.FILE_NAME)
    from_file = guided.tokenizer_info_from_file(path, len(hf_tok))
    assert (from_file.vocab_size, from_file.vocab_type, from_file.stop_token_ids) == (
        info.vocab_size,
        info.vocab_type,
        info.stop_token_ids,
    )
    masks = []
    for i in (info, from_file):
        m = guided.matcher(guided.GrammarCache(i).compile("json", ""), [hf_tok.eos_token_id])
        logits = torch.zeros(1, len(hf_tok))
        guided.masker([m])(logits)
        masks.append(torch.isfinite(logits))
    assert torch.equal(*masks)


def _run(model_dir, hf_tok, info, requests, model=None):
    """requests: (prompt ids, guide or None); greedy, one batch. -> [(text, finish reason)]"""
    model = model or LlamaModel(model_dir, torch.device("cpu"), torch.float32, max_slots=4, max_seq_len=96)
    engine = make_engine(model, load_fast(model_dir))
    cache = guided.GrammarCache(info)
    out = [None] * len(requests)
    for i, (prompt, guide) in enumerate(requests):
        grammar = cache.compile(*guide) if guide else None
        params = SamplingParams(max_new_tokens=24, end_ids=(hf_tok.eos_token_id,), grammar=grammar)

        def done(seq, tokens, lp, finished, why, i=i):
            if finished:
                out[i] = (hf_tok.decode(seq.generated), why)

        engine.submit(Sequence(prompt=prompt, params=params, on_output=done, streaming=False))
    while engine.running or engine.waiting:
        engine.step()
    return out


def test_a_random_model_follows_the_grammar_and_unguided_rows_are_unaffected(tiny_llama, hf_tok, info):
    prompts = [hf_tok.encode("Give me a number:"), hf_tok.encode("Hello there")]
    (alone,) = _run(tiny_llama, hf_tok, info, [(prompts[1], None)])
    phone, yes_no, plain = _run(
        tiny_llama,
        hf_tok,
        info,
        [
            (prompts[0], ("regex", "[0-9]{3}-[0-9]{4}")),
            (prompts[0], ("ebnf_grammar", 'root ::= "yes" | "no"')),
            (prompts[1], None),
        ],
    )
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", phone[0]) and phone[1] is FinishReason.STOP
    assert yes_no[0] in ("yes", "no") and yes_no[1] is FinishReason.STOP
    assert plain == alone  # batched with guided rows, greedy output as when alone


def test_the_decode_graph_path_fills_the_masks_while_the_step_runs(tiny_llama, hf_tok, info):
    """Through decode graphs (the null model's, which take the same `overlap` hook as CUDA graphs): the
    guided rows' masks are filled during the step, then applied to those rows only, after the graph's
    greedy pick (one-hot logits of tokens the grammar does not allow)."""
    model = NullModel(tiny_llama, step_ms=0.0, max_slots=4, max_seq_len=96)
    prompt = hf_tok.encode("Give me a number:")
    phone, plain = _run(tiny_llama, hf_tok, info, [(prompt, ("regex", "[0-9]{3}-[0-9]{4}")), (prompt, None)], model)
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", phone[0]) and phone[1] is FinishReason.STOP
    assert plain[1] is FinishReason.LENGTH and not re.fullmatch(r"[0-9-]*", plain[0])  # the mask stayed on its row


def test_top_log_probs_are_the_models_own_distribution(tiny_llama, hf_tok, info):
    """num_top_log_probs: per generated token the k most likely ids and log-probs, from the logits
    before any mask, so a greedy unguided token is the first alternative with its own log-prob, and a
    guided row reports what the model wanted, not what the grammar allowed."""
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    grammar = guided.GrammarCache(info).compile("regex", "[0-9]{6}")
    seqs = [
        Sequence(prompt=[5, 6, 7], params=SamplingParams(max_new_tokens=6, top_logprobs=5), on_output=lambda *a: None),
        Sequence(
            prompt=[5, 6, 7],
            params=SamplingParams(max_new_tokens=6, top_logprobs=3, grammar=grammar),
            on_output=lambda *a: None,
        ),
    ]
    for s in seqs:
        engine.submit(s)
    while engine.running or engine.waiting:
        engine.step()
    plain, digits = seqs
    assert len(plain.top_ids) == len(plain.generated) == 6 and all(len(r) == 5 for r in plain.top_ids)
    for tok, lp, ids, lps in zip(plain.generated, plain.logprobs, plain.top_ids, plain.top_lps):
        assert ids[0] == tok and lps[0] == pytest.approx(lp, abs=1e-5) and lps == sorted(lps, reverse=True)
    # The same prompt: the first position's alternatives are the same whatever the grammar allowed.
    assert digits.top_ids[0] == plain.top_ids[0][:3]
    assert re.fullmatch("[0-9]{6}", hf_tok.decode(digits.generated))
    for tok, lp, ids, lps in zip(digits.generated, digits.logprobs, digits.top_ids, digits.top_lps):
        if tok in ids:  # the chosen token's log-prob is from the same (unmasked) distribution
            assert lps[ids.index(tok)] == pytest.approx(lp, abs=1e-5)
