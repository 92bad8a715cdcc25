"""deploy/grafana/llmserve.json is valid JSON and reads only series the code exports."""

from __future__ import annotations

import json
import re

from llmserve.openai_api.metrics import Metrics
from llmserve.pipeline.metrics import COUNTERS, GAUGES
from llmserve.spec import ROOT

TRITON = {
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_queue_duration_us",
    "nv_inference_pending_request_count",
}


def test_dashboard_reads_exported_series():
    dash = json.loads((ROOT / "deploy" / "grafana" / "llmserve.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    names = {n for e in exprs for n in re.findall(r"\b((?:llmserve|nv_inference)_[a-z0-9_]+)", e)}
    exported = set()
    for family in Metrics("m", 100).registry.collect():
        exported |= {family.name, family.name + "_total", family.name + "_bucket"}
    exported |= set(GAUGES) | set(COUNTERS) | TRITON
    missing = sorted(n for n in names if n not in exported)
    assert not missing, missing
    assert {p["title"] for p in dash["panels"]} >= {
        "Time to first token",
        "Inter-token latency",
        "End-to-end request latency",
    }
