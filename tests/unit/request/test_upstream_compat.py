"""docs/upstream-compatibility.md, request/upstream_names.py, trtllm/upstream.py and contract.py agree
(issue 18): every upstream input and output of the ensemble and of tensorrt_llm is on the page with
its status here, a "same" or "different" one is declared by us with upstream's type, a refused one is
not declared (Triton refuses it by name) and, on the HTTP generate endpoint, preprocessing refuses it
by name. A change to any of them without the others fails here, with the row to write."""

import re
from pathlib import Path

import pytest

from llmserve import contract as C
from llmserve.errors import RequestError
from llmserve.request import upstream_names as U
from llmserve.request.parameters import refuse_parameters
from llmserve.trtllm import upstream as T

DOC = Path(__file__).resolve().parents[3] / "docs" / "upstream-compatibility.md"

# tensorrt_llm inputs we declare but whose meaning differs, and why (the rest: declared = same).
TRTLLM_DIFFERENT = {
    "decoder_input_ids": "one pad token (what upstream's preprocessing gives a decoder-only model) means none; "
    "longer is refused (no encoder-decoder models)",
    "input_lengths": "required to be at most the number of input_ids; one sequence per request (batch > 1 refused)",
}
TRTLLM_NOTES = {
    "stop_words_list": "each word's ids matched against the end of the generated tokens, kept in the output; "
    'with stop_words_match "text" decoded and matched on the generated text (in the tensorrtllm layout the '
    "relay does that in front of the backend)",
    "runtime_top_k": "top_k == 0 and top_p == 0 (both absent) is greedy, as TensorRT-LLM's sampling layers",
    "stop": "cancels the requests with the same request id; they end with a normal final response, the stop "
    "request gets an empty OK response (also on tensorrt_llm_unary)",
}


def row(name: str, dtype: str, status: str, note: str = "") -> str:
    return f"| `{name}` | {dtype} | {status} | {note} |"


def ensemble_rows() -> list[str]:
    return [row(u.name, u.dtype, u.status, u.note) for u in U.ENSEMBLE_INPUTS + U.ENSEMBLE_OUTPUTS]


def model_rows() -> list[str]:
    """preprocessing and postprocessing under upstream's names."""
    return [
        row(u.name, u.dtype, u.status, u.note)
        for u in U.PREPROCESSING_INPUTS + U.PREPROCESSING_OUTPUTS + U.POSTPROCESSING_INPUTS + U.POSTPROCESSING_OUTPUTS
    ]


def trtllm_rows() -> list[str]:
    ours = C.by_name(C.ENGINE_INPUTS + C.ENGINE_OUTPUTS)
    rows = []
    for io in list(T.INPUTS.values()) + list(T.OUTPUTS.values()):
        if io.name not in ours:
            rows.append(row(io.name, io.dtype, U.REFUSED, "not declared: Triton refuses it by name"))
        elif io.name in TRTLLM_DIFFERENT:
            rows.append(row(io.name, io.dtype, U.DIFFERENT, TRTLLM_DIFFERENT[io.name]))
        else:
            rows.append(row(io.name, io.dtype, U.SAME, TRTLLM_NOTES.get(io.name, "")))
    return rows


@pytest.mark.parametrize("line", ensemble_rows() + model_rows() + trtllm_rows())
def test_every_upstream_tensor_is_on_the_page(line):
    assert line in DOC.read_text().splitlines(), f"docs/upstream-compatibility.md lacks (or differs from):\n{line}"


