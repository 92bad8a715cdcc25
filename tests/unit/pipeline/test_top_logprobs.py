"""Top log-probs in the tensorrtllm layout (pipeline/top_logprobs.py): the relay turns the backend's
generation_logits into top_token_ids / top_log_probs with the torch engine's rule, asks for the logits only
when a request wants alternatives, never hands them on, and refuses by name on an engine without them. The
stand-in answers generation_logits as the C++ backend does, from the torch engine's own logits."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from llmserve import contract as C
from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.errors import RequestError
from llmserve.finish import FinishReason
from llmserve.pipeline import standin as S
from llmserve.pipeline import top_logprobs as T
from llmserve.text.tokenizer import load_fast
from llmserve.trtllm import upstream as U

from ..engine.helpers import make_engine
from .fake_pb import FakePb, InferenceResponse, Tensor, outputs_of
from .test_relay import GENERATED, generation, relay_for
from .test_standin import BASE, parse, reader

VOCAB = 100


def torch_top(rows: np.ndarray, k: int):
    """The torch engine's rule (engine/engine.py _top_log_probs)."""
    values, ids = torch.log_softmax(torch.from_numpy(rows).float(), dim=-1).topk(k, dim=-1)
    return ids.tolist(), values.tolist()


def test_log_softmax_top_k_is_the_torch_engines_rule():
    rows = np.random.default_rng(0).normal(0, 4, size=(7, 49152)).astype(np.float32)
    ids, lps = T.log_softmax_top_k(rows, 20)
    want_ids, want_lps = torch_top(rows, 20)
    assert ids == want_ids
    np.testing.assert_allclose(np.array(lps), np.array(want_lps), atol=1e-5)
    assert T.log_softmax_top_k(rows[:0], 5) == ([], [])


def test_streaming_logits_shape_and_the_vocab_padding_is_cut():
    """A streaming response's generation_logits is [1, new tokens, beams, vocab padded]; columns past the
    model's vocabulary (TensorRT-LLM pads to a multiple of tp_size) are no tokens."""
    rows = np.random.default_rng(1).normal(size=(2, VOCAB)).astype(np.float32)
    padded = np.concatenate([rows, np.full((2, 4), 50.0, np.float32)], axis=1)  # padding that would win
    ids, lps = T.top_from_logits(padded.reshape(1, 2, 1, VOCAB + 4), 2, 3, VOCAB)
    assert (ids, lps) == T.log_softmax_top_k(rows, 3) and max(max(r) for r in ids) < VOCAB
    ids, lps = T.top_from_logits(None, 2, 3, VOCAB)  # never expected: no alternatives, not a crash
    assert ids == [[-1] * 3] * 2 and lps == [[0.0] * 3] * 2


def test_refused_by_name_without_gather_generation_logits():
    T.check_enabled(0, False)
    T.check_enabled(5, True)
    with pytest.raises(RequestError, match="invalid num_top_log_probs: .*gather_generation_logits: true"):
        T.check_enabled(5, False)


def test_model_vocab_size_from_the_checkpoint(tmp_path, smollm2_dir):
    assert T.model_vocab_size(str(smollm2_dir)) == 49152
    assert T.model_vocab_size(str(tmp_path)) is None


# --- the relay over a fake Triton -----------------------------------------------------------------------


class LogitsBackend:
    """tensorrt_llm_cpp with gather_generation_logits: one response per token, with generation_logits
    [1, 1, 1, vocab] when the request set return_generation_logits (and asked for the output)."""

    def __init__(self):
        self.logits = np.random.default_rng(2).normal(0, 3, size=(len(GENERATED), VOCAB)).astype(np.float32)

    def __call__(self, bls):
        wants = bls.input("return_generation_logits") is not None and bool(bls.input("return_generation_logits"))
        asked = C.GENERATION_LOGITS in bls.requested_output_names
        for i, tok in enumerate(GENERATED):
            out = [Tensor("output_ids", [[[tok]]]), Tensor("sequence_length", [[1]])]
            if wants and asked:
                out.append(Tensor(C.GENERATION_LOGITS, self.logits[i].reshape(1, 1, 1, VOCAB)))
            yield InferenceResponse(out)
        yield InferenceResponse()


def relay(pb, gathers=True):
    return relay_for(pb, gather_generation_logits=gathers)


def test_relay_answers_top_log_probs_from_generation_logits_and_never_hands_them_on():
    backend = LogitsBackend()
    pb = FakePb({"backend": backend})
    request = generation(num_top_log_probs=np.array([[4]], np.int32))
    relay(pb).serve(request, request.sender)
    (call,) = pb.calls
    assert call.input("return_generation_logits").tolist() == [[True]]
    assert C.GENERATION_LOGITS in call.requested_output_names and call.input(C.TOP_LOG_PROBS) is None
    chunks = [outputs_of(r) for r, _ in request.sender.sent if r is not None]
    assert all(C.GENERATION_LOGITS not in c for c in chunks)
    ids = np.concatenate([c["top_token_ids"].reshape(-1, 4) for c in chunks]).tolist()
    lps = np.concatenate([c["top_log_probs"].reshape(-1, 4) for c in chunks])
    want_ids, want_lps = torch_top(backend.logits, 4)
    assert ids == want_ids and chunks[0]["top_token_ids"].dtype == np.int32
    np.testing.assert_allclose(lps, np.array(want_lps), atol=1e-5)
    assert lps.dtype == np.float32


