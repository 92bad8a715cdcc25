"""The deployment spec: one typed YAML file from which every config.pbtxt, the engine build and the
server flags are derived. Every default lives here and nowhere else; unknown keys are errors."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from .base import SpecError, Strict, resolve
from .ha import HighAvailability
from .logs import Logging
from .openai import OpenAIFrontend
from .trtllm import TensorRTLLMEngine


class ModelSource(Strict):
    """Where the weights come from. Nothing is ever downloaded from a model hub."""

    kind: Literal["gguf_package", "hf_checkpoint", "random_llama"]
    package: str | None = None
    """gguf_package: the Python package that ships the GGUF file (found with importlib, not imported)."""
    file: str | None = None
    """gguf_package: the GGUF file name inside the package."""
    path: str | None = None
    """hf_checkpoint: a local Hugging Face checkpoint directory (config.json, safetensors, tokenizer)."""
    tokenizer_from: str | None = None
    """random_llama: a checkpoint directory whose tokenizer the random model borrows."""
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    seed: int = 0

    @model_validator(mode="after")
    def _needs(self):
        need = {"gguf_package": ("package", "file"), "hf_checkpoint": ("path",), "random_llama": ("tokenizer_from",)}
        for key in need[self.kind]:
            if getattr(self, key) is None:
                raise ValueError(f"model.source.{key} is required when model.source.kind is '{self.kind}'")
        return self


class Model(Strict):
    source: ModelSource
    checkpoint_dir: str
    """Local safetensors checkpoint (with tokenizer) that build_engine.py writes and the engine loads.
    Relative paths are relative to the project root."""
    trust_remote_code: bool = False
    """Never run code shipped with a checkpoint unless the spec says so explicitly."""


class Tokenizer(Strict):
    apply_chat_template: bool = True
    """Wrap text_input in the tokenizer's chat template as one user turn; a request can override it."""
    add_special_tokens: bool = False
    """Add BOS/EOS when encoding a raw (non-chat) prompt."""
    skip_special_tokens: bool = True


class DynamicBatching(Strict):
    max_queue_delay_us: int = Field(default=0, ge=0)
    """How long a batch waits for more requests. 0: a request waits only for the batch running before it (the
    batches form in the queue under load). For preprocessing, 0 instead of 1000 gave the ensemble a 0.8-4.7 ms
    lower TTFT p50 at three of four loads on an H100 host and the same at the fourth (docs/perf-gpu.md, call 29)."""
    preferred_batch_sizes: list[int] = Field(default_factory=list)
    max_queue_size: int = Field(default=256, ge=0)
    """Requests waiting beyond this are rejected at once (server busy) instead of queueing forever."""
    preserve_ordering: bool = False


class PythonModel(Strict):
    instances: int = Field(default=1, ge=1)
    dynamic_batching: DynamicBatching = DynamicBatching()


class PostprocessingBatching(DynamicBatching):
    max_queue_size: int = Field(default=0, ge=0)
    """Must stay 0 (unbounded): see Postprocessing."""


class Postprocessing(PythonModel):
    # Chunks of one stream may run on different instances: Triton must return them in order.
    dynamic_batching: PostprocessingBatching = PostprocessingBatching(max_queue_delay_us=0, preserve_ordering=True)

    @model_validator(mode="after")
    def _unbounded_queue(self):
        """Triton 2.51 leaves an ensemble request waiting forever when a step that follows the decoupled
        engine is refused for a full queue (fixed upstream after 2.51: triton-inference-server/core#466).
        A fast engine streaming one response per token filled postprocessing's queue of 256 and hung every
        stream in it (docs/cancellation.md); the engine's queue (engine.queue.max_queue_size) bounds the load."""
        if self.dynamic_batching.max_queue_size:
            raise ValueError(
                "dynamic_batching.max_queue_size must be 0 (unbounded) for postprocessing: on Triton 2.51 a "
                "chunk refused for a full postprocessing queue leaves its stream waiting forever "
                "(triton-inference-server/core#466); bound the load with engine.queue.max_queue_size"
            )
        return self