def test_the_page_has_no_other_rows():
    tensor_row = re.compile(rf"^\| `\w+` \| [A-Z0-9]+ \| ({U.SAME}|{U.DIFFERENT}|{U.REFUSED}|ours) \|")
    rows = {line for line in DOC.read_text().splitlines() if tensor_row.match(line)}
    ours = {
        row(t.name, t.dtype, "ours", "")
        for t in C.ENSEMBLE_INPUTS + C.ENSEMBLE_OUTPUTS + C.ENGINE_INPUTS + C.ENGINE_OUTPUTS
    }
    extra = {
        r
        for r in rows - set(ensemble_rows()) - set(model_rows()) - set(trtllm_rows())
        if not any(r.startswith(o.rsplit(" |", 2)[0]) for o in ours)
    }
    assert not extra, f"rows for no upstream tensor: {sorted(extra)}"


def test_same_and_different_are_declared_with_upstreams_type():
    ensemble = C.by_name(C.ENSEMBLE_INPUTS + C.ENSEMBLE_OUTPUTS)
    for u in U.ENSEMBLE_INPUTS + U.ENSEMBLE_OUTPUTS:
        if u.status != U.REFUSED:
            assert u.name in ensemble and ensemble[u.name].dtype == u.dtype, u.name
    for ups, ours in (
        (U.PREPROCESSING_INPUTS, C.PREPROCESSING_UPSTREAM_INPUTS),
        (U.PREPROCESSING_OUTPUTS, C.PREPROCESSING_UPSTREAM_OUTPUTS),
        (U.POSTPROCESSING_INPUTS, C.POSTPROCESSING_UPSTREAM_INPUTS),
        (U.POSTPROCESSING_OUTPUTS, C.POSTPROCESSING_UPSTREAM_OUTPUTS),
    ):
        declared = C.by_name(ours)
        for u in ups:
            if u.status == U.REFUSED:
                assert u.name not in declared, u.name
            else:
                assert u.name in declared and declared[u.name].dtype == u.dtype, u.name
    engine = C.by_name(C.ENGINE_INPUTS + C.ENGINE_OUTPUTS)
    for io in list(T.INPUTS.values()) + list(T.OUTPUTS.values()):
        if io.name in engine:
            assert engine[io.name].dtype == io.dtype, io.name


def test_refused_ensemble_inputs_are_not_declared_and_are_refused_on_http_generate():
    declared = {t.name for t in C.ENSEMBLE_INPUTS}
    for u in U.ENSEMBLE_INPUTS:
        if u.status == U.REFUSED:
            assert u.name not in declared, u.name
            with pytest.raises(RequestError, match=f"^invalid {u.name}: not supported here"):
                refuse_parameters({u.name: 1})


def test_our_own_ensemble_inputs_are_on_the_page():
    upstream = {u.name for u in U.ENSEMBLE_INPUTS}
    text = DOC.read_text()
    for t in C.ENSEMBLE_INPUTS:
        if t.name not in upstream:
            assert f"| `{t.name}` | {t.dtype} | ours |" in text, t.name


def test_renamed_names_point_at_declared_inputs():
    declared = {t.name for t in C.ENSEMBLE_INPUTS} | {u.name for u in U.ENSEMBLE_INPUTS}
    for old, new in U.RENAMED.items():
        assert new in declared and old not in {t.name for t in C.ENSEMBLE_INPUTS}, old
        assert f"`{old}`" in DOC.read_text(), old


def test_top_log_probs_in_the_tensorrtllm_layout_are_documented_as_built():
    """The page says top log-probs need engine.tensorrtllm.gather_generation_logits: that key exists, the
    backend model asks for generation_logits and the relay (tensorrt_llm) never declares them."""
    from llmserve.spec.trtllm import TensorRTLLMEngine

    assert "gather_generation_logits" in TensorRTLLMEngine.model_fields
    assert "`engine.tensorrtllm.gather_generation_logits" in DOC.read_text()
    assert C.GENERATION_LOGITS in C.by_name(C.BACKEND_OUTPUTS)
    assert "return_generation_logits" in C.by_name(C.BACKEND_INPUTS)
    assert C.GENERATION_LOGITS not in C.by_name(C.ENGINE_OUTPUTS + C.ENSEMBLE_OUTPUTS)
