"""What the tensorrt_llm (torch) model.py runs: builds the engine from the config parameters and
turns engine callbacks into token-level output tensors. Triton-free: the adapter passes `send`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .contract import CONTEXT_TOKENS
from .engine.engine import Engine, Sequence
from .engine.llama import LlamaModel, pick_device, pick_dtype
from .engine_request import EngineRequest, parse_engine_request
from .inputs import Reader
from .tokenizer import load_fast

# send(outputs or None, final, error message or None)
Send = Callable[["dict[str, np.ndarray] | None", bool, "str | None"], None]


@dataclass(frozen=True)
class EngineOptions:
    checkpoint_dir: str
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 0
    max_batch_size: int = 8
    max_input_len: int = 1024
    max_output_len: int = 512
    exclude_input_in_output: bool = True
    cuda_graphs: bool = True
    max_queue_size: int = 256
    request_timeout_s: float = 600.0
    stream_interval_ms: float = 0.0


def _bool(v: str) -> bool:
    return str(v).lower() in ("1", "true", "yes")


def options_from_params(params: dict[str, str], resolve) -> EngineOptions:
    return EngineOptions(
        checkpoint_dir=resolve(params["checkpoint_dir"]), device=params.get("device", "auto"),
        dtype=params.get("dtype", "auto"), threads=int(params.get("threads", 0)),
        max_batch_size=int(params["max_batch_size"]), max_input_len=int(params["max_input_len"]),
        max_output_len=int(params["max_output_len"]),
        exclude_input_in_output=_bool(params.get("exclude_input_in_output", "true")),
        cuda_graphs=_bool(params.get("cuda_graphs", "true")),
        max_queue_size=int(params.get("max_queue_size", 256)),
        request_timeout_s=float(params.get("request_timeout_s", 600)),
        stream_interval_ms=float(params.get("stream_interval_ms", 0)),
    )


class EngineService:
    def __init__(self, opts: EngineOptions):
        if opts.threads:
            torch.set_num_threads(opts.threads)
        device = pick_device(opts.device)
        self.opts = opts
        self.tokenizer = load_fast(opts.checkpoint_dir)
        self.model = LlamaModel(opts.checkpoint_dir, device, pick_dtype(opts.dtype, device),
                                opts.max_batch_size, opts.max_input_len + opts.max_output_len)
        if not opts.cuda_graphs:
            self.model.graphs = None  # engine.torch.cuda_graphs: false
        self.engine = Engine(self.model, self.tokenizer, max_waiting=opts.max_queue_size,
                             request_timeout_s=opts.request_timeout_s,
                             stream_interval_s=opts.stream_interval_ms / 1000)
        self.engine.start()

    def parse(self, read: Reader) -> EngineRequest:
        return parse_engine_request(
            read, vocab_size=self.model.cfg.vocab_size, default_end_ids=self.model.cfg.eos_token_ids,
            max_input_len=self.opts.max_input_len, max_output_len=self.opts.max_output_len,
            exclude_default=self.opts.exclude_input_in_output,
            decode_word=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=False),
        )

    def submit(self, req: EngineRequest, send: Send, is_cancelled: Callable[[], bool]) -> Sequence:
        out: list[int] = []  # every token this request has output so far
        cum = [0.0]

        def on_output(seq: Sequence, tokens: list[int], logprobs: list[float], finished: bool, reason):
            if reason == "cancelled":
                return send(None, True, "cancelled")
            if reason == "timeout":
                return send(None, True, f"timeout: request exceeded serving.request_timeout_s "
                                        f"({self.opts.request_timeout_s:g} s) and was cancelled")
            if reason and reason.startswith("error"):
                return send(None, True, reason)
            prefix = req.prompt if (not out and not req.exclude_input_in_output) else []
            if not tokens and not prefix and req.streaming and (out or not finished):
                return send(None, True, None) if finished else None  # just close the stream
            # (a stream that ends before any token still gets one, empty, text_output)
            context = out[-CONTEXT_TOKENS:]
            new = prefix + tokens
            out.extend(new)
            cum[0] += float(sum(logprobs))
            send({"output_ids": np.array([[new]], dtype=np.int32),  # [batch=1, beam=1, n]
                  "sequence_length": np.array([[len(new)]], dtype=np.int32),
                  "cum_log_probs": np.array([[cum[0]]], dtype=np.float32),
                  "output_log_probs": np.array([[[0.0] * len(prefix) + logprobs]], dtype=np.float32),
                  "output_context_ids": np.array([[context]], dtype=np.int32)},
                 finished, None)

        seq = Sequence(prompt=req.prompt, params=req.params, on_output=on_output, is_cancelled=is_cancelled,
                       streaming=req.streaming)
        self.engine.submit(seq)
        return seq

    def shutdown(self) -> None:
        self.engine.shutdown()
