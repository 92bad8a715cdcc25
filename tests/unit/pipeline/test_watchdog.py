"""The engine stub's watchdog (pipeline/watchdog.py), with a stand-in "server" process: it takes the
server down on "!", on a pipe that ends without "c", and on a silent stub; never on a clean shutdown."""

import os
import signal
import subprocess
import sys
import time

import pytest

GRACE_S = 1.0


def _server() -> subprocess.Popen:
    # A stand-in tritonserver that leads its own process group, as our launchers start it.
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def _watchdog(server: subprocess.Popen, silence_s: float = 30.0) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmserve.pipeline.watchdog",
            "--server-pid",
            str(server.pid),
            "--name",
            "test",
            "--grace-s",
            str(GRACE_S),
            "--silence-s",
            str(silence_s),
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _ended(p: subprocess.Popen, timeout_s: float) -> float | None:
    t0 = time.monotonic()
    try:
        p.wait(timeout_s)
        return time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.parametrize("event", ["fatal", "stub died", "silence"])
def test_watchdog_takes_the_server_down(event, emit):
    server = _server()
    wd = _watchdog(server, silence_s=1.0 if event == "silence" else 30.0)
    try:
        wd.stdin.write(b"...")
        wd.stdin.flush()
        time.sleep(0.3)
        if event == "fatal":
            wd.stdin.write(b"!")
            wd.stdin.flush()
        elif event == "stub died":
            wd.stdin.close()
        t = _ended(server, 10)
        emit(f"watchdog, {event}: stand-in server ended {t:.2f} s later")
        assert t is not None, "the server was not taken down"
        assert server.returncode in (-signal.SIGTERM, -signal.SIGKILL)
        assert b"taking tritonserver" in wd.stderr.read()
    finally:
        for p in (server, wd):
            if p.poll() is None:
                p.kill()


def test_clean_shutdown_leaves_the_server_alone():
    server = _server()
    wd = _watchdog(server)
    try:
        wd.stdin.write(b"..c")
        wd.stdin.close()
        assert _ended(wd, 5) is not None
        assert server.poll() is None, "a clean shutdown took the server down"
    finally:
        server.kill()
        wd.kill()


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace():
    server = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
        start_new_session=True,
    )
    time.sleep(0.3)
    wd = _watchdog(server)
    try:
        wd.stdin.write(b"!")
        wd.stdin.flush()
        t = _ended(server, 10)
        assert t is not None and t >= GRACE_S * 0.9 and server.returncode == -signal.SIGKILL
    finally:
        for p in (server, wd):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
