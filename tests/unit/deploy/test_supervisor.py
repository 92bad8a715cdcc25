"""The one restart-with-back-off (deploy/supervisor.py), with a fake clock and fake children."""

from __future__ import annotations

import threading

import pytest

from llmserve.deploy.supervisor import MAX_BACKOFF_S, QUICK_EXIT_S, START_TIMEOUT, Backoff, Supervisor


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeChild:
    def __init__(self, clock: Clock):
        self.clock, self.starts, self.kills = clock, 0, 0
        self.running, self.started_at, self.returncode = False, 0.0, None

    def start(self):
        self.starts += 1
        self.running, self.started_at, self.returncode = True, self.clock(), None
        return self

    def alive(self) -> bool:
        return self.running

    def kill(self) -> None:
        self.kills += 1

    def exit(self, rc: int = 1) -> None:
        self.running, self.returncode = False, rc


@pytest.fixture
def clock():
    return Clock()


def test_backoff_doubles_with_quick_exits_in_a_row_up_to_the_cap():
    b = Backoff()
    assert [b.after_exit(1.0) for _ in range(7)] == [1, 2, 4, 8, 16, MAX_BACKOFF_S, MAX_BACKOFF_S]
    assert b.after_exit(QUICK_EXIT_S + 1) == 0  # it ran a while: back at once, and the count starts over
    assert b.after_exit(1.0) == 1


def test_a_child_that_ran_a_while_comes_back_at_once(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock).start()
    sup.add("triton0", child)
    assert sup.poll() == []
    clock.now += QUICK_EXIT_S + 5
    child.exit()
    assert sup.poll() == ["triton0"]
    assert child.starts == 2 and child.kills == 1  # what outlived it was ended before the new start


def test_a_crash_loop_waits_1_2_4_seconds(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock).start()
    sup.add("triton0", child)
    for delay in (1, 2, 4):
        clock.now += 0.5  # dies half a second after each start
        child.exit()
        assert sup.poll() == []  # noticed: waits `delay` seconds
        clock.now += delay - 0.1
        assert sup.poll() == []
        clock.now += 0.1
        assert sup.poll() == ["triton0"]
    assert child.starts == 4


def test_a_child_whose_lock_is_held_is_left_to_its_holder(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock).start()
    lock = threading.RLock()
    sup.add("triton0", child, lock=lock)
    child.exit()
    held = threading.Event()
    release = threading.Event()

    def rolling_restart():
        with lock:
            held.set()
            release.wait(5)
            child.start()  # the holder starts it itself

    t = threading.Thread(target=rolling_restart)
    t.start()
    held.wait(5)
    assert sup.poll() == []
    release.set()
    t.join(5)
    assert sup.poll() == [] and child.starts == 2


def test_restart_if_false_gives_up(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock).start()
    entry = sup.add("tritonserver", child, restart_if=lambda: False)
    child.exit(3)
    assert sup.poll() == [] and entry.gave_up
    clock.now += 100
    assert sup.poll() == [] and child.starts == 1


def test_halt_stops_every_start_even_one_waiting_out_its_backoff(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock).start()
    sup.add("openai0", child)
    clock.now += 0.5
    child.exit()
    sup.poll()
    sup.halt()
    clock.now += 100
    assert sup.poll() == [] and child.starts == 1


def test_on_start_runs_after_each_restart(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock).start()
    seen = []
    sup.add("tritonserver", child, on_start=lambda: seen.append(child.starts))
    clock.now += QUICK_EXIT_S + 1
    child.exit()
    sup.poll()
    assert seen == [2]


def test_run_stops_when_check_fails_and_reports_restarts(clock):
    sup = Supervisor(clock=clock)
    child = FakeChild(clock)  # never started: exits count from started_at 0, long ago
    sup.add("triton0", child)
    restarted = []
    sup.run(threading.Event(), period_s=0.0, check=lambda: not restarted, on_restart=restarted.append)
    assert restarted == [["triton0"]] and child.alive()


class ReadyChild(FakeChild):
    """A child that can say whether it is ready, and why it died (like TritonProcess)."""

    def __init__(self, clock: Clock):
        super().__init__(clock)
        self.ready, self.cause = False, None

    def start(self):
        self.ready = False
        return super().start()

    def is_ready(self) -> bool:
        return self.ready

    def exit_cause(self):
        return self.cause


