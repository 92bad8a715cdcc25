"""Run a load command and report what each hop of the server did meanwhile (issue 17's ceiling run):
CPU seconds of tritonserver, of each Python model's stubs and of other processes (the OpenAI frontend),
and the Triton request counts per model, as rates and as CPU per streamed token, each model's mean queue
time per request (Triton's nv_inference_queue_duration_us), and the engine model's own mean queue time and
time to first token (llmserve_request_queue_seconds_total and llmserve_time_to_first_token_seconds_total over
their counts: from the request's arrival at the engine model).

    python3 scripts/h200/hops.py --triton-pid PID --metrics localhost:18002 --top ensemble --output-len 128 \
        --label NAME --out point.json [--pid frontend=PID ...] -- python3 tools/bench.py ... --out DIR

Tokens are counted on the server (successful requests of --top x --output-len), so CPU per token covers
the warm-up as well as the measured window; tok/s and TTFT are the bench's own (results.json in the
bench's --out directory, read when present)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import psutil

METRIC = re.compile(
    r'^(nv_inference_request_success|nv_inference_exec_count|nv_inference_queue_duration_us|nv_inference_compute_(?:input|infer|output)_duration_us)\{model="([^"]+)",version="[^"]*"\} (\S+)'
)
# The engine model's own sums (llmserve/pipeline/metrics.py): where a first token waits inside it.
ENGINE_METRIC = re.compile(
    r'^llmserve_(requests_admitted_total|request_queue_seconds_total|first_tokens_total|time_to_first_token_seconds_total)\{model="([^"]+)"\} (\S+)'
)


def cpu_of(p: psutil.Process) -> float:
    try:
        t = p.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def processes(triton_pid: int, extra: dict[str, int]) -> dict[str, float]:
    """CPU seconds by hop: 'tritonserver', 'stub:<model>' (its instances summed), and the extra pids
    with their children."""
    out: dict[str, float] = defaultdict(float)
    server = psutil.Process(triton_pid)
    out["tritonserver"] = cpu_of(server)
    for child in server.children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        model = next((Path(a).parent.parent.name for a in argv if a.endswith("model.py")), None)
        out[f"stub:{model}" if model else f"child:{child.name()}"] += cpu_of(child)
    for name, pid in extra.items():
        p = psutil.Process(pid)
        out[name] = cpu_of(p) + sum(cpu_of(c) for c in p.children(recursive=True))
    return dict(out)


def metrics(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{url}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = METRIC.match(line) or ENGINE_METRIC.match(line)
        if m:
            out[f"{m.group(1).removeprefix('nv_inference_')}:{m.group(2)}"] = float(m.group(3))
    return out


def engine_means(dm: dict[str, float]) -> dict[str, dict[str, float]]:
    """model -> the engine's mean ms over the point: queue (arrival at the model -> first step) and
    time to first token (arrival -> first token sampled), from its sums and counts."""
    out: dict[str, dict[str, float]] = {}
    for key, value in dm.items():
        name, _, model = key.partition(":")
        for total, count, label in (
            ("request_queue_seconds_total", "requests_admitted_total", "queue_ms"),
            ("time_to_first_token_seconds_total", "first_tokens_total", "ttft_ms"),
        ):
            n = dm.get(f"{count}:{model}")
            if name == total and n:
                out.setdefault(model, {})[label] = round(value * 1000 / n, 2)
    return out


DURATIONS = ("queue", "compute_input", "compute_infer", "compute_output")


def per_call(dm: dict[str, float], metric: str) -> dict[str, float]:
    """model -> the metric's growth over the point, in ms per successful request."""
    out = {}
    for key, value in dm.items():
        name, _, model = key.partition(":")
        calls = dm.get(f"request_success:{model}")
        if name == metric and calls:
            out[model] = round(value / 1000 / calls, 2)
    return out


