"""The token relay of the tensorrtllm layout (pipeline/relay.py), fed the way TensorRT-LLM's backend
streams: one response per new token, nothing before it. What comes out must let the stateless
postprocessing produce exactly the non-streamed text, and stop words must work on text. Then `Relay`
over a fake Triton: requested outputs only, stop forwarding, the cancellation poll, error codes."""

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from llmserve.engine.sampling import SamplingParams
from llmserve.pipeline.cancellation import NO_REQUEST_ID
from llmserve.pipeline.options import RelayOptions
from llmserve.pipeline.postprocess import postprocess
from llmserve.pipeline.relay import Relay, RelayStream
from llmserve.request.token_request import EngineRequest
from llmserve.request.word_lists import to_word_list
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast

from .fake_pb import FINAL, FakeBackend, FakePb, InferenceResponse, Request, Sender, Tensor, TritonError, outputs_of

TEXT = "The quick brown fox 你好，世界 🎉👩‍👩‍👧 jumps over the lazy dog. Écris en français."


def request(streaming=True, exclude=True, stop_words=(), prompt=(1, 2, 3)):
    return EngineRequest(
        prompt=list(prompt),
        params=SamplingParams(max_new_tokens=256, stop_words=list(stop_words)),
        streaming=streaming,
        exclude_input_in_output=exclude,
        return_log_probs=False,
    )


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
    texts = [postprocess(detok, c.get)["text_output"][0].decode() for c in chunks]
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
    assert out["text_output"][0].decode() == "hello world"


# --- Relay: one request over a fake backend, with a fake Triton -------------------------------------------

GENERATED = [40, 41, 42, 43, 44, 45]


class Backend:
    """tensorrt_llm_cpp as the relay sees it: one response per token, then the empty final one.
    `between(i)` runs before token i is answered (the stream is lazy, like Triton's)."""

    def __init__(self, between=lambda i: None, error=None):
        self.between, self.error, self.stops = between, error, []

    def __call__(self, bls):
        if bls.input("stop") is not None:
            self.stops.append(bls.request_id)
            return [InferenceResponse()]
        return self._stream(bls)

    def _stream(self, bls):
        if self.error:
            yield InferenceResponse(error=TritonError(self.error))
            return
        for i, tok in enumerate(GENERATED):
            self.between(i)
            yield InferenceResponse([Tensor("output_ids", [[[tok]]]), Tensor("sequence_length", [[1]])])
        yield InferenceResponse()


def relay_for(pb, decoupled=True, clock=None, interval_ms=0.0, **options):
    """A relay over the fake backend; `options`: RelayOptions fields beyond the defaults here."""
    opts = RelayOptions(
        target_model="backend",
        tokenizer_dir="",
        skip_special_tokens=True,
        max_input_len=64,
        max_output_len=64,
        exclude_input_in_output=True,
        cancellation_check_period_ms=250,
        backend_transport="grpc",
        stream_interval_ms=interval_ms,
        **options,
    )
    kw = {"clock": clock, "sleep": lambda s: None} if clock else {}
    return Relay(pb, opts, _tok(), decoupled, backend=FakeBackend(pb), **kw)


def _tok():
    return Tokenizer(models.WordLevel({f"t{i}": i for i in range(100)}, unk_token="t0"))


def generation(request_id="r1", wanted=(), sender=None, **extra):
    inputs = {
        "input_ids": np.array([[1, 2, 3]], np.int32),
        "input_lengths": np.array([[3]], np.int32),
        "request_output_len": np.array([[8]], np.int32),
        "streaming": np.array([[True]]),
        **extra,
    }
    return Request(inputs, request_id=request_id, wanted=wanted, sender=sender)


