"""The token relay of the tensorrtllm layout (trtllm/relay.py), fed the way TensorRT-LLM's backend
streams: one response per new token, nothing before it. What comes out must let the stateless
postprocessing produce exactly the non-streamed text, and stop words must work on text."""

import pytest

from llmserve.engine.sampling import SamplingParams
from llmserve.pipeline.postprocess import postprocess
from llmserve.request.token_request import EngineRequest
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast
from llmserve.pipeline.relay import RelayStream

TEXT = "The quick brown fox 你好，世界 🎉👩‍👩‍👧 jumps over the lazy dog. Écris en français."


def request(streaming=True, exclude=True, stop_words=(), prompt=(1, 2, 3)):
    return EngineRequest(prompt=list(prompt), params=SamplingParams(max_new_tokens=256, stop_words=list(stop_words)),
                         streaming=streaming, exclude_input_in_output=exclude, return_log_probs=False)


def relay_text(tok, ids, req, logprobs=None):
    """Feed `ids` one per backend response; return the concatenated postprocessed text and the chunks."""
    detok, stream, chunks = Detokenizer(tok), RelayStream(req, tok), []
    for i, t in enumerate(ids):
        chunk = stream.push([t], None if logprobs is None else [logprobs[i]])
        if chunk is not None:
            chunks.append(chunk)
        if stream.stopped:
            break
    last = stream.finish()
    if last is not None:
        chunks.append(last)
    texts = [postprocess(detok, c.get)["text_output"][0, 0].decode() for c in chunks]
    return "".join(texts), chunks, stream


@pytest.mark.parametrize("which", ["sentencepiece", "smollm2"])
def test_stream_concatenates_to_the_whole_text(which, sentencepiece, smollm2_dir):
    tok = sentencepiece if which == "sentencepiece" else load_fast(smollm2_dir)
    ids = tok.encode(TEXT).ids
    streamed, chunks, _ = relay_text(tok, ids, request())
    assert streamed.encode() == TEXT.encode()
    whole, _, _ = relay_text(tok, ids, request(streaming=False))
    assert whole == TEXT
    assert len(chunks) > 1


def test_chunks_decoded_alone_would_lose_text(sentencepiece):
    """What the tensorrtllm layout did before the relay: each chunk decoded alone."""
    ids = sentencepiece.encode(TEXT).ids
    alone = "".join(Detokenizer(sentencepiece).visible([t]) for t in ids)
    assert alone != TEXT  # spaces stripped at every chunk start, CJK / emoji bytes dropped


def test_stop_word_on_text_across_tokens(smollm2_dir):
    tok = load_fast(smollm2_dir)
    ids = tok.encode("Hello there.\n\nUser: and more text after it").ids
    text, chunks, stream = relay_text(tok, ids, request(stop_words=["\n\nUser:"]))
    assert text == "Hello there." and stream.stopped
    whole, _, _ = relay_text(tok, ids, request(streaming=False, stop_words=["\n\nUser:"]))
    assert whole == text


def test_text_that_may_become_a_stop_word_is_held_back(smollm2_dir):
    tok = load_fast(smollm2_dir)
    req = request(stop_words=["STOP"])
    stream = RelayStream(req, tok)
    released = ""
    for t in tok.encode("abc ST").ids:
        chunk = stream.push([t], None)
        if chunk is not None:
            released += tok.decode(chunk["output_ids"].reshape(-1).tolist())
    assert "ST" not in released
    assert tok.decode(stream.finish()["output_ids"].reshape(-1).tolist()).endswith("ST")  # not a stop word after all


def test_prompt_first_unless_excluded(smollm2_dir):
    tok = load_fast(smollm2_dir)
    prompt, gen = tok.encode("Repeat: ").ids, tok.encode("purple rain").ids
    for streaming in (True, False):
        text, _, _ = relay_text(tok, gen, request(streaming=streaming, exclude=False, prompt=prompt))
        assert text == "Repeat: purple rain"


def test_log_probs_only_when_the_backend_sent_them(smollm2_dir):
    tok = load_fast(smollm2_dir)
    ids = tok.encode("one two three").ids
    _, chunks, _ = relay_text(tok, ids, request())
    assert all("cum_log_probs" not in c and "output_log_probs" not in c for c in chunks)
    lps = [-0.5] * len(ids)
    _, chunks, _ = relay_text(tok, ids, request(), logprobs=lps)
    assert chunks[-1]["cum_log_probs"].reshape(-1)[0] == pytest.approx(-0.5 * len(ids))
    assert sum(c["output_log_probs"].size for c in chunks) == len(ids)


def test_a_stream_that_ends_before_any_token_still_answers_once(smollm2_dir):
    stream = RelayStream(request(), load_fast(smollm2_dir))
    last = stream.finish()
    assert last["output_ids"].shape == (1, 1, 0)


def test_postprocessing_answers_log_probs_even_when_absent(smollm2_dir):
    """TensorRT-LLM sends log probs only on request; the ensemble must still answer every output."""
    tok = load_fast(smollm2_dir)
    ids = tok.encode("hello world").ids
    chunk = RelayStream(request(streaming=False), tok)
    for t in ids:
        chunk.push([t], None)
    out = postprocess(Detokenizer(tok), chunk.finish().get)
    assert out["cum_log_probs"].shape == (1, 1) and out["output_log_probs"].shape == (1, 1, len(ids))
    assert out["text_output"][0, 0].decode() == "hello world"
