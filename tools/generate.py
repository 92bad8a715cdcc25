#!/usr/bin/env python3
"""Render every config.pbtxt (and copy each model.py) of a model repository from one spec
(llmserve/cli/generate.py; also `llmserve-generate`).

    python tools/generate.py --spec specs/default.yaml --out model_repository
    python tools/generate.py --spec specs/default.yaml --check   # CI: fail on drift
    python tools/generate.py --spec specs/tiny-trtllm.yaml --out /tmp/r --standin   # CI stand-in for TensorRT-LLM
"""

import sys

from llmserve.cli.generate import main

if __name__ == "__main__":
    sys.exit(main())
