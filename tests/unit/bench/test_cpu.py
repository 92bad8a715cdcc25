"""tree_cpu_seconds (llmserve/bench/cpu.py): a process's CPU time includes its living children's."""

from __future__ import annotations

import os
import subprocess
import sys

from llmserve.bench.cpu import tree_cpu_seconds

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('done', flush=True)\ninput()"


def test_counts_living_children():
    before = tree_cpu_seconds(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"  # 0.3 s of CPU spent, still alive
        own = tree_cpu_seconds(child.pid)
        assert own >= 0.3
        assert tree_cpu_seconds(os.getpid()) - before >= own * 0.9
    finally:
        child.communicate("\n", timeout=10)
