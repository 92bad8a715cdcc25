"""Request parameters: what a request carries besides tensors. Triton's HTTP generate endpoint turns
every JSON key that is not an input of the model into one, so a misspelt knob, an older upstream
name (`random_seed`) or an upstream feature this server does not have (`num_return_sequences`) would
otherwise reach preprocessing and be ignored: the request would get an answer, not the one asked for.
The ensemble takes no request parameters of its own, so every one is refused, naming it."""

from __future__ import annotations

import json

from ..errors import RequestError
from .upstream_names import refusal

# Triton's own keys (docs/protocol/extension_parameters.md). The C API does not pass them to models
# today; they are skipped here so that a server that starts to cannot make every request fail. "id" is
# the generate endpoint's request id: Triton 2.51 hands it to the model as a parameter as well.
TRITON_RESERVED = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output", "id"}
)


def client_parameters(raw: str | dict | None) -> dict:
    """The request's parameters (`InferenceRequest.parameters()`, a JSON object) without Triton's own."""
    params = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
    return {k: v for k, v in params.items() if k not in TRITON_RESERVED and not k.startswith("triton_")}


def refuse_parameters(raw: str | dict | None) -> None:
    """Raises RequestError naming the first parameter (sorted, so the message is stable): an older
    or unsupported upstream name gets its reason, anything else is unknown."""
    params = client_parameters(raw)
    if not params:
        return
    name = sorted(params)[0]
    why = (
        refusal(name)
        or "unknown request field (on the HTTP generate endpoint every key that is not an input of "
        "the ensemble arrives as a request parameter)"
    )
    others = f" (also: {', '.join(sorted(params)[1:])})" if len(params) > 1 else ""
    raise RequestError(name, why + others)
