"""The deployment spec (one typed YAML file): `deployment` is the whole spec, `trtllm` and `ha` its
TensorRT-LLM and high-availability sections, `base` what they share."""

from .base import DEFAULT_SPEC, ROOT, SpecError, Strict, resolve
from .deployment import Spec, load_spec

__all__ = ["DEFAULT_SPEC", "ROOT", "Spec", "SpecError", "Strict", "load_spec", "resolve"]
