"""Chaos soak: mixed streaming / non-streaming load through HAProxy, from plain clients and from the
failover client (llmserve/client/failover.py), for --minutes, while at random one of these happens,
one at a time, each followed by a wait until every replica is back UP in HAProxy:

    kill-server   kill -9 of a whole replica (tritonserver and its stubs); the supervisor restarts it
    kill-engine   kill -9 of a replica's tensorrt_llm Python stub; its watchdog takes the server down
                  (readiness refused at once), the supervisor restarts it
    rolling       a rolling restart of every replica (drain, SIGTERM, restart, ready), no errors expected

Reports, per client kind, ok / failed (never started, or an error) / cut (a stream broken after its
first token) / resumed / retried, and per event its kind, victim and recovery time (event to UP in
HAProxy again). Goal: 0 failed anywhere, 0 cut for the failover client; plain streams in flight on a
killed replica are cut by nature (no proxy can resume a started response) and are counted apart.
Exit status 0 when the goal is met.

    python tools/chaos.py --minutes 20                    # its own 3-replica tiny cluster on free ports (or llmserve-chaos)
    python tools/chaos.py --minutes 2 --report build/chaos.json

tests/ha/test_engine_health.py runs `chaos` for 2 minutes on the HA tests' cluster.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

import psutil

from ..checkpoint import build_checkpoint
from ..deploy.cluster import Cluster
from ..deploy.tritonserver import free_ports
from ..logs import add_cli_options, configure_from_args
from ..repository.writer import write_repository
from ..spec import ROOT, load_spec
from .mixed_load import MixedLoad  # the HA tests' load too: one definition of "failed" and "cut"

logger = logging.getLogger(__name__)

EVENTS = ("kill-server", "kill-engine", "rolling")


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
) -> dict:
    """Run the load and the events on a started cluster (its supervisor must be running)."""
    rng = random.Random(seed)
    http, grpc = f"localhost:{cluster.http_port}", f"localhost:{cluster.grpc_port}"
    done = []
    deadline = time.monotonic() + minutes * 60
    with MixedLoad(http, grpc) as load:
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
    counts = {k: v.as_dict() for k, v in load.totals().items()}
    failed = sum(c["failed"] for c in counts.values())
    failover_cut = sum(c["cut"] for k, c in counts.items() if k.startswith("failover"))
    return {
        "minutes": minutes,
        "elapsed_s": round(load.elapsed, 1),
        "hung_clients": load.hung,
        "events": done,
        "counts": counts,
        "failed": failed,
        "failover_cut": failover_cut,
        "plain_streams_cut": counts.get("plain_stream", {}).get("cut", 0),
        "requests": sum(c["ok"] + c["failed"] + c["cut"] for c in counts.values()),
        "pass": failed == 0 and failover_cut == 0 and load.hung == 0 and not any("error" in e for e in done),
    }


def summary(r: dict) -> str:
    lines = [
        f"chaos soak: {r['elapsed_s']} s, {r['requests']} requests, {len(r['events'])} events; "
        f"failed {r['failed']}, failover streams cut {r['failover_cut']}, plain streams cut "
        f"{r['plain_streams_cut']} (not resumable by a proxy), hung clients {r['hung_clients']}: "
        f"{'PASS' if r['pass'] else 'FAIL'}"
    ]
    lines += [f"  {k:16s} {v}" for k, v in r["counts"].items()]
    lines += [f"  event {e}" for e in r["events"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--spec", default=str(ROOT / "specs" / "tiny.yaml"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=str(ROOT / "build" / "chaos"))
    ap.add_argument("--report", help="write the JSON report here")
    add_cli_options(ap)
    args = ap.parse_args(argv)
    configure_from_args(args)
    spec = load_spec(args.spec)
    build_checkpoint(spec)
    work = Path(args.workdir)
    repo = work / "model_repository"
    write_repository(spec, Path(args.spec).name, repo)
    ports = free_ports(3 * args.replicas + 3)
    cluster = Cluster(
        spec,
        repo,
        work,
        replicas=args.replicas,
        replica_ports=[tuple(ports[i * 3 : i * 3 + 3]) for i in range(args.replicas)],
        lb_ports=tuple(ports[-3:]),
    )
    try:
        cluster.start()
        sup = cluster.start_supervisor()
        report = chaos(cluster, args.minutes, seed=args.seed)
        sup.stop()
    except KeyboardInterrupt:  # Ctrl-C: stop the cluster, no traceback
        return 130
    finally:
        cluster.stop()
    print(summary(report))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
