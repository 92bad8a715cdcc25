"""A rolling restart's start of one replica (deploy/cluster.py Replica.restart): a start that dies of
the Python backend's start-up abort is retried for as long as the time allows, any other death before
ready 3 times; each is reported."""

from __future__ import annotations

import pytest

from llmserve.deploy import cluster
from llmserve.deploy.cluster import Replica


class FakeProcess:
    def kill(self):
        pass


class Aborting(Replica):
    returncode = -6  # SIGABRT


def replica(outcomes: list[str | None], monkeypatch) -> tuple[Replica, list]:
    """outcomes: per start, None (ready) or the exit cause of a start that died before ready."""
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    r = Aborting.__new__(Aborting)
    r.name, r.lock, r.process = "triton1", cluster.threading.RLock(), FakeProcess()
    r.start_timeout_s = None
    seen, starts = [], iter(outcomes)
    state = {}
    r.stop = lambda: None
    r.start = lambda: state.update(cause=next(starts))
    r.exit_cause = lambda: state["cause"]

    def wait_ready(timeout_s):
        if state["cause"] is not None:
            raise RuntimeError("exited before it was ready")

    r.wait_ready = wait_ready
    r.on_startup_failure = lambda name, rc, cause, detail="": seen.append(cause)
    return r, seen


def test_the_transient_abort_is_retried_past_the_attempts(monkeypatch):
    abort = "boost::interprocess::lock_exception"
    r, seen = replica([abort] * 6 + [None], monkeypatch)
    r.restart(timeout_s=600)
    assert seen == [abort] * 6


def test_other_deaths_before_ready_give_up_after_three(monkeypatch):
    r, seen = replica([None if i > 5 else "std::bad_alloc" for i in range(7)], monkeypatch)
    with pytest.raises(RuntimeError):
        r.restart(timeout_s=600)
    assert seen == ["std::bad_alloc"] * 3


def test_a_start_that_hangs_is_killed_after_its_start_timeout_and_retried(monkeypatch):
    r, seen = replica([None, None], monkeypatch)
    r.start_timeout_s = 300
    waits = []

    def wait_ready(timeout_s):
        waits.append(timeout_s)
        if len(waits) == 1:
            raise TimeoutError("not ready")  # the first start hangs

    r.wait_ready = wait_ready
    r.restart(timeout_s=600)
    assert seen == [cluster.START_TIMEOUT] and waits[0] == 300 and len(waits) == 2


def test_the_whole_restarts_time_running_out_is_not_retried(monkeypatch):
    r, seen = replica([None], monkeypatch)
    r.start_timeout_s = None

    def wait_ready(timeout_s):
        raise TimeoutError("not ready")

    r.wait_ready = wait_ready
    with pytest.raises(TimeoutError):
        r.restart(timeout_s=600)
    assert seen == []
