"""The engine stub's watchdog: engine health becomes server readiness on Triton 2.51.

Triton 2.51 keeps a server READY when a Python stub dies (SIGKILL, segfault) or its engine can no
longer serve (a step that keeps failing, a lost device): readiness only looks at model lifecycle
states, and the Python backend never restarts a decoupled model's stub. So the tensorrt_llm stub
starts this small process with a pipe on stdin and writes to it:

    "."  every second while its engine is healthy (a heartbeat)
    "!"  the engine cannot serve any more (act now)
    "c"  clean shutdown (finalize): exit quietly

It acts when it reads "!", when the pipe ends without "c" (the stub died, however), or when no
heartbeat came for `silence_s` (the stub hangs, e.g. holding the GIL). It sends tritonserver SIGTERM
(Triton stops accepting connections at once, so /v2/health/ready fails and load balancers take the
server out within their check interval) and then SIGKILLs tritonserver's process group (its stubs,
this process included): at once when the engine stub is dead or hung (nothing in flight can finish,
and a closed connection is what a load balancer retries elsewhere, where an answer like "Stub process
is not healthy" is not), after `grace_s` when the engine reported it cannot serve (its stub still
answers, so errors in flight go out). Where tritonserver is a container's PID 1, SIGKILL from inside
is ignored and SIGTERM does the work, bounded by --exit-timeout-secs. Whoever supervises the server
starts it again: the cluster supervisor, serve.py, or Kubernetes (the container exits).

    python -m llmserve.pipeline.watchdog --server-pid PID --name tensorrt_llm_0 [--grace-s 5 --silence-s 10]
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import sys
import time

from ..logs import configure

REPORTED = "the engine reported it cannot serve"

# Run as `python -m`: __name__ is "__main__", so the logger is named for the module.
log = logging.getLogger("llmserve.pipeline.watchdog")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def take_down(server_pid: int, grace_s: float, name: str) -> None:
    if alive(server_pid):
        os.kill(server_pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    try:
        if os.getpgid(0) == server_pid:  # the server leads its own group (our launchers): its stubs too
            os.killpg(server_pid, signal.SIGKILL)
        elif alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def watch(fd: int, *, server_pid: int, name: str, grace_s: float, silence_s: float) -> str:
    """Returns why it acted ("" for a clean shutdown)."""
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                return "the engine stub exited without a clean shutdown"
            if b"c" in data:
                return ""
            if b"!" in data:
                return REPORTED
            last = time.monotonic()
        elif time.monotonic() - last > silence_s:
            return f"no heartbeat from the engine stub for {silence_s:g} s"
        if not alive(server_pid):
            return ""  # tritonserver is gone already; nothing to take down


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--name", default="tensorrt_llm")
    ap.add_argument("--grace-s", type=float, default=5.0)
    ap.add_argument("--silence-s", type=float, default=10.0)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the server's business
    configure("info")  # its own process: stderr, which tritonserver's log gets (the stub's is inherited)
    why = watch(
        sys.stdin.fileno(), server_pid=args.server_pid, name=args.name, grace_s=args.grace_s, silence_s=args.silence_s
    )
    if why:
        log.error("%s: %s: taking tritonserver %d down so it is restarted", args.name, why, args.server_pid)
        take_down(args.server_pid, args.grace_s if why == REPORTED else 0.0, args.name)
    elif alive(args.server_pid) is False:
        # tritonserver ended without unloading (exit timeout): end stubs it left behind.
        try:
            if os.getpgid(0) == args.server_pid:
                os.killpg(args.server_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
