"""N tritonservers behind HAProxy on one host, in the foreground; and a rolling restart without errors.

    python -m llmserve.deploy.cluster --replicas 3 [--spec specs/default.yaml]      (scripts/serve.sh --replicas 3)
    python -m llmserve.deploy.cluster rolling-restart [--spec ...]                  (from another shell)

The cluster process starts the replicas on ha.base_*_port + i (bound to ha.host, 127.0.0.1 by
default, so nothing bypasses the load balancer), renders haproxy.cfg from the spec, runs
`haproxy -W -db` with it and supervises: a replica that exits (a crash, its engine stub's watchdog
taking it down, a rolling restart) is started again once what was left of its process group is
killed, with a back-off when it keeps dying (HAProxy's checks keep traffic away until it is ready).
Every process group it starts is registered with a reaper (deploy/reaper.py), so a SIGKILLed
cluster process leaves nothing behind. On SIGTERM/SIGINT it closes HAProxy's frontends first, then
stops the OpenAI frontends (their requests finish while the servers still serve), then HAProxy once
its sessions are done (its pooled idle connections would otherwise hold Triton's drain), then every
replica at once: idle, that takes seconds; busy, in-flight work finishes within
serving.exit_timeout_s (Cluster.stop).

It writes build/haproxy/cluster.json (replica pids and ports, the runtime-API socket) for
`rolling-restart`, which drains and restarts one server at a time through HAProxy's runtime API
(deploy/haproxy_runtime.py): SIGTERM to the replica, the cluster's supervisor starts it again.

`config` prints the haproxy.cfg the cluster would run, and builds nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..checkpoint import build_checkpoint
from ..logs import add_cli_options, configure_from_args
from ..spec import DEFAULT_SPEC, ROOT, Spec, SpecError, load_spec
from .frontend import Frontends, set_drained, settle_s
from .haproxy import GRPC_BACKEND, HTTP_BACKEND, OPENAI_BACKEND, Backend, check_config, render
from .haproxy_runtime import ClientDrain, RuntimeAPI, rolling_restart
from .reaper import Reaper
from .serve import prepare_repository
from .supervisor import START_TIMEOUT, Supervisor, SupervisorThread
from .tritonserver import TRANSIENT_START_ABORTS, TritonProcess, is_ready, sweep_stale_regions

logger = logging.getLogger(__name__)


class Replica:
    """One tritonserver of the cluster, restartable with the same ports."""

    def __init__(
        self,
        index: int,
        repository: Path,
        ports: tuple[int, int, int],
        *,
        exit_timeout_s: int,
        log_dir: Path,
        admin_key: str | None = None,
        extra: list[str] = (),
        address: str | None = None,
        reaper: Reaper | None = None,
        start_timeout_s: float | None = None,
    ):
        """start_timeout_s: restart()'s deadline for each start to become ready (None: the whole
        restart's time)."""
        self.index, self.name = index, f"triton{index}"
        self.start_timeout_s = start_timeout_s
        self.repository, self.ports = repository, ports
        self.kw = dict(
            exit_timeout_s=exit_timeout_s,
            admin_key=admin_key,
            extra=list(extra),
            log_path=log_dir / f"{self.name}.log",
            address=address,
            reaper=reaper,
        )
        self.process: TritonProcess | None = None
        self.pids: list[int] = []  # of every run: each leads its process group (tools/chaos.py's leak check)
        self.started_at = 0.0  # time.monotonic() of the last start (the supervisor's back-off)
        self.lock = threading.RLock()  # held by restart(); the supervisor skips a replica it cannot take
        # restart() reports a start that died before it was ready here (the cluster: its supervisor's count)
        self.on_startup_failure = None

    def start(self) -> Replica:
        """Start (again): first end whatever is left of the previous server's process group (stubs
        that outlived it hold the model, the KV cache and the shared-memory prefix)."""
        if self.process is not None and self.process.proc is not None:
            self.process.kill()
        h, g, m = self.ports
        self.process = TritonProcess(self.repository, http_port=h, grpc_port=g, metrics_port=m, **self.kw).start()
        self.pids.append(self.process.proc.pid)
        self.started_at = time.monotonic()
        return self

    def wait_ready(self, timeout_s: float = 600) -> None:
        self.process.wait_ready(timeout_s)

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        return self.process.stop(sig) if self.process else None

    def kill(self) -> None:
        """kill -9 the server and its Python-backend stubs (its own process group); after an exit, the
        stubs that outlived it."""
        if self.process is not None:
            self.process.kill()

    def restart(self, timeout_s: float = 600, attempts: int = 3) -> None:
        """Stop, start, wait until ready. A start that dies before it is ready, or is neither ready nor
        dead after start_timeout_s (killed then), is reported to on_startup_failure and started again:
        up to `attempts` times, or, for the Python backend's start-up abort on a starved machine
        (TRANSIENT_START_ABORTS, docs/PERFORMANCE.md "Start-up aborts"), for as long as timeout_s
        allows."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            self.stop()
            failures = 0
            while True:
                self.start()
                left = max(1.0, deadline - time.monotonic())
                this_start = min(left, self.start_timeout_s or left)
                try:
                    self.wait_ready(this_start)
                    return
                except (RuntimeError, TimeoutError) as e:  # exited before it was ready, or hung
                    if isinstance(e, TimeoutError) and this_start >= left:
                        raise  # the whole restart's time is up
                    self.process.kill()  # what outlived it, or the hung start itself
                    cause = self.exit_cause() if isinstance(e, RuntimeError) else START_TIMEOUT
                    if self.on_startup_failure is not None:
                        detail = f"not ready {this_start:.0f} s after its start" if cause == START_TIMEOUT else ""
                        self.on_startup_failure(self.name, self.returncode, cause, detail)
                    failures += cause not in TRANSIENT_START_ABORTS
                    pause = min(8.0, 2.0 ** min(failures, 3))
                    if failures >= attempts or time.monotonic() + pause >= deadline:
                        raise
                    time.sleep(pause)

    def is_ready(self) -> bool:
        return self.process is not None and self.process.is_ready()

    def exit_cause(self) -> str | None:
        return self.process.exit_cause() if self.process else None

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    @property
    def http_port(self) -> int:
        return self.ports[0]

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process else None

    @property
    def shm_prefix(self) -> str:
        """The shared-memory prefix every run of this replica's server starts with."""
        return TritonProcess.tag_prefix(self.ports[0])


