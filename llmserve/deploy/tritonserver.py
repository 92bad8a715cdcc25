"""Find and start a real tritonserver.

In the NGC container `tritonserver` is on PATH. Elsewhere (development, CI) it comes from the
`nvidia-pytriton` wheel, which ships Triton 2.51 with the Python backend and stubs for several
Pythons: we copy its server folder somewhere writable, put the stub for the running Python into
backends/python, and set PATH / LD_LIBRARY_PATH so the stub finds this virtualenv's packages and
the libpython it was linked against (docs/architecture.md, "Facts")."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..spec import ROOT
from .process_group import ProcessGroup, http_ok
from .reaper import Reaper
from .security import ADMIN_KEY_ENV, restricted_flags, scrub_argv

LOCAL_COPY = ROOT / "build" / "tritonserver"
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "llmserve"  # + ["<tag>-"] "<http port>-<random, per run>_" + the Python backend's UUID (one per stub)
# An optional tag in every region name of the servers started under it: the test session sets its
# own (tests/conftest.py), so it can tell the regions its servers left from other sessions' servers.
SHM_TAG_ENV = "LLMSERVE_SHM_TAG"
STALE_AFTER_S = 60.0
# How a start can die that another start on the same machine survives: the Python backend's start-up
# abort when a stub misses its 1-second health round on a starved machine (docs/PERFORMANCE.md,
# "Start-up aborts"). serve.py starts a server that died so again; any other exit before ready is a
# bad set-up, which a retry would only repeat.
TRANSIENT_START_ABORTS = ("boost::interprocess::lock_exception",)


@dataclass
class ServerPaths:
    binary: Path
    backend_dir: Path
    env: dict = field(default_factory=dict)


def _stub_python() -> tuple[str, str, str]:
    """(version, bin directory, libpython directory) of the Python the stubs run: this one, or the
    interpreter named by LLMSERVE_STUB_PYTHON (a virtualenv's bin/python: e.g. a Python 3.12 stub
    on a 3.11 machine, tests/e2e/test_stub_python.py)."""
    other = os.environ.get("LLMSERVE_STUB_PYTHON")
    if not other:
        return (
            f"{sys.version_info.major}.{sys.version_info.minor}",
            str(Path(sys.executable).parent),
            sysconfig.get_config_var("LIBDIR") or "",
        )
    probe = (
        "import sys, sysconfig; print('%d.%d' % sys.version_info[:2]); print(sysconfig.get_config_var('LIBDIR') or '')"
    )
    out = subprocess.run([other, "-c", probe], capture_output=True, text=True, check=True).stdout
    version, libdir = out.split("\n")[:2]
    return version, str(Path(other).absolute().parent), libdir


def _pytriton_copy() -> ServerPaths:
    import importlib.util

    found = importlib.util.find_spec("pytriton")
    if found is None:
        raise FileNotFoundError("no tritonserver on PATH and nvidia-pytriton is not installed (run scripts/setup.sh)")
    src = Path(list(found.submodule_search_locations)[0]) / "tritonserver"
    libs = src.parent.parent / "nvidia_pytriton.libs"
    py, venv_bin, libdir = _stub_python()
    dest = LOCAL_COPY / py
    stub = src / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.exists():
        raise FileNotFoundError(f"nvidia-pytriton has no Python backend stub for Python {py}")
    if not (dest / "backends/python/triton_python_backend_stub").exists():
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src / "bin", dest / "bin")
        shutil.copytree(src / "backends", dest / "backends")
        shutil.copy2(stub, dest / "backends/python/triton_python_backend_stub")
    lib_path = [libdir, str(libs), os.environ.get("LD_LIBRARY_PATH", "")]
    env = {
        # The stub imports packages from the first python on PATH: it must be this virtualenv's.
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in lib_path if p),
    }
    return ServerPaths(dest / "bin" / "tritonserver", dest / "backends", env)


def locate() -> ServerPaths:
    on_path = shutil.which("tritonserver") or (
        "/opt/tritonserver/bin/tritonserver" if Path("/opt/tritonserver/bin/tritonserver").exists() else None
    )
    if on_path and not os.environ.get("LLMSERVE_USE_PYTRITON"):
        return ServerPaths(Path(on_path), Path("/opt/tritonserver/backends"))
    return _pytriton_copy()


def command(
    paths: ServerPaths,
    repository: Path,
    *,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    exit_timeout_s: int,
    instance_tag: str,
    admin_key: str | None = None,
    address: str | None = None,
    extra: list[str] = (),
) -> list[str]:
    """address: bind HTTP, gRPC and metrics there only (127.0.0.1 for replicas behind HAProxy, so
    nothing bypasses the load balancer); None binds every interface, as Triton does by default.
    Restricted APIs and the admin header: deploy/security.py."""
    key = admin_key or os.environ.get(ADMIN_KEY_ENV) or os.urandom(16).hex()
    bind = [f"--http-address={address}", f"--grpc-address={address}", f"--metrics-address={address}"] if address else []
    return [
        str(paths.binary),
        f"--model-repository={repository}",
        f"--backend-directory={paths.backend_dir}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        *bind,
        f"--exit-timeout-secs={exit_timeout_s}",
        "--strict-readiness=true",
        "--model-control-mode=none",
        # Our configs are complete (docker/launch.sh runs with this flag too). With auto-complete on,
        # the Python backend starts one extra stub per model only to ask it for a config, importing
        # its model.py (torch for the engine and preprocessing) before the real stubs do it again:
        # on a loaded 2-core machine that doubled a replica's restart time.
        "--disable-auto-complete-config",
        # Several servers on one host need distinct shared-memory names for their Python stubs.
        f"--backend-config=python,shm-region-prefix-name={instance_tag}_",
        *restricted_flags(key),
        "--log-verbose=0",
        *extra,
    ]


def session_prefix() -> str:
    """What every region of the servers started under this environment starts with: SHM_PREFIX, then
    the tag of $LLMSERVE_SHM_TAG and a dash when it is set. The tag starts with a letter, so no tagged
    name reads like an untagged one (those go on with the port's digits)."""
    tag = os.environ.get(SHM_TAG_ENV, "")
    if tag and not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,31}", tag):
        raise ValueError(f"{SHM_TAG_ENV}={tag!r}: a letter, then up to 31 letters and digits")
    return f"{SHM_PREFIX}{tag}-" if tag else SHM_PREFIX


