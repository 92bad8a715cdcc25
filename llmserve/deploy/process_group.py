"""A child process in a session of its own, with readiness and a stop that leaves nothing behind: what
TritonProcess (deploy/tritonserver.py) and FrontendProcess (deploy/frontend.py) have in common.

Its own session makes the child's process group everything it forks (tritonserver's Python stubs and
their watchdogs), so one killpg ends all of it; a terminal's Ctrl-C reaches only the supervisor, which
stops its children in order. The group is registered with the supervisor's reaper (deploy/reaper.py),
so it goes too when the supervisor is SIGKILLed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from .reaper import Reaper


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True if `url` answers 200 (the readiness probe of every process we start); any failure is False."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


class ProcessGroup:
    """Subclasses give `what` (for messages), `port` and `is_ready()`; the rest is shared."""

    what = "process"
    ready_poll_s = 0.5
    stop_timeout_s = 90.0

    def __init__(self, cmd: list[str], *, port: int, log_path: Path | None = None, reaper: Reaper | None = None):
        self.cmd, self.port, self.log_path, self.reaper = cmd, port, log_path, reaper
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0  # time.monotonic() of the last start: the supervisor's back-off reads it
        self.log_offset = 0  # where this run's output starts in log_path (exit_cause reads from there)
        self._log = None

    # --- what subclasses may change ----------------------------------------------------------------
    def environment(self) -> dict | None:
        """The child's environment, read at each start (None: ours)."""
        return None

    def is_ready(self) -> bool:
        raise NotImplementedError

    def _starting(self) -> None:
        """Called before each start, once what was left of the previous run is gone."""

    def _started(self) -> None:
        """Called right after each start."""

    def _ended(self) -> None:
        """Called once nothing of the group runs any more."""

    def leftovers(self) -> str | None:
        """A path prefix of the files this run leaves when it is killed, which _ended() removes; the
        reaper removes them when the supervisor dies before it could (None: nothing)."""
        return None

    # --- shared ------------------------------------------------------------------------------------
    def start(self):
        """Start (again): first end whatever is left of a previous run's process group."""
        if self.proc is not None:
            self._end_group()
        self._starting()
        self.log_offset = self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0
        self._log = open(self.log_path, "ab") if self.log_path else None
        self.proc = subprocess.Popen(
            self.cmd,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log else None,
            start_new_session=True,
        )
        self.started_at = time.monotonic()
        if self.reaper:
            self.reaper.register(self.proc.pid, self.leftovers())
        self._started()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def exit_cause(self) -> str | None:
        """What an uncaught C++ exception that ended this run was (`terminate called after throwing an
        instance of 'X'` in its log since the last start), else None."""
        if not self.log_path or not self.log_path.exists():
            return None
        with open(self.log_path, "rb") as f:
            f.seek(self.log_offset)
            text = f.read()[-(1 << 20) :].decode("utf-8", "replace")
        m = re.findall(r"terminate called after throwing an instance of '([^']+)'", text)
        return m[-1] if m else None

    def wait_ready(self, timeout_s: float = 300) -> None:
        """Until is_ready(); RuntimeError if the process exits first, TimeoutError after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.what} exited with {self.proc.returncode} before it was ready"
                    + (f"; log: {self.log_path}" if self.log_path else "")
                )
            if self.is_ready():
                return
            time.sleep(self.ready_poll_s)
        raise TimeoutError(f"{self.what} not ready on :{self.port} after {timeout_s} s")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float | None = None) -> int | None:
        """Signal the process (SIGTERM: finish in-flight work, then exit), wait up to timeout_s, then end
        what is left of its process group. Returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                pass
        return self._end_group()

    def kill(self) -> None:
        """kill -9 the process and everything in its process group; for one that has exited already, this
        ends what outlived it (a dead tritonserver's stubs still hold the model and its KV cache)."""
        if self.proc is not None:
            self._end_group()

    def _end_group(self) -> int | None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rc = self.proc.wait()
        self._ended()
        if self.reaper:
            self.reaper.unregister(self.proc.pid)
        if self._log:
            self._log.close()
            self._log = None
        return rc

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
