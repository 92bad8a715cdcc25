"""Issue 19's OpenAI fields with the real `openai` SDK against a real server (SmolLM2 on one
tritonserver, the frontend in front): several choices (`n`, `best_of`, a list of prompts), log
probabilities (chat `logprobs` / `top_logprobs`, completions `logprobs`), `echo`, and streamed
answers equal to whole ones. Greedy unless a test samples on purpose."""

from __future__ import annotations

import math

import pytest

from llmserve.openai_api.tokens import TokenText

from .conftest import MODEL, one_server_stack

pytestmark = [pytest.mark.e2e, pytest.mark.smollm2]
GREEDY = {"temperature": 0}
CJK = "请用中文介绍一下北京，并加上一个表情符号。"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    yield from one_server_stack(tmp_path_factory.mktemp("openai-fields"))


def chat(content: str) -> list[dict]:
    return [{"role": "user", "content": content}]


def merge_stream(chunks) -> dict[int, dict]:
    """index -> {content, logprobs (list), finish_reason} from a chat stream."""
    out: dict[int, dict] = {}
    for ch in chunks:
        for c in ch.choices:
            o = out.setdefault(c.index, {"content": "", "logprobs": [], "finish_reason": None})
            o["content"] += c.delta.content or ""
            if c.logprobs is not None and c.logprobs.content:
                o["logprobs"] += [t.model_dump() for t in c.logprobs.content]
            if c.finish_reason:
                o["finish_reason"] = c.finish_reason
    return out


