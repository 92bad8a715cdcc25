"""Spec section for the logs of the processes llmserve starts itself (`logging:` in a spec): the OpenAI
frontend and the CLIs (llmserve/logs.py). Lines from inside tritonserver follow tritonserver's own
flags (`--log-verbose`, `--log-format`), not this section."""

from __future__ import annotations

from typing import Literal

from .base import Strict


class Logging(Strict):
    format: Literal["text", "json"] = "text"
    """text for people; json writes one object per line (time, level, logger, message, request_id,
    exc_info, and the access line's fields) for log shippers. `--log-format` overrides it."""
    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written. info includes the frontend's access line (one per request); `--log-level`
    overrides it."""
