"""Serve a spec in the foreground: build the checkpoint if missing, generate the repository, start
tritonserver and the OpenAI-compatible frontend next to it (openai.port, default 9000; off with
`openai.enabled: false` or --no-openai), say when they are ready. SIGINT/SIGTERM go to the frontend
and, once it has finished its requests and exited, to tritonserver, which drains in-flight requests
(up to serving.exit_timeout_s) before it exits; idle, that takes a few seconds. A tritonserver that goes away by itself while serving (its engine stub's
watchdog took it down, a crash), or a frontend that does, is started again, with a back-off
(deploy/supervisor.py); a tritonserver that exits before it was ever ready is not (its log says why),
unless it died of the Python backend's start-up abort under load (TRANSIENT_START_ABORTS).
Every process group started here is registered with a reaper (deploy/reaper.py): when this process
is SIGKILLed, tritonserver, its Python stubs and the frontend go too.

    python -m llmserve.deploy.serve --spec specs/default.yaml [--http-port 8000 --grpc-port 8001 --metrics-port 8002 --openai-port 9000]
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from ..checkpoint import build_checkpoint
from ..logs import add_cli_options, configure_from_args
from ..repository.writer import check_repository, spec_label, write_repository
from ..spec import DEFAULT_SPEC, ROOT, SpecError, load_spec
from .frontend import FrontendProcess
from .reaper import Reaper
from .supervisor import START_TIMEOUT, Supervisor
from .tritonserver import TRANSIENT_START_ABORTS, TritonProcess

logger = logging.getLogger(__name__)


def prepare_repository(spec_path: Path, spec, repository: str | None) -> Path:
    """The committed model_repository/ for the default spec (refusing drift), else a generated one."""
    label = spec_label(spec_path)
    if repository is None and spec_path.resolve() == DEFAULT_SPEC:
        repo = ROOT / "model_repository"
        problems = check_repository(spec, label, repo)
        if problems:
            raise SpecError(f"{repo} differs from {label} ({problems[0]}); run tools/generate.py --out {repo}")
        return repo
    repo = Path(repository) if repository else ROOT / "build" / "repos" / spec.name
    write_repository(spec, label, repo)
    return repo


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(DEFAULT_SPEC))
    ap.add_argument("--repository", help="model repository to generate and serve (default: see above)")
    ap.add_argument("--http-port", type=int)
    ap.add_argument("--grpc-port", type=int)
    ap.add_argument("--metrics-port", type=int)
    ap.add_argument("--openai-port", type=int, help="the OpenAI-compatible frontend (default: openai.port)")
    ap.add_argument("--no-openai", action="store_true", help="tritonserver only")
    add_cli_options(ap)
    args = ap.parse_args(argv)
    configure_from_args(args)
    try:
        spec = load_spec(args.spec)
        configure_from_args(args, spec)  # the spec's logging: section, unless the flags say otherwise
        build_checkpoint(spec)
        repo = prepare_repository(Path(args.spec), spec, args.repository)
    except (SpecError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    s = spec.serving
    http, grpc, metrics = (
        args.http_port or s.http_port,
        args.grpc_port or s.grpc_port,
        args.metrics_port or s.metrics_port,
    )
    reaper = Reaper().start()  # nothing we start outlives us, even if we are SIGKILLed
    server = TritonProcess(
        repo, http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=s.exit_timeout_s, reaper=reaper
    )
    frontend = None
    if spec.openai.enabled and not args.no_openai:
        frontend = FrontendProcess(
            Path(args.spec).resolve(),
            port=args.openai_port or spec.openai.port,
            host=spec.openai.bind,
            triton=[f"127.0.0.1:{grpc}"],
            triton_http=[f"127.0.0.1:{http}"],
            reaper=reaper,
        )
    stopping = threading.Event()
    ready = threading.Event()  # this start of tritonserver has been ready: an exit now is a crash, not a bad set-up

    def announce() -> None:
        ready.clear()
        threading.Thread(target=_announce, args=(spec, server, frontend, http, ready), daemon=True).start()

    supervisor = Supervisor()
    triton = supervisor.add(
        "tritonserver",
        server,
        # A bad set-up is given up on; the start-up abort of a starved machine and a hung start are retried.
        restart_if=lambda: (
            ready.is_set() or server.exit_cause() in TRANSIENT_START_ABORTS or triton.last_cause == START_TIMEOUT
        )
        and not stopping.is_set(),
        on_start=announce,
        start_timeout_s=s.start_timeout_s,
    )
    if frontend is not None:
        supervisor.add("the OpenAI frontend", frontend)

    received = []

    def forward(signum, _):
        # The loop below stops the children, in order: a signal handler must not wait for them.
        received.append(signum)
        stopping.set()
        supervisor.halt()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    try:
        logger.info("starting tritonserver on HTTP :%d, gRPC :%d, metrics :%d with %s", http, grpc, metrics, repo)
        server.start()
        announce()
        if frontend is not None:
            logger.info("starting the OpenAI frontend on :%d (/v1)", frontend.port)
            frontend.start()
        supervisor.run(stopping, check=lambda: not triton.gave_up)
        if not stopping.is_set():  # gave up: it exited before it was ready
            logger.error("tritonserver exited (%s) before it was ready; see the log above", server.returncode)
            return server.returncode or 1
        # The frontend first, waited for: it finishes its requests and sends the stops of its hung-up
        # streams while tritonserver still serves (a request that reaches a stopping tritonserver's
        # `tensorrt_llm` can keep the model loaded until the exit timeout, docs/cancellation.md section 4).
        if frontend is not None:
            frontend.stop(received[0])
        if server.alive():
            server.proc.send_signal(received[0])  # tritonserver drains in-flight requests, then exits
        server.proc.wait()
        return server.stop()  # ends Python stubs that outlived tritonserver
    finally:
        if frontend is not None:
            frontend.stop()
        server.stop()
        reaper.close()


def _announce(spec, server: TritonProcess, frontend, http: int, ready: threading.Event) -> None:
    try:
        server.wait_ready(timeout_s=600)
    except (RuntimeError, TimeoutError) as e:
        logger.error("%s", e)
        return
    ready.set()
    openai = ""
    if frontend is not None:
        try:
            frontend.wait_ready(timeout_s=120)
            openai = (
                f"  curl -s localhost:{frontend.port}/v1/chat/completions -H 'Content-Type: application/json' "
                f'-d \'{{"model": "{spec.openai.served_model_name or spec.name}", "messages": '
                f'[{{"role": "user", "content": "What is the capital of France?"}}]}}\'\n'
            )
        except (RuntimeError, TimeoutError) as e:
            logger.error("%s", e)
    print(
        f"\n[serve] ready. Try:\n{openai}  curl -s localhost:{http}/v2/models/ensemble/generate "
        f'-d \'{{"text_input": "What is the capital of France?", "max_tokens": 32}}\'\n'
        f"  curl -sN localhost:{http}/v2/models/ensemble/generate_stream "
        f'-d \'{{"text_input": "Write a haiku about the sea.", "max_tokens": 48, "stream": true}}\'\n',
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
