"""What a request is sent to. Each target's `request()` returns a Record with client-side times.

* ensemble (gRPC streaming, `stream_infer`): text in, text chunks out: the full Triton path.
* ensemble-http: the same over HTTP `generate_stream` (server-sent events).
* tensorrt_llm: the token-level decoupled model over gRPC streaming (no pre/post-processing).
* engine: the torch engine in this process, no Triton at all (the same Engine thread and callbacks).

Output lengths are exact: min_tokens = max_tokens (the engine target can instead drop end ids)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..client import wire
from .workload import Prompt

_ids = itertools.count()


@dataclass
class Record:
    start: float
    first: float | None = None
    last: float | None = None
    end: float | None = None
    chunks: int = 0
    tokens: int = 0
    error: str | None = None
    chunk_times: list[float] = field(default_factory=list)

    def mark(self, n_tokens: int, now: float | None = None) -> None:
        now = now if now is not None else time.perf_counter()
        if n_tokens <= 0:
            return
        self.first = self.first or now
        self.last = now
        self.chunks += 1
        self.tokens += n_tokens
        self.chunk_times.append(now)


class Target:
    name = "?"

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def request(self, prompt: Prompt, output_len: int) -> Record:
        raise NotImplementedError


class _GrpcStreaming(Target):
    def __init__(self, url: str, model: str):
        self.url, self.model = url, model

    async def open(self) -> None:
        from tritonclient.grpc.aio import InferenceServerClient

        self.client = InferenceServerClient(self.url)

    async def close(self) -> None:
        await self.client.close()

    def _inputs(self, prompt: Prompt, output_len: int):
        raise NotImplementedError

    def _count(self, result, output_len: int) -> int:
        raise NotImplementedError

    async def request(self, prompt: Prompt, output_len: int) -> Record:
        inputs, outputs = self._inputs(prompt, output_len)
        rec = Record(time.perf_counter())

        async def requests():
            yield {
                "model_name": self.model,
                "inputs": inputs,
                "outputs": outputs,
                "request_id": str(next(_ids)),
                "enable_empty_final_response": True,
            }

        try:
            async for result, error in self.client.stream_infer(requests()):
                if error is not None:
                    rec.error = str(error)
                    break
                rec.mark(self._count(result, output_len))
                if wire.is_final(result.get_response()):
                    break
        except Exception as e:  # noqa: BLE001  (a benchmark counts failures, it does not stop)
            rec.error = f"{type(e).__name__}: {e}"
        rec.end = time.perf_counter()
        return rec


def _ensemble_body(prompt: Prompt, output_len: int) -> dict:
    """Exact length (min_tokens = max_tokens), the raw prompt, streamed."""
    return wire.ensemble_body(prompt.text, output_len, min_tokens=output_len, stream=True, apply_chat_template=False)


def _tensor(mod, name: str, value, dtype: str):
    arr = np.array(value, dtype=object if dtype == "BYTES" else {"INT32": np.int32, "BOOL": bool}[dtype])
    t = mod.InferInput(name, list(arr.shape), dtype)
    t.set_data_from_numpy(arr)
    return t


class GrpcEnsemble(_GrpcStreaming):
    name = "ensemble"

    def __init__(self, url: str, model: str = "ensemble"):
        super().__init__(url, model)

    def _inputs(self, prompt: Prompt, output_len: int):
        from tritonclient import grpc as g

        inputs = wire.infer_inputs(_ensemble_body(prompt, output_len), g)
        return inputs, [g.InferRequestedOutput("text_output"), g.InferRequestedOutput("output_log_probs")]

    def _count(self, result, output_len: int) -> int:
        # A chunk carries one log-prob per token: one token per engine step, or several when the
        # engine coalesces a stream's tokens (engine.torch.stream_interval_ms). Empty text still counts.
        piece = wire.result_piece(result)
        return 0 if piece is None else piece.tokens


class GrpcTokens(_GrpcStreaming):
    name = "tensorrt_llm"

    def __init__(self, url: str, model: str = "tensorrt_llm"):
        super().__init__(url, model)

    def _inputs(self, prompt: Prompt, output_len: int):
        from tritonclient import grpc as g

        inputs = [
            _tensor(g, "input_ids", [prompt.ids], "INT32"),
            _tensor(g, "input_lengths", [[len(prompt.ids)]], "INT32"),
            _tensor(g, "request_output_len", [[output_len]], "INT32"),
            _tensor(g, "min_tokens", [[output_len]], "INT32"),
            _tensor(g, "streaming", [[True]], "BOOL"),
        ]
        return inputs, [g.InferRequestedOutput("output_ids"), g.InferRequestedOutput("sequence_length")]

    def _count(self, result, output_len: int) -> int:
        n = result.as_numpy("sequence_length")
        return 0 if n is None else int(n.reshape(-1)[0])


class HttpEnsemble(Target):
    """POST /v2/models/<model>/generate_stream; one server-sent event per streamed chunk."""

    name = "ensemble-http"

    def __init__(self, url: str, model: str = "ensemble"):
        self.url = url if url.startswith("http") else f"http://{url}"
        self.model = model

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def close(self) -> None:
        await self.session.close()

    async def request(self, prompt: Prompt, output_len: int) -> Record:
        body = _ensemble_body(prompt, output_len)
        rec = Record(time.perf_counter())
        try:
            async with self.session.post(f"{self.url}/v2/models/{self.model}/generate_stream", json=body) as r:
                if r.status != 200:
                    rec.error = f"HTTP {r.status}: {(await r.text())[:200]}"
                async for line in r.content:
                    if not line.startswith(b"data:"):
                        continue
                    event = json.loads(line[5:])
                    if "error" in event:
                        rec.error = str(event["error"])
                        break
                    piece = wire.event_piece(event)
                    if piece is not None:
                        rec.mark(piece.tokens)
        except Exception as e:  # noqa: BLE001
            rec.error = f"{type(e).__name__}: {e}"
        rec.end = time.perf_counter()
        return rec


class OpenAICompletions(Target):
    """POST /v1/completions of the OpenAI frontend, streamed; the same raw prompt and exact length
    (min_tokens = max_tokens) as the ensemble targets. Tokens per chunk come from vLLM's
    `continuous_usage_stats` (usage on every chunk), so TTFT and ITL count tokens like the others."""

    name = "openai"

    def __init__(self, url: str, model: str):
        self.url = url if url.startswith("http") else f"http://{url}"
        self.model = model

    async def open(self) -> None:
        import aiohttp

        # limit=0: a connection per stream however many there are (aiohttp's default pool of 100 would
        # hold requests beyond the 100th in this client, and their wait would count as the server's TTFT).
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), connector=aiohttp.TCPConnector(limit=0)
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(self, prompt: Prompt, output_len: int) -> Record:
        body = {
            "model": self.model,
            "prompt": prompt.text,
            "max_tokens": output_len,
            "min_tokens": output_len,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        rec = Record(time.perf_counter())
        seen = 0
        try:
            async with self.session.post(f"{self.url}/v1/completions", json=body) as r:
                if r.status != 200:
                    rec.error = f"HTTP {r.status}: {(await r.text())[:200]}"
                async for line in r.content:
                    if not line.startswith(b"data:") or line.startswith(b"data: [DONE]"):
                        continue
                    event = json.loads(line[5:])
                    if "error" in event:
                        rec.error = str(event["error"])
                        break
                    if event.get("choices") and event.get("usage"):
                        n = event["usage"]["completion_tokens"]
                        rec.mark(n - seen)
                        seen = n
        except Exception as e:  # noqa: BLE001
            rec.error = f"{type(e).__name__}: {e}"
        rec.end = time.perf_counter()
        return rec


class InProcessEngine(Target):
    """The engine without Triton: LlamaModel + Engine (its own thread), callbacks into asyncio."""

    name = "engine"

    def __init__(
        self,
        checkpoint: str,
        *,
        device: str,
        dtype: str,
        max_slots: int,
        max_seq_len: int,
        cuda_graphs: bool,
        prefill_token_budget: int,
        triton_kernels: bool = True,
        ignore_eos: bool = False,
        threads: int = 0,
    ):
        self.checkpoint = checkpoint
        self.model_args = dict(
            device=device,
            dtype=dtype,
            max_slots=max_slots,
            max_seq_len=max_seq_len,
            cuda_graphs=cuda_graphs,
            triton_kernels=triton_kernels,
            threads=threads,
        )
        self.prefill_token_budget = prefill_token_budget
        self.ignore_eos = ignore_eos

    async def open(self) -> None:
        # Late imports: torch is needed only by this target, not by the Triton clients.
        from ..engine.engine import Engine
        from ..engine.loader import load_model
        from ..text.tokenizer import load_fast

        self.model = load_model(self.checkpoint, **self.model_args)
        self.engine = Engine(
            self.model,
            load_fast(self.checkpoint),
            prefill_token_budget=self.prefill_token_budget,
            skip_special_tokens=True,
            max_waiting=1 << 30,
            request_timeout_s=float("inf"),
            stream_interval_s=0.0,
            cancel_poll_s=0.1,
        )  # nothing is ever cancelled here
        self._loop = asyncio.get_running_loop()
        self._inbox: list[tuple] = []
        self._inbox_lock = threading.Lock()
        self.engine.start()

    async def close(self) -> None:
        self.engine.shutdown()

    async def request(self, prompt: Prompt, output_len: int) -> Record:
        from ..engine.sampling import SamplingParams
        from ..engine.sequence import Sequence

        loop = asyncio.get_running_loop()
        done = loop.create_future()
        rec = Record(time.perf_counter())

        def on_output(seq, tokens, logprobs, finished, reason):  # engine thread: stamp now, deliver in batches
            self._post((rec, done, len(tokens), finished, reason, seq.error, time.perf_counter()))

        if self.ignore_eos:  # no end ids at all: exact length on the plain (batched) sampling path
            params = SamplingParams(max_new_tokens=output_len)
        else:  # what the Triton targets ask for: min_tokens = max_tokens
            params = SamplingParams(
                max_new_tokens=output_len, min_tokens=output_len, end_ids=self.model.cfg.eos_token_ids
            )
        self.engine.submit(Sequence(prompt=list(prompt.ids), params=params, on_output=on_output))
        await done
        rec.end = time.perf_counter()
        return rec

    def _post(self, item: tuple) -> None:
        """From the engine thread: one event-loop wake-up per batch of callbacks, not one per token per
        stream (each wake-up takes the GIL from the engine thread; on the H200 the bare engine loop made
        29k tokens/s at 128 streams where this harness, waking per token, measured 19.7k:
        docs/perf-gpu.md). Times are taken in the engine thread, so latencies hold."""
        with self._inbox_lock:
            self._inbox.append(item)
            first = len(self._inbox) == 1
        if first:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
        for item in items:
            self._deliver(*item)

    @staticmethod
    def _deliver(rec: Record, done, n: int, finished: bool, reason, seq_error, at: float) -> None:
        rec.mark(n, at)
        if finished and not done.done():
            if not reason.completed:
                rec.error = f"{reason.value}: {seq_error}" if seq_error else reason.value
            done.set_result(None)
