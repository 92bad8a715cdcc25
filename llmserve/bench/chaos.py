"""Chaos soak: mixed streaming / non-streaming load through HAProxy, from plain clients, from the
failover client (llmserve/client/failover.py), OpenAI streams through the cluster's OpenAI frontends
and clients that hang up mid-stream (HTTP, gRPC cancel, OpenAI SSE; bench/mixed_load.py), for
--minutes, while at random one of these happens, one at a time, each followed by a wait until every
replica is back UP in HAProxy:

    kill-server   kill -9 of a whole replica (tritonserver and its stubs); the supervisor restarts it
    kill-engine   kill -9 of a replica's tensorrt_llm Python stub; its watchdog takes the server down
                  (readiness refused at once), the supervisor restarts it
    rolling       a rolling restart of every replica (drain, SIGTERM, restart, ready), no errors expected

Reports, per client kind, ok / failed (an error a client could not have retried) / retryable (an
error before the first token a client may retry elsewhere) / cut (a stream broken after its first
token) / resumed / retried, per event its kind, victim and recovery time (event to UP in HAProxy
again), and:

    memory   RSS of every long-lived process of the cluster (each tritonserver, its Python stubs and
             their watchdogs, the OpenAI frontends, HAProxy's master and worker, the reaper), sampled
             every --sample-s seconds with psutil; for each process alive at least --min-life-min
             minutes, growth = median RSS of the last quarter of its life / median of its 2nd quarter
             - 1 (the 1st quarter is warm-up); the worst is reported
    leaks    after cluster.stop(): processes left in any process group the cluster started, and
             /dev/shm regions left with its servers' prefixes (deploy/tritonserver.py)
    startup  servers that exited before they were ready, by cause (deploy/supervisor.py)

Goal (`pass`): 0 failed anywhere, 0 cut for the failover client, no hung client, no event that
failed, worst memory growth <= 5 % (when a process lived long enough to be judged), nothing leaked.
Plain streams in flight on a killed replica are cut by nature (no proxy can resume a started
response) and are counted apart, as are the hang-ups (their planned hang-up is their `ok`).
Exit status 0 when the goal is met.

    python tools/chaos.py --minutes 30                    # its own 3-replica tiny cluster on free ports (or llmserve-chaos)
    python tools/chaos.py --minutes 2 --report build/chaos.json

tests/ha/test_engine_health.py runs `chaos` for 1-2 minutes (tests/durations.py) on the HA tests'
cluster.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

from ..checkpoint import build_checkpoint
from ..deploy.cluster import Cluster
from ..deploy.tritonserver import SHM_DIR, free_ports
from ..logs import add_cli_options, configure_from_args
from ..repository.writer import write_repository
from ..spec import ROOT, load_spec
from .mixed_load import MixedLoad  # the HA tests' load too: one definition of "failed" and "cut"

logger = logging.getLogger(__name__)

EVENTS = ("kill-server", "kill-engine", "rolling")
MEMORY_BOUND = 0.05  # the worst growth allowed (issue 20)


def _label(p: psutil.Process, owner: str) -> str:
    """owner/what: tritonserver, a stub by its model instance, watchdog, haproxy, frontend."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return f"{owner}/?"
    if cmd and cmd[0].endswith("triton_python_backend_stub") and len(cmd) > 8:
        return f"{owner}/stub:{cmd[8]}"
    if "llmserve.pipeline.watchdog" in cmd:
        return f"{owner}/watchdog"
    return f"{owner}/{Path(cmd[0]).name if cmd else p.name()}"


