"""Failover client CLI for the ensemble (llmserve/client/failover.py): several endpoints or the load
balancer, safe retries, and streams resumed on another server when one breaks.

    python tools/client.py "What is the capital of France?" --max-tokens 32 --url localhost:8000
    python tools/client.py "Write a haiku." --stream --url host1:8000 --url host2:8000 --spec specs/default.yaml
    python tools/client.py "Write a haiku." --stream --grpc --url localhost:8001

--spec gives the checkpoint's tokenizer, needed to resume a chat-template stream (the client
renders the template itself on resume); --raw sends the prompt without the chat template.
Retries, resumes and errors go to stderr. (Also the `llmserve-client` command.)"""

from __future__ import annotations

import argparse
import json
import sys

from ..client.failover import FailoverClient, GenerationError, Stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prompt")
    ap.add_argument(
        "--url", action="append", help="host:port, repeatable (default localhost:8000, or :8001 with --grpc)"
    )
    ap.add_argument("--grpc", action="store_true", help="tritonclient.grpc streaming instead of HTTP generate")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--raw", action="store_true", help="apply_chat_template=false")
    ap.add_argument("--spec", help="spec whose checkpoint tokenizer renders the chat template on resume")
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="extra ensemble input, e.g. --param temperature=0.7 --param 'stop_words=[\"\\n\"]'",
    )
    ap.add_argument("--attempts", type=int, default=6)
    args = ap.parse_args(argv)
    tokenizer_dir = None
    if args.spec:
        from ..spec import load_spec

        tokenizer_dir = str(load_spec(args.spec).checkpoint_path())
    urls = args.url or (["localhost:8001"] if args.grpc else ["localhost:8000"])
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
    if args.raw:
        params["apply_chat_template"] = False
    client = FailoverClient(
        urls, protocol="grpc" if args.grpc else "http", tokenizer_dir=tokenizer_dir, max_attempts=args.attempts
    )
    try:
        if args.stream:
            gen = client.stream(args.prompt, args.max_tokens, **params)
            for piece in gen:
                print(piece, end="", flush=True)
            print()
            stats = gen.stats
        else:
            stats = Stats()
            print(client.generate(args.prompt, args.max_tokens, stats=stats, **params))
    except GenerationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if stats.retries or stats.resumes:
        print(
            f"[client] {stats.attempts} attempts, {stats.retries} retries, {stats.resumes} resumes via "
            f"{stats.endpoints}; errors: {stats.errors}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
