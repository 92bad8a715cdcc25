"""A 20-second bench smoke on CPU against the tiny model behind the full ensemble: the load
generator keeps working end to end (no timing assertions: CI machines vary)."""

import json

import pytest

from llmserve.bench.cli import main as bench_main
from llmserve.spec import ROOT

pytestmark = pytest.mark.e2e


def test_bench_smoke(tiny_server, tmp_path):
    out = tmp_path / "bench"
    rc = bench_main(
        [
            "--url",
            tiny_server.grpc,
            "--http-url",
            tiny_server.http,
            "--targets",
            "ensemble,ensemble-http,tensorrt_llm,engine",
            "--spec",
            str(ROOT / "specs/tiny.yaml"),
            "--concurrency",
            "1,4",
            "--input-len",
            "16",
            "--output-len",
            "8",
            "--duration",
            "2",
            "--warmup",
            "2",
            "--engine-max-slots",
            "4",
            "--num-prompts",
            "16",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    for name in ("results.json", "results.csv", "throughput.png", "latency.png"):
        assert (out / name).stat().st_size > 0, name
    doc = json.loads((out / "results.json").read_text())
    assert {r["target"] for r in doc["runs"]} == {"ensemble", "ensemble-http", "tensorrt_llm", "engine"}
    for run in doc["runs"]:
        s = run["summary"]
        assert s["errors"] == 0, (run["target"], s["error_examples"])
        assert s["completed"] > 0 and s["mean_tokens_per_request"] == 8
        assert s["ttft_ms"]["p50"] is not None and s["itl_ms"]["p50"] is not None
    assert "ensemble/engine" in doc["ratios"]
    lines = (out / "results.csv").read_text().splitlines()
    assert len(lines) == 1 + len(doc["runs"])


def test_rate_mode(tiny_server, tmp_path):
    out = tmp_path / "rate"
    rc = bench_main(
        [
            "--url",
            tiny_server.grpc,
            "--spec",
            str(ROOT / "specs/tiny.yaml"),
            "--request-rate",
            "4",
            "--input-len",
            "16",
            "--output-len",
            "4",
            "--requests",
            "6",
            "--warmup",
            "1",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["runs"][0]["mode"] == "rate" and doc["runs"][0]["summary"]["completed"] == 6
