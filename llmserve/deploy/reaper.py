"""Nothing a supervisor started outlives it, even when it is SIGKILLed (what Docker, systemd and
Kubernetes do after their grace period).

The supervisor (llmserve.deploy.serve, llmserve.deploy.cluster) starts this as a child with a pipe
on stdin and writes "+<pgid>" for every process group it starts (each tritonserver with its Python
stubs, HAProxy's master and workers) and "-<pgid>" once it has stopped one. When the pipe reaches
end of file, the supervisor is gone, however it died: every group still registered gets SIGKILL.

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


def _kill_groups(groups: set[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin:
        line = line.strip()
        if len(line) > 1 and line[0] in "+-" and line[1:].isdigit():
            (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
    _kill_groups(groups)
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

    def register(self, pgid: int) -> None:
        self._send(f"+{pgid}")

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