class Cluster:
    """Replicas + HAProxy. Tests pass their own (free) ports; the CLI uses the spec's."""

    def __init__(
        self,
        spec: Spec,
        repository: Path,
        workdir: Path,
        *,
        replicas: int | None = None,
        replica_ports: list[tuple[int, int, int]] | None = None,
        lb_ports: tuple[int, int, int] | None = None,
        admin_key: str | None = None,
        extra: dict[int, list[str]] | None = None,
        haproxy: str = "haproxy",
        openai_ports: list[int] | None = None,
    ):
        self.spec, self.workdir = spec, Path(workdir).resolve()  # HAProxy needs the socket path absolute
        self.workdir.mkdir(parents=True, exist_ok=True)
        n = replicas or spec.ha.replicas
        ports = replica_ports or [spec.ha.replica_ports(i) for i in range(n)]
        self.reaper = Reaper()
        self.replicas = [
            Replica(
                i,
                repository,
                ports[i],
                exit_timeout_s=spec.serving.exit_timeout_s,
                log_dir=self.workdir,
                admin_key=admin_key,
                extra=(extra or {}).get(i, []),
                address=spec.ha.host,
                reaper=self.reaper,
                start_timeout_s=spec.serving.start_timeout_s,
            )
            for i in range(n)
        ]
        # OpenAI frontends on openai_ports (one per port; none when None), each sending to every
        # replica, behind HAProxy's `openai` frontend on openai.port.
        self.frontends = (
            Frontends(
                spec,
                self.workdir,
                [f"{spec.ha.host}:{r.ports[1]}" for r in self.replicas],
                openai_ports,
                reaper=self.reaper,
                triton_http=[f"{spec.ha.host}:{r.ports[0]}" for r in self.replicas],
            )
            if openai_ports is not None
            else None
        )
        # One supervisor for replicas and frontends: each is started again when it exits (back-off
        # when it keeps dying); a replica being restarted by a rolling restart holds its lock.
        # A start neither ready nor dead after serving.start_timeout_s is killed and started again.
        self.supervisor = Supervisor(start_timeout_s=spec.serving.start_timeout_s)
        for r in self.replicas:
            self.supervisor.add(r.name, r, lock=r.lock)
            r.on_startup_failure = self.supervisor.startup_failures.record
        for name, f in zip(self.frontends.names(), self.frontends.processes) if self.frontends else ():
            self.supervisor.add(name, f)
        ha = spec.ha
        self.http_port, self.grpc_port, self.stats_port = lb_ports or (ha.http_port, ha.grpc_port, ha.stats_port)
        self.socket = self.workdir / "haproxy.sock"
        self.cfg_path = self.workdir / "haproxy.cfg"
        self.haproxy_bin = haproxy
        self.haproxy: subprocess.Popen | None = None
        self.api = RuntimeAPI(self.socket)

    def by_name(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    def render(self) -> str:
        ha = self.spec.ha.model_copy(
            update={"http_port": self.http_port, "grpc_port": self.grpc_port, "stats_port": self.stats_port}
        )
        spec = self.spec.model_copy(update={"ha": ha})
        backends = [Backend(r.name, self.spec.ha.host, r.ports[0], r.ports[1]) for r in self.replicas]
        return render(
            spec,
            backends,
            label="spec " + self.spec.name,
            stats_socket=str(self.socket),
            openai=self.frontends.backends() if self.frontends else (),
        )

    def start_replicas(self, timeout_s: float = 600) -> None:
        for r in self.replicas:
            r.start()
        with ThreadPoolExecutor(len(self.replicas)) as ex:
            list(ex.map(lambda r: r.wait_ready(timeout_s), self.replicas))

    def start_haproxy(self) -> None:
        self.cfg_path.write_text(self.render())
        check_config(self.cfg_path, self.haproxy_bin)
        self.socket.unlink(missing_ok=True)
        out = open(self.workdir / "haproxy.log", "ab")
        self.haproxy = subprocess.Popen(
            [self.haproxy_bin, "-W", "-db", "-f", str(self.cfg_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        self.reaper.register(self.haproxy.pid)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.haproxy.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.haproxy.returncode}; see {self.workdir / 'haproxy.log'}")
            try:
                self.api.stat()
                return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError("haproxy runtime API did not come up")

    def wait_all_up(self, timeout_s: float = 60) -> None:
        for r in self.replicas:
            if r.alive():
                self.api.wait_status(r.name, "UP", timeout_s)

    def start(self) -> Cluster:
        removed = sweep_stale_regions()
        if removed:
            logger.info("removed %d shared-memory regions of servers that are gone: %s", len(removed), removed[:5])
        if self.reaper.proc is None:
            self.reaper.start()
        self.start_replicas()
        if self.frontends:
            self.frontends.start()
        self.start_haproxy()
        self.wait_all_up()
        if self.frontends:
            self.frontends.wait_ready()
            # HAProxy marked them DOWN while they started (checks fail until a frontend sees a ready
            # Triton server): until it has seen `rise` good checks, the OpenAI port answers 503.
            for name in self.frontends.names():
                self.api.wait_status(name, "UP", 60, backend=OPENAI_BACKEND)
        return self

    def client_frontends(self) -> list[str]:
        """HAProxy's frontends that clients connect to (not the relays, which its backend uses)."""
        return ["stats", HTTP_BACKEND, GRPC_BACKEND] + ([OPENAI_BACKEND] if self.frontends else [])

    def stop(self) -> None:
        """In this order, so that no request reaches a tritonserver that is stopping (one that reaches
        its `tensorrt_llm` then can keep the model loaded until the exit timeout, docs/cancellation.md
        section 4):

        1. HAProxy's client-facing frontends are disabled (runtime API): no new client request gets in,
           the sessions in flight go on;
        2. every OpenAI frontend (SIGTERM), waited for: each finishes its requests in flight and sends
           the stops of its hung-up streams while every Triton still serves;
        3. once HAProxy has no request in flight (at most serving.exit_timeout_s), HAProxy gets
           SIGTERM: its idle pooled connections, which would otherwise keep each Triton's HTTP drain
           waiting up to its exit timeout, close with it. Not a soft stop (SIGUSR1): Debian 12's
           HAProxy 2.6.12 often segfaults at the end of one under load (docs/ha.md "HAProxy version");
        4. every replica at once (SIGTERM: each finishes whatever is still in flight within
           serving.exit_timeout_s); then whatever is left."""
        self.supervisor.halt()
        haproxy_up = self.haproxy is not None and self.haproxy.poll() is None
        if haproxy_up:
            try:
                for name in self.client_frontends():
                    self.api.disable_frontend(name)
            except (OSError, RuntimeError) as e:  # its runtime API is gone: a hard stop is all that is left
                logger.warning("could not close HAProxy's frontends (%s): stopping it now", e)
                self.haproxy.send_signal(signal.SIGTERM)
                haproxy_up = False
        if self.frontends:
            t0 = time.monotonic()
            self.frontends.stop()
            logger.info("OpenAI frontends stopped in %.1f s", time.monotonic() - t0)
        if haproxy_up:
            self._haproxy_after_sessions(self.spec.serving.exit_timeout_s)
        with ThreadPoolExecutor(len(self.replicas)) as ex:
            list(ex.map(lambda r: r.stop(), self.replicas))
        if self.haproxy:
            try:
                self.haproxy.wait(self.spec.serving.exit_timeout_s + 5)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(self.haproxy.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.haproxy.wait()
            self.reaper.unregister(self.haproxy.pid)
        self.reaper.close()

    def _haproxy_after_sessions(self, timeout_s: float) -> None:
        """SIGTERM to HAProxy once it has no request in flight (or after timeout_s: Triton's own drain
        would end those then anyway)."""
        backends = [HTTP_BACKEND, GRPC_BACKEND] + ([OPENAI_BACKEND] if self.frontends else [])
        t0, left = time.monotonic(), None
        while time.monotonic() - t0 < timeout_s and self.haproxy.poll() is None:
            try:
                left = self.api.in_flight(backends)
            except OSError:
                break
            if left == 0:
                break
            time.sleep(0.1)
        logger.info(
            "HAProxy: %s after %.1f s; stopping it and the tritonservers",
            "no request in flight" if left == 0 else f"{left} requests still in flight",
            time.monotonic() - t0,
        )
        if self.haproxy.poll() is None:
            self.haproxy.send_signal(signal.SIGTERM)

    def rolling_restart(self) -> list[dict]:
        drain = self.spec.ha.drain_timeout_s or self.spec.serving.exit_timeout_s
        return rolling_restart(
            self.api,
            [r.name for r in self.replicas],
            lambda n: self.by_name(n).restart(),
            drain_timeout_s=drain,
            clients=self.frontend_drain(),
        )

    def frontend_drain(self) -> ClientDrain | None:
        """The OpenAI frontends send to every replica directly, past HAProxy's drain: a rolling
        restart tells them to send a replica nothing new before it stops it (docs/cancellation.md
        section 4)."""
        if not self.frontends:
            return None
        grpc = {r.name: f"{self.spec.ha.host}:{r.ports[1]}" for r in self.replicas}
        return ClientDrain(
            lambda n: self.frontends.drain(grpc[n]), lambda n: self.frontends.undrain(grpc[n]), self.frontends.settle_s
        )

    # --- state for `rolling-restart` from another process -------------------------------------
    @property
    def state_path(self) -> Path:
        return self.workdir / "cluster.json"

    def write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "socket": str(self.socket),
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "stats_port": self.stats_port,
            "replicas": {
                r.name: {
                    "pid": r.pid if r.alive() else None,
                    "http_port": r.http_port,
                    "grpc": f"{self.spec.ha.host}:{r.ports[1]}",
                }
                for r in self.replicas
            },
            # where `rolling-restart` tells the OpenAI frontends which replica to leave alone (none: no frontends)
            "openai_drained_file": str(self.frontends.drained_file) if self.frontends else None,
            # servers (and frontends) that exited before they were ready, by cause (deploy/supervisor.py)
            "startup_failures": self.supervisor.startup_failures.as_dict(),
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_path)

    def haproxy_alive(self) -> bool:
        if self.haproxy is not None and self.haproxy.poll() is not None:
            logger.error("haproxy exited (%s); stopping", self.haproxy.returncode)
            return False
        return True

    def supervise(self, stop: threading.Event) -> None:
        """Start replicas and frontends that exited (crash, engine watchdog, rolling restart) again
        (deploy/supervisor.py), until `stop` is set or HAProxy exits."""
        self.supervisor.run(stop, check=self.haproxy_alive, on_restart=lambda _: self.write_state())

    def start_supervisor(self) -> SupervisorThread:
        """supervise() in a thread (tests, tools/chaos.py); `.stop()` ends it."""
        return self.supervisor.start_thread(check=self.haproxy_alive, on_restart=lambda _: self.write_state())


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def rolling_restart_cli(spec: Spec, workdir: Path, drain_timeout_s: float, ready_timeout_s: float = 600) -> int:
    """Restart the replicas of a running `llmserve.deploy.cluster` (its supervisor starts each again)."""
    state_path = workdir / "cluster.json"
    if not state_path.exists():
        print(f"error: {state_path} not found: is `python -m llmserve.deploy.cluster` running?", file=sys.stderr)
        return 2
    state = json.loads(state_path.read_text())
    api = RuntimeAPI(state["socket"])

    def restart(name: str) -> None:
        pid = state["replicas"][name]["pid"]
        port = state["replicas"][name]["http_port"]
        if pid:
            os.kill(pid, signal.SIGTERM)
            while _pid_alive(pid):
                time.sleep(0.1)
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            new = json.loads(state_path.read_text())["replicas"][name]["pid"]
            if new and new != pid and is_ready(port):
                return
            time.sleep(0.5)
        raise TimeoutError(f"{name} not ready again after {ready_timeout_s} s")

    clients = None
    if state.get("openai_drained_file"):
        drained, grpc = Path(state["openai_drained_file"]), {n: r["grpc"] for n, r in state["replicas"].items()}
        clients = ClientDrain(
            lambda n: set_drained(drained, grpc[n], True),
            lambda n: set_drained(drained, grpc[n], False),
            settle_s(spec),
        )
    report = rolling_restart(api, list(state["replicas"]), restart, drain_timeout_s=drain_timeout_s, clients=clients)
    print("rolling restart done: " + json.dumps(report), flush=True)
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv.pop(0) if argv and argv[0] in ("rolling-restart", "config") else "serve"
    ap = argparse.ArgumentParser(
        prog=f"python -m llmserve.deploy.cluster {sub}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--spec", default=str(DEFAULT_SPEC))
    ap.add_argument("--replicas", type=int, help="default: ha.replicas of the spec")
    ap.add_argument("--repository", help="model repository (default: as serve.py)")
    ap.add_argument(
        "--workdir", default=str(ROOT / "build" / "haproxy"), help="haproxy.cfg, runtime socket, logs, cluster.json"
    )
    add_cli_options(ap)
    args = ap.parse_args(argv)
    configure_from_args(args)
    try:
        spec = load_spec(args.spec)
        configure_from_args(args, spec)  # the spec's logging: section, unless the flags say otherwise
        if args.replicas:  # revalidate the port layout for this many replicas
            spec = spec.model_copy(
                update={"ha": type(spec.ha).model_validate({**spec.ha.model_dump(), "replicas": args.replicas})}
            )
    except (SpecError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir)
    if sub == "rolling-restart":
        return rolling_restart_cli(spec, workdir, spec.ha.drain_timeout_s or spec.serving.exit_timeout_s)
    o = spec.openai
    openai_ports = [o.base_port + i for i in range(spec.ha.replicas)] if o.enabled else None
    if sub == "config":  # the rendered haproxy.cfg needs ports and names only: nothing to build
        print(
            Cluster(spec, Path(args.repository or "model_repository"), workdir, openai_ports=openai_ports).render(),
            end="",
        )
        return 0
    try:
        build_checkpoint(spec)
        repo = prepare_repository(Path(args.spec), spec, args.repository)
    except (SpecError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cluster = Cluster(spec, repo, workdir, openai_ports=openai_ports)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    logger.info("starting %d tritonservers (HTTP :%d+i) with %s", len(cluster.replicas), spec.ha.base_http_port, repo)
    try:
        cluster.start()
        cluster.write_state()
        ha = spec.ha
        print(
            f"[cluster] ready: HAProxy HTTP :{cluster.http_port}, gRPC :{cluster.grpc_port}, stats "
            f"http://localhost:{cluster.stats_port}/ (Prometheus /metrics); runtime API {cluster.socket}\n"
            + (
                f"  OpenAI API: http://localhost:{spec.openai.port}/v1 ({len(cluster.replicas)} frontends behind "
                f"HAProxy)\n"
                if cluster.frontends
                else ""
            )
            + f"  curl -s localhost:{cluster.http_port}/v2/models/ensemble/generate -d "
            f'\'{{"text_input": "What is the capital of France?", "max_tokens": 32}}\'\n'
            f"  python -m llmserve.deploy.cluster rolling-restart   # restart every server without errors\n"
            f"  checks every {ha.check.interval_ms} ms, fall {ha.check.fall}, rise {ha.check.rise}",
            flush=True,
        )
        cluster.supervise(stop)
    except (RuntimeError, TimeoutError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        logger.info("stopping (servers drain in-flight requests first)")
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
