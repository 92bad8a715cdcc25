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


def test_clients_share_one_window_and_pool_their_records(tiny_server, tmp_path):
    """--clients 2: two spawned processes, each with half the streams, one window, pooled percentiles."""
    out = tmp_path / "clients"
    args = ["--url", tiny_server.grpc, "--spec", str(ROOT / "specs/tiny.yaml"), "--input-len", "16"]
    args += ["--output-len", "4", "--warmup", "1", "--num-prompts", "8", "--no-progress", "--clients", "2"]
    rc = bench_main(
        args + ["--targets", "ensemble,tensorrt_llm", "--concurrency", "2,4", "--requests", "12"] + ["--out", str(out)]
    )
    assert rc == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["clients"] == 2
    assert [(r["target"], r["load"]) for r in doc["runs"]] == [
        ("ensemble", 2), ("ensemble", 4), ("tensorrt_llm", 2), ("tensorrt_llm", 4)
    ]  # fmt: skip
    for run in doc["runs"]:
        s = run["summary"]
        assert s["errors"] == 0, s["error_examples"]
        assert s["completed"] == 12 and s["mean_tokens_per_request"] == 4  # 6 from each client, pooled
        assert len(s["clients"]) == 2 and all(c["output_tokens_per_s"] > 0 for c in s["clients"])
    # a rate is divided over the clients: 6 requests in all at 4/s, 2/s from each
    rate = tmp_path / "rate"
    rc = bench_main(args + ["--request-rate", "4", "--requests", "6", "--out", str(rate)])
    assert rc == 0
    s = json.loads((rate / "results.json").read_text())["runs"][0]["summary"]
    assert s["completed"] == 6 and len(s["clients"]) == 2


def test_clients_refuse_what_they_cannot_split(tmp_path):
    args = ["--url", "localhost:1", "--spec", str(ROOT / "specs/tiny.yaml"), "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="needs every --concurrency >= 4"):
        bench_main(args + ["--clients", "4", "--concurrency", "2,8"])
    with pytest.raises(SystemExit, match="--clients > 1 is for the served targets"):
        bench_main(args + ["--clients", "2", "--concurrency", "2", "--targets", "engine"])
