"""Build the model the engine runs: weights, static KV cache and, on a GPU when asked, the
CUDA graphs of every decode shape. The caller decides about graphs (engine.torch.cuda_graphs),
so `false` really skips the capture and its memory pool."""

from __future__ import annotations

import os

import torch

from .cuda_graphs import DecodeGraphs, GraphOptions
from .llama import LlamaModel, pick_device, pick_dtype
from .null_model import NULL_STEP_ENV, NullModel
from .prefill_graphs import PrefillGraphs

# The host side of a GPU step is small tensors that gain nothing from a thread pool, while the pool's
# OpenMP threads spin after every parallel op: on the H200 (16 cores) the engine stub's idle OpenMP
# threads burned 2.3 of its 2.9 cores and starved postprocessing and tritonserver, and one thread made
# the ensemble 1.6x faster (docs/perf-gpu.md, "OpenMP threads").
HOST_THREADS = 1


def load_model(
    checkpoint: str,
    *,
    device: str,
    dtype: str,
    max_slots: int,
    max_seq_len: int,
    cuda_graphs: bool,
    triton_kernels: bool = True,
    threads: int = 0,
    max_input_len: int | None = None,
) -> LlamaModel:
    """device/dtype: the spec's names ("auto", "cpu", "cuda", "bfloat16", ...). threads: torch's CPU
    threads; 0 lets the engine decide: torch's default (every core) for a model on the CPU, HOST_THREADS
    when the CPU only feeds a GPU (or the null model)."""
    if os.environ.get(NULL_STEP_ENV):  # benchmarks of the serving layers alone (engine/null_model.py)
        torch.set_num_threads(threads or HOST_THREADS)
        return NullModel(checkpoint, float(os.environ[NULL_STEP_ENV]), max_slots, max_seq_len)
    dev = pick_device(device)
    if threads or dev.type != "cpu":
        torch.set_num_threads(threads or HOST_THREADS)
    model = LlamaModel(checkpoint, dev, pick_dtype(dtype, dev), max_slots, max_seq_len)
    if cuda_graphs and dev.type == "cuda":
        options = GraphOptions(kernels=triton_kernels, compile=os.environ.get("LLMSERVE_COMPILE") == "1")
        model.graphs = DecodeGraphs(model, options=options)
        # Prompts up to max_input_len (default: half the sequence, as 128 in / 128 out) in graphs too.
        model.prefill_graphs = PrefillGraphs(model, max_input_len or max_seq_len // 2)
    return model
