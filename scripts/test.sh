#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, check the committed repository, run pytest.
#   ./scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --haproxy
.venv/bin/python scripts/build_engine.py --spec specs/default.yaml
.venv/bin/python tools/generate.py --spec specs/default.yaml --check
# The H200's stubs run Python 3.12 (ours 3.11): where a 3.12 interpreter exists, give the stub test
# its environment (numpy only, seconds) so CI runs it instead of skipping it.
# (pyenv's shim answers `command -v` without a 3.12 selected: try each candidate for real.)
for py312 in $(command -v python3.12) /root/.pyenv/versions/3.12*/bin/python3.12; do
  if "$py312" -c pass 2>/dev/null; then ./scripts/stub_python.sh "$py312"; break; fi
done
exec .venv/bin/python -m pytest -v "$@"
