"""Streamed chunks, detokenized with their context, concatenate to the whole text exactly."""

import random

import pytest

from llmserve.contract import CONTEXT_TOKENS
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast

TEXTS = [
    "你好，世界 🎉 héllo! 日本語のテキスト 👩‍👩‍👧 ok",
    "plain ascii, with  double  spaces\nand lines",
    "Ünïcödé ñ ç 😀😃😄 Ελληνικά русский",
]


@pytest.mark.parametrize("text", TEXTS)
def test_random_chunking_equals_whole(smollm2_dir, text):
    tok = load_fast(smollm2_dir)
    d = Detokenizer(tok)
    ids = tok.encode(text).ids
    rng = random.Random(0)
    for _ in range(100):
        cut = ids[: rng.randint(1, len(ids))]  # also generations cut mid-character
        pieces, pos = [], 0
        while pos < len(cut):
            k = rng.randint(1, 3)
            pieces.append(d.decode(cut[pos : pos + k], cut[max(0, pos - CONTEXT_TOKENS) : pos]))
            pos += k
        assert "".join(pieces) == d.decode(cut)
    assert d.decode(ids) == text


def test_single_token_decoding_alone_would_break(smollm2_dir):
    """The bug this design avoids: decoding byte tokens one by one gives U+FFFD."""
    tok = load_fast(smollm2_dir)
    ids = tok.encode("你好世界").ids
    assert "\ufffd" in "".join(tok.decode([i]) for i in ids)


@pytest.mark.parametrize("text", TEXTS)
def test_decode_many_equals_decode_one_by_one(smollm2_dir, text):
    d = Detokenizer(load_fast(smollm2_dir))
    ids = d.tok.encode(text).ids
    rng = random.Random(1)
    items = []
    for _ in range(50):
        pos, k = rng.randint(0, len(ids) - 1), rng.randint(0, 3)
        items.append((ids[pos : pos + k], ids[max(0, pos - rng.randint(0, CONTEXT_TOKENS)) : pos]))
    assert d.decode_many(items) == [d.decode(i, c) for i, c in items]


def test_sentencepiece_byte_fallback_random_chunks(sentencepiece):
    """Llama / Mistral style: byte-fallback tokens for CJK and emoji, "▁" spaces stripped at the
    start; chunks and generations cut anywhere, including inside a character. (Limit, documented in
    text/detokenize.py: a run of byte tokens that is not valid UTF-8 at all decodes to U+FFFD as a
    whole, so a stream may already have shown its valid bytes; real model output is valid UTF-8.)"""
    d = Detokenizer(sentencepiece)
    rng = random.Random(1)
    for text in TEXTS:
        ids = sentencepiece.encode(text).ids
        assert d.decode(ids) == text
        for _ in range(100):
            cut = ids[: rng.randint(1, len(ids))]
            pieces, pos = [], 0
            while pos < len(cut):
                k = rng.randint(1, 3)
                pieces.append(d.decode(cut[pos : pos + k], cut[max(0, pos - CONTEXT_TOKENS) : pos]))
                pos += k
            assert "".join(pieces) == d.decode(cut), cut
