#!/usr/bin/env python3
"""Benchmark the LLM ensemble (gRPC streaming / HTTP SSE), the token-level model, or the engine in-process.

Example: python tools/bench.py --url localhost:8001 --concurrency 1,8 --input-len 64 --output-len 32 --duration 20 --out DIR
(--targets ensemble,openai: the same load straight to Triton over gRPC and through the OpenAI frontend)
See llmserve/bench/ and docs/PERFORMANCE.md."""

import sys

from llmserve.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
