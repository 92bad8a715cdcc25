#!/usr/bin/env python3
"""Guided vs unguided decoding on the torch engine, in-process (no Triton): the engine, its sampler and
the grammar masks exactly as tensorrt_llm runs them, on the default model (SmolLM2-135M-Instruct).

    python tools/bench_guided.py [--concurrency 8] [--tokens 64] [--device cpu]

Runs the same batch of `concurrency` greedy requests three ways: all unguided, all guided (one JSON
schema), half and half; the modes interleaved for `rounds` rounds after one warm-up each. Unguided
requests have no end token and run to `tokens` tokens; guided ones end there or when their JSON is
complete (the end token is allowed only then). Prints per mode the median tokens/s, mean TTFT and,
for the mixed batch, tokens/s of its unguided and guided halves; then the grammar's own costs: the
first compile of the schema, a cached look-up, and the mask per step for 1 and `concurrency` rows."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from llmserve.engine import guided
from llmserve.engine.engine import Engine
from llmserve.engine.loader import load_model
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.spec import ROOT
from llmserve.text.tokenizer import load_fast, load_hf_tokenizer

# Long enough that `tokens` tokens fit inside it: a free-text description never closes by itself early.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string", "enum": ["France", "Germany", "Italy", "Spain"]},
        "population_millions": {"type": "number"},
        "description": {"type": "string"},
    },
    "required": ["name", "country", "population_millions", "description"],
}


def run_batch(engine: Engine, tok, cache: guided.GrammarCache, guided_rows: list[bool], tokens: int) -> dict:
    grammar = cache.compile("json_schema", json.dumps(SCHEMA))
    start = time.perf_counter()
    first: dict[int, float] = {}
    done: dict[int, tuple[float, int]] = {}
    for i, g in enumerate(guided_rows):
        prompt = tok.encode(f"Describe city number {i} as JSON.").ids
        params = SamplingParams(
            max_new_tokens=tokens, end_ids=(tok.token_to_id("<|im_end|>"),) if g else (), grammar=grammar if g else None
        )

        def on_output(seq, new, lp, finished, why, i=i):
            now = time.perf_counter()
            if new and i not in first:
                first[i] = now - start
            if finished:
                done[i] = (now - start, len(seq.generated))

        engine.submit(Sequence(prompt=prompt, params=params, on_output=on_output, streaming=True))
    while engine.running or engine.waiting:
        engine.step()
    wall = time.perf_counter() - start

    def rate(rows):
        return sum(done[i][1] for i in rows) / max(done[i][0] for i in rows) if rows else float("nan")

    g = [i for i, x in enumerate(guided_rows) if x]
    u = [i for i, x in enumerate(guided_rows) if not x]
    return {
        "tok/s": sum(n for _, n in done.values()) / wall,
        "ttft_ms": 1e3 * sum(first.values()) / len(first),
        "unguided tok/s": rate(u),
        "guided tok/s": rate(g),
        "tokens": sum(n for _, n in done.values()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", default=str(ROOT / "build/checkpoints/smollm2-135m-instruct"))
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # each line as it is measured: a run cut short keeps them
    n = args.concurrency
    model = load_model(
        args.checkpoint,
        device=args.device,
        dtype="float32" if args.device == "cpu" else "bfloat16",
        max_slots=n,
        max_seq_len=64 + args.tokens,
        cuda_graphs=args.device != "cpu",
        threads=args.threads,
        max_input_len=64,
    )
    tok = load_fast(args.checkpoint)
    engine = Engine(
        model,
        tok,
        prefill_token_budget=8192,
        skip_special_tokens=True,
        max_waiting=0,
        request_timeout_s=3600,
        stream_interval_s=0,
        cancel_poll_s=1,
    )
    info = guided.tokenizer_info_from_hf(
        load_hf_tokenizer(args.checkpoint), model.cfg.vocab_size, model.cfg.eos_token_ids
    )
    cache = guided.GrammarCache(info)
    t0 = time.perf_counter()
    cache.compile("json_schema", json.dumps(SCHEMA))
    compile_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    cache.compile("json_schema", json.dumps(SCHEMA))
    cached_us = (time.perf_counter() - t0) * 1e6

    modes = {
        "unguided": [False] * n,
        "guided (json_schema)": [True] * n,
        "mixed (half guided)": [i % 2 == 0 for i in range(n)],
    }
    print(
        f"{args.device}, torch threads {torch.get_num_threads()}, {n} concurrent greedy requests x {args.tokens} "
        f"tokens, median of {args.rounds} rounds (modes interleaved, so load from elsewhere hits each alike)"
    )
    for rows in modes.values():  # warm-up
        run_batch(engine, tok, cache, rows, args.tokens)
    results: dict[str, list[dict]] = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, rows in modes.items():
            results[name].append(run_batch(engine, tok, cache, rows, args.tokens))
    for name, rs in results.items():

        def med(key, rs=rs):
            return statistics.median(r[key] for r in rs)

        extra = (
            f"   unguided rows {med('unguided tok/s'):6.1f} tok/s, guided rows {med('guided tok/s'):6.1f} tok/s"
            if "mixed" in name
            else ""
        )
        print(
            f"  {name:22s} {med('tok/s'):7.1f} tok/s   TTFT {med('ttft_ms'):6.1f} ms   ({rs[0]['tokens']} tokens){extra}"
        )

    print(f"grammar: first compile {compile_ms:.1f} ms, cached look-up {cached_us:.1f} us")
    grammar = cache.compile("json_schema", json.dumps(SCHEMA))
    for rows in sorted({1, n}):
        matchers = [guided.matcher(grammar, (2,)) for _ in range(rows)]
        logits = torch.randn(rows, model.cfg.vocab_size, device=model.device)
        times = []
        for _ in range(50):
            s = time.perf_counter()
            guided.masker(matchers)(logits)  # a new one each step: fill and apply, as a step does
            if logits.is_cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - s)
        times.sort()
        print(f"  mask for {rows} guided row(s): p50 {times[25] * 1e3:.2f} ms per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