class TorchEngine(Strict):
    """The portable engine: a decoupled Python-backend model with in-flight batching."""

    device: Literal["cpu", "cuda", "auto"] = "auto"
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto"
    """auto: float32 on CPU (bf16 matmuls are slow on many CPUs), bfloat16 on CUDA."""
    threads: int = Field(default=0, ge=0)
    """torch CPU threads per instance; 0: every core for a model on the CPU, 1 when it runs on a GPU (the
    host side only feeds it; more threads spin: engine/loader.py HOST_THREADS)."""
    cuda_graphs: bool = True
    """Capture decode steps in CUDA graphs on GPUs (ignored on CPU)."""
    triton_kernels: bool = True
    """Fused Triton kernels in the captured decode step (residual add + RMSNorm, rotary + KV write,
    SiLU x up: engine/kernels.py) where Triton runs (a CUDA device with triton installed; the torch ops
    otherwise, and on CPUs). On an H100 the engine gave 1.25-1.29x the tok/s with them (docs/perf-gpu.md,
    2026-12-05); false keeps the torch ops (the outputs agree to bf16 rounding, not bit for bit)."""
    prefill_token_budget: int = Field(default=2048, ge=1)
    """Most prompt tokens prefilled in one engine step (beyond the first admitted request), so a
    burst of long prompts cannot stall the running streams for long."""
    stream_interval_ms: float = Field(default=0, ge=0)
    """A stream gets at most one response per interval; tokens generated in between travel together
    (exactly detokenized all the same). 0 sends every token. On a fast GPU, a response per token per
    stream makes the Python postprocessing the ensemble's bottleneck (docs/perf-gpu.md)."""
    send_threads: int = Field(default=2, ge=1)
    """Threads that send the engine's responses to Triton (each send is an IPC round trip of about
    0.1 ms, so one thread caps near 7k responses/s); while a stream's response waits for them, its
    next tokens are held back and sent with the following one. The tensorrtllm layout's CI stand-in
    sends with as many, one response per token as the C++ backend does (4 measured best on the H200)."""
    engine_process: bool | Literal["auto"] = "auto"
    """Run the engine loop in a process of its own (pipeline/engine_process.py) instead of on a thread of
    the model's stub, so it shares no GIL with the threads that build and send the responses, at the
    cost of one pipe message per engine step. auto: a process of its own when the model runs on a GPU
    (on the H200 the ensemble went 1.20-1.27x faster with TTFT 0.48-0.78x, docs/perf-gpu.md), the
    stub's thread on a CPU (where the model's compute, not the GIL, sets the pace)."""


class Engine(Strict):
    kind: Literal["torch", "tensorrtllm"] = "torch"
    max_batch_size: int = Field(default=8, ge=1)
    """Most sequences generating at once in one engine instance; also Triton's max_batch_size."""
    max_input_len: int = Field(default=1024, ge=1)
    """Longest prompt in tokens (after the chat template)."""
    max_output_len: int = Field(default=512, ge=1)
    """Largest max_tokens a request may ask for."""
    instances: int = Field(default=1, ge=1)
    queue: DynamicBatching = DynamicBatching(max_queue_delay_us=0, max_queue_size=256)
    torch: TorchEngine = TorchEngine()
    tensorrtllm: TensorRTLLMEngine = TensorRTLLMEngine()

    @property
    def max_seq_len(self) -> int:
        return self.max_input_len + self.max_output_len


class Serving(Strict):
    streaming: bool = True
    """Deploy tensorrt_llm decoupled so generate_stream and gRPC streaming stream tokens. Unary
    clients use the *_unary twins (see README, "Unary and streaming")."""
    exclude_input_in_output: bool = True
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    exit_timeout_s: int = Field(default=60, ge=1)
    """How long tritonserver waits for in-flight requests on SIGTERM."""
    request_timeout_s: float = Field(default=600, gt=0)
    """A request still generating after this long is cancelled and answered with an error."""
    start_timeout_s: float = Field(default=300, gt=0)
    """A supervised tritonserver or OpenAI frontend that has neither become ready nor exited this long
    after a start is killed and started again, counted as a start-up failure (deploy/supervisor.py).
    The slowest measured took at most 214 s, at load average 30-46 on 2 cores (docs/PERFORMANCE.md,
    "Start-up aborts")."""
    unary_twins: bool = True
    """Also generate ensemble_unary / tensorrt_llm_unary so unary infer works beside streaming."""


class Spec(Strict):
    name: str
    model: Model
    tokenizer: Tokenizer = Tokenizer()
    engine: Engine = Engine()
    preprocessing: PythonModel = PythonModel()
    postprocessing: Postprocessing = Postprocessing()
    serving: Serving = Serving()
    ha: HighAvailability = HighAvailability()
    openai: OpenAIFrontend = OpenAIFrontend()
    logging: Logging = Logging()

    @model_validator(mode="after")
    def _consistent(self):
        if self.serving.streaming and not self.postprocessing.dynamic_batching.preserve_ordering:
            # Chunks of one stream may run on different postprocessing instances; Triton must still
            # return them in order.
            raise ValueError("postprocessing.dynamic_batching.preserve_ordering must be true when streaming")
        for name in ("preprocessing", "postprocessing"):
            sizes = getattr(self, name).dynamic_batching.preferred_batch_sizes
            if any(s > self.engine.max_batch_size or s < 1 for s in sizes):
                raise ValueError(f"{name}.dynamic_batching.preferred_batch_sizes must lie in 1..engine.max_batch_size")
        return self

    def checkpoint_path(self) -> Path:
        return resolve(self.model.checkpoint_dir)


def load_spec(path: str | Path) -> Spec:
    """Load and validate a spec; errors name the offending key (e.g. `engine.max_batch_size`)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read spec {path}: {e}") from e
    try:
        return Spec.model_validate(data or {})
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(root)"
            lines.append(f"  {key}: {err['msg']}")
        raise SpecError(f"invalid spec {path}:\n" + "\n".join(lines)) from None
