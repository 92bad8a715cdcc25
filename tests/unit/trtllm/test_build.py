"""scripts/build_engine.py for engine.kind = tensorrtllm: validation, derived flags, --dry-run, and the
build sequence with TensorRT-LLM replaced by fakes. Uses a tiny Llama config.json written here, not the
real SmolLM2 checkpoint."""

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmserve.spec import ROOT, load_spec
from llmserve.trtllm import build as B

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "dtype": "float32",
}


def write_spec(tmp_path: Path, hf: dict | None = None, engine: dict | None = None, trt: dict | None = None) -> Path:
    src = tmp_path / "hf"
    src.mkdir(exist_ok=True)
    (src / "config.json").write_text(json.dumps({**TINY_LLAMA, **(hf or {})}))
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the tokenizer-info file is built from them
        shutil.copy(ROOT / "build/checkpoints/smollm2-135m-instruct" / name, src / name)
    spec = {
        "name": "tiny",
        "model": {"source": {"kind": "hf_checkpoint", "path": str(src)}, "checkpoint_dir": str(tmp_path / "ckpt")},
        "engine": {
            "kind": "tensorrtllm",
            "max_batch_size": 16,
            "max_input_len": 1024,
            "max_output_len": 512,
            **(engine or {}),
            "tensorrtllm": {
                "engine_dir": str(tmp_path / "engine"),
                "trtllm_checkpoint_dir": str(tmp_path / "tllm"),
                **(trt or {}),
            },
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def dry_run(spec_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/build_engine.py", "--spec", str(spec_path), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def command(out: str, program: str) -> list[str]:
    for line in out.splitlines():
        argv = shlex.split(line)
        if not line.startswith("#") and argv and (argv[0] == program or argv[-1:] and program in argv[:4]):
            return argv
    raise AssertionError(f"no {program} command in:\n{out}")


def flags(argv: list[str]) -> dict[str, str]:
    return {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}


def test_dry_run_llama(tmp_path):
    r = dry_run(write_spec(tmp_path))
    assert r.returncode == 0, r.stderr
    build = flags(command(r.stdout, "trtllm-build"))
    # In-flight batching needs all three; KV reuse / chunked context (defaults on) need paged context FMHA.
    assert build["gpt_attention_plugin"] == "float16"
    assert build["remove_input_padding"] == "enable"
    assert build["kv_cache_type"] == "paged"
    assert build["use_paged_context_fmha"] == "enable" and build["context_fmha"] == "enable"
    # Sized from the spec.
    assert build["max_batch_size"] == "16" and build["max_input_len"] == "1024"
    assert build["max_seq_len"] == "1536"  # max_input_len + max_output_len
    assert build["max_num_tokens"] == "8192"  # min(8192, 16 x 1024)
    assert build["max_beam_width"] == "1" and build["tokens_per_block"] == "32"
    assert build["checkpoint_dir"] == str(tmp_path / "tllm")
    assert build["output_dir"] == str(tmp_path / "engine.partial")
    convert = command(r.stdout, "llmserve.trtllm.build")
    assert convert[1:4] == ["-m", "llmserve.trtllm.build", "convert"]
    conv = flags(convert)
    assert conv == {
        "model_dir": str(tmp_path / "ckpt"),
        "output_dir": str(tmp_path / "tllm"),
        "dtype": "float16",
        "tp_size": "1",
        "pp_size": "1",
    }
    assert "build checkpoint" in r.stdout  # step 1 is named, not run
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "engine").exists()


def test_dry_run_tp2_bf16_without_paged_context(tmp_path):
    spec = write_spec(
        tmp_path,
        trt={
            "tp_size": 2,
            "visible_gpus": 2,
            "dtype": "bfloat16",
            "max_num_tokens": 4096,
            "enable_kv_cache_reuse": False,
            "enable_chunked_context": False,
        },
    )
    r = dry_run(spec)
    assert r.returncode == 0, r.stderr
    build = flags(command(r.stdout, "trtllm-build"))
    assert build["gpt_attention_plugin"] == "bfloat16" and build["gemm_plugin"] == "bfloat16"
    assert build["use_paged_context_fmha"] == "disable"
    assert build["max_num_tokens"] == "4096" and build["workers"] == "2"
    assert flags(command(r.stdout, "llmserve.trtllm.build"))["tp_size"] == "2"


@pytest.mark.parametrize(
    "hf,engine,trt,msg",
    [
        ({"max_position_embeddings": 1024}, None, None, "exceeds the model's max_position_embeddings 1024"),
        ({"architectures": ["GPT2LMHeadModel"]}, None, None, "GPT2LMHeadModel is not supported"),
        (
            {"num_attention_heads": 6, "num_key_value_heads": 6},
            None,
            {"tp_size": 4, "visible_gpus": 4},
            "does not divide num_attention_heads 6",
        ),
        (None, None, {"max_num_tokens": 512, "enable_chunked_context": False}, "could never be scheduled"),
    ],
)
def test_dry_run_refusals(tmp_path, hf, engine, trt, msg):
    r = dry_run(write_spec(tmp_path, hf=hf, engine=engine, trt=trt))
    assert r.returncode == 1
    assert msg in r.stderr and "trtllm-build" not in r.stdout


def test_tp_wider_than_visible_gpus_is_a_spec_error(tmp_path):
    r = dry_run(write_spec(tmp_path, trt={"tp_size": 2, "visible_gpus": 1}))
    assert r.returncode == 2 and "visible_gpus" in r.stderr


def test_real_build_without_tensorrt_llm_says_so(tmp_path):
    r = subprocess.run(
        [sys.executable, "scripts/build_engine.py", "--spec", str(write_spec(tmp_path))],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "TensorRT-LLM is not installed" in r.stderr


def test_build_sequence_with_fake_tensorrt_llm(tmp_path, monkeypatch):
    """The non-dry path: checkpoint, convert, trtllm-build into .partial, manifest, rename, skip when
    up to date. TensorRT-LLM's two steps are replaced by fakes that write what they would."""
    spec_path = write_spec(tmp_path)
    spec = load_spec(spec_path)
    ran = []

    def fake_run(cmd):
        ran.append(cmd)
        f = flags(cmd)
        if "convert" in cmd:
            out = Path(f["output_dir"])
            out.mkdir(parents=True)
            (out / "config.json").write_text("{}")
            (out / B.CONVERTED).write_text(json.dumps({"sha256": B._sha256(cmd[4:])}))
        else:
            out = Path(f["output_dir"])
            out.mkdir(parents=True)
            (out / "config.json").write_text("{}")
            (out / "rank0.engine").write_bytes(b"engine")

    monkeypatch.setattr(B, "_run", fake_run)
    monkeypatch.setattr(B, "trtllm_version", lambda: "1.1.0")
    monkeypatch.setattr(B.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(B, "visible_gpu_count", lambda: 1)
    assert B.build_trtllm_engine(spec, spec_path) == 0
    engine = tmp_path / "engine"
    manifest = json.loads((engine / B.MANIFEST).read_text())
    assert manifest["tensorrt_llm_version"] == "1.1.0"
    assert manifest["flags"]["kv_cache_type"] == "paged"
    assert len(manifest["spec_sha256"]) == 64 and len(manifest["build_sha256"]) == 64
    assert manifest["model_shape"]["architecture"] == "LlamaForCausalLM"
    assert not (tmp_path / "engine.partial").exists() and (engine / "rank0.engine").exists()
    assert (tmp_path / "ckpt" / "config.json").exists()  # step 1 really ran (hf_checkpoint copy)
    assert len(ran) == 2
    info = json.loads((engine / "xgrammar_tokenizer_info.json").read_text())  # guided decoding's, as upstream's
    assert set(info) == {"encoded_vocab", "tokenizer_str", "stop_token_ids"} and len(info["encoded_vocab"]) == 49152
    # An engine built before guided decoding gets the file on the next (up-to-date) run.
    (engine / "xgrammar_tokenizer_info.json").unlink()
    assert B.build_trtllm_engine(spec, spec_path) == 0 and (engine / "xgrammar_tokenizer_info.json").exists()
    # Same spec again: nothing to do. --force rebuilds; a changed flag rebuilds the engine only.
    assert B.build_trtllm_engine(spec, spec_path) == 0 and len(ran) == 2
    assert B.build_trtllm_engine(spec, spec_path, force=True) == 0 and len(ran) == 4
    bigger = load_spec(write_spec(tmp_path, engine={"max_batch_size": 32}))
    assert B.build_trtllm_engine(bigger, spec_path) == 0
    assert len(ran) == 5 and "trtllm-build" == ran[-1][0]


def test_build_refuses_when_too_few_gpus(tmp_path, monkeypatch):
    spec_path = write_spec(tmp_path, trt={"tp_size": 2, "visible_gpus": 2})
    monkeypatch.setattr(B, "trtllm_version", lambda: "1.1.0")
    monkeypatch.setattr(B.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(B, "visible_gpu_count", lambda: 1)
    with pytest.raises(ValueError, match="1 GPU"):
        B.build_trtllm_engine(load_spec(spec_path), spec_path)


def test_compat_hf_config_for_transformers_4():
    cfg = B.compat_hf_config(TINY_LLAMA)
    assert cfg["rope_theta"] == 100000.0 and cfg["torch_dtype"] == "float32"
    assert "rope_scaling" not in cfg
    scaled = B.compat_hf_config({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0}})
    assert scaled["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    assert B.compat_hf_config({"rope_theta": 1.0, "rope_parameters": {"rope_theta": 2.0}})["rope_theta"] == 1.0


def test_staged_checkpoint_links_weights(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(TINY_LLAMA))
    (src / "model.safetensors").write_bytes(b"w")
    staged = B._staged(src, tmp_path / "staged")
    assert (staged / "model.safetensors").is_symlink()
    assert json.loads((staged / "config.json").read_text())["rope_theta"] == 100000.0


def test_example_specs_dry_run():
    for name in ("trtllm-1gpu.yaml", "trtllm-2inst-1gpu.yaml", "trtllm-2inst-tp2.yaml"):
        r = dry_run(ROOT / "specs" / name)
        assert r.returncode == 0, r.stderr
        assert "--kv_cache_type paged" in r.stdout
