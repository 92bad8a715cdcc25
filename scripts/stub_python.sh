#!/usr/bin/env bash
# A virtualenv for Triton's Python backend stub of ANOTHER Python version (e.g. 3.12, the H200's,
# on a 3.11 machine), for tests/e2e/test_stub_python.py:
#   scripts/stub_python.sh PYTHON [DEST]      (default DEST: build/stubvenv-<version>)
# then run the test with LLMSERVE_TEST_STUB_PYTHON=DEST/bin/python (or leave DEST at its default).
# It holds numpy 1.26.4 (Triton 2.51's stub breaks under numpy 2, docs/perf-gpu.md), tokenizers and
# tritonclient[grpc] (the relay's: it reaches the backend over gRPC; requirements.txt's pins), and a
# .pth that puts this repository on sys.path: enough for models that use llmserve.pipeline.triton_glue
# and for the tensorrtllm layout's relay, not for the torch engine (torch is not installed here).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$1
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
DEST=${2:-build/stubvenv-$VER}
[ -x "$DEST/bin/python" ] || "$PY" -m venv "$DEST"
"$DEST/bin/python" -m pip install -q --disable-pip-version-check numpy==1.26.4 "$(grep '^tokenizers==' requirements.txt)" \
  "tritonclient[grpc]==$(sed -n 's/^tritonclient\[all\]==//p' requirements.txt)" "$(grep '^protobuf==' requirements.txt)"
SP=$("$DEST/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD" > "$SP/llmserve_repo.pth"
"$DEST/bin/python" -c 'import numpy, sys; print("stub venv", sys.version.split()[0], "numpy", numpy.__version__)'
