#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, check the committed repository, run pytest.
#   ./scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --haproxy
.venv/bin/python scripts/build_engine.py --spec specs/default.yaml
.venv/bin/python tools/generate.py --spec specs/default.yaml --check
exec .venv/bin/python -m pytest -v "$@"
