"""CPU seconds of a process tree, for the benchmarks that report CPU per token or per request."""

from __future__ import annotations

import psutil


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its living descendants (a child that exited meanwhile is
    not counted: measure a window's difference around processes that stay up)."""
    p = psutil.Process(pid)
    total = 0.0
    for q in [p, *p.children(recursive=True)]:
        try:
            t = q.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total
