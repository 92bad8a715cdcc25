"""Find and start a real tritonserver.

In the NGC container `tritonserver` is on PATH. Elsewhere (development, CI) it comes from the
`nvidia-pytriton` wheel, which ships Triton 2.51 with the Python backend and stubs for several
Pythons: we copy its server folder somewhere writable, put the stub for the running Python into
backends/python, and set PATH / LD_LIBRARY_PATH so the stub finds this virtualenv's packages and
the libpython it was linked against (docs/architecture.md, "Facts")."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from ..spec import ROOT
from .process_group import ProcessGroup, http_ok
from .reaper import Reaper
from .security import ADMIN_KEY_ENV, restricted_flags, scrub_argv

LOCAL_COPY = ROOT / "build" / "tritonserver"


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


def free_ports(n: int) -> list[int]:
    """n TCP ports free on loopback right now (for test servers and local clusters)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


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
        self.instance_tag = f"llmserve{http_port}"  # also the stubs' shared-memory prefix
        cmd = command(
            self.paths,
            Path(repository).resolve(),
            http_port=http_port,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
            exit_timeout_s=exit_timeout_s,
            instance_tag=self.instance_tag,
            admin_key=self.admin_key,
            address=address,
            extra=list(extra),
        )
        super().__init__(cmd, port=http_port, log_path=log_path, reaper=reaper)

    def environment(self) -> dict:
        return {**os.environ, **self.paths.env}

    def is_ready(self) -> bool:
        return is_ready(self.http_port)

    def _started(self) -> None:
        self.key_hidden = scrub_argv(self.proc.pid, self.admin_key)

    def _ended(self) -> None:
        """Shared-memory regions of this server's Python stubs, left behind when they were killed
        (a stub removes its own only on a clean exit). Nothing of the group runs any more; the prefix
        is this server's own (its HTTP port)."""
        for f in Path("/dev/shm").glob(f"{self.instance_tag}_*"):
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
