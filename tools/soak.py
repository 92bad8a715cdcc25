#!/usr/bin/env python3
"""Soak: mixed load against a real tritonserver, RSS and open-fd growth of it and its Python stubs,
errors; a JSON report. The logic lives in llmserve/bench/soak.py (also the `llmserve-soak` command).

    python tools/soak.py                                   # 30 min, tiny spec, own server
    python tools/soak.py --spec specs/default.yaml --duration 600
    python tools/soak.py --http localhost:8000 --grpc localhost:8001 --pid <tritonserver pid>
"""

import sys

from llmserve.bench.soak import main

if __name__ == "__main__":
    sys.exit(main())
