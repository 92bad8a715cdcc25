"""Making a bench target from the CLI's arguments: one place for the bench process and for each of
the client processes of --clients (llmserve/bench/clients.py)."""

from __future__ import annotations

import asyncio
import time

from ..spec.deployment import Engine as EngineSection
from .targets import GrpcEnsemble, GrpcTokens, HttpEnsemble, InProcessEngine, OpenAICompletions, Record, Target

TARGETS = ("ensemble", "ensemble-http", "tensorrt_llm", "engine", "openai")


class Timed:
    """Counts a request that takes longer than `timeout` seconds as an error instead of waiting on."""

    def __init__(self, target: Target, timeout: float):
        self.target, self.timeout = target, timeout

    async def open(self):
        await self.target.open()

    async def request(self, prompt, output_len):
        start = time.perf_counter()
        try:
            return await asyncio.wait_for(self.target.request(prompt, output_len), self.timeout)
        except asyncio.TimeoutError:
            return Record(start, end=time.perf_counter(), error=f"timeout after {self.timeout} s")

    async def close(self):
        await self.target.close()


def _engine_target(args, checkpoint: str, spec) -> InProcessEngine:
    eng = spec.engine if spec else EngineSection()  # the spec defaults when only --checkpoint is given
    return InProcessEngine(
        checkpoint,
        device=args.engine_device or eng.torch.device,
        dtype=args.engine_dtype or eng.torch.dtype,
        max_slots=args.engine_max_slots or eng.max_batch_size,
        max_seq_len=args.engine_max_seq_len or eng.max_seq_len,
        cuda_graphs=eng.torch.cuda_graphs and not args.engine_eager,
        triton_kernels=eng.torch.triton_kernels,
        prefill_token_budget=eng.torch.prefill_token_budget,
        ignore_eos=args.ignore_eos,
        threads=args.engine_threads if args.engine_threads is not None else eng.torch.threads,
    )


def make_target(name: str, args, checkpoint: str | None = None, spec=None) -> Timed:
    """The target `name` (one of TARGETS), not yet opened, wrapped in args.request_timeout. The
    openai target needs args.openai_model set (main_async fills it from the spec)."""
    if name == "ensemble":
        t = GrpcEnsemble(args.url, args.model)
    elif name == "ensemble-http":
        t = HttpEnsemble(args.http_url, args.model)
    elif name == "tensorrt_llm":
        t = GrpcTokens(args.url, args.token_model)
    elif name == "engine":
        t = _engine_target(args, checkpoint, spec)
    elif name == "openai":
        t = OpenAICompletions(args.openai_url, args.openai_model)
    else:
        raise ValueError(f"unknown target {name!r} (choose from {', '.join(TARGETS)})")
    return Timed(t, args.request_timeout)
