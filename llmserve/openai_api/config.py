"""Frontend settings from a spec (one place; the CLI only overrides ports and endpoints)."""

from __future__ import annotations

from ..contract import BACKEND, ENGINE
from ..spec import Spec, resolve
from ..spec.openai import AUTO, NONE
from .auth import load_keys
from .prompts import Limits
from .service import Settings


def settings_from_spec(
    spec: Spec,
    endpoints: list[str],
    drained_file: str | None = None,
    token_model_arg: str = AUTO,
    http_endpoints: list[str] | None = None,
) -> Settings:
    """token_model_arg: AUTO (the spec's openai.token_level), NONE, or the model's name. http_endpoints:
    the servers' HTTP host:port (the token-level route reads them with openai.token_transport: http, the
    default; a frontend of the ensemble only, token_model_arg NONE, needs none)."""
    o, e = spec.openai, spec.engine
    streams_from = (
        token_model(spec) if token_model_arg == AUTO else None if token_model_arg == NONE else token_model_arg
    )
    over_http = streams_from is not None and o.token_transport == "http"  # a frontend of the ensemble only: gRPC
    if over_http and not http_endpoints:
        raise ValueError(
            "openai.token_transport: http needs each Triton server's HTTP endpoint (--triton-http host:port,..., "
            "in the order of --triton), or set openai.token_transport: grpc"
        )
    default_max = o.default_max_tokens or e.max_output_len
    if default_max > e.max_output_len:
        raise ValueError(
            f"openai.default_max_tokens ({default_max}) exceeds engine.max_output_len ({e.max_output_len})"
        )
    keys = load_keys(o.api_keys, o.api_keys_env, resolve(o.api_keys_file) if o.api_keys_file else None)
    return Settings(
        model=o.served_model_name or spec.name,
        tokenizer_dir=str(spec.checkpoint_path()),
        endpoints=endpoints,
        limits=Limits(max_input_len=e.max_input_len, max_output_len=e.max_output_len, default_max_tokens=default_max),
        add_special_tokens=spec.tokenizer.add_special_tokens,
        trust_remote_code=spec.model.trust_remote_code,
        api_keys=keys,
        idle_timeout_s=o.idle_timeout(spec.serving.request_timeout_s),
        max_attempts=o.max_attempts,
        health_interval_s=o.health_interval_s,
        drained_file=drained_file,
        http_endpoints=list(http_endpoints) if over_http else None,
        token_model=streams_from,
        skip_special_tokens=spec.tokenizer.skip_special_tokens,
    )


def token_model(spec: Spec) -> str | None:
    """The model the frontend streams tokens from (openai.token_level), or None: through the ensemble."""
    if not (spec.openai.token_level and spec.serving.streaming):
        return None
    return BACKEND if spec.engine.kind == "tensorrtllm" else ENGINE
