"""Run the OpenAI-compatible frontend in the foreground (scripts/serve.sh starts it for you).

    python -m llmserve.openai_api --spec specs/default.yaml [--port 9000] [--triton localhost:8001,...]

--triton: the Triton servers' gRPC host:port, comma-separated (default: localhost and the spec's
serving.grpc_port). --workers: processes serving the port (default: the spec's openai.workers, else
sized to the machine; workers.py). --reuse-port (one worker): bind with SO_REUSEPORT, so that several
frontends started by hand share the port and the kernel spreads connections over them (what
scripts/h200/workers.sh measures against --workers; their /metrics are not added up). API keys come
from the spec / environment / file (never the command line, which every user of the machine can read). Logs (one access line per request, errors with their cause) go
to stderr as text or JSON lines: --log-level / --log-format, default the spec's `logging:` section."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from ..logs import add_cli_options, configure_from_args
from ..spec import DEFAULT_SPEC, SpecError, load_spec
from ..spec.openai import AUTO
from .listen import listen_socket
from .workers import run as run_workers

# The app (FastAPI, gRPC, transformers) is imported in _main, not here: uvicorn spawns the workers
# (workers.py), and a spawned worker re-imports this module before it can answer the supervisor's
# health pings; a slow import on a loaded machine made the supervisor kill and restart workers that
# were only starting. Workers import the app in their factory, with the ping thread running.

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
    ap.add_argument(
        "--triton-http",
        help="the same servers' HTTP endpoints, comma-separated, in the same order (default: localhost and the "
        "spec's serving.http_port when --triton is not given); read with openai.token_transport: http",
    )
    ap.add_argument("--workers", type=int, help="worker processes (default: openai.workers, else sized to the machine)")
    ap.add_argument("--reuse-port", action="store_true", help="one worker: bind with SO_REUSEPORT")
    ap.add_argument(
        "--drained-file",
        help="endpoints listed in this file (one per line, read every health check) get no new requests "
        "(the cluster's rolling restart writes it)",
    )
    ap.add_argument(
        "--token-model",
        default=AUTO,
        help="the token-level model the frontend streams from itself: 'auto' (default: the spec's "
        "openai.token_level, tensorrt_llm or on the tensorrtllm layout tensorrt_llm_cpp), a model name, "
        "or 'none' (every request through the ensemble)",
    )
    add_cli_options(ap)
    args = ap.parse_args(argv)
    from .app import create_app
    from .auth import KeyCheck
    from .config import settings_from_spec
    from .service import Service

    try:
        spec = load_spec(args.spec)
        configure_from_args(args, spec)
        endpoints = args.triton.split(",") if args.triton else [f"localhost:{spec.serving.grpc_port}"]
        http_endpoints = (
            args.triton_http.split(",")
            if args.triton_http
            else None
            if args.triton
            else [f"localhost:{spec.serving.http_port}"]
        )
        settings = settings_from_spec(spec, endpoints, args.drained_file, args.token_model, http_endpoints)
        workers = args.workers or (1 if args.reuse_port else spec.openai.worker_count())
        if workers < 1 or (args.reuse_port and workers > 1):
            raise ValueError(f"--workers must be >= 1 (1 with --reuse-port), got {workers}")
        service = Service(settings) if workers == 1 else None  # each worker builds its own
    except (SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    keys = KeyCheck(settings.api_keys)
    host, port = args.host or spec.openai.bind, args.port or spec.openai.port
    log.info(
        "model %r on http://%s:%d/v1 -> Triton %s (API keys: %s, %d worker%s)",
        settings.model,
        host,
        port,
        ",".join(endpoints),
        "required" if keys.enabled else "off",
        workers,
        "" if workers == 1 else "s",
    )
    # log_config=None: uvicorn's own records go through our handler (same format, JSON included);
    # access_log=False: ours (access.py) has the request id, the tokens and the error's cause.
    options = dict(
        host=host,
        port=port,
        log_config=None,
        log_level=logging.getLogger().level,
        access_log=False,
        timeout_graceful_shutdown=spec.serving.exit_timeout_s,
        loop="asyncio",
    )
    if workers > 1:
        worker_args = dict(
            spec=args.spec,
            endpoints=endpoints,
            http_endpoints=http_endpoints,
            log_level=args.log_level,
            log_format=args.log_format,
            drained_file=args.drained_file,
            token_model=args.token_model,
        )
        try:
            return run_workers(worker_args, workers, **options)
        except OSError as e:  # the metrics folder (workers.py), or the port (listen.py)
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        sockets = [listen_socket(host, port, reuse_port=True)] if args.reuse_port else None
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn.Config(create_app(service, keys), **options))
    server.run(sockets=sockets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
