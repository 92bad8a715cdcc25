#!/usr/bin/env bash
# A virtualenv for the Triton Python backend stubs only; run from the repository root:
#   stub_venv.sh PYTHON NUMPY_WHEEL DEST [WHEEL...]
# (the WHEELs too go into the venv's own site-packages: what the models import that the machine lacks, e.g.
# xgrammar, which preprocessing and the engine import)
# Triton 2.51's stub (pybind11 numpy bindings) corrupts BYTES tensors under numpy 2: the first string
# request dies in deserialize_bytes_tensor ("unpack_from requires a buffer of at least 3907578092 bytes").
# The stub ignores PYTHONPATH; it takes its packages from the first python on PATH (llmserve/deploy/tritonserver.py puts
# the directory of the python that starts tritonserver first). So: a venv with numpy 1.26.4 in its own
# site-packages, then PYTHON's site directories appended by a .pth (torch, transformers... stay the
# machine's), and the packages built against numpy 2 that transformers would pick up (scikit-learn,
# scipy, pandas...) hidden (sys.modules[name] = None: importlib.util.find_spec says "not installed").
# The stub ignores PYTHONPATH, so the .pth also puts the current directory (the repository: llmserve) on
# sys.path. Start tritonserver with DEST/bin/python3; clients and the in-process engine keep PYTHON and numpy 2.
set -euo pipefail
PY=$1 WHL=$2 DEST=$3
shift 3
if [ ! -x "$DEST/bin/python3" ]; then
  "$PY" -m venv --without-pip "$DEST"
fi
SP=$("$DEST/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -d "$SP/numpy" ] || "$PY" -m zipfile -e "$WHL" "$SP"
for w in "$@"; do "$PY" -m zipfile -e "$w" "$SP"; done
BASE=$("$PY" -c 'import sys, json; print(json.dumps([p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]))')
cat > "$SP/zz_llmserve_stub.pth" <<PTH
import sys, site; sys.modules.update(dict.fromkeys(["sklearn", "scipy", "pandas", "pyarrow", "numba", "matplotlib"])); list(map(site.addsitedir, $BASE))
$PWD
PTH
"$DEST/bin/python3" -c 'import numpy, sys; print("stub venv:", sys.prefix, "numpy", numpy.__version__, numpy.__file__)'
