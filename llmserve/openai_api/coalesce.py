"""Coalesced writes for a streamed answer: the SSE events a stream made while its previous write was
going out leave in one write.

Without it every event is one `send()` on the client's socket: on the tensorrtllm layout, where the C++
backend sends one response per token, the socket write was the largest single cost of a frontend
worker (py-spy of a worker under load, 2-core CPU, 2026-12-04: 29% of its samples in the transport's
write). Here a task of its own runs the event generator into a queue, and the response takes whatever
the queue holds at each turn. An idle worker still writes each event the moment it exists (the queue
holds one); a busy one writes several per syscall, so it batches only when it is behind, and never
waits to batch. The bytes the client reads are the same.

Cancelling the consumer (the client hung up) cancels the producer, which ends the event generator
the way a cancel always did (its `finally`: the engine's stop, the access line's hang-up)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

_END = object()
_running: set[asyncio.Task] = set()  # asyncio keeps only weak references to tasks


async def coalesced(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`events`, each run of those ready at once joined into one bytes."""
    ready: asyncio.Queue = asyncio.Queue()  # unbounded: a stream holds at most its max_tokens

    async def pump() -> None:
        try:
            async for event in events:
                ready.put_nowait(event)
            ready.put_nowait(_END)
        except Exception as e:  # handed to the consumer, which raises it
            ready.put_nowait(e)

    task = asyncio.get_running_loop().create_task(pump())
    _running.add(task)
    task.add_done_callback(_running.discard)
    try:
        while True:
            item, parts = await ready.get(), []
            while True:
                if item is _END or isinstance(item, Exception):
                    if parts:
                        yield b"".join(parts)
                    if item is _END:
                        return
                    raise item
                parts.append(item)
                if ready.empty():
                    break
                item = ready.get_nowait()
            yield b"".join(parts)
    finally:
        task.cancel()  # a no-op once it is done; not awaited: a cancelled consumer cannot wait
