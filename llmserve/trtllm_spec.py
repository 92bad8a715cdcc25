"""Spec section for the TensorRT-LLM production engine (engine.kind = tensorrtllm).

Keys use TensorRT-LLM's own names so they pass through to trtllm-build and the tensorrtllm
backend unchanged."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TensorRTLLMEngine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
