"""A request as the adapters hand it to the request readers: read(name) -> numpy array or None."""

from __future__ import annotations

import numpy as np

from llmserve.errors import RequestError


def tensor(value) -> np.ndarray:
    """A per-request value the way clients send it: shape [1, 1] (one request, one value); strings
    as bytes objects (Triton's BYTES), lists as they are."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, str):
        return np.array([[value.encode()]], dtype=object)
    if isinstance(value, (list, tuple)):
        return np.array(value)
    return np.array([[value]])


def reader(**fields):
    """A Reader over these fields; None-valued fields are absent."""
    arrays = {k: tensor(v) for k, v in fields.items() if v is not None}
    return arrays.get


def field_error(excinfo) -> str:
    """The field a RequestError names (and check that its message names it too)."""
    err = excinfo.value
    assert isinstance(err, RequestError)
    assert str(err).startswith(f"invalid {err.field}: "), str(err)
    return err.field
