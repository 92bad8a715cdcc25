"""Closed-loop fixed concurrency, or open-loop Poisson arrivals; warm-up first, then a measured
window bounded by a duration and/or a request count."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass

from .targets import Record, Target
from .workload import Prompt


@dataclass
class RunResult:
    records: list[Record]
    started: float
    ended: float


async def _opening(start_at: float | None) -> float:
    """The window's start: now, or `start_at` once it comes."""
    if start_at is None:
        return time.perf_counter()
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    return start_at


def _bar(total, desc: str, show: bool):
    if not show:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="req" if isinstance(total, int) else "s", leave=False)


def streams(mode: str, load: float, max_concurrency: int = 0) -> int:
    """How many requests a load keeps in flight, for its warm-up: the concurrency, or for a rate its
    cap, else twice the rate."""
    if mode == "concurrency":
        return int(load)
    return max(1, max_concurrency or int(load * 2))


async def warm_up(target: Target, prompts: list[Prompt], output_len: int, n: int | None, concurrency: int) -> None:
    """`n` requests (None: the concurrency, at least 2; 0: none), `concurrency` at a time."""
    n = max(2, concurrency) if n is None else n
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int):
        async with sem:
            await target.request(prompts[i % len(prompts)], output_len)

    await asyncio.gather(*(one(i) for i in range(n)))


async def fixed_concurrency(
    target: Target,
    prompts: list[Prompt],
    output_len: int,
    concurrency: int,
    *,
    duration: float | None,
    requests: int | None,
    progress: bool = True,
    desc: str = "",
    start_at: float | None = None,
) -> RunResult:
    """`concurrency` workers, each sending its next request as soon as the last one ends; new
    requests stop at the deadline or after `requests`, and requests in flight are waited for.
    `start_at` (a time.perf_counter() value, the same clock in every process of this host): the
    window opens then, so that several client processes share one (clients.py)."""
    records: list[Record] = []
    counter = iter(range(10**12))
    started = await _opening(start_at)
    deadline = started + duration if duration else float("inf")
    bar = _bar(requests or int(duration or 0), desc, progress)
    last_tick = [started]

    def tick(rec: Record):
        records.append(rec)
        if bar is None:
            return
        if requests:
            bar.update(1)
        else:
            now = min(time.perf_counter(), deadline)
            bar.update(int(now - started) - int(last_tick[0] - started))
            last_tick[0] = now

    async def worker():
        while time.perf_counter() < deadline:
            i = next(counter)
            if requests and i >= requests:
                return
            tick(await target.request(prompts[i % len(prompts)], output_len))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    if bar is not None:
        bar.close()
    return RunResult(records, started, time.perf_counter())


async def interleaved(
    targets: dict[str, Target],
    prompts: list[Prompt],
    output_len: int,
    concurrency: int,
    *,
    duration: float | None,
    requests: int | None,
) -> dict[str, RunResult]:
    """Closed loop of `concurrency` streams, each sending its requests to the targets in turn (stream
    w starts at target w mod n), so the targets share the same load at the same moments and their
    latencies differ by what each path adds. Separate runs differ by more than that: on the H200 the
    ensemble's TTFT p50 at c=64 was 97 ms in one run and 113 ms in the next (docs/perf-gpu.md)."""
    names = list(targets)
    records: dict[str, list[Record]] = {n: [] for n in names}
    counter = itertools.count()
    started = time.perf_counter()
    deadline = started + duration if duration else float("inf")

    async def worker(w: int):
        for k in itertools.count(w):
            i = next(counter)
            if time.perf_counter() >= deadline or (requests and i >= requests):
                return
            name = names[k % len(names)]
            records[name].append(await targets[name].request(prompts[i % len(prompts)], output_len))

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    ended = time.perf_counter()
    return {n: RunResult(records[n], started, ended) for n in names}


async def poisson_rate(
    target: Target,
    prompts: list[Prompt],
    output_len: int,
    rate: float,
    *,
    duration: float | None,
    requests: int | None,
    seed: int = 0,
    max_concurrency: int = 0,
    progress: bool = True,
    desc: str = "",
    start_at: float | None = None,
) -> RunResult:
    """Requests arrive as a Poisson process of `rate` per second (exponential gaps), whatever the
    server's pace; `max_concurrency` > 0 caps how many are in flight (the rest wait). `start_at`:
    as for fixed_concurrency."""
    rng = random.Random(seed)
    records: list[Record] = []
    tasks = []
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    started = await _opening(start_at)
    deadline = started + duration if duration else float("inf")
    bar = _bar(requests or None, desc, progress)

    async def one(i: int):
        if sem:
            async with sem:
                rec = await target.request(prompts[i % len(prompts)], output_len)
        else:
            rec = await target.request(prompts[i % len(prompts)], output_len)
        records.append(rec)
        if bar is not None:
            bar.update(1)

    i, t = 0, started
    while not requests or i < requests:
        t += rng.expovariate(rate)
        if t >= deadline:
            break
        await asyncio.sleep(max(0.0, t - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
        i += 1
    await asyncio.gather(*tasks)
    if bar is not None:
        bar.close()
    return RunResult(records, started, time.perf_counter())
