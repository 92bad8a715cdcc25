"""Spec section for the TensorRT-LLM production engine (engine.kind = tensorrtllm).

Keys use TensorRT-LLM's own names (trtllm-build flags, tensorrtllm backend parameters) so they pass
through unchanged. The engine-wide limits (max_batch_size, max_input_len, max_output_len, instances)
live in `engine:` and are shared with the torch engine; this section holds only what is specific to
TensorRT-LLM. Every default lives here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Strict, resolve


class TutorialInstanceGroup(Strict):
    """An `instance_group` written the way Triton tutorials write it, e.g.
    `{count: 2, kind: KIND_GPU, gpus: [0]}`. The tensorrtllm backend ignores KIND_GPU and `gpus`
    (placement comes from `gpu_device_ids`), so the generator translates this into
    `instance_group {kind: KIND_CPU count: N}` + `gpu_device_ids` and prints what it did."""

    count: int = Field(default=1, ge=1)
    """Triton meaning: instances per listed GPU (KIND_GPU), or instances in total (KIND_CPU)."""
    kind: Literal["KIND_GPU", "KIND_CPU", "KIND_AUTO"] = "KIND_GPU"
    gpus: list[int] | None = None
    """KIND_GPU: the GPUs to place `count` instances on each (all visible GPUs when absent). With
    tp_size*pp_size > 1, consecutive groups of tp_size*pp_size GPUs form one instance's set."""