def test_an_exit_before_ready_is_counted_by_cause_and_restarted(clock):
    sup = Supervisor(clock=clock)
    child = ReadyChild(clock).start()
    sup.add("triton1", child)
    sup.poll()  # watched: not ready yet
    child.cause = "boost::interprocess::lock_exception"
    child.exit(-6)
    sup.poll()
    clock.now += 1
    assert sup.poll() == ["triton1"]  # started again after its back-off
    counts = sup.startup_failures.as_dict()
    assert counts == {"total": 1, "by_child": {"triton1": 1}, "by_cause": {"boost::interprocess::lock_exception": 1}}
    # this run becomes ready, then dies: not a start-up failure
    child.ready = True
    clock.now += 2
    sup.poll()
    child.exit(-9)
    sup.poll()
    assert sup.startup_failures.total == 1


def test_a_run_that_died_before_the_first_look_counts_when_the_supervisor_started_it(clock):
    sup = Supervisor(clock=clock)
    child = ReadyChild(clock).start()
    sup.add("triton0", child)
    sup.poll()
    child.ready = True
    clock.now += QUICK_EXIT_S + 1
    sup.poll()
    child.exit(-9)
    assert sup.poll() == ["triton0"] and sup.startup_failures.total == 0  # it had been ready
    child.exit(1)  # the new run dies before the supervisor ever looked at it
    sup.poll()
    assert sup.startup_failures.as_dict()["by_cause"] == {"exit status 1": 1}


class HangingChild(ReadyChild):
    """A start that neither becomes ready nor exits until killed (kill() ends it, as killpg does)."""

    def kill(self) -> None:
        super().kill()
        if self.running:
            self.exit(-9)


def test_a_start_that_hangs_past_its_deadline_is_killed_counted_and_restarted(clock):
    sup = Supervisor(clock=clock, start_timeout_s=300)
    child = HangingChild(clock).start()
    entry = sup.add("triton2", child)
    sup.poll()  # watched from its start
    clock.now += 299
    assert sup.poll() == [] and child.kills == 0  # still within its time
    clock.now += 1
    assert sup.poll() == ["triton2"]  # killed, then started again at once (it ran longer than a quick exit)
    assert child.kills == 1 and child.starts == 2 and child.alive()
    assert sup.startup_failures.as_dict() == {"total": 1, "by_child": {"triton2": 1}, "by_cause": {START_TIMEOUT: 1}}
    assert entry.last_cause == START_TIMEOUT
    # the new run gets its own deadline, and becomes ready in time: nothing more happens to it
    sup.poll()
    clock.now += 200
    child.ready = True
    sup.poll()
    clock.now += 1000
    assert sup.poll() == [] and child.kills == 1 and sup.startup_failures.total == 1


def test_a_start_timeout_counts_once_not_again_as_an_exit(clock):
    sup = Supervisor(clock=clock, start_timeout_s=10, quick_s=60)
    child = HangingChild(clock).start()
    sup.add("openai0", child)
    sup.poll()
    clock.now += 10
    assert sup.poll() == []  # killed; a quick end (10 s < 60 s): waits out its 1 s back-off
    clock.now += 1
    assert sup.poll() == ["openai0"] and sup.startup_failures.total == 1


def test_no_deadline_without_a_start_timeout_or_a_readiness_probe(clock):
    sup = Supervisor(clock=clock, start_timeout_s=5)
    hanging, plain = HangingChild(clock).start(), FakeChild(clock).start()
    sup.add("triton0", hanging, start_timeout_s=None)  # None: the supervisor's own (5 s)
    sup.add("no-probe", plain)  # cannot say whether it is ready: counts as ready
    other = Supervisor(clock=clock)  # no deadline at all
    lone = HangingChild(clock).start()
    other.add("triton1", lone)
    sup.poll(), other.poll()
    clock.now += 1000
    assert sup.poll() == ["triton0"] and plain.kills == 0
    assert other.poll() == [] and lone.kills == 0


def test_a_run_that_became_ready_has_no_start_deadline(clock):
    sup = Supervisor(clock=clock, start_timeout_s=5)
    child = HangingChild(clock).start()
    sup.add("triton0", child)
    sup.poll()
    child.ready = True
    clock.now += 1
    sup.poll()
    child.ready = False  # a busy server's probe fails later: not a start-up matter
    clock.now += 1000
    assert sup.poll() == [] and child.kills == 0
