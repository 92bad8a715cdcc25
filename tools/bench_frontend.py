#!/usr/bin/env python3
"""The OpenAI frontend alone, with a scripted ensemble behind it (no Triton, no model): what the
frontend itself costs per request, measured with the same client as everything else.

    python tools/bench_frontend.py --port 9100 &             # serves /v1 with instant scripted answers
    python tools/cpu_of.py --pid $! --requests-from results/frontend/results.json --warmups 8 -- \\
        python tools/bench.py --targets openai --openai-url localhost:9100 --concurrency 1,8 \\
        --input-len 64 --output-len 32 --requests 200 --warmup 8 --out results/frontend

Every request gets --output-len tokens, one per streamed response, as fast as the frontend takes
them (--delay-ms between responses to mimic an engine). Prompts are templated and tokenized as for
the real model (the spec's checkpoint)."""

from __future__ import annotations

import argparse
import sys

import uvicorn

from llmserve.logs import configure
from llmserve.openai_api.app import create_app
from llmserve.openai_api.auth import KeyCheck
from llmserve.openai_api.config import settings_from_spec
from llmserve.openai_api.scripted import ScriptedEnsemble
from llmserve.openai_api.service import Service
from llmserve.spec import DEFAULT_SPEC, load_spec
from llmserve.spec.openai import NONE


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(DEFAULT_SPEC))
    ap.add_argument("--port", type=int, default=9100)
    ap.add_argument("--output-len", type=int, default=512, help="tokens scripted per answer (cut to max_tokens)")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--http", default="h11", choices=["h11", "httptools"], help="uvicorn's HTTP parser")
    ap.add_argument(
        "--log-level", default="warning", help="info: an access line per request (first_byte_ms: the frontend's TTFT)"
    )
    args = ap.parse_args()
    configure(args.log_level)
    spec = load_spec(args.spec)
    # Through the scripted ensemble: it has no token-level route (generate_tokens).
    settings = settings_from_spec(spec, ["unused:1"], token_model_arg=NONE)
    ensemble = ScriptedEnsemble(
        pieces=[(" tok", 1)] * args.output_len, delay_s=args.delay_ms / 1000, keep_requests=False
    )
    app = create_app(Service(settings, client=ensemble), KeyCheck([]))
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_config=None,
        log_level=args.log_level,
        access_log=False,
        loop="asyncio",
        http=args.http,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