def test_relay_sends_only_the_requested_outputs():
    """A direct token-level client asking for two outputs must never be handed the others: a Python
    3.12 stub dies on unrequested tensors (triton_glue.tensors)."""
    backend = Backend()
    pb = FakePb({"backend": backend})
    request = generation(wanted=["output_ids", "sequence_length"])
    relay_for(pb).serve(request, request.sender)
    *chunks, last = request.sender.sent
    assert [t for r, _ in chunks for t in outputs_of(r)["output_ids"].reshape(-1).tolist()] == GENERATED
    assert all(r.names() == ["output_ids", "sequence_length"] and f == 0 for r, f in chunks)
    assert last == (None, FINAL)  # everything was streamed: an empty final closes the stream
    (call,) = pb.calls
    assert call.request_id == "r1" and call.input("streaming").tolist() == [[True]]  # the key: any instance can stop it
    everything = generation(wanted=[])  # no names: every output, output_context_ids included
    relay_for(pb).serve(everything, everything.sender)
    assert "output_context_ids" in everything.sender.sent[0][0].names()


def test_a_stop_is_forwarded_to_the_backend_requests_of_that_id():
    pb = FakePb()
    relay = relay_for(pb)
    stopper = Request({"input_ids": np.zeros((1, 1), np.int32), "stop": np.array([[True]])}, request_id="r1")
    backend = Backend(between=lambda i: i == 2 and relay.serve(stopper, stopper.sender))
    pb.models["backend"] = backend
    request = generation()
    relay.serve(request, request.sender)
    (inner,) = [c.request_id for c in pb.calls if c.input("stop") is None]
    assert backend.stops == [inner] == ["r1"]
    assert stopper.sender.sent == [(None, FINAL)]  # the empty final answer of a stop


def test_a_stop_on_another_relay_instance_reaches_the_backend():
    """With several relay instances a `stop` (the client's, or postprocessing's for the request_key) may
    land on one that does not serve the generation: it forwards the stop by the same id all the same."""
    pb = FakePb()
    serving, other = relay_for(pb), relay_for(pb)
    stopper = Request({"input_ids": np.zeros((1, 1), np.int32), "stop": np.array([[True]])}, request_id="k1")
    backend = Backend(between=lambda i: i == 2 and other.serve(stopper, stopper.sender))
    pb.models["backend"] = backend
    request = generation("k1")
    serving.serve(request, request.sender)
    assert backend.stops == ["k1"] and stopper.sender.sent == [(None, FINAL)]


def test_responses_are_coalesced_into_one_chunk_per_interval():
    """stream_interval_ms: the first token goes at once, then at most one chunk per interval; nothing is
    lost or reordered, and the stream ends with everything held. Between chunks the relay sleeps: what
    the backend sends meanwhile is read from the iterator's buffer at once."""
    clock = [0.0]

    def tick(i):
        clock[0] = max(clock[0], 0.008 * (i + 1))  # token i is there at (i + 1) * 8 ms; a 20 ms interval

    def sleep(s):
        clock[0] += s

    pb = FakePb({"backend": Backend(between=tick)})
    request = generation(wanted=["output_ids"])
    relay = relay_for(pb, clock=lambda: clock[0], interval_ms=20)
    relay.sleep = sleep
    relay.serve(request, request.sender)
    chunks = [outputs_of(r)["output_ids"].reshape(-1).tolist() for r, _ in request.sender.sent if r is not None]
    assert [t for c in chunks for t in c] == GENERATED
    # 40 at 8 ms, then a sleep to 28 ms: 41 and 42 were buffered, 43 is waited for (32 ms); the rest at the end
    assert chunks == [[40], [41, 42, 43], [44, 45]]
    assert request.sender.sent[-1][1] == FINAL


def test_a_stop_without_request_id_is_the_backends_error():
    pb = FakePb({"backend": Backend()})
    stopper = Request({"stop": np.array([[True]])})
    relay_for(pb).serve(stopper, stopper.sender)
    ((response, flags),) = stopper.sender.sent
    assert response.error().message() == NO_REQUEST_ID and flags == FINAL


