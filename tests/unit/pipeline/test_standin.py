"""The CI stand-in for the C++ backend (pipeline/standin.py): the production config with only the
backend swapped, the backend's load checks, request checks and messages, its output shapes, and how
StandinStream answers what the engine reports."""

from types import SimpleNamespace

import numpy as np
import pytest

from llmserve import contract as C
from llmserve.finish import FinishReason
from llmserve.pipeline import standin as S
from llmserve.pipeline.cancellation import CancelRegistry
from llmserve.pipeline.stream_output import token_outputs
from llmserve.repository.writer import repository
from llmserve.text.stop_words import ends_with_any
from llmserve.trtllm import upstream as U

from ..trtllm.test_config import make_spec, params


def test_standin_config_is_production_with_the_backend_swapped(tmp_path):
    spec = make_spec(tmp_path)
    prod, ci = repository(spec, tmp_path / "repo"), repository(spec, tmp_path / "repo", standin=True)
    assert prod.keys() == ci.keys()
    for name in prod:
        if name != C.BACKEND:
            assert prod[name] == ci[name], name  # byte for byte what production gets
    a, b = prod[C.BACKEND][0], ci[C.BACKEND][0]
    assert (a.backend, b.backend) == ("tensorrtllm", "python") and ci[C.BACKEND][1] == "standin.py"
    extra = {k: v for k, v in params(b).items() if k not in params(a)}
    assert extra and all(k.startswith(U.STANDIN_PREFIX) for k in extra)
    a.ClearField("parameters"), b.ClearField("parameters")
    a.backend = b.backend = ""
    assert a == b  # inputs, outputs, instances, batching, decoupled: identical


def backend_params(tmp_path) -> dict[str, str]:
    return params(repository(make_spec(tmp_path), tmp_path / "repo", standin=True)[C.BACKEND][0])


@pytest.mark.parametrize(
    "key", ["tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend", "gpt_model_type"]
)
def test_missing_required_parameter_fails_the_load_like_the_backend(tmp_path, key):
    p = backend_params(tmp_path)
    del p[key]
    with pytest.raises(S.BackendError, match=f"Cannot find parameter with name: {key}"):
        S.read_parameters(p)


def test_load_reads_the_backend_parameters(tmp_path):
    got = S.read_parameters(backend_params(tmp_path))
    assert got.exclude_input_in_output is True and got.max_beam_width == 1
    assert got.standin["device"] == "auto" or got.standin["device"]
    with pytest.raises(S.BackendError, match="Invalid gpt_model_type"):
        S.read_parameters({**backend_params(tmp_path), "gpt_model_type": "ifb"})
    with pytest.raises(S.BackendError, match="worker_path parameter is specified"):
        S.read_parameters({**backend_params(tmp_path), "worker_path": "/x"})


def reader(**tensors):
    arrays = {k: np.asarray(v) for k, v in tensors.items()}
    return arrays.get


def parse(read, decoupled=True):
    return S.parse_request(
        read,
        decoupled=decoupled,
        exclude_default=False,
        max_input_len=8,
        max_seq_len=12,
        vocab_size=100,
        max_beam_width=1,
        default_end_ids=(2,),
    )


BASE = dict(input_ids=[[5, 6, 7]], input_lengths=[3], request_output_len=[4])


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"streaming": [True]}, "Streaming is only supported if model is deployed using decoupled mode."),
        ({"runtime_top_p": [1.5]}, r"Assertion failed: topP\.value\(\) <= 1\.f"),
        ({"temperature": [-1.0]}, r"Assertion failed: temperature\.value\(\) >= 0\.f"),
        ({"runtime_top_k": [-1]}, r"Assertion failed: topK\.value\(\) >= 0"),
        ({"repetition_penalty": [0.0]}, r"Assertion failed: repetitionpenalty\.value\(\) > 0\.f"),
        ({"end_id": [100]}, r"EndId \(100\) is not within acceptable range \[-1, 100\)."),
        ({"input_ids": [list(range(9))]}, r"Prompt length \(9\) exceeds maximum input length \(8\)"),
        ({"request_output_len": [1, 2]}, "Invalid size for tensor request_output_len"),
    ],
)
def test_bad_input_gets_the_backends_message(extra, message):
    with pytest.raises(S.BackendError, match=message):
        parse(reader(**{**BASE, **extra}), decoupled=False)


def test_request_defaults_and_clamping():
    req = parse(reader(**{**BASE, "request_output_len": [50], "runtime_top_p": [0.0], "return_log_probs": [True]}))
    assert req.max_new_tokens == 12 - 3  # clamped to max_seq_len, as the executor does (with a warning)
    assert req.params.top_p == 1.0  # <= 0 means unset
    assert req.return_log_probs and not req.streaming and req.exclude_input_in_output is False
    assert req.params.end_ids == (2,)


