#!/usr/bin/env python3
"""Run a command and report the CPU time another process (and its children) used meanwhile:
the frontend's own cost per request in docs/PERFORMANCE.md.

    python tools/cpu_of.py --pid FRONTEND_PID --requests-from results/bench/results.json -- python tools/bench.py ...
"""

import argparse
import json
import subprocess
import sys
import time

from llmserve.bench.cpu import tree_cpu_seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--requests-from", help="a tools/bench.py results.json: divide by its request count")
    ap.add_argument("--warmups", type=int, default=0, help="warm-up requests per load point (bench.py --warmup)")
    ap.add_argument(
        "--idle-s",
        type=float,
        default=0.0,
        help="first measure the process idle for this long and subtract its idle rate (health checks, timers)",
    )
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    idle_rate = 0.0
    if args.idle_s:
        c0, t0 = tree_cpu_seconds(args.pid), time.monotonic()
        time.sleep(args.idle_s)
        idle_rate = (tree_cpu_seconds(args.pid) - c0) / (time.monotonic() - t0)
    c0, t0 = tree_cpu_seconds(args.pid), time.monotonic()
    rc = subprocess.call(cmd)
    used, wall = tree_cpu_seconds(args.pid) - c0, time.monotonic() - t0
    line = f"[cpu_of] pid {args.pid}: {used:.2f} CPU s in {wall:.1f} s wall ({100 * used / wall:.1f}% of a core)"
    if args.idle_s:
        used -= idle_rate * wall
        line += f"; idle {100 * idle_rate:.2f}% of a core, {used:.2f} CPU s above idle"
    if args.requests_from:
        runs = json.load(open(args.requests_from))["runs"]
        n = sum(r["summary"]["requests"] + args.warmups for r in runs)
        if n:
            line += f"; {n} requests: {1000 * used / n:.1f} CPU ms per request" + (" above idle" if args.idle_s else "")
    print(line, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
