#!/usr/bin/env python3
"""Chaos soak: mixed load through HAProxy while replicas are killed, their engine stubs killed and
every replica restarted in turn. The logic lives in llmserve/bench/chaos.py (also `llmserve-chaos`).

    python tools/chaos.py --minutes 30                    # its own 3-replica tiny cluster on free ports
    python tools/chaos.py --minutes 2 --report build/chaos.json
"""

import sys

from llmserve.bench.chaos import main

if __name__ == "__main__":
    sys.exit(main())