def test_client_cancellation_is_polled_once_per_period():
    clock = [0.0]

    def tick(i):
        clock[0] += 0.125  # two backend responses per 250 ms period

    pb = FakePb({"backend": Backend(between=tick)})
    request = generation(sender=Sender())
    relay_for(pb, clock=lambda: clock[0]).serve(request, request.sender)
    assert request.sender.polls == 3  # 6 responses over 0.75 s: at 0.25, 0.5 and 0.75 s, never at the start

    backend = Backend(between=tick)
    pb = FakePb({"backend": backend})
    request = generation(sender=Sender(cancelled=lambda: True))
    relay_for(pb, clock=lambda: clock[0]).serve(request, request.sender)
    assert len(backend.stops) == 1 and request.sender.sent[-1][1] == FINAL
    assert len(request.sender.sent) == 3  # two tokens, then the stop and the empty final


def test_backend_errors_keep_their_meaning():
    """A streamed error arrives as its message only: the relay restores the code from the message's kind."""
    for message, code in (
        ("invalid end_id: out of range", "INVALID_ARG"),
        ("CUDA out of memory", "INTERNAL"),
        ("Exceeds maximum queue size", "UNAVAILABLE"),
        ("Request was cancelled", "CANCELLED"),
    ):
        request = generation()
        relay_for(FakePb({"backend": Backend(error=message)})).serve(request, request.sender)
        ((response, flags),) = request.sender.sent
        assert (response.error().message(), response.error().code, flags) == (message, code, FINAL)


def test_a_failing_backend_call_still_answers_the_client(caplog):
    def broken(bls):
        raise RuntimeError("Failed for execute the inference request. Model 'backend' is not ready.")

    request = generation()
    relay_for(FakePb({"backend": broken})).serve(request, request.sender)
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and response.error().code == "INTERNAL" and "not ready" in response.error().message()
    assert "relay request r1 failed" in caplog.text


def test_a_failed_send_closes_the_backend_stream_before_the_relay_answers():
    """A send that raises (the relay's client is gone) must not leave the backend's stream open: one left
    open holds its request, and with it its model, in Triton (backend_grpc closes it: stop, read to end)."""
    events = []

    class Failing(Sender):
        def send(self, response=None, flags=0):
            events.append(("send", flags))
            if flags != FINAL:
                raise RuntimeError("Unable to send response: the client is gone")
            super().send(response, flags)

    class Watched(Backend):
        def _stream(self, bls):
            try:
                yield from super()._stream(bls)
            finally:
                events.append(("backend stream closed", None))

    request = generation(sender=Failing())
    relay_for(FakePb({"backend": Watched()})).serve(request, request.sender)
    assert events == [("send", 0), ("backend stream closed", None), ("send", FINAL)]
    ((response, _),) = request.sender.sent
    assert "the client is gone" in response.error().message()


def test_unary_execution_answers_each_request_once():
    pb = FakePb({"backend": Backend()})
    include_prompt = generation("b", exclude_input_in_output=np.array([[False]]))
    responses = relay_for(pb, decoupled=False).execute([generation("a"), include_prompt])
    assert outputs_of(responses[0])["output_ids"].reshape(-1).tolist() == GENERATED
    assert outputs_of(responses[1])["output_ids"].reshape(-1).tolist() == [1, 2, 3] + GENERATED


def test_token_stop_words_are_the_backends_and_text_ones_the_relays():
    """stop_words_match "tokens" (absent): stop_words_list goes to the backend, which matches it as
    TensorRT-LLM does. "text": the relay matches on the text and the backend never sees the list.
    stop_words_match itself is ours and never reaches the backend."""
    words = to_word_list([[42, 43]])[None]
    for match, forwarded in ((None, True), ("tokens", True), ("text", False)):
        pb = FakePb({"backend": Backend()})
        extra = {"stop_words_list": words}
        if match:
            extra["stop_words_match"] = np.array([[match.encode()]], dtype=object)
        request = generation(**extra)
        relay_for(pb).serve(request, request.sender)
        call = pb.calls[0]  # (on a text match the relay then sends the backend a stop)
        assert (call.input("stop_words_list") is not None) == forwarded, match
        assert call.input("stop_words_match") is None