class Poller:
    """Triton's metrics every PERIOD_S while the load runs, stamped with the wall clock, so that the engine
    model's counters can be read over the bench's measured window alone (its summary's window_unix) and not
    over its warm-up too (a burst: at an open-loop point it would bias every mean)."""

    PERIOD_S = 0.25

    def __init__(self, url: str):
        self.url, self.samples, self._stop = url, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD_S):
            try:
                self.samples.append((time.time(), metrics(self.url)))
            except OSError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    # The engine model's counters reach the metrics port up to this late: its stats come from the engine's
    # process every 0.1 s (engine_child.STATE_PERIOD_S) and are published every 0.5 s (EngineMetrics).
    ENGINE_LAG_S = 0.6

    def over(self, start: float, end: float) -> dict[str, float] | None:
        """The engine counters' growth over the window: from the first sample ENGINE_LAG_S after `start`
        (by then all that happened before the window is published: the warm-up's last first tokens would
        otherwise land in it) to the first ENGINE_LAG_S after `end`."""
        before = [m for t, m in self.samples if t >= start + self.ENGINE_LAG_S]
        after = [m for t, m in self.samples if t >= end + self.ENGINE_LAG_S]
        if not before or not after:
            return None
        return {k: after[0][k] - before[0].get(k, 0.0) for k in after[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triton-pid", type=int, required=True)
    ap.add_argument("--metrics", required=True, help="host:port of Triton's metrics")
    ap.add_argument("--top", required=True, help="the model the load calls (ensemble, tensorrt_llm)")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--pid", action="append", default=[], help="NAME=PID of another process to account (frontend)")
    ap.add_argument("--label", default="")
    ap.add_argument("--bench-out", help="the bench's --out directory (results.json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    extra = dict(kv.split("=", 1) for kv in a.pid)
    extra = {k: int(v) for k, v in extra.items()}
    cpu0, m0, t0 = processes(a.triton_pid, extra), metrics(a.metrics), time.monotonic()
    poller = Poller(a.metrics)
    rc = subprocess.call(cmd)
    wall = time.monotonic() - t0
    cpu1, m1 = processes(a.triton_pid, extra), metrics(a.metrics)
    time.sleep(Poller.ENGINE_LAG_S + Poller.PERIOD_S)  # the samples the window's end needs (Poller.over)
    poller.stop()
    dm = {k: m1[k] - m0.get(k, 0.0) for k in m1}
    tokens = dm.get(f"request_success:{a.top}", 0.0) * a.output_len
    point = {
        "label": a.label,
        "rc": rc,
        "wall_s": round(wall, 2),
        "server_tokens": tokens,
        "server_tok_per_s": round(tokens / wall, 1),
        "cpu": {
            k: {
                "cores": round((cpu1[k] - cpu0.get(k, 0.0)) / wall, 3),
                "us_per_token": round((cpu1[k] - cpu0.get(k, 0.0)) / tokens * 1e6, 2) if tokens else None,
            }
            for k in cpu1
        },
        "calls_per_s": {
            k.split(":", 1)[1]: round(v / wall, 1) for k, v in dm.items() if k.startswith("request_success:") and v
        },
        "execs_per_s": {
            k.split(":", 1)[1]: round(v / wall, 1) for k, v in dm.items() if k.startswith("exec_count:") and v
        },
        # Triton's cumulative durations over each model's successful requests: where a step's requests
        # wait (queue) and what its executes spend (copying inputs, running, copying outputs).
        **{f"{part}_ms_per_call": per_call(dm, f"{part}_duration_us") for part in DURATIONS},
        "engine_mean_ms": engine_means(dm),
    }
    if a.bench_out and (Path(a.bench_out) / "results.json").exists():
        runs = json.loads((Path(a.bench_out) / "results.json").read_text())["runs"]
        window = runs[0]["summary"].get("window_unix") if runs else None
        # The engine model's means over the bench's window only (the engine publishes every 0.5 s, so the
        # edges are that coarse); None when the window was too short to hold two samples.
        dw = poller.over(*window) if window else None
        point["engine_mean_ms_window"] = engine_means(dw) if dw else None
        point["bench"] = [
            {
                "target": r["target"],
                "load": r["load"],
                "tok_s": r["summary"]["output_tokens_per_s"],
                "ttft_p50_ms": r["summary"]["ttft_ms"]["p50"],
                "ttft_mean_ms": r["summary"]["ttft_ms"]["mean"],
                "errors": r["summary"]["errors"],
                "chunks_per_request": r["summary"].get("mean_chunks_per_request"),
                "clients": r.get("clients", 1),  # tools/bench.py --clients: its client processes' own p50s
                "ttft_p50_ms_each": sorted(c["ttft_p50_ms"] or 0 for c in r["summary"].get("clients", [])),
            }
            for r in runs
        ]
    Path(a.out).write_text(json.dumps(point, indent=1))
    b = point.get("bench", [{}])[0]
    cores = ", ".join(
        f"{k} {v['cores']:.2f} ({v['us_per_token']} us/tok)" for k, v in point["cpu"].items() if v["cores"] > 0.02
    )
    print(
        f"HOPS {a.label}: bench {b.get('tok_s')} tok/s ttft50 {b.get('ttft_p50_ms')} err {b.get('errors')}; "
        f"server {point['server_tok_per_s']} tok/s; calls/s {point['calls_per_s']}; "
        f"queue ms/call {point['queue_ms_per_call']}; in/infer/out ms/call {point['compute_input_ms_per_call']} "
        f"{point['compute_infer_ms_per_call']} {point['compute_output_ms_per_call']}; "
        f"bench ttft mean {b.get('ttft_mean_ms')}; engine mean ms {point['engine_mean_ms']} "
        f"(window: {point.get('engine_mean_ms_window')}); cores: {cores}",
        flush=True,
    )
    return rc


if __name__ == "__main__":
    sys.exit(main())