class TensorRTLLMEngine(Strict):
    # --- build (trtllm-build / checkpoint conversion) ------------------------------------------
    dtype: Literal["float16", "bfloat16", "float32"] = "float16"
    """Weights and activations; also the GPT attention / GEMM plugin dtype. float16 runs on every
    GPU TensorRT-LLM supports; bfloat16 needs Ampere or newer."""
    tp_size: int = Field(default=1, ge=1)
    """Tensor parallelism: GPUs per instance (times pp_size). Must divide num_attention_heads."""
    pp_size: int = Field(default=1, ge=1)
    """Pipeline parallelism."""
    max_num_tokens: int | None = Field(default=None, ge=1)
    """Most tokens (after padding removal) in one forward pass, summed over the batch. Default:
    max(max_input_len, min(8192, max_batch_size * max_input_len)). Without chunked context it must
    be >= max_input_len, or the longest admitted prompt could never be scheduled."""
    max_beam_width: int = Field(default=1, ge=1)
    tokens_per_block: int = Field(default=32, ge=1)
    """Paged KV cache block size in tokens (trtllm-build --tokens_per_block)."""
    workers: int | None = Field(default=None, ge=1)
    """trtllm-build --workers (ranks built in parallel); default min(tp*pp, visible_gpus)."""
    gather_generation_logits: bool = False
    """trtllm-build --gather_generation_logits: the engine can return each generated token's logits
    (`return_generation_logits`), which the relay turns into top log-probs (`num_top_log_probs`, the
    OpenAI API's `top_logprobs`); without it those are refused with a 400. Costs GPU memory (a logits
    buffer of max_batch_size x vocab per step, plus the engine's gathered-logits output) and, per request
    that asks, one vocab-sized logits row per token copied to the host (docs/tensorrtllm.md)."""

    # --- runtime (tensorrtllm backend parameters) -----------------------------------------------
    kv_cache_free_gpu_mem_fraction: float = Field(default=0.9, gt=0, le=1)
    """Fraction of the GPU memory free after the engine loads that one instance may give to its
    KV cache. Applied per instance, at the moment it loads: see gpu_memory_gib."""
    max_tokens_in_paged_kv_cache: int | None = Field(default=None, ge=1)
    """Explicit per-instance KV cache cap in tokens. When several instances share a GPU and this
    is absent, the generator derives it from gpu_memory_gib, the engine size and the instance
    count."""
    enable_kv_cache_reuse: bool = True
    """Reuse KV blocks of shared prompt prefixes (chat templates, system prompts). Needs an engine
    built with use_paged_context_fmha, which build_engine.py then enables."""
    enable_chunked_context: bool = True
    """Split long prompts over several forward passes so they interleave with decoding. Also needs
    use_paged_context_fmha."""
    batch_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] = "guaranteed_no_evict"
    """guaranteed_no_evict admits a request only if its whole KV cache is guaranteed;
    max_utilization packs more requests and may pause some when the cache runs out."""
    normalize_log_probs: bool = True
    cancellation_check_period_ms: int = Field(default=100, ge=1)
    relay_stream_interval_ms: float = Field(default=0, ge=0)
    """The relay in front of the C++ backend (`tensorrt_llm` of this layout, pipeline/relay.py) sends a
    stream at most one chunk per interval: the backend's per-token responses in between travel together,
    so postprocessing and the ensemble hop run once per chunk instead of once per token (exactly
    detokenized all the same). 0 passes every response on as it comes (docs/perf-gpu.md)."""
    relay_transport: Literal["grpc", "http"] = "http"
    """How the relay reads the C++ backend's streams from its own server: `grpc` (ModelStreamInfer) or
    `http` (generate_stream: less than half the relay's CPU per token, docs/perf-gpu.md; what it cannot
    carry, generation logits and inputs it would reshape, still goes over gRPC: pipeline/backend_http.py)."""
    relay_instances: int = Field(default=1, ge=1)
    """Relay processes (Triton instances of `tensorrt_llm`, each its own Python interpreter and GIL);
    a `stop` reaches the backend from any of them (the backend request's id is the request's key)."""
    stats_check_period_ms: int = Field(default=100, ge=1)
    iter_stats_max_iterations: int = Field(default=1000, ge=0)
    request_stats_max_iterations: int = Field(default=0, ge=0)
    decoding_mode: Literal["top_k", "top_p", "top_k_top_p", "beam_search"] | None = None
    """None lets TensorRT-LLM pick (top_k_top_p for beam width 1)."""
    recv_poll_period_ms: int = Field(default=1, ge=0)
    """Orchestrator mode: how long the backend's receive thread sleeps between polls for the executor
    workers' responses. The backend's own default, 0, is a busy loop that keeps one CPU core per
    instance at 100 %; 1 ms costs at most that much latency per response."""
    cuda_graph_mode: bool = False
    """Run generation steps as CUDA graphs: a large win for small models whose steps are CPU-launch
    bound (SmolLM2-135M); memory for one graph per cached batch shape."""
    cuda_graph_cache_size: int = Field(default=0, ge=0)
    """CUDA graphs kept (in number of graphs); with cuda_graph_mode."""
    kv_cache_host_memory_bytes: int | None = Field(default=None, ge=0)
    """Host memory to offload KV cache blocks to (with enable_kv_cache_reuse: reused prefixes survive
    GPU cache pressure). Unset: 0, no offloading."""
    max_attention_window_size: list[int] | None = None
    """Sliding attention window in tokens: one value, or one per layer. Unset: max_seq_len (full
    attention). Smaller windows cap the KV cache per sequence."""

    # --- hardware and placement ---------------------------------------------------------------
    visible_gpus: int = Field(default=1, ge=1)
    """GPUs visible to tritonserver (numbered 0..visible_gpus-1, after CUDA_VISIBLE_DEVICES). The
    generator cannot see the serving host, so the spec states it."""
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    """Memory of one GPU in GiB (e.g. 80 for an H100 80GB). Required when instances share a GPU
    and max_tokens_in_paged_kv_cache is not given."""
    reserved_gib_per_instance: float = Field(default=2.0, ge=0)
    """Per instance and GPU, memory that is neither weights nor KV cache: CUDA context,
    activations sized by max_num_tokens, executor and decoder buffers."""
    weights_gib_per_gpu: float | None = Field(default=None, gt=0)
    """Engine size on one GPU for the KV derivation before an engine exists. Measured from the
    built rank*.engine files when they exist; estimated from the model shape when neither is
    available."""
    gpu_device_ids: list[list[int]] | None = None
    """Per-instance GPU sets, e.g. [[0, 1], [2, 3]] (backend parameter "0,1;2,3"). Its length is the
    instance count. Default: derived from engine.instances, tp_size*pp_size and visible_gpus."""
    instance_group: TutorialInstanceGroup | None = None
    """Tutorial-style placement, translated (see TutorialInstanceGroup). Give this or
    gpu_device_ids, not both."""

    # --- paths ------------------------------------------------------------------------------------
    engine_dir: str | None = None
    """Where trtllm-build writes the engine (config.json, rank*.engine) and build_engine.py the
    build manifest. Default build/trtllm/<spec name>/engine. Relative to the project root."""
    trtllm_checkpoint_dir: str | None = None
    """The converted TensorRT-LLM checkpoint. Default build/trtllm/<spec name>/checkpoint."""

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @model_validator(mode="after")
    def _consistent(self):
        if self.gpu_device_ids is not None and self.instance_group is not None:
            raise ValueError("give engine.tensorrtllm.gpu_device_ids or engine.tensorrtllm.instance_group, not both")
        if self.gpu_device_ids is not None and not self.gpu_device_ids:
            raise ValueError("engine.tensorrtllm.gpu_device_ids must list one GPU set per instance")
        if self.max_attention_window_size is not None and (
            not self.max_attention_window_size or min(self.max_attention_window_size) < 1
        ):
            raise ValueError("engine.tensorrtllm.max_attention_window_size: one or more window sizes >= 1")
        if self.world_size > self.visible_gpus:
            raise ValueError(
                f"tp_size*pp_size = {self.world_size} GPUs per instance, but visible_gpus is {self.visible_gpus}"
            )
        if (self.enable_kv_cache_reuse or self.enable_chunked_context) and self.dtype == "float32":
            raise ValueError(
                "enable_kv_cache_reuse and enable_chunked_context need use_paged_context_fmha, "
                "which TensorRT-LLM supports only for float16/bfloat16 engines; set dtype or turn "
                "both off"
            )
        return self


# --- derived paths (functions, not fields: they need the spec's name) ----------------------------


def engine_dir(spec):
    """The engine directory of a spec (engine.tensorrtllm.engine_dir or the default)."""
    t = spec.engine.tensorrtllm
    return resolve(t.engine_dir or f"build/trtllm/{spec.name}/engine")


def xgrammar_tokenizer_info_path(spec):
    """The tokenizer-info file for guided decoding, written into the engine directory at build
    (text/xgrammar_info.py), as upstream's build scripts put it next to the engine."""
    return engine_dir(spec) / "xgrammar_tokenizer_info.json"


def trtllm_checkpoint_dir(spec):
    t = spec.engine.tensorrtllm
    return resolve(t.trtllm_checkpoint_dir or f"build/trtllm/{spec.name}/checkpoint")


def max_num_tokens(spec) -> int:
    """engine.tensorrtllm.max_num_tokens or its default (see the field)."""
    e = spec.engine
    if e.tensorrtllm.max_num_tokens is not None:
        return e.tensorrtllm.max_num_tokens
    return max(e.max_input_len, min(8192, e.max_batch_size * e.max_input_len))
