"""One restart-with-back-off for every process llmserve keeps running: tritonserver under
deploy/serve.py, the cluster's replicas and the OpenAI frontends (deploy/cluster.py).

A child that exits by itself (a crash, its engine stub's watchdog taking tritonserver down, a rolling
restart's SIGTERM) is started again. An exit within QUICK_EXIT_S of its start counts as quick; after n
quick exits in a row the next start waits 1, 2, 4 ... up to MAX_BACKOFF_S seconds, so a crash loop does
not spin, and a child that ran for a while comes back at once.

The supervisor polls (`poll()`, or `run()` until an event is set); it never blocks on one child, so
one loop watches any number of them. A child whose lock someone else holds (a rolling restart that
stops and starts it itself) is left alone until it is released.

Start-up failures are counted: a child that exits before it was ever ready (it has `is_ready()`,
asked about once a second until it says yes) is started again like any other, and `startup_failures`
counts it, by cause: the uncaught C++ exception its log names (`exit_cause()`, e.g. tritonserver's
`boost::interprocess::lock_exception`, docs/PERFORMANCE.md "Start-up aborts"), else its exit status.
A rolling restart that starts a server itself (cluster.Replica.restart) reports its retries here too.
The counts go to the log, to the cluster's cluster.json and to tools/chaos.py's report.

A start that hangs is one too: a child given a `start_timeout_s` that has neither been ready nor
exited that long after a start is killed (its whole process group) and started again at once,
counted under the cause START_TIMEOUT (once seen under load: a replica whose start never became
ready, so it was never back UP; docs/PERFORMANCE.md "Start-up aborts").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

logger = logging.getLogger(__name__)

QUICK_EXIT_S = 60.0  # an exit sooner than this after a start counts towards the back-off
MAX_BACKOFF_S = 30.0
READY_POLL_S = 1.0  # how often a started child that has not been ready yet is asked
START_TIMEOUT = "start-up timeout"  # the cause a start killed for not being ready in time is counted under


class StartupFailures:
    """Exits before ready, counted by child and by cause (thread-safe: a rolling restart reports from
    its own thread)."""

    def __init__(self):
        self.total = 0
        self.by_child: Counter = Counter()
        self.by_cause: Counter = Counter()
        self._lock = threading.Lock()

    def record(self, name: str, returncode: int | None, cause: str | None, detail: str = "") -> None:
        """detail: what the log says beyond the cause (a start-up timeout's seconds)."""
        why = cause or f"exit status {returncode}"
        with self._lock:
            self.total += 1
            self.by_child[name] += 1
            self.by_cause[why] += 1
            n = self.total
        if cause == START_TIMEOUT:
            logger.warning("%s killed: %s; start-up failure %d of this supervisor", name, detail or why, n)
            return
        logger.warning(
            "%s exited (%s) before it was ready: %s; start-up failure %d of this supervisor", name, returncode, why, n
        )

    def as_dict(self) -> dict:
        with self._lock:
            return {"total": self.total, "by_child": dict(self.by_child), "by_cause": dict(self.by_cause)}


class Child(Protocol):
    """What the supervisor needs of a child (ProcessGroup and cluster.Replica have it)."""

    started_at: float  # the clock's time of the last start

    def start(self) -> object: ...

    def alive(self) -> bool: ...

    def kill(self) -> None:
        """End whatever is left of the child (for one that exited: what outlived it)."""

    @property
    def returncode(self) -> int | None: ...


@dataclass
class Backoff:
    quick_s: float = QUICK_EXIT_S
    max_s: float = MAX_BACKOFF_S
    quick_exits: int = 0  # in a row

    def after_exit(self, ran_s: float) -> float:
        """Seconds to wait before the next start, for an exit ran_s seconds after the last start."""
        self.quick_exits = self.quick_exits + 1 if ran_s < self.quick_s else 0
        return min(self.max_s, 2.0 ** (self.quick_exits - 1)) if self.quick_exits else 0.0


@dataclass
class Supervised:
    name: str
    child: Child
    backoff: Backoff
    lock: threading.RLock = field(default_factory=threading.RLock)
    restart_if: Callable[[], bool] | None = None  # asked when an exit is noticed; False: give up on it
    on_start: Callable[[], None] | None = None  # after each restart
    next_start_at: float | None = None  # set while an exit waits out its back-off
    gave_up: bool = False
    run_started_at: float | None = None  # child.started_at of the run `ready` is about
    ready: bool = False  # that run has been ready (or the child cannot say)
    next_ready_check: float = 0.0
    our_start_at: float | None = None  # child.started_at of the last run this supervisor started
    start_timeout_s: float | None = None  # kill a run neither ready nor exited this long after its start
    last_cause: str | None = None  # why the last run counted as a start-up failure ended (None: it did not)


def start_overdue(entry: Supervised, now: float) -> bool:
    """The current run has been watched since its start, has not been ready, and its start-up time is
    up (a child that cannot say whether it is ready never is)."""
    return (
        entry.start_timeout_s is not None
        and entry.run_started_at == entry.child.started_at
        and not entry.ready
        and now - entry.child.started_at >= entry.start_timeout_s
    )


class Supervisor:
    def __init__(
        self,
        *,
        quick_s: float = QUICK_EXIT_S,
        max_s: float = MAX_BACKOFF_S,
        start_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """start_timeout_s: every child's, unless add() gives its own (None: no deadline).
        clock: what the children's started_at is read against (time.monotonic; tests pass a fake)."""
        self.quick_s, self.max_s, self.clock = quick_s, max_s, clock
        self.start_timeout_s = start_timeout_s
        self.entries: list[Supervised] = []
        self.halted = False
        self.startup_failures = StartupFailures()
        self._pass = threading.RLock()  # held for a whole poll(); halt() waits for it

    def add(
        self,
        name: str,
        child: Child,
        *,
        lock: threading.RLock | None = None,
        restart_if: Callable[[], bool] | None = None,
        on_start: Callable[[], None] | None = None,
        start_timeout_s: float | None = None,
    ) -> Supervised:
        """lock: the child's own, when others (a rolling restart) also restart it.
        start_timeout_s: this child's start-up deadline (default: the supervisor's); only a child with
        is_ready() has one."""
        entry = Supervised(name, child, Backoff(self.quick_s, self.max_s), restart_if=restart_if, on_start=on_start)
        if hasattr(child, "is_ready"):
            entry.start_timeout_s = start_timeout_s if start_timeout_s is not None else self.start_timeout_s
        if lock is not None:
            entry.lock = lock
        self.entries.append(entry)
        return entry

    def halt(self) -> None:
        """No more starts: the children are about to be stopped. Returns once a poll in progress (in
        another thread) is over; from a signal handler on the polling thread it does not wait (the
        lock is re-entrant) and the pass checks `halted` before each start."""
        self.halted = True
        with self._pass:
            pass

    def poll(self) -> list[str]:
        """One look at every child: start again those whose back-off is over. Returns their names."""
        started = []
        with self._pass:
            for entry in self.entries:
                if self.halted:
                    break
                if entry.gave_up or not entry.lock.acquire(blocking=False):
                    continue  # someone else (a rolling restart) is stopping and starting it
                try:
                    if self._revive(entry):
                        started.append(entry.name)
                finally:
                    entry.lock.release()
        return started

    def _watch_ready(self, entry: Supervised, now: float) -> None:
        """Note whether the current run of the child has been ready yet."""
        child = entry.child
        if entry.run_started_at != child.started_at:  # a new run (ours, or a rolling restart's)
            entry.run_started_at, entry.next_ready_check = child.started_at, 0.0
            entry.ready = not hasattr(child, "is_ready")
        if entry.ready or now < entry.next_ready_check:
            return
        entry.next_ready_check = now + READY_POLL_S
        try:
            entry.ready = bool(child.is_ready())
        except Exception:  # noqa: BLE001 - not ready is all a failed probe says
            entry.ready = False

    def _revive(self, entry: Supervised) -> bool:
        child = entry.child
        now = self.clock()
        if child.alive():
            entry.next_start_at = None  # started again by someone else meanwhile
            self._watch_ready(entry, now)
            if not start_overdue(entry, now):
                return False
            # Hung: neither ready nor exited in time. Killed here, it is handled below as an exit,
            # counted under START_TIMEOUT rather than the exit status the kill gave it.
            child.kill()
            ran_s = now - child.started_at
            entry.last_cause = START_TIMEOUT
            self.startup_failures.record(
                entry.name, child.returncode, START_TIMEOUT, f"neither ready nor exited {ran_s:.0f} s after its start"
            )
            return self._restart_after_end(entry, now)
        if entry.next_start_at is None:  # just noticed
            child.kill()  # what outlived it (tritonserver's stubs hold the model and the KV cache)
            watched = entry.run_started_at == child.started_at
            entry.last_cause = None
            if (watched and not entry.ready) or (not watched and child.started_at == entry.our_start_at):
                cause = child.exit_cause() if hasattr(child, "exit_cause") else None
                entry.last_cause = cause or f"exit status {child.returncode}"
                self.startup_failures.record(entry.name, child.returncode, cause)
            return self._restart_after_end(entry, now)
        return self._start_when_due(entry, now)

    def _restart_after_end(self, entry: Supervised, now: float) -> bool:
        """The run has ended (what outlived it is killed): give up, or start again after the back-off."""
        child = entry.child
        if entry.restart_if is not None and not entry.restart_if():
            entry.gave_up = True
            logger.error("%s exited (%s); not starting it again", entry.name, child.returncode)
            return False
        delay = entry.backoff.after_exit(now - child.started_at)
        entry.next_start_at = now + delay
        logger.warning(
            "%s exited (%s); starting it again%s",
            entry.name,
            child.returncode,
            f" in {delay:g} s ({entry.backoff.quick_exits} quick exits in a row)" if delay else "",
        )
        return self._start_when_due(entry, now)

    def _start_when_due(self, entry: Supervised, now: float) -> bool:
        child = entry.child
        if now < entry.next_start_at or self.halted:
            return False
        entry.next_start_at = None
        child.start()
        entry.our_start_at = child.started_at
        if entry.on_start is not None:
            entry.on_start()
        return True

    def run(
        self,
        stop: threading.Event,
        period_s: float = 0.2,
        *,
        check: Callable[[], bool] | None = None,
        on_restart: Callable[[list[str]], None] | None = None,
    ) -> None:
        """poll() every period_s until `stop` is set or check() (after each poll) returns False.
        on_restart(names) after a poll that started something."""
        while not stop.wait(period_s):
            names = self.poll()
            if names and on_restart is not None:
                on_restart(names)
            if check is not None and not check():
                return

    def start_thread(self, **run_kw) -> SupervisorThread:
        """run() in a daemon thread (tests, tools/chaos.py); `.stop()` ends it."""
        return SupervisorThread(self, **run_kw)


class SupervisorThread:
    def __init__(self, supervisor: Supervisor, **run_kw):
        self.event = threading.Event()
        self.thread = threading.Thread(
            target=supervisor.run, args=(self.event,), kwargs=run_kw, name="llmserve-supervisor", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.event.set()
        self.thread.join(10)