def test_relay_asks_for_no_logits_when_no_alternatives_are_wanted():
    pb = FakePb({"backend": LogitsBackend()})
    request = generation()
    relay(pb).serve(request, request.sender)
    (call,) = pb.calls
    assert call.input("return_generation_logits") is None and C.GENERATION_LOGITS not in call.requested_output_names
    assert all("top_token_ids" not in outputs_of(r) for r, _ in request.sender.sent if r is not None)


def test_relay_refuses_by_name_on_an_engine_without_generation_logits():
    pb = FakePb({"backend": LogitsBackend()})
    request = generation(num_top_log_probs=np.array([[2]], np.int32))
    relay(pb, gathers=False).serve(request, request.sender)
    assert pb.calls == []  # refused before the backend
    ((response, _),) = request.sender.sent
    assert response.error().code == "INVALID_ARG"
    assert "invalid num_top_log_probs" in response.error().message() and "gather_generation_logits" in (
        response.error().message()
    )


# --- the stand-in: generation_logits as the C++ backend answers them --------------------------------------


def test_standin_reads_return_generation_logits():
    assert parse(reader(**{**BASE, "return_generation_logits": [True]})).return_generation_logits
    assert not parse(reader(**BASE)).return_generation_logits


def test_standin_knows_the_build_flag_from_the_engine_config_else_the_spec(tmp_path):
    backend = SimpleNamespace(gpt_model_path=str(tmp_path), standin={"gather_generation_logits": "true"})
    assert S.gathers_generation_logits(backend)
    (tmp_path / "config.json").write_text('{"build_config": {"gather_generation_logits": false}}')
    assert not S.gathers_generation_logits(backend)  # a built engine is what the backend reads


def test_standin_stream_shapes_generation_logits_as_the_backend():
    """Streaming: [1, 1, 1, vocab] with each token; non-streaming: [1, 1, request_output_len, vocab], rows
    past the output zero; absent unless the request asked."""
    rows = [np.full(VOCAB, float(i), np.float32) for i in range(3)]
    for streaming in (True, False):
        got = []
        req = parse(reader(**{**BASE, "streaming": [streaming], "return_generation_logits": [True]}))
        seq = SimpleNamespace(id=1, error=None, gen_logits=list(rows))
        stream = S.StandinStream(req, lambda out, *_: got.append(out))
        stream.on_output(seq, [8, 9, 10], [-0.5] * 3, True, FinishReason.LENGTH)
        if streaming:
            assert [o[C.GENERATION_LOGITS].shape for o in got] == [(1, 1, 1, VOCAB)] * 3
            assert [float(o[C.GENERATION_LOGITS][0, 0, 0, 0]) for o in got] == [0.0, 1.0, 2.0]
        else:
            (out,) = got
            assert out[C.GENERATION_LOGITS].shape == (1, 1, 4, VOCAB)  # request_output_len 4
            assert out[C.GENERATION_LOGITS][0, 0, :, 0].tolist() == [0.0, 1.0, 2.0, 0.0]
    got = []
    stream = S.StandinStream(parse(reader(**{**BASE, "streaming": [True]})), lambda out, *_: got.append(out))
    stream.on_output(SimpleNamespace(id=1, error=None, gen_logits=[]), [8], [-0.5], True, FinishReason.LENGTH)
    assert C.GENERATION_LOGITS not in got[0]


def test_the_executors_assertion_without_the_build_flag():
    assert "gather_generation_logits must be enabled" in U.GATHER_GENERATION_LOGITS_ERROR


def test_engine_logits_rows_give_the_engines_own_top_log_probs(tiny_llama):
    """The stand-in's generation_logits are the rows the torch engine sampled from: the relay's rule on
    them gives the torch layout's top_token_ids / top_log_probs, the sampled token first (greedy)."""
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama))
    seq = Sequence(
        prompt=[5, 6, 7],
        params=SamplingParams(max_new_tokens=6, top_logprobs=5, return_logits=True),
        on_output=lambda *a: None,
    )
    engine.submit(seq)
    while engine.running or engine.waiting:
        engine.step()
    assert len(seq.gen_logits) == len(seq.generated) == len(seq.top_ids) == 6
    ids, lps = T.log_softmax_top_k(np.stack(seq.gen_logits), 5)
    assert ids == seq.top_ids
    np.testing.assert_allclose(np.array(lps), np.array(seq.top_lps), atol=1e-5)
    assert [r[0] for r in ids] == seq.generated


# --- the spec setting: trtllm-build flag, generated configs, a built engine without it ----------------------


def test_the_spec_setting_drives_the_build_flag_and_the_generated_configs(tmp_path):
    from llmserve.repository.writer import repository
    from llmserve.trtllm.build import commands

    from ..trtllm.test_config import make_spec, params, write_engine

    off, on = make_spec(tmp_path), make_spec(tmp_path, trt={"gather_generation_logits": True})
    assert "--gather_generation_logits" not in commands(off)["build"]
    build = commands(on)["build"]
    i = build.index("--gather_generation_logits")  # a switch: no value follows
    assert i == len(build) - 1 or build[i + 1].startswith("--")
    assert U.check_build_flags({"gather_generation_logits": "true"})  # trtllm-build takes no value
    for spec, want in ((off, "false"), (on, "true")):
        models = repository(spec, tmp_path / "repo", standin=True)
        assert params(models[C.ENGINE][0])["gather_generation_logits"] == want  # the relay's
        assert params(models[C.BACKEND][0])[U.STANDIN_PREFIX + "gather_generation_logits"] == want
    write_engine(tmp_path)  # built without the flag: the relay would ask for logits the engine has not
    with pytest.raises(ValueError, match="built without --gather_generation_logits"):
        repository(on, tmp_path / "repo")
    write_engine(tmp_path, build={"gather_generation_logits": True})
    assert repository(on, tmp_path / "repo")
