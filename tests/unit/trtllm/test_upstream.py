"""The table of what TensorRT-LLM 1.1.0's Triton backend reads (trtllm/upstream.py) and the check the
generator runs with it on every tensorrtllm config."""

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from llmserve import contract as C
from llmserve.trtllm import upstream as U
from llmserve.trtllm.config import check_config, tensorrtllm_engine

from .test_config import make_spec, params


def test_table_is_complete():
    for p in U.PARAMETERS.values():
        assert p.read_in and p.type in (
            "str",
            "int",
            "uint",
            "uint64",
            "float",
            "bool",
            "int_csv",
            "int_csv_sets",
            "gpu_sets",
        ), p
        if p.default is not None and p.type == "bool":
            assert p.default in U.BOOL_TRUE + U.BOOL_FALSE
    required = {n for n, p in U.PARAMETERS.items() if p.required}
    assert required == {
        "gpt_model_type",
        "gpt_model_path",
        "tokenizer_dir",
        "xgrammar_tokenizer_info_path",
        "guided_decoding_backend",
    }
    assert set(U.ALWAYS_SENT) <= set(U.OUTPUTS) and not set(U.NEVER_SENT) & set(U.OUTPUTS)


def test_our_token_contract_is_what_the_backend_reads_and_writes():
    for t in C.BACKEND_INPUTS:
        assert (U.INPUTS[t.name].dtype, U.INPUTS[t.name].dims) == (t.dtype, t.dims), t.name
    for t in C.BACKEND_OUTPUTS:
        assert (U.OUTPUTS[t.name].dtype, U.OUTPUTS[t.name].dims) == (t.dtype, t.dims), t.name
    assert "output_context_ids" not in U.OUTPUTS  # the relay adds it; the backend never sends it


@pytest.mark.parametrize("serving", [{"streaming": True}, {"streaming": False}])
def test_every_generated_config_passes(tmp_path, serving):
    cfg = tensorrtllm_engine(make_spec(tmp_path, serving=serving), tmp_path / "repo")  # raises on a problem
    assert U.check_parameters(params(cfg)) == []
    emitted = set(params(cfg))
    assert {n for n, p in U.PARAMETERS.items() if p.required} <= emitted
    assert all(k in U.PARAMETERS or k.startswith(U.OURS) for k in emitted)


def test_the_config_before_this_table_would_not_have_loaded(tmp_path):
    """Finding 1 of the audit: no tokenizer_dir / xgrammar_tokenizer_info_path / guided_decoding_backend."""
    cfg = tensorrtllm_engine(make_spec(tmp_path), tmp_path / "repo")
    for key in ("tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend"):
        del cfg.parameters[key]
    with pytest.raises(ValueError, match="tokenizer_dir: required.*would not load"):
        check_config(cfg)


@pytest.mark.parametrize(
    "key,value,expect",
    [
        ("enable_kv_cache_reuse", "yes", "not a valid bool"),  # the backend would silently use its default
        ("max_tokens_in_paged_kv_cache", "1e6", "not a valid int"),
        ("batch_scheduler_policy", "fcfs", "not one of"),
        ("gpt_model_type", "ifb", "not one of"),
        ("worker_path", "/x", "must be absent"),
        ("kv_cache_host_memroy_bytes", "1", "not a parameter"),  # a typo is caught, not ignored
        ("decoding_mode", "lookahead", "lookahead_window_size: required"),
    ],
)
def test_values_the_backend_would_misread_are_refused(tmp_path, key, value, expect):
    cfg = tensorrtllm_engine(make_spec(tmp_path), tmp_path / "repo")
    cfg.parameters[key].CopyFrom(mc.ModelParameter(string_value=value))
    with pytest.raises(ValueError, match=expect):
        check_config(cfg)


def test_declaring_an_output_the_backend_never_sends_is_refused(tmp_path):
    cfg = tensorrtllm_engine(make_spec(tmp_path), tmp_path / "repo")
    cfg.output.add(name="output_context_ids", data_type=mc.TYPE_INT32, dims=[-1, -1])
    with pytest.raises(ValueError, match="output output_context_ids: the backend never produces it"):
        check_config(cfg)
    cfg = tensorrtllm_engine(make_spec(tmp_path), tmp_path / "repo")
    cfg.input[[i.name for i in cfg.input].index("seed")].data_type = mc.TYPE_INT64
    with pytest.raises(ValueError, match="input seed: declared INT64"):
        check_config(cfg)


def test_bool_conversion_is_the_backends():
    assert U.parse_bool("TRUE") and not U.parse_bool("0")
    with pytest.raises(ValueError, match="Cannot convert yes to a boolean"):
        U.parse_bool("yes")


def test_build_flags_of_every_example_spec_are_trtllm_builds():
    from llmserve.spec import ROOT, load_spec
    from llmserve.trtllm.build import build_flags

    for path in sorted((ROOT / "specs").glob("trtllm-*.yaml")):
        flags = build_flags(load_spec(path))
        assert U.check_build_flags(flags) == [], path.name
        assert {"gpt_attention_plugin", "remove_input_padding", "kv_cache_type"} <= set(flags)  # in-flight batching


def test_build_flags_trtllm_build_would_refuse():
    problems = U.check_build_flags(
        {
            "kv_cache_type": "pagedd",
            "max_seq_len": "0",
            "paged_kv_cache_x": "1",
            "use_paged_context_fmha": "enable",
            "gemm_plugin": "float16",
        }
    )
    assert len(problems) == 3 and "--kv_cache_type" in problems[0]
