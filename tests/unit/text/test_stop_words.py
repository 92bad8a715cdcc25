from llmserve.text.stop_words import StopMatcher
from llmserve.text.tokenizer import load_fast


def _feed(tok, matcher, text):
    for i, t in enumerate(tok.encode(text).ids):
        keep = matcher.push(t)
        if keep is not None:
            return i, keep
    return None, None


def test_stop_word_found_across_tokens_and_trimmed(smollm2_dir):
    tok = load_fast(smollm2_dir)
    m = StopMatcher(tok, ["\n\nUser:"])
    ids = tok.encode("Hello there.\n\nUser: next").ids
    at, keep = _feed(tok, m, "Hello there.\n\nUser: next")
    assert at is not None
    assert tok.decode(ids[:keep]) == "Hello there."


def test_partial_stop_word_is_held_back(smollm2_dir):
    tok = load_fast(smollm2_dir)
    m = StopMatcher(tok, ["STOP"])
    ids = tok.encode("abc ST").ids
    for t in ids:
        assert m.push(t) is None
    safe = m.safe_tokens()
    assert "ST" not in tok.decode(ids[:safe])
    assert safe < len(ids)
