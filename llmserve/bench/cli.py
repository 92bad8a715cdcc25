"""python tools/bench.py --url localhost:8001 --concurrency 1,8 --input-len 64 --output-len 32 --duration 20 --out DIR"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import sys
from pathlib import Path

from ..logs import add_cli_options, configure_from_args
from ..spec import load_spec
from . import clients as multi
from . import report
from .build import TARGETS, make_target
from .runner import fixed_concurrency, interleaved, poisson_rate, streams, warm_up
from .workload import make_prompts


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Load generator for the Triton LLM ensemble: TTFT, ITL, E2E, tokens/s.")
    p.add_argument("--url", default="localhost:8001", help="Triton gRPC host:port")
    p.add_argument("--http-url", default="localhost:8000", help="Triton HTTP host:port (target ensemble-http)")
    p.add_argument("--targets", default="ensemble", help=f"comma list of {', '.join(TARGETS)}")
    p.add_argument("--model", default="ensemble", help="model name for the ensemble targets")
    p.add_argument("--openai-url", default="localhost:9000", help="OpenAI frontend host:port (target openai)")
    p.add_argument("--openai-model", help="served model name for the openai target (default: the spec's)")
    p.add_argument("--token-model", default="tensorrt_llm", help="model name for the tensorrt_llm target")
    p.add_argument("--spec", default="specs/default.yaml", help="spec giving the checkpoint (tokenizer, engine target)")
    p.add_argument("--checkpoint", help="checkpoint dir (overrides the spec's): tokenizer and engine weights")
    p.add_argument("--concurrency", default="", help="fixed-concurrency sweep, e.g. 1,8,32")
    p.add_argument("--request-rate", default="", help="Poisson arrival rates in requests/s, e.g. 2,4")
    p.add_argument("--max-concurrency", type=int, default=0, help="cap on requests in flight for --request-rate")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--duration", type=float, default=None, help="seconds of measurement per load point")
    p.add_argument("--requests", type=int, default=None, help="requests per load point (with or without --duration)")
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up requests per load point (default: the concurrency, at least 2)",
    )
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/bench", help="directory for results.json, results.csv and plots")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a request counts as an error")
    p.add_argument(
        "--interleave",
        action="store_true",
        help="with several --targets and --concurrency: one run per load where each stream sends its "
        "requests to the targets in turn, so they share the load and the moment (e.g. ensemble,openai: "
        "the TTFT the OpenAI frontend adds, without the drift between separate runs)",
    )
    p.add_argument(
        "--clients",
        type=int,
        default=1,
        help="client processes per load point, each with its share of the streams (or of the rate), all "
        "measured over one shared window and pooled, so that one client process is not the limit of what "
        "it measures (not with --interleave or the engine target)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--label", default="", help="free text stored in results.json (machine, variant)")
    add_cli_options(p)
    g = p.add_argument_group("engine target (in-process, no Triton)")
    g.add_argument("--engine-device", default=None, help="cpu|cuda|auto (default: the spec's)")
    g.add_argument("--engine-dtype", default=None)
    g.add_argument("--engine-max-slots", type=int, default=None, help="default: the spec's max_batch_size")
    g.add_argument("--engine-max-seq-len", type=int, default=None, help="default: max_input_len + max_output_len")
    g.add_argument("--engine-threads", type=int, default=None)
    g.add_argument(
        "--engine-eager", action="store_true", help="no CUDA graphs (default: the spec's engine.torch.cuda_graphs)"
    )
    g.add_argument(
        "--ignore-eos",
        action="store_true",
        help="engine target: no end ids instead of min_tokens = max_tokens (the plain sampling path)",
    )
    return p


async def main_async(args) -> dict:
    spec = None
    checkpoint = args.checkpoint
    if not checkpoint or "engine" in args.targets or ("openai" in args.targets and not args.openai_model):
        try:
            spec = load_spec(Path(args.spec))
            checkpoint = checkpoint or str(spec.checkpoint_path())
        except Exception as e:  # noqa: BLE001
            if not checkpoint:
                sys.exit(f"need --checkpoint (could not read spec {args.spec}: {e})")
    loads = [("concurrency", c) for c in _ints(args.concurrency)] + [("rate", r) for r in _floats(args.request_rate)]
    if not loads:
        loads = [("concurrency", 1)]
    if not args.duration and not args.requests:
        args.duration = 20.0
    prompts = make_prompts(checkpoint, args.num_prompts, args.input_len, args.seed)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in targets:
        if t not in TARGETS:
            sys.exit(f"unknown target {t!r} (choose from {', '.join(TARGETS)})")
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "host": platform.node(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "label": args.label,
        "checkpoint": checkpoint,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "duration_s": args.duration,
        "requests": args.requests,
        "url": args.url,
        "targets": targets,
        "itl_definition": "(last token time - first token time) / (tokens - 1) per request",
    }
    runs = []

    if "openai" in targets and not args.openai_model:
        if spec is None:
            sys.exit(f"need --openai-model (could not read spec {args.spec})")
        args.openai_model = spec.openai.served_model_name or spec.name
    meta["clients"] = args.clients

    def make(name: str):
        return make_target(name, args, checkpoint, spec)

    if args.clients > 1:
        if args.interleave or "engine" in targets:
            sys.exit("--clients > 1 is for the served targets, without --interleave")
        why = multi.check([multi.Load(m, v) for m, v in loads], args.clients, args.max_concurrency, args.requests)
        if why:
            sys.exit(why)
        for name in targets:
            try:
                _multi_client(args, name, loads, prompts, runs)
            except RuntimeError as e:  # a client failed or died: its reason, not the parent's traceback
                sys.exit(f"error: {e}")
    elif args.interleave:
        if len(targets) < 2 or args.request_rate:
            sys.exit("--interleave needs two or more --targets and --concurrency (not --request-rate)")
        await _interleaved(args, targets, make, prompts, runs)
    else:
        for name in targets:
            await _one_process(args, make(name), name, loads, prompts, runs)
    doc = report.write(Path(args.out), meta, runs)
    if doc["ratios"]:
        print("ratios:", json.dumps(doc["ratios"]))
    print(f"wrote {args.out}/results.json, results.csv, throughput.png, latency.png")
    return doc


async def _one_process(args, target, name: str, loads: list[tuple], prompts, runs: list[dict]) -> None:
    """Every load of one target from this process, one after the other."""
    await target.open()
    try:
        for mode, load in loads:
            await warm_up(target, prompts, args.output_len, args.warmup, streams(mode, load, args.max_concurrency))
            desc = f"{name} {mode}={load}"
            if mode == "concurrency":
                res = await fixed_concurrency(
                    target,
                    prompts,
                    args.output_len,
                    int(load),
                    duration=args.duration,
                    requests=args.requests,
                    progress=not args.no_progress,
                    desc=desc,
                )
            else:
                res = await poisson_rate(
                    target,
                    prompts,
                    args.output_len,
                    load,
                    duration=args.duration,
                    requests=args.requests,
                    seed=args.seed,
                    max_concurrency=args.max_concurrency,
                    progress=not args.no_progress,
                    desc=desc,
                )
            summary = report.summarize(res)
            runs.append({"target": name, "mode": mode, "load": load, "summary": summary})
            _print(desc, summary)
    finally:
        await target.close()


def _print(desc: str, s: dict) -> None:
    print(
        f"{desc:28s} {s['output_tokens_per_s']:>10.1f} tok/s {s['requests_per_s']:>7.2f} req/s  "
        f"TTFT p50 {s['ttft_ms']['p50']} ms  ITL p50 {s['itl_ms']['p50']} ms  "
        f"E2E p50 {s['e2e_ms']['p50']} ms  errors {s['errors']}",
        flush=True,
    )
    if s["error_examples"]:
        print(f"  first errors: {s['error_examples'][:2]}", flush=True)


async def _interleaved(args, names: list[str], make, prompts, runs: list[dict]) -> None:
    """--interleave: every target in one closed loop per concurrency (runner.interleaved); each target's
    tok/s is its share of the load. Prints each later target's TTFT p50 minus the first target's."""
    targets = {}
    try:
        for name in names:
            t = make(name)
            await t.open()
            targets[name] = t
        for c in _ints(args.concurrency) or [1]:
            for t in targets.values():
                await warm_up(t, prompts, args.output_len, args.warmup, c)
            res = await interleaved(
                targets, prompts, args.output_len, c, duration=args.duration, requests=args.requests
            )
            for name in names:
                s = report.summarize(res[name])
                runs.append({"target": name, "mode": "concurrency", "load": c, "interleaved": names, "summary": s})
                _print(f"{name} concurrency={c} (interleaved)", s)
            base = runs[-len(names)]["summary"]["ttft_ms"]["p50"]
            for r in runs[-len(names) + 1 :]:
                p50 = r["summary"]["ttft_ms"]["p50"]
                if base is not None and p50 is not None:
                    print(f"  TTFT p50 added, {r['target']} - {names[0]}: {p50 - base:+.1f} ms", flush=True)
    finally:
        for t in targets.values():
            await t.close()


def _multi_client(args, name: str, loads: list[tuple], prompts, runs: list[dict]) -> None:
    """--clients N: every load of target `name` from N processes over one window (clients.py); the
    summary is over the pooled records, with each client's tok/s and TTFT p50 beside it."""
    points = [multi.Load(m, v) for m, v in loads]
    with multi.Clients(args, name, prompts, points) as group:
        for k, (mode, load) in enumerate(loads):
            pooled, each = group.run(k)
            summary = report.summarize(pooled)
            summary["clients"] = [
                {"output_tokens_per_s": e["output_tokens_per_s"], "ttft_p50_ms": e["ttft_ms"]["p50"]}
                for e in map(report.summarize, each)
            ]
            runs.append({"target": name, "mode": mode, "load": load, "clients": args.clients, "summary": summary})
            _print(f"{name} {mode}={load} ({args.clients} clients)", summary)
            p50s = sorted(c["ttft_p50_ms"] for c in summary["clients"] if c["ttft_p50_ms"] is not None)
            print(f"  each client's TTFT p50: {p50s} ms", flush=True)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    configure_from_args(args)  # the results above are this CLI's output (stdout); logs go to stderr
    try:
        doc = asyncio.run(main_async(args))
    except KeyboardInterrupt:
        return 130
    return 1 if any(r["summary"]["errors"] for r in doc["runs"]) else 0
