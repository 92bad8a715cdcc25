"""Statistics, results.json, CSV and plots."""

from __future__ import annotations

import csv
import json
import logging
import time
from pathlib import Path

import numpy as np

from .runner import RunResult

PCTS = (50, 90, 99)
log = logging.getLogger(__name__)


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {f"p{p}": None for p in PCTS} | {"mean": None}
    a = np.asarray(values) * 1000.0  # milliseconds
    return {f"p{p}": round(float(np.percentile(a, p)), 3) for p in PCTS} | {"mean": round(float(a.mean()), 3)}


def summarize(result: RunResult) -> dict:
    ok = [r for r in result.records if r.error is None and r.end is not None]
    errors = [r.error for r in result.records if r.error is not None]
    wall = max(result.ended - result.started, 1e-9)
    ttft = [r.first - r.start for r in ok if r.first is not None]
    e2e = [r.end - r.start for r in ok]
    # Inter-token latency per request: (last token - first token) / (tokens - 1), as GenAI-Perf and
    # AIPerf define it; chunk gaps (every gap between two streamed responses) are reported too.
    itl = [(r.last - r.first) / (r.tokens - 1) for r in ok if r.tokens > 1]
    gaps = [b - a for r in ok for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    out_tokens = sum(r.tokens for r in ok)
    # The window on the wall clock (perf_counter is CLOCK_MONOTONIC, one clock for every client process),
    # so server-side counters can be read over the window alone, without the warm-up (scripts/h200/hops.py).
    to_unix = time.time() - time.perf_counter()
    return {
        "requests": len(result.records),
        "completed": len(ok),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:5],
        "duration_s": round(wall, 3),
        "output_tokens": out_tokens,
        "output_tokens_per_s": round(out_tokens / wall, 2),
        "requests_per_s": round(len(ok) / wall, 3),
        "ttft_ms": _pct(ttft),
        "itl_ms": _pct(itl),
        "chunk_gap_ms": _pct(gaps),
        "e2e_ms": _pct(e2e),
        "mean_tokens_per_request": round(out_tokens / len(ok), 2) if ok else 0,
        "window_unix": [round(result.started + to_unix, 3), round(result.ended + to_unix, 3)],
    }


CSV_FIELDS = [
    "target",
    "mode",
    "load",
    "requests",
    "completed",
    "errors",
    "duration_s",
    "output_tokens",
    "output_tokens_per_s",
    "requests_per_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
]


def _row(run: dict) -> dict:
    s = run["summary"]
    row = {k: run[k] for k in ("target", "mode", "load")}
    row |= {k: s[k] for k in CSV_FIELDS if k in s}
    for metric in ("ttft", "itl", "e2e"):
        for p in PCTS:
            row[f"{metric}_p{p}_ms"] = s[f"{metric}_ms"][f"p{p}"]
    return row


def ratios(runs: list[dict], numerator: str, denominator: str) -> dict:
    """numerator/denominator throughput and TTFT p50 at each load both were run at."""
    by = {(r["target"], r["mode"], r["load"]): r["summary"] for r in runs}
    out = {}
    for (t, mode, load), s in by.items():
        d = by.get((denominator, mode, load))
        if t != numerator or d is None or not d["output_tokens_per_s"]:
            continue
        ttft_n, ttft_d = s["ttft_ms"]["p50"], d["ttft_ms"]["p50"]
        out[f"{mode}={load}"] = {
            "throughput_ratio": round(s["output_tokens_per_s"] / d["output_tokens_per_s"], 4),
            "ttft_p50_ratio": round(ttft_n / ttft_d, 4) if ttft_n and ttft_d else None,
        }
    return out


def write(out_dir: Path, meta: dict, runs: list[dict]) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = sorted({r["target"] for r in runs})
    doc = {"meta": meta, "runs": runs, "ratios": {}}
    for t in targets:
        if t != "engine" and "engine" in targets:
            doc["ratios"][f"{t}/engine"] = ratios(runs, t, "engine")
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2))
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in runs:
            w.writerow(_row(r))
    plot(out_dir, runs)
    return doc


def plot(out_dir: Path, runs: list[dict]) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no plots")
        return []
    made = []
    series: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        series.setdefault((r["target"], r["mode"]), []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (target, mode), rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["load"])
        ax.plot(
            [r["load"] for r in rs], [r["summary"]["output_tokens_per_s"] for r in rs], "o-", label=f"{target} ({mode})"
        )
    ax.set_xlabel("concurrency (or request rate, req/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Throughput against load")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "throughput.png", dpi=110)
    made.append(out_dir / "throughput.png")
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for (target, mode), rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["load"])
        x = [r["summary"]["output_tokens_per_s"] for r in rs]
        axes[0].plot(x, [r["summary"]["ttft_ms"]["p50"] for r in rs], "o-", label=f"{target} ({mode})")
        axes[1].plot(x, [r["summary"]["itl_ms"]["p50"] for r in rs], "o-", label=f"{target} ({mode})")
    for ax, what in zip(axes, ("time to first token p50 (ms)", "inter-token latency p50 (ms)")):
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Latency against throughput")
    fig.tight_layout()
    fig.savefig(out_dir / "latency.png", dpi=110)
    made.append(out_dir / "latency.png")
    plt.close(fig)
    return made
