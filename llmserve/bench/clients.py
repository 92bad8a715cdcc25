"""--clients N: the load of a point split over N client processes that share one measured window.

At high concurrency one client process can be the limit of what it measures (its event loop parses every
streamed response). Separate processes started by hand begin a second or two apart, so each window sees a
different load and their p50s cannot be pooled. Here every process warms up, reports ready, and opens its
window at the same instant, chosen by the parent once all are ready; the parent pools their records into one
RunResult, so the percentiles are over every request of the window and the tok/s over its length. The streams
start together, as the single-process bench's do (docs/perf-gpu.md, call 26: the clients' own p50s still
differ, by the engine-step cohorts their streams fall into).

Processes are spawned, not forked: the parent has loaded a tokenizer (threads) and the targets use
gRPC and aiohttp, neither of which survives a fork."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue as queue_mod
import time
import traceback
from dataclasses import dataclass

from ..logs import configure_from_args
from .build import make_target
from .runner import RunResult, fixed_concurrency, poisson_rate, streams, warm_up
from .workload import Prompt

# The parent's lead between "all ready" and the window's start: long enough for every process to be
# scheduled out of its wait for the start on a busy host.
START_LEAD_S = 0.2
READY_TIMEOUT_S = 600.0  # a client that neither reports nor dies within this is stuck


@dataclass(frozen=True)
class Load:
    mode: str  # "concurrency" or "rate"
    value: float


def shares(total: int, n: int) -> list[int]:
    """`total` split over `n` as evenly as integers allow, the larger shares first."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def split(load: Load, n: int, max_concurrency: int) -> list[tuple[Load, int]]:
    """Each client's load and in-flight cap: a concurrency is shared out; a Poisson rate is divided
    (N Poisson processes of rate r/N sum to one of rate r), and so is its cap."""
    caps = shares(max_concurrency, n) if max_concurrency else [0] * n
    if load.mode == "concurrency":
        return [(Load("concurrency", c), 0) for c in shares(int(load.value), n)]
    return [(Load("rate", load.value / n), cap) for cap in caps]


def check(loads: list[Load], n: int, max_concurrency: int, requests: int | None = None) -> str | None:
    """Why these loads cannot be split over n clients, or None (a client with no stream, no share of the
    in-flight cap or none of the requests would have nothing to do, or no end)."""
    if n < 2:
        return None
    if requests is not None and requests < n:
        return f"--clients {n} needs --requests >= {n} (got {requests})"
    for load in loads:
        if load.mode == "concurrency" and load.value < n:
            return f"--clients {n} needs every --concurrency >= {n} (got {int(load.value)})"
    if max_concurrency and max_concurrency < n:
        return f"--clients {n} needs --max-concurrency 0 or >= {n} (got {max_concurrency})"
    return None


def _client(index: int, n: int, args, target: str, prompts: list[Prompt], loads: list[Load], channel, starts):
    """One client process: for every load, warm up, report ready, open the window at the start the
    parent sends, and send back the records."""
    configure_from_args(args)
    try:
        asyncio.run(_client_async(index, n, args, target, prompts, loads, channel, starts))
    except Exception:  # noqa: BLE001 - the parent reports it and stops the others
        channel.put(("failed", index, traceback.format_exc()))


async def _client_async(index, n, args, name, prompts, loads, channel, starts):
    target = make_target(name, args)
    await target.open()
    try:
        for k, load in enumerate(loads):
            mine, cap = split(load, n, args.max_concurrency)[index]
            conc = streams(mine.mode, mine.value, cap)
            await warm_up(target, prompts, args.output_len, args.warmup, conc)
            channel.put(("ready", index, k))
            start_at = await asyncio.get_running_loop().run_in_executor(None, starts.get)
            if mine.mode == "concurrency":
                res = await fixed_concurrency(
                    target, prompts, args.output_len, conc, duration=args.duration, requests=_requests(args, n, index),
                    progress=False, start_at=start_at,
                )  # fmt: skip
            else:
                res = await poisson_rate(
                    target, prompts, args.output_len, mine.value, duration=args.duration,
                    requests=_requests(args, n, index), seed=args.seed + index, max_concurrency=cap,
                    progress=False, start_at=start_at,
                )  # fmt: skip
            channel.put(("done", index, k, res))
    finally:
        await target.close()


def _requests(args, n: int, index: int) -> int | None:
    return shares(args.requests, n)[index] if args.requests else None


class Clients:
    """N spawned client processes of one target, stepping through the loads together."""

    def __init__(self, args, target: str, prompts: list[Prompt], loads: list[Load]):
        self.n = args.clients
        # A window's longest honest length: its duration, then the last request's own timeout.
        self.window_s = (args.duration or 0) + args.request_timeout
        self.early: dict[tuple, tuple] = {}  # (kind, load index, client) -> message
        ctx = mp.get_context("spawn")
        self.channel = ctx.Queue()
        self.starts = [ctx.Queue() for _ in range(self.n)]
        self.procs = [
            ctx.Process(
                target=_client,
                args=(i, self.n, args, target, prompts, loads, self.channel, self.starts[i]),
                name=f"bench-client-{i}",
                daemon=True,
            )
            for i in range(self.n)
        ]

    def __enter__(self):
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, exc_type, *exc):
        for p in self.procs:
            p.join(timeout=0 if exc_type else 10)  # after a failure the others wait for a start that never comes
            if p.is_alive():
                p.kill()
                p.join()

    def _next(self, kind: str, k: int) -> list:
        """Every client's message `kind` for load k, in client order; a failure or a dead client ends the
        run. A client that is done with load k warms up for k + 1 while others still run k, so messages
        for later loads come early: they wait in self.early."""
        deadline = time.monotonic() + READY_TIMEOUT_S + (self.window_s if kind == "done" else 0)
        while sum(1 for key in self.early if key[:2] == (kind, k)) < self.n:
            try:
                msg = self.channel.get(timeout=1.0)
            except queue_mod.Empty:  # noqa: PERF203 - a poll: every second, see whether a client died
                dead = [p.name for p in self.procs if not p.is_alive() and p.exitcode]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"bench clients stopped without a result: {dead or 'timed out'}") from None
                continue
            if msg[0] == "failed":
                raise RuntimeError(f"bench client {msg[1]} failed:\n{msg[2]}")
            self.early[(msg[0], msg[2], msg[1])] = msg
        return [self.early.pop((kind, k, i)) for i in range(self.n)]

    def run(self, k: int) -> tuple[RunResult, list[RunResult]]:
        """Load k over one shared window: the pooled result and each client's own."""
        self._next("ready", k)
        start_at = time.perf_counter() + START_LEAD_S
        for q in self.starts:
            q.put(start_at)
        each = [msg[3] for msg in self._next("done", k)]
        pooled = RunResult(
            [r for res in each for r in res.records],
            started=min(res.started for res in each),
            ended=max(res.ended for res in each),
        )
        return pooled, each
