"""The short version of tools/soak.py: mixed load (HTTP/gRPC, unary/streaming, invalid and
abandoned requests) with the same checks: zero errors, the server ready throughout, RSS and open fds
of tritonserver and every Python stub grow < 5% after warm-up. Run the 30-minute soak by hand:
`python tools/soak.py` (docs/PERFORMANCE.md, section 5)."""

from __future__ import annotations

import pytest

from llmserve.bench import soak

from ..durations import long

pytestmark = pytest.mark.e2e
DURATION_S = long("soak_s")  # tests/durations.py: 60 s in CI, 120 s in full


def test_soak_short(tiny_server, tmp_path, capsys):
    report = soak.run(
        tiny_server.http,
        tiny_server.grpc,
        tiny_server.process.proc.pid,
        DURATION_S,
        warmup_s=DURATION_S / 4,
        concurrency=4,
        max_tokens=16,
        period_s=2.0,
        report_path=tmp_path / "soak-report.json",
    )
    with capsys.disabled():
        print("\n" + soak.summary(report), flush=True)
    assert report["errors"] == 0, report["error_samples"][:5]
    assert report["not_ready_samples"] == 0
    assert report["total_requests"] > 100
    assert report["pass"]["rss"], report["rss_growth"]
    assert report["pass"]["fds"], report["fd_growth"]
