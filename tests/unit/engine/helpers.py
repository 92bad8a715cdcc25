"""Engines for unit tests, configured with the spec's defaults (the one place defaults live)."""

from llmserve.engine.engine import Engine
from llmserve.spec.deployment import Engine as EngineSection
from llmserve.spec.deployment import Serving, Tokenizer, TorchEngine


def make_engine(model, tokenizer, engine_cls: type = Engine, **overrides) -> Engine:
    torch_defaults = TorchEngine()
    kw = dict(
        prefill_token_budget=torch_defaults.prefill_token_budget,
        skip_special_tokens=Tokenizer().skip_special_tokens,
        max_waiting=EngineSection().queue.max_queue_size,
        request_timeout_s=Serving().request_timeout_s,
        stream_interval_s=torch_defaults.stream_interval_ms / 1000,
        cancel_poll_s=EngineSection().tensorrtllm.cancellation_check_period_ms / 1000,
    )
    kw.update(overrides)
    return engine_cls(model, tokenizer, **kw)
