"""The engine stub's side of engine health (see pipeline/watchdog.py for why and what happens).

`StubWatchdog.start(health)` runs the watchdog process and a heartbeat thread that, every second,
writes "." while `health()` is None and "!" (once) as soon as it names a reason; `close()` (the
model's finalize) writes "c" so a normal shutdown is not mistaken for a death. Triton-free."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable

HEARTBEAT_S = 1.0
log = logging.getLogger(__name__)


class StubWatchdog:
    def __init__(self, name: str, *, server_pid: int | None = None, grace_s: float = 5.0, silence_s: float = 10.0):
        self.name = name
        self.server_pid = server_pid if server_pid is not None else os.getppid()  # the stub's parent: tritonserver
        self.grace_s, self.silence_s = grace_s, silence_s
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.reported: str | None = None

    def start(self, health: Callable[[], str | None]) -> StubWatchdog:
        """Start the watchdog process now (so there is no moment when a dead stub goes unnoticed)
        and the heartbeat thread."""
        self._spawn()
        self._thread = threading.Thread(target=self._run, args=(health,), name="llmserve-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _spawn(self) -> None:
        with self._lock:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llmserve.pipeline.watchdog",
                    "--server-pid",
                    str(self.server_pid),
                    "--name",
                    self.name,
                    "--grace-s",
                    str(self.grace_s),
                    "--silence-s",
                    str(self.silence_s),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )

    def _write(self, b: bytes) -> None:
        with self._lock:
            if self.proc is None:
                return
            try:
                self.proc.stdin.write(b)
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass

    def _run(self, health) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            why = health()
            if why is None:
                self._write(b".")
            else:
                self.fatal(why)
                return

    def fatal(self, why: str) -> None:
        """The engine cannot serve any more: the watchdog takes the server down now."""
        if self.reported is None:
            self.reported = why
            log.error("%s: engine unhealthy: %s", self.name, why)
            self._write(b"!")

    def close(self) -> None:
        """Clean shutdown (finalize)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * HEARTBEAT_S)
        if self.proc is None:
            return
        self._write(b"c")
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
