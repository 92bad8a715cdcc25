"""Spec section for several Triton servers behind HAProxy (`ha:` in a spec)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class HighAvailability(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
