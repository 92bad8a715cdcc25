"""Process helpers for the shutdown and health tests: whole process trees and free port ranges."""

from __future__ import annotations

import os
import random
import signal
import socket
import time

import psutil

from llmserve.deploy.tritonserver import SHM_DIR, TritonProcess


def tree(pid: int) -> set[int]:
    """pid and every descendant (tritonserver's Python stubs, their watchdogs, HAProxy's workers)."""
    try:
        p = psutil.Process(pid)
        return {pid, *(c.pid for c in p.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def living(pids) -> list[str]:
    """The processes among pids that still run (zombies do not count), as 'pid cmdline'."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids, timeout_s: float) -> tuple[list[str], float]:
    """(what still lives after timeout_s, seconds waited)."""
    t0 = time.monotonic()
    while (left := living(pids)) and time.monotonic() - t0 < timeout_s:
        time.sleep(0.1)
    return left, time.monotonic() - t0


def stub_pid(server_pid: int, model: str = "tensorrt_llm") -> int:
    """The Python stub of a model's first instance (its argv names the instance, e.g. tensorrt_llm_0_0)."""
    for c in psutil.Process(server_pid).children():
        cmd = c.cmdline()
        if cmd and cmd[0].endswith("triton_python_backend_stub") and f"{model}_0_0" in cmd:
            return c.pid
    raise LookupError(f"no {model} stub under tritonserver {server_pid}")


def port_free(port: int) -> bool:
    """Nothing listens on it. SO_REUSEADDR as the servers use it: a connection of the stopped server
    in TIME_WAIT (60 s on Linux) would otherwise count as bound, though it does not stop a restart."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_range(n: int) -> int:
    """A base port b with b .. b+n-1 all free (the cluster CLI puts replica i on base + i)."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        # Below Linux's ephemeral range (32768-60999), where free_ports() of other servers and
        # outgoing connections take theirs: a range found free stays free while a cluster starts.
        base = rng.randrange(20000, 32000 - n)
        if all(port_free(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports")


def load_bound(bound_s: float) -> float:
    """A bound on the time some work takes, stretched by how overloaded the machine is: on a 2-core
    machine with a load average of 8, every process gets a quarter of the CPU it would get on its
    own, so 4 x the bound. For asserts on measured durations of CPU work whose own service time
    cannot be measured alongside; a wait that ends at its event needs no such bound, only a generous
    timeout (it costs nothing when the event comes)."""
    return bound_s * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def shutdown_bound(bound_s: float = 10.0) -> float:
    """The idle-shutdown bound (a shutdown is CPU work: Python stubs finalizing, models unloading)."""
    return load_bound(bound_s)


def shm_regions(http_ports) -> list[str]:
    """/dev/shm regions of the servers on these HTTP ports (this session's: tests/conftest.py's tag)."""
    return sorted(f.name for port in http_ports for f in SHM_DIR.glob(TritonProcess.tag_prefix(port) + "*"))


def kill_all(pids, http_ports) -> None:
    """What a fixture ends with: SIGKILL to every process it saw (the launcher's reaper too), then the
    /dev/shm regions of its servers on http_ports, which that reaper can no longer remove."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(pids, 10)
    remove_shm_regions(http_ports)


def remove_shm_regions(http_ports) -> None:
    """What a fixture whose processes it SIGKILLed (reaper included) leaves: its servers' regions."""
    for name in shm_regions(http_ports):
        (SHM_DIR / name).unlink(missing_ok=True)
