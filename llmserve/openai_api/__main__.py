"""Run the OpenAI-compatible frontend in the foreground (scripts/serve.sh starts it for you).

    python -m llmserve.openai_api --spec specs/default.yaml [--port 9000] [--triton localhost:8001,...]

--triton: the Triton servers' gRPC host:port, comma-separated (default: localhost and the spec's
serving.grpc_port). API keys come from the spec / environment / file (never the command line, which
every user of the machine can read). Logs (one access line per request, errors with their cause) go
to stderr as text or JSON lines: --log-level / --log-format, default the spec's `logging:` section."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from ..logs import add_cli_options, configure_from_args
from ..spec import DEFAULT_SPEC, SpecError, load_spec
from .app import create_app
from .auth import KeyCheck
from .config import settings_from_spec
from .service import Service

log = logging.getLogger("llmserve.openai_api")


def main(argv=None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C (uvicorn re-raises the one it handled): a clean stop, no traceback
        return 130


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m llmserve.openai_api", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--spec", default=str(DEFAULT_SPEC))
    ap.add_argument("--host", help="default: openai.bind of the spec")
    ap.add_argument("--port", type=int, help="default: openai.port of the spec")
    ap.add_argument("--triton", help="Triton gRPC endpoints, comma-separated")
    add_cli_options(ap)
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        configure_from_args(args, spec)
        endpoints = args.triton.split(",") if args.triton else [f"localhost:{spec.serving.grpc_port}"]
        settings = settings_from_spec(spec, endpoints)
        service = Service(settings)
    except (SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    keys = KeyCheck(settings.api_keys)
    host, port = args.host or spec.openai.bind, args.port or spec.openai.port
    log.info(
        "model %r on http://%s:%d/v1 -> Triton %s (API keys: %s)",
        settings.model,
        host,
        port,
        ",".join(endpoints),
        "required" if keys.enabled else "off",
    )
    # log_config=None: uvicorn's own records go through our handler (same format, JSON included);
    # access_log=False: ours (access.py) has the request id, the tokens and the error's cause.
    config = uvicorn.Config(
        create_app(service, keys),
        host=host,
        port=port,
        log_config=None,
        log_level=logging.getLogger().level,
        access_log=False,
        timeout_graceful_shutdown=spec.serving.exit_timeout_s,
        loop="asyncio",
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
