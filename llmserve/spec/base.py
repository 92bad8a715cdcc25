"""What every spec section shares: the strict pydantic base, the project root and path resolution.
Kept apart from the sections so that they can import it without importing each other."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

ROOT = Path(__file__).resolve().parents[2]
"""The project root: relative paths in a spec are relative to it."""

DEFAULT_SPEC = ROOT / "specs" / "default.yaml"


class Strict(BaseModel):
    """Unknown keys are errors and a loaded spec cannot be changed by accident."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SpecError(ValueError):
    pass


def resolve(path: str | Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else ROOT / p
