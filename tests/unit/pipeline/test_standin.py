"""The CI stand-in for the C++ backend (trtllm/standin.py): the production config with only the
backend swapped, the backend's load checks, request checks and messages, and its output shapes."""

import numpy as np
import pytest

from llmserve import contract as C
from llmserve.repository.writer import repository
from llmserve.pipeline import standin as S
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


@pytest.mark.parametrize("key", ["tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend",
                                 "gpt_model_type"])
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
    return S.parse_request(read, decoupled=decoupled, exclude_default=False, max_input_len=8, max_seq_len=12,
                           vocab_size=100, max_beam_width=1, default_end_ids=(2,))


BASE = dict(input_ids=[[5, 6, 7]], input_lengths=[3], request_output_len=[4])


@pytest.mark.parametrize("extra,message", [
    ({"streaming": [True]}, "Streaming is only supported if model is deployed using decoupled mode."),
    ({"runtime_top_p": [1.5]}, r"Assertion failed: topP\.value\(\) <= 1\.f"),
    ({"temperature": [-1.0]}, r"Assertion failed: temperature\.value\(\) >= 0\.f"),
    ({"runtime_top_k": [-1]}, r"Assertion failed: topK\.value\(\) >= 0"),
    ({"repetition_penalty": [0.0]}, r"Assertion failed: repetitionpenalty\.value\(\) > 0\.f"),
    ({"end_id": [100]}, r"EndId \(100\) is not within acceptable range \[-1, 100\)."),
    ({"input_ids": [list(range(9))]}, r"Prompt length \(9\) exceeds maximum input length \(8\)"),
    ({"request_output_len": [1, 2]}, "Invalid size for tensor request_output_len"),
])
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
    assert S.ends_with_stop_word([1, 4, 5], words) and S.ends_with_stop_word([9], words)
    assert not S.ends_with_stop_word([4, 1, 5], words)


def test_log_probs_only_when_asked():
    assert set(S.outputs([1, 2], None, None)) == {"output_ids", "sequence_length"}
    out = S.outputs([1, 2], [-0.1, -0.2], -0.3)
    assert out["output_ids"].shape == (1, 1, 2) and out["sequence_length"].tolist() == [[2]]
    assert out["output_log_probs"].shape == (1, 1, 2) and out["cum_log_probs"].shape == (1, 1)


def test_stop_by_request_id():
    active, stopped = S.ActiveRequests(), []
    active.add("r1", lambda: stopped.append("a"))
    active.add("r1", lambda: stopped.append("b"))
    active.stop("r1")
    active.stop("unknown")  # finished already: not an error
    assert sorted(stopped) == ["a", "b"]
    with pytest.raises(S.BackendError, match="Trying to stop a request but request ID is not provided"):
        active.stop("")
