"""Soak: mixed load against a real tritonserver for --duration, sampling the resident memory (RSS)
and open file descriptors of tritonserver and every child (the Python backend stubs) from /proc.
Reports growth from the end of warm-up to the end of the run (goal < 5%) and errors (goal 0), and
writes a JSON report. Exit status 0 when both goals are met.

    python tools/soak.py                                   # 30 min, tiny spec, own server (or llmserve-soak)
    python tools/soak.py --spec specs/default.yaml --duration 600
    python tools/soak.py --http localhost:8000 --grpc localhost:8001 --pid <tritonserver pid>

tests/reliability/test_soak_short.py runs `run` for 2 minutes against the tests' own server.

Mixed load (each worker loops, choosing at random): HTTP generate, HTTP generate_stream, gRPC
streaming (ensemble), gRPC unary (ensemble_unary), an invalid request (must get 400 /
INVALID_ARGUMENT), and a stream the client abandons after its first event (exercises cancellation).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import requests

from ..checkpoint import build_checkpoint
from ..client.wire import infer_inputs
from ..deploy.tritonserver import TritonProcess, free_ports
from ..logs import add_cli_options, configure_from_args
from ..repository.writer import write_repository
from ..spec import load_spec

logger = logging.getLogger(__name__)
PROMPTS = [
    "Say hi",
    "What is the capital of France?",
    "Write a haiku about rain.",
    "List three colours.",
    "日本語で挨拶して",
    "Explain TCP in one line.",
]


# --- /proc sampling --------------------------------------------------------------------------------
def children(pid: int) -> list[int]:
    """All descendants of pid (tritonserver forks one Python stub per model instance)."""
    kids, out = defaultdict(list), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids[ppid].append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    stack = [pid]
    while stack:
        for c in kids.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def label(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid}"
    name = Path(args[0].decode(errors="replace")).name
    # The stub's arguments include the model's shared-memory key, e.g. ..._tensorrt_llm_0_0
    model = next((a.decode(errors="replace") for a in args[1:] if b"/" in a and b"model.py" in a), "")
    if model:
        name += ":" + Path(model).parent.parent.name
    return f"{name}[{pid}]"


def sample(pid: int) -> dict[str, dict[str, int]]:
    out = {}
    for p in [pid, *children(pid)]:
        try:
            rss = next(
                int(line.split()[1])
                for line in Path(f"/proc/{p}/status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
            fds = len(os.listdir(f"/proc/{p}/fd"))
        except (OSError, StopIteration):
            continue
        out[label(p)] = {"rss_kb": rss, "fds": fds}
    return out


# --- load ------------------------------------------------------------------------------------------
class Load:
    def __init__(self, http: str, grpc: str, max_tokens: int, seed: int = 0):
        self.http, self.grpc, self.max_tokens = http, grpc, max_tokens
        self.counts: Counter = Counter()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.rng = random.Random(seed)

    def record(self, kind: str, ok: bool, detail: str = "") -> None:
        with self.lock:
            self.counts[f"{kind}:{'ok' if ok else 'error'}"] += 1
            if not ok and len(self.errors) < 200:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {kind}: {detail[:300]}")

    def body(self) -> dict:
        # Half greedy, half sampled (TensorRT-LLM's rule: top_k == top_p == 0 is greedy, whatever the temperature).
        sampled = {"temperature": 0.7, "top_p": 0.95} if self.rng.random() < 0.5 else {"temperature": 0.0}
        return {
            "text_input": self.rng.choice(PROMPTS),
            "max_tokens": self.rng.randint(1, self.max_tokens),
            **sampled,
            "seed": self.rng.randint(0, 2**31),
        }

    def http_generate(self, s):
        r = s.post(f"http://{self.http}/v2/models/ensemble/generate", json=self.body(), timeout=300)
        self.record("http_generate", r.status_code == 200 and "text_output" in r.json(), f"{r.status_code} {r.text}")

    def http_stream(self, s):
        r = s.post(f"http://{self.http}/v2/models/ensemble/generate_stream", json=self.body(), timeout=300)
        events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
        ok = r.status_code == 200 and events and all("error" not in e for e in events)
        self.record("http_stream", bool(ok), f"{r.status_code} {r.text}")

    def http_abandon(self, s):
        body = {**self.body(), "max_tokens": max(self.max_tokens, 8)}
        with s.post(f"http://{self.http}/v2/models/ensemble/generate_stream", json=body, stream=True, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith(b"data:"):
                    break  # leave mid-stream: the server must cancel and free the slot
        self.record("http_abandon", r.status_code == 200, f"{r.status_code}")

    def http_invalid(self, s):
        bad = self.rng.choice(
            [
                {"text_input": "hi", "max_tokens": 0},
                {"text_input": "", "max_tokens": 2},
                {"text_input": "hi", "max_tokens": 2, "temperature": -1},
                {"text_input": "hi", "max_tokens": 2, "stop_words": ["x"] * 300},
            ]
        )
        r = s.post(f"http://{self.http}/v2/models/ensemble/generate", json=bad, timeout=60)
        self.record("http_invalid", r.status_code == 400, f"{r.status_code} {r.text}")

    def _inputs(self, grpcclient):
        return infer_inputs(self.body(), grpcclient)

    def grpc_unary(self, _):
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        client = grpcclient.InferenceServerClient(self.grpc)
        try:
            res = client.infer("ensemble_unary", self._inputs(grpcclient), client_timeout=300)
            self.record("grpc_unary", res.as_numpy("text_output") is not None)
        except InferenceServerException as e:
            self.record("grpc_unary", False, f"{e.status()} {e.message()}")
        finally:
            client.close()

    def grpc_stream(self, _):
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc)
        q: queue.Queue = queue.Queue()
        try:
            client.start_stream(callback=lambda result, error: q.put((result, error)))
            client.async_stream_infer("ensemble", self._inputs(grpcclient), enable_empty_final_response=True)
            while True:
                result, error = q.get(timeout=300)
                if error is not None:
                    self.record("grpc_stream", False, str(error))
                    break
                if result.get_response().parameters["triton_final_response"].bool_param:
                    self.record("grpc_stream", True)
                    break
        except queue.Empty:
            self.record("grpc_stream", False, "no final response in 300 s")
        finally:
            client.stop_stream()
            client.close()

    KINDS = {
        "http_generate": 4,
        "http_stream": 3,
        "grpc_stream": 2,
        "grpc_unary": 2,
        "http_invalid": 1,
        "http_abandon": 1,
    }

    def worker(self, stop: threading.Event, seed: int) -> None:
        rng = random.Random(seed)
        kinds, weights = zip(*self.KINDS.items())
        s = requests.Session()
        while not stop.is_set():
            kind = rng.choices(kinds, weights)[0]
            try:
                getattr(self, kind)(s)
            except Exception as e:  # a broken connection, a timeout: an error, keep going
                self.record(kind, False, f"{type(e).__name__}: {e}")
                s = requests.Session()


# --- analysis --------------------------------------------------------------------------------------
def growth(samples: list[dict], warmup_s: float, key: str) -> dict:
    """Per process and in total: median of the first 3 samples after warm-up vs the last 3."""
    after = [s for s in samples if s["t"] >= warmup_s]
    if len(after) < 2:
        return {}
    head, tail = after[:3], after[-3:]
    out = {}
    names = sorted({n for s in after for n in s["procs"]})
    for n in names + ["total"]:

        def val(s):
            if n == "total":
                return sum(p[key] for p in s["procs"].values())
            return s["procs"].get(n, {}).get(key)

        a = [v for v in map(val, head) if v is not None]
        b = [v for v in map(val, tail) if v is not None]
        if a and b:
            base, end = statistics.median(a), statistics.median(b)
            out[n] = {
                "after_warmup": base,
                "end": end,
                "growth_pct": round(100.0 * (end - base) / max(base, 1), 2),
                "max": max(v for v in map(val, after) if v is not None),
            }
    return out


def run(
    http: str,
    grpc: str,
    pid: int,
    duration_s: float,
    warmup_s: float,
    concurrency: int,
    max_tokens: int,
    period_s: float,
    report_path: Path | None,
    goal_pct: float = 5.0,
) -> dict:
    load = Load(http, grpc, max_tokens)
    stop = threading.Event()
    threads = [threading.Thread(target=load.worker, args=(stop, i), daemon=True) for i in range(concurrency)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    samples, last_log, not_ready = [], 0.0, 0
    while (now := time.monotonic() - t0) < duration_s:
        samples.append({"t": round(now, 1), "procs": sample(pid)})
        try:
            not_ready += requests.get(f"http://{http}/v2/health/ready", timeout=5).status_code != 200
        except requests.RequestException:
            not_ready += 1
        if now - last_log >= 60:
            total = sum(p["rss_kb"] for p in samples[-1]["procs"].values())
            logger.info(
                "%6.0f s  requests %d  errors %d  RSS %.0f MB  procs %d",
                now,
                sum(load.counts.values()),
                len(load.errors),
                total / 1024,
                len(samples[-1]["procs"]),
            )
            last_log = now
        time.sleep(period_s)
    stop.set()
    for t in threads:
        t.join(timeout=320)
    samples.append({"t": round(time.monotonic() - t0, 1), "procs": sample(pid)})
    rss, fds = growth(samples, warmup_s, "rss_kb"), growth(samples, warmup_s, "fds")
    errors = sum(v for k, v in load.counts.items() if k.endswith(":error"))
    # File descriptors come in small counts that move with open client connections: allow +2.
    fd_ok = all(v["growth_pct"] < goal_pct or v["end"] - v["after_warmup"] <= 2 for v in fds.values())
    report = {
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "requests": dict(load.counts),
        "total_requests": sum(load.counts.values()),
        "errors": errors,
        "error_samples": load.errors[:20],
        "not_ready_samples": not_ready,
        "rss_growth": rss,
        "fd_growth": fds,
        "goal_pct": goal_pct,
        "pass": {
            "errors": errors == 0 and not_ready == 0,
            "rss": bool(rss)
            and rss["total"]["growth_pct"] < goal_pct
            and all(v["growth_pct"] < goal_pct for v in rss.values()),
            "fds": bool(fds) and fd_ok,
        },
        "samples": samples,
    }
    report["ok"] = all(report["pass"].values())
    if report_path:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=1))
    return report


def summary(report: dict) -> str:
    lines = [
        f"soak {report['duration_s']:.0f} s (warm-up {report['warmup_s']:.0f} s), concurrency "
        f"{report['concurrency']}: {report['total_requests']} requests, {report['errors']} errors, "
        f"{report['not_ready_samples']} not-ready samples"
    ]
    for k, v in sorted(report["requests"].items()):
        lines.append(f"  {k:22s} {v}")
    lines.append("  RSS growth after warm-up (kB):")
    for n, v in report["rss_growth"].items():
        lines.append(f"    {n:45s} {v['after_warmup']:>9.0f} -> {v['end']:>9.0f}  {v['growth_pct']:+6.2f}%")
    lines.append("  open fds after warm-up:")
    for n, v in report["fd_growth"].items():
        lines.append(f"    {n:45s} {v['after_warmup']:>9.0f} -> {v['end']:>9.0f}  {v['growth_pct']:+6.2f}%")
    lines.append(f"  pass: {report['pass']} -> {'OK' if report['ok'] else 'FAIL'}")
    lines += [f"  error: {e}" for e in report["error_samples"][:5]]
    return "\n".join(lines)


def start_server(spec_path: Path, workdir: Path, repository: Path | None = None) -> TritonProcess:
    """A server of its own for a measurement (the soak, tools/bench_serve.py), on free ports, ready:
    `repository`, or the spec's generated into workdir."""
    spec = load_spec(spec_path)
    build_checkpoint(spec)
    if repository is None:
        repository = workdir / "model_repository"
        write_repository(spec, spec_path.name, repository)
    http, grpc, metrics = free_ports(3)
    server = TritonProcess(
        repository,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        exit_timeout_s=spec.serving.exit_timeout_s,
        log_path=workdir / f"tritonserver-{http}.log",
    )
    server.start()
    try:
        server.wait_ready(timeout_s=300)
    except Exception:
        server.stop()
        raise
    return server


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default="specs/tiny.yaml", help="start a server from this spec (ignored with --http)")
    ap.add_argument("--http", help="an already running server's HTTP host:port")
    ap.add_argument("--grpc", help="its gRPC host:port")
    ap.add_argument("--pid", type=int, help="its tritonserver pid (for /proc sampling)")
    ap.add_argument("--duration", type=float, default=1800, help="seconds (default 1800)")
    ap.add_argument("--warmup", type=float, help="seconds excluded from growth (default 20%% of duration, max 300)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--period", type=float, default=2.0, help="sampling period in seconds")
    ap.add_argument("--report", default="build/soak-report.json")
    add_cli_options(ap)
    args = ap.parse_args(argv)
    configure_from_args(args)
    warmup = args.warmup if args.warmup is not None else min(300.0, 0.2 * args.duration)
    server = None
    if args.http:
        if not (args.grpc and args.pid):
            ap.error("--http needs --grpc and --pid")
        http, grpc, pid = args.http, args.grpc, args.pid
    else:
        server = start_server(Path(args.spec).resolve(), Path(tempfile.mkdtemp(prefix="soak-")))
        http, grpc, pid = f"localhost:{server.http_port}", f"localhost:{server.grpc_port}", server.proc.pid
        logger.info("server pid %d http %s grpc %s log %s", pid, http, grpc, server.log_path)
    try:
        report = run(
            http, grpc, pid, args.duration, warmup, args.concurrency, args.max_tokens, args.period, Path(args.report)
        )
    except KeyboardInterrupt:  # Ctrl-C: stop (the server too), no traceback
        return 130
    finally:
        if server:
            server.stop()
    print(summary(report))
    print(f"[soak] report: {args.report}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
