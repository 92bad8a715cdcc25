"""tokens.py: a token's bytes are its vocabulary bytes, so the tokens of any text add up to its bytes
(a token inside a multi-byte character shows as `bytes:\\x..`, as OpenAI shows it)."""

from __future__ import annotations

from llmserve.openai_api.tokens import TokenText
from llmserve.spec import ROOT, load_spec
from llmserve.text.tokenizer import load_hf_tokenizer

TOKENIZER = str(load_spec(ROOT / "specs" / "default.yaml").checkpoint_path())


def test_tokens_add_up_to_the_text_bytes():
    tok = load_hf_tokenizer(TOKENIZER)
    t = TokenText(tok)
    assert t.byte_level
    for text in ("Hello, world!", " leading space\nand newline", "北京是中国的首都。🌊", "naïve café"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert b"".join(t.bytes_of(i) for i in ids) == text.encode("utf-8"), text
    ids = tok("北", add_special_tokens=False)["input_ids"]
    shown = [t.text_of(i) for i in ids]
    assert len(ids) > 1 and all(s.startswith("bytes:\\x") for s in shown), shown
    assert t.text_of(tok("Hello", add_special_tokens=False)["input_ids"][0]) == "Hello"
    assert t.text_of(tok.eos_token_id) == tok.eos_token
