"""Nothing a supervisor started outlives it, even when it is SIGKILLed (what Docker, systemd and
Kubernetes do after their grace period).

The supervisor (llmserve.deploy.serve, llmserve.deploy.cluster) starts this as a child with a pipe
on stdin and writes "+<pgid>" for every process group it starts (each tritonserver with its Python
stubs, HAProxy's master and workers) and "-<pgid>" once it has stopped one. When the pipe reaches
end of file, the supervisor is gone, however it died: every group still registered gets SIGKILL.
A group may name the files it leaves ("+<pgid> <path prefix>": a tritonserver run's shared-memory
regions, /dev/shm/<its run's prefix>_*, which only a clean exit removes); once the group is gone
they are removed too. The prefix is that run's own (deploy/tritonserver.py), so no other server's
regions are touched.

A pipe rather than PR_SET_PDEATHSIG: the death signal fires when the *thread* that started the child
ends, and replicas are restarted from worker threads. SIGINT/SIGTERM/SIGHUP are ignored: a Ctrl-C
or a signal to the whole group reaches the supervisor, which stops everything itself and then
closes the pipe.

    python -m llmserve.deploy.reaper      (started by Reaper.start(); not meant to be run by hand)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GONE_WAIT_S = 5.0  # how long the files of a killed group wait for it to be gone (SIGKILL is asynchronous)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return False
    except ProcessLookupError:
        return True
    except PermissionError:  # not ours any more
        return True


def _remove_files(prefix: str) -> list[str]:
    """Remove the files whose path starts with prefix (a run's /dev/shm/<prefix>_*); their names."""
    path = Path(prefix)
    removed = []
    for f in path.parent.glob(path.name + "*"):
        try:
            f.unlink()
            removed.append(f.name)
        except OSError:
            pass
    return removed


def reap(groups: dict[int, str | None], gone_wait_s: float = GONE_WAIT_S) -> list[str]:
    """SIGKILL every group, then remove the files each named once it is gone (or gone_wait_s has
    passed: a group of zombies nobody reaps yet writes nothing more). Returns the files removed."""
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + gone_wait_s
    removed = []
    for pgid, prefix in groups.items():
        if not prefix:
            continue
        while not _group_gone(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        removed += _remove_files(prefix)
    return removed


def parse(line: str, groups: dict[int, str | None]) -> None:
    """Apply one line of the pipe: "+<pgid>[ <path prefix>]" or "-<pgid>"."""
    head, _, prefix = line.strip().partition(" ")
    if len(head) > 1 and head[0] in "+-" and head[1:].isdigit():
        if head[0] == "+":
            groups[int(head[1:])] = prefix or None
        else:
            groups.pop(int(head[1:]), None)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: dict[int, str | None] = {}
    for line in sys.stdin:
        parse(line, groups)
    reap(groups)
    return 0


class Reaper:
    """The supervisor's side: start once, register every process group started."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def start(self) -> Reaper:
        # Its own session: a terminal's Ctrl-C must not reach it before the supervisor has cleaned up.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llmserve.deploy.reaper"], stdin=subprocess.PIPE, start_new_session=True
        )
        return self

    def _send(self, line: str) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        with self._lock:
            try:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def register(self, pgid: int, files: str | None = None) -> None:
        """files: a path prefix (no spaces) of what the group leaves when killed, removed after it."""
        self._send(f"+{pgid} {files}" if files else f"+{pgid}")

    def unregister(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def close(self) -> None:
        """Normal exit: everything is stopped already; the reaper kills whatever is left and exits."""
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


if __name__ == "__main__":
    sys.exit(main())