def test_chat_n_choices_streamed_equal_whole_with_logprobs(stack):
    c = stack.client()
    kw = dict(model=MODEL, messages=chat(CJK), max_tokens=24, n=3, logprobs=True, **GREEDY)
    whole = c.chat.completions.create(**kw)
    assert [ch.index for ch in whole.choices] == [0, 1, 2]
    chunks = list(c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = merge_stream(chunks)
    assert sorted(streamed) == [0, 1, 2]
    total = 0
    for ch in whole.choices:
        s = streamed[ch.index]
        text = ch.message.content
        assert s["content"].encode() == text.encode() and s["finish_reason"] == ch.finish_reason
        entries = [t.model_dump() for t in ch.logprobs.content]
        # Tokens and bytes exact; the bytes of the tokens are the text's.
        assert [(e["token"], e["bytes"]) for e in entries] == [(e["token"], e["bytes"]) for e in s["logprobs"]]
        # The tokens' bytes are the text's (and the bytes of a character cut by max_tokens, which the text drops).
        raw = bytes(b for e in entries for b in e["bytes"])
        assert raw.startswith(text.encode()) and len(raw) - len(text.encode()) < 4, (raw, text)
        for a, b in zip(entries, s["logprobs"]):
            assert math.isclose(a["logprob"], b["logprob"], abs_tol=1e-4) and a["logprob"] <= 0
        total += len(entries)
    # Greedy: three identical choices; usage counts the prompt once and every generated token.
    assert len({ch.message.content for ch in whole.choices}) == 1
    assert whole.usage.completion_tokens == total
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    one = c.chat.completions.create(model=MODEL, messages=chat(CJK), max_tokens=24, **GREEDY)
    assert whole.usage.prompt_tokens == one.usage.prompt_tokens
    # Each choice has its role chunk and its finish chunk.
    assert sum(1 for ch in chunks for x in ch.choices if x.delta.role == "assistant") == 3
    assert sum(1 for ch in chunks for x in ch.choices if x.finish_reason) == 3


def test_sampled_choices_differ_and_a_seed_repeats_them(stack):
    c = stack.client()
    kw = dict(model=MODEL, messages=chat("Write a word."), max_tokens=12, n=4, temperature=1.0, seed=7)
    a = c.chat.completions.create(**kw)
    b = c.chat.completions.create(**kw)
    texts = [ch.message.content for ch in a.choices]
    assert texts == [ch.message.content for ch in b.choices]
    assert len(set(texts)) > 1, texts


def test_completions_prompt_list_n_echo_and_logprobs(stack):
    c = stack.client()
    prompts = ["The capital of France is", "北京是中国的首都。"]
    kw = dict(model=MODEL, prompt=prompts, max_tokens=10, n=2, logprobs=0, **GREEDY)
    whole = c.completions.create(**kw)
    assert [ch.index for ch in whole.choices] == [0, 1, 2, 3]  # prompt-major
    singles = [c.completions.create(model=MODEL, prompt=p, max_tokens=10, **GREEDY) for p in prompts]
    for ch in whole.choices:
        ref = singles[ch.index // 2].choices[0]
        assert ch.text == ref.text and ch.finish_reason == ref.finish_reason
        lp = ch.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
        assert all(d == {t: v} for d, t, v in zip(lp.top_logprobs, lp.tokens, lp.token_logprobs))
        assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    assert whole.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert whole.usage.completion_tokens == 2 * sum(s.usage.completion_tokens for s in singles)
    # Streamed: the same texts and log probs per index.
    got: dict[int, list] = {}
    for ch in c.completions.create(**kw, stream=True):
        for x in ch.choices:
            g = got.setdefault(x.index, ["", [], None])
            g[0] += x.text
            if x.logprobs is not None:
                g[1] += x.logprobs.tokens
            g[2] = x.finish_reason or g[2]
    for ch in whole.choices:
        assert got[ch.index] == [ch.text, ch.logprobs.tokens, ch.finish_reason]
    # echo: the prompt, then the completion.
    e = c.completions.create(model=MODEL, prompt=prompts[0], max_tokens=10, echo=True, **GREEDY)
    assert e.choices[0].text == prompts[0] + singles[0].choices[0].text
    streamed = "".join(
        x.text
        for ch in c.completions.create(model=MODEL, prompt=prompts[0], max_tokens=10, echo=True, stream=True, **GREEDY)
        for x in ch.choices
    )
    assert streamed == e.choices[0].text


def test_best_of_returns_the_best_and_counts_every_candidate(stack):
    c = stack.client()
    r = c.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=8, best_of=3, n=2, temperature=1.0, seed=3, logprobs=0
    )
    assert [ch.index for ch in r.choices] == [0, 1]
    means = [sum(ch.logprobs.token_logprobs) / len(ch.logprobs.token_logprobs) for ch in r.choices]
    assert means == sorted(means, reverse=True)
    assert r.usage.completion_tokens >= sum(len(ch.logprobs.tokens) for ch in r.choices)


@pytest.mark.parametrize(
    "body,param",
    [
        ({"best_of": 1, "n": 2}, "best_of"),
        ({"best_of": 2, "stream": True}, "best_of"),
        ({"echo": True, "logprobs": 0}, "echo"),
        ({"logprobs": 6}, "logprobs"),
        ({"prompt": ["a", 1]}, "prompt[1]"),
    ],
)
def test_completion_refusals_name_the_field(stack, body, param):
    import requests

    r = requests.post(
        stack.base_url + "/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2, **body}, timeout=60
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


TOLERANCE = 1e-3  # absolute, on log-probabilities (fp32 on CPU both); measured at most 1.0e-5 (48 greedy tokens)


@pytest.fixture(scope="module")
def reference(stack):
    """transformers' greedy continuation of a raw prompt, fp32 on CPU: [(token id, its log-prob,
    the 5 most likely (id, log-prob) at that step)]."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from llmserve.text.tokenizer import load_hf_tokenizer

    tok = load_hf_tokenizer(stack.tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(stack.tokenizer_dir, dtype=torch.float32).eval()
    ids = tok(REF_PROMPT, add_special_tokens=False)["input_ids"]
    steps = []
    with torch.no_grad():
        for _ in range(REF_TOKENS):
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            top = torch.topk(lp, 5)
            nxt = int(top.indices[0])
            steps.append((nxt, float(lp[nxt]), list(zip(top.indices.tolist(), top.values.tolist()))))
            ids.append(nxt)
    return tok, steps


REF_PROMPT = "The three primary colors are"
REF_TOKENS = 12


def test_logprobs_agree_with_transformers(stack, reference):
    tok, steps = reference
    c = stack.client()
    r = c.completions.create(model=MODEL, prompt=REF_PROMPT, max_tokens=REF_TOKENS, logprobs=0, **GREEDY)
    lp = r.choices[0].logprobs
    text = TokenText(tok).text_of
    assert lp.tokens == [text(i) for i, _, _ in steps][: len(lp.tokens)] and len(lp.tokens) >= 4, lp.tokens
    for (_, ref, _), mine in zip(steps, lp.token_logprobs):
        assert abs(ref - mine) <= TOLERANCE, (ref, mine)


def test_top_logprobs_agree_with_transformers(stack, reference):
    """5 alternatives per token, the same tokens as transformers' 5 most likely and their
    log-probabilities within TOLERANCE; chat and completions, streamed as whole."""
    tok, steps = reference
    text = TokenText(tok).text_of
    c = stack.client()
    r = c.completions.create(model=MODEL, prompt=REF_PROMPT, max_tokens=REF_TOKENS, logprobs=5, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.top_logprobs) == len(lp.tokens) >= 4
    for (_, _, top), got in zip(steps, lp.top_logprobs):
        want = {text(i): v for i, v in top}
        assert set(got) == set(want), (got, want)
        assert all(abs(got[t] - want[t]) <= TOLERANCE for t in want), (got, want)
    chat = [{"role": "user", "content": "Name a color."}]
    kw = dict(model=MODEL, messages=chat, max_tokens=8, logprobs=True, top_logprobs=5, **GREEDY)
    whole = c.chat.completions.create(**kw).choices[0].logprobs.content
    assert whole and all(len(e.top_logprobs) == 5 for e in whole)
    for e in whole:
        alts = [a.logprob for a in e.top_logprobs]
        assert alts == sorted(alts, reverse=True) and e.top_logprobs[0].token == e.token  # greedy: the top one
        assert all(bytes(a.bytes) == a.token.encode() for a in e.top_logprobs if not a.token.startswith("bytes:"))
    streamed = [
        e
        for ch in c.chat.completions.create(**kw, stream=True)
        for x in ch.choices
        for e in ((x.logprobs.content or []) if x.logprobs else [])
    ]
    assert [(e.token, [a.token for a in e.top_logprobs]) for e in streamed] == [
        (e.token, [a.token for a in e.top_logprobs]) for e in whole
    ]