class MemorySampler:
    """RSS of every process of the cluster every period_s seconds (a thread), and the process groups
    it saw (for the leak check after the cluster stops)."""

    def __init__(self, cluster: Cluster, period_s: float = 10.0):
        self.cluster, self.period_s = cluster, period_s
        self.series: dict[tuple[int, float], dict] = {}  # (pid, create_time) -> label, samples
        self.pgids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-memory", daemon=True)

    def roots(self) -> list[tuple[str, int]]:
        c = self.cluster
        out = [(r.name, r.pid) for r in c.replicas if r.process is not None and r.process.proc is not None]
        if c.frontends:
            out += [(n, f.proc.pid) for n, f in zip(c.frontends.names(), c.frontends.processes) if f.proc is not None]
        if c.haproxy is not None:
            out.append(("haproxy", c.haproxy.pid))
        if c.reaper.proc is not None:
            out.append(("reaper", c.reaper.proc.pid))
        return out

    def sample(self) -> None:
        now = time.monotonic()
        for owner, pid in self.roots():
            self.pgids.add(pid)  # every root leads its own process group (start_new_session)
            try:
                root = psutil.Process(pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for p in procs:
                try:
                    key = (p.pid, p.create_time())
                    rss = p.memory_info().rss
                    self.pgids.add(os.getpgid(p.pid))
                except (psutil.Error, OSError):
                    continue
                entry = self.series.setdefault(key, {"label": _label(p, owner), "pid": p.pid, "samples": []})
                entry["samples"].append((now, rss))

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.period_s):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def report(self, min_life_s: float = 300.0, bound: float = MEMORY_BOUND) -> dict:
        judged = []
        for e in self.series.values():
            s = e["samples"]
            if len(s) < 8 or s[-1][0] - s[0][0] < min_life_s:
                continue
            t0, life = s[0][0], s[-1][0] - s[0][0]
            q2 = [r for t, r in s if t0 + 0.25 * life <= t < t0 + 0.5 * life]
            q4 = [r for t, r in s if t >= t0 + 0.75 * life]
            if not q2 or not q4:
                continue
            m2, m4 = statistics.median(q2), statistics.median(q4)
            judged.append(
                {
                    "process": e["label"],
                    "pid": e["pid"],
                    "life_s": round(life),
                    "samples": len(s),
                    "q2_median_mib": round(m2 / 2**20, 1),
                    "q4_median_mib": round(m4 / 2**20, 1),
                    "growth_pct": round(100 * (m4 / m2 - 1), 2),
                    # RSS at 10 points of its life, MiB: what the growth looked like
                    "trace_mib": [round(s[i * (len(s) - 1) // 9][1] / 2**20, 1) for i in range(10)],
                }
            )
        judged.sort(key=lambda j: j["growth_pct"], reverse=True)
        worst = judged[0] if judged else None
        return {
            "sample_s": self.period_s,
            "min_life_s": min_life_s,
            "processes_sampled": len(self.series),
            "processes_judged": len(judged),
            "worst": worst,
            "top": judged[:8],
            "bound_pct": 100 * bound,
            # None: no process lived long enough to be judged (a short run)
            "flat": None if worst is None else worst["growth_pct"] <= 100 * bound,
        }


def leak_check(cluster: Cluster, pgids: set[int], settle_s: float = 10.0) -> dict:
    """After cluster.stop(): processes still in a process group the cluster started (they had until
    settle_s to go), /dev/shm regions with its servers' prefixes."""
    pgids = set(pgids)
    for r in cluster.replicas:
        pgids.update(r.pids)
    if cluster.haproxy is not None:
        pgids.add(cluster.haproxy.pid)
    if cluster.reaper.proc is not None:
        pgids.add(cluster.reaper.proc.pid)
    if cluster.frontends:
        pgids.update(f.proc.pid for f in cluster.frontends.processes if f.proc is not None)
    pgids.discard(os.getpgid(0))
    deadline = time.monotonic() + settle_s
    while True:
        left = []
        for p in psutil.process_iter(["pid", "name", "status"]):
            try:
                if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) in pgids and p.pid != os.getpid():
                    left.append({"pid": p.pid, "pgid": os.getpgid(p.pid), "cmd": " ".join(p.cmdline())[:120]})
            except (psutil.Error, OSError):
                continue
        regions = sorted(f.name for r in cluster.replicas for f in SHM_DIR.glob(r.shm_prefix + "*"))
        if (not left and not regions) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return {
        "process_groups": len(pgids),
        "processes_left": left,
        "shm_regions_left": regions,
        "clean": not left and not regions,
    }


def engine_stub(server_pid: int) -> int | None:
    for c in psutil.Process(server_pid).children():
        cmd = c.cmdline()
        if cmd and cmd[0].endswith("triton_python_backend_stub") and "tensorrt_llm_0_0" in cmd:
            return c.pid
    return None


def wait_all_up(cluster: Cluster, timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if all(cluster.api.status(r.name) == "UP" for r in cluster.replicas):
            return time.monotonic() - t0
        time.sleep(0.2)
    raise TimeoutError(f"not every replica UP after {timeout_s} s")


def run_event(cluster: Cluster, kind: str, rng: random.Random, recover_timeout_s: float) -> dict:
    t0 = time.monotonic()
    if kind == "rolling":
        report = cluster.rolling_restart()
        return {"event": kind, "total_s": round(time.monotonic() - t0, 1), "servers": report}
    victim = rng.choice(cluster.replicas)
    if kind == "kill-server":
        victim.kill()
    else:
        stub = engine_stub(victim.pid)
        if stub is None:
            return {"event": kind, "victim": victim.name, "skipped": "no engine stub found"}
        psutil.Process(stub).kill()
    down = None
    while time.monotonic() - t0 < 30:
        if cluster.api.status(victim.name) != "UP":
            down = time.monotonic() - t0
            break
        time.sleep(0.05)
    wait_all_up(cluster, recover_timeout_s)
    return {
        "event": kind,
        "victim": victim.name,
        "down_in_haproxy_s": None if down is None else round(down, 2),
        "back_up_s": round(time.monotonic() - t0, 1),
    }


def chaos(
    cluster: Cluster,
    minutes: float,
    *,
    seed: int = 0,
    settle_s: float = 3.0,
    events=EVENTS,
    recover_timeout_s: float = 600,
    hang_ups: bool = True,
    sampler: MemorySampler | None = None,
    min_life_s: float = 300.0,
) -> dict:
    """Run the load and the events on a started cluster (its supervisor must be running). OpenAI
    streams when the cluster has frontends; memory from `sampler` (started here when None)."""
    rng = random.Random(seed)
    http, grpc = f"localhost:{cluster.http_port}", f"localhost:{cluster.grpc_port}"
    openai = f"http://localhost:{cluster.spec.openai.port}/v1" if cluster.frontends else None
    model = cluster.spec.openai.served_model_name or cluster.spec.name
    done = []
    deadline = time.monotonic() + minutes * 60
    own_sampler = sampler is None
    sampler = sampler or MemorySampler(cluster)
    if own_sampler:
        sampler.__enter__()
    with MixedLoad(http, grpc, openai=openai, openai_model=model, hang_ups=hang_ups) as load:
        time.sleep(settle_s)
        i = 0
        while time.monotonic() < deadline:
            kind = events[i % len(events)] if i < len(events) else rng.choice(events)
            i += 1
            logger.info("%s", kind)
            try:
                done.append(run_event(cluster, kind, rng, recover_timeout_s))
            except Exception as e:  # the report still comes out, marked failed
                done.append({"event": kind, "error": f"{type(e).__name__}: {e}"})
                logger.error("%s", done[-1])
                break
            logger.info("%s", done[-1])
            time.sleep(min(settle_s, max(0.0, deadline - time.monotonic())))
    if own_sampler:
        sampler.__exit__(None, None, None)
    counts = {k: v.as_dict() for k, v in load.totals().items()}
    failed = sum(c["failed"] for c in counts.values())
    failover_cut = sum(c["cut"] for k, c in counts.items() if k.startswith("failover"))
    memory = sampler.report(min_life_s)
    report = {
        "minutes": minutes,
        "elapsed_s": round(load.elapsed, 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "hung_clients": load.hung,
        "events": done,
        "counts": counts,
        "failed": failed,
        "retryable": sum(c["retryable"] for c in counts.values()),
        "failover_cut": failover_cut,
        "plain_streams_cut": counts.get("plain_stream", {}).get("cut", 0),
        "hang_ups": sum(c["ok"] for k, c in counts.items() if k.startswith("hangup")),
        "requests": sum(c["ok"] + c["failed"] + c["retryable"] + c["cut"] for c in counts.values()),
        "memory": memory,
        "startup_failures": cluster.supervisor.startup_failures.as_dict(),
    }
    report["pass"] = (
        failed == 0
        and failover_cut == 0
        and load.hung == 0
        and not any("error" in e for e in done)
        and memory["flat"] is not False
    )
    return report


def summary(r: dict) -> str:
    m = r["memory"]
    w = m["worst"]
    lines = [
        f"chaos soak: {r['elapsed_s']} s, {r['requests']} requests, {len(r['events'])} events, load average "
        f"{r['load_average']}; failed {r['failed']} (+{r['retryable']} a client may retry), failover streams "
        f"cut {r['failover_cut']}, plain streams cut {r['plain_streams_cut']} (not resumable by a proxy), "
        f"hang-ups {r['hang_ups']}, hung clients {r['hung_clients']}: {'PASS' if r['pass'] else 'FAIL'}",
        f"  memory: {m['processes_judged']} of {m['processes_sampled']} processes lived >= {m['min_life_s']:g} s; "
        + (
            f"worst {w['process']} (pid {w['pid']}) {w['growth_pct']:+.2f} % "
            f"({w['q2_median_mib']} -> {w['q4_median_mib']} MiB over {w['life_s']} s), bound {m['bound_pct']:g} %"
            if w
            else "none judged"
        ),
        f"  start-up failures (exit before ready): {r['startup_failures']}",
    ]
    if "leaks" in r:
        lk = r["leaks"]
        lines.append(
            f"  after stop: {len(lk['processes_left'])} processes left in {lk['process_groups']} process groups, "
            f"{len(lk['shm_regions_left'])} /dev/shm regions left"
            + (f": {lk['processes_left'][:3]} {lk['shm_regions_left'][:3]}" if not lk["clean"] else "")
        )
    lines += [f"  {k:16s} {v}" for k, v in r["counts"].items()]
    lines += [f"  event {e}" for e in r["events"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--spec", default=str(ROOT / "specs" / "tiny.yaml"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=str(ROOT / "build" / "chaos"))
    ap.add_argument("--report", help="write the JSON report here")
    ap.add_argument("--no-openai", action="store_true", help="no OpenAI frontends (and no OpenAI clients)")
    ap.add_argument("--sample-s", type=float, default=10.0, help="RSS sampling period")
    ap.add_argument("--min-life-min", type=float, default=5.0, help="judge the memory of processes alive this long")
    add_cli_options(ap)
    args = ap.parse_args(argv)
    configure_from_args(args)
    spec = load_spec(args.spec)
    build_checkpoint(spec)
    work = Path(args.workdir)
    repo = work / "model_repository"
    write_repository(spec, Path(args.spec).name, repo)
    n = args.replicas
    ports = free_ports(3 * n + 3 + n + 1)
    openai_ports = None if args.no_openai else ports[3 * n + 3 : 4 * n + 3]
    spec = spec.model_copy(update={"openai": spec.openai.model_copy(update={"port": ports[-1]})})
    cluster = Cluster(
        spec,
        repo,
        work,
        replicas=n,
        replica_ports=[tuple(ports[i * 3 : i * 3 + 3]) for i in range(n)],
        lb_ports=tuple(ports[3 * n : 3 * n + 3]),
        openai_ports=openai_ports,
    )
    sampler = MemorySampler(cluster, args.sample_s)
    report = None
    try:
        cluster.start()
        sup = cluster.start_supervisor()
        with sampler:
            report = chaos(cluster, args.minutes, seed=args.seed, sampler=sampler, min_life_s=60 * args.min_life_min)
        sup.stop()
    except KeyboardInterrupt:  # Ctrl-C: stop the cluster, no traceback
        return 130
    finally:
        cluster.stop()
    if report is None:
        return 1
    report["leaks"] = leak_check(cluster, sampler.pgids)
    report["pass"] = report["pass"] and report["leaks"]["clean"]
    report["command"] = "python tools/chaos.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(summary(report))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
