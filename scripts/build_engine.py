#!/usr/bin/env python3
"""Build what a spec's engine needs: the checkpoint, and for engine.kind tensorrtllm the TensorRT-LLM
engine (llmserve/cli/build_engine.py; also `llmserve-build-engine`).

    python scripts/build_engine.py --spec specs/default.yaml
    python scripts/build_engine.py --spec specs/trtllm-1gpu.yaml --dry-run
"""

import sys

from llmserve.cli.build_engine import main

if __name__ == "__main__":
    sys.exit(main())
