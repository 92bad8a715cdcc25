"""The token-level path's streamed text: exact, stop strings cut, what may grow into one held back."""

import pytest

from llmserve.text.stream_text import StreamText
from llmserve.text.tokenizer import load_fast

TEXT = "Hé said 你好 🙂, then\n\nUser: more text"


def _stream(tok, text, stops, step):
    s = StreamText(tok, stops)
    ids = tok.encode(text).ids
    out = []
    for i in range(0, len(ids), step):
        r = s.push(ids[i : i + step], [-0.5] * len(ids[i : i + step]))
        if r is not None:
            out.append(r)
        if s.stopped:
            break
    if not s.stopped and (r := s.finish()) is not None:
        out.append(r)
    return s, ids, out


@pytest.mark.parametrize("step", [1, 3])
def test_pieces_add_up_to_the_whole_decoding(smollm2_dir, step):
    tok = load_fast(smollm2_dir)
    s, ids, out = _stream(tok, TEXT, [], step)
    assert "".join(r.text for r in out) == tok.decode(ids) == TEXT
    assert [t for r in out for t in r.ids] == ids
    assert all(r.logprobs == [-0.5] * len(r.ids) for r in out)
    assert not s.stopped


@pytest.mark.parametrize("step", [1, 4])
def test_a_stop_string_ends_the_text_before_it(smollm2_dir, step):
    tok = load_fast(smollm2_dir)
    s, ids, out = _stream(tok, TEXT, ["\n\nUser:"], step)
    assert s.stopped
    assert "".join(r.text for r in out) == "Hé said 你好 🙂, then"
    assert s.push([1, 2], None) is None  # after the stop nothing more comes out


def test_text_that_may_become_a_stop_string_waits(smollm2_dir):
    tok = load_fast(smollm2_dir)
    s = StreamText(tok, ["STOP"])
    ids = tok.encode("abc ST").ids
    shown = "".join(r.text for t in ids if (r := s.push([t], None)) is not None)
    assert "ST" not in shown
    rest = s.finish()
    assert rest is not None and shown + rest.text == "abc ST"
    assert rest.logprobs is None  # the engine sent none
    assert s.generated == ids
