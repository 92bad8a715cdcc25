"""A stand-in for the Triton servers with EnsembleClient's interface: every request is answered
with scripted pieces. The unit tests use it to test the HTTP surface without Triton, and
tools/bench_frontend.py to measure the frontend's own cost (nothing else runs behind it)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ..client.aio import Piece


@dataclass
class ScriptedEnsemble:
    """Answers with `pieces` (text, tokens), cut to the request's max_tokens, waiting `delay_s`
    before each; records the requests it got (and their request ids), counts those in flight and
    those cancelled."""

    pieces: list[tuple[str, int]] = field(default_factory=lambda: [("Hello", 1), (" world", 2), ("!", 1)])
    delay_s: float = 0.0
    error: Exception | None = None
    keep_requests: bool = True
    requests: list[dict] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    active: int = 0
    cancelled: int = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def ready(self) -> bool:
        return True

    async def generate(self, request: dict, request_id: str, trace):
        if self.keep_requests:
            self.requests.append(request)
            self.request_ids.append(request_id)
        trace.dispatched_at = time.monotonic()
        if self.error is not None:
            raise self.error
        self.active += 1
        budget = request["max_tokens"]
        try:
            for text, n in self.pieces:
                if budget <= 0:
                    return
                n = min(n, budget)
                budget -= n
                await asyncio.sleep(self.delay_s)
                trace.tokens += n
                yield Piece(text, n)
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise
        finally:
            self.active -= 1