def test_stop_words_are_token_sequences():
    words = [[4, 5], [9]]
    assert ends_with_any([1, 4, 5], words) and ends_with_any([9], words)
    assert not ends_with_any([4, 1, 5], words)


def test_log_probs_only_when_asked():
    assert set(token_outputs([1, 2])) == {"output_ids", "sequence_length"}
    out = token_outputs([1, 2], [-0.1, -0.2], -0.3)
    assert out["output_ids"].shape == (1, 1, 2) and out["sequence_length"].tolist() == [[2]]
    assert out["output_log_probs"].shape == (1, 1, 2) and out["cum_log_probs"].shape == (1, 1)


def test_stop_by_request_id():
    active, stopped = CancelRegistry(), []
    active.add("r1", lambda: stopped.append("a"))
    active.add("r1", lambda: stopped.append("b"))
    active.stop("r1")
    active.stop("unknown")  # finished already: not an error
    assert sorted(stopped) == ["a", "b"]
    with pytest.raises(ValueError, match="Trying to stop a request but request ID is not provided"):
        active.stop("")


# --- StandinStream: the engine's callbacks as the backend's responses ------------------------------------


def backend_request(streaming=True, stop_words=(), exclude=True, log_probs=False):
    read = reader(
        **{
            **BASE,
            "request_output_len": [4],
            "streaming": [streaming],
            "return_log_probs": [log_probs],
            "exclude_input_in_output": [exclude],
        }
    )
    req = parse(read)
    req.stop_words = [list(w) for w in stop_words]
    return req


class Sent:
    def __init__(self):
        self.responses, self.done = [], 0

    def __call__(self, outputs, final, failure=None, message=None):
        self.responses.append(
            (None if outputs is None else outputs["output_ids"].reshape(-1).tolist(), final, failure, message)
        )


SEQ = SimpleNamespace(id=7, error=None)


def run(stream, steps):
    for tokens, finished, reason in steps:
        stream.on_output(SEQ, tokens, [-0.5] * len(tokens), finished, reason)


def test_streaming_one_response_per_token_the_last_one_final():
    sent = Sent()
    stream = S.StandinStream(backend_request(), sent, on_done=lambda: setattr(sent, "done", sent.done + 1))
    run(stream, [([8], False, None), ([9, 10], True, FinishReason.LENGTH), ([11], True, None)])
    assert sent.responses == [([8], False, None, None), ([9], False, None, None), ([10], True, None, None)]
    assert sent.done == 1  # unregistered once; nothing after the final


def test_end_token_without_new_token_is_an_empty_final_and_whole_answers_include_the_prompt():
    sent = Sent()
    run(S.StandinStream(backend_request(), sent), [([8], False, None), ([], True, FinishReason.STOP)])
    assert sent.responses[-1] == (None, True, None, None)
    sent = Sent()
    run(S.StandinStream(backend_request(streaming=False, exclude=False), sent), [([8, 9], True, FinishReason.LENGTH)])
    assert sent.responses == [([5, 6, 7, 8, 9], True, None, None)]


def test_a_stop_word_ends_the_request_with_its_tokens_and_stops_the_engine():
    for streaming in (True, False):
        sent = Sent()
        stream = S.StandinStream(backend_request(streaming=streaming, stop_words=[[9, 10]]), sent)
        run(stream, [([8, 9, 10, 11], False, None), ([12], True, FinishReason.LENGTH)])
        assert stream.stopped and sent.responses[-1][:2] == ([10] if streaming else [8, 9, 10], True)
        assert len(sent.responses) == (3 if streaming else 1)


def test_cancellation_and_failures_get_the_backends_answers():
    sent = Sent()
    run(S.StandinStream(backend_request(), sent), [([], True, FinishReason.CANCELLED)])
    assert sent.responses == [(None, True, FinishReason.CANCELLED, "Request was cancelled")]
    sent = Sent()
    stream = S.StandinStream(backend_request(), sent)
    stream.cancel()  # a `stop` request: the request ends normally, not with CANCELLED
    run(stream, [([], True, FinishReason.CANCELLED)])
    assert sent.responses == [(None, True, None, None)]
    sent = Sent()
    run(S.StandinStream(backend_request(), sent), [([], True, FinishReason.TIMEOUT)])
    ((_, final, failure, message),) = sent.responses
    assert failure is FinishReason.ERROR and message.startswith("Executor failed process requestId 7")


def test_log_probs_only_when_the_request_asks():
    got = []
    stream = S.StandinStream(backend_request(log_probs=True), lambda out, *_: got.append(out))
    run(stream, [([8, 9], True, FinishReason.LENGTH)])
    assert [float(o["cum_log_probs"][0, 0]) for o in got] == [-0.5, -1.0] and "output_context_ids" not in got[0]
