"""ProcessGroup (deploy/process_group.py), the start/ready/stop shared by tritonserver and the
frontends, on a shell that forks a grandchild (as tritonserver forks its Python stubs)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from llmserve.deploy.process_group import ProcessGroup


class Shell(ProcessGroup):
    what = "the test shell"
    ready_poll_s = 0.01

    def __init__(self, script: str, tmp_path, ready_file=None):
        super().__init__(["/bin/sh", "-c", script], port=0, log_path=tmp_path / "shell.log")
        self.ready_file = ready_file
        self.ended = 0

    def is_ready(self) -> bool:
        return self.ready_file is not None and self.ready_file.exists()

    def _ended(self) -> None:
        self.ended += 1


def gone(pid: int, wait_s: float = 0.0) -> bool:
    """Exited (or a zombie) within wait_s: SIGKILL is delivered asynchronously."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                dead = f.read().split(") ")[-1][0] == "Z"
        except OSError:
            dead = True
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.02)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stop_ends_the_whole_group_even_what_ignores_sigterm(tmp_path):
    pidfile = tmp_path / "grandchild"
    ready = tmp_path / "ready"
    # The grandchild ignores SIGTERM (as a busy stub might not react): stop() must still end it.
    p = Shell(f"(trap '' TERM; sleep 300) & echo $! > {pidfile}; touch {ready}; wait", tmp_path, ready).start()
    p.wait_ready(timeout_s=30)
    grandchild = int(pidfile.read_text())
    assert p.alive() and not gone(grandchild)
    rc = p.stop(timeout_s=0.2)
    assert rc is not None and not p.alive() and p.ended == 1
    assert gone(grandchild, wait_s=10)


def test_wait_ready_raises_when_the_process_exits_first(tmp_path):
    p = Shell("exit 7", tmp_path).start()
    with pytest.raises(RuntimeError, match="the test shell exited with 7 before it was ready"):
        p.wait_ready(timeout_s=30)
    assert p.returncode == 7
    p.stop()


def test_wait_ready_times_out(tmp_path):
    p = Shell("sleep 30", tmp_path).start()
    try:
        with pytest.raises(TimeoutError, match="not ready"):
            p.wait_ready(timeout_s=0.05)
    finally:
        p.stop(signal.SIGKILL)


def test_start_again_ends_what_is_left_of_the_previous_run(tmp_path):
    p = Shell("sleep 30", tmp_path).start()
    first = p.proc.pid
    os.kill(first, signal.SIGKILL)
    p.proc.wait()
    p.start()
    assert p.proc.pid != first and p.alive() and p.ended == 1
    p.stop()
    assert p.ended == 2
