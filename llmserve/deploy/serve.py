"""Serve a spec in the foreground: build the checkpoint if missing, generate the repository, start
tritonserver and the OpenAI-compatible frontend next to it (openai.port, default 9000; off with
`openai.enabled: false` or --no-openai), say when they are ready. SIGINT/SIGTERM go to both;
tritonserver drains in-flight requests (up to serving.exit_timeout_s) before it exits; idle, that
takes a few seconds. A tritonserver that goes away by itself while serving (its engine stub's
watchdog took it down, a crash) is started again, with a back-off. Every process group started
here is registered with a reaper (deploy/reaper.py): when this process is SIGKILLed, tritonserver,
its Python stubs and the frontend go too.

    python -m llmserve.deploy.serve --spec specs/default.yaml [--http-port 8000 --grpc-port 8001 --metrics-port 8002 --openai-port 9000]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from ..checkpoint import build_checkpoint
from ..repository.writer import check_repository, spec_label, write_repository
from .frontend import FrontendProcess
from ..spec import DEFAULT_SPEC, ROOT, SpecError, load_spec
from .reaper import Reaper
from .tritonserver import TritonProcess

QUICK_EXIT_S = 60.0  # an exit sooner than this after a start counts towards the back-off
MAX_BACKOFF_S = 30


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
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        build_checkpoint(spec)
        repo = prepare_repository(Path(args.spec), spec, args.repository)
    except (SpecError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    s = spec.serving
    http, grpc, metrics = args.http_port or s.http_port, args.grpc_port or s.grpc_port, args.metrics_port or s.metrics_port
    reaper = Reaper().start()  # nothing we start outlives us, even if we are SIGKILLed
    server = TritonProcess(repo, http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=s.exit_timeout_s,
                           reaper=reaper)
    frontend = None
    stopping = threading.Event()

    def forward(signum, _):
        stopping.set()
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signum)  # tritonserver drains in-flight requests, then exits
        if frontend is not None:
            frontend.proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    quick_exits = 0
    try:
        while True:
            print(f"[serve] starting tritonserver on HTTP :{http}, gRPC :{grpc}, metrics :{metrics} with {repo}",
                  flush=True)
            server.start()
            started = time.monotonic()
            if frontend is None and spec.openai.enabled and not args.no_openai:
                oport = args.openai_port or spec.openai.port
                frontend = FrontendProcess(Path(args.spec).resolve(), port=oport, host=spec.openai.bind,
                                           triton=[f"127.0.0.1:{grpc}"]).start()
                reaper.register(frontend.proc.pid)
                print(f"[serve] starting the OpenAI frontend on :{oport} (/v1)", flush=True)
            ready = threading.Event()
            threading.Thread(target=_announce, args=(spec, server, frontend, http, ready), daemon=True).start()
            rc = server.proc.wait()
            server.stop()  # ends Python stubs that outlived tritonserver
            if stopping.is_set():
                return rc
            if not ready.is_set():
                print(f"[serve] tritonserver exited ({rc}) before it was ready; see the log above", file=sys.stderr)
                return rc or 1
            # It was serving and went away without being asked (its engine stub's watchdog took it
            # down, or it crashed): start it again, backing off if it keeps dying.
            quick_exits = quick_exits + 1 if time.monotonic() - started < QUICK_EXIT_S else 0
            delay = min(MAX_BACKOFF_S, 2 ** (quick_exits - 1)) if quick_exits else 0
            print(f"[serve] tritonserver exited ({rc}) while serving; starting it again"
                  + (f" in {delay} s" if delay else ""), file=sys.stderr, flush=True)
            if stopping.wait(delay):
                return rc
    finally:
        if frontend is not None:
            frontend.stop()
            reaper.unregister(frontend.proc.pid)
        reaper.close()


def _announce(spec, server: TritonProcess, frontend, http: int, ready: threading.Event) -> None:
    try:
        server.wait_ready(timeout_s=600)
    except (RuntimeError, TimeoutError) as e:
        print(f"[serve] {e}", file=sys.stderr, flush=True)
        return
    ready.set()
    openai = ""
    if frontend is not None:
        try:
            frontend.wait_ready(timeout_s=120)
            openai = (f"  curl -s localhost:{frontend.port}/v1/chat/completions -H 'Content-Type: application/json' "
                      f"-d '{{\"model\": \"{spec.openai.served_model_name or spec.name}\", \"messages\": "
                      f"[{{\"role\": \"user\", \"content\": \"What is the capital of France?\"}}]}}'\n")
        except (RuntimeError, TimeoutError) as e:
            print(f"[serve] {e}", file=sys.stderr, flush=True)
    print(f"\n[serve] ready. Try:\n{openai}  curl -s localhost:{http}/v2/models/ensemble/generate "
          f"-d '{{\"text_input\": \"What is the capital of France?\", \"max_tokens\": 32}}'\n"
          f"  curl -sN localhost:{http}/v2/models/ensemble/generate_stream "
          f"-d '{{\"text_input\": \"Write a haiku about the sea.\", \"max_tokens\": 48, \"stream\": true}}'\n",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
