#!/usr/bin/env python3
"""Stop-word matching cost per generated token (text/stop_words.StopMatcher), for stop-word lists
from 1 short word up to the edge's limits (request/word_lists.py), on a long output.

    python tools/bench_stop_words.py [--tokens 3000]

Prints, per list: build time (once per request) and the median and 99th-percentile time per token of push()
plus safe_tokens() (both run every step for a streaming request). The automaton makes the
per-token cost independent of the list: compare the rows."""

from __future__ import annotations

import argparse
import random
import sys
import time

from llmserve.request.word_lists import MAX_TOTAL_CHARS, MAX_WORD_CHARS, MAX_WORDS
from llmserve.spec import ROOT
from llmserve.text.stop_words import StopMatcher
from llmserve.text.tokenizer import load_fast


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--tokenizer", default=str(ROOT / "build/checkpoints/smollm2-135m-instruct"))
    args = ap.parse_args(argv)
    tok = load_fast(args.tokenizer)
    rng = random.Random(0)
    text = " ".join(rng.choice(["the", "sea", "abab", "lighthouse", "keeper", "a", "b", "\n"]) for _ in range(6000))
    ids = tok.encode(text).ids[: args.tokens]
    per_word = MAX_TOTAL_CHARS // MAX_WORDS
    cases = {
        "1 word of 5 chars": ["STOP!"],
        f"{MAX_WORDS} words of {per_word} chars (the total limit)": [
            "ab" * (per_word // 2 - 1) + f"{i:02d}" for i in range(MAX_WORDS)
        ],
        f"16 words of {MAX_WORD_CHARS} chars (the per-word limit)": [
            "ab" * (MAX_WORD_CHARS // 2 - 1) + f"{i:02d}" for i in range(16)
        ],
    }
    print(f"{len(ids)} tokens of output; per token: push() + safe_tokens()")
    for name, words in cases.items():
        t0 = time.perf_counter()
        m = StopMatcher(tok, words)
        build = time.perf_counter() - t0
        times = []
        for t in ids:
            s = time.perf_counter()
            if m.push(t) is not None:
                break
            m.safe_tokens()
            times.append(time.perf_counter() - s)
        times.sort()
        p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
        print(f"  {name:45s} build {build * 1e3:7.2f} ms   per token p50 {p50 * 1e6:6.1f} us   p99 {p99 * 1e6:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
