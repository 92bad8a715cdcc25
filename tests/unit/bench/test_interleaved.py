"""--interleave: one closed loop where each stream alternates the targets, so they share load and time."""

from __future__ import annotations

import asyncio
import time

from llmserve.bench.runner import interleaved
from llmserve.bench.targets import Record, Target
from llmserve.bench.workload import Prompt


class Counting(Target):
    """Answers at once; records how many of its requests were in flight together."""

    def __init__(self, name: str, shared: dict):
        self.name, self.shared = name, shared

    async def request(self, prompt: Prompt, output_len: int) -> Record:
        rec = Record(time.perf_counter())
        self.shared["now"] += 1
        self.shared["peak"] = max(self.shared["peak"], self.shared["now"])
        await asyncio.sleep(0)
        rec.mark(output_len)
        self.shared["now"] -= 1
        rec.end = time.perf_counter()
        return rec


def test_each_stream_alternates_the_targets_within_one_window():
    shared = {"now": 0, "peak": 0}
    targets = {"a": Counting("a", shared), "b": Counting("b", shared)}
    prompts = [Prompt(text="x", ids=[1])]
    res = asyncio.run(interleaved(targets, prompts, 4, 3, duration=None, requests=60))
    assert len(res["a"].records) + len(res["b"].records) == 60
    assert abs(len(res["a"].records) - len(res["b"].records)) <= 3  # 3 streams, each alternating
    assert res["a"].started == res["b"].started and res["a"].ended == res["b"].ended  # one window
    assert shared["peak"] == 3  # the concurrency is for all targets together, not per target