def free_ports(n: int) -> list[int]:
    """n TCP ports free on loopback right now (for test servers and local clusters)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _mapped_shm() -> set[str]:
    """Names of /dev/shm files some live process maps or holds open (of those we may look at)."""
    used: set[str] = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            for line in (d / "maps").read_text().splitlines():
                i = line.find(str(SHM_DIR) + "/")
                if i >= 0:
                    used.add(Path(line[i:].split(" (deleted)")[0]).name)
            for fd in (d / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(str(SHM_DIR) + "/"):
                    used.add(Path(target).name)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return used


def sweep_stale_regions(prefix: str = SHM_PREFIX, older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Remove Python-backend regions of servers that are gone (`/dev/shm/<prefix>*` that no process
    maps or holds open, older than older_than_s so a region being created right now is left alone):
    what a SIGKILLed supervisor's servers, or anything else killed before its cleanup ran, left
    behind. Regions of live servers (ours or another checkout's) are mapped by their processes and
    stay. Returns the names removed."""
    candidates = [f for f in SHM_DIR.glob(f"{prefix}*") if f.is_file()]
    if not candidates:
        return []
    used, now, removed = _mapped_shm(), time.time(), []
    for f in candidates:
        try:
            if f.name in used or now - f.stat().st_mtime < older_than_s:
                continue
            f.unlink()
            removed.append(f.name)
        except OSError:
            continue
    return removed


def is_ready(http_port: int, host: str = "127.0.0.1", timeout: float = 2.0) -> bool:
    return http_ok(f"http://{host}:{http_port}/v2/health/ready", timeout)


class TritonProcess(ProcessGroup):
    """A tritonserver child process; used by serve, the tests and the cluster scripts."""

    what = "tritonserver"

    def __init__(
        self,
        repository: Path,
        *,
        http_port: int = 8000,
        grpc_port: int = 8001,
        metrics_port: int = 8002,
        exit_timeout_s: int = 60,
        log_path: Path | None = None,
        admin_key: str | None = None,
        address: str | None = None,
        reaper: Reaper | None = None,
        extra: list[str] = (),
    ):
        """reaper: the supervisor's (deploy/reaper.py); the server's process group is registered with
        it, so nothing of this server outlives a supervisor that is SIGKILLed."""
        self.paths = locate()
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.admin_key = admin_key or os.environ.get(ADMIN_KEY_ENV) or os.urandom(16).hex()
        self.repository, self.exit_timeout_s, self.address = Path(repository).resolve(), exit_timeout_s, address
        self.extra = list(extra)
        self.instance_tag = ""
        super().__init__(self._command(), port=http_port, log_path=log_path, reaper=reaper)

    def _command(self) -> list[str]:
        return command(
            self.paths,
            self.repository,
            http_port=self.http_port,
            grpc_port=self.grpc_port,
            metrics_port=self.metrics_port,
            exit_timeout_s=self.exit_timeout_s,
            instance_tag=self.instance_tag or self.tag_prefix(self.http_port),
            admin_key=self.admin_key,
            address=self.address,
            extra=self.extra,
        )

    @staticmethod
    def tag_prefix(http_port: int) -> str:
        """What every shared-memory region of a server on this port starts with (all its runs)."""
        return f"{session_prefix()}{http_port}-"

    def _starting(self) -> None:
        """A new shared-memory prefix for every run (also the server's instance tag): a run never
        shares a name with a region a previous run of this port left behind or whose stubs are still
        dying, and _ended() of one run can only ever remove that run's regions."""
        self.instance_tag = f"{self.tag_prefix(self.http_port)}{os.urandom(4).hex()}"
        self.cmd = self._command()

    def environment(self) -> dict:
        return {**os.environ, **self.paths.env}

    def is_ready(self) -> bool:
        return is_ready(self.http_port)

    def _started(self) -> None:
        self.key_hidden = scrub_argv(self.proc.pid, self.admin_key)

    def leftovers(self) -> str | None:
        """This run's shared-memory regions (the reaper removes them if we are SIGKILLed)."""
        return f"{SHM_DIR / self.instance_tag}_" if self.instance_tag else None

    def _ended(self) -> None:
        """Shared-memory regions of this run's Python stubs, left behind when they were killed (a
        region is removed by tritonserver when it unloads the model, so only on a clean exit).
        Nothing of the group runs any more; the prefix is this run's own (_starting)."""
        if not self.instance_tag:
            return
        for f in SHM_DIR.glob(f"{self.instance_tag}_*"):
            try:
                f.unlink()
            except OSError:
                pass

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 90) -> int | None:
        """SIGTERM: tritonserver drains, then exits. When its exit timeout runs out (idle keep-alive HTTP
        connections count as activity), tritonserver exits without unloading its models and their
        Python stubs outlive it: each one holds a model and its KV cache until killed. They share
        tritonserver's process group, which stop() ends."""
        return super().stop(sig, timeout_s)
