"""What each Python model needs from the spec, as a typed record with one path each way:
`from_spec` (the generator writes it into config.pbtxt parameters) and `from_params` (model.py
reads it back). The defaults live in the spec models only; a parameter missing from a config is an
error that names it, never a silent default. Light on purpose: the generator imports it without torch."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass

from ..contract import BACKEND


def parse_bool(value: str) -> bool:
    """Config parameters are strings; the generator writes booleans as "true"/"false"."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


class ModelParams:
    """Round trip through Triton's string parameters. Fields named *_dir are paths, relative to
    the model repository in the config and resolved by model.py (`resolve`)."""

    def to_params(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_params(cls, params: dict[str, str], resolve: Callable[[str], str] = str):
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in params:
                raise ValueError(
                    f"config.pbtxt of this model lacks parameter {f.name!r}; regenerate the "
                    f"repository with tools/generate.py"
                )
            raw, kind = params[f.name], hints[f.name]
            values[f.name] = (
                parse_bool(raw)
                if kind is bool
                else kind(raw)
                if kind in (int, float)
                else resolve(raw)
                if f.name.endswith("_dir")
                else raw
            )
        return cls(**values)


@dataclass(frozen=True)
class PreprocessOptions(ModelParams):
    tokenizer_dir: str
    apply_chat_template: bool
    add_special_tokens: bool
    max_input_len: int
    max_output_len: int
    max_beam_width: int
    trust_remote_code: bool
    exclude_input_in_output: bool  # the default: whether an echo of the prompt as sent (echo_ids) is needed

    @classmethod
    def from_spec(cls, spec, tokenizer_dir: str) -> PreprocessOptions:
        return cls(
            tokenizer_dir=tokenizer_dir,
            apply_chat_template=spec.tokenizer.apply_chat_template,
            add_special_tokens=spec.tokenizer.add_special_tokens,
            max_input_len=spec.engine.max_input_len,
            max_output_len=spec.engine.max_output_len,
            max_beam_width=1,
            trust_remote_code=spec.model.trust_remote_code,
            exclude_input_in_output=spec.serving.exclude_input_in_output,
        )


def cancellation_check_period_ms(spec) -> int:
    """How often a model asks Triton whether a request was cancelled (an IPC round trip): the C++
    backend's parameter of that name, one value for every model of the step (pipeline/cancellation.py)."""
    return spec.engine.tensorrtllm.cancellation_check_period_ms


@dataclass(frozen=True)
class PostprocessOptions(ModelParams):
    tokenizer_dir: str
    skip_special_tokens: bool
    cancellation_check_period_ms: int

    @classmethod
    def from_spec(cls, spec, tokenizer_dir: str) -> PostprocessOptions:
        return cls(
            tokenizer_dir=tokenizer_dir,
            skip_special_tokens=spec.tokenizer.skip_special_tokens,
            cancellation_check_period_ms=cancellation_check_period_ms(spec),
        )


@dataclass(frozen=True)
class EngineOptions(ModelParams):
    """The torch engine's parameters (engine: torch)."""

    checkpoint_dir: str
    device: str
    dtype: str
    threads: int
    cuda_graphs: bool
    triton_kernels: bool
    stream_interval_ms: float
    send_threads: int
    engine_process: str  # "auto", "true" or "false" (pipeline/engine_service.separate_process)
    prefill_token_budget: int
    max_batch_size: int
    max_input_len: int
    max_output_len: int
    exclude_input_in_output: bool
    skip_special_tokens: bool
    max_queue_size: int
    request_timeout_s: float
    cancellation_check_period_ms: int

    @classmethod
    def from_spec(cls, spec, checkpoint_dir: str) -> EngineOptions:
        e, t = spec.engine, spec.engine.torch
        return cls(
            checkpoint_dir=checkpoint_dir,
            device=t.device,
            dtype=t.dtype,
            threads=t.threads,
            cuda_graphs=t.cuda_graphs,
            triton_kernels=t.triton_kernels,
            stream_interval_ms=t.stream_interval_ms,
            send_threads=t.send_threads,
            engine_process=t.engine_process if isinstance(t.engine_process, str) else str(t.engine_process).lower(),
            prefill_token_budget=t.prefill_token_budget,
            max_batch_size=e.max_batch_size,
            max_input_len=e.max_input_len,
            max_output_len=e.max_output_len,
            exclude_input_in_output=spec.serving.exclude_input_in_output,
            skip_special_tokens=spec.tokenizer.skip_special_tokens,
            max_queue_size=e.queue.max_queue_size,
            request_timeout_s=spec.serving.request_timeout_s,
            cancellation_check_period_ms=e.tensorrtllm.cancellation_check_period_ms,
        )


@dataclass(frozen=True)
class RelayOptions(ModelParams):
    """The token relay's parameters (engine: tensorrtllm; pipeline/relay.py)."""

    target_model: str
    tokenizer_dir: str
    skip_special_tokens: bool
    max_input_len: int
    max_output_len: int
    exclude_input_in_output: bool
    cancellation_check_period_ms: int
    backend_transport: str  # engine.tensorrtllm.relay_transport: grpc or http (pipeline/backend_http.py)
    # the engine returns generation_logits (engine.tensorrtllm.gather_generation_logits): top log-probs
    # (num_top_log_probs) are computed from them, else refused (pipeline/top_logprobs.py)
    gather_generation_logits: bool = False
    stream_interval_ms: float = 0.0  # engine.tensorrtllm.relay_stream_interval_ms (0: every response)

    @classmethod
    def from_spec(cls, spec, tokenizer_dir: str) -> RelayOptions:
        return cls(
            target_model=BACKEND,
            tokenizer_dir=tokenizer_dir,
            skip_special_tokens=spec.tokenizer.skip_special_tokens,
            max_input_len=spec.engine.max_input_len,
            max_output_len=spec.engine.max_output_len,
            exclude_input_in_output=spec.serving.exclude_input_in_output,
            cancellation_check_period_ms=cancellation_check_period_ms(spec),
            backend_transport=spec.engine.tensorrtllm.relay_transport,
            gather_generation_logits=spec.engine.tensorrtllm.gather_generation_logits,
            stream_interval_ms=spec.engine.tensorrtllm.relay_stream_interval_ms,
        )
